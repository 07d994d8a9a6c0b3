# SPDX-License-Identifier: Apache-2.0
"""
httpd 2.4's async API on the event child model: a process_connection hook
that returns CONN_STATE_ASYNC_WAITIO (AP_MPMQ_CAN_WAITIO is 1) has its
connection wait for input in the child's epoll set, without a worker, and
is called again once input comes; mod_status counts such connections
(ConnsAsyncWaitIO). The test module's echo protocol (mod_test_fault.c,
ServerRoot/waitio-port) is the hook. A handler that returns SUSPENDED
after ap_mpm_register_timed_callback() has its request finished by the
callback, no worker held meanwhile, and the connection goes on to
keep-alive: the test module's test-suspend handler, and httpd's own
mod_dialup, which paces a download that way.
"""
import select
import socket
import time

from httpd_fixture import (FAULT_SO, INDEX_BODY, LOOPBACK, free_ports,
                           http_get, need_build, read_response, wait_until)

STATUS = ("LoadModule status_module /usr/lib/apache2/modules/mod_status.so\n"
          "<Location /server-status>\n  SetHandler server-status\n"
          "</Location>\n")
# One child of one worker: a connection that held its worker while it
# waits would leave none for anything else.
ONE_WORKER = ("ChildModel event\nBucketCount 1\nServerLimit 1\n"
              "StartServers 1\nThreadsPerChild 1\nMaxRequestWorkers 1\n"
              "MinSpareThreads 1\nMaxSpareThreads 1\n"
              "AsyncRequestWorkerFactor 8\nTimeout 30\n"
              # Connections that have sent nothing yet are accepted.
              "AcceptFilter http none\n")
WAITERS = 3


def async_counts(port):
    _, page = http_get(port, "/server-status?auto", timeout=5)
    return {line.split(":")[0]: int(line.split(":")[1])
            for line in page.decode().splitlines()
            if line.startswith("ConnsAsync")}


def test_a_connection_waiting_for_io_holds_no_worker(make_httpd):
    need_build(FAULT_SO)
    echo_port = free_ports(1)[0]
    server = make_httpd(directives=ONE_WORKER + STATUS
                        + f"LoadModule test_fault_module {FAULT_SO}\n"
                        f"Listen {LOOPBACK}:{echo_port}\n")
    (server.root / "waitio-port").write_text(str(echo_port))
    server.start()
    http_port = server.ports[0]
    waiting = [socket.create_connection((LOOPBACK, echo_port), timeout=10)
               for _ in range(WAITERS)]
    try:
        # Each waits in the MPM, none in the one worker: mod_status sees
        # them, and HTTP requests are still served.
        counts = wait_until(
            lambda: (c := async_counts(http_port)).get("ConnsAsyncWaitIO", 0)
            >= WAITERS and c, 10, what="the connections to wait for I/O")
        print(f"{WAITERS} connections waiting for input: {counts}")
        for _ in range(5):
            assert http_get(http_port, timeout=5) == (200, INDEX_BODY)
        # Input comes: the hook runs again and answers each.
        for i, s in enumerate(waiting):
            s.sendall(f"line {i}\n".encode())
        for i, s in enumerate(waiting):
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(256)
                assert chunk, reply
                reply += chunk
            assert reply.startswith(b"waited ") and reply.endswith(
                f": line {i}\n".encode()), reply
            assert int(reply.split()[1].rstrip(b":")) >= 1, reply
    finally:
        for s in waiting:
            s.close()
    wait_until(lambda: async_counts(http_port).get("ConnsAsyncWaitIO") == 0,
               10, what="no connection left waiting")


SUSPEND = (f"LoadModule test_fault_module {FAULT_SO}\n"
           "<Location /suspend>\n  SetHandler test-suspend\n</Location>\n")


def exchange(sock, path):
    """GET path on a kept-alive connection: (status line, body)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"
                 .encode())
    return status_and_body(sock)


def status_and_body(sock):
    """The answer to a request sent on sock: (status line, body)."""
    head, body, _ = read_response(sock)
    return head.split(b"\r\n")[0].decode(), body


SUSPENDED = 4
SUSPEND_MS = 3000


def test_a_timed_callback_finishes_a_suspended_request(make_httpd):
    need_build(FAULT_SO)
    server = make_httpd(directives=ONE_WORKER + SUSPEND)
    server.start()
    port = server.ports[0]
    clients = [socket.create_connection((LOOPBACK, port), timeout=20)
               for _ in range(SUSPENDED)]
    try:
        for c in clients:
            c.sendall(f"GET /suspend?{SUSPEND_MS} HTTP/1.1\r\n"
                      "Host: localhost\r\n\r\n".encode())
        wait_until(lambda: server.error_log().count("request suspended")
                   == SUSPENDED, 10, what="every request to be suspended")
        # The one worker is free: another request is answered while all
        # of them wait for their callbacks.
        assert http_get(port, timeout=5) == (200, INDEX_BODY)
        readable, _, _ = select.select(clients, [], [], 0)
        assert readable == [], "answered before the callback was due"
        for c in clients:
            status, body = status_and_body(c)
            assert status == "HTTP/1.1 200 OK"
            waited = int(body.split()[2])
            assert waited >= SUSPEND_MS, body
            # The connection went on to keep-alive.
            assert exchange(c, "/") == ("HTTP/1.1 200 OK", INDEX_BODY)
    finally:
        for c in clients:
            c.close()


def test_prefork_model_runs_no_timed_callbacks(make_httpd):
    need_build(FAULT_SO)
    server = make_httpd(directives="ChildModel prefork\n" + SUSPEND)
    server.start()
    status, body = http_get(server.ports[0], "/suspend?100", timeout=5)
    assert status == 200 and body.startswith(b"not suspended: "), body


DIALUP_FILE = bytes(range(256)) * 55          # 14,080 bytes
V92_BYTES_PER_SECOND = 7000


def test_mod_dialup_paces_a_download(make_httpd):
    """ModemStandard V.92 sends 7,000 bytes a second: the first at once
    from the handler, the others from timed callbacks a second apart.
    (Stock event 2.4.71 sends the first 7,000 and then nothing: its
    callbacks never finish the request; measured in docs/design.md.)"""
    server = make_httpd(directives="ChildModel event\n"
                        "LoadModule dialup_module /usr/lib/apache2/modules/"
                        "mod_dialup.so\n<Location /modem>\n"
                        "  ModemStandard V.92\n</Location>\n")
    (server.root / "htdocs" / "modem").mkdir()
    (server.root / "htdocs" / "modem" / "file.bin").write_bytes(DIALUP_FILE)
    server.start()
    sock = socket.create_connection((LOOPBACK, server.ports[0]), timeout=20)
    try:
        started = time.monotonic()
        status, body = exchange(sock, "/modem/file.bin")
        took = time.monotonic() - started
        assert status == "HTTP/1.1 200 OK"
        assert body == DIALUP_FILE
        # Paced: three pulses, two of them a second or more after the
        # request (a lower bound only: pacing is the function here).
        assert took >= (len(DIALUP_FILE) // V92_BYTES_PER_SECOND), took
        assert exchange(sock, "/") == ("HTTP/1.1 200 OK", INDEX_BODY)
    finally:
        sock.close()


def test_input_held_by_a_clogging_filter_is_served(make_httpd):
    """A connection filter that reads ahead (c->clogging_input_filters, as
    mod_ssl's once did) holds input no poller can see: the connection is
    served synchronously, so two pipelined requests that arrived in one
    packet, both taken off the socket by the filter's first read, are
    both answered, and so is a later one on the same connection."""
    need_build(FAULT_SO)
    clog_port = free_ports(1)[0]
    server = make_httpd(directives=ONE_WORKER
                        + f"LoadModule test_fault_module {FAULT_SO}\n"
                        f"Listen {LOOPBACK}:{clog_port}\n")
    (server.root / "clog-port").write_text(str(clog_port))
    server.start()
    sock = socket.create_connection((LOOPBACK, clog_port), timeout=10)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * 2)
        head, body, rest = read_response(sock)
        assert (head.split(b"\r\n")[0], body) == (b"HTTP/1.1 200 OK",
                                                  INDEX_BODY)
        head, body, _ = read_response(sock, rest)
        assert (head.split(b"\r\n")[0], body) == (b"HTTP/1.1 200 OK",
                                                  INDEX_BODY)
        assert exchange(sock, "/") == ("HTTP/1.1 200 OK", INDEX_BODY)
    finally:
        sock.close()
