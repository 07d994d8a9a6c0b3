"""What /proc tells about a server's processes: their CPU time and memory.

A server is the master process the harness started plus its descendants.
CPU time of a child that exits during a run is not lost: once the master
reaps it, the kernel adds it to the master's cutime/cstime, so the run time
of the live processes plus the master's cutime + cstime only grows."""

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _read(path):
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read()


def _stat_fields(pid):
    """Fields of /proc/<pid>/stat after the command name, which may itself
    contain spaces and parentheses: split after the last ')'."""
    text = _read(f"/proc/{pid}/stat")
    return text[text.rindex(")") + 2:].split()


def _children(pid):
    """Direct children of pid, from every thread's children list."""
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children.extend(int(c) for c in
                            _read(f"/proc/{pid}/task/{task}/children").split())
        except FileNotFoundError:
            continue
    return children


def process_tree(root_pid):
    """root_pid and all its live descendants; empty if root_pid is gone."""
    tree = []
    pending = [root_pid]
    while pending:
        pid = pending.pop()
        try:
            pending.extend(_children(pid))
        except FileNotFoundError:
            continue
        tree.append(pid)
    return tree


def process_group(pgid):
    """Live (not zombie) processes in process group pgid. A member keeps
    the group id from being reused, so every pid listed really belongs to
    that group, even the children a dead master left behind."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            # After the command name: state, ppid, then pgrp.
            state, _ppid, pgrp = _stat_fields(entry)[:3]
            if int(pgrp) == pgid and state != "Z":
                members.append(int(entry))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return members


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
            if pid == root_pid:
                # After the command name: field 0 is state; cutime and
                # cstime are fields 13 and 14 (stat(5) numbers them 16, 17).
                fields = _stat_fields(pid)
                seconds += (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        except (FileNotFoundError, ProcessLookupError):
            continue
    return seconds


def pss_bytes(pids):
    """Proportional set size summed over a server's processes: shared pages
    are split between the processes that map them, so the sum is what the
    server as a whole costs in memory."""
    total_kb = 0
    for pid in pids:
        try:
            rollup = _read(f"/proc/{pid}/smaps_rollup")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total_kb += int(line.split()[1])
                break
    return total_kb * 1024


def machine_busy_seconds():
    """CPU seconds the whole machine has been busy since boot, summed over
    all cores, from the first line of /proc/stat: user, nice, system, irq,
    softirq and steal; not idle or iowait. Guest time is already in user."""
    fields = [int(v) for v in _read("/proc/stat").splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
