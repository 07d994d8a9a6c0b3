# SPDX-License-Identifier: Apache-2.0
"""
ChildModel event with httpd's modules: mod_status shows the async table
(HTTP/2: test_http2.py); TLS keep-alive through mod_ssl; mod_php refuses a
threaded MPM with its own message; bad thread directives fail `-t` naming
them; WebSocket through mod_proxy_wstunnel.
"""
import base64
import hashlib
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading

import pytest

from httpd_fixture import (APACHE_MODULES, HTTP_TIMEOUT, INDEX_BODY, LOOPBACK,
                           STOP_TIMEOUT, alive, free_ports, http_get,
                           read_response, recv_exactly, wait_until)
from event_server import (STATUS, event_server, get_index, module_line,
                          open_keepalive, status_fields, tls_vhost)


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
    (tls_port,) = free_ports(1)
    cert, tls = tls_vhost(tmp_path, tls_port)
    server = event_server(make_httpd, "ThreadsPerChild 2\n"
                                      "MaxRequestWorkers 4\n"
                                      "KeepAliveTimeout 2\n" + tls)
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
