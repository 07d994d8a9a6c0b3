# SPDX-License-Identifier: Apache-2.0
"""Socket activation: listening sockets held by a service manager (here a
holder in the test process, as systemd's socket units hold them) and
passed to httpd as sd_listen_fds(3) describes. The passed socket is the one
that serves (the same inode), what is not meant for httpd or cannot serve
is logged and costs nothing, IPv4 and IPv6, and a full restart (graceful
stop, then start) under load fails no request because the held socket
queues the connections that arrive in between."""
import os
import signal
import socket

import pytest

from bucketbench.activation import Holder, listen_socket
from event_server import KeepAliveLoad
from httpd_fixture import (LOOPBACK, Load, children_of, free_ports, http_get,
                           socket_inodes_of, wait_until)

RESTARTS = 3

EVENT_LIMITS = ("ChildModel event\nServerLimit 8\nThreadsPerChild 8\n"
                "MaxRequestWorkers 64\n")


def inode(sock):
    return os.fstat(sock.fileno()).st_ino


def held_by_children(server, sock):
    """Some child of the server holds sock."""
    return any(inode(sock) in socket_inodes_of(c)
               for c in children_of(server.pid))


def assert_not_adopted(server, own_port):
    """The server serves its own socket only. Descriptors passed to no one
    (or that the environment does not describe) are left as they came:
    they are not the server's to close."""
    bucket = server.status()["buckets_list"][0]
    assert bucket["listen"] == [f"127.0.0.1:{own_port}"]
    assert bucket.get("inherited", 0) == 0


@pytest.fixture
def holders():
    made = []

    def make(*args, **kwargs):
        h = Holder(*args, **kwargs)
        made.append(h)
        return h
    yield make
    for h in made:
        h.close()


def test_passed_socket_is_the_one_serving(make_httpd, holders, child_model):
    port = free_ports(1)[0]
    held = listen_socket(LOOPBACK, port)
    holder = holders([held], names=["web"])
    directives = "BucketCount 2\n" + (EVENT_LIMITS if child_model == "event"
                                      else "")
    server = make_httpd(ports=[port], directives=directives)
    logger_env = server.root / "logger-env"
    # A piped logger is started with the server's environment.
    server.write_config(directives + f'CustomLog "|$env > {logger_env}; '
                        'exec cat >/dev/null" common\n')
    server.start(holder=holder)
    assert http_get(port)[0] == 200
    kids = children_of(server.pid)
    assert kids
    assert held_by_children(server, held)
    # Each child holds the held socket or its bucket's duplicate; the
    # parent holds the held socket itself, and no socket of its own is
    # bound to the port beside the buckets' duplicates.
    assert inode(held) in socket_inodes_of(server.pid)
    st = server.status()
    assert [b.get("inherited", 0) for b in st["buckets_list"]] == [1, 0]
    log = server.error_log()
    assert "BK00132" in log and '"web"' in log
    # What the server runs does not take the sockets for its own.
    wait_until(lambda: logger_env.exists() and logger_env.read_text(), 10,
               what="the piped logger's environment")
    assert "LISTEN_" not in logger_env.read_text()


def test_listen_pid_of_another_process_is_ignored(make_httpd, holders):
    held_port, own_port = free_ports(2)
    held = listen_socket(LOOPBACK, held_port)
    holder = holders([held])
    server = make_httpd(ports=[own_port])
    server.start(holder=holder, listen_pid=1)
    assert http_get(own_port)[0] == 200
    assert_not_adopted(server, own_port)
    assert "BK00130" in server.error_log()
    assert "LISTEN_PID=1 is not this process" in server.error_log()


def test_extra_and_missing_sockets(make_httpd, holders):
    """Listen A and B; A and C passed: A adopted, B bound by core, C logged
    and closed in httpd (the holder keeps its own)."""
    a, b, c = free_ports(3)
    held_a = listen_socket(LOOPBACK, a)
    held_c = listen_socket(LOOPBACK, c)
    holder = holders([held_a, held_c])
    server = make_httpd(ports=[a, b])
    server.start(holder=holder)
    assert http_get(a)[0] == 200 and http_get(b)[0] == 200
    inodes = socket_inodes_of(server.pid)
    assert inode(held_a) in inodes
    assert inode(held_c) not in inodes
    assert not held_by_children(server, held_c)
    log = server.error_log()
    assert "BK00134" in log and f"127.0.0.1:{c}" in log
    listen = server.status()["buckets_list"][0]
    assert listen.get("inherited", 0) == 1


def test_unusable_descriptors_cost_nothing(make_httpd, holders, tmp_path):
    """A file, a UDP socket and a unix listening socket passed before a
    good one: each logged with what it is, the good one serves."""
    port = free_ports(1)[0]
    afile = open(tmp_path / "not-a-socket", "w")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((LOOPBACK, 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "unix.sock"))
    unix.listen(1)
    held = listen_socket(LOOPBACK, port)
    holder = holders([afile, udp, unix, held])
    server = make_httpd(ports=[port])
    server.start(holder=holder)
    assert http_get(port)[0] == 200
    assert inode(held) in socket_inodes_of(server.pid)
    log = server.error_log()
    for why in ("is not a socket", "is a UDP socket, not TCP",
                "is a unix socket, not TCP"):
        assert why in log, why


@pytest.mark.parametrize("listen_fds", ["two", "0", "-1", "9999999"])
def test_bad_listen_fds_binds_its_own(make_httpd, holders, listen_fds):
    held_port, own_port = free_ports(2)
    held = listen_socket(LOOPBACK, held_port)
    holder = holders([held])
    server = make_httpd(ports=[own_port])
    server.start(holder=holder, listen_fds=listen_fds)
    assert http_get(own_port)[0] == 200
    assert_not_adopted(server, own_port)
    assert f"LISTEN_FDS={listen_fds} is not a number" in server.error_log()


def test_listen_fds_naming_more_than_passed(make_httpd, holders):
    """LISTEN_FDS=6 with one socket passed: the descriptors after it are
    httpd's own (or none) and are left alone."""
    port = free_ports(1)[0]
    held = listen_socket(LOOPBACK, port)
    holder = holders([held])
    server = make_httpd(ports=[port])
    server.start(holder=holder, listen_fds="6")
    assert http_get(port)[0] == 200
    assert inode(held) in socket_inodes_of(server.pid)
    # The error log, opened before the MPM reads LISTEN_FDS, still works.
    wait_until(lambda: "resuming normal operations" in server.error_log(),
               10, what="the error log to keep working")


def test_passed_socket_without_reuseport(make_httpd, holders, child_model):
    port = free_ports(1)[0]
    held = listen_socket(LOOPBACK, port, reuseport=False)
    holder = holders([held])
    directives = "BucketCount 3\n" + (EVENT_LIMITS if child_model == "event"
                                      else "")
    server = make_httpd(ports=[port], directives=directives)
    server.start(holder=holder)
    assert "BK00133" in server.error_log()
    assert "ReusePort=yes" in server.error_log()
    result = Load([port], count=600, threads=6).run()
    assert result.failed == 0, result
    accepted = [b["accepted"] for b in server.status()["buckets_list"]]
    assert all(n > 0 for n in accepted), accepted


def test_ipv6_and_wildcard(make_httpd, holders):
    """[::1]:P passed for Listen [::1]:P, and a dual-stack [::]:Q for
    Listen Q, which core also serves IPv4 from."""
    p, q = free_ports(2)
    v6 = listen_socket("::1", p)
    dual = listen_socket("::", q, v6only=False)
    holder = holders([v6, dual])
    server = make_httpd(ports=[q], directives=f"Listen [::1]:{p}\n")
    # make_httpd writes Listen 127.0.0.1:Q; make it the wildcard.
    server.write_config()
    server.conf.write_text(server.conf.read_text().replace(
        f"Listen {LOOPBACK}:{q}", f"Listen {q}"))
    server.start(holder=holder)
    inodes = socket_inodes_of(server.pid)
    assert inode(v6) in inodes and inode(dual) in inodes
    for host, port in (("::1", p), ("127.0.0.1", q), ("::1", q)):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as c:
            c.settimeout(5)
            c.connect((host, port))
            c.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            assert c.recv(64).startswith(b"HTTP/1.1 200"), (host, port)
    assert "BK00134" not in server.error_log()


def test_listen_streams_for_a_socket_unit(make_httpd):
    p, q = free_ports(2)
    server = make_httpd(ports=[p], directives=f"Listen {q}\n"
                        "Listen [::1]:443\n")
    cp = server.command("-t", "-D", "BUCKETED_LISTEN_STREAMS")
    assert cp.returncode == 0, cp.output
    assert cp.stdout.splitlines() == [f"ListenStream=127.0.0.1:{p}",
                                      f"ListenStream={q}",
                                      "ListenStream=[::1]:443"]


def test_full_restarts_under_load_lose_nothing(make_httpd, holders,
                                               child_model):
    """Graceful stop, then a new httpd, RESTARTS times, while clients send
    requests with Connection: close and on keep-alive connections: the
    connections that arrive while no httpd runs wait in the held socket's
    queue, and those queued on the buckets' own sockets move to it (Linux
    5.14+ migration) as they close. A keep-alive connection the stopping
    server closed while idle is reopened before a request is sent, as
    clients do; a request sent and not answered is a failure."""
    port = free_ports(1)[0]
    held = listen_socket(LOOPBACK, port)
    holder = holders([held])
    directives = "BucketCount 3\n" + (EVENT_LIMITS if child_model == "event"
                                      else "")
    server = make_httpd(ports=[port], directives=directives)
    server.start(holder=holder)
    close_load = Load([port], count=10 ** 6, threads=4, seconds=90,
                      minimum=1000).start()
    ka_load = KeepAliveLoad([port], threads=4, minimum=1000).start()

    def done():
        return close_load.done() + ka_load.done()
    for _ in range(RESTARTS):
        before = done()
        wait_until(lambda: done() > before + 200, 30,
                   what="requests served before the stop")
        server.signal(signal.SIGWINCH)
        assert server.wait_exit() == 0
        server.proc = None
        server.start(holder=holder, wait=False)
        wait_until(lambda: server.pidfile_pid() == server.pid, 20,
                   what="the new httpd")
    before = done()
    wait_until(lambda: done() > before + 200, 30,
               what="requests served after the last start")
    closed = close_load.stop()
    kept = ka_load.stop()
    print(f"{child_model}: {RESTARTS} full restarts: Connection: close "
          f"{closed}; keep-alive {kept}, {ka_load.reopened} reopened, "
          f"{ka_load.retries} GETs failed on a reused connection")
    assert server.error_log().count("resuming normal operations") \
        == RESTARTS + 1
    assert closed.failed == 0, closed.errors
    # Failed: every request sent and not answered, retried GETs included.
    assert kept.failed == 0, (ka_load.retries, kept.errors)
    assert closed.ok >= 1000 and kept.ok >= 1000
