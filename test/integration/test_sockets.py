# SPDX-License-Identifier: Apache-2.0
"""
Start-up, module identity and the listening sockets of each bucket, with
SO_REUSEPORT and without it (bench/noreuseport.so in httpd's LD_PRELOAD
makes setsockopt(SO_REUSEPORT) fail as on kernels before 3.9).
"""
import ctypes
import fcntl
import os
import re
import subprocess

import pytest

from httpd_fixture import (BUILD, CHILD_MODELS, INDEX_BODY, LOOPBACK,
                           NOREUSEPORT_SO, children_of, http_get,
                           listening_inodes, need_build,
                           proc_listening_inodes, process_env,
                           socket_inodes_of, ss_listening, wait_until,
                           waiting_in)


def assert_serves(server):
    for port in server.ports:
        status, body = http_get(port)
        assert (status, body) == (200, INDEX_BODY), f"port {port}"


def test_module_identity_and_service(make_httpd):
    server = make_httpd(directives="BucketCount 4")

    syntax = server.command("-t")
    assert syntax.returncode == 0, syntax.output
    assert "Syntax OK" in syntax.output
    # -t says which build would run what, in words.
    assert re.search(r"bucketed: version [0-9][0-9.]*: strategy reuseport "
                     r"\(.*\): 4 bucket\(s\), "
                     r"each with its own socket for each of the 1 Listen "
                     r"address\(es\) \(4 sockets, 3 of them SO_REUSEPORT "
                     r"duplicates\); children block in accept\(\)",
                     syntax.output), syntax.output
    modules = server.command("-M")
    assert modules.returncode == 0, modules.output
    assert "mpm_bucketed_module (shared)" in modules.output
    version = server.command("-V")
    assert re.search(r"^Server MPM:\s+bucketed$", version.output, re.M), \
        version.output

    server.start()
    assert_serves(server)
    status = server.status()
    assert status["mpm"] == "bucketed"
    assert status["strategy"] == "reuseport"
    assert status["buckets"] == 4
    assert "SO_REUSEPORT yes" in status["kernel"]
    log = server.error_log()
    assert re.search(r"bucketed: strategy reuseport \(.*\): 4 bucket\(s\), "
                     r"each with its own socket for each of the 1 Listen", log), \
        log
    assert re.search(r"bucketed: kernel \S+: SO_REUSEPORT yes", log), log


@pytest.mark.parametrize("listens", [1, 2])
def test_every_bucket_has_a_socket_per_port(make_httpd, listens, child_model):
    server = make_httpd(listens=listens,
                        directives=CHILD_MODELS[child_model]
                                   + "BucketCount 4\nStartServers 8\n"
                                   "ListenBacklog 77")
    server.start()
    status = server.status()
    assert status["buckets"] == 4
    addresses = sorted(f"{LOOPBACK}:{port}" for port in server.ports)
    for bucket in status["buckets_list"]:
        # Every bucket accepts on every address: a busy port can use every
        # child.
        assert bucket["sockets"] == listens
        assert sorted(bucket["listen"]) == addresses
    every_inode = set()
    for port in server.ports:
        inodes = proc_listening_inodes(port)
        rows = ss_listening(port)
        print(f"port {port}: {rows}")
        assert len(inodes) == 4
        assert {r["inode"] for r in rows} == inodes
        # Core's original and bucketed's SO_REUSEPORT duplicates alike.
        assert {r["backlog"] for r in rows} == {77}
        every_inode |= inodes

    # The parent holds every socket; a child only its own bucket's (one per
    # port, from just after its fork on), and together the children cover
    # all of them.
    assert every_inode <= socket_inodes_of(server.pid)

    def bucket_sets():
        """The children's socket sets, once every child holds its bucket's
        only and the children of all four buckets are there."""
        held = set()
        for child in children_of(server.pid):
            mine = socket_inodes_of(child) & every_inode
            if len(mine) != listens:
                return None
            held.add(frozenset(mine))
        return held if len(held) == 4 else None
    held = wait_until(bucket_sets, 10,
                      what=f"every child to hold {listens} socket(s), "
                           f"children in all 4 buckets")
    assert set().union(*held) == every_inode
    assert_serves(server)


def test_listen_strategy_one_bucket_per_listen(make_httpd):
    server = make_httpd(listens=2, directives="BucketStrategy listen\n"
                                              "BucketCount 4")
    server.start()
    status = server.status()
    assert status["strategy"] == "listen"
    assert status["buckets"] == 2
    assert [b["sockets"] for b in status["buckets_list"]] == [1, 1]
    assert sorted(b["listen"][0] for b in status["buckets_list"]) == \
        sorted(f"{LOOPBACK}:{p}" for p in server.ports)
    for port in server.ports:
        assert len(listening_inodes(port)) == 1
    assert_serves(server)


@pytest.mark.parametrize("ratio", [1, 2])
def test_cores_buckets_ratio_sets_bucket_count(make_httpd, ratio):
    cpus = os.sysconf("SC_NPROCESSORS_ONLN")
    server = make_httpd(directives=f"ListenCoresBucketsRatio {ratio}")
    server.start()
    assert server.status()["buckets"] == max(1, cpus // ratio)
    assert_serves(server)


@pytest.mark.parametrize("extra", [
    "BucketCount 1",
    "BucketCount 4",
    "BucketStrategy listen",
    # Core would bind the originals with SO_REUSEPORT for this directive;
    # bucketed keeps it from core.
    "ListenCoresBucketsRatio 1",
])
def test_second_server_on_same_port_refused(make_httpd, extra):
    first = make_httpd(directives=extra)
    first.start()
    sockets = listening_inodes(first.ports[0])
    second = make_httpd(ports=first.ports, directives=extra)
    second.start(wait=False)
    port = first.ports[0]
    wait_until(lambda: second.exited() or socket_inodes_of(second.pid)
               & listening_inodes(port), 20,
               what="the second server to fail or to bind")
    assert second.exited() and second.proc.returncode != 0, \
        f"the second server runs beside the first: " \
        f"{len(listening_inodes(port))} sockets on the port"
    assert "Address already in use" in second.output()
    assert listening_inodes(port) == sockets
    assert_serves(first)


def test_cores_buckets_ratio_zero_means_no_duplicates(make_httpd):
    """Stock httpd's default, written out in a configuration: accepted,
    and as in stock httpd no SO_REUSEPORT socket is opened."""
    server = make_httpd(listens=2, directives="ListenCoresBucketsRatio 0")
    syntax = server.command("-t")
    assert syntax.returncode == 0, syntax.output
    assert "ListenCoresBucketsRatio 0" in syntax.output
    server.start()
    status = server.status()
    assert status["strategy"] == "listen"
    assert status["buckets"] == 2
    for port in server.ports:
        assert len(listening_inodes(port)) == 1
    assert_serves(server)


# ------------------------------------------------ without SO_REUSEPORT

@pytest.fixture
def make_shimmed(make_httpd):
    """Servers whose httpd runs with LD_PRELOAD=bench/noreuseport.so."""
    need_build(NOREUSEPORT_SO)

    def make(**kwargs):
        return make_httpd(preload=NOREUSEPORT_SO, **kwargs)
    return make


@pytest.mark.parametrize("listens", [1, 2])
def test_no_reuseport_falls_back_to_listen_buckets(make_shimmed, listens):
    # BucketCount 4 would need duplicates; without SO_REUSEPORT auto must
    # not try them.
    server = make_shimmed(listens=listens, directives="BucketCount 4")
    server.start()
    status = server.status()
    assert status["strategy"] == "listen"
    assert status["buckets"] == listens
    assert "SO_REUSEPORT no" in status["kernel"]
    assert re.search(r"bucketed: kernel \S+: SO_REUSEPORT no",
                     server.error_log())
    for port in server.ports:
        assert len(listening_inodes(port)) == 1
    assert_serves(server)


def test_reuseport_strategy_refused_without_reuseport(make_shimmed):
    server = make_shimmed(listens=2, directives="BucketStrategy reuseport")
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert "SO_REUSEPORT" in syntax.output
    assert "Syntax OK" not in syntax.output

    server.start(wait=False)
    assert server.wait_exit() != 0
    assert "SO_REUSEPORT" in server.output()
    for port in server.ports:
        assert not listening_inodes(port)
    assert not server.leftovers()


def test_sys_probe_unit_test_under_shim():
    binary = BUILD / "test" / "unit" / "test_sys_probe"
    need_build(binary, NOREUSEPORT_SO)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    expect = {"BUCKETED_EXPECT_NO_REUSEPORT": "1"}
    shimmed = subprocess.run([str(binary)], capture_output=True, text=True,
                             timeout=60,
                             env=process_env(NOREUSEPORT_SO, expect, path))
    assert shimmed.returncode == 0, shimmed.stdout + shimmed.stderr
    # The expectation has teeth: on this kernel, without the shim, it fails.
    plain = subprocess.run([str(binary)], capture_output=True, text=True,
                           timeout=60, env=process_env(None, expect, path))
    assert plain.returncode != 0, plain.stdout + plain.stderr


def listening_fd_of(pid, port):
    """A descriptor number in process pid of a socket listening on port."""
    inodes = {str(i) for i in listening_inodes(port)}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return int(fd)
    raise AssertionError(f"process {pid} holds no socket of port {port}")


def make_non_blocking(pid, fd):
    """Sets O_NONBLOCK on the open file behind descriptor fd of process pid,
    through a copy of that descriptor (pidfd_getfd(2), Linux 5.6): what the
    parent does to a socket for a generation that gives its bucket several
    sockets."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        mine = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if mine < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd({pid}, {fd}): "
                               f"{os.strerror(err)}")
    finally:
        os.close(pidfd)
    try:
        flags = fcntl.fcntl(mine, fcntl.F_GETFL)
        fcntl.fcntl(mine, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    finally:
        os.close(mine)


def asleep_waiting(pid):
    """Whether a process waits in accept4() or epoll_pwait() (or is gone:
    not spinning either)."""
    try:
        calls = waiting_in(pid)
    except FileNotFoundError:
        return True
    return set(calls) <= {"accept4", "epoll_pwait"}


SYS_PIDFD_GETFD = 438


def test_a_child_whose_one_socket_turns_non_blocking_does_not_spin(
        make_httpd):
    """A bucket's socket is one open file with every generation's copies,
    and the parent makes it non-blocking for a generation that gives the
    bucket several sockets (a reload that adds a Listen), while the
    children of the generation before, one socket each, still block in
    accept(). Such a child then got EAGAIN at once, again and again, and
    ran flat out until it left: under the soak's reloads, hundreds at once
    on two cores, so that no new child could start for 30 s. Here the test
    makes the socket non-blocking itself; each child, once it has served
    a request, must sleep again (in epoll_wait) and go on serving."""
    server = make_httpd(directives="BucketCount 1\nStartServers 3\n"
                                   "MinSpareServers 1\nMaxSpareServers 8")
    server.start()
    port = server.ports[0]
    children = wait_until(lambda: children_of(server.pid)
                          if len(children_of(server.pid)) >= 3 else None,
                          20, what="three children")
    wait_until(lambda: all(asleep_waiting(c) for c in children), 20,
               what="the children asleep in accept()")
    make_non_blocking(children[0], listening_fd_of(children[0], port))
    # Each blocked accept() returns with a connection; the next one finds
    # the socket non-blocking. Enough requests that every child gets one.
    for _ in range(10 * len(children)):
        assert http_get(port) == (200, INDEX_BODY)
    wait_until(lambda: all(asleep_waiting(c) for c in children_of(
        server.pid)), 20, what="every child asleep again, none spinning "
                               "on EAGAIN")
    assert_serves(server)
    assert "waits in epoll from now on" in server.error_log()
