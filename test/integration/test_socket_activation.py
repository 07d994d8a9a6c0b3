# SPDX-License-Identifier: Apache-2.0
"""Socket activation: listening sockets held by a service manager (here a
holder in the test process, as systemd's socket units hold them) and
passed to httpd as sd_listen_fds(3) describes. The passed socket is the one
that serves (the same inode), what is not meant for httpd or cannot serve
is logged and costs nothing, IPv4 and IPv6, and a full restart (graceful
stop, then start) under load fails no request because the held socket
queues the connections that arrive in between. The parent keeps every
passed socket for its life, so a reload can drop a Listen and a later one
bring it back; nothing passed, socket or variable, reaches a program the
server starts (a CGI, a piped logger), not even the first start-up pass's
piped ErrorLog."""
import os
import signal
import socket

import pytest

from bucketbench.activation import Holder, listen_socket
from event_server import KeepAliveLoad
from httpd_fixture import (LOOPBACK, Load, children_of, free_ports, http_get,
                           socket_inodes_of, wait_until)
from test_descriptors import (LOGGER, cgid_directives, install_fd_cgi,
                              parse_report, run_fd_cgi)

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


@pytest.fixture
def notify_path(tmp_path):
    """A datagram socket for the server's notifications, which it must
    not hand on; its path."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    yield str(tmp_path / "notify.sock")
    sock.close()


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


def graceful_restart(server):
    """SIGUSR1, and until the status page shows the next generation (on
    server.ports[0])."""
    generation = server.status()["generation"]
    server.signal(signal.SIGUSR1)
    wait_until(lambda: server.status()["generation"] == generation + 1, 20,
               what=f"generation {generation + 1}")


def test_extra_and_missing_sockets(make_httpd, holders):
    """Listen A and B; A and C passed: A adopted, B bound by core, C logged
    and kept in the parent alone (no child holds it) until a reload adds a
    Listen for it, which it then serves."""
    a, b, c = free_ports(3)
    held_a = listen_socket(LOOPBACK, a)
    held_c = listen_socket(LOOPBACK, c)
    holder = holders([held_a, held_c])
    server = make_httpd(ports=[a, b])
    server.start(holder=holder)
    assert http_get(a)[0] == 200 and http_get(b)[0] == 200
    inodes = socket_inodes_of(server.pid)
    assert inode(held_a) in inodes
    assert inode(held_c) in inodes
    assert not held_by_children(server, held_c)
    log = server.error_log()
    assert "BK00134" in log and f"127.0.0.1:{c}" in log
    assert "kept unused" in log
    listen = server.status()["buckets_list"][0]
    assert listen.get("inherited", 0) == 1

    server.ports = [a, b, c]
    server.write_config()
    graceful_restart(server)
    assert http_get(c)[0] == 200
    assert held_by_children(server, held_c)


def test_held_listen_dropped_and_restored(make_httpd, holders, child_model):
    """The socket unit holds A and B; a reload drops Listen A (core closes
    its copy), the next brings it back: the parent still has the passed
    socket and serves A from it rather than failing to bind it (EADDRINUSE,
    the server gone), twice over."""
    a, b = free_ports(2)
    held_a = listen_socket(LOOPBACK, a)
    held_b = listen_socket(LOOPBACK, b)
    holder = holders([held_a, held_b])
    directives = "BucketCount 2\n" + (EVENT_LIMITS if child_model == "event"
                                      else "")
    server = make_httpd(ports=[b, a], directives=directives)
    server.start(holder=holder)
    assert http_get(a)[0] == 200
    for _ in range(2):
        server.ports = [b]
        server.write_config()
        graceful_restart(server)
        # Only the parent keeps it, once the old generation has left.
        wait_until(lambda: not held_by_children(server, held_a), 20,
                   what="the children of the generation with Listen A "
                   "to leave")
        assert inode(held_a) in socket_inodes_of(server.pid)
        server.ports = [b, a]
        server.write_config()
        graceful_restart(server)
        assert http_get(a)[0] == 200 and http_get(b)[0] == 200
        assert held_by_children(server, held_a)
        assert sum(bucket.get("inherited", 0)
                   for bucket in server.status()["buckets_list"]) == 2
    assert not server.exited()
    assert server.error_log().count("BK00134") >= 2


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


def passed_kinds(tmp_path):
    """A unix listening socket, a UDP socket and a listening TCP socket
    (returned last), to pass in that order."""
    port = free_ports(1)[0]
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "unix.sock"))
    unix.listen(1)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((LOOPBACK, 0))
    return port, [unix, udp, listen_socket(LOOPBACK, port)]


def passed_in(fds, passed):
    """The descriptors of a report ({fd: readlink target}) that are one of
    the passed sockets."""
    targets = {f"socket:[{inode(sock)}]" for sock in passed}
    return {fd: t for fd, t in fds.items() if t in targets}


@pytest.mark.parametrize("cgi_module", ["cgi", "cgid"])
def test_cgi_inherits_no_passed_descriptor(make_httpd, holders, tmp_path,
                                           child_model, cgi_module):
    """Every passed descriptor is close-on-exec, whatever it is: a CGI
    (started from a child by mod_cgi, from its daemon by mod_cgid) holds
    none of them."""
    port, passed = passed_kinds(tmp_path)
    holder = holders(passed)
    directives = "BucketCount 2\n" + (EVENT_LIMITS if child_model == "event"
                                      else "")
    server = make_httpd(ports=[port], directives=directives,
                        cgi=cgi_module == "cgi")
    if cgi_module == "cgid":
        server.write_config(directives + cgid_directives(server))
    install_fd_cgi(server)
    server.start(holder=holder)
    for _ in range(4):
        fds, _ = run_fd_cgi(server)
        assert passed_in(fds, passed) == {}, fds


def test_piped_error_log_inherits_nothing_passed(make_httpd, holders,
                                                 tmp_path, notify_path):
    """Core starts a piped ErrorLog at the first start-up pass, before any
    open_logs of the MPM runs, and keeps it: no logger holds a passed
    socket or sees LISTEN_* or NOTIFY_SOCKET."""
    port, passed = passed_kinds(tmp_path)
    holder = holders(passed, names=["u", "d", "web"])
    server = make_httpd(ports=[port], environ={"NOTIFY_SOCKET": notify_path})
    logger = server.root / "logger.py"
    logger.write_text(LOGGER)
    logger.chmod(0o755)
    reports = server.root / "logs"
    # An environment and a descriptor report from each logger started.
    server.write_config(f'ErrorLog "|$env > {reports}/env.$$; '
                        f'exec {logger} {reports}/fds.$$"\n')
    server.start(holder=holder)
    assert http_get(port)[0] == 200

    def fd_reports():
        return [p for p in reports.glob("fds.*") if p.suffix != ".tmp"]
    wait_until(fd_reports, 10, what="the piped logger's report")
    for report in fd_reports():
        fds, _ = parse_report(report.read_text())
        assert fds and passed_in(fds, passed) == {}, (report.name, fds)
    for env in reports.glob("env.*"):
        names = {line.split("=", 1)[0]
                 for line in env.read_text().splitlines()}
        assert not names & {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES",
                            "NOTIFY_SOCKET"}, (env.name, names)


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
        server.restart_on_held_sockets(holder)
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
