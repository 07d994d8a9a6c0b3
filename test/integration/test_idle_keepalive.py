# SPDX-License-Identifier: Apache-2.0
"""
Idle keep-alive connections never cost the active load (ChildModel event):
a child at its connection limit (ThreadsPerChild + idle workers x
AsyncRequestWorkerFactor) closes its oldest idle keep-alive connections,
cleanly, so that a new connection is accepted instead of waiting in the
bucket's accept queue until KeepAliveTimeout. With the room it needs, it
closes none.
"""
import selectors
import socket
import subprocess
import time

from httpd_fixture import (INDEX_BODY, LOOPBACK, children_of, http_get,
                           io_calls, wait_until)

# Two children of 4 workers: at most 4 + 4 x 2 = 12 connections each.
SMALL_LIMITS = ("ChildModel event\nBucketCount 1\nServerLimit 2\n"
                "StartServers 2\nThreadsPerChild 4\nMaxRequestWorkers 8\n"
                "MinSpareThreads 4\nMaxSpareThreads 8\n"
                "AsyncRequestWorkerFactor 2\n"
                # Far beyond the test: only a reclaim closes them.
                "KeepAliveTimeout 120\n")
IDLE = 60
# What the two children hold under SMALL_LIMITS (13 each: a child accepts
# while it holds at most 12), and new connections that then wait.
FULL = 26
BURST = 30
# A request admitted at once answers in milliseconds; one left waiting for
# KeepAliveTimeout in an accept queue would take two minutes.
ANSWER_TIMEOUT = 5
REQUEST = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


def read_response(sock):
    """Reads one response to REQUEST (Content-Length framed); returns the
    body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before a response")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":", 1)[1])
                  for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed within a response")
        body += chunk
    return body


def open_idle(port):
    """A keep-alive connection that made one request and now idles."""
    sock = socket.create_connection((LOOPBACK, port), timeout=ANSWER_TIMEOUT)
    sock.sendall(REQUEST)
    assert read_response(sock) == INDEX_BODY
    return sock


def how_it_ended(sock):
    """'open', 'eof' (closed cleanly) or 'reset', without waiting."""
    sock.setblocking(False)
    try:
        data = sock.recv(1)
    except BlockingIOError:
        return "open"
    except ConnectionResetError:
        return "reset"
    return "eof" if data == b"" else "open"


def reclaimed(server):
    return sum(b.get("reclaimed", 0)
               for b in server.status()["buckets_list"])


def test_idle_connections_at_the_limit_make_room_for_new_ones(make_httpd):
    server = make_httpd(directives=SMALL_LIMITS)
    server.start()
    port = server.ports[0]
    idle = []
    try:
        # Five times what the children may hold: every one is answered,
        # the older ones closed to make room.
        for _ in range(IDLE):
            idle.append(open_idle(port))
        started = time.monotonic()
        assert http_get(port, timeout=ANSWER_TIMEOUT) == (200, INDEX_BODY)
        print(f"a new request beside {IDLE} idle connections answered in "
              f"{time.monotonic() - started:.3f} s")
        assert reclaimed(server) > 0
        ended = wait_until(
            lambda: [how_it_ended(s) for s in idle].count("open") <= 30
            and [how_it_ended(s) for s in idle], 10,
            what="the reclaimed connections to be closed")
        counts = {k: ended.count(k) for k in ("open", "eof", "reset")}
        print(f"of {IDLE} idle connections: {counts}; reclaimed "
              f"{reclaimed(server)}")
        # Closed between requests with a FIN, never reset; the newest
        # ones, most recently used, are the ones kept.
        assert counts["reset"] == 0, counts
        assert ended[-1] == "open", ended
        assert "idle keep-alive connection(s) so that new ones get in" \
            in server.error_log()
    finally:
        for s in idle:
            s.close()


def test_idle_connections_within_the_limit_are_kept(make_httpd):
    server = make_httpd(directives=SMALL_LIMITS)
    server.start()
    port = server.ports[0]
    # Well within two children's 24: none is closed before its timeout.
    idle = [open_idle(port) for _ in range(8)]
    try:
        assert http_get(port, timeout=ANSWER_TIMEOUT) == (200, INDEX_BODY)
        for s in idle:
            s.sendall(REQUEST)
            assert read_response(s) == INDEX_BODY
        assert reclaimed(server) == 0
    finally:
        for s in idle:
            s.close()


def test_children_at_the_limit_do_not_wake_each_other(make_httpd):
    """While connections wait in the bucket's accept queue and every child
    is at its connection limit, the children stay asleep until a reclaim
    lets them in: a child woken by the bucket's eventfd that cannot take a
    connection does not write to it again (before: the children woke each
    other through it for as long as connections waited, about 200,000
    wake-ups a second per child, each a write() of the eventfd)."""
    server = make_httpd(directives=SMALL_LIMITS)
    server.start()
    port = server.ports[0]
    idle = [open_idle(port) for _ in range(FULL)]
    burst = []
    try:
        children = children_of(server.pid)
        before = io_calls(children, "syscw")
        # More than one reclaim admits: some wait in between.
        for _ in range(BURST):
            sock = socket.create_connection((LOOPBACK, port),
                                            timeout=ANSWER_TIMEOUT)
            sock.sendall(REQUEST)
            burst.append(sock)
        selector = selectors.DefaultSelector()
        for sock in burst:
            selector.register(sock, selectors.EVENT_READ)
        answered = 0
        deadline = time.monotonic() + 30
        while answered < BURST and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1):
                selector.unregister(key.fileobj)
                assert read_response(key.fileobj) == INDEX_BODY
                answered += 1
        writes = io_calls(children, "syscw") - before
        print(f"{answered} of {BURST} answered beside {FULL} idle; the "
              f"children made {writes} write() calls meanwhile; reclaimed "
              f"{reclaimed(server)}")
        # Unanswered: waiting in the accept queue (the listener's Recv-Q),
        # or accepted and held (the status says by whom).
        assert answered == BURST, (
            subprocess.run(["ss", "-Htln", f"sport = :{port}"],
                           capture_output=True, text=True).stdout,
            server.status()["buckets_list"], server.error_log()[-3000:])
        # A response each, and the odd log line: nothing like a storm.
        assert writes <= 3 * BURST, writes
    finally:
        for s in idle + burst:
            s.close()
