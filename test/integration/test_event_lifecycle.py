# SPDX-License-Identifier: Apache-2.0
"""
ChildModel event children over their life (graceful restarts under load:
test_signals.py, both models): a graceful restart switches the child
model; a graceful stop finishes a slow request and answers the next
request of an idle keep-alive connection; a killed child is replaced in its bucket;
MaxConnectionsPerChild recycles children without a failed request, and a
child leaving at it is replaced before it has gone; a stuck child gets an
extra worker. (A request proxied to its own server
and children moving to a busy bucket: test_capacity.py, both models.)
"""
import http.client
import os
import select
import signal
import socket

import pytest

from httpd_fixture import (BackgroundGet, CGI_BODY, HELD_CGI_BOUND,
                           HTTP_TIMEOUT, INDEX_BODY, LOOPBACK, Load,
                           STOP_TIMEOUT, alive, children_of,
                           connection_refused, http_get, listening_inodes,
                           per_bucket, read_response, server_threads,
                           socket_inodes_of, wait_until)
from event_server import (EVENT, event_server, get_index, open_keepalive,
                          sized)
from test_signals import wait_generation


def thread_counts(server):
    """{child pid: its threads}."""
    counts = {}
    for child in children_of(server.pid):
        try:
            counts[child] = server_threads(child)
        except FileNotFoundError:
            pass
    return counts


def test_graceful_restart_switches_child_model(make_httpd):
    event_config = EVENT + "ThreadsPerChild 4\nMaxRequestWorkers 16\n"
    server = make_httpd(directives=event_config)
    server.start()
    generation = server.status()["generation"]
    load = Load(server.ports, count=10 ** 6, threads=4, seconds=90,
                minimum=500).start()

    def switch(config, generations, threads, model):
        """Graceful restart into config: every child has `threads`
        threads, and those children serve."""
        server.write_config(config)
        server.signal(signal.SIGUSR1)
        wait_generation(server, generation + generations)
        wait_until(lambda: set(thread_counts(server).values()) == {threads},
                   20, what=f"only {model} children")
        done = load.done()
        wait_until(lambda: load.done() > done + 200, 20,
                   what=f"requests served by the {model} children")

    # To the prefork model (single-threaded children), and back (a keeper
    # and four workers per child).
    switch("", 1, 1, "prefork-model")
    switch(event_config, 2, 6, "event-model")
    result = load.stop()
    print(f"event -> prefork -> event under load: {result}")
    assert result.failed == 0, result.errors
    assert "changing ServerLimit to 256 from original value of 16" \
        in server.error_log()


def test_graceful_stop_finishes_slow_request(make_httpd):
    server = event_server(make_httpd, sized(1, 4, 8, 1, (1, 8))
                          + "KeepAliveTimeout 60\n", cgi=True)
    server.start()
    port = server.ports[0]
    children = children_of(server.pid)
    idle = socket.create_connection((LOOPBACK, port), timeout=HTTP_TIMEOUT)
    idle.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    received = b""
    while INDEX_BODY not in received:
        received += idle.recv(4096)
    slow = BackgroundGet(port, "/cgi-bin/slow.cgi?3")
    wait_until(server.cgi_in_flight, 10, what="the slow CGI to start")

    server.signal(signal.SIGWINCH)
    assert slow.result() == (200, (CGI_BODY + "\n").encode())
    # The idle keep-alive connection, which its client may be using just
    # then, is still open (KeepAliveTimeout 60); its next request is
    # answered, with Connection: close, and the connection then closed.
    assert not select.select([idle], [], [], 0)[0]
    idle.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head, body, rest = read_response(idle)
    assert body == INDEX_BODY and rest == b""
    assert b"\r\nConnection: close" in head
    assert idle.recv(4096) == b""
    idle.close()
    assert server.wait_exit() == 0
    wait_until(lambda: connection_refused(port), 10,
               what="the port to close")
    assert not [pid for pid in [server.pid, *children] if alive(pid)]
    assert "caught SIGWINCH, shutting down gracefully" in server.error_log()


def test_graceful_shutdown_timeout_ends_slow_request(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n"
                                      "GracefulShutdownTimeout 1\n", cgi=True)
    server.start()
    children = children_of(server.pid)
    slow = BackgroundGet(server.ports[0], "/cgi-bin/slow.cgi?5")
    wait_until(server.cgi_in_flight, 10, what="the slow CGI to start")
    server.signal(signal.SIGWINCH)
    assert server.wait_exit(STOP_TIMEOUT) == 0
    assert not [pid for pid in children if alive(pid)]
    # GracefulShutdownTimeout ended the wait: the request was cut.
    with pytest.raises((OSError, http.client.HTTPException)):
        slow.result()
    # The script itself (no longer watched by a child) ends on its own.
    wait_until(lambda: not server.cgi_in_flight(), 20,
               what="the CGI script to end")


def test_stop_ends_children_with_busy_workers(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n", cgi=True)
    server.start()
    children = children_of(server.pid)
    slow = BackgroundGet(server.ports[0], "/cgi-bin/slow.cgi?5")
    wait_until(server.cgi_in_flight, 10, what="the slow CGI to start")
    server.signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert not [pid for pid in children if alive(pid)]
    with pytest.raises((OSError, http.client.HTTPException)):
        slow.result()
    # A busy worker cannot run its pool's cleanups (the child leaves
    # without them after 1 s): the script ends on its own.
    wait_until(lambda: not server.cgi_in_flight(), 20,
               what="the CGI script to end")


def bucket_of_child(server, child):
    """The listening sockets of the server's port a child holds: with one
    Listen, one socket per bucket, they tell its bucket."""
    return socket_inodes_of(child) & listening_inodes(server.ports[0])


def test_killed_child_replaced_in_its_bucket(make_httpd):
    server = event_server(make_httpd, sized(2, 2, 16, 4, (2, 16)))
    server.start()
    wait_until(lambda: per_bucket(server.status(), "children") == [2, 2],
               10, what="two children per bucket")
    victim = children_of(server.pid)[0]
    socket_of_victim = wait_until(lambda: len(bucket_of_child(server, victim))
                                  == 1 and bucket_of_child(server, victim),
                                  10, what="the victim to keep one socket")
    before = set(children_of(server.pid))
    os.kill(victim, signal.SIGKILL)
    new = wait_until(lambda: set(children_of(server.pid)) - before, 5,
                     what="a replacement child")
    (newcomer,) = new
    held = wait_until(lambda: len(bucket_of_child(server, newcomer)) == 1
                      and bucket_of_child(server, newcomer), 10,
                      what="the newcomer to keep one socket")
    assert held == socket_of_victim
    assert per_bucket(server.status(), "children") == [2, 2]
    assert Load(server.ports, count=200, threads=4).run().failed == 0


CONNECTION_LIMIT = 20


def test_a_child_leaving_at_its_connection_limit_is_replaced_at_once(
        make_httpd):
    """A child that reached MaxConnectionsPerChild takes no new connection
    but finishes those it has; with a slot to spare (ServerLimit above
    MaxRequestWorkers), a new child takes the bucket's queue meanwhile, not
    once the old one has gone (counted as capacity until then, every
    child of the soak's bucket was leaving at times, and a request waited
    more than 2 s)."""
    server = event_server(make_httpd, sized(1, 4, 4, 1, (1, 4))
                          + "ServerLimit 2\nMaxConnectionsPerChild "
                          f"{CONNECTION_LIMIT}\n", cgi=True)
    server.start()
    port = server.ports[0]
    (first,) = children_of(server.pid)
    # The only child has taken every connection so far, this one too.
    taken = server.status()["buckets_list"][0]["accepted"]
    assert taken < CONNECTION_LIMIT - 2
    held = BackgroundGet(port, "/cgi-bin/held.cgi", timeout=HELD_CGI_BOUND)
    wait_until(server.cgi_in_flight, 10, what="the held CGI to start")
    # Up to its last connection.
    for _ in range(CONNECTION_LIMIT - taken - 1):
        assert http_get(port, "/") == (200, INDEX_BODY)
    # Answered while the first child still holds the held request: by
    # another child (the first takes none, and MaxRequestWorkers allows
    # one child's threads).
    assert http_get(port, "/") == (200, INDEX_BODY)
    assert first in children_of(server.pid) and server.cgi_in_flight()
    assert len(children_of(server.pid)) == 2
    server.release_held()
    assert held.result() == (200, (CGI_BODY + "\n").encode())
    wait_until(lambda: first not in children_of(server.pid), 10,
               what="the first child to leave")


def test_keepalive_request_in_a_stuck_child_gets_an_extra_worker(make_httpd):
    """A kept-alive connection's next request comes while every worker of
    its child is busy and none finishes (what a child proxying to itself
    over a pooled connection it serves runs into): the keeper starts an
    extra worker within ThreadLimit, which answers it while both slow
    requests still run, and then retires."""
    server = event_server(make_httpd, sized(1, 2, 2, 1, (1, 2))
                          + "ServerLimit 1\nThreadLimit 4\n"
                            "KeepAliveTimeout 60\n", cgi=True)
    server.start()
    port = server.ports[0]
    child = children_of(server.pid)[0]
    threads = server_threads(child)
    kept = open_keepalive(port, 1)
    slow = [BackgroundGet(port, "/cgi-bin/slow.cgi?20", timeout=60)
            for _ in range(2)]
    try:
        wait_until(lambda: server.cgi_in_flight() == 2, 20,
                   what="both workers running the slow CGI")
        get_index(kept)
        # Both slow requests still run: the answer came from neither.
        assert server.cgi_in_flight() == 2
        assert "started an extra worker" in server.error_log()
    finally:
        kept[0].close()
    for request in slow:
        assert request.result(timeout=60) == (200, CGI_BODY.encode() + b"\n")
    # Retired: the child is back to the threads it started with.
    wait_until(lambda: server_threads(child) == threads, 20,
               what="the extra worker to retire")
