# SPDX-License-Identifier: Apache-2.0
"""Starting, watching and stopping one server under test.

Every server lives in its own temporary directory (config, logs, pid file,
document root) and is started as a child of the harness in its own session,
with a clean environment: nothing of the caller's shell leaks in except,
at the no-reuseport level, the LD_PRELOAD shim."""

import os
import pwd
import subprocess
import sys
import time

from . import configs, faults, idle, limit, placement, procfs
from .catalog import (LIMIT_KINDS, NO_REUSEPORT, PHP, STATIC,
                      USES_SLOW_HANDLER)
from .net import Timeout, http_get

CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 15
# Bound of the harness's own requests (readiness, status page).
HTTP_TIMEOUT_S = 2.0
# A server counts as started once it answers and its process count has not
# changed for this long (or has reached what the configuration asks for).
SETTLE_S = 2.0
ERROR_LOG_TAIL_LINES = 20


class ServerError(Exception):
    """A server failed to start or died; error_log_tail() tells more."""


def run_as_user():
    """(user, group) for the server's workers when the harness runs as root,
    since httpd and nginx then switch to an unprivileged account."""
    if os.geteuid() != 0:
        return None
    for user, group in (("www-data", "www-data"), ("nobody", "nogroup")):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return user, group
    return None


class Server:
    """One configured server. start() and stop() may be called repeatedly:
    a server that died is started afresh on the same ports.

    slots: its request slots (default: the harness's --slots); handler:
    what the workload requests (a catalog handler: STATIC, SLOW, MIXED or
    PHP); with SLOW or MIXED the server also serves the slow handler, with
    PHP the PHP page under mod_php; idle_connections: the most idle
    keep-alive connections the idle workload holds (None: not that
    workload), which sets the keep-alive timeout and, with limits
    idle.SLOTS_LIMITS, the room for them (idle.py); limits
    idle.DEFAULT_LIMITS leaves the server's default limits; fault: a
    faults workload's kind (faults.py), which leaves the MPM's default
    limits, sets bucketed's BucketCount and adds the fault's module, files
    and environment."""

    def __init__(self, spec, level, ports, workdir, tools, slots=None,
                 handler=STATIC, idle_connections=None,
                 limits=idle.SLOTS_LIMITS, fault=""):
        self.spec = spec
        self.level = level
        self.ports = ports
        self.workdir = workdir
        self.tools = tools
        self.slots = slots or tools.slots
        self.handler = handler
        self.idle_connections = idle_connections
        self.limits = limits
        self.fault = fault
        if fault in LIMIT_KINDS:
            self.fault_settings = limit.server_settings(fault, spec)
        elif fault:
            self.fault_settings = faults.server_settings(
                fault, tools.fault_modules, workdir)
        else:
            self.fault_settings = faults.ServerSettings()
        self.process = None
        self.expected_processes = 0
        # Failed starts since the last good one, and the latest error.
        self.start_failures = 0
        self.last_start_error = None
        self._write_files()

    # ---- files ----

    def _write_files(self):
        docroot = os.path.join(self.workdir, "htdocs")
        for sub in ("run", "tmp", "htdocs"):
            os.makedirs(os.path.join(self.workdir, sub), exist_ok=True)
        # The children may run as another user: let them read the files.
        os.chmod(self.workdir, 0o755)
        os.chmod(docroot, 0o755)
        with open(os.path.join(docroot, configs.DOC_NAME), "wb") as doc:
            doc.write(configs.DOC_BODY)
        slow = self.handler in USES_SLOW_HANDLER
        if slow:
            with open(os.path.join(docroot, configs.SLOW_NAME), "w") as doc:
                doc.write(configs.slow_handler_script())
        php = self.handler == PHP
        if php:
            self._write_php_files(docroot)
        slots = self.slots
        is_idle = self.idle_connections is not None
        keepalive_s = idle.KEEPALIVE_TIMEOUT_S if is_idle \
            else configs.KEEPALIVE_TIMEOUT_S
        default_limits = self._default_limits()
        if self.spec.kind == "nginx":
            text = configs.nginx_config(
                root=self.workdir, docroot=docroot, ports=self.ports,
                slots=slots, workers=self.tools.cores,
                reuseport=self.level != NO_REUSEPORT, run_as=run_as_user(),
                idle_connections=self.idle_connections or 0,
                keepalive_timeout_s=keepalive_s,
                default_limits=default_limits, host=self.tools.server_host)
            self.expected_processes = configs.nginx_processes(self.tools.cores)
            self.config_path = os.path.join(self.workdir, "nginx.conf")
        else:
            with open(os.path.join(self.workdir, "mime.types"), "w") as types:
                types.write(configs.MIME_TYPES)
            text = configs.httpd_config(
                root=self.workdir, docroot=docroot, ports=self.ports,
                mpm=self.spec.mpm,
                mpm_module=self.tools.mpm_module(self.spec.mpm),
                module_paths=self.tools.httpd_modules(slow, php),
                slots=slots, directives=self._directives(),
                status_module=self.tools.status_module
                if self.spec.mpm == "bucketed" else None,
                run_as=run_as_user(), slow_handler=slow,
                child_model=self.spec.child_model,
                keepalive_timeout_s=keepalive_s,
                async_factor=idle.async_factor(self.idle_connections, slots)
                if is_idle else None, php=php,
                capacity=not default_limits, host=self.tools.server_host)
            self.expected_processes = configs.httpd_processes(
                self.spec.mpm, slots, self.spec.child_model,
                capacity=not default_limits)
            for name in self.fault_settings.files:
                with open(os.path.join(self.workdir, name), "w"):
                    pass
            self.config_path = os.path.join(self.workdir, "httpd.conf")
        with open(self.config_path, "w") as conf:
            conf.write(text)

    def _default_limits(self):
        """True: the MPM's (nginx's) default limits, not --slots."""
        return bool(self.fault) or self.limits == idle.DEFAULT_LIMITS

    def _readiness_probes(self):
        """(port, path, expected body; None: any) that must answer 200
        before the server counts as started."""
        return [(port, "/" + name, expected) for port in self.ports
                for name, expected in configs.documents(self.handler)]

    def _answer(self, port, path):
        """(status, body) of a GET of path on port."""
        return http_get(port, path, timeout=HTTP_TIMEOUT_S,
                        host=self.tools.server_host)

    def _directives(self):
        """The server's own directives, and a fault's (bucketed with
        faults.FAULT_BUCKETS buckets); a --server-cores point's BucketCount
        (one bucket per core the server has)."""
        own = list(self.spec.directives)
        if self.spec.mpm == "bucketed" and self.tools.bucket_count:
            own = faults.with_bucket_count(own, self.tools.bucket_count)
        if not self.fault:
            return own
        if self.spec.mpm == "bucketed":
            own = faults.with_bucket_count(
                own, self.fault_settings.bucket_count)
        return own + self.fault_settings.directives

    def _write_php_files(self, docroot):
        """The PHP page and the php.ini that mod_php reads instead of the
        machine's (see configs.php_ini)."""
        with open(os.path.join(docroot, configs.PHP_NAME), "w") as page:
            page.write(configs.PHP_SOURCE)
        with open(os.path.join(self.workdir, configs.PHP_INI_NAME),
                  "w") as ini:
            ini.write(configs.php_ini(self.workdir))

    def _command(self):
        if self.spec.kind == "nginx":
            return self.tools.server_command(
                [self.tools.nginx, "-p", self.workdir + "/",
                 "-c", self.config_path,
                 "-e", os.path.join(self.workdir, "error_log")])
        return self.tools.server_command(
            [self.tools.httpd, "-f", self.config_path, "-DFOREGROUND"])

    def _environment(self):
        env = {"PATH": CLEAN_PATH, "LANG": "C"}
        if self.level == NO_REUSEPORT:
            env["LD_PRELOAD"] = self.tools.shim
        if self.handler == PHP:
            env.update(configs.PHP_SCAN_DIR_ENV)
        for key, value in self.fault_settings.environment.items():
            # Both shims when the kernel level has one too.
            env[key] = f"{env[key]} {value}" if key == "LD_PRELOAD" \
                and key in env else value
        return env

    def error_log_tail(self, lines=ERROR_LOG_TAIL_LINES):
        """The last lines of the error log and of the server's stderr."""
        tail = []
        for name in ("error_log", "stderr.log"):
            try:
                with open(os.path.join(self.workdir, name),
                          errors="replace") as log:
                    tail += log.read().splitlines()[-lines:]
            except FileNotFoundError:
                continue
        return "\n".join(tail[-lines:])

    # ---- life cycle ----

    @property
    def pid(self):
        return self.process.pid if self.process else None

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def launch(self):
        """Starts the server's master process; wait_ready() then waits for
        it. Split in two so that several servers can boot at once."""
        # A master that died may have left children holding the ports.
        self.stop()
        with open(os.path.join(self.workdir, "stderr.log"), "ab") as stderr:
            self.process = subprocess.Popen(
                self._command(), env=self._environment(),
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                **placement.server_process(self.tools.server_cpus))

    def wait_ready(self):
        """Waits until every port serves the workload's document (the slow
        handler too, so a broken mod_lua stops here) and all processes are
        up; stops the server and raises ServerError if that fails."""
        try:
            self._wait_ready()
        except ServerError as error:
            self.start_failures += 1
            self.last_start_error = str(error)
            self.stop()
            raise
        self.start_failures = 0

    def start(self):
        self.launch()
        self.wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        pending = self._readiness_probes()
        while pending:
            self._check_alive("while starting")
            port, path, expected = pending[0]
            try:
                status, body = self._answer(port, path)
            except OSError as error:
                # Not listening yet: keep trying until the deadline.
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"{self.spec.name}: port {port} did not "
                        f"answer within {START_TIMEOUT_S} s ({error})"
                    ) from None
                time.sleep(0.1)
                continue
            if status != 200 or expected is not None and body != expected:
                # It answers, wrongly: waiting will not fix the configuration.
                raise ServerError(
                    f"{self.spec.name}: GET {path} on port "
                    f"{port} answered HTTP {status} "
                    f"({len(body)} bytes)")
            pending.pop(0)
        count, since = len(procfs.process_tree(self.pid)), time.monotonic()
        while count < self.expected_processes:
            self._check_alive("while starting its processes")
            now = time.monotonic()
            if now - since >= SETTLE_S or now > deadline:
                break
            time.sleep(0.1)
            latest = len(procfs.process_tree(self.pid))
            if latest != count:
                count, since = latest, time.monotonic()
        self.check_placement()

    def check_placement(self):
        """Checks that every process and thread of the server runs on the
        servers' CPUs (when pinned); returns {pid: cpulist} as read
        (None when not pinned). ServerError when one is outside."""
        if self.tools.server_cpus is None:
            return None
        try:
            return placement.check_tree(procfs.process_tree(self.pid),
                                        self.tools.server_cpus,
                                        self.spec.name)
        except placement.PlacementError as error:
            raise ServerError(str(error)) from None

    def exit_description(self):
        """How the master ended, for error messages."""
        code = self.process.returncode if self.process else None
        if code is None:
            return "not running"
        if code < 0:
            return f"killed by signal {-code}"
        return f"exit status {code}"

    def _check_alive(self, when):
        if not self.alive():
            raise ServerError(f"{self.spec.name} exited {when} "
                              f"({self.exit_description()})")

    def stop(self):
        """SIGTERM to the master and a wait, then SIGKILL to whatever is left
        of its process group (the server runs in a session of its own, so
        the group is exactly the server, orphaned children included)."""
        if self.process is None:
            return
        procfs.stop_process(self.process, STOP_TIMEOUT_S)
        # Leftovers hold the ports until they are gone: wait for that too.
        # Leftovers that survive SIGKILL (stuck in the kernel) are reported
        # and left: stopping the other servers matters more.
        try:
            procfs.kill_until_gone(
                lambda: procfs.process_group(self.process.pid),
                STOP_TIMEOUT_S, what=f"the processes of {self.spec.name} "
                                     f"to go")
        except Timeout as error:
            print(f"bench/run: {error}", file=sys.stderr)
        self.process = None
