# SPDX-License-Identifier: Apache-2.0
"""The helpers the harness shares with the integration tests (net, procfs),
against real processes and loopback sockets."""
import os
import signal
import socket
import subprocess
import sys

import pytest

from bucketbench import net, procfs

TIMEOUT_S = 10


def test_http_get_returns_status_and_body_of_any_answer(web_server):
    port, seen = web_server
    assert net.http_get(port, "/") == (200, b"hello\n")
    assert net.http_get(port, "/missing") == (404, b"nothing here\n")
    assert seen == [("/", "close"), ("/missing", "close")]


def test_free_ports_differ_and_can_be_bound():
    ports = net.free_ports(3)
    assert len(set(ports)) == 3
    assert all(net.port_is_free(port) for port in ports)


def test_busy_port_and_refused_connection():
    with socket.socket() as holder:
        holder.bind((net.LOOPBACK, 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not net.port_is_free(port)
        assert not net.connection_refused(port)
        inode = os.fstat(holder.fileno()).st_ino
        assert procfs.listening_inodes(port) == {inode}
        assert procfs.proc_listening_inodes(port) == {inode}
        assert inode in procfs.socket_inodes_of(os.getpid())
    assert net.connection_refused(port)
    assert procfs.listening_inodes(port) == set()


def test_wait_until_returns_the_value_or_times_out():
    assert net.wait_until(lambda: 42, TIMEOUT_S) == 42
    with pytest.raises(net.Timeout, match="the impossible"):
        net.wait_until(lambda: False, 0.1, what="the impossible")


# A shell in a session of its own with two sleeping children.
FAMILY = "sleep 60 & sleep 60 & wait"


def test_process_family_and_its_end():
    shell = subprocess.Popen(["sh", "-c", FAMILY], start_new_session=True)
    try:
        kids = net.wait_until(
            lambda: len(procfs.children_of(shell.pid)) == 2
            and procfs.children_of(shell.pid), TIMEOUT_S,
            what="the two sleeps")
        assert sorted(procfs.process_tree(shell.pid)) == \
            sorted([shell.pid, *kids])
        assert procfs.process_group(shell.pid) == sorted([shell.pid, *kids])
        # Until each child has exec'd sleep, its command line is the shell's.
        net.wait_until(lambda: procfs.processes_mentioning(FAMILY)
                       == [shell.pid], TIMEOUT_S, what="the sleeps to exec")
        assert all(procfs.alive(pid) for pid in kids)
        assert procfs.cpu_seconds(shell.pid, [shell.pid, *kids]) >= 0
        # The shell waits for its children: SIGTERM ends it, not them.
        assert procfs.stop_process(shell, TIMEOUT_S) == -signal.SIGTERM
        assert procfs.process_group(shell.pid) == kids
        procfs.kill_until_gone(lambda: procfs.process_group(shell.pid),
                               TIMEOUT_S, what="the sleeps to go")
        assert not any(procfs.alive(pid) for pid in kids)
    finally:
        for pid in procfs.process_group(shell.pid):
            os.kill(pid, signal.SIGKILL)
        shell.wait()


def test_zombie_counts_in_the_tree_not_among_live_children():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        net.wait_until(lambda: not procfs.alive(child.pid), TIMEOUT_S,
                       what="the child to exit")
        # Not reaped yet: a zombie, whose CPU time its parent lacks so far.
        assert child.pid in procfs.process_tree(os.getpid())
        assert child.pid not in procfs.children_of(os.getpid())
    finally:
        child.wait()
    assert child.pid not in procfs.process_tree(os.getpid())


def test_uids_follow_an_identity_change():
    assert procfs.uids(os.getpid())[:3] == os.getresuid()
    assert procfs.uids(2 ** 22 + 1) is None       # above the highest pid_max
    if os.geteuid() != 0:
        pytest.fail("must run as root to change a child's identity")
    nobody = 65534
    child = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; os.setresuid(%d, %d, %d); "
         "sys.stdin.read()" % (nobody, nobody, nobody)], stdin=subprocess.PIPE)
    try:
        net.wait_until(lambda: procfs.uids(child.pid) == (nobody,) * 4,
                       TIMEOUT_S, what="the child to become nobody")
    finally:
        child.communicate(b"", timeout=TIMEOUT_S)
    assert procfs.uids(child.pid) is None


def test_memory_of_this_process():
    fields = procfs.smaps_rollup_kb(os.getpid())
    assert fields["Pss"] > 0 and fields["Rss"] >= fields["Pss"]
    gone = 2 ** 22 + 1          # above the highest pid_max
    assert procfs.smaps_rollup_kb(gone) is None
    assert procfs.pss_bytes([os.getpid()]) > 0
    assert procfs.pss_bytes([gone]) == 0


def test_a_server_process_shares_the_load_tools_scheduling_group():
    """A server starts in a process group of its own (the harness stops it
    by that group) but in the harness's session, hence its autogroup: the
    scheduler does not hold it to an even share beside wrk's."""
    process = subprocess.Popen(["sleep", "30"], **procfs.SERVER_PROCESS)
    try:
        assert os.getpgid(process.pid) == process.pid
        assert os.getsid(process.pid) == os.getsid(0)
        assert procfs.process_group(process.pid) == [process.pid]
        assert procfs.autogroup(process.pid) == procfs.autogroup(os.getpid())
    finally:
        procfs.stop_process(process, 10)
    with subprocess.Popen(["sleep", "30"], start_new_session=True) as apart:
        try:
            if procfs.autogroup(os.getpid()) is not None:
                assert (procfs.autogroup(apart.pid)
                        != procfs.autogroup(os.getpid()))
        finally:
            procfs.stop_process(apart, 10)


NETSTAT = ("TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPSynRetrans "
           "TCPAbortOnData\n"
           "TcpExt: 4 10 11 7 3\n"
           "IpExt: InNoRoutes ListenOverflows\n"
           "IpExt: 0 99\n")


def test_tcp_counters_from_a_kernel_without_some(tmp_path):
    """The TcpExt counters are read by name; one this kernel lacks
    (TCPMigrateReqFailure before 5.14) is left out, here and in a
    difference."""
    path = tmp_path / "netstat"
    path.write_text(NETSTAT)
    counters = procfs.tcp_counters(str(path))
    assert counters == {"ListenOverflows": 10, "ListenDrops": 11,
                        "TCPSynRetrans": 7, "TCPAbortOnData": 3}
    later = dict(counters, ListenOverflows=13, TCPMigrateReqFailure=2)
    assert procfs.counter_deltas(counters, later) == {
        "ListenOverflows": 3, "ListenDrops": 0, "TCPSynRetrans": 0,
        "TCPAbortOnData": 0}


def test_a_full_accept_queue_is_counted():
    """Connections to a socket that never accepts and has room for one
    overflow its queue: the kernel's ListenOverflows grows."""
    before = procfs.tcp_counters()
    with socket.socket() as listener:
        listener.bind((net.LOOPBACK, 0))
        listener.listen(0)
        clients = []
        try:
            for _ in range(4):
                client = socket.socket()
                clients.append(client)
                client.setblocking(False)
                client.connect_ex(listener.getsockname())
            assert net.wait_until(
                lambda: procfs.counter_deltas(
                    before, procfs.tcp_counters())["ListenOverflows"] > 0,
                TIMEOUT_S)
        finally:
            for client in clients:
                client.close()
