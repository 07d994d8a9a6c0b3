# SPDX-License-Identifier: Apache-2.0
"""Restarts as keep-alive clients count them. Clients on persistent
connections POST 256-byte bodies to a CGI that reads them and GET a static
page, some pausing 0-3 s between requests (KeepAliveTimeout 5), others
back to back, while the server restarts gracefully (the bucket count
changing at every other restart) and then stops gracefully and starts
again on a held socket. They reuse a connection as curl does
(KeepAliveLoad): one the server closed while idle is reopened before
anything is sent. A request sent and not answered is lost: a POST must not
be retried. None may be: a stopping child keeps an idle keep-alive
connection until its next request, which it answers with
"Connection: close", or until KeepAliveTimeout, and answers the next
request on a connection whose response promised keep-alive."""
import signal

from bucketbench.activation import listen_socket
from event_server import KeepAliveLoad
from httpd_fixture import CHILD_MODELS, LOOPBACK, free_ports, log_near, \
    wait_until
from test_socket_activation import holders  # noqa: F401 (a fixture)

GRACEFUL_RESTARTS = 6
# Requests served between two restarts.
BETWEEN = 300
POST_BODY = b"p" * 256
LENGTH_CGI = """#!/bin/sh
n=$(head -c "${CONTENT_LENGTH:-0}" | wc -c)
printf 'Content-Type: text/plain\\r\\n\\r\\n%s\\n' "$n"
"""
POST = ("/cgi-bin/length.cgi", POST_BODY, b"256\n")

# Room in the scoreboard for a few generations of children that finish
# their keep-alive connections (KeepAliveTimeout at most) beside the new.
SIZES = {
    "prefork": "StartServers 4\nMinSpareServers 2\nMaxSpareServers 8\n",
    "event": ("ServerLimit 32\nThreadsPerChild 8\nMaxRequestWorkers 64\n"
              "StartServers 2\nMinSpareThreads 8\nMaxSpareThreads 32\n"),
}


def directives(child_model, buckets):
    return (CHILD_MODELS[child_model] + SIZES[child_model]
            + f"BucketCount {buckets}\nKeepAliveTimeout 5\n")


def test_restarts_lose_no_request_a_client_sent(make_httpd, holders,
                                                 child_model):
    port = free_ports(1)[0]
    holder = holders([listen_socket(LOOPBACK, port)])
    server = make_httpd(ports=[port], cgi=True,
                        directives=directives(child_model, 2))
    cgi = server.root / "cgi-bin" / "length.cgi"
    cgi.write_text(LENGTH_CGI)
    cgi.chmod(0o755)
    server.start(holder=holder)

    paced = KeepAliveLoad([port], threads=24, seconds=120, minimum=200,
                          pause=3.0, post=POST).start()
    busy = KeepAliveLoad([port], threads=6, seconds=120, minimum=1000,
                         post=POST).start()
    loads = (paced, busy)

    def served():
        return sum(load.done() for load in loads)

    def some_served(what):
        before = served()
        wait_until(lambda: served() >= before + BETWEEN, 30, what=what)

    generation = server.status()["generation"]
    for i in range(1, GRACEFUL_RESTARTS + 1):
        some_served(f"requests before graceful restart {i}")
        server.write_config(directives(child_model, 3 if i % 2 else 2))
        server.signal(signal.SIGUSR1)
        wait_until(lambda: server.status()["generation"] == generation + i,
                   20, what=f"generation {generation + i}")
    some_served("requests before the graceful stop")
    server.restart_on_held_sockets(holder)
    some_served("requests after the new start")
    results = [load.stop() for load in loads]

    for name, load, result in zip(("paced", "busy"), loads, results):
        print(f"{child_model}, {name}: {result}; {load.told_to_close} "
              f"responses closed the connection, {load.reopened} idle "
              f"connections closed by the server and reopened, "
              f"{load.retries} GETs failed on a reused connection, "
              f"{load.posts_lost} POSTs lost")
    errors = [e for r in results for e in r.errors]
    log = "\n".join(log_near(server.error_log(), errors))
    for load, result in zip(loads, results):
        assert load.posts_lost == 0, (result.errors, log)
        assert result.failed == 0, (result.errors, log)
    assert results[0].ok >= 200 and results[1].ok >= 1000
    # The stopping children told clients to close: they saw the restarts.
    assert all(load.told_to_close > 0 for load in loads)
