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
from event_server import KeepAliveLoad, open_keepalive
from httpd_fixture import CHILD_MODELS, INDEX_BODY, LOOPBACK, children_of, \
    free_ports, http_get, log_near, parse_status, wait_until
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


def test_new_children_serve_while_old_ones_keep_their_connections(
        make_httpd):
    """Event model: after a graceful restart the old children keep their
    idle keep-alive connections (KeepAliveTimeout 30 s here), and the new
    generation serves new connections meanwhile, in free slots: not only
    once the old children have gone."""
    server = make_httpd(directives=(
        CHILD_MODELS["event"] + "ThreadsPerChild 4\nMaxRequestWorkers 32\n"
        "StartServers 2\nMinSpareThreads 4\nMaxSpareThreads 32\n"
        "BucketCount 2\nKeepAliveTimeout 30\n"))
    server.start()
    port = server.ports[0]
    # Enough connections that each old child holds some (2 buckets).
    conns = open_keepalive(port, 16)
    old = set(children_of(server.pid))
    generation = server.status()["generation"]
    server.signal(signal.SIGUSR1)

    def generation_serving():
        # A new connection each time, answered well inside the old
        # children's KeepAliveTimeout, or this fails.
        status, body = http_get(port, "/bucketed-status", timeout=10)
        assert status == 200
        return parse_status(body.decode())["generation"]
    wait_until(lambda: generation_serving() == generation + 1, 20,
               what="the new generation serving")
    assert http_get(port, timeout=10)[0] == 200
    # Old children still hold connections (not all need to: one that
    # got none has gone), and answer each connection's next request,
    # then close it.
    assert old & set(children_of(server.pid))
    for conn in conns:
        conn.request("GET", "/")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, INDEX_BODY)
        assert resp.getheader("Connection", "").lower() == "close"
        conn.close()
