"""
httpd 2.4's async API on the event child model: a process_connection hook
that returns CONN_STATE_ASYNC_WAITIO (AP_MPMQ_CAN_WAITIO is 1) has its
connection wait for input in the child's epoll set, without a worker, and
is called again once input comes; mod_status counts such connections
(ConnsAsyncWaitIO). The test module's echo protocol (mod_test_fault.c,
ServerRoot/waitio-port) is the hook.
"""
import socket

from httpd_fixture import (BUILD, INDEX_BODY, LOOPBACK, free_ports, http_get,
                           need_build, wait_until)
from httpd_fixture import make_httpd  # noqa: F401 (fixture)

FAULT_SO = BUILD / "test" / "modules" / "mod_test_fault.so"
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
