# SPDX-License-Identifier: Apache-2.0
"""The faults workloads (issue 18): a fault injected into a running server
while sequential probes, each a new connection asking for the static file
with a PROBE_TIMEOUT_S limit, measure what a client meets meanwhile.

- crash: a module (test/modules/mod_test_fault.so, `SetHandler test-crash`
  in `<Location /crash>`) segfaults the child serving /crash; CRASH_RATE
  such requests a second for the fault window.
- hang: under a `Connection: close` wrk load, every child of one of the
  FAULT_BUCKETS buckets is SIGSTOPped (stock: the same share of its
  children, a quarter, at least one); the wrk run is compared with one
  just before it, without the hang (throughput ratio), which follows an
  unmeasured one (the servers grow their children under load).
- emfile: test/modules/emfile_shim.so (LD_PRELOAD) makes epoll_create*,
  eventfd fail with EMFILE while a flag file exists; the flag is created,
  one child per bucket (stock: as many children) is killed so that
  replacements must set up, and the flag is removed after EMFILE_S:
  whether the server survived and the time from that relief until it
  serves again (RECOVERY_STREAK probes in a row answered).
- emfile-bucket: the same spell, but every child of one of the
  FAULT_BUCKETS buckets is killed at its start (stock: a quarter of its
  children), so that one bucket has no child for the whole spell (issue
  26: its socket must not keep its share of new connections).
- crash-exit: ServerRoot/crash-at-exit makes every child segfault as it
  exits, MaxConnectionsPerChild CRASH_EXIT_MCPC, and a paced stream of
  requests beside the probes turns the children over.

Every server runs with its MPM's default limits (no --slots), bucketed
with BucketCount FAULT_BUCKETS. Everything is bounded in count and time,
on loopback; processes are signalled by pid only. Pure summary and report
code at the end."""

import http.client
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from . import configs, load, markdown, procfs, stats
from .catalog import (CRASH, CRASH_EXIT, CRASH_EXIT_MCPC, CRASH_RATE, EMFILE,
                      EMFILE_BUCKET, EMFILE_KINDS, FAULT_BUCKETS,
                      FAULT_TITLES, HANG, LIMIT_KINDS, NATIVE,
                      SHORT_NAMES)
from .net import http_get

PROBE_TIMEOUT_S = 5
# A probe slower than this counts as slow (issue 25's bar: none over 1 s).
SLOW_PROBE_S = 1.0
# Probes start at this pace (or right after a slower one ends).
PROBE_INTERVAL_S = 0.05
CRASH_PATH = "/crash"
CHURN_RATE = 40              # requests a second turning children over
CRASH_EXIT_FLAG = "crash-at-exit"
EMFILE_FLAG = "descriptors-run-out"
# Default fault window; the hang's two wrk runs and the EMFILE spell take
# a third of it each.
DEFAULT_FAULT_S = 15
# Answered probes in a row that count as serving again after EMFILE.
RECOVERY_STREAK = 8
RECOVERY_LIMIT_S = 30
# Bound of the wait for a bucketed server's children to hold one bucket
# each (they hold all buckets' sockets from fork until they close the
# others').
GROUPS_TIMEOUT_S = 10
# Bound of the wait, before an EMFILE kill, for a one-connection-per-process
# server to hold a child more than the kill takes (REST_POLL_S apart).
SPARE_TIMEOUT_S = 30
REST_POLL_S = 0.25
CRASH_LOG_TEXT = "crashes on purpose"
SEGFAULT_LOG_TEXT = "Segmentation fault"


class FaultError(Exception):
    """The fault could not be set up (e.g. no children to stop)."""


def windows(fault_s):
    """Seconds of each phase for a fault window of fault_s: crash and
    crash-exit for fault_s; the hang's baseline and hung wrk runs and the
    EMFILE spell a third of it each (at least 1 s)."""
    third = max(1, fault_s // 3)
    return {CRASH: fault_s, CRASH_EXIT: fault_s, HANG: third,
            EMFILE: third, EMFILE_BUCKET: third}


# ---------------------------------------------------------------- servers

@dataclass
class ServerSettings:
    """What a fault adds to an httpd under test."""
    directives: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    files: list = field(default_factory=list)   # names created in root
    bucket_count: int = FAULT_BUCKETS           # bucketed's BucketCount


def with_bucket_count(directives, count):
    """A bucketed server's directives with its BucketCount set to count."""
    kept = [d for d in directives if not d.startswith("BucketCount ")]
    return kept + [f"BucketCount {count}"]


def server_settings(kind, fault_modules, root):
    """The ServerSettings of fault kind for a server in root; fault_modules:
    the directory holding mod_test_fault.so and emfile_shim.so."""
    settings = ServerSettings()
    if kind == CRASH:
        settings.directives += [
            f'LoadModule test_fault_module '
            f'"{os.path.join(fault_modules, "mod_test_fault.so")}"',
            f"<Location {CRASH_PATH}>", "    SetHandler test-crash",
            "</Location>"]
    elif kind == CRASH_EXIT:
        settings.directives += [
            f'LoadModule test_fault_module '
            f'"{os.path.join(fault_modules, "mod_test_fault.so")}"',
            f"MaxConnectionsPerChild {CRASH_EXIT_MCPC}"]
        settings.files.append(CRASH_EXIT_FLAG)
    elif kind in EMFILE_KINDS:
        settings.environment.update({
            "LD_PRELOAD": os.path.join(fault_modules, "emfile_shim.so"),
            "BUCKETED_EMFILE_FLAG": os.path.join(root, EMFILE_FLAG)})
    return settings


def needed_modules(fault_modules):
    return [os.path.join(fault_modules, name)
            for name in ("mod_test_fault.so", "emfile_shim.so")]


# ---------------------------------------------------------------- probes

class Probes:
    """Outcomes of sequential probes: each one's seconds (failed ones
    included: a timeout counts PROBE_TIMEOUT_S or so), timeouts, other
    errors (a few samples kept)."""

    SAMPLES = 5

    def __init__(self, port, path="/" + configs.DOC_NAME,
                 expected=configs.DOC_BODY):
        self.port = port
        self.path = path
        self.expected = expected
        self.seconds = []
        self.ok = 0
        self.timeouts = 0
        self.errors = 0
        self.samples = []

    def _error(self, text):
        self.errors += 1
        if len(self.samples) < self.SAMPLES:
            self.samples.append(text)

    def one(self):
        """One probe; True when it was answered right."""
        began = time.monotonic()
        answered = False
        try:
            status, body = http_get(self.port, self.path,
                                    timeout=PROBE_TIMEOUT_S)
        except TimeoutError:
            self.timeouts += 1
        except (OSError, http.client.HTTPException) as error:
            self._error(repr(error))
        else:
            answered = status == 200 and body == self.expected
            if answered:
                self.ok += 1
            else:
                self._error(f"HTTP {status}, {len(body)} bytes")
        self.seconds.append(time.monotonic() - began)
        return answered

    def until(self, done, deadline):
        """Probes at PROBE_INTERVAL_S until done() or the deadline."""
        while not done() and time.monotonic() < deadline:
            began = time.monotonic()
            self.one()
            left = PROBE_INTERVAL_S - (time.monotonic() - began)
            if left > 0:
                time.sleep(left)

    def result(self):
        ms = [s * 1000.0 for s in self.seconds]
        return {"probes": len(ms), "ok": self.ok,
                "timeouts": self.timeouts, "errors": self.errors,
                "error_samples": self.samples,
                "slow": sum(1 for s in self.seconds if s > SLOW_PROBE_S),
                "latency_ms": {"p50": stats.percentile(ms, 50),
                               "p99": stats.percentile(ms, 99),
                               "max": max(ms) if ms else None}}


def paced_requests(port, path, rate, seconds, stop):
    """GET path at `rate` a second for `seconds` (or until stop is set),
    each on a new connection, answers ignored; returns how many were
    sent."""
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        began = time.monotonic()
        try:
            http_get(port, path, timeout=PROBE_TIMEOUT_S)
        except (OSError, http.client.HTTPException):
            pass
        sent += 1
        stop.wait(max(0.0, 1.0 / rate - (time.monotonic() - began)))
    return sent


class Background:
    """A function run in a thread; result() joins it (bounded)."""

    def __init__(self, function, *args):
        self.value = None
        self.error = None
        self.thread = threading.Thread(target=self._run,
                                       args=(function, args), daemon=True)
        self.thread.start()

    def _run(self, function, args):
        try:
            self.value = function(*args)
        except Exception as error:   # reported by result()
            self.error = error

    def running(self):
        return self.thread.is_alive()

    def result(self, timeout):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise FaultError("a background task did not end in time")
        if self.error:
            raise self.error
        return self.value


# ---------------------------------------------------------------- children

def children(server):
    return procfs.children_of(server.pid)


def bucket_groups(server):
    """{listening socket inode: [child pids]} of a bucketed server's first
    port once every child holds exactly one of its sockets (waits for it,
    bounded); FaultError if they never do."""
    deadline = time.monotonic() + GROUPS_TIMEOUT_S
    while time.monotonic() < deadline:
        sockets = procfs.listening_inodes(server.ports[0])
        groups = {}
        for child in children(server):
            mine = procfs.socket_inodes_of(child) & sockets
            if len(mine) != 1:
                groups = None
                break
            groups.setdefault(mine.pop(), []).append(child)
        if groups:
            return groups
        time.sleep(0.05)
    raise FaultError(f"{server.spec.name}: children never held one bucket "
                     f"each within {GROUPS_TIMEOUT_S} s")


def stock_share(pids, buckets=FAULT_BUCKETS):
    """As many of a stock server's children as one of `buckets` buckets
    would hold: a quarter, rounded up, at least one."""
    return pids[:max(1, math.ceil(len(pids) / buckets))]


def signal_all(pids, signum):
    """Sends signum to each pid; the ones already gone are skipped."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _log_count(server, text):
    try:
        with open(os.path.join(server.workdir, "error_log"),
                  errors="replace") as log:
            return log.read().count(text)
    except FileNotFoundError:
        return 0


# ---------------------------------------------------------------- faults

@dataclass
class Context:
    """What a fault run needs from the runner: the server, the fault
    window, and wrk(seconds) -> wrk command for the hang's load."""
    server: object
    fault_s: int
    wrk_command: object
    log_dir: str


def _probe_beside(ctx, fault, path, rate, log_text):
    """Probes while a background client GETs `path` at `rate` a second
    for the fault's window; the probes' result, what the client sent and
    how often `log_text` came up in the error log meanwhile."""
    server = ctx.server
    port = server.ports[0]
    seconds = windows(ctx.fault_s)[fault]
    before = _log_count(server, log_text)
    stop = threading.Event()
    client = Background(paced_requests, port, path, rate, seconds, stop)
    probes = Probes(port)
    try:
        probes.until(lambda: not client.running(),
                     time.monotonic() + seconds + PROBE_TIMEOUT_S)
    finally:
        stop.set()
        sent = client.result(PROBE_TIMEOUT_S + 5)
    return (probes.result() | {"window_s": seconds},
            sent, _log_count(server, log_text) - before)


def _crash(ctx):
    result, sent, crashes = _probe_beside(ctx, CRASH, CRASH_PATH,
                                          CRASH_RATE, CRASH_LOG_TEXT)
    return result | {"crash_requests": sent, "crashes": crashes}


def _crash_exit(ctx):
    result, sent, crashes = _probe_beside(ctx, CRASH_EXIT,
                                          "/" + configs.DOC_NAME, CHURN_RATE,
                                          SEGFAULT_LOG_TEXT)
    return result | {"churn_requests": sent,
                     "max_connections_per_child": CRASH_EXIT_MCPC,
                     "crashes": crashes}


def bucket_victims(server):
    """The children the hang stops and emfile-bucket kills: every child of
    the bucket most children hold (bucketed), a quarter of the children
    (stock)."""
    if server.spec.mpm == "bucketed":
        return max(bucket_groups(server).values(), key=len)
    pids = children(server)
    if not pids:
        raise FaultError(f"{server.spec.name} has no children to stop")
    return stock_share(pids)


def _wrk(ctx, seconds, name):
    result, _ = load.run_wrk(ctx.wrk_command(seconds), seconds,
                             os.path.join(ctx.log_dir, name))
    return result


def _hang(ctx):
    """An unmeasured wrk run first: with default limits the server grows
    its children under the load, and the baseline must not be the ramp."""
    server = ctx.server
    seconds = windows(ctx.fault_s)[HANG]
    _wrk(ctx, seconds, "wrk-hang-warmup.log")
    baseline = _wrk(ctx, seconds, "wrk-before-hang.log")
    victims = bucket_victims(server)
    probes = Probes(server.ports[0])
    try:
        procfs.sigstop(victims)
        loaded = Background(_wrk, ctx, seconds, "wrk-hang.log")
        probes.until(lambda: not loaded.running(),
                     time.monotonic() + seconds + load.WRK_GRACE_S)
        hung = loaded.result(load.WRK_GRACE_S)
    finally:
        signal_all(victims, signal.SIGCONT)
    return probes.result() | {
        "window_s": seconds, "stopped_children": len(victims),
        "children": len(children(server)),
        "rps_without": baseline["rps"], "rps_with": hung["rps"],
        "throughput_ratio": hung["rps"] / baseline["rps"]
        if baseline["rps"] else None,
        "wrk_errors_with": hung["errors"]}


def wait_for_a_spare(count_children, taken, alive=lambda: True,
                     clock=time.monotonic, sleep=time.sleep):
    """Waits until count_children() exceeds taken, at most
    SPARE_TIMEOUT_S; returns that count, FaultError if it never does or
    the server is no longer alive().
    Before it, a server still starting or backing off after the last
    spell may hold one child per bucket, and the kill would measure a
    start-up instead of the fault."""
    deadline = clock() + SPARE_TIMEOUT_S
    while True:
        count = count_children()
        if count > taken:
            return count
        if not alive():
            raise FaultError("the server exited while its children were "
                             "counted")
        if clock() >= deadline:
            raise FaultError(f"{count} children, never more than the "
                             f"{taken} the kill takes within "
                             f"{SPARE_TIMEOUT_S} s")
        sleep(REST_POLL_S)


def emfile_victims(server):
    """One child per bucket (bucketed), as many stock children (all of
    them if fewer). A one-connection-per-process server rests with more
    children than that (prefork: MinSpareServers 5; bucketed's prefork
    model: two in its first bucket), so it is first given time to hold
    one more than the kill takes; the event models rest with one child
    per bucket (stock: 3), and the kill takes them all."""
    if server.spec.one_connection_per_process:
        wait_for_a_spare(lambda: len(children(server)), FAULT_BUCKETS,
                         server.alive)
    if server.spec.mpm == "bucketed":
        return [pids[0] for pids in bucket_groups(server).values()]
    return children(server)[:FAULT_BUCKETS]


def _recover(server, probes, relief):
    """Probes after relief until RECOVERY_STREAK answered in a row
    (returns the seconds from relief to the first of them answered), the
    server's exit or RECOVERY_LIMIT_S (None)."""
    streak, first = 0, None
    deadline = relief + RECOVERY_LIMIT_S
    while time.monotonic() < deadline and server.alive():
        began = time.monotonic()
        if probes.one():
            streak += 1
            first = first if streak > 1 else time.monotonic() - relief
            if streak >= RECOVERY_STREAK:
                return first
        else:
            streak = 0
        time.sleep(max(0.0, PROBE_INTERVAL_S - (time.monotonic() - began)))
    return None


def _emfile(ctx, kind=EMFILE, choose_victims=emfile_victims):
    server = ctx.server
    seconds = windows(ctx.fault_s)[kind]
    flag = os.path.join(server.workdir, EMFILE_FLAG)
    victims = choose_victims(server)
    children_before = len(children(server))
    probes = Probes(server.ports[0])
    with open(flag, "w"):
        pass
    try:
        signal_all(victims, signal.SIGKILL)
        probes.until(lambda: not server.alive(),
                     time.monotonic() + seconds)
    finally:
        os.unlink(flag)
    relief = time.monotonic()
    exited_during = not server.alive()
    recovery = None if exited_during else _recover(server, probes, relief)
    return probes.result() | {
        "window_s": seconds, "killed_children": len(victims),
        "children_before": children_before, "survived": server.alive(),
        "recovery_s": recovery}


def _emfile_bucket(ctx):
    return _emfile(ctx, EMFILE_BUCKET, bucket_victims)


MEASURE = {CRASH: _crash, HANG: _hang, EMFILE: _emfile,
           CRASH_EXIT: _crash_exit, EMFILE_BUCKET: _emfile_bucket}


def measure(kind, ctx):
    """One fault run of kind: a dict for the run record ("fault": ...,
    and rps: the hang's loaded req/s, None for the others)."""
    result = MEASURE[kind](ctx)
    result["kind"] = kind
    return {"fault": result, "rps": result.get("rps_with")}


def describe(result):
    """One fault run as a progress line."""
    p99 = result["latency_ms"]["p99"]
    text = (f"{result['probes']} probes, p99 "
            f"{'n/a' if p99 is None else f'{p99:.1f} ms'}, "
            f"{result['timeouts']} timeouts, {result['errors']} errors")
    if result["kind"] == HANG and result["throughput_ratio"] is not None:
        text += f", req/s ratio {result['throughput_ratio']:.2f}"
    if result["kind"] in EMFILE_KINDS:
        recovery = result["recovery_s"]
        text += (f", survived {result['survived']}, serving again after "
                 f"{'n/a' if recovery is None else f'{recovery:.2f} s'}")
    return text


# ---------------------------------------------------------------- summary

def _median(values):
    return stats.median([v for v in values if v is not None])


def summarize_runs(records):
    """The fault numbers of one point (one server, one fault) over its
    successful runs: medians of the per-run probe counts and percentiles,
    the worst max, per-run timeouts and errors, and the fault's own
    numbers."""
    runs = [r["fault"] for r in records if r["ok"] and r.get("fault")]
    if not runs:
        return None
    latency = [r["latency_ms"] for r in runs]
    summary = {
        "kind": runs[0]["kind"], "runs": len(runs),
        "probes": _median([r["probes"] for r in runs]),
        "p50_ms": _median([x["p50"] for x in latency]),
        "p99_ms": _median([x["p99"] for x in latency]),
        "max_ms": _median([x["max"] for x in latency]),
        "worst_max_ms": max((x["max"] for x in latency
                             if x["max"] is not None), default=None),
        "timeouts": [r["timeouts"] for r in runs],
        "slow": [r.get("slow", 0) for r in runs],
        "errors": [r["errors"] for r in runs],
        "error_samples": [s for r in runs for s in r["error_samples"]][:5]}
    if runs[0]["kind"] in EMFILE_KINDS:
        summary["killed_of"] = [(r["killed_children"],
                                 r.get("children_before")) for r in runs]
    for key in ("crashes", "stopped_children", "killed_children",
                "throughput_ratio", "rps_without", "rps_with",
                "recovery_s", "children_started", "held_failures",
                "held_closed_between"):
        values = [r[key] for r in runs if key in r]
        if values:
            summary[key] = _median(values)
            summary[key + "_all"] = values
    if "survived" in runs[0]:
        summary["survived"] = sum(1 for r in runs if r["survived"])
    return summary


# ---------------------------------------------------------------- report



def _ms(value):
    return "n/a" if value is None else f"{value:,.1f}"


def _counts(values):
    """Total, then the runs' counts: `3 (0/1/2)`."""
    return f"{sum(values)} ({'/'.join(map(str, values))})"


def _range(values, digits=2, unit=""):
    present = [v for v in values if v is not None]
    if not present:
        return ""
    return f" ({min(present):.{digits}f}-{max(present):.{digits}f}{unit})"


def _extra(summary):
    """The fault's own column(s)."""
    kind = summary["kind"]
    if kind == HANG:
        ratio = summary.get("throughput_ratio")
        text = "n/a" if ratio is None else \
            f"{ratio:.2f}x{_range(summary['throughput_ratio_all'])}"
        return [text, f"{summary['stopped_children']:.0f}"]
    if kind in EMFILE_KINDS:
        recovery = summary.get("recovery_s")
        values = summary.get("recovery_s_all", [])
        text = "n/a" if recovery is None else \
            f"{recovery:.2f}{_range(values)}"
        return [_counts(summary["slow"]),
                f"{summary['survived']} of {summary['runs']}", text,
                "/".join(f"{k} of {'n/a' if b is None else b}"
                         for k, b in summary["killed_of"])]
    if kind in LIMIT_KINDS:
        return [_counts(summary["slow"]),
                _counts(summary["held_failures_all"]),
                _counts(summary["held_closed_between_all"]),
                f"{summary['children_started']:.0f}"
                f"{_range(summary['children_started_all'], 0)}"]
    return [f"{summary.get('crashes', 0):.0f}"]


EXTRA_HEADERS = {
    CRASH: ["crashes (median)"],
    CRASH_EXIT: ["children crashed at exit (median)"],
    HANG: ["req/s with / without the hang (range)", "children stopped"],
    **{kind: [f"probes over {SLOW_PROBE_S:g} s (per run)", "survived",
              "relief to serving again, s (range)",
              "children killed of those it had (per run)"]
       for kind in EMFILE_KINDS},
    **{kind: [f"probes over {SLOW_PROBE_S:g} s (per run)",
              "held clients' failures (per run)",
              "held connections closed between requests (per run)",
              "children started (range)"] for kind in LIMIT_KINDS},
}


def fault_table(points):
    """Rows: the servers of one fault; probe numbers and the fault's own."""
    kind = points[0]["fault"]["kind"]
    rows = []
    for p in points:
        s = p["fault"]
        failed = p["runs"] - p["ok_runs"]
        label = p["label"] + (f" ({failed} of {p['runs']} runs failed)"
                              if failed else "")
        rows.append([label, f"{s['probes']:.0f}", _ms(s["p50_ms"]),
                     _ms(s["p99_ms"]),
                     f"{_ms(s['max_ms'])} ({_ms(s['worst_max_ms'])})",
                     _counts(s["timeouts"]), _counts(s["errors"])]
                    + _extra(s))
    header = ["Configuration", "probes", "p50 ms", "p99 ms",
              "max ms (worst run)", "timeouts (per run)",
              "other errors (per run)"] + EXTRA_HEADERS[kind]
    return markdown.table(header, rows)


def section(points, options, heading="##",
            title="Faults (issue 18)"):
    """Markdown: one table per kernel level and fault workload; empty
    without fault points."""
    faulted = [p for p in points if p.get("fault")
               and p["fault"]["kind"] not in LIMIT_KINDS]
    if not faulted:
        return ""
    fault_s = options.get("fault_s", DEFAULT_FAULT_S)
    spans = windows(fault_s)
    lines = [
        f"{heading} {title}", "",
        f"Sequential probes of the static file, a new connection each, "
        f"started every {PROBE_INTERVAL_S * 1000:.0f} ms (or when the "
        f"previous one ends), each limited to {PROBE_TIMEOUT_S} s, during "
        f"the fault. Latencies over every probe, failed ones included (a "
        f"timeout counts ~{PROBE_TIMEOUT_S} s); p50/p99/max are medians "
        f"over the {options['runs']} runs of each run's value, the worst "
        f"run's max in parentheses; timeouts and other errors (resets, "
        f"refusals, wrong answers) are totals, then per run. Servers run "
        f"with their MPM's default limits; bucketed with BucketCount "
        f"{FAULT_BUCKETS}. Windows: crash and crash-exit {spans[CRASH]} s; "
        f"hang: wrk {spans[HANG]} s unmeasured, {spans[HANG]} s "
        f"without, then {spans[HANG]} s with the hang (probes during the "
        f"latter; req/s ratio with / without); emfile and emfile-bucket: "
        f"flag held "
        f"{spans[EMFILE]} s (and until the probe then in flight ends), "
        f"then probes until {RECOVERY_STREAK} in a row are answered (at "
        f"most {RECOVERY_LIMIT_S} s); before emfile's kill a "
        f"one-connection-per-process server is given up to "
        f"{SPARE_TIMEOUT_S} s to hold a child more than the kill takes, "
        f"as it does at rest.", ""]
    return "\n".join(lines + tables(faulted, options, heading))


def tables(points, options, heading):
    """Markdown lines: a table per kernel level and workload of points
    (faults or near-limit), under a heading with the workload's title."""
    lines = []
    for level in options["levels"]:
        for name in options["workloads"]:
            group = [p for p in points if p["kernel_level"] == level
                     and p["workload"] == name]
            if not group:
                continue
            kind = group[0]["fault"]["kind"]
            load_note = f", c={group[0]['concurrency']}" \
                if kind == HANG else ""
            lines += [f"{heading}# {name}: {FAULT_TITLES[kind]} — {level}"
                      f"{load_note}", "", fault_table(group), ""]
    return lines


# The servers the results tables' probe figures compare.
HEADLINE_SERVERS = ("bucketed-event", "bucketed-reuseport", "event")


def probe_headline(points, kinds, per_run, what):
    """For the results tables: per server of HEADLINE_SERVERS, per_run(a
    point's fault summary) summed over the kinds' workloads run by run (the
    native kernel level): the total and its range per run."""
    parts = []
    for server in HEADLINE_SERVERS:
        found = [per_run(p["fault"]) for p in points
                 if p["server"] == server and p.get("fault")
                 and p["fault"]["kind"] in kinds
                 and p["kernel_level"] == NATIVE]
        if found:
            runs = [sum(counts) for counts in zip(*found)]
            parts.append(f"{SHORT_NAMES[server]} {sum(runs):,} "
                         f"({markdown.per_run_range(runs)} per run)")
    return f"{what}: {', '.join(parts) or 'no point'}"


def headline(points, options):
    """The faults' figure: probes that failed (timed out or got an error)
    over every fault."""
    return probe_headline(
        points, [k for k in FAULT_TITLES if k not in LIMIT_KINDS],
        lambda s: [t + e for t, e in zip(s["timeouts"], s["errors"])],
        "failed probes, every fault")
