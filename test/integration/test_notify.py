# SPDX-License-Identifier: Apache-2.0
"""The service manager's notifications (sd_notify(3), what a systemd
Type=notify unit waits for): READY=1 once the server serves, RELOADING=1
then READY=1 around a graceful restart, STOPPING=1 on a graceful stop;
sent to the datagram socket NOTIFY_SOCKET names (a path or an abstract
name), which the server's own programs do not inherit."""
import os
import signal
import socket

import pytest

from httpd_fixture import http_get, wait_until

RECV_TIMEOUT = 20


def receive(sock):
    """The next notification, as a dict of its KEY=VALUE lines."""
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines() if line)


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request, tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        address = str(tmp_path / "notify.sock")
        sock.bind(address)
        name = address
    else:
        address = f"\0bucketed-test-notify-{os.getpid()}"
        sock.bind(address)
        name = "@" + address[1:]
    sock.settimeout(RECV_TIMEOUT)
    yield sock, name
    sock.close()


def test_ready_reloading_stopping(make_httpd, notify_socket, child_model):
    sock, name = notify_socket
    directives = ("ChildModel event\nThreadsPerChild 4\nMaxRequestWorkers 8\n"
                  if child_model == "event" else "")
    server = make_httpd(directives=directives,
                        environ={"NOTIFY_SOCKET": name})
    logger_env = server.root / "logger-env"
    server.write_config(directives + f'CustomLog "|$env > {logger_env}; '
                        'exec cat >/dev/null" common\n')
    server.start()
    ready = receive(sock)
    assert ready.get("READY") == "1", ready
    assert ready.get("MAINPID") == str(server.pid)
    assert http_get(server.ports[0])[0] == 200

    server.signal(signal.SIGUSR1)
    assert receive(sock).get("RELOADING") == "1"
    assert receive(sock).get("READY") == "1"
    assert http_get(server.ports[0])[0] == 200

    wait_until(lambda: logger_env.exists() and logger_env.read_text(), 10,
               what="the piped logger's environment")
    assert "NOTIFY_SOCKET" not in logger_env.read_text()

    server.signal(signal.SIGWINCH)
    assert receive(sock).get("STOPPING") == "1"
    assert server.wait_exit() == 0


def test_unusable_notify_socket_is_logged(make_httpd):
    server = make_httpd(environ={"NOTIFY_SOCKET": "relative/path"})
    server.start()
    assert http_get(server.ports[0])[0] == 200
    assert "BK00136" in server.error_log()
