# SPDX-License-Identifier: Apache-2.0
"""The soak (issue 39, workload soak): bucketed in both child models under
a wrk Connection: close load, the counting keep-alive clients
(restart.CountedClients: GETs and POSTs, every loss counted) and
restart.CLOSING_CLIENTS counting new-connection ones (Connection: close,
each failure timed, as wrk's are not) for
--soak-seconds, while the harness, on a schedule fixed in advance
(plan_events):
- restarts the server gracefully (SIGUSR1) every GRACEFUL_EVERY_S;
- makes every LISTEN_EVERY-th of those a reload that adds a Listen
  address (a free port, then probed), and the next such one a reload that
  removes it again (then probed to refuse);
- restarts it fully every FULL_RESTART_EVERY_S, its sockets held as
  systemd's socket unit holds them (restart.RestartServer, variant soak);
- SIGKILLs one of the parent's children, by pid and checked to be its
  child right before, every KILL_EVERY_S;
and its children exit after SOAK_MAX_CONNECTIONS_PER_CHILD connections
(catalog; the churn). A soak shorter than FULL_RESTART_EVERY_S fully
restarts halfway and kills a child every third of it, so that a CI-sized
soak (15-20 s) does everything at least once. Each event waits for the
previous one: a graceful restart ends when the old generation has gone,
which can take longer than GRACEFUL_EVERY_S. A graceful restart that
is a whole period late is skipped (skip_when_late, counted), so they then
follow each other back to back and the soak lasts about --soak-seconds;
every LISTEN_EVERY-th one done changes Listen (reload_kind). Full
restarts and kills are never skipped.

What it reports: failed requests of each kind (the counting clients'
also by the event that caused them, attribute_losses: a killed child
takes its requests in flight with it, a restart should take none), what
each event did, and
the server's resources at the start (after the warm-up, before the load)
and at the end (the load stopped, the extra Listen gone, the process
count back or SETTLE_S passed): the parent's descriptors, RSS, BPF maps
and programs (the ids that its bpf-map and bpf-prog descriptors' fdinfo
name), SysV and POSIX shared memory segments that the server's processes
map, the files in its runtime directory, and its processes."""

import os
import random
import time

from . import configs, markdown, procfs, restart, stats
from .catalog import (SHORT_NAMES, SOAK_MAX_CONNECTIONS_PER_CHILD,
                      base_server)
from .net import connection_refused, free_ports, http_get
from .server import HTTP_TIMEOUT_S, ServerError

DEFAULT_SOAK_S = 3600
QUICK_SOAK_S = 60
GRACEFUL_EVERY_S = 5.0
FULL_RESTART_EVERY_S = 60.0
KILL_EVERY_S = 13.0
LISTEN_EVERY = 2
# The end's bound for the process count to come back, and how long it
# must then stay.
SETTLE_S = 30
SETTLE_STABLE_S = 1.0
SETTLE_POLL_S = 0.1
# The counting clients' losses, and their Connection: close answers slower
# than restart.SLOW_S, attributed to events (and to "start": before the
# first one).
LOSS_KEYS = ("gets_failed", "posts_lost", "closes_failed")
ATTRIBUTED_KEYS = LOSS_KEYS + ("closes_slow",)
LOSS_KEY_OF = {"GET": "gets_failed", "POST": "posts_lost",
               "CLOSE": "closes_failed", "CLOSE slow": "closes_slow"}
START = "start"

GRACEFUL = "graceful"
LISTEN_ADD = "listen-add"
LISTEN_REMOVE = "listen-remove"
FULL = "full"
KILL = "kill"
EVENT_KINDS = (GRACEFUL, LISTEN_ADD, LISTEN_REMOVE, FULL, KILL)
# The kinds plan_events plans; a Listen change is chosen as it is done.
PLANNED_KINDS = (GRACEFUL, FULL, KILL)
# The graceful restarts, plain or changing Listen.
RELOAD_KINDS = (GRACEFUL, LISTEN_ADD, LISTEN_REMOVE)
RESOURCE_KEYS = ("descriptors", "rss_kb", "bpf_maps", "bpf_progs",
                 "sysv_segments", "posix_segments", "runtime_files",
                 "processes")


class SoakError(ServerError):
    """The soak could not go on: the server died or did not come back."""


def plan_events(soak_s):
    """[(seconds from the start, kind)] of a soak of soak_s seconds, in
    order: graceful restarts (of which measure makes every LISTEN_EVERY-th
    done a Listen change: reload_kind), full restarts and kills, each at
    its period (see the module's comment for short soaks)."""
    events = []
    for every, kind in ((GRACEFUL_EVERY_S, GRACEFUL),
                        (min(FULL_RESTART_EVERY_S, soak_s / 2), FULL),
                        (min(KILL_EVERY_S, soak_s / 3), KILL)):
        number = 1
        while every * number < soak_s:
            events.append((every * number, kind))
            number += 1
    events.sort(key=lambda event: (event[0], EVENT_KINDS.index(event[1])))
    return events


def events_planned(events):
    """{kind: how many} of plan_events' events, for each planned kind."""
    return {kind: sum(1 for _, k in events if k == kind)
            for kind in PLANNED_KINDS}


def holder_role(pid, parent_pid, old_children, started_s_ago,
                restart_s_ago):
    """Who a process holding a removed Listen's socket is, in words: the
    parent, a child from before the restart's signal (old_children), or a
    child started since (started_s_ago and restart_s_ago: seconds before
    now; None when it is gone)."""
    if pid == parent_pid:
        return f"the parent ({pid})"
    if pid in old_children:
        return f"child {pid}, from before the restart"
    if started_s_ago is None:
        return f"child {pid}, gone since"
    return (f"child {pid}, started {restart_s_ago - started_s_ago:.2f} s "
            f"after the restart's signal")


def reload_kind(reloads_done, listen_added):
    """What the next graceful restart is, after reloads_done of them:
    every LISTEN_EVERY-th a reload that adds a Listen address, or removes
    the one added (listen_added); the others plain."""
    if (reloads_done + 1) % LISTEN_EVERY:
        return GRACEFUL
    return LISTEN_REMOVE if listen_added else LISTEN_ADD


def skip_when_late(kind, late_s):
    """Whether a planned event of kind, late_s seconds behind its time, is
    left out: a graceful restart when the next one is due already, so the
    soak keeps to its length when they take longer than their period."""
    return kind == GRACEFUL and late_s >= GRACEFUL_EVERY_S


def cause_of(log, begun, failed):
    """The event of log ((began, ended, kind), in order) that a counting
    client's request begun and failed (or answered late) at those times
    is put down to, as (kind, the time it began), or (START, None): a
    kill's when the request was under way while a kill was (from the
    signal until the child was seen gone: the child took it with it),
    else the last other event's that began before it failed."""
    for began, ended, kind in log:
        if kind == KILL and begun <= ended and began <= failed:
            return KILL, began
    cause = (START, None)
    for began, _, kind in log:
        if began > failed:
            break
        if kind != KILL:
            cause = (kind, began)
    return cause


def attribute_losses(log, failures):
    """{event kind or START: {gets_failed, posts_lost, closes_failed,
    closes_slow}} of the counting clients' failures and slow answers
    ((begun, ended, "GET", "POST", "CLOSE" or "CLOSE slow")) over the
    events of log (cause_of)."""
    losses = {kind: dict.fromkeys(ATTRIBUTED_KEYS, 0)
              for kind in (START,) + EVENT_KINDS}
    for begun, failed, method in failures:
        kind, _ = cause_of(log, begun, failed)
        losses[kind][LOSS_KEY_OF[method]] += 1
    return losses


def timed_failures(log, failures, began):
    """{"timed": the counting clients' failures ((begun, failed, method)),
    at most restart.TIMED_KEPT, in time order, as [begun and failed in
    seconds from began, method, the kind of event it is put down to
    (cause_of), when that event began (None for START)]; "timed_dropped":
    how many did not fit}."""
    timed = []
    for begun, failed, method in sorted(failures)[:restart.TIMED_KEPT]:
        kind, at = cause_of(log, begun, failed)
        timed.append([round(begun - began, 3), round(failed - began, 3),
                      method, kind,
                      None if at is None else round(at - began, 3)])
    return {"timed": timed,
            "timed_dropped": max(0, len(failures) - restart.TIMED_KEPT)}


# ---------------------------------------------------------------- resources

def _bpf_ids(pid, fd, key):
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _mapped_segments(pids):
    """(SysV, POSIX) shared memory segments the processes map: distinct
    /SYSV* and /dev/shm/ mappings (by inode)."""
    sysv, posix = set(), set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                lines = maps.read().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(None, 5)
            if len(fields) < 6:
                continue
            inode, path = fields[4], fields[5]
            if path.startswith("/SYSV"):
                sysv.add(inode)
            elif path.startswith("/dev/shm/"):
                posix.add(path.split(" (deleted)")[0])
    return len(sysv), len(posix)


def resources(pid, runtime_dir):
    """The server's resources now (RESOURCE_KEYS) from /proc: pid is its
    parent's."""
    fd_dir = f"/proc/{pid}/fd"
    fds = os.listdir(fd_dir)
    maps, progs = set(), set()
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target == "anon_inode:bpf-map":
            maps.add(_bpf_ids(pid, fd, "map_id"))
        elif target == "anon_inode:bpf-prog":
            progs.add(_bpf_ids(pid, fd, "prog_id"))
    pids = procfs.process_tree(pid)
    sysv, posix = _mapped_segments(pids)
    rss = procfs.smaps_rollup_kb(pid) or {}
    return {"descriptors": len(fds), "rss_kb": rss.get("Rss"),
            "bpf_maps": len(maps), "bpf_progs": len(progs),
            "sysv_segments": sysv, "posix_segments": posix,
            "runtime_files": len(os.listdir(runtime_dir)),
            "processes": len(pids)}


# ---------------------------------------------------------------- a soak

class _Soak:
    """One soak's events on a restart.RestartServer, and their record."""

    def __init__(self, server, stop_timeout_s):
        self.server = server
        self.stop_timeout_s = stop_timeout_s
        self.rng = random.Random()
        self.done = dict.fromkeys(EVENT_KINDS, 0)
        self.skipped_late = 0
        self.kills_missed = 0
        self.listen_probe_failures = []
        self.stop_ms = {GRACEFUL: [], FULL: []}
        self.lingering = 0
        self.forced_stops = 0
        # (monotonic times it began and ended, kind) of every event run.
        self.log = []
        # (kind, procfs.tcp_counters() as it began) of every event run,
        # after START's (start_counting), and the reading at the end
        # (stop_counting; counters_by_event).
        self.counters = []
        self.counters_ended = None

    def _graceful(self):
        """A graceful restart; the children from before its signal."""
        outcome = self.server.graceful_restart(self.stop_timeout_s)
        self.stop_ms[GRACEFUL].append(outcome["stop_ms"])
        self.lingering += outcome["lingering"]
        return outcome["old_children"]

    def _probe_added(self, port):
        """The extra Listen answers the static file; a failure is noted,
        not raised."""
        try:
            status, body = http_get(port, "/" + configs.DOC_NAME,
                                    timeout=HTTP_TIMEOUT_S)
        except OSError as error:
            status, body = repr(error), None
        if status != 200 or body != configs.DOC_BODY:
            self.listen_probe_failures.append(f"port {port} added: {status}")

    def _probe_removed(self, port, old_children, began):
        """The removed Listen refuses connections once the children from
        before the restart are gone. Where it does not, the note says who
        holds its sockets (the parent, a child from before the signal, or
        one started since, which the restart's wait could not know of) and
        whether it refused within the stop's bound."""
        def refused():
            # A connect that times out (a full queue) is no refusal.
            try:
                return connection_refused(port)
            except OSError:
                return False
        if refused():
            return
        inodes = procfs.listening_inodes(port)
        holders = [holder_role(pid, self.server.pid, old_children,
                               procfs.started_s_ago(pid),
                               time.monotonic() - began)
                   for pid in procfs.holders_of(
                       inodes, procfs.process_tree(self.server.pid))]
        waited = time.monotonic()
        deadline = waited + self.stop_timeout_s
        while not refused() and time.monotonic() < deadline:
            time.sleep(SETTLE_POLL_S)
        refused = time.monotonic() - waited
        self.listen_probe_failures.append(
            f"port {port} removed: still accepts; its sockets held by "
            f"{', '.join(holders) or 'no process of the server'}; "
            + (f"refused {refused:.1f} s later" if refused
               < self.stop_timeout_s else
               f"still accepting {self.stop_timeout_s:g} s later"))

    def start_counting(self):
        self.counters = [(START, procfs.tcp_counters())]

    def stop_counting(self):
        """Before the clients stop: what they reset as they go is no
        event's."""
        self.counters_ended = procfs.tcp_counters()

    def run_event(self, kind):
        server = self.server
        began = time.monotonic()
        counters = procfs.tcp_counters()
        if kind == GRACEFUL:
            self._graceful()
        elif kind == LISTEN_ADD:
            server.extra_port = free_ports(1)[0]
            self._graceful()
            self._probe_added(server.extra_port)
        elif kind == LISTEN_REMOVE:
            port, server.extra_port = server.extra_port, None
            self._probe_removed(port, self._graceful(), began)
        elif kind == FULL:
            # The configuration as the reloads left it.
            server.write_config()
            outcome = server.restart(self.stop_timeout_s)
            self.stop_ms[FULL].append(outcome["stop_ms"])
            self.forced_stops += outcome["forced"]
        elif kind == KILL:
            pid = server.kill_child(self.rng)
            if pid is None:
                self.kills_missed += 1
                return
            # Until its parent has reaped it: every thread gone, so its
            # sockets closed (attribute_losses). A threaded child shows as
            # a zombie as soon as its first thread has exited.
            deadline = time.monotonic() + restart.STOP_TIMEOUT_S
            while os.path.exists(f"/proc/{pid}") \
                    and time.monotonic() < deadline:
                time.sleep(SETTLE_POLL_S)
        self.done[kind] += 1
        self.log.append((began, time.monotonic(), kind))
        self.counters.append((kind, counters))

    def counters_by_event(self):
        """The kernel's procfs.TCP_COUNTERS from each event's start to the
        next's (the last's: to stop_counting), summed by kind, START's
        before the first: what followed each kind of event."""
        marks = self.counters + [(None, self.counters_ended)]
        deltas = {}
        for (kind, before), (_, after) in zip(marks, marks[1:]):
            deltas.setdefault(kind, []).append(
                procfs.counter_deltas(before, after))
        return {kind: procfs.sum_counters(one)
                for kind, one in deltas.items()}

    def settle(self, processes):
        """Waits (SETTLE_S at most) for the process count to be back at
        processes and stay there SETTLE_STABLE_S; whether it did."""
        deadline = time.monotonic() + SETTLE_S
        since = None
        while time.monotonic() < deadline:
            if len(procfs.process_tree(self.server.pid)) != processes:
                since = None
            elif since is None:
                since = time.monotonic()
            elif time.monotonic() - since >= SETTLE_STABLE_S:
                return True
            time.sleep(SETTLE_POLL_S)
        return False


def _stops(values):
    return {"count": len(values),
            "median_ms": stats.median(values),
            "worst_ms": max(values, default=None)}


def measure(server, wrk_command, soak_s, log_dir,
            stop_timeout_s=restart.STOP_TIMEOUT_S):
    """One soak of soak_s seconds on server (a restart.RestartServer,
    variant soak, with counting clients): wrk's numbers, and "soak": the
    events done, every kind of client's losses, the resources at the start
    and the end."""
    soak = _Soak(server, stop_timeout_s)
    runtime_dir = os.path.join(server.workdir, "run")
    at_start = resources(server.pid, runtime_dir)
    events = plan_events(soak_s)
    # Every event at its longest: wrk is interrupted at the end, so a wide
    # bound costs nothing, while full restarts and kills, never skipped,
    # can make a slow server's soak late by minutes. A soak that outran it
    # anyway fails (BackgroundWrk.check_bound).
    bound_s = int(soak_s + len(events) * (2 * stop_timeout_s
                                          + restart.READY_TIMEOUT_S)
                  + restart.WRK_WAIT_S) + 1
    wrk = restart.BackgroundWrk(wrk_command, bound_s,
                                os.path.join(log_dir, "wrk-soak.log"))
    counted = restart.CountedClients(server, bound_s).start()
    began = time.monotonic()
    soak.start_counting()
    failure = None
    try:
        for at, kind in events:
            wait = began + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            elif skip_when_late(kind, -wait):
                soak.skipped_late += 1
                continue
            if kind == GRACEFUL:
                kind = reload_kind(
                    sum(soak.done[k] for k in RELOAD_KINDS),
                    server.extra_port is not None)
            try:
                soak.run_event(kind)
            except (ServerError, OSError) as error:
                failure = f"{kind} at {at:.1f} s of {soak_s} s: {error}"
                break
        if failure is None:
            time.sleep(max(0.0, began + soak_s - time.monotonic()))
            if server.extra_port:
                soak.run_event(LISTEN_REMOVE)
            soak.stop_counting()
    finally:
        keepalive = counted.stop()
        result, client_cpu_s = wrk.finish()
    if failure:
        raise SoakError(failure)
    wrk.check_bound()
    seconds = time.monotonic() - began
    kernel_after = soak.counters_by_event()
    settled = soak.settle(at_start["processes"])
    at_end = resources(server.pid, runtime_dir)
    result.update({
        "wrk_command": wrk.process.args, "client_cpu_s": client_cpu_s,
        "server_processes": at_end["processes"],
        "soak": {
            "planned_s": soak_s, "seconds": seconds,
            "max_connections_per_child": SOAK_MAX_CONNECTIONS_PER_CHILD,
            "events_planned": events_planned(events),
            "events_done": soak.done, "skipped_late": soak.skipped_late,
            "kills_missed": soak.kills_missed,
            "graceful_stops": _stops(soak.stop_ms[GRACEFUL]),
            "full_stops": _stops(soak.stop_ms[FULL]),
            "forced_stops": soak.forced_stops,
            "lingering": soak.lingering,
            "listen_probe_failures": soak.listen_probe_failures,
            "failed_requests": restart.failed_requests(result),
            "keepalive": keepalive,
            "closing": counted.closing_counts(),
            "losses_after": attribute_losses(
                soak.log, counted.failures() + counted.slow()),
            **timed_failures(soak.log, counted.failures(), began),
            "kernel_after": kernel_after,
            "events": [(round(at - began, 3), round(end - began, 3), kind)
                       for at, end, kind in soak.log],
            "settled": settled,
            "at_start": at_start, "at_end": at_end}})
    return result


def describe(record):
    """One soak run as a progress line."""
    s = record["soak"]
    kept = s["keepalive"]
    closing = s["closing"]
    growth = _growth_kb(s)
    return (f"{s['seconds']:.0f} s, {sum(s['events_done'].values())} "
            f"events; wrk: {record['requests']:,} Connection: close "
            f"requests, {s['failed_requests']:,} failed; counted: "
            f"{closing['requests']:,}, {closing['failed']:,} failed; "
            f"keep-alive "
            f"{kept['gets']:,} GETs, {kept['gets_failed']:,} failed, "
            f"{kept['posts']:,} POSTs, {kept['posts_lost']:,} lost; "
            f"changed at the end: {', '.join(changed(s)) or 'nothing'}; "
            f"RSS {'n/a' if growth is None else f'{growth:+,} kB'}")


def changed(soak):
    """The resources (but RSS) that differ between the start and the
    end."""
    return [key for key in RESOURCE_KEYS if key != "rss_kb"
            and soak["at_start"][key] != soak["at_end"][key]]


def _growth_kb(soak):
    start, end = soak["at_start"]["rss_kb"], soak["at_end"]["rss_kb"]
    return None if start is None or end is None else end - start


# ---------------------------------------------------------------- summary

def summarize_runs(records):
    """A soak point's runs (a restart point's "restart"), None without a
    good one: the soak of each, and the totals of failures."""
    good = [r for r in records if r["ok"] and r.get("soak")]
    if not good:
        return None
    soaks = [r["soak"] for r in good]
    return {"runs": len(good), "soaks": soaks,
            "requests": [r["requests"] for r in good],
            "failed_total": sum(s["failed_requests"] for s in soaks),
            "gets_failed_total": sum(s["keepalive"]["gets_failed"]
                                     for s in soaks),
            "posts_lost_total": sum(s["keepalive"]["posts_lost"]
                                    for s in soaks),
            "closes_failed_total": sum((s.get("closing") or {})
                                       .get("failed", 0) for s in soaks)}


def _start_end(soak, key):
    start, end = soak["at_start"][key], soak["at_end"][key]
    return f"{start:,}" if start == end else f"{start:,} → {end:,}"


def _losses_text(soak, which):
    """GETs failed / POSTs lost / Connection: close requests failed /
    slow after the events which(kind) selects ("n/a" for what a run
    before its counting did not attribute)."""
    after = [losses for kind, losses in soak["losses_after"].items()
             if which(kind)]
    return " / ".join(
        f"{sum(one[key] for one in after):,}"
        if all(key in one for one in after) else "n/a"
        for key in ATTRIBUTED_KEYS)


def _closing_text(closing):
    if not closing:
        return "–"
    return (f"{closing['requests']:,}, {closing['failed']:,}, "
            f"{closing.get('slow', 0):,}")


def _stop_text(stops):
    if not stops["count"]:
        return "–"
    return f"{stops['median_ms']:,.0f} ({stops['worst_ms']:,.0f})"


def soak_table(points):
    """One row per soak run."""
    header = ["Configuration", "seconds",
              "graceful (skipped late) / Listen added / removed / full "
              "/ killed",
              "wrk's Connection: close requests, failed",
              f"counted Connection: close requests, failed, over "
              f"{restart.SLOW_S:g} s",
              "keep-alive GETs, failed, retried",
              "keep-alive POSTs, lost",
              f"counted failures after a kill: GETs / POSTs / "
              f"Connection: close / its answers over {restart.SLOW_S:g} s",
              f"after restarts, reloads or none: GETs / POSTs / "
              f"Connection: close / over {restart.SLOW_S:g} s",
              "graceful stop ms, median (worst)",
              "full stop ms, median (worst)",
              "parent descriptors", "parent RSS kB", "BPF maps",
              "BPF programs", "SysV / POSIX shm segments",
              "runtime dir files", "processes"]
    rows = []
    for p in points:
        summary = p["restart"]
        if summary is None:
            rows.append([p["label"] + " (failed)"]
                        + ["–"] * (len(header) - 1))
            continue
        for requests, s in zip(summary["requests"], summary["soaks"]):
            kept = s["keepalive"]
            done = s["events_done"]
            growth = _growth_kb(s)
            rows.append([
                p["label"], f"{s['seconds']:,.0f}",
                f"{done[GRACEFUL]} ({s.get('skipped_late', 0)}) / "
                + " / ".join(str(done[k]) for k in
                             (LISTEN_ADD, LISTEN_REMOVE, FULL, KILL)),
                f"{requests:,}, {s['failed_requests']:,}",
                _closing_text(s.get("closing")),
                f"{kept['gets']:,}, {kept['gets_failed']:,}, "
                f"{kept['retries']:,}",
                f"{kept['posts']:,}, {kept['posts_lost']:,}",
                _losses_text(s, lambda kind: kind == KILL),
                _losses_text(s, lambda kind: kind != KILL),
                _stop_text(s["graceful_stops"]),
                _stop_text(s["full_stops"]),
                _start_end(s, "descriptors"),
                f"{s['at_start']['rss_kb']:,} → {s['at_end']['rss_kb']:,} "
                f"({'n/a' if growth is None else f'{growth:+,}'})",
                _start_end(s, "bpf_maps"), _start_end(s, "bpf_progs"),
                f"{_start_end(s, 'sysv_segments')} / "
                f"{_start_end(s, 'posix_segments')}",
                _start_end(s, "runtime_files"),
                _start_end(s, "processes")
                + ("" if s["settled"] else " (not settled)")])
    return markdown.table(header, rows)


def kernel_table(points):
    """One row per soak run: the kernel's procfs.TCP_COUNTERS over it, and
    the part that followed its kills (n/a for a run recorded before they
    were)."""
    header = ["Configuration"] + [f"{name} (after kills)"
                                  for name in procfs.TCP_COUNTERS]
    rows = []
    for p in points:
        for s in (p["restart"] or {}).get("soaks") or []:
            after = s.get("kernel_after")
            row = [p["label"]]
            for name in procfs.TCP_COUNTERS:
                if not after or any(name not in one
                                    for one in after.values()):
                    row.append("n/a")
                    continue
                total = sum(one[name] for one in after.values())
                row.append(f"{total:,} "
                           f"({after.get(KILL, {}).get(name, 0):,})")
            rows.append(row)
    return markdown.table(header, rows)


def timed_lines(points):
    """Markdown lines: each soak's counted failures (timed_failures), with
    the event each is put down to; none without any."""
    lines = []
    for p in points:
        soaks = (p["restart"] or {}).get("soaks") or []
        for run, s in enumerate(soaks, 1):
            label = p["label"] + (f", run {run}" if len(soaks) > 1 else "")
            for begun, failed, method, kind, at in s.get("timed") or []:
                after = "before any event" if at is None \
                    else f"after the {kind} at {at:,.1f} s"
                lines.append(f"- {label}: {method} begun at "
                             f"{begun:,.3f} s, failed at {failed:,.3f} s, "
                             f"{after}")
            if s.get("timed_dropped"):
                lines.append(f"- {label}: {s['timed_dropped']:,} more not "
                             f"kept")
    if not lines:
        return []
    return ["The counting clients' failures, timed from the soak's start, "
            "with the event each is put down to:", ""] + lines + [""]


def section(points, options, heading="##"):
    """Markdown: the soak's method and its table per kernel level."""
    soak_s = options.get("soak_s", DEFAULT_SOAK_S)
    lines = [
        f"{heading} The soak (issue 39)", "",
        f"Each server soaked {soak_s:,} s under a wrk Connection: close "
        f"load (c={', '.join(map(str, options['concurrency']))}), "
        f"{restart.PAUSING_CLIENTS + restart.BACK_TO_BACK_CLIENTS} "
        f"counting keep-alive clients (GETs, and POSTs of "
        f"{restart.POST_BYTES} bytes: see the restarts' method) and "
        f"{restart.CLOSING_CLIENTS} counting Connection: close clients "
        f"(GETs, a new connection each, back to back, nothing retried); the "
        f"counting clients' failures, and the Connection: close ones' "
        f"answers over {restart.SLOW_S:g} s, are put down to the event "
        f"they followed (a kill's while the killed child was going), "
        f"wrk's cannot be (wrk gives no times); a "
        f"graceful restart (SIGUSR1) every "
        f"{GRACEFUL_EVERY_S:g} s, every {LISTEN_EVERY}nd of them a "
        f"reload that adds a Listen address, then one that removes it; a "
        f"full restart on held sockets every "
        f"{min(FULL_RESTART_EVERY_S, soak_s / 2):g} s; one child "
        f"SIGKILLed every {min(KILL_EVERY_S, soak_s / 3):g} s (each event "
        f"after the one before has ended; a graceful restart a whole "
        f"period late is skipped, and counted); MaxConnectionsPerChild "
        f"{SOAK_MAX_CONNECTIONS_PER_CHILD}. Resources: the parent's "
        f"descriptors and RSS, the BPF maps and programs its descriptors "
        f"hold, the shared memory segments the server's processes map, the "
        f"files in its runtime directory and its processes, after the "
        f"warm-up and at the end (the load stopped, the process count back "
        f"or {SETTLE_S} s passed); a → b where they differ.", ""]
    if any(p["restart"] and any(s["listen_probe_failures"]
                                for s in p["restart"]["soaks"])
           for p in points):
        lines += ["Listen probes that failed:", ""]
        lines += [f"- {p['label']}: {failure}" for p in points
                  if p["restart"] for s in p["restart"]["soaks"]
                  for failure in s["listen_probe_failures"]]
        lines.append("")
    for level in options["levels"]:
        group = [p for p in points if p["kernel_level"] == level]
        if group:
            lines += [f"{heading}# soak — {level}", "", soak_table(group),
                      ""] + timed_lines(group) + [restart.kernel_note(
                          "soak", "the part counted from a kill to the next "
                          "event"), "",
                      kernel_table(group), ""]
    return "\n".join(lines)


def headline(points, options):
    """The soak's figure: per bucketed server, what its clients lost and
    what its parent did not give back."""
    parts = []
    for point in points:
        s = point.get("restart")
        if not s or "soaks" not in s:
            continue
        left = sorted({key for soak in s["soaks"] for key in changed(soak)})
        name = SHORT_NAMES.get(base_server(point["server"]), point["label"])
        killed = [(soak.get("losses_after") or {}).get(KILL, {})
                  for soak in s["soaks"]]
        kills = sum((soak.get("events_done") or {}).get(KILL, 0)
                    for soak in s["soaks"])
        gets, posts, closes = (sum(k.get(key, 0) for k in killed)
                               for key in LOSS_KEYS)
        parts.append(f"{name}: restarts and reloads "
                     f"{s['gets_failed_total'] - gets:,} GETs failed / "
                     f"{s['posts_lost_total'] - posts:,} POSTs lost / "
                     f"{s['closes_failed_total'] - closes:,} counted "
                     f"Connection: close failed, {kills} children killed "
                     f"{gets:,} / {posts:,} / {closes:,}; wrk "
                     f"{s['failed_total']:,} failed (a killed child's "
                     f"among them); changed at the end: "
                     f"{', '.join(left) or 'nothing'}")
    return "; ".join(parts) or "no soak run"
