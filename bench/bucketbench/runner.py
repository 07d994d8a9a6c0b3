# SPDX-License-Identifier: Apache-2.0
"""The measurement loop.

For each kernel level and workload, every server is started fresh (all at
once, each on its own ports), warmed up, and stays up for that workload's
sweep. For each concurrency N rounds run the servers one after another in
a fixed order (A B C A B C ...), so slow drifts of the shared machine hit
every server alike and ratios can be taken within a round.

The warm-up runs once per server start, at the sweep's highest
concurrency: every server pre-starts all its processes (see configs.py),
so a later, lower concurrency meets no cold process; warming up again at
every point would cost a fifth of the full run's time budget."""

import json
import os
import sys
import time
from dataclasses import dataclass

from . import (bucket_status, configs, faults, idle, limit, load, netns,
               procfs, restart, soak, users)
from .catalog import (LIMIT_KINDS, MIXED, MIXED_SLOW_EVERY, SLOW, WORKLOADS,
                      server_label, unsupported_reason)
from .net import HTTP_TIMEOUT, free_ports
from .server import Server, ServerError

# A server that failed to start this many times in a row within one workload
# is not tried again until the next workload.
MAX_START_FAILURES = 2
# First guesses for the time-left estimate, replaced by measurements.
GUESS_RUN_OVERHEAD_S = 0.25
GUESS_START_S = 5.0


@dataclass
class Plan:
    levels: list          # kernel level names
    workloads: list       # workload names
    servers: dict         # level -> [ServerSpec] that run at that level
    concurrency: list
    runs: int
    duration_s: int
    warmup_s: int
    threads: int
    timeout_s: int
    base_port: int = None
    slow_slots: int = None   # slots for the slow handler's workloads
    # The idle workload: idle connections held open beside the load, one
    # count after the other in every round, and the servers' limits
    # (idle.LIMITS), each a server of its own.
    idle_counts: tuple = ()
    limits: tuple = (idle.SLOTS_LIMITS,)
    # The idle workload's active load: total req/s wrk is paced to, one
    # after the other in every round (None: as fast as the server answers).
    rates: tuple = (None,)
    fault_s: int = faults.DEFAULT_FAULT_S   # the faults' window
    # The restart workloads: full restarts per run, seconds of serving
    # between them, the second build's directory (None: no swap variant).
    restarts: int = restart.DEFAULT_RESTARTS
    restart_interval_s: float = restart.DEFAULT_INTERVAL_S
    swap_dir: str = None
    restart_stop_timeout_s: float = restart.STOP_TIMEOUT_S
    soak_s: int = soak.DEFAULT_SOAK_S     # the soak's length (soak.py)

    def servers_for(self, level, workload):
        """The servers of a level that can serve the workload (a restart
        workload's: each in its variants, restart.expand)."""
        specs = [spec for spec in self.servers[level]
                 if unsupported_reason(spec, workload) is None]
        if workload.restart:
            return restart.expand(specs, workload, self.swap_dir is not None)
        return specs

    def slots_for(self, workload, default):
        """Request slots of every server in this workload: the slow handler
        has its own (few, so that they and not the CPU bound throughput)."""
        return self.slow_slots if workload.handler == SLOW \
            and self.slow_slots else default

    def threads_for(self, workload):
        return workload.wrk_threads or self.threads

    def limits_for(self, workload):
        """The limits a workload's servers run with: each of --limits for
        the idle workload, one server apiece; the usual ones otherwise."""
        return self.limits if workload.idle else (idle.SLOTS_LIMITS,)

    def concurrency_for(self, workload):
        """The connection counts a workload runs at: its own for the
        workloads users serve, --concurrency for the others."""
        return (workload.users_concurrency,) if workload.users \
            else tuple(self.concurrency)

    def idle_counts_for(self, workload):
        """Idle connections of each run of a round (None: not idle)."""
        return self.idle_counts if workload.idle else (None,)

    def rates_for(self, workload):
        """The paced rates of each run of a round (None: not paced)."""
        return self.rates if workload.idle else (None,)

    def _server_workloads(self, per_server):
        return sum(len(self.servers_for(level, WORKLOADS[name]))
                   * per_server(WORKLOADS[name])
                   for level in self.levels for name in self.workloads)

    def count_runs(self):
        return self._server_workloads(
            lambda w: len(self.limits_for(w)) * len(self.idle_counts_for(w))
            * len(self.rates_for(w)) * len(self.concurrency_for(w))) \
            * self.runs

    def count_warmups(self):
        if not self.warmup_s:
            return 0
        return self._server_workloads(lambda w: len(self.limits_for(w)))

    def count_start_phases(self):
        return len(self.levels) * len(self.workloads)


class Progress:
    """Progress lines on stderr with an estimate of the time left, from the
    plan and the measured cost of what has run so far."""

    def __init__(self, plan, stream=sys.stderr):
        self.plan = plan
        self.stream = stream
        self.runs_left = plan.count_runs()
        self.warmups_left = plan.count_warmups()
        self.starts_left = plan.count_start_phases()
        self.run_overheads = []
        self.start_times = []
        self.runs_done = 0

    def _overhead(self):
        if not self.run_overheads:
            return GUESS_RUN_OVERHEAD_S
        return sum(self.run_overheads) / len(self.run_overheads)

    def seconds_left(self):
        overhead = self._overhead()
        start = (sum(self.start_times) / len(self.start_times)
                 if self.start_times else GUESS_START_S)
        return (self.runs_left * (self.plan.duration_s + overhead)
                + self.warmups_left * (self.plan.warmup_s + overhead)
                + self.starts_left * start)

    def note_start_phase(self, seconds):
        self.starts_left -= 1
        self.start_times.append(seconds)

    def note_warmup(self):
        self.warmups_left -= 1

    def note_run(self, wall_s, line):
        self.runs_left -= 1
        self.runs_done += 1
        self.run_overheads.append(max(0.0, wall_s - self.plan.duration_s))
        total = self.runs_done + self.runs_left
        self.say(f"[{self.runs_done}/{total}] {line}")

    def say(self, line):
        left = int(self.seconds_left())
        print(f"{line}  (~{left // 60}m{left % 60:02d}s left)",
              file=self.stream, flush=True)


def _describe(record):
    if not record["ok"]:
        return "FAILED: " + record["error"].splitlines()[0]
    if record.get("fault"):
        return faults.describe(record["fault"])
    if record.get("restart"):
        return restart.describe(record)
    if record.get("soak"):
        return soak.describe(record)
    errors = sum(record["errors"].values())
    p99 = record["latency_ms"]["p99"] if record["latency_ms"] else None
    p99_text = f"{p99:.1f} ms" if p99 is not None else "n/a"
    held = record.get("idle")
    closed = (f", {held['closed']} of {held['opened']} idle closed"
              if held else "")
    return (f"{record['rps']:,.0f} req/s, p99 {p99_text}, "
            f"{errors} errors{closed}")


def _mixed(workload):
    """load.lua_script's mixed argument for a workload, or None."""
    if workload.handler != MIXED:
        return None
    fast, slow = (name for name, _ in configs.documents(MIXED))
    return fast, slow, MIXED_SLOW_EVERY


class Runner:
    def __init__(self, plan, tools, out_dir, scratch_dir, progress):
        self.plan = plan
        self.tools = tools
        self.raw_dir = os.path.join(out_dir, "raw")
        self.scratch_dir = scratch_dir
        self.progress = progress
        self.running = []        # servers up now, for stop_all()
        # Servers that ran an idle run since they were started: the next
        # one starts them afresh (see _fresh_start).
        self.used = set()
        self.runs_saved = 0      # numbers the records in running order
        # What a workload users serve shares (users.Fixtures), or None.
        self.fixtures = None
        os.makedirs(self.raw_dir, exist_ok=True)

    # ---- servers ----

    def _ports(self, index, count):
        if self.plan.base_port:
            first = self.plan.base_port + 2 * index
            return [first + k for k in range(count)]
        return free_ports(count)

    def _start_servers(self, level, workload):
        """Creates and boots this workload's servers, all at once; one that
        fails to come up is left stopped, and its runs say why."""
        began = time.monotonic()
        servers = []
        slots = self.plan.slots_for(workload, self.tools.slots)
        # Sized for the most idle connections of the run: every count meets
        # the same server.
        most_idle = max(self.plan.idle_counts) if workload.idle else None
        specs = [(limits, spec) for limits in self.plan.limits_for(workload)
                 for spec in self.plan.servers_for(level, workload)]
        if workload.users:
            self.fixtures = users.Fixtures(
                workload.users,
                os.path.join(self.scratch_dir, f"{level}-{workload.name}"),
                free_ports(1)[0], self.tools.server_cpus)
            try:
                self.fixtures.start()
            except users.UsersError as error:
                # The servers then fail to start, and their runs say so.
                self.progress.say(f"{level} {workload.name}: {error}")
        for index, (limits, spec) in enumerate(specs):
            suffix = "" if limits == idle.SLOTS_LIMITS else f"-{limits}"
            workdir = os.path.join(
                self.scratch_dir,
                f"{level}-{workload.name}-{spec.name}{suffix}")
            kind, extra = (restart.RestartServer,
                           {"swap_dir": self.plan.swap_dir}) \
                if workload.restart else (Server, {})
            if workload.users:
                kind, extra = users.UserServer, {"fixtures": self.fixtures,
                                                 "kind": workload.users}
            server = kind(spec, level,
                          self._ports(index, workload.listen_count),
                          workdir, self.tools, slots=slots,
                          handler=workload.handler,
                          idle_connections=most_idle, limits=limits,
                          fault=workload.fault, **extra)
            server.launch()
            self.running.append(server)
            servers.append(server)
        for server in servers:
            try:
                server.wait_ready()
            except ServerError:
                self.progress.say(f"{level} {workload.name}: "
                                  f"{server.spec.name} did not start")
        self.progress.note_start_phase(time.monotonic() - began)
        if self.plan.warmup_s:
            for server in servers:
                self._warm_up(server, workload)
                self.progress.note_warmup()
        return servers

    def stop_all(self):
        while self.running:
            self.running.pop().stop()
        if self.fixtures:
            self.fixtures.stop()
            self.fixtures = None

    def _restart(self, server, workload):
        """Starts (and warms up) a server that is down; None on success,
        else why it is still down."""
        if server.start_failures >= MAX_START_FAILURES:
            return (f"not started: gave up after {server.start_failures} "
                    f"failed starts in this workload; last error:\n"
                    f"{server.last_start_error}")
        try:
            server.start()
        except ServerError as error:
            return f"could not (re)start: {error}"
        self._warm_up(server, workload)
        return None

    # ---- runs ----

    def _wrk_command(self, server, workload, concurrency, duration_s,
                     rate=None):
        """wrk's command line for a run; rate: pace it to that many
        requests a second in all (load.PACED_LUA_TEMPLATE)."""
        threads = self.plan.threads_for(workload)
        script = load.script_file(server.workdir, server.ports,
                                  workload.split, threads, rate,
                                  _mixed(workload), self.tools.server_host)
        return load.wrk_command(
            self.tools.wrk, ports=server.ports, connections=concurrency,
            threads=threads, duration_s=duration_s,
            timeout_s=self.plan.timeout_s, keep_alive=workload.keep_alive,
            script_path=script,
            document=configs.document(workload.handler)[0],
            host=self.tools.server_host)

    def _warm_up(self, server, workload):
        # A fault run starts from the server as it started (crash-exit
        # would turn its children over).
        if not server.alive() or not self.plan.warmup_s or workload.fault:
            return
        if workload.users:
            try:
                self._users_load(server, workload,
                                 workload.users_concurrency,
                                 self.plan.warmup_s)
            except load.LoadError:
                pass
            return
        command = self._wrk_command(server, workload,
                                    max(self.plan.concurrency),
                                    self.plan.warmup_s)
        try:
            load.run_wrk(command, self.plan.warmup_s,
                         os.path.join(server.workdir, "warmup.log"))
        except load.LoadError:
            # A server that broke shows up, with its log, in the next run.
            pass

    def _measure(self, server, workload, concurrency, with_memory,
                 rate=None):
        """One measured run: wrk's result plus server and machine costs;
        with_memory: also the server's memory (the point's last run);
        rate: wrk paced to that many requests a second."""
        # The status page answers plain HTTP only. Its counts are read
        # outside the timed run, with the harness's patient HTTP timeout: a
        # loaded machine may delay them by seconds, which is no failure.
        is_bucketed = server.spec.mpm == "bucketed" \
            and workload.users not in users.TLS_KINDS
        host = self.tools.server_host
        status_before = bucket_status.fetch_status(
            server.ports[0], HTTP_TIMEOUT, host) if is_bucketed else None
        server_cpu_before = procfs.cpu_seconds(
            server.pid, procfs.process_tree(server.pid))
        busy_before = procfs.machine_busy_seconds()
        if workload.users:
            command, result, client_cpu_s = self._users_load(
                server, workload, concurrency, self.plan.duration_s)
        else:
            command = self._wrk_command(server, workload, concurrency,
                                        self.plan.duration_s, rate)
            result, client_cpu_s = load.run_wrk(
                command, self.plan.duration_s,
                os.path.join(server.workdir, "wrk.log"))
        busy_after = procfs.machine_busy_seconds()
        if not server.alive():
            raise ServerError(f"{server.spec.name} died during the run "
                              f"({server.exit_description()})")
        pids = procfs.process_tree(server.pid)
        server_cpu_s = procfs.cpu_seconds(server.pid, pids) \
            - server_cpu_before
        result.update({
            "wrk_command": command,
            "server_cpu_s": server_cpu_s,
            "client_cpu_s": client_cpu_s,
            # Everything else the machine did meanwhile: the idle servers
            # and other users of this shared machine. High values flag
            # noisy runs.
            "other_cpu_s": max(0.0, busy_after - busy_before - server_cpu_s
                               - client_cpu_s),
            "server_processes": len(pids),
            "server_pss_bytes": procfs.pss_bytes(pids) if with_memory
            else None,
            "buckets": bucket_status.accepted_delta(
                status_before,
                bucket_status.fetch_status(server.ports[0], HTTP_TIMEOUT,
                                           host))
            if is_bucketed else None,
            # Where it ran, read after the run (children started during
            # it included): each server process's CPUs (None: not
            # pinned), and the network namespaces of the server and of
            # the harness, whose load tools share its own.
            "server_cpus": server.check_placement(),
            "netns": {"server": netns.namespace_of(server.pid),
                      "client": netns.namespace_of()},
        })
        return result

    def _users_load(self, server, workload, concurrency, duration_s):
        """users.run_load with the plan's wrk settings."""
        return users.run_load(server, workload, concurrency, duration_s,
                              self.plan.timeout_s,
                              self.plan.threads_for(workload),
                              self.tools.wrk)

    def _measure_fault(self, server, workload, concurrency):
        """One run of a faults workload (faults.py): the probes' outcomes
        and the fault's own numbers; the hang's wrk load at concurrency."""
        def wrk_command(seconds):
            return self._wrk_command(server, workload, concurrency, seconds)
        context = faults.Context(server=server, fault_s=self.plan.fault_s,
                                 wrk_command=wrk_command,
                                 log_dir=server.workdir)
        measure = limit.measure if workload.fault in LIMIT_KINDS \
            else faults.measure
        result = measure(workload.fault, context)
        # A server that exits on the fault (emfile) is restarted for the
        # next run; the record says so in result["fault"]["survived"].
        result["server_processes"] = len(procfs.process_tree(server.pid)) \
            if server.alive() else 0
        return result

    def _measure_restart(self, server, workload, concurrency):
        """One run of a restart workload (restart.py): wrk across
        --restarts full restarts of the server."""
        def wrk_command(seconds):
            return self._wrk_command(server, workload, concurrency, seconds)
        if workload.soak:
            return soak.measure(server, wrk_command, self.plan.soak_s,
                                server.workdir,
                                self.plan.restart_stop_timeout_s)
        return restart.measure(server, wrk_command, self.plan.restarts,
                               self.plan.restart_interval_s, server.workdir,
                               self.plan.restart_stop_timeout_s)

    def _fresh_start(self, server, workload):
        """The idle workload measures memory growth from a fresh server
        (started and warmed up, nothing more): after a run, a server keeps
        the heap its idle connections grew, which would shrink the next
        run's growth. None on success, else why the server is down."""
        if server not in self.used:
            return None
        server.stop()
        self.used.discard(server)
        return self._restart(server, workload)

    def _measure_idle(self, server, workload, concurrency, count, rate):
        """One run of the idle workload: the server's memory, then count
        idle keep-alive connections opened and held, its memory again, the
        active wrk run (_measure, paced to rate when not None), how many
        idle connections are still open, and its memory at the end."""
        memory_kind, before = procfs.server_memory(
            procfs.process_tree(server.pid))
        with idle.IdleConnections(server.ports[0], "/" + configs.DOC_NAME,
                                  count, self.tools.server_host) as held:
            opened = held.open()
            # A server at its limits may already have closed some (the
            # memory is theirs only).
            open_with_idle = held.count_open()
            pids = procfs.process_tree(server.pid)
            _, with_idle = procfs.server_memory(pids)
            limits = [procfs.open_files_limit(pid) for pid in pids]
            lowest = min((limit for limit in limits if limit is not None),
                         default=None)
            if lowest is not None and lowest < count:
                raise ServerError(f"{server.spec.name}: a server process "
                                  f"may open only {lowest} files, fewer "
                                  f"than the {count} idle connections")
            result = self._measure(server, workload, concurrency, True,
                                   rate)
            open_at_end = held.count_open()
            held_s = held.held_s()
            _, at_end = procfs.server_memory(procfs.process_tree(server.pid))
        result["idle"] = {
            "connections": count, "opened": opened,
            "failures": held.failures,
            "open_with_idle": open_with_idle, "open_at_end": open_at_end,
            "closed": idle.closed_count(opened, open_at_end),
            "open_s": held.open_s,
            "held_s": held_s, "memory_kind": memory_kind,
            "memory_before_bytes": before,
            "memory_with_idle_bytes": with_idle,
            "memory_at_end_bytes": at_end,
            "per_connection_bytes": idle.per_connection_bytes(
                before, with_idle, open_with_idle),
            "server_nofile_min": lowest}
        return result

    def _run_once(self, server, level, workload, concurrency, round_no,
                  idle_count=None, rate=None):
        record = {"schema": "bucketbench.run/1", "kernel_level": level,
                  "workload": workload.name, "concurrency": concurrency,
                  "server": server.spec.name, "idle_connections": idle_count,
                  "rate": rate,
                  "limits": server.limits if workload.idle else None,
                  "label": server_label(server.spec, level),
                  "round": round_no, "ports": server.ports,
                  "split": list(workload.split),
                  "handler": workload.handler, "slots": server.slots,
                  "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        # A server found down died after its last run (or never came up):
        # that run was measured fine, so this one says it, and restarts it.
        record["restarted"] = not server.alive()
        if record["restarted"]:
            record["log_before_restart"] = server.error_log_tail()
            self.used.discard(server)
            why_not = self._restart(server, workload)
        else:
            why_not = self._fresh_start(server, workload) \
                if workload.idle else None
        if why_not:
            record.update(ok=False, error=why_not,
                          error_log_tail=server.error_log_tail())
            return record
        try:
            if workload.fault:
                record.update(self._measure_fault(server, workload,
                                                  concurrency))
            elif workload.restart:
                record.update(self._measure_restart(server, workload,
                                                    concurrency))
            elif workload.idle:
                self.used.add(server)
                record.update(self._measure_idle(server, workload,
                                                 concurrency, idle_count,
                                                 rate))
            else:
                record.update(self._measure(server, workload, concurrency,
                                            round_no == self.plan.runs))
            record.update(ok=True, error=None, error_log_tail=None)
        except (ServerError, load.LoadError, faults.FaultError,
                users.UsersError, OSError) as error:
            record.update(ok=False, error=str(error),
                          error_log_tail=server.error_log_tail())
        return record

    def _save(self, record):
        record["seq"] = self.runs_saved
        self.runs_saved += 1
        variant = "" if record["idle_connections"] is None else (
            f"-{record['limits']}-i{record['idle_connections']}")
        if record["rate"] is not None:
            variant += f"-paced{record['rate']}"
        name = (f"{record['kernel_level']}-{record['workload']}-"
                f"c{record['concurrency']}{variant}-{record['server']}-"
                f"r{record['round']}.json")
        with open(os.path.join(self.raw_dir, name), "w") as handle:
            json.dump(record, handle, indent=1)

    def run(self):
        """Runs the whole plan; returns every run's record."""
        records = []
        for level in self.plan.levels:
            for workload_name in self.plan.workloads:
                records += self._run_workload(level, WORKLOADS[workload_name])
        return records

    def _run_and_save(self, server, level, workload, concurrency,
                      round_no, idle_count, rate):
        began = time.monotonic()
        record = self._run_once(server, level, workload, concurrency,
                                round_no, idle_count, rate)
        self._save(record)
        variant = "" if idle_count is None else (
            f" {server.limits} limits, {idle_count} idle")
        if rate is not None:
            variant += f", paced at {rate:,} req/s"
        self.progress.note_run(
            time.monotonic() - began,
            f"{level} {workload.name} c={concurrency}{variant} run "
            f"{round_no}/{self.plan.runs} {server.spec.name}: "
            f"{_describe(record)}")
        return record

    def _run_workload(self, level, workload):
        records = []
        servers = self._start_servers(level, workload)
        try:
            for concurrency in self.plan.concurrency_for(workload):
                for round_no in range(1, self.plan.runs + 1):
                    # The idle workload: every limits, idle count and rate
                    # within the round, its servers side by side at each.
                    for limits, idle_count, rate in (
                            (limits, idle_count, rate)
                            for limits in self.plan.limits_for(workload)
                            for idle_count in self.plan.idle_counts_for(
                                workload)
                            for rate in self.plan.rates_for(workload)):
                        for server in servers:
                            if server.limits != limits:
                                continue
                            records.append(self._run_and_save(
                                server, level, workload, concurrency,
                                round_no, idle_count, rate))
        finally:
            self.stop_all()
        return records
