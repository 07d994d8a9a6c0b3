# SPDX-License-Identifier: Apache-2.0
"""
ChildModel event against the real httpd, serving: it serves, and -V and -M
say what it is; every bucket's children accept; idle keep-alive
connections beyond the worker threads are held while active requests are
served; keep-alive timeouts and limits, pipelining and write completion
behave as under stock event; a full child stops accepting and its bucket
covers; one idle worker at a time waits in the epoll set.
"""
import hashlib
import os
import socket
import time

import pytest

from httpd_fixture import (HTTP_TIMEOUT, INDEX_BODY, LOOPBACK, SYSCALL_NAMES,
                           Load, Timeout, alive, children_of, http_get,
                           listening_inodes, read_response, server_threads,
                           socket_inodes_of, wait_until, waiting_in)
from event_server import (STATUS, event_server, get_index, open_keepalive,
                          sized, status_fields)


def test_serves_and_says_threaded(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 4\n"
                                      "MaxRequestWorkers 16\n")
    version = server.command("-V")
    assert version.returncode == 0, version.output
    assert "Server MPM:     bucketed" in version.output
    assert "threaded:     yes (fixed thread count)" in version.output
    assert "forked:     yes (variable process count)" in version.output
    check = server.command("-t")
    assert check.returncode == 0, check.output
    assert ("ChildModel event: each child has 4 worker threads, which "
            "accept and serve, and a keeper thread (MaxRequestWorkers 16 is "
            "4 children)") in check.output
    modules = server.command("-M")
    assert modules.returncode == 0, modules.output
    assert "mpm_bucketed_module (shared)" in modules.output
    server.start()
    assert http_get(server.ports[0]) == (200, INDEX_BODY)
    # Children are threaded: the main thread, the keeper and four workers.
    child = children_of(server.pid)[0]
    threads = server_threads(child)
    assert threads == 1 + 1 + 4, threads


def test_prefork_model_says_not_threaded(make_httpd):
    server = make_httpd()
    version = server.command("-V")
    assert "threaded:     no" in version.output


def test_one_idle_worker_at_a_time_waits_in_the_epoll_set(make_httpd):
    """The others wait their turn on a semaphore, so a ready
    connection wakes one worker when that one gets the CPU, never a crowd
    of them that the scheduler then serves in its own order (the p99 of
    issue 19). An idle child of 4 workers: its main thread waits for
    signals, the keeper and one worker in epoll_wait, 3 workers on a
    futex."""
    if not SYSCALL_NAMES:
        pytest.skip("system call numbers are named for x86_64 only")
    server = event_server(make_httpd, sized(1, 4, 4, 1, (1, 4)))
    server.start()
    assert http_get(server.ports[0]) == (200, INDEX_BODY)
    child = children_of(server.pid)[0]
    expected = {"rt_sigtimedwait": 1, "epoll_wait": 2, "futex": 3}

    def as_expected():
        waiting = waiting_in(child)
        return all(waiting[call] == n for call, n in expected.items())
    wait_until(as_expected, 10,
               what=f"child {child}'s threads waiting as {expected}")


def test_children_of_a_bucket_take_turns_at_new_connections(make_httpd):
    """EPOLLEXCLUSIVE wakes the first child in the socket's wait queue with
    a worker waiting; every child of a bucket has many, so without turns
    the first one would take every connection its accept rule allows (here
    all 48). Children re-register the socket every 8th accept, which sends
    the next ones to the others."""
    server = event_server(make_httpd, sized(1, 16, 64, 4, (1, 64))
                          + "KeepAliveTimeout 60\n")
    server.start()
    port = server.ports[0]
    children = children_of(server.pid)
    assert len(children) == 4
    conns = open_keepalive(port, 48)
    try:
        listening = listening_inodes(port)
        held = {child: len(socket_inodes_of(child) - listening)
                for child in children}
        print(f"connections per child: {sorted(held.values())}")
        assert sum(held.values()) >= 48
        assert max(held.values()) <= 24, held
    finally:
        for c in conns:
            c.close()


def test_idle_keepalive_beyond_threads_while_active_served(make_httpd):
    # Two children of 4 workers: 8 threads. Each child may hold 4 + 4 x 4
    # = 20 connections while its workers idle.
    server = event_server(make_httpd, sized(1, 4, 8, 2, (1, 8))
                          + "AsyncRequestWorkerFactor 4\n"
                            "KeepAliveTimeout 60\n"
                            "MaxKeepAliveRequests 0\n")
    server.start()
    port = server.ports[0]
    idle = open_keepalive(port, 24)
    try:
        # Active requests still get workers.
        result = Load([port], count=300, threads=4).run()
        assert result.failed == 0, result.errors
        assert result.ok == 300
        # And every idle connection is still open and serves again.
        get_index(idle)
    finally:
        for c in idle:
            c.close()
    assert len(children_of(server.pid)) == 2
    print(f"24 idle keep-alive connections on 8 worker threads; {result}")


def test_keepalive_timeout_closes_idle_connection(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n"
                                      "KeepAliveTimeout 1\n")
    server.start()
    with socket.create_connection((LOOPBACK, server.ports[0]),
                                  timeout=HTTP_TIMEOUT) as s:
        # Two requests on the connection: it is kept alive.
        for _ in range(2):
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            received = b""
            while INDEX_BODY not in received:
                chunk = s.recv(4096)
                assert chunk, received
                received += chunk
            assert received.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        # Then the server closes its side (EOF, not a reset) after ~1 s.
        while True:
            data = s.recv(4096)
            if not data:
                break
        waited = time.monotonic() - started
    assert waited < HTTP_TIMEOUT


# MaxKeepAliveRequests counts the requests after the first, as stock
# prefork and event count them (both close after the fourth here).
@pytest.mark.parametrize("directives,served", [("KeepAlive Off", 1),
                                                ("MaxKeepAliveRequests 3", 4)])
def test_keepalive_limits_close_the_connection(make_httpd, directives,
                                               served):
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n"
                          + directives + "\n")
    server.start()
    with socket.create_connection((LOOPBACK, server.ports[0]),
                                  timeout=HTTP_TIMEOUT) as s:
        rest = b""
        for _ in range(served):
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head, body, rest = read_response(s, rest)
            assert head.startswith(b"HTTP/1.1 200") and body == INDEX_BODY
        # The last response said so, and the server closed its side.
        assert b"Connection: close" in head
        assert rest == b"" and s.recv(4096) == b""


def test_pipelined_requests_answered_in_order(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n")
    server.start()
    (server.root / "htdocs" / "other.txt").write_bytes(b"other\n")
    with socket.create_connection((LOOPBACK, server.ports[0]),
                                  timeout=HTTP_TIMEOUT) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
                  b"GET /other.txt HTTP/1.1\r\nHost: localhost\r\n\r\n"
                  b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                  b"Connection: close\r\n\r\n")
        head, body, rest = read_response(s)
        assert head.startswith(b"HTTP/1.1 200") and body == INDEX_BODY
        head, body, rest = read_response(s, rest)
        assert head.startswith(b"HTTP/1.1 200") and body == b"other\n"
        head, body, rest = read_response(s, rest)
        assert head.startswith(b"HTTP/1.1 200") and body == INDEX_BODY
        assert rest == b"" and s.recv(4096) == b""


def test_write_completion_to_slow_reader_then_keepalive(make_httpd):
    """A response much larger than the socket buffers to a client that
    does not read for a while: the rest is written in write completion
    (no thread held while the socket is full), all of it arrives, and the
    connection then serves its next request. (The file goes out with
    sendfile: read into memory, or mapped, it counts against the core
    output filter's in-memory threshold, which blocks the worker
    instead.)"""
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n"
                                      "EnableMMAP off\nEnableSendfile on\n" + STATUS)
    server.start()
    port = server.ports[0]
    # Larger than what the socket buffers of both ends can hold.
    big = os.urandom(64 * 1024 * 1024)
    (server.root / "htdocs" / "big.bin").write_bytes(big)
    with socket.create_connection((LOOPBACK, port),
                                  timeout=HTTP_TIMEOUT) as s:
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        # Not reading: the server's output stalls; once the handler is
        # done the connection waits writable without a thread.
        wait_until(lambda: int(status_fields(port)["ConnsAsyncWriting"])
                   >= 1, 20, what="a connection in write completion")
        head, body, rest = read_response(s)
        assert head.startswith(b"HTTP/1.1 200")
        assert hashlib.sha256(body).digest() == hashlib.sha256(big).digest()
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        head, body, rest = read_response(s, rest)
        assert head.startswith(b"HTTP/1.1 200") and body == INDEX_BODY


def test_write_completion_timeout_closes(make_httpd):
    """A client that never reads is dropped after Timeout."""
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\nTimeout 2\n"
                                      "EnableMMAP off\nEnableSendfile on\n" + STATUS)
    server.start()
    port = server.ports[0]
    (server.root / "htdocs" / "big.bin").write_bytes(
        os.urandom(8 * 1024 * 1024))
    with socket.create_connection((LOOPBACK, port),
                                  timeout=HTTP_TIMEOUT) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        wait_until(lambda: int(status_fields(port)["ConnsAsyncWriting"])
                   >= 1, 20, what="a connection in write completion")
        # Timeout later it is gone from the server (only the status
        # request's own connection is left).
        wait_until(lambda: int(status_fields(port)["ConnsTotal"]) <= 1
                   and int(status_fields(port)["ConnsAsyncWriting"]) == 0,
                   20, what="the stalled connection to be closed")


def test_full_child_stops_accepting_and_bucket_covers(make_httpd):
    """Children of 2 threads that may hold 2 + 1 x idle workers
    connections: 16 idle keep-alive connections fill several children;
    each full one stops accepting (mod_status shows it) and the bucket
    gets more children, so every connection is served."""
    server = event_server(make_httpd, sized(1, 2, 32, 1, (1, 32))
                          + "AsyncRequestWorkerFactor 1\n"
                            "KeepAliveTimeout 60\n" + STATUS)
    server.start()
    port = server.ports[0]
    idle = open_keepalive(port, 16)
    try:
        # At most 4 connections per child: at least 4 children now.
        assert len(children_of(server.pid)) >= 4
        _, page = http_get(port, "/server-status")
        # The async table's "accepting" column says no for a full child.
        assert b"<td>no</td>" in page
        get_index(idle)
    finally:
        for c in idle:
            c.close()
