# SPDX-License-Identifier: Apache-2.0
"""What /proc (and ss) tells about processes and sockets, shared by the
harness and the integration tests (test/integration): which processes run
and whose children they are, their CPU time and memory, the sockets they
hold and which ones listen. Also how to stop a child process.

Processes come and go while their files are read: one that is gone by the
time its file is opened is left out, never an error.

A server is the master process plus its descendants. CPU time of a child
that exits during a run is not lost: once the master reaps it, the kernel
adds it to the master's cutime/cstime, so the run time of the live
processes plus the master's cutime + cstime only grows."""

import os
import re
import signal
import subprocess

from .net import wait_until

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _read(path):
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read()


# ---------------------------------------------------------------- processes

def _stat_fields(pid):
    """Fields of /proc/<pid>/stat after the command name, which may itself
    contain spaces and parentheses: split after the last ')'. Field 0 is
    the state, 1 the ppid, 2 the process group. None when it is gone.
    Read with os.read: a scan of thousands of processes (a benchmark's
    servers) takes a quarter of the time a Python file object needs."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    end = data.rfind(b")")
    return data[end + 2:].decode("ascii").split() if end >= 0 else None


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _process_table():
    """{pid: (state, ppid, pgrp)} of every process, zombies included, read
    in one pass over /proc."""
    table = {}
    for pid in all_pids():
        fields = _stat_fields(pid)
        if fields:
            table[pid] = (fields[0], int(fields[1]), int(fields[2]))
    return table


def state(pid):
    """The state letter of /proc/<pid>/stat (R, S, T: stopped, Z: zombie,
    ...); None when the process is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields is not None else None


def alive(pid):
    """The process exists and is not a zombie."""
    return state(pid) not in (None, "Z")


def children_of(parent_pid):
    """Live (non-zombie) direct children of a process."""
    return sorted(pid for pid, (state, ppid, _) in _process_table().items()
                  if ppid == parent_pid and state != "Z")


def process_tree(root_pid):
    """root_pid and all its descendants; empty if root_pid is gone. Zombies
    are included: their CPU time is not yet in their parent's cutime."""
    children = {}
    table = _process_table()
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    tree = []
    pending = [root_pid] if root_pid in table else []
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, ()))
    return tree


def process_group(pgid):
    """Live (not zombie) processes in process group pgid. A member keeps
    the group id from being reused, so every pid listed really belongs to
    that group, even the children a dead master left behind."""
    return sorted(pid for pid, (state, _, pgrp) in _process_table().items()
                  if pgrp == pgid and state != "Z")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _line_starting(path, prefix):
    """The first line of a /proc file that starts with prefix; None when
    there is none or the file is gone."""
    try:
        text = _read(path)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(prefix):
            return line
    return None


def io_calls(pids, field):
    """read() (field "syscr") or write() ("syscw") system calls the
    processes have made so far, over all their threads (/proc/PID/io;
    processes gone count nothing)."""
    total = 0
    for pid in pids:
        line = _line_starting(f"/proc/{pid}/io", field + ":")
        if line is not None:
            total += int(line.split()[1])
    return total


def uids(pid):
    """(real, effective, saved, filesystem) uid of a process, from the Uid
    line of /proc/<pid>/status; None when it is gone."""
    line = _line_starting(f"/proc/{pid}/status", "Uid:")
    return tuple(int(uid) for uid in line.split()[1:]) if line else None


def processes_mentioning(text):
    """Live processes whose command line contains text (e.g. the path of a
    test's own configuration file: nobody else's processes match it)."""
    return sorted(pid for pid in all_pids()
                  if pid != os.getpid() and alive(pid)
                  and text in (_cmdline(pid) or ""))


# subprocess.Popen options for what serves the load (servers, their
# back-ends): a process group of its own, so that the harness can stop it and
# everything it forks (process_group()), but in the harness's session. With
# the kernel's autogroups (kernel.sched_autogroup_enabled, on in Debian) a
# session is a scheduling group, and the scheduler splits the CPUs evenly
# between busy groups: a server in a session of its own got half of this
# 2-core machine beside wrk's, however many of its processes were runnable,
# and one that needed more than a core queued its woken children for it
# (the prefork model's php-mod p99: docs/benchmarks-archive.md).
SERVER_PROCESS = {"process_group": 0}


def autogroup(pid):
    """The scheduling autogroup pid runs in ("/autogroup-N"), or None where
    the kernel has none."""
    try:
        return _read(f"/proc/{pid}/autogroup").split()[0]
    except (FileNotFoundError, IndexError):
        return None


def sigstop(pids, timeout=10):
    """SIGSTOPs each of pids (the ones gone skipped) and waits until each
    has stopped or is gone. Until then a process woken in accept() by the
    signal still takes a connection already queued, and holds it while
    stopped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    wait_until(lambda: all(state(pid) in ("T", None) for pid in pids),
               timeout, what=f"{len(pids)} process(es) to stop")


def stop_process(process, timeout):
    """SIGTERM to a child process (a subprocess.Popen) and a wait of up to
    timeout seconds; SIGKILL and another wait if it has not gone by then.
    Returns its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    return process.returncode


def kill_until_gone(find, timeout, what):
    """SIGKILL to every process find() lists, again until it lists none
    (which catches any they fork meanwhile); net.Timeout after timeout
    seconds."""
    def gone():
        pids = find()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not pids
    wait_until(gone, timeout, what=what)


# ---------------------------------------------------------------- CPU time

def _run_seconds(pid):
    """CPU seconds (user + system) of every thread of a live process, from
    the scheduler's nanosecond counter. /proc/<pid>/stat rounds each
    process down to whole clock ticks (10 ms), which loses most of the time
    of a thousand prefork children that each served a few requests."""
    total_ns = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total_ns += int(_read(f"/proc/{pid}/task/{task}/schedstat")
                            .split()[0])
        except FileNotFoundError:
            continue
    return total_ns / 1e9


def cpu_seconds(root_pid, pids):
    """CPU seconds (user + system) used so far by the server rooted at
    root_pid whose live processes are pids (see process_tree), including
    its children that have exited and been reaped."""
    seconds = 0.0
    for pid in pids:
        try:
            seconds += _run_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if pid == root_pid:
            # After the command name: field 0 is state; cutime and
            # cstime are fields 13 and 14 (stat(5) numbers them 16, 17).
            fields = _stat_fields(pid)
            if fields:
                seconds += (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return seconds


def machine_busy_seconds():
    """CPU seconds the whole machine has been busy since boot, summed over
    all cores, from the first line of /proc/stat: user, nice, system, irq,
    softirq and steal; not idle or iowait. Guest time is already in user."""
    fields = [int(v) for v in _read("/proc/stat").splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


# ---------------------------------------------------------------- memory

def smaps_rollup_kb(pid):
    """The kB fields of /proc/<pid>/smaps_rollup ({"Rss": ..., "Pss": ...});
    None when the process is gone or not ours to read."""
    try:
        rollup = _read(f"/proc/{pid}/smaps_rollup")
    except OSError:
        return None
    fields = {}
    for line in rollup.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith(":") and parts[2] == "kB":
            fields[parts[0][:-1]] = int(parts[1])
    return fields


def pss_bytes(pids):
    """Proportional set size summed over a server's processes: shared pages
    are split between the processes that map them, so the sum is what the
    server as a whole costs in memory."""
    total_kb = 0
    for pid in pids:
        fields = smaps_rollup_kb(pid)
        if fields:
            total_kb += fields.get("Pss", 0)
    return total_kb * 1024


def rss_bytes(pids):
    """Resident set size summed over processes, from /proc/<pid>/statm,
    which anyone may read: shared pages count once per process."""
    total_pages = 0
    for pid in pids:
        try:
            total_pages += int(_read(f"/proc/{pid}/statm").split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total_pages * os.sysconf("SC_PAGE_SIZE")


def server_memory(pids):
    """(kind, bytes) of a server's processes: ("pss", pss_bytes) when every
    process's smaps_rollup is readable, else ("rss", rss_bytes)."""
    rollups = [smaps_rollup_kb(pid) for pid in pids]
    if all(rollup is not None for rollup in rollups):
        return "pss", sum(rollup.get("Pss", 0) for rollup in rollups) * 1024
    return "rss", rss_bytes(pids)


def open_files_limit(pid):
    """The soft RLIMIT_NOFILE of a process, from /proc/<pid>/limits (None
    when gone; float('inf') for unlimited)."""
    line = _line_starting(f"/proc/{pid}/limits", "Max open files")
    if line is None:
        return None
    soft = line.split()[3]
    return float("inf") if soft == "unlimited" else int(soft)


# ---------------------------------------------------------------- sockets

def proc_listening_inodes(port):
    """Inodes of the TCP sockets in LISTEN state on a local port (IPv4 and
    IPv6), read from /proc/net/tcp*: one entry per socket, SO_REUSEPORT
    duplicates included. Slow when the tables hold many connections (TIME_WAIT
    after a benchmark): listening_inodes() asks the kernel to filter."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "0A":
                inodes.add(int(fields[9]))
    return inodes


def ss_listening(port):
    """`ss -Hltne` rows for sockets listening on a local port, as dicts with
    the connections waiting in the accept queue (ss's Recv-Q), its limit
    (the backlog, ss's Send-Q) and the inode."""
    out = subprocess.run(["ss", "-Hltne", f"sport = :{port}"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        fields = line.split()
        inode = re.search(r"\bino:(\d+)", line)
        rows.append({"queued": int(fields[1]), "backlog": int(fields[2]),
                     "local": fields[3],
                     "inode": int(inode.group(1)) if inode else None})
    return rows


def listening_inodes(port):
    """Inodes of the sockets listening on a local port, SO_REUSEPORT
    duplicates included."""
    return {row["inode"] for row in ss_listening(port)}


def started_s_ago(pid):
    """Seconds since the process started (its start time in /proc/<pid>/
    stat, clock ticks after boot, against /proc/uptime); None when it is
    gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    started = int(fields[19]) / CLOCK_TICKS
    return float(_read("/proc/uptime").split()[0]) - started


def holders_of(inodes, pids):
    """Of pids, those holding a socket whose inode is in inodes, in
    order."""
    inodes = set(inodes)
    return [pid for pid in pids if socket_inodes_of(pid) & inodes]


def established_inodes(port):
    """Inodes of the connected TCP sockets whose local port is port (the
    server's side of its clients' connections)."""
    out = subprocess.run(["ss", "-Htne", "state", "established",
                          f"sport = :{port}"],
                         capture_output=True, text=True, check=True).stdout
    return {int(m.group(1)) for m in re.finditer(r"\bino:(\d+)", out)}


def socket_inodes_of(pid):
    """Inodes of every socket a process holds open."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]$", target)
        if m:
            inodes.add(int(m.group(1)))
    return inodes


# ---------------------------------------------------------------- kernel

# The TcpExt counters (nstat's names without the prefix) that say a
# connection waited or was dropped: a full accept queue (ListenOverflows;
# ListenDrops counts those and other drops), a SYN or SYN-ACK sent again
# (TCPSynRetrans, one per retransmission: a handshake that waited a second
# or more), a request that could not move to another socket of its group
# when one closed (TCPMigrateReqFailure), and resets sent for a connection
# closed with data unread or sent data after its close (TCPAbortOnData).
TCP_COUNTERS = ("ListenOverflows", "ListenDrops", "TCPSynRetrans",
                "TCPMigrateReqFailure", "TCPAbortOnData")


def tcp_counters(path="/proc/net/netstat"):
    """The TCP_COUNTERS of the harness's network namespace (every socket
    in it: loopback's clients and servers alike), as a dict; a counter the
    kernel does not have (TCPMigrateReq* before 5.14) is left out."""
    lines = _read(path).splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            found = dict(zip(names.split()[1:], values.split()[1:]))
            return {name: int(found[name]) for name in TCP_COUNTERS
                    if name in found}
    return {}


def counter_deltas(before, after):
    """after - before for each counter both have."""
    return {name: after[name] - before[name]
            for name in TCP_COUNTERS if name in before and name in after}


def sum_counters(deltas):
    """counter_deltas() results added up, counter by counter."""
    total = {}
    for delta in deltas:
        for name, value in delta.items():
            total[name] = total.get(name, 0) + value
    return total
