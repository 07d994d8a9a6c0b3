# SPDX-License-Identifier: Apache-2.0
"""The service manager's notifications (sd_notify(3), what a systemd
Type=notify unit waits for): READY=1 once the server serves, RELOADING=1
then READY=1 around a graceful restart, STOPPING=1 on a graceful stop;
sent to the datagram socket NOTIFY_SOCKET names (a path or an abstract
name), which the server's own programs do not inherit. The notifications
go on after a graceful restart onto a build with another layout of the
MPM's kept state (test_upgrade.py), as does the knowledge of which
sockets the service manager holds."""
import os
import shutil
import signal
import socket

import pytest

from bucketbench.activation import Holder, listen_socket
from httpd_fixture import CHILD_MODELS, LOOPBACK, MPM_SO, http_get, wait_until
from test_upgrade import install, other_layout_build  # noqa: F401 (fixture)

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


def test_notifications_survive_a_layout_change(
        make_httpd, notify_socket, child_model,
        other_layout_build):  # noqa: F811 (the fixture imported above)
    """Graceful restarts onto a build with another layout of the kept state
    and back: RELOADING=1 then READY=1 each time, STOPPING=1 at the stop,
    and the passed socket is still known as the service manager's."""
    sock, name = notify_socket
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + "BucketCount 2\n", environ={"NOTIFY_SOCKET": name})
    held = listen_socket(LOOPBACK, server.ports[0])
    holder = Holder([held])
    loaded = server.root / "mod_mpm_bucketed.so"
    shutil.copyfile(MPM_SO, loaded)
    server.conf.write_text(server.conf.read_text().replace(
        str(MPM_SO), str(loaded)))
    try:
        server.start(holder=holder)
        assert receive(sock).get("READY") == "1"
        for build in (other_layout_build, MPM_SO):
            install(build, loaded)
            server.signal(signal.SIGUSR1)
            assert receive(sock).get("RELOADING") == "1"
            ready = receive(sock)
            assert ready.get("READY") == "1", ready
            assert http_get(server.ports[0])[0] == 200
            assert server.status()["buckets_list"][0].get("inherited") == 1
        assert server.error_log().count("BK00142") == 2
        server.signal(signal.SIGWINCH)
        assert receive(sock).get("STOPPING") == "1"
        assert server.wait_exit() == 0
    finally:
        holder.close()
