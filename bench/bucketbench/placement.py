# SPDX-License-Identifier: Apache-2.0
"""Where the servers and the load tools run: two disjoint CPU sets.

On a many-core box the client must not compete with the server for its
CPUs, or the run measures the client as much as the MPM. bench/run
--server-cpus pins every server (the parent pinned before it starts, its
children and threads inherit the mask); --client-cpus pins the harness
itself, so every load tool it starts (wrk, h2load) and its own Python
clients inherit that mask. Inheritance is checked, not assumed:
check_tree() reads Cpus_allowed_list of every thread of the server's
processes and of each load tool after it started (proc_pid_status(5)).
A child may hold a narrower mask than its parent (BucketAffinity keeps a
bucket's children on CPUs of their own, chosen among the parent's), so a
process passes when its CPUs are a non-empty subset of its set."""

import os
from dataclasses import dataclass

from . import procfs


class PlacementError(Exception):
    """Bad CPU lists, or a process found outside its CPU set."""


def parse_cpu_list(text, option):
    """The CPUs of a list like "0-3,8,10-11" (the kernel's cpulist format,
    taskset -c's), sorted, each once."""
    cpus = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        low, _, high = item.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise PlacementError(f"{option}: {item!r} is not a CPU number "
                                 f"or a range like 2-5") from None
        if first < 0 or last < first:
            raise PlacementError(f"{option}: {item!r} is not a CPU number "
                                 f"or a range like 2-5")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise PlacementError(f"{option}: no CPU given")
    return tuple(sorted(cpus))


def format_cpu_list(cpus):
    """The kernel's cpulist spelling of cpus: (0, 1, 2, 5) is "0-2,5"."""
    ranges = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@dataclass(frozen=True)
class Placement:
    """The servers' and the load tools' CPUs; None: not pinned (every CPU
    this process may use)."""
    server_cpus: tuple = None
    client_cpus: tuple = None

    @property
    def shared(self):
        """True when the load tools may run on the servers' CPUs."""
        return self.server_cpus is None or self.client_cpus is None

    def warning(self):
        """What an operator should know about a shared placement, or None."""
        if not self.shared:
            return None
        return ("the load tools share the servers' CPUs, so the results "
                "measure the client as much as the servers; on a box with "
                "CPUs to spare pass --server-cpus and --client-cpus")

    def record(self):
        """For meta.json."""
        return {"server_cpus": _listed(self.server_cpus),
                "client_cpus": _listed(self.client_cpus),
                "shared": self.shared}

    def with_server_cores(self, count):
        """The placement of a --server-cores point: the first count of the
        servers' CPUs."""
        return Placement(self.server_cpus[:count], self.client_cpus)


def _listed(cpus):
    return None if cpus is None else format_cpu_list(cpus)


def choose(server_text, client_text, usable):
    """The Placement of --server-cpus and --client-cpus (either may be
    None) among the CPUs this process may use. Given one, the other set
    is the rest of the usable CPUs."""
    if server_text is None and client_text is None:
        return Placement()
    usable = tuple(sorted(usable))
    server = parse_cpu_list(server_text, "--server-cpus") \
        if server_text is not None else None
    client = parse_cpu_list(client_text, "--client-cpus") \
        if client_text is not None else None
    for option, cpus in (("--server-cpus", server),
                         ("--client-cpus", client)):
        outside = [cpu for cpu in cpus or () if cpu not in usable]
        if outside:
            raise PlacementError(
                f"{option}: CPU {format_cpu_list(outside)} is not one this "
                f"process may run on ({format_cpu_list(usable)}; see nproc "
                f"and taskset -p $$)")
    if server is None:
        server = tuple(cpu for cpu in usable if cpu not in client)
    if client is None:
        client = tuple(cpu for cpu in usable if cpu not in server)
    overlap = sorted(set(server) & set(client))
    if overlap:
        raise PlacementError(
            f"--server-cpus and --client-cpus overlap on CPU "
            f"{format_cpu_list(overlap)}: the sets must be disjoint, or the "
            f"load tools compete with the servers")
    if not server or not client:
        empty = "--server-cpus" if not server else "--client-cpus"
        raise PlacementError(f"{empty}: no CPU left for it (usable: "
                             f"{format_cpu_list(usable)})")
    return Placement(server, client)


def server_process(cpus):
    """subprocess.Popen options for what serves the load (servers, their
    back-ends): procfs.SERVER_PROCESS, and the servers' CPUs set in the
    child before it runs the program (cpus None: not pinned)."""
    options = dict(procfs.SERVER_PROCESS)
    if cpus is not None:
        options["preexec_fn"] = lambda: os.sched_setaffinity(0, cpus)
    return options


def pin_self(cpus):
    """Pins this process (and so everything it starts from now on), and
    checks that it took."""
    if cpus is None:
        return
    os.sched_setaffinity(0, cpus)
    if set(os.sched_getaffinity(0)) != set(cpus):
        raise PlacementError(f"the harness asked for CPU "
                             f"{format_cpu_list(cpus)} and got "
                             f"{format_cpu_list(os.sched_getaffinity(0))}")


def allowed_cpus(pid, tid=None):
    """The CPUs a process (or one of its threads) may run on, from its
    Cpus_allowed_list; None when it is gone."""
    path = f"/proc/{pid}/status" if tid is None \
        else f"/proc/{pid}/task/{tid}/status"
    try:
        with open(path) as status:
            for line in status:
                if line.startswith("Cpus_allowed_list:"):
                    return parse_cpu_list(line.split(":", 1)[1],
                                          "Cpus_allowed_list")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def _threads(pid):
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return []


def check_tree(pids, cpus, what):
    """Checks that every thread of pids runs on a non-empty subset of cpus;
    returns {pid: its cpulist} as read (pids that exited meanwhile are left
    out). PlacementError names the first process outside."""
    seen = {}
    for pid in pids:
        for tid in _threads(pid) or [None]:
            found = allowed_cpus(pid, tid)
            if found is None:
                continue
            if not set(found) <= set(cpus):
                who = f"process {pid}" if tid in (None, pid) \
                    else f"thread {tid} of process {pid}"
                raise PlacementError(
                    f"{what}: {who} may run on CPU {format_cpu_list(found)}, "
                    f"outside its set {format_cpu_list(cpus)}")
            if tid in (None, pid):
                seen[pid] = format_cpu_list(found)
    return seen


def check_client(pid, what):
    """Checks that a load tool the harness started runs on the harness's
    own CPUs (the client set when pinned: pin_self); returns its cpulist
    as read (None: it had already exited). Popen returns after the exec,
    so the mask is inherited by then; threads the tool starts later
    inherit it in turn."""
    mine = tuple(sorted(os.sched_getaffinity(0)))
    return check_tree([pid], mine, what).get(pid)
