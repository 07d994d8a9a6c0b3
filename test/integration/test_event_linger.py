# SPDX-License-Identifier: Apache-2.0
"""
ChildModel event's lingering close against the real httpd: a client that
has closed its side by the time the response is out is closed by the
worker at once, without a wait in the keeper thread; a client still
sending after the response gets its whole response, is waited for in the
keeper, which reads and discards what it sends, and is never reset. The
status page counts the connections that waited in the keeper (`lingered=`
per bucket).
"""
import socket

from httpd_fixture import (HTTP_TIMEOUT, INDEX_BODY, LOOPBACK, parse_status,
                           read_response, wait_until)
from event_server import event_server, sized

# Sent after the request: the server reads none of it as a request
# (Connection: close), so lingering close has to read it.
JUNK = b"x" * 4096
CLIENTS = 20


def request(path):
    return (f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}\r\n"
            f"Connection: close\r\n\r\n").encode()


def read_to_eof(sock):
    """What sock receives until the server's FIN; a reset raises
    ConnectionResetError."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def closed_first_get(port, path, extra=b""):
    """GET path with extra bytes after the request, the client's side shut
    before the server reads anything: corked, so that the request, the
    extra bytes and the FIN leave in one segment. (head, body, what came
    after the body) of a response read to the end."""
    with socket.create_connection((LOOPBACK, port),
                                  timeout=HTTP_TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        sock.sendall(request(path) + extra)
        sock.shutdown(socket.SHUT_WR)
        return read_response(sock, read_to_eof(sock))


def lingering_waits(server):
    """The status page's `lingered=` summed over the buckets, read by a
    client that closes first (which adds none)."""
    head, body, _ = closed_first_get(server.ports[0], "/bucketed-status")
    assert head.startswith(b"HTTP/1.1 200"), head
    return sum(b["lingered"]
               for b in parse_status(body.decode())["buckets_list"])


def test_a_client_that_closed_first_is_closed_without_the_keeper(
        make_httpd):
    """Each client sends its request and more, then closes its side before
    the server answers (as a Connection: close client that has read the
    response has done by the time the worker looks): the whole response
    arrives, what the client sent is read rather than answered with a
    reset, and no connection waits in the keeper."""
    server = event_server(make_httpd, sized(1, 4, 4, 1, (1, 4)))
    server.start()
    before = lingering_waits(server)
    for _ in range(CLIENTS):
        head, body, after = closed_first_get(server.ports[0], "/", JUNK)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert (body, after) == (INDEX_BODY, b"")
    assert lingering_waits(server) == before


def test_a_client_still_sending_waits_in_the_keeper_and_is_not_reset(
        make_httpd):
    """A client that keeps its side open and sends more after its request:
    the whole response and the server's FIN arrive, the connection waits in
    the keeper, which reads what the client goes on sending (far more than
    the socket buffers hold, so the client could not send it all
    otherwise), and once the client closes, no reset."""
    server = event_server(make_httpd, sized(1, 4, 4, 1, (1, 4)))
    server.start()
    before = lingering_waits(server)
    with socket.create_connection((LOOPBACK, server.ports[0]),
                                  timeout=HTTP_TIMEOUT) as sock:
        sock.sendall(request("/") + JUNK)
        head, body, after = read_response(sock)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert body == INDEX_BODY
        assert read_to_eof(sock) == b"" and after == b""
        wait_until(lambda: lingering_waits(server) == before + 1,
                   HTTP_TIMEOUT, what="the connection to wait in the keeper")
        for _ in range(1024):
            sock.sendall(JUNK)
        sock.shutdown(socket.SHUT_WR)
        assert read_to_eof(sock) == b""
