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
- graceful (issue 39): no stop; a graceful restart (httpd's SIGUSR1,
  nginx's reload by SIGHUP), bucketed's BucketCount changed at every
  other one. Its "stop" lasts until the old generation's children are
  gone, its "start" until a new child is there and the server answers.
  The stock servers of restart-full and restart-graceful (prefork,
  event, nginx) restart this way: they are the anchors.
- unchanged: the graceful restarts with the configuration unchanged,
  beside which graceful's show what the plan change costs.
- soak: held, run by soak.py.

Issue 39's workloads (Workload.counted) run, beside wrk's Connection:
close load, keep-alive clients that count every GET and POST they lose
(clients.KeepAliveClients): a GET lost on a reused connection is retried
and counted, a POST is never retried.

Everything runs on loopback, bounded in time; processes are signalled by
pid only. Pure summary and report code at the end."""

import hashlib
import http.client
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import replace

from . import (activation, clients, configs, load, markdown, placement,
               procfs, stats)
from .catalog import (RESTART_GRACEFUL, RESTART_GRACEFUL_UNCHANGED,
                      RESTART_HELD, RESTART_SOAK,
                      RESTART_SWAP, RESTART_VARIANTS, SERVERS,
                      SHORT_NAMES, SOAK_MAX_CONNECTIONS_PER_CHILD,
                      STOCK_GRACEFUL, WORKLOADS)
from .environment import BUCKETED_MODULES
from .net import LOOPBACK, http_get
from .server import HTTP_TIMEOUT_S, Server, ServerError

# Issue 39's acceptance: 20 restarts per run.
DEFAULT_RESTARTS = 20
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
# The counting keep-alive clients (Workload.counted): PAUSING_CLIENTS
# pause 0-PAUSE_S s between requests (under the servers' KeepAliveTimeout,
# configs.KEEPALIVE_TIMEOUT_S), BACK_TO_BACK_CLIENTS do not; half of each
# one's requests (at random) POST POST_BYTES bytes to a handler that reads
# them and answers how many it read (nginx: reads and discards them, and
# answers the Content-Length).
PAUSING_CLIENTS = 40
BACK_TO_BACK_CLIENTS = 10
PAUSE_S = 4.0
# Beside them, CLOSING_CLIENTS make Connection: close GETs back to back, as
# wrk does, but each failure and each answer slower than SLOW_S (wrk's
# default --timeout) is timed, so it can be put down to a restart.
CLOSING_CLIENTS = 10
SLOW_S = 2.0
# At most this many of a run's timed failures and slow answers are kept,
# failures first, and the report lists at most TIMED_LISTED restarts of a
# run (summary.json has them all).
TIMED_KEPT = 100
TIMED_LISTED = 6
POST_NAME = "post.lua"
POST_BYTES = 256
POST_BODY = bytes(range(256)) * (POST_BYTES // 256)
POST_ANSWER = f"{POST_BYTES}\n".encode()
POST_HANDLER = """-- Written by bucketbench (bench/bucketbench/restart.py):
-- reads the request body and answers its length.
function handle(r)
    local body = r:requestbody()
    r.content_type = "text/plain"
    r:puts(tostring(#body) .. "\\n")
    return apache2.OK
end
"""
NGINX_POST_LOCATION = (f"        location = /{POST_NAME} {{\n"
                       f"            return 200 \"$content_length\\n\";\n"
                       f"        }}\n")
# bucketed's BucketCount at every other graceful restart (its spec's is
# auto: 2 on two CPUs).
CHANGED_BUCKET_COUNT = 1


# The graceful restarts, and the variants whose old and new generations
# overlap: those and the soak's.
GRACEFUL_VARIANTS = (RESTART_GRACEFUL, RESTART_GRACEFUL_UNCHANGED)
GENERATION_OVERLAPPING = GRACEFUL_VARIANTS + (RESTART_SOAK,)


class RestartError(ServerError):
    """A restart failed: the server did not stop or start in time."""


def variant_spec(spec, variant, counted=False):
    """The ServerSpec of spec restarted the variant's way: the stock
    servers keep their names (the ratio baselines); bucketed's get the
    variant in name and label; the soak's, its MaxConnectionsPerChild.
    counted: with the counting keep-alive clients."""
    if spec.mpm != "bucketed":
        how = STOCK_GRACEFUL[spec.kind] if variant == RESTART_GRACEFUL \
            else "stop + start"
        return replace(spec, label=f"{spec.label}, {how}", restart=variant,
                       counted=counted)
    directives = spec.directives + (
        (f"MaxConnectionsPerChild {SOAK_MAX_CONNECTIONS_PER_CHILD}",)
        if variant == RESTART_SOAK else ())
    return replace(spec, name=f"{spec.name}-{variant}",
                   label=f"{spec.label}, {RESTART_VARIANTS[variant]}",
                   restart=variant, counted=counted, directives=directives)


def expand(specs, workload, swap_available):
    """The (variant) servers of a restart workload from its selected base
    specs: stock ones restart the workload's stock way, bucketed's in each
    of the workload's bucketed variants (swap only with a second build)."""
    servers = []
    for spec in specs:
        if spec.mpm != "bucketed":
            servers.append(variant_spec(spec, workload.stock_restart,
                                        workload.counted))
            continue
        for variant in workload.restart_variants:
            if variant == RESTART_SWAP and not swap_available:
                continue
            servers.append(variant_spec(spec, variant, workload.counted))
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


def _with_room_for_a_generation(text):
    """An httpd configuration of a threaded model (ThreadsPerChild) with
    its ServerLimit doubled: a graceful restart's new children need
    scoreboard slots while the old ones finish (httpd's documentation of
    ServerLimit says so); configs.httpd_capacity leaves none. Other
    configurations as they are."""
    if "\nThreadsPerChild " not in text:
        return text
    return re.sub(r"^ServerLimit (\d+)$",
                  lambda m: f"ServerLimit {2 * int(m.group(1))}", text,
                  flags=re.MULTILINE)


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
        # What the graceful restarts change in the configuration.
        self.bucket_count_changed = False
        self.extra_port = None
        super().__init__(spec, level, ports, workdir, tools, **kwargs)

    def _write_files(self):
        super()._write_files()
        with open(self.config_path) as conf:
            text = conf.read()
        if self.spec.counted:
            text = self._with_post_handler(text)
        if self.spec.restart in GENERATION_OVERLAPPING:
            text = _with_room_for_a_generation(text)
        with open(self.config_path, "w") as conf:
            conf.write(text)
        self.base_config = text

    def _with_post_handler(self, text):
        """text with POST_NAME: reads a request body and answers its
        length."""
        if self.spec.kind == "nginx":
            text = text.replace("        root ",
                                NGINX_POST_LOCATION + "        root ", 1)
        else:
            with open(os.path.join(self.workdir, "htdocs", POST_NAME),
                      "w") as handler:
                handler.write(POST_HANDLER)
            if "LoadModule lua_module" not in text:
                lua = os.path.join(self.tools.modules_dir, "mod_lua.so")
                # One Lua state per process, kept across requests.
                text += f'LoadModule lua_module "{lua}"\nLuaScope server\n'
            text += (f'<Files "{POST_NAME}">\n    SetHandler lua-script\n'
                     f'</Files>\n')
        return text

    def write_config(self):
        """The configuration as the graceful restarts have changed it:
        BucketCount CHANGED_BUCKET_COUNT, an extra Listen address."""
        text = self.base_config
        if self.bucket_count_changed:
            text = text.replace("BucketCount auto\n",
                                f"BucketCount {CHANGED_BUCKET_COUNT}\n")
        if self.extra_port:
            text += f"Listen {LOOPBACK}:{self.extra_port}\n"
        with open(self.config_path, "w") as conf:
            conf.write(text)

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
        return self.spec.restart in (RESTART_HELD, RESTART_SWAP,
                                     RESTART_SOAK)

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

    def _wait_new_child(self, old, deadline):
        """Waits until the parent has a child not in old (a new
        generation's); RestartError past deadline or if it exits."""
        while not set(procfs.children_of(self.pid)) - old:
            if not self.alive():
                raise RestartError(f"{self.spec.name} exited at a graceful "
                                   f"restart ({self.exit_description()})")
            if time.monotonic() > deadline:
                raise RestartError(f"{self.spec.name} started no new child "
                                   f"within {READY_TIMEOUT_S} s of a "
                                   f"graceful restart")
            time.sleep(READY_POLL_S)

    def graceful_restart(self, stop_timeout_s=STOP_TIMEOUT_S):
        """One graceful restart with the configuration as write_config()
        makes it: SIGUSR1 (nginx: SIGHUP), then a wait for a new child and
        an answer (the start) and for the old children to go, for at most
        stop_timeout_s (the stop; those still there are counted as
        lingering, not killed). {stop_ms, start_ms, total_ms, forced,
        lingering, buckets, build, old_children: the children before the
        signal}."""
        self.write_config()
        old = set(procfs.children_of(self.pid))
        began = time.monotonic()
        self.process.send_signal(signal.SIGHUP if self.spec.kind == "nginx"
                                 else signal.SIGUSR1)
        deadline = began + READY_TIMEOUT_S
        self._wait_new_child(old, deadline)
        self._wait_answer(deadline)
        answered = time.monotonic()
        stop_deadline = began + stop_timeout_s
        while old & set(procfs.children_of(self.pid)) \
                and time.monotonic() < stop_deadline:
            time.sleep(READY_POLL_S)
        lingering = len(old & set(procfs.children_of(self.pid)))
        stopped = time.monotonic()
        return {"stop_ms": (stopped - began) * 1000.0,
                "start_ms": (answered - began) * 1000.0,
                "total_ms": (max(stopped, answered) - began) * 1000.0,
                "forced": False, "lingering": lingering,
                "buckets": CHANGED_BUCKET_COUNT if self.bucket_count_changed
                else None,
                "build": None, "old_children": old}

    def kill_child(self, rng):
        """SIGKILL to one of the parent's children (picked with rng),
        checked to be its child again right before: the pid, or None."""
        children = procfs.children_of(self.pid)
        if not children:
            return None
        pid = rng.choice(children)
        if pid not in procfs.children_of(self.pid):
            return None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return pid

    def restart(self, stop_timeout_s=STOP_TIMEOUT_S, number=0):
        """Restart number `number` (from 0): a graceful one for the
        graceful variants (the graceful variant's bucketed changes
        BucketCount at every odd number), else a full restart: {stop_ms,
        start_ms, total_ms, forced, build}. The start counts until the
        server answers again."""
        if self.spec.restart in GRACEFUL_VARIANTS:
            if self.spec.restart == RESTART_GRACEFUL \
                    and self.spec.mpm == "bucketed" and number % 2:
                self.bucket_count_changed = not self.bucket_count_changed
            return self.graceful_restart(stop_timeout_s)
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


class BackgroundWrk:
    """wrk in the background, interrupted when the restarts are done;
    wrk_command(bound_s) runs it for at most bound_s."""

    def __init__(self, wrk_command, bound_s, log_path):
        self.bound_s = bound_s
        self.ran_out = False
        self.log = open(log_path, "w+b")
        self.process = subprocess.Popen(wrk_command(bound_s),
                                        stdin=subprocess.DEVNULL,
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
        result. Notes whether wrk had stopped by itself (check_bound)."""
        pid = self.process.pid
        # Looked at, not reaped: wait4 below reaps it and reads its usage.
        self.ran_out = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG
                                 | os.WNOWAIT) is not None
        if not self.ran_out:
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

    def check_bound(self):
        """After finish and the run's own failures: LoadError when wrk had
        stopped by itself, its -d run out before the run's end, which then
        went on without load."""
        if self.ran_out:
            raise load.LoadError(f"wrk stopped by itself before the run "
                                 f"ended (its bound, {self.bound_s} s, "
                                 f"ran out): the run's end had no load")


class CountedClients:
    """The counting clients of a run (Workload.counted) on a server's
    first port: PAUSING_CLIENTS and BACK_TO_BACK_CLIENTS
    clients.KeepAliveClients and `closing` clients.NewConnectionClients,
    started at once, for at most seconds."""

    def __init__(self, server, seconds, pausing=PAUSING_CLIENTS,
                 back_to_back=BACK_TO_BACK_CLIENTS, closing=CLOSING_CLIENTS):
        get = ("/" + configs.DOC_NAME, configs.DOC_BODY)
        post = ("/" + POST_NAME, POST_BODY, POST_ANSWER)
        self.loads = [clients.KeepAliveClients(
            server.ports[:1], get, threads=threads, seconds=seconds,
            pause=pause, post=post)
            for threads, pause in ((pausing, PAUSE_S), (back_to_back, 0.0))
            if threads]
        self.closing = clients.NewConnectionClients(
            server.ports[:1], get, threads=closing, seconds=seconds,
            slow_s=SLOW_S) if closing else None
        self.everyone = self.loads + ([self.closing] if closing else [])

    def start(self):
        for one in self.everyone:
            one.start()
        return self

    def counts(self):
        """Their counts so far, summed (clients.KeepAliveClients.counts),
        the first errors of each."""
        total = {}
        for one in self.loads:
            for key, value in one.counts().items():
                total[key] = total.get(key, 0 if key != "first_errors"
                                       else []) + value
        return total

    def closing_counts(self):
        """The new-connection clients' requests, failures, answers slower
        than SLOW_S and first errors; None without them."""
        if not self.closing:
            return None
        made = self.closing.result
        return {"requests": made.total, "failed": made.failed,
                "slow": len(self.closing.slow),
                "first_errors": list(made.errors)}

    def slow(self):
        """The new-connection clients' answers slower than SLOW_S
        (clients.KeepAliveClients.slow), in time order."""
        if not self.closing:
            return []
        return sorted((begun, ended, f"{label} slow")
                      for begun, ended, label in self.closing.slow)

    def failures(self):
        """Every failure of them all (clients.KeepAliveClients.failures),
        in time order."""
        return sorted(f for one in self.everyone for f in one.failures)

    def stop(self):
        """Stops them: the keep-alive clients' counts()."""
        for one in self.everyone:
            one.stop()
        return self.counts()


def measure(server, wrk_command, restarts, interval_s, log_dir,
            stop_timeout_s=STOP_TIMEOUT_S):
    """One run: wrk_command(seconds) under way while server goes through
    `restarts` restarts (RestartServer.restart), with the counting
    clients beside it when its spec says so. A dict for the run record:
    wrk's numbers and "restart": the restarts' own and the clients' counts
    ("keepalive" and "closing", None without them, and "timed", their
    failures and slow answers by restart: timed_by_restart)."""
    bound_s = wrk_bound_s(restarts, interval_s, stop_timeout_s)
    wrk = BackgroundWrk(wrk_command, bound_s,
                        os.path.join(log_dir, "wrk-restart.log"))
    counted = CountedClients(server, bound_s).start() \
        if server.spec.counted else None
    done = []
    windows = []
    # procfs.tcp_counters() at the start, as each restart began, and at the
    # end (before the clients stop, which resets what they hold open).
    readings = [procfs.tcp_counters()]
    failure = None
    began = time.monotonic()
    try:
        time.sleep(LEAD_S)
        for number in range(restarts):
            if number:
                time.sleep(interval_s)
            readings.append(procfs.tcp_counters())
            try:
                windows.append([time.monotonic()])
                done.append(server.restart(stop_timeout_s, number))
                windows[-1].append(time.monotonic())
            except (ServerError, OSError) as error:
                failure = f"restart {number + 1} of {restarts}: {error}"
                break
        if failure is None:
            time.sleep(TAIL_S)
            readings.append(procfs.tcp_counters())
    finally:
        keepalive = counted.stop() if counted else None
        result, client_cpu_s = wrk.finish()
    if failure:
        raise RestartError(failure)
    wrk.check_bound()
    spans = [procfs.counter_deltas(before, after)
             for before, after in zip(readings, readings[1:])]
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
            "lingering": sum(r.get("lingering", 0) for r in done),
            "buckets": [r.get("buckets") for r in done],
            "builds": [r["build"] for r in done] if server.builds
            else None,
            "keepalive": keepalive,
            "closing": counted.closing_counts() if counted else None,
            "kernel": {"run": procfs.sum_counters(spans),
                       "per_restart": spans[1:]},
            **timed_by_restart(counted.failures() if counted else [],
                               counted.slow() if counted else [],
                               windows, began)}})
    return result


def timed_by_restart(failures, slow, windows, began):
    """{"timed": the counting clients' failures and slow answers
    ((begun, ended, label), "CLOSE slow" for the latter), failures first
    and at most TIMED_KEPT in all, placed among the restarts' windows
    ([stop began, start ended], in order): [begun and ended in seconds
    from began, label, the number (from 1) of the restart whose window the
    request overlapped, or 0 for none], in time order; "timed_dropped":
    how many did not fit}."""
    kept = sorted(failures)[:TIMED_KEPT]
    kept += sorted(slow)[:TIMED_KEPT - len(kept)]
    placed = []
    for start, end, label in sorted(kept):
        number = next((n for n, (opened, closed) in enumerate(windows, 1)
                       if start <= closed and opened <= end), 0)
        placed.append([round(start - began, 3), round(end - began, 3),
                       label, number])
    return {"timed": placed,
            "timed_dropped": len(failures) + len(slow) - len(kept)}


def failed_requests(result):
    """What a client lost: wrk's connect, read and write errors, timeouts
    and answers other than 2xx."""
    return sum(result["errors"].values())


def describe(record):
    """One restart run as a progress line."""
    r = record["restart"]
    p99 = record["latency_ms"]["p99"] if record["latency_ms"] else None
    slowest = r["slowest_ms"]
    kept = r.get("keepalive")
    counted = (f"; keep-alive: {kept['gets']:,} GETs, "
               f"{kept['gets_failed']:,} failed, {kept['retries']:,} "
               f"retried, {kept['posts']:,} POSTs, {kept['posts_lost']:,} "
               f"lost" if kept else "")
    closing = r.get("closing")
    if closing:
        counted += (f"; counted Connection: close: {closing['requests']:,}, "
                    f"{closing['failed']:,} failed, {closing['slow']:,} "
                    f"over {SLOW_S:g} s")
    return (f"{r['done']} restarts, {record['requests']:,} requests, "
            f"{r['failed_requests']:,} failed, slowest stop+start "
            f"{'n/a' if slowest is None else f'{slowest:,.0f} ms'}, "
            f"{record['rps']:,.0f} req/s, p99 "
            f"{'n/a' if p99 is None else f'{p99:.1f} ms'}{counted}")


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
    if any(r["ok"] and r.get("soak") for r in records):
        from . import soak
        return soak.summarize_runs(records)
    good = [r for r in records if r["ok"] and r.get("restart")]
    if not good:
        return None
    failed = [r["restart"]["failed_requests"] for r in good]
    stops = [ms for r in good for ms in r["restart"]["stop_ms"]]
    starts = [ms for r in good for ms in r["restart"]["start_ms"]]
    kept = [r["restart"].get("keepalive") for r in good]
    slowest = [r["restart"]["slowest_ms"] for r in good]
    return {
        "runs": len(good),
        "restarts": [r["restart"]["done"] for r in good],
        "requests": [r["requests"] for r in good],
        "requests_median": stats.median([r["requests"] for r in good]),
        "failed_requests": failed, "failed_total": sum(failed),
        "failed_median": stats.median(failed),
        "timeouts_per_run": [r["errors"]["timeout"] for r in good],
        "errors": {kind: sum(r["errors"][kind] for r in good)
                   for kind in good[0]["errors"]},
        "slowest_ms": slowest, "slowest_median_ms": stats.median(
            [s for s in slowest if s is not None]),
        "slowest_worst_ms": max((s for s in slowest if s is not None),
                                default=None),
        "forced_stops": sum(r["restart"]["forced_stops"] for r in good),
        "lingering": sum(r["restart"].get("lingering", 0) for r in good),
        "stop_median_ms": stats.median(stops),
        "stop_worst_ms": max(stops, default=None),
        "start_median_ms": stats.median(starts),
        "start_worst_ms": max(starts, default=None),
        "keepalive": summarize_keepalive(kept) if all(kept) else None,
        "closing": summarize_closing([r["restart"].get("closing")
                                      for r in good]),
        "kernel": [r["restart"].get("kernel") for r in good],
        "timed": [(r["round"], r["restart"].get("timed") or [],
                   r["restart"].get("timed_dropped", 0)) for r in good],
        "rps": stats.summarize([r["rps"] for r in good]),
        "p99_ms": stats.summarize([_p99(r) for r in good]),
        "variant": good[0]["restart"]["variant"],
        "held": good[0]["restart"]["held"],
        "swapped": good[0]["restart"]["swapped"]}


KEEPALIVE_SUMS = ("requests", "gets", "gets_failed", "posts", "posts_lost",
                  "retries", "reopened", "told_to_close")


def summarize_keepalive(counts):
    """The counting clients' numbers over a point's runs: totals, and the
    failed GETs and lost POSTs per run."""
    summary = {key: sum(c[key] for c in counts) for key in KEEPALIVE_SUMS}
    summary["gets_failed_per_run"] = [c["gets_failed"] for c in counts]
    summary["posts_lost_per_run"] = [c["posts_lost"] for c in counts]
    summary["first_errors"] = [e for c in counts
                               for e in c["first_errors"]][:10]
    return summary


def summarize_closing(counts):
    """The new-connection clients' numbers over a point's runs (None
    where a run had none): totals, and failures and slow answers per
    run."""
    if not counts or not all(counts):
        return None
    return {"requests": sum(c["requests"] for c in counts),
            "failed_per_run": [c["failed"] for c in counts],
            "slow_per_run": [c.get("slow", 0) for c in counts],
            "first_errors": [e for c in counts
                             for e in c["first_errors"]][:10]}


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


def _per_run(values):
    return "/".join(f"{v:,}" for v in values)


def _row_label(point):
    """A point's row label, saying how many of its runs failed."""
    failed = point["runs"] - point["ok_runs"]
    return point["label"] + (f" ({failed} of {point['runs']} runs failed)"
                             if failed else "")


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
        label = _row_label(p)
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
            _span(s["rps"]), markdown.ratio(p["ratios"].get("prefork")),
            markdown.ratio(p["ratios"].get("event")), _span(s["p99_ms"], 1),
            markdown.ratio(p.get("p99_vs_event"))])
    return markdown.table(header, rows)


def counted_table(points):
    """One row per server of a workload with the counting clients: what
    each kind of client lost, and the stops."""
    header = ["Configuration", "restarts per run",
              "Connection: close requests (wrk)", "failed, total (per run)",
              "counted Connection: close requests", "failed (per run)",
              f"over {SLOW_S:g} s (per run)", "keep-alive GETs",
              "failed (per run)", "retried", "keep-alive POSTs",
              "lost (per run)",
              "stop ms, median (worst)", "start ms, median (worst)"]
    rows = []
    for p in points:
        s = p["restart"]
        label = _row_label(p)
        if s is None or s.get("keepalive") is None:
            rows.append([label] + ["–"] * (len(header) - 1))
            continue
        kept = s["keepalive"]
        closing = s.get("closing")
        counted = ["–"] * 3 if not closing else [
            f"{closing['requests']:,}",
            f"{sum(closing['failed_per_run']):,} "
            f"({_per_run(closing['failed_per_run'])})",
            f"{sum(closing['slow_per_run']):,} "
            f"({_per_run(closing['slow_per_run'])})"]
        extra = "".join(
            text for count, text in (
                (s["forced_stops"], f", {s['forced_stops']} forced"),
                (s["lingering"], f", {s['lingering']} children lingered"))
            if count)
        rows.append([
            label, _per_run(s["restarts"]),
            f"{sum(s['requests']):,}",
            f"{s['failed_total']:,} ({_per_run(s['failed_requests'])})",
            *counted, f"{kept['gets']:,}",
            f"{kept['gets_failed']:,} "
            f"({_per_run(kept['gets_failed_per_run'])})",
            f"{kept['retries']:,}", f"{kept['posts']:,}",
            f"{kept['posts_lost']:,} "
            f"({_per_run(kept['posts_lost_per_run'])})",
            f"{_n(s['stop_median_ms'])} ({_n(s['stop_worst_ms'])}){extra}",
            f"{_n(s['start_median_ms'])} ({_n(s['start_worst_ms'])})"])
    return markdown.table(header, rows)


def kernel_table(points):
    """One row per server: the kernel's procfs.TCP_COUNTERS over each of
    its runs, and how many of the run's restarts counted any (from a
    restart's start to the next's, the last's to the run's end); n/a for
    a run recorded before they were."""
    header = ["Configuration"] + [f"{name} per run (restarts with any)"
                                  for name in procfs.TCP_COUNTERS]
    rows = []
    for p in points:
        runs = (p["restart"] or {}).get("kernel") or []
        row = [_row_label(p)]
        for name in procfs.TCP_COUNTERS:
            if not runs or not all(k and "per_restart" in k for k in runs) \
                    or any(name not in k["run"] for k in runs):
                row.append("n/a")
                continue
            with_any = [sum(1 for one in k["per_restart"] if one.get(name))
                        for k in runs]
            row.append(f"{_per_run([k['run'][name] for k in runs])} "
                       f"({_per_run(with_any)})")
        rows.append(row)
    return markdown.table(header, rows)


def kernel_note(span, bracketed):
    """The sentence before a table of procfs.TCP_COUNTERS: over each
    span (until the clients stop), in brackets what bracketed says."""
    return (f"The kernel's TCP counters over each {span}, until its "
            f"clients stop (`nstat`'s TcpExt names; the machine's network "
            f"namespace: every client and server of the {span}, and "
            f"whatever else the machine did meanwhile), and in brackets "
            f"{bracketed}: a full accept queue (ListenOverflows; "
            f"ListenDrops counts those and other drops), a SYN or SYN-ACK "
            f"sent again (TCPSynRetrans, one per retransmission: a "
            f"handshake that waited a second or more), a request left "
            f"behind by a closing socket of a SO_REUSEPORT group "
            f"(TCPMigrateReqFailure), a reset for a connection closed with "
            f"data unread or sent data after its close (TCPAbortOnData).")


def timed_lines(points):
    """Markdown lines: the counting clients' timed failures and slow
    answers of each round, counted by restart; none without any."""
    lines = []
    for p in points:
        s = p["restart"]
        for round_no, timed, dropped in (s or {}).get("timed") or []:
            if not timed:
                continue
            by_restart = {}
            for _, _, label, number in timed:
                labels = by_restart.setdefault(number, {})
                labels[label] = labels.get(label, 0) + 1
            parts = [
                (f"restart {number}" if number else "outside any restart")
                + ": " + ", ".join(f"{count} {label}" for label, count
                                   in sorted(labels.items()))
                for number, labels in sorted(by_restart.items())]
            more = [f"{len(parts) - TIMED_LISTED} more restarts"] \
                if len(parts) > TIMED_LISTED else []
            more += [f"{dropped} more requests not kept"] if dropped else []
            lines.append(f"- {p['label']}, round {round_no}: "
                         f"{'; '.join(parts[:TIMED_LISTED] + more)}")
    if not lines:
        return []
    return ["The counting clients' failures and answers over "
            f"{SLOW_S:g} s (slow), by the restart whose stop or start they "
            "overlapped:", ""] + lines + [""]


COUNTED_METHOD = (
    "Issue 39's workloads: beside wrk's Connection: close load, {clients} "
    "keep-alive clients ({pausing} pausing 0-{pause:g} s between requests, "
    "{back} back to back; KeepAliveTimeout {keepalive} s) each make GETs "
    "of the static file and, half of the time at random, POSTs of "
    "{post_bytes} bytes to a handler that reads the body (httpd: mod_lua, "
    "answering the length it read; nginx: `return`, which reads and "
    "discards it); {closing} more make Connection: close GETs back to "
    "back, a new connection each, nothing retried. Every counting "
    "client's failure, and each of these answers slower than {slow:g} s "
    "(wrk's default timeout), is timed and put down to the restart it "
    "overlapped (at most {kept} a run, failures first; listed under the "
    "table, {listed} restarts a run at most). A client reuses a "
    "connection as curl does: a poll that does not wait first, and a "
    "connection the server closed while idle is "
    "reopened, no failure. Any error once a request is sent is a failure: "
    "a GET lost on a reused connection is retried on a new one (counted "
    "as failed and as retried), a POST is never retried (lost). Stock "
    "prefork and stock event restart gracefully (SIGUSR1) and nginx "
    "reloads (SIGHUP to its master): the anchors. A graceful restart's "
    "stop lasts until the old generation's children are gone (at most "
    "the stop timeout; children still there then are counted as "
    "lingering), its start until a new "
    "child is there and answers; a full restart's stop until the parent "
    "and its children are gone, its start until the new parent answers.")


def counted_method():
    return COUNTED_METHOD.format(
        clients=PAUSING_CLIENTS + BACK_TO_BACK_CLIENTS,
        pausing=PAUSING_CLIENTS, pause=PAUSE_S, back=BACK_TO_BACK_CLIENTS,
        keepalive=configs.KEEPALIVE_TIMEOUT_S, post_bytes=POST_BYTES,
        closing=CLOSING_CLIENTS, slow=SLOW_S, kept=TIMED_KEPT,
        listed=TIMED_LISTED)


DEFAULT_TITLE = "Full restarts (issue 24)"
COUNTED_TITLE = "Restarts that every client counts (issue 39)"


def section(points, options, heading="##", title=DEFAULT_TITLE):
    """Markdown: one table per kernel level, workload and concurrency;
    empty without restart points."""
    restarted = [p for p in points if p.get("restart_point")
                 and not WORKLOADS[p["workload"]].soak]
    if restarted and title == DEFAULT_TITLE and all(
            WORKLOADS[p["workload"]].counted for p in restarted):
        title = COUNTED_TITLE
    soaked = [p for p in points if p.get("restart_point")
              and WORKLOADS[p["workload"]].soak]
    if soaked:
        from . import soak
        text = soak.section(soaked, options, heading)
        if not restarted:
            return text
        return section(restarted, options, heading, title) + "\n" + text
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
        f"and non-2xx answers. A wrk timeout is an answer slower than the "
        f"timeout, which wrk then leaves out of its latencies, or a request "
        f"still unanswered at one of its checks (every 2 s, again at each "
        f"while it waits): a slow answer, not necessarily a lost one. "
        f"Medians and ranges over the "
        f"{options['runs']} interleaved rounds; ratios are medians of "
        f"same-round ratios (range over rounds).", ""]
    swap = options.get("swap_module")
    if swap:
        lines += [f"Second build: {swap['source']}, built {swap['built']}, "
                  f"sha256 {swap['sha256'][:16]}.", ""]
    if any(WORKLOADS[p["workload"]].counted for p in restarted):
        lines += [counted_method(), ""]
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
                    if WORKLOADS[name].counted:
                        lines += ["Every kind of client:", "",
                                  counted_table(group), ""]
                        lines += timed_lines(group)
                        lines += [kernel_note(
                            "run", "how many of its restarts counted any "
                            "(from a restart's start to the next's)"), "",
                            kernel_table(group), ""]
    return "\n".join(lines)


# The servers the results tables compare (stock prefork, stock event and
# nginx restart gracefully: the anchors).
HEADLINE_SERVERS = ("bucketed-event", "bucketed-reuseport", "prefork",
                    "event", "nginx")
# (workload, how a cell names it, bucketed's variant there): the stock
# servers have one graceful variant, shown in the cell of bucketed's
# unchanged one.
HEADLINE_CELLS = (("restart-full", "full", RESTART_HELD),
                  ("restart-graceful", "graceful",
                   RESTART_GRACEFUL_UNCHANGED),
                  ("restart-graceful", "BucketCount changed",
                   RESTART_GRACEFUL))


def _headline_name(server, workload, variant):
    """The name of server's point in a headline cell, None if the server
    has none there (stock servers change no BucketCount)."""
    if SERVERS[server].mpm == "bucketed":
        return f"{server}-{variant}"
    if workload == "restart-graceful" and variant == RESTART_GRACEFUL:
        return None
    return server


def _lost_per_run(summary):
    """A point's figures per run, as ranges: requests that failed (wrk's
    errors but its timeouts, the keep-alive GETs' and the counted
    Connection: close ones'), requests not answered within SLOW_S (wrk's
    timeouts, the counted Connection: close clients' slow answers) and
    lost POSTs."""
    runs = len(summary["failed_requests"])
    keepalive = summary.get("keepalive") or {}
    gets = keepalive.get("gets_failed_per_run") or [0] * runs
    closing = summary.get("closing") or {}
    closes = closing.get("failed_per_run") or [0] * runs
    slow = closing.get("slow_per_run") or [0] * runs
    timeouts = summary["timeouts_per_run"]
    failed = [wrk - late + got + closed for wrk, late, got, closed
              in zip(summary["failed_requests"], timeouts, gets, closes)]
    unanswered = [late + counted for late, counted in zip(timeouts, slow)]
    posts = keepalive.get("posts_lost_per_run")
    return (f"{markdown.per_run_range(failed)} / "
            f"{markdown.per_run_range(unanswered)} / "
            f"{markdown.per_run_range(posts) if posts else 'n/a'}")


def headline(points, options):
    """The counted restarts' figure: per server, on the full restarts, the
    graceful ones and (bucketed) the graceful ones changing BucketCount,
    what its clients lost per run: requests failed,
    requests not answered within SLOW_S and lost POSTs (their range over
    the rounds)."""
    parts = []
    for server in HEADLINE_SERVERS:
        cells = []
        for workload, kind, variant in HEADLINE_CELLS:
            name = _headline_name(server, workload, variant)
            point = next((p for p in points
                          if p["workload"] == workload
                          and p["server"] == name and p["restart"]), None)
            if point is not None:
                cells.append(f"{kind} {_lost_per_run(point['restart'])}")
        if cells:
            parts.append(f"{SHORT_NAMES[server]} {', '.join(cells)}")
    return (f"requests failed / not answered within {SLOW_S:g} s / POSTs "
            f"lost per run: "
            f"{'; '.join(parts) or 'no point'}")
