# SPDX-License-Identifier: Apache-2.0
"""
ChildModel event against the real httpd: it serves; -V and -M say what it
is; every bucket's children accept; idle keep-alive connections beyond the
worker threads are held while active requests are served; graceful
restarts under keep-alive and Connection: close load lose nothing; a
graceful stop finishes a slow request and closes idle keep-alive
connections cleanly; a killed child is replaced in its bucket;
MaxConnectionsPerChild recycles children without a failed request;
mod_status shows the async table (HTTP/2: test_http2.py); mod_php
refuses a threaded MPM with its own message; bad thread directives fail
`-t` naming them; WebSocket through mod_proxy_wstunnel.
"""
import base64
import collections
import hashlib
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from httpd_fixture import (APACHE_MODULES, CGI_BODY, HTTP_TIMEOUT, Httpd,
                           INDEX_BODY, LOOPBACK, NOREUSEPORT_SO,
                           STOP_TIMEOUT, BackgroundGet,
                           Load, LoadResult, Timeout, alive, children_of,
                           connection_refused, free_ports, http_get,
                           recv_exactly,
                           listening_inodes, need_build, socket_inodes_of,
                           wait_until)
from httpd_fixture import make_httpd  # noqa: F401 (fixture)
from test_signals import wait_generation

EVENT = "ChildModel event\n"
RESTARTS = 5


def event_server(make_httpd, extra="", **kwargs):
    return make_httpd(directives=EVENT + extra, **kwargs)


def sized(buckets, threads, workers, start, spare):
    """The sizing directives of a test's event server: BucketCount,
    ThreadsPerChild, MaxRequestWorkers, StartServers and the
    (MinSpareThreads, MaxSpareThreads) pair."""
    return (f"BucketCount {buckets}\nThreadsPerChild {threads}\n"
            f"MaxRequestWorkers {workers}\nStartServers {start}\n"
            f"MinSpareThreads {spare[0]}\nMaxSpareThreads {spare[1]}\n")


def per_bucket(status, key):
    return [b[key] for b in status["buckets_list"]]


def module_line(name, so):
    return f"LoadModule {name}_module {APACHE_MODULES}/{so}"


class KeepAliveLoad(Load):
    """Load's clients, each on one persistent connection, GETting `/` over
    and over until stop() (after at least `minimum` requests in all). A
    request fails unless it answers 200 with the index body. A reused
    connection the server closed while idle (between requests, as on a
    graceful restart or stop) is reopened and the request made again,
    once, as HTTP clients do for idempotent requests; such retries are
    counted, and a retry that fails, or any failure on a fresh connection,
    is a failure."""

    def __init__(self, ports, threads=4, seconds=90, minimum=0):
        super().__init__(ports, count=10 ** 9, threads=threads,
                         seconds=seconds, minimum=minimum)
        self.retries = 0
        self._lock = threading.Lock()

    def _request(self, conn):
        conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200 or body != INDEX_BODY:
            return f"status {resp.status}, body {body[:80]!r}"
        return None

    def _work(self, deadline):
        port = self.ports[next(self._tickets) % len(self.ports)]
        conn = None
        reused = False
        while time.monotonic() < deadline and not (
                self._stop.is_set() and self.result.total >= self.minimum):
            if conn is None:
                conn = http.client.HTTPConnection(LOOPBACK, port,
                                                  timeout=HTTP_TIMEOUT)
                reused = False
            try:
                error = self._request(conn)
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError) as e:
                conn.close()
                conn = None
                if reused:
                    with self._lock:
                        self.retries += 1
                    continue
                error = repr(e)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = None
                error = repr(e)
            self.result.record(error)
            reused = True
        if conn is not None:
            conn.close()


def get_index(conns):
    """One keep-alive GET / on each connection, each answered in full."""
    for c in conns:
        c.request("GET", "/")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, INDEX_BODY)


def open_keepalive(port, count):
    """count connections, each having made one keep-alive request."""
    conns = [http.client.HTTPConnection(LOOPBACK, port, timeout=HTTP_TIMEOUT)
             for _ in range(count)]
    get_index(conns)
    return conns


# ---------------------------------------------------------------- basics

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
    threads = len(os.listdir(f"/proc/{child}/task"))
    assert threads == 1 + 1 + 4, threads


def test_prefork_model_says_not_threaded(make_httpd):
    server = make_httpd()
    version = server.command("-V")
    assert "threaded:     no" in version.output


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


@pytest.mark.parametrize("buckets", [2, 3])
def test_every_bucket_accepts_under_load(make_httpd, buckets):
    server = event_server(make_httpd, f"BucketCount {buckets}\n"
                                      "ThreadsPerChild 4\n"
                                      f"StartServers {2 * buckets}\n"
                                      "MaxRequestWorkers 64\n"
                                      "MinSpareThreads 4\n"
                                      "MaxSpareThreads 64\n",
                          listens=2)
    server.start()
    result = Load(server.ports, count=3000, threads=8).run()
    accepted = per_bucket(server.status(), "accepted")
    print(f"BucketCount {buckets}: {result}; accepted per bucket "
          f"{accepted}")
    assert result.failed == 0, result.errors
    assert result.ok == 3000
    assert len(accepted) == buckets
    assert all(n > 0 for n in accepted), accepted


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


def read_response(sock, received=b""):
    """One HTTP/1.1 response with a Content-Length from sock: (head,
    body, bytes received after it)."""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, received[:200]
        received += chunk
    head, first = received.split(b"\r\n\r\n", 1)
    length = int([line.split(b":", 1)[1] for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:")][0])
    rest = bytearray(first)
    while len(rest) < length:
        chunk = sock.recv(1 << 20)
        assert chunk, (head, len(rest), length)
        rest += chunk
    return head, bytes(rest[:length]), bytes(rest[length:])


def status_fields(port):
    """mod_status's ?auto page as a dict."""
    _, text = http_get(port, "/server-status?auto")
    return dict(line.split(": ", 1) for line in text.decode().splitlines()
                if ": " in line)


STATUS = (module_line("status", "mod_status.so") + "\n"
          "<Location /server-status>\n  SetHandler server-status\n"
          "</Location>\n")


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


# ---------------------------------------------------------------- lifecycle

def test_graceful_restart_under_load_loses_nothing(make_httpd):
    server = event_server(make_httpd, sized(2, 8, 64, 4, (8, 64)))
    server.start()
    port = server.ports[0]
    sockets_before = listening_inodes(port)
    assert len(sockets_before) == 2
    first_children = set(children_of(server.pid))
    generation = server.status()["generation"]

    close_load = Load(server.ports, count=10 ** 6, threads=4, seconds=90,
                      minimum=1000).start()
    ka_load = KeepAliveLoad(server.ports, threads=4, minimum=1000).start()
    for i in range(1, RESTARTS + 1):
        done = close_load.done() + ka_load.done()
        wait_until(lambda: close_load.done() + ka_load.done() > done + 200,
                   20, what="requests before the next restart")
        server.signal(signal.SIGUSR1)
        wait_generation(server, generation + i)
    done = close_load.done() + ka_load.done()
    wait_until(lambda: close_load.done() + ka_load.done() > done + 200, 20,
               what="requests after the last restart")
    closed = close_load.stop()
    kept = ka_load.stop()
    print(f"{RESTARTS} graceful restarts: Connection: close {closed}; "
          f"keep-alive {kept}, {ka_load.retries} idle connections closed "
          f"by the server and reopened")
    assert closed.failed == 0, closed.errors
    assert kept.failed == 0, kept.errors
    assert closed.ok >= 1000 and kept.ok >= 1000
    assert server.error_log().count("Doing graceful restart") == RESTARTS
    assert listening_inodes(port) == sockets_before
    wait_until(lambda: not first_children & set(children_of(server.pid)),
               20, what="the first generation's children to leave")


def thread_counts(server):
    """{child pid: its threads}."""
    counts = {}
    for child in children_of(server.pid):
        try:
            counts[child] = len(os.listdir(f"/proc/{child}/task"))
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
    # To the prefork model: single-threaded children only.
    server.write_config("")
    server.signal(signal.SIGUSR1)
    wait_generation(server, generation + 1)
    wait_until(lambda: set(thread_counts(server).values()) == {1}, 20,
               what="only prefork-model children")
    done = load.done()
    wait_until(lambda: load.done() > done + 200, 20,
               what="requests served by the prefork model")
    # And back: a keeper and four workers per child.
    server.write_config(event_config)
    server.signal(signal.SIGUSR1)
    wait_generation(server, generation + 2)
    wait_until(lambda: set(thread_counts(server).values()) == {6}, 20,
               what="only event-model children")
    done = load.done()
    wait_until(lambda: load.done() > done + 200, 20,
               what="requests served by the event model again")
    result = load.stop()
    print(f"event -> prefork -> event under load: {result}")
    assert result.failed == 0, result.errors
    assert "changing ServerLimit to 256 from original value of 16" \
        in server.error_log()


def test_restart_keeps_sockets_and_serves(make_httpd):
    server = event_server(make_httpd, "BucketCount 2\nThreadsPerChild 4\n"
                                      "MaxRequestWorkers 16\n")
    server.start()
    port = server.ports[0]
    sockets_before = listening_inodes(port)
    first_children = set(children_of(server.pid))
    generation = server.status()["generation"]
    server.signal(signal.SIGHUP)
    wait_generation(server, generation + 1)
    assert "SIGHUP received.  Attempting to restart" in server.error_log()
    assert listening_inodes(port) == sockets_before
    assert not first_children & set(children_of(server.pid))
    assert Load(server.ports, count=200, threads=4).run().failed == 0


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
    # The idle keep-alive connection is closed cleanly (EOF, no reset)
    # while the slow request is still running.
    assert idle.recv(4096) == b""
    assert server.cgi_in_flight()
    idle.close()
    assert slow.result() == (200, (CGI_BODY + "\n").encode())
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


def test_max_connections_per_child_under_load(make_httpd):
    server = event_server(make_httpd, sized(2, 4, 32, 4, (4, 32))
                          + "MaxConnectionsPerChild 100\n" + Httpd.PID_LOG)
    server.start()
    result = Load(server.ports, count=3000, threads=8).run()
    assert result.failed == 0, result.errors
    served_by = server.served_by_child()
    print(f"{result}; {len(served_by)} children served, at most "
          f"{max(served_by.values())} connections each")
    assert sum(served_by.values()) >= 3000
    assert max(served_by.values()) <= 100
    assert len(served_by) >= 30


def test_one_process_mode_serves(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 3\n"
                                      "MaxRequestWorkers 3\n")
    server.start("-X")
    result = Load(server.ports, count=100, threads=4).run()
    assert result.failed == 0, result.errors
    assert children_of(server.pid) == []
    assert server.stop() == 0


@pytest.mark.parametrize("threads,children", [(2, 2), (2, 3), (4, 2)])
def test_request_proxied_to_own_server_is_served(make_httpd, threads,
                                                 children):
    """A worker proxying to its own server waits for another worker: a
    child with no idle worker stops accepting, so the inner request goes
    to a child that has one (or one the bucket gets) instead of waiting
    behind its own proxy for Timeout and a 502."""
    server = make_httpd(listens=8)
    target = server.ports[-1]
    server.write_config(
        EVENT + f"ThreadsPerChild {threads}\n"
        f"MaxRequestWorkers {threads * children}\n"
        f"ServerLimit {children}\nStartServers {children}\n"
        "MinSpareThreads 1\nMaxSpareThreads 64\nTimeout 20\n"
        + module_line("proxy", "mod_proxy.so") + "\n"
        + module_line("proxy_http", "mod_proxy_http.so") + "\n"
        f"ProxyPass /proxied/ http://{LOOPBACK}:{target}/ timeout=20\n")
    server.start()
    # Each proxied request takes two workers.
    concurrency = threads * children // 2
    result = Load([server.ports[0]], count=60, threads=concurrency,
                  path="/proxied/index.html").run()
    print(f"{threads} threads x {children} children: {result}")
    assert result.failed == 0, result.errors
    assert result.ok == 60


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
    threads = len(os.listdir(f"/proc/{child}/task"))
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
    wait_until(lambda: len(os.listdir(f"/proc/{child}/task")) == threads, 20,
               what="the extra worker to retire")


def test_children_move_to_busy_bucket_without_reuseport(make_httpd):
    """One bucket per Listen (no SO_REUSEPORT): with every thread of the
    busy address's bucket taken, that bucket gets children beyond its
    share: the four free slots, then one moved from the quiet bucket
    (which keeps one, and keeps serving)."""
    need_build(NOREUSEPORT_SO)
    server = make_httpd(listens=2, cgi=True, preload=NOREUSEPORT_SO)
    server.write_config(EVENT + "ThreadsPerChild 2\nMaxRequestWorkers 16\n"
                        "ServerLimit 8\nStartServers 4\n"
                        "MinSpareThreads 2\nMaxSpareThreads 8\n")
    server.start()
    status = server.status()
    assert status["strategy"] == "listen" and status["buckets"] == 2
    load = Load([server.ports[0]], count=10 ** 6, threads=24, seconds=60,
                path="/cgi-bin/slow.cgi?0.3", body=(CGI_BODY + "\n").encode())
    load.start()
    try:
        def busy_bucket_grew():
            buckets = server.status(server.ports[1])["buckets_list"]
            busy = [b for b in buckets
                    if f"{LOOPBACK}:{server.ports[0]}" in b["listen"]][0]
            return busy["children"] >= 7 and busy
        busy = wait_until(busy_bucket_grew, 60,
                          what="the busy bucket to get 7 of the 8 children")
        # The quiet address still answers.
        assert http_get(server.ports[1]) == (200, INDEX_BODY)
        quiet = [b for b in server.status(server.ports[1])["buckets_list"]
                 if b is not busy and b["bucket"] != busy["bucket"]][0]
        assert quiet["children"] >= 1
    finally:
        result = load.stop()
    print(f"busy bucket {busy}; {result}")
    assert result.failed == 0, result.errors
    # Moved: the quiet bucket's children held no connection.
    assert "(0 connection(s) open)" in server.error_log()


# ---------------------------------------------------------------- modules

def test_mod_status_shows_async_table(make_httpd):
    server = event_server(make_httpd, "ThreadsPerChild 4\n"
                                      "MaxRequestWorkers 8\n"
                                      "KeepAliveTimeout 60\n" + STATUS)
    server.start()
    port = server.ports[0]
    status, body = http_get(port, "/server-status")
    assert status == 200
    assert b"Async connections" in body
    idle = open_keepalive(port, 3)
    try:
        wait_until(lambda: int(status_fields(port)["ConnsAsyncKeepAlive"])
                   >= 3, 10, what="3 keep-alive connections in mod_status")
    finally:
        for c in idle:
            c.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_tls_keepalive_through_mod_ssl(make_httpd, tmp_path):
    """TLS connections kept alive without a thread between requests
    (mod_ssl's filters on the async path), and closed with its pre-close
    hook when the keep-alive ends."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-subj", "/CN=localhost", "-days", "1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    key.chmod(0o644)
    (tls_port,) = free_ports(1)
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n"
                                      "KeepAliveTimeout 2\n"
                          + module_line("ssl", "mod_ssl.so") + "\n"
                          + module_line("socache_shmcb",
                                        "mod_socache_shmcb.so") + "\n"
                          f"Listen {LOOPBACK}:{tls_port} https\n"
                          f"<VirtualHost {LOOPBACK}:{tls_port}>\n"
                          "  SSLEngine on\n"
                          f"  SSLCertificateFile {cert}\n"
                          f"  SSLCertificateKeyFile {key}\n"
                          "</VirtualHost>\n")
    server.start()
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False
    # More connections than worker threads, each kept alive.
    conns = [http.client.HTTPSConnection(LOOPBACK, tls_port,
                                         timeout=HTTP_TIMEOUT,
                                         context=context)
             for _ in range(6)]
    try:
        for _ in range(5):
            get_index(conns)
    finally:
        for c in conns:
            c.close()
    # After KeepAliveTimeout the server ends an idle TLS connection with
    # a clean close (close_notify, then EOF), not a reset.
    with socket.create_connection((LOOPBACK, tls_port),
                                  timeout=HTTP_TIMEOUT) as raw:
        with context.wrap_socket(raw) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head, body, rest = read_response(s)
            assert body == INDEX_BODY
            assert s.recv(4096) == b""


PHP_SO = APACHE_MODULES / "libphp8.2.so"


@pytest.mark.skipif(not PHP_SO.exists(), reason="needs libapache2-mod-php")
def test_mod_php_refuses_threaded_mpm(make_httpd):
    server = event_server(make_httpd,
                          f"LoadModule php_module {PHP_SO}\n")
    server.start(wait=False)
    assert server.wait_exit() != 0
    assert ("Apache is running a threaded MPM, but your PHP Module is not "
            "compiled to be threadsafe.") in server.output()


BAD_THREAD_DIRECTIVES = [
    ("ThreadsPerChild 0", "ThreadsPerChild", "from 1 to"),
    ("ThreadsPerChild many", "ThreadsPerChild", "not 'many'"),
    ("ThreadLimit -1", "ThreadLimit", "from 1 to"),
    ("MinSpareThreads 0", "MinSpareThreads", "from 1 to"),
    ("MaxSpareThreads x", "MaxSpareThreads", "not 'x'"),
    ("MinSpareThreads 100\nMaxSpareThreads 50", "MinSpareThreads",
     "above MaxSpareThreads 50"),
    ("AsyncRequestWorkerFactor 0", "AsyncRequestWorkerFactor",
     "positive number"),
    ("AsyncRequestWorkerFactor two", "AsyncRequestWorkerFactor",
     "not 'two'"),
    ("MinSpareServers 5", "MinSpareServers", "MinSpareThreads"),
    ("MaxSpareServers 10", "MaxSpareServers", "MinSpareThreads"),
]


@pytest.mark.parametrize("extra,directive,phrase", BAD_THREAD_DIRECTIVES,
                         ids=[b[0].replace("\n", "+")
                              for b in BAD_THREAD_DIRECTIVES])
def test_bad_thread_directive_fails_config_test(make_httpd, extra,
                                                directive, phrase):
    server = event_server(make_httpd, extra)
    result = server.command("-t")
    assert result.returncode != 0, result.output
    assert directive in result.output
    assert phrase in result.output
    assert "Syntax OK" not in result.output


@pytest.mark.parametrize("directive", ["ThreadsPerChild 4", "ThreadLimit 8",
                                       "MinSpareThreads 4",
                                       "MaxSpareThreads 8",
                                       "AsyncRequestWorkerFactor 2"])
def test_thread_directive_under_prefork_model_names_fix(make_httpd,
                                                        directive):
    server = make_httpd(directives=directive)
    result = server.command("-t")
    assert result.returncode != 0, result.output
    assert directive.split()[0] in result.output
    assert "add 'ChildModel event'" in result.output


def test_bad_child_model_fails_config_test(make_httpd):
    server = make_httpd(directives="ChildModel worker")
    result = server.command("-t")
    assert result.returncode != 0
    assert "ChildModel must be prefork or event, not 'worker'" \
        in result.output


def test_thread_limits_adjusted_with_event_warnings(make_httpd):
    server = event_server(make_httpd, "ThreadLimit 8\nThreadsPerChild 10\n"
                                      "MaxRequestWorkers 30\n")
    result = server.command("-t")
    assert result.returncode == 0, result.output
    assert "ThreadsPerChild of 10 exceeds ThreadLimit of 8" in result.output
    assert "MaxRequestWorkers of 30 is not an integer multiple of " \
        "ThreadsPerChild of 8" in result.output


# ---------------------------------------------------------------- WebSocket

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

ECHO_BACKEND = r'''
import base64, hashlib, socket, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def recv_exactly(c, n):
    data = b""
    while len(data) < n:
        chunk = c.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

def serve(c):
    with c:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = c.recv(4096)
            if not chunk:
                return
            head += chunk
        key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")
               if l.lower().startswith(b"sec-websocket-key:")][0]
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket"
                  b"\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
                  + accept + b"\r\n\r\n")
        while True:
            try:
                b0, b1 = recv_exactly(c, 2)
            except EOFError:
                return
            n = b1 & 0x7f
            if n == 126:
                n = int.from_bytes(recv_exactly(c, 2), "big")
            mask = recv_exactly(c, 4)
            payload = bytes(x ^ mask[i % 4] for i, x in
                            enumerate(recv_exactly(c, n)))
            if b0 & 0x0f == 8:
                c.sendall(bytes([0x88, 0]))
                return
            c.sendall(bytes([0x81, n]) + payload if n < 126 else
                      bytes([0x81, 126]) + n.to_bytes(2, "big") + payload)

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("ready", flush=True)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


def ws_frame(payload):
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    assert len(payload) < 126
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


@pytest.fixture
def echo_backend(tmp_path):
    (port,) = free_ports(1)
    script = tmp_path / "ws_echo.py"
    script.write_text(ECHO_BACKEND)
    proc = subprocess.Popen([sys.executable, str(script), str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield port
    finally:
        proc.kill()
        proc.wait(STOP_TIMEOUT)


def test_websocket_echo_through_proxy_wstunnel(make_httpd, echo_backend):
    server = event_server(make_httpd, "ThreadsPerChild 4\n"
                                      "MaxRequestWorkers 8\n"
                          + module_line("proxy", "mod_proxy.so") + "\n"
                          + module_line("proxy_http", "mod_proxy_http.so")
                          + "\n"
                          + module_line("proxy_wstunnel",
                                        "mod_proxy_wstunnel.so") + "\n"
                          f"ProxyPass /ws ws://{LOOPBACK}:{echo_backend}/\n")
    server.start()
    key = base64.b64encode(os.urandom(16))
    with socket.create_connection((LOOPBACK, server.ports[0]),
                                  timeout=HTTP_TIMEOUT) as s:
        s.sendall(b"GET /ws HTTP/1.1\r\nHost: localhost\r\n"
                  b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
                  + key + b"\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head
        expected = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        assert b"Sec-WebSocket-Accept: " + expected in head
        for i in range(20):
            message = f"hello {i}".encode()
            s.sendall(ws_frame(message))
            b0, n = recv_exactly(s, 2)
            assert b0 == 0x81
            assert recv_exactly(s, n) == message
