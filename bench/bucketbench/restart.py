# SPDX-License-Identifier: Apache-2.0
"""The restart workloads (issue 24): N full restarts of a server under a wrk
load, each a stop then a start as Debian's apache2.service does them: a
graceful-stop (SIGWINCH to the parent, then a wait for it to exit) and a
new parent. One wrk run spans them all: it starts LEAD_S before the first
stop and is interrupted (SIGINT: wrk then reports as usual) TAIL_S after
the last start answers; between one start answering and the next stop the
server serves for --restart-interval seconds.

How a server restarts is its variant (catalog.RESTART_VARIANTS):
- own: the stock servers, and bucketed as a control, stop and start
  binding their own sockets, as today.
- held: the listening sockets are bound once by the harness as systemd's
  socket units bind them (ReusePort=yes, Backlog=HOLDER_BACKLOG) and held
  across the restarts; every start receives them as sd_listen_fds(3)
  describes (activation.Holder). Connections arriving while the server is
  down wait in the held socket's queue.
- swap: held, and the module file the configuration loads is replaced
  between stop and start, in turn by a second build (--swap-build) and by
  the first, by rename as dpkg installs a file.

Everything runs on loopback, bounded in time; processes are signalled by
pid only. Pure summary and report code at the end."""

import hashlib
import http.client
import os
import shutil
import signal
import subprocess
import time
from dataclasses import replace

from . import (activation, configs, load, markdown, placement, procfs,
               stats)
from .catalog import (RESTART_HELD, RESTART_OWN, RESTART_SWAP,
                      RESTART_VARIANTS, WORKLOADS)
from .environment import BUCKETED_MODULES
from .net import http_get
from .server import HTTP_TIMEOUT_S, Server, ServerError

DEFAULT_RESTARTS = 8
DEFAULT_INTERVAL_S = 1.5
DEFAULT_CONCURRENCY = 200
# systemd's socket unit of the acceptance: ReusePort=yes, Backlog=4096.
HOLDER_BACKLOG = 4096
# What LISTEN_FDNAMES says without FileDescriptorName=: the unit's name.
HOLDER_FD_NAME = "apache2.socket"
LEAD_S = 1.5
TAIL_S = 1.5
# Bounds: a graceful stop waits for in-flight requests; past
# --restart-stop-timeout (default STOP_TIMEOUT_S) the parent is terminated
# and the run records a forced stop. A start that answers nothing within
# READY_TIMEOUT_S fails the run.
STOP_TIMEOUT_S = 30
READY_TIMEOUT_S = 30
READY_POLL_S = 0.01
# wrk's own -d: a bound for a run whose every restart took the longest
# allowed; the harness interrupts it long before.
WRK_WAIT_S = 15


class RestartError(ServerError):
    """A restart failed: the server did not stop or start in time."""


def variant_spec(spec, variant):
    """The ServerSpec of spec restarted the variant's way: the stock
    servers keep their names (the ratio baselines); bucketed's get the
    variant in name and label."""
    if spec.mpm != "bucketed":
        return replace(spec, label=f"{spec.label}, stop + start",
                       restart=variant)
    return replace(spec, name=f"{spec.name}-{variant}",
                   label=f"{spec.label}, {RESTART_VARIANTS[variant]}",
                   restart=variant)


def expand(specs, workload, swap_available):
    """The (variant) servers of a restart workload from its selected base
    specs: stock ones restart their own way, bucketed's in each of the
    workload's bucketed variants (swap only with a second build)."""
    servers = []
    for spec in specs:
        if spec.mpm != "bucketed":
            servers.append(variant_spec(spec, RESTART_OWN))
            continue
        for variant in workload.restart_variants:
            if variant == RESTART_SWAP and not swap_available:
                continue
            servers.append(variant_spec(spec, variant))
    return servers


def _sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _replace_file(source, target):
    """target's content becomes source's by rename (a new inode, as dpkg
    installs): a running process keeps what it mapped."""
    temporary = target + ".new"
    shutil.copy2(source, temporary)
    os.rename(temporary, target)


class RestartServer(Server):
    """A Server that restarts fully (restart()) the way its spec's variant
    says. swap_dir: the second build's directory (the swap variant)."""

    def __init__(self, spec, level, ports, workdir, tools, swap_dir=None,
                 **kwargs):
        self.holder = None
        self.builds = None
        if spec.restart == RESTART_SWAP:
            # Its own copies: the others keep loading the first build.
            tools, self.builds = self._private_modules(tools, workdir,
                                                       swap_dir)
        self.loaded = "first"
        super().__init__(spec, level, ports, workdir, tools, **kwargs)

    @staticmethod
    def _private_modules(tools, workdir, swap_dir):
        target = os.path.join(workdir, "modules")
        builds = os.path.join(workdir, "builds")
        os.makedirs(target, exist_ok=True)
        for name, source_dir in (("first", tools.bucketed_dir),
                                 ("second", swap_dir)):
            os.makedirs(os.path.join(builds, name), exist_ok=True)
            shutil.copy2(os.path.join(source_dir, BUCKETED_MODULES[0]),
                         os.path.join(builds, name))
        for name in BUCKETED_MODULES:
            shutil.copy2(os.path.join(tools.bucketed_dir, name), target)
        return (replace(tools, bucketed_dir=target),
                {name: os.path.join(builds, name, BUCKETED_MODULES[0])
                 for name in ("first", "second")})

    @property
    def held(self):
        return self.spec.restart in (RESTART_HELD, RESTART_SWAP)

    def _hold(self):
        if self.holder is None:
            sockets = [activation.listen_socket(
                "127.0.0.1", port, reuseport=True, backlog=HOLDER_BACKLOG)
                for port in self.ports]
            self.holder = activation.Holder(
                sockets, names=[HOLDER_FD_NAME] * len(sockets))

    def launch(self):
        # Leftovers of a master that died hold the ports: gone first (not
        # the held sockets, which must outlive every start).
        Server.stop(self)
        with open(os.path.join(self.workdir, "stderr.log"), "ab") as stderr:
            options = dict(env=self._environment(),
                           stdin=subprocess.DEVNULL, stdout=stderr,
                           stderr=stderr,
                           **placement.server_process(self.tools.server_cpus))
            if self.held:
                self._hold()
                self.process = self.holder.popen(self._command(),
                                                 **options)
            else:
                self.process = subprocess.Popen(self._command(), **options)

    def stop(self):
        Server.stop(self)
        if self.holder is not None:
            self.holder.close()
            self.holder = None

    # ---- one full restart ----

    def _graceful_stop(self, timeout_s):
        """SIGWINCH (httpd's graceful-stop) and a wait of up to timeout_s
        for the parent and its process group to go; True when it had to be
        forced (SIGTERM, then SIGKILL)."""
        process = self.process
        process.send_signal(signal.SIGWINCH)
        forced = False
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            forced = True
            procfs.stop_process(process, STOP_TIMEOUT_S)
        # Children that outlive their parent hold sockets: an own-socket
        # start would fail to bind.
        deadline = time.monotonic() + timeout_s
        while procfs.process_group(process.pid):
            if time.monotonic() > deadline:
                forced = True
                procfs.kill_until_gone(
                    lambda: procfs.process_group(process.pid),
                    STOP_TIMEOUT_S, what=f"{self.spec.name}'s children")
                break
            time.sleep(READY_POLL_S)
        self.process = None
        return forced

    def _swap_module(self):
        self.loaded = "second" if self.loaded == "first" else "first"
        _replace_file(self.builds[self.loaded], self.tools.mpm_module(
            "bucketed"))

    def _wait_answer(self, deadline):
        """Polls the static file until the new server answers it right;
        RestartError past deadline or if the parent exits."""
        path = "/" + configs.DOC_NAME
        while True:
            if not self.alive():
                raise RestartError(f"{self.spec.name} exited while starting "
                                   f"({self.exit_description()})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise RestartError(f"{self.spec.name} did not answer within "
                                   f"{READY_TIMEOUT_S} s of its start")
            try:
                status, body = http_get(self.ports[0], path,
                                        timeout=min(left, HTTP_TIMEOUT_S))
            except (OSError, http.client.HTTPException):
                time.sleep(READY_POLL_S)
                continue
            if status == 200 and body == configs.DOC_BODY:
                return
            time.sleep(READY_POLL_S)

    def restart(self, stop_timeout_s=STOP_TIMEOUT_S):
        """One full restart: {stop_ms, start_ms, total_ms, forced, build}.
        The start counts until the server answers again."""
        began = time.monotonic()
        forced = self._graceful_stop(stop_timeout_s)
        stopped = time.monotonic()
        if self.builds:
            self._swap_module()
        self.launch()
        self._wait_answer(time.monotonic() + READY_TIMEOUT_S)
        answered = time.monotonic()
        return {"stop_ms": (stopped - began) * 1000.0,
                "start_ms": (answered - stopped) * 1000.0,
                "total_ms": (answered - began) * 1000.0, "forced": forced,
                "build": self.loaded if self.builds else None}


# ---------------------------------------------------------------- a run

def wrk_bound_s(restarts, interval_s, stop_timeout_s=STOP_TIMEOUT_S):
    """wrk's -d for a run: every restart at its longest, whole seconds."""
    per_restart = interval_s + stop_timeout_s * 3 + READY_TIMEOUT_S
    return int(LEAD_S + restarts * per_restart + TAIL_S + WRK_WAIT_S) + 1


class _Wrk:
    """wrk in the background, interrupted when the restarts are done."""

    def __init__(self, command, log_path):
        self.log = open(log_path, "w+b")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                        stdout=self.log,
                                        stderr=subprocess.STDOUT)
        try:
            placement.check_client(self.process.pid, "wrk")
        except placement.PlacementError as error:
            self.process.kill()
            self.process.wait()
            self.log.close()
            raise load.LoadError(str(error)) from None

    def finish(self):
        """SIGINT (wrk stops and reports), a bounded wait, SIGKILL if it
        hangs. (parsed result, client CPU seconds); LoadError without a
        result."""
        pid = self.process.pid
        if self.process.poll() is None:
            os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + WRK_WAIT_S
        status = usage = None
        while status is None:
            waited, status_now, usage_now = os.wait4(pid, os.WNOHANG)
            if waited:
                status, usage = status_now, usage_now
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
            else:
                time.sleep(0.01)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        self.log.close()
        result = load.parse_result(text)
        if self.process.returncode != 0 or result is None:
            raise load.LoadError(f"wrk exited with status "
                                 f"{self.process.returncode}:\n"
                                 + "\n".join(text.splitlines()[-10:]))
        return result, usage.ru_utime + usage.ru_stime


def measure(server, wrk_command, restarts, interval_s, log_dir,
            stop_timeout_s=STOP_TIMEOUT_S):
    """One run: wrk_command(seconds) under way while server goes through
    `restarts` full restarts. A dict for the run record: wrk's numbers and
    "restart": the restarts' own."""
    wrk = _Wrk(wrk_command(wrk_bound_s(restarts, interval_s,
                                       stop_timeout_s)),
               os.path.join(log_dir, "wrk-restart.log"))
    done = []
    failure = None
    try:
        time.sleep(LEAD_S)
        for number in range(restarts):
            if number:
                time.sleep(interval_s)
            try:
                done.append(server.restart(stop_timeout_s))
            except (ServerError, OSError) as error:
                failure = f"restart {number + 1} of {restarts}: {error}"
                break
        if failure is None:
            time.sleep(TAIL_S)
    finally:
        result, client_cpu_s = wrk.finish()
    if failure:
        raise RestartError(failure)
    totals = [r["total_ms"] for r in done]
    result.update({
        "wrk_command": wrk.process.args, "client_cpu_s": client_cpu_s,
        "server_processes": len(procfs.process_tree(server.pid)),
        "restart": {
            "variant": server.spec.restart, "held": server.held,
            "swapped": bool(server.builds),
            "planned": restarts, "done": len(done),
            "interval_s": interval_s,
            "failed_requests": failed_requests(result),
            "stop_ms": [r["stop_ms"] for r in done],
            "start_ms": [r["start_ms"] for r in done],
            "total_ms": totals,
            "slowest_ms": max(totals) if totals else None,
            "forced_stops": sum(1 for r in done if r["forced"]),
            "builds": [r["build"] for r in done] if server.builds
            else None}})
    return result


def failed_requests(result):
    """What a client lost: wrk's connect, read and write errors, timeouts
    and answers other than 2xx."""
    return sum(result["errors"].values())


def describe(record):
    """One restart run as a progress line."""
    r = record["restart"]
    p99 = record["latency_ms"]["p99"] if record["latency_ms"] else None
    slowest = r["slowest_ms"]
    return (f"{r['done']} restarts, {record['requests']:,} requests, "
            f"{r['failed_requests']:,} failed, slowest stop+start "
            f"{'n/a' if slowest is None else f'{slowest:,.0f} ms'}, "
            f"{record['rps']:,.0f} req/s, p99 "
            f"{'n/a' if p99 is None else f'{p99:.1f} ms'}")


def module_facts(swap_dir):
    """What the second build is, for the run's meta."""
    path = os.path.join(swap_dir, BUCKETED_MODULES[0])
    return {"source": path, "sha256": _sha256(path),
            "built": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(
                os.path.getmtime(path)))}


# ---------------------------------------------------------------- summary

def _p99(record):
    return record["latency_ms"]["p99"] if record.get("latency_ms") else None


def summarize_runs(records):
    """A restart point's numbers over its successful runs (None without
    one): per-run lists in round order, medians and ranges."""
    good = [r for r in records if r["ok"] and r.get("restart")]
    if not good:
        return None
    failed = [r["restart"]["failed_requests"] for r in good]
    slowest = [r["restart"]["slowest_ms"] for r in good]
    return {
        "runs": len(good),
        "restarts": [r["restart"]["done"] for r in good],
        "requests": [r["requests"] for r in good],
        "requests_median": stats.median([r["requests"] for r in good]),
        "failed_requests": failed, "failed_total": sum(failed),
        "failed_median": stats.median(failed),
        "errors": {kind: sum(r["errors"][kind] for r in good)
                   for kind in good[0]["errors"]},
        "slowest_ms": slowest, "slowest_median_ms": stats.median(
            [s for s in slowest if s is not None]),
        "slowest_worst_ms": max((s for s in slowest if s is not None),
                                default=None),
        "forced_stops": sum(r["restart"]["forced_stops"] for r in good),
        "rps": stats.summarize([r["rps"] for r in good]),
        "p99_ms": stats.summarize([_p99(r) for r in good]),
        "variant": good[0]["restart"]["variant"],
        "held": good[0]["restart"]["held"],
        "swapped": good[0]["restart"]["swapped"]}


def p99_ratios(mine, theirs):
    """Same-round p99 ratios of a point's runs against a baseline's."""
    def by_round(runs):
        return {r["round"]: _p99(r) if r["ok"] else None for r in runs}
    per_round = stats.round_ratios(by_round(mine), by_round(theirs))
    return {"median": stats.median(per_round), "per_round": per_round}


# ---------------------------------------------------------------- report

def _n(value, digits=0):
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _span(summary, digits=0):
    """median (min-max) of a stats.summarize() result."""
    if not summary or summary["median"] is None:
        return "n/a"
    return (f"{summary['median']:,.{digits}f} ({summary['min']:,.{digits}f}"
            f"-{summary['max']:,.{digits}f})")


def _ratio(ratio):
    if not ratio or ratio.get("median") is None:
        return "–"
    rounds = ratio["per_round"]
    return (f"{ratio['median']:.2f}x ({min(rounds):.2f}-"
            f"{max(rounds):.2f}x)")


def _per_run(values):
    return "/".join(f"{v:,}" for v in values)


def restart_table(points):
    """One row per server of a restart workload."""
    header = ["Configuration", "restarts per run", "requests, median "
              "(range)", "failed requests, total (per run)",
              "failed c/r/w/t/non-2xx", "slowest stop+start ms, median "
              "(worst)", "req/s, median (range)", "req/s vs stock prefork",
              "req/s vs stock event", "p99 ms, median (range)",
              "p99 vs stock event"]
    rows = []
    for p in points:
        s = p["restart"]
        failed = p["runs"] - p["ok_runs"]
        label = p["label"] + (f" ({failed} of {p['runs']} runs failed)"
                              if failed else "")
        if s is None:
            rows.append([label] + ["–"] * (len(header) - 1))
            continue
        requests = stats.summarize(s["requests"])
        errors = "/".join(f"{s['errors'][k]:,}" for k in
                          ("connect", "read", "write", "timeout", "non_2xx"))
        forced = f", {s['forced_stops']} forced" if s["forced_stops"] else ""
        rows.append([
            label, _per_run(s["restarts"]), _span(requests),
            f"{s['failed_total']:,} ({_per_run(s['failed_requests'])})",
            errors,
            f"{_n(s['slowest_median_ms'])} ({_n(s['slowest_worst_ms'])})"
            f"{forced}",
            _span(s["rps"]), _ratio(p["ratios"].get("prefork")),
            _ratio(p["ratios"].get("event")), _span(s["p99_ms"], 1),
            _ratio(p.get("p99_vs_event"))])
    return markdown.table(header, rows)


def section(points, options, heading="##",
            title="Full restarts (issue 24)"):
    """Markdown: one table per kernel level, workload and concurrency;
    empty without restart points."""
    restarted = [p for p in points if p.get("restart_point")]
    if not restarted:
        return ""
    restarts = options.get("restarts", DEFAULT_RESTARTS)
    interval = options.get("restart_interval_s", DEFAULT_INTERVAL_S)
    lines = [
        f"{heading} {title}", "",
        f"Each run: one wrk load ({options.get('wrk_threads', 2)} threads, "
        f"timeout {options.get('timeout_s', 2)} s) across {restarts} full "
        f"restarts of the server; each restart a graceful-stop (SIGWINCH to "
        f"the parent, then a wait for it and its children to exit, at most "
        f"{options.get('restart_stop_timeout_s', STOP_TIMEOUT_S):g} s before "
        f"it is forced: SIGTERM, then SIGKILL) and a new parent, counted "
        f"until the new one answers a GET; {interval:g} s of serving "
        f"between one restart's answer and the next stop, {LEAD_S:g} s "
        f"before the first and {TAIL_S:g} s after the last. Stock servers "
        f"stop and start binding their own sockets; bucketed's rows say "
        f"how: sockets held = bound once by the harness as a systemd socket "
        f"unit binds them (ReusePort=yes, Backlog={HOLDER_BACKLOG}) and "
        f"passed to every start as sd_listen_fds(3) describes; module "
        f"replaced = the loaded mod_mpm_bucketed.so renamed over by a "
        f"second build, then the first, between every stop and start. "
        f"Failed requests: wrk's connect, read and write errors, timeouts "
        f"and non-2xx answers. Medians and ranges over the "
        f"{options['runs']} interleaved rounds; ratios are medians of "
        f"same-round ratios (range over rounds).", ""]
    swap = options.get("swap_module")
    if swap:
        lines += [f"Second build: {swap['source']}, built {swap['built']}, "
                  f"sha256 {swap['sha256'][:16]}.", ""]
    for level in options["levels"]:
        for name in options["workloads"]:
            for concurrency in options["concurrency"]:
                group = [p for p in restarted if p["kernel_level"] == level
                         and p["workload"] == name
                         and p["concurrency"] == concurrency]
                if group:
                    lines += [f"{heading}# {name}: {WORKLOADS[name].title} — "
                              f"{level}, c={concurrency}", "",
                              restart_table(group), ""]
    return "\n".join(lines)
