# SPDX-License-Identifier: Apache-2.0
"""The prefork model's wait for a keep-alive connection's next request is
the MPM's (prefork_keepalive.c), so that at MaxRequestWorkers it can give
an idle connection up. Away from the limit it must cost what stock
prefork's wait costs and miss nothing: pipelined requests, and over TLS
the bytes mod_ssl has already decrypted, are answered without a wait."""
import shutil
import socket
import ssl
import time

import pytest

from event_server import tls_vhost
from httpd_fixture import (INDEX_BODY, LOOPBACK, children_of, free_ports,
                           io_calls, read_response)

REQUESTS = 30
# Long enough for each request to find the child in its wait (the client
# sends the next request only after reading the answer to the last).
PAUSE_S = 0.02
GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
SERVERS = "KeepAlive On\nKeepAliveTimeout 30\nStartServers 2\n" \
          "MinSpareServers 1\nMaxSpareServers 2\n"


def started(make_httpd, tmp_path, mpm, transport):
    """(server, client socket factory) of a prefork server, stock or
    bucketed's model, serving plaintext or TLS."""
    tls_port = None
    extra = ""
    if transport == "tls":
        (tls_port,) = free_ports(1)
        (tmp_path / mpm).mkdir()
        cert, extra = tls_vhost(tmp_path / mpm, tls_port)
    directives = SERVERS + extra
    if mpm == "bucketed":
        directives = "ChildModel prefork\n" + directives
    server = make_httpd(directives=directives, mpm=mpm)
    server.start()
    port = tls_port or server.ports[0]

    def connect():
        raw = socket.create_connection((LOOPBACK, port), 10)
        if transport == "plain":
            return raw
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False
        return context.wrap_socket(raw)
    return server, connect


def reads_per_request(server, connect):
    """read() calls the server's children make per keep-alive request, each
    request sent once the child waits for it."""
    with connect() as c:
        c.sendall(GET)
        read_response(c)
        children = children_of(server.pid)
        before = io_calls(children, "syscr")
        for _ in range(REQUESTS):
            time.sleep(PAUSE_S)
            c.sendall(GET)
            assert read_response(c)[1] == INDEX_BODY
        return (io_calls(children, "syscr") - before) / REQUESTS


TRANSPORTS = ["plain", pytest.param("tls", marks=pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs openssl"))]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_wait_reads_no_more_than_stock_prefork(make_httpd, tmp_path,
                                                   transport):
    """After a response httpd has already looked for a pipelined request
    without blocking; the wait does not look again (a read that fails with
    EAGAIN), so a keep-alive request costs the reads it costs in stock
    prefork (counted in /proc/PID/io, not timed)."""
    reads = {mpm: reads_per_request(*started(make_httpd, tmp_path, mpm,
                                             transport))
             for mpm in ("prefork", "bucketed")}
    print(f"read() calls per keep-alive request: {reads}")
    assert reads["bucketed"] <= reads["prefork"], reads


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pipelined_requests_are_answered_without_a_wait(make_httpd,
                                                        tmp_path, transport):
    """Three requests in one write: each answered in turn on the same
    connection, the second and third from what the first read (plaintext)
    or what mod_ssl decrypted with it (TLS), not after a KeepAliveTimeout;
    then the connection waits, and answers a request sent later."""
    server, connect = started(make_httpd, tmp_path, "bucketed", transport)
    with connect() as c:
        c.settimeout(10)        # far below KeepAliveTimeout (30 s)
        c.sendall(GET * 3)
        rest = b""
        for _ in range(3):
            head, body, rest = read_response(c, rest)
            assert head.startswith(b"HTTP/1.1 200") and body == INDEX_BODY
        assert rest == b""
        time.sleep(PAUSE_S)
        c.sendall(GET)
        assert read_response(c)[1] == INDEX_BODY
    assert "BK00188" not in server.error_log()
