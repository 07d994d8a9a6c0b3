# SPDX-License-Identifier: Apache-2.0
"""
HTTP/2 (h2c, mod_http2): served under the event child model; the prefork
child model gives HTTP/1.1 instead, as stock prefork does (mod_http2 turns
itself off under prefork: it would run the streams of modules that are not
thread-safe, mod_php, on threads, so it negotiates HTTP/2 under neither). On the event child model idle HTTP/2
connections leave room for new requests at small limits, and many short
connections with several streams each all complete. The event model answers AP_MPMQ_CAN_WAITIO 1, so mod_http2 may
hand a connection back to wait for I/O without a worker
(CONN_STATE_ASYNC_WAITIO).
"""
import shutil
import socket
import subprocess

import pytest

from httpd_fixture import (APACHE_MODULES, CHILD_MODELS, INDEX_BODY, LOOPBACK,
                           http_get, recv_exactly)

H2 = (f"LoadModule http2_module {APACHE_MODULES}/mod_http2.so\n"
      "Protocols h2c http/1.1\n")
# Two children of 4 workers, the default AsyncRequestWorkerFactor: at most
# 4 + 4 x 2 = 12 connections each.
SMALL = ("ChildModel event\nBucketCount 1\nServerLimit 2\nStartServers 2\n"
         "ThreadsPerChild 4\nMaxRequestWorkers 8\nMinSpareThreads 4\n"
         "MaxSpareThreads 8\nKeepAliveTimeout 120\nTimeout 120\n")
ANSWER_TIMEOUT = 5
# The client preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
PREFACE = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
           + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
# GET / on stream 1 (RFC 7541 static table: :method GET, :scheme http,
# :path /, and :authority localhost as a literal), END_STREAM|END_HEADERS.
GET_BLOCK = bytes([0x82, 0x86, 0x84, 0x41, 9]) + b"localhost"
GET_STREAM_1 = (len(GET_BLOCK).to_bytes(3, "big") + bytes([1, 0x05])
                + (1).to_bytes(4, "big") + GET_BLOCK)


def idle_h2c(port):
    """An HTTP/2 connection (prior knowledge) that made one request, got
    its whole answer, and now idles, as a browser's does between pages."""
    sock = socket.create_connection((LOOPBACK, port), timeout=ANSWER_TIMEOUT)
    sock.sendall(PREFACE + GET_STREAM_1)
    while True:
        header = recv_exactly(sock, 9)
        length = int.from_bytes(header[:3], "big")
        kind, flags = header[3], header[4]
        stream = int.from_bytes(header[5:9], "big") & 0x7fffffff
        recv_exactly(sock, length)
        # DATA or HEADERS ending stream 1: the answer is complete.
        if stream == 1 and kind in (0, 1) and flags & 0x1:
            return sock


def test_idle_http2_connections_leave_room_for_new_requests(make_httpd):
    server = make_httpd(directives=SMALL + H2)
    server.start()
    port = server.ports[0]
    idle = []
    try:
        # Far more than the two children may hold.
        for _ in range(40):
            idle.append(idle_h2c(port))
        assert http_get(port, timeout=ANSWER_TIMEOUT) == (200, INDEX_BODY)
    finally:
        for s in idle:
            s.close()


NEEDS_H2LOAD = pytest.mark.skipif(shutil.which("h2load") is None,
                                  reason="needs h2load (nghttp2-client)")


def h2load(server, requests, *args):
    """h2load against the server's first port; asserts that every request
    succeeded and returns its output."""
    out = subprocess.run(["h2load", "-n", str(requests), *args,
                          f"http://{LOOPBACK}:{server.ports[0]}/"],
                         capture_output=True, text=True, timeout=120)
    print(out.stdout[-800:])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{requests} succeeded, 0 failed, 0 errored" in out.stdout, \
        out.stdout + server.error_log()[-6000:]
    return out.stdout


@NEEDS_H2LOAD
def test_h2c_through_mod_http2_in_the_event_model(make_httpd):
    server = make_httpd(directives=CHILD_MODELS["event"] + "ThreadsPerChild 8\n"
                        + "MaxRequestWorkers 32\n" + H2)
    server.start()
    assert "h2c" in h2load(server, 5000, "-c", "10", "-m", "10")
    upgrade, _ = protocols_answered(server.ports[0])
    assert upgrade.startswith(b"HTTP/1.1 101 Switching Protocols"), upgrade
    assert "BK00205" not in server.error_log()


def protocols_answered(port):
    """What an HTTP/2 client gets: the response to an h2c Upgrade request,
    and the first bytes answered to the HTTP/2 preface (prior knowledge)."""
    with socket.create_connection((LOOPBACK, port),
                                  timeout=ANSWER_TIMEOUT) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                     b"Connection: Upgrade, HTTP2-Settings\r\n"
                     b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"
                     b"\r\n")
        upgrade = sock.recv(200)
    with socket.create_connection((LOOPBACK, port),
                                  timeout=ANSWER_TIMEOUT) as sock:
        sock.sendall(PREFACE)
        direct = sock.recv(9)
    return upgrade, direct


def test_the_prefork_model_answers_http2_as_stock_prefork(make_httpd):
    """Stock prefork with mod_http2 and `Protocols h2 h2c http/1.1`
    (Debian's http2.conf) does not negotiate HTTP/2 (ALPN, Upgrade), only
    answers a client that starts with it; so does the prefork model, with
    one warning that says why and where HTTP/2 is served. Before, it served
    HTTP/2 with a single worker thread per child for a connection's every
    stream (0.47x stock prefork's req/s with 100 streams per connection),
    and ran mod_php's requests on a thread."""
    debian_h2 = H2.replace("Protocols h2c", "Protocols h2 h2c")
    answers = {}
    for mpm, directives in (("prefork", ""),
                            ("bucketed", CHILD_MODELS["prefork"])):
        server = make_httpd(mpm=mpm, directives=directives + debian_h2)
        server.start()
        try:
            upgrade, direct = protocols_answered(server.ports[0])
            answers[mpm] = (upgrade.split(b"\r\n")[0], direct[:8])
            assert b"101 Switching Protocols" not in upgrade
            assert b"200 OK" in upgrade.split(b"\r\n")[0]
            # Prior knowledge (H2Direct) is not a negotiation: mod_http2
            # answers the preface with its SETTINGS frame (type 4) under
            # stock prefork too.
            assert direct[3] == 4, direct
            # Start-up warnings go to the console, as stock's do.
            log = (server.stdout_path.read_text(errors="replace")
                   + server.error_log())
        finally:
            server.stop()
        if mpm == "bucketed":
            warnings = [line for line in log.splitlines() if "BK00205" in line]
            assert len(warnings) == 1, log
            assert "does not offer HTTP/2 (h2 h2c in Protocols)" in warnings[0]
            assert "ChildModel event serves HTTP/2" in warnings[0]
    assert answers["prefork"] == answers["bucketed"]


@NEEDS_H2LOAD
def test_many_short_http2_connections_with_streams_complete(make_httpd):
    # Room for every connection (16 children of 4 workers, each may hold
    # 4 + idle workers x 20 however busy its workers get): this is about
    # HTTP/2's connections and streams ending in any order, not about
    # reclaiming idle ones under overload (which h2load counts as errors:
    # with AsyncRequestWorkerFactor 4, 0-62 of 2,000 requests here, stock
    # event 76-603 in the same overload).
    server = make_httpd(directives="ChildModel event\nThreadsPerChild 4\n"
                                   "MaxRequestWorkers 64\nStartServers 16\n"
                                   "AsyncRequestWorkerFactor 20\n" + H2)
    server.start()
    # 200 connections of 10 requests each, 4 streams at a time: each
    # connection opens, multiplexes and closes while others do the same.
    h2load(server, 2000, "-c", "200", "-m", "4", "-t", "2")
    assert http_get(server.ports[0]) == (200, INDEX_BODY)
    log = server.error_log()
    assert "AH00052" not in log   # no child crashed
    assert "idle keep-alive connection(s) so that" not in log
