# SPDX-License-Identifier: Apache-2.0
"""
httpd_fixture: runs the real Debian httpd (/usr/sbin/apache2) with the
bucketed MPM loaded, on ephemeral ports of 127.0.0.1, for the integration
tests of this directory (conftest.py makes them into fixtures).

Environment:
  BUCKETED_TOP    repository root (default: two levels above this file)
  BUCKETED_BUILD  where mod_mpm_bucketed.so, mod_bucketed_status.so and
                  bench/noreuseport.so are (default: BUCKETED_TOP)
  HTTPD_BIN       the httpd binary (default: /usr/sbin/apache2)
  BUCKETED_TEST_PRELOAD  libraries put first in LD_PRELOAD of every process
                  started through process_env() (every httpd), before a
                  test's own preload: scripts/sanitize.sh preloads the
                  sanitizer runtimes, which must come first
  BUCKETED_TEST_ENV  names (space-separated) of variables passed from this
                  environment to those processes (ASAN_OPTIONS ...)

Nothing here sleeps for synchronisation: every wait is wait_until() on an
observable condition with a bounded timeout.
"""
import collections
import http.client
import os
import platform
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

# Shared with the benchmark harness (bench/bucketbench; pytest.ini puts
# bench/ on the import path). The test files import them from here.
from bucketbench.bucket_status import parse_status
from bucketbench.clients import (  # noqa: F401 (re-exported)
    ClientThreads, wall_clock)
from bucketbench.net import (  # noqa: F401 (re-exported)
    HTTP_TIMEOUT, LOOPBACK, Timeout, connection_refused, free_ports, http_get,
    wait_until)
from bucketbench.procfs import (  # noqa: F401 (re-exported)
    alive, children_of, io_calls, kill_until_gone, listening_inodes,
    proc_listening_inodes, processes_mentioning, socket_inodes_of,
    ss_listening, stop_process, uids)

# x86_64 system call numbers, as /proc/<tid>/syscall shows them: the waits
# an event child's threads make, and the sleeps of a sanitizer's own
# thread (TSan's background thread), which httpd's threads never make.
# Elsewhere the numbers differ: none is named, so none is left out.
SYSCALL_NAMES = ({"35": "nanosleep", "128": "rt_sigtimedwait", "202": "futex",
                  "230": "clock_nanosleep", "232": "epoll_wait",
                  "281": "epoll_pwait", "288": "accept4"}
                 if platform.machine() == "x86_64" else {})
SANITIZER_SLEEPS = {"nanosleep", "clock_nanosleep"}


def waiting_in(pid):
    """How many of a process's threads wait in each system call (by name
    where SYSCALL_NAMES has it; "running" for a thread on a CPU)."""
    counts = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            call = Path(f"/proc/{pid}/task/{tid}/syscall").read_text()
        except FileNotFoundError:
            continue
        call = call.split()[0]
        counts[SYSCALL_NAMES.get(call, call)] += 1
    return counts


def server_threads(pid):
    """A server process's threads, a sanitizer's own not counted."""
    return sum(n for call, n in waiting_in(pid).items()
               if call not in SANITIZER_SLEEPS)


TOP = Path(os.environ.get("BUCKETED_TOP")
           or Path(__file__).resolve().parent.parent.parent)
BUILD = Path(os.environ.get("BUCKETED_BUILD") or TOP)
HTTPD_BIN = os.environ.get("HTTPD_BIN", "/usr/sbin/apache2")
APACHE_MODULES = Path("/usr/lib/apache2/modules")


# mod_status and bucketed's metrics page, for the tests that read them.
STATUS_DIRECTIVES = f"""
LoadModule status_module {APACHE_MODULES}/mod_status.so
<Location /server-status>
    SetHandler server-status
</Location>
<Location /metrics>
    SetHandler bucketed-metrics
</Location>
"""
MPM_SO = BUILD / "mod_mpm_bucketed.so"
STATUS_SO = BUILD / "mod_bucketed_status.so"
# Faults on demand (test/modules/mod_test_fault.c).
FAULT_SO = BUILD / "test" / "modules" / "mod_test_fault.so"
NOREUSEPORT_SO = BUILD / "bench" / "noreuseport.so"
INDEX_BODY = b"bucketed integration test\n"
# What selects each child model (conftest.py's child_model fixture).
CHILD_MODELS = {"prefork": "ChildModel prefork\n",
                "event": "ChildModel event\n"}
CGI_BODY = "slow cgi done"

TEST_PRELOAD = os.environ.get("BUCKETED_TEST_PRELOAD", "")
TEST_ENV = {name: os.environ[name]
            for name in os.environ.get("BUCKETED_TEST_ENV", "").split()
            if name in os.environ}


def process_env(preload=None, environ=None, path="/usr/sbin:/usr/bin:/bin"):
    """Environment of a process under test: PATH, the variables named by
    BUCKETED_TEST_ENV, `environ`, and LD_PRELOAD = BUCKETED_TEST_PRELOAD
    then `preload` (either may be absent)."""
    env = {"PATH": path, **TEST_ENV, **(environ or {})}
    libraries = [p for p in (TEST_PRELOAD, str(preload or "")) if p]
    if libraries:
        env["LD_PRELOAD"] = ":".join(libraries)
    return env


# Bounds of every wait, in seconds.
START_TIMEOUT = 20
STOP_TIMEOUT = 20


# ---------------------------------------------------------------- load

def log_near(log, errors, seconds=1.0):
    """The lines of an error log within `seconds` of the failures a Load
    recorded (each starts with its wall_clock())."""
    def seconds_of(clock):
        h, m, s = clock.split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)

    times = [seconds_of(e.split()[0]) for e in errors]
    near = []
    for line in log.splitlines():
        fields = line[1:].split()
        if len(fields) < 4 or fields[3].count(":") != 2:
            continue
        t = seconds_of(fields[3])
        if any(abs(t - f) <= seconds for f in times):
            near.append(line)
    return near


class Load(ClientThreads):
    """A bounded client: `threads` threads doing GETs with Connection: close
    round-robin over `ports`, until `count` requests were made, stop() is
    called (after at least `minimum` requests), or `seconds` pass. A request
    fails unless it answers 200 with the expected body."""

    def __init__(self, ports, count, threads=8, seconds=60, minimum=0,
                 path="/", body=INDEX_BODY):
        super().__init__(ports, count, threads=threads, seconds=seconds,
                         minimum=minimum)
        self.path = path
        self.body = body

    def _one(self, port):
        try:
            status, body = http_get(port, self.path)
        except (OSError, http.client.HTTPException) as e:
            return f"{wall_clock()} port {port}: {e!r}"
        if status != 200 or (self.body is not None and body != self.body):
            return (f"{wall_clock()} port {port}: status {status}, body "
                    f"{body[:80]!r}")
        return None

    def _work(self, deadline):
        while time.monotonic() < deadline:
            ticket = next(self._tickets)
            if ticket >= self.count or (self._stop.is_set()
                                        and ticket >= self.minimum):
                return
            self.result.record(self._one(self.ports[ticket
                                                    % len(self.ports)]))


class BackgroundGet:
    """One GET in a thread of its own; result() waits for its (status,
    body) and re-raises what it raised."""

    def __init__(self, port, path, timeout=HTTP_TIMEOUT):
        self._outcome = None
        self._thread = threading.Thread(target=self._run,
                                        args=(port, path, timeout),
                                        daemon=True)
        self._thread.start()

    def _run(self, port, path, timeout):
        try:
            self._outcome = ("ok", http_get(port, path, timeout))
        except (OSError, http.client.HTTPException) as e:
            self._outcome = ("error", e)

    def result(self, timeout=HTTP_TIMEOUT + 5):
        self._thread.join(timeout)
        assert self._outcome is not None, "the request never finished"
        kind, value = self._outcome
        if kind == "error":
            raise value
        return value


# ---------------------------------------------------------------- httpd

SLOW_CGI = """#!/bin/sh
sleep "${QUERY_STRING:-3}"
printf 'Content-Type: text/plain\\r\\n\\r\\n%s\\n' '""" + CGI_BODY + """'
"""
# Holds its child until the test creates ServerRoot/run/released (at most
# HELD_CGI_BOUND s): a wait that ends when the test says, not on a clock
# the machine's load can outrun.
HELD_CGI_BOUND = 120
HELD_CGI = """#!/bin/sh
i=0
while [ ! -e '{released}' ] && [ $i -lt """ + str(HELD_CGI_BOUND * 20) + """ ]; do
    sleep 0.05
    i=$((i + 1))
done
printf 'Content-Type: text/plain\\r\\n\\r\\n%s\\n' '""" + CGI_BODY + """'
"""


class Httpd:
    """One server: its own ServerRoot (config, logs, htdocs, a slow CGI)
    under `root`, `listens` ports (or the given ones), bucketed by default
    or any other Debian MPM module (mpm="prefork").

    `directives` is extra configuration text; `preload` a library for
    LD_PRELOAD in httpd's environment; `environ` more variables for it
    (BUCKETED_SHIM_KERNEL ...); `cgi` loads mod_cgi for the slow CGI
    (/cgi-bin/slow.cgi?SECONDS) and the held CGI (/cgi-bin/held.cgi, until
    release_held())."""

    def __init__(self, root, listens=1, ports=None, directives="",
                 mpm="bucketed", preload=None, cgi=False, environ=None):
        self.root = Path(root)
        self.ports = list(ports) if ports else free_ports(listens)
        self.mpm = mpm
        self.preload = preload
        self.environ = dict(environ or {})
        self.cgi = cgi
        self.directives = directives
        self.conf = self.root / "httpd.conf"
        self.pidfile = self.root / "run" / "httpd.pid"
        self.error_log_path = self.root / "logs" / "error.log"
        self.proc = None
        self.newest_generation = -1
        self.stdout_path = self.root / "stdout.txt"
        for sub in ("run", "logs", "htdocs", "cgi-bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            (self.root / sub).chmod(0o755)
        (self.root / "htdocs" / "index.html").write_bytes(INDEX_BODY)
        self.released_path = self.root / "run" / "released"
        for name, text in (("slow.cgi", SLOW_CGI),
                           ("held.cgi", HELD_CGI.format(
                               released=self.released_path))):
            cgi_script = self.root / "cgi-bin" / name
            cgi_script.write_text(text)
            cgi_script.chmod(0o755)
        self.write_config()

    # -- configuration

    def mpm_lines(self):
        if self.mpm == "bucketed":
            return [f"LoadModule mpm_bucketed_module {MPM_SO}",
                    f"LoadModule bucketed_status_module {STATUS_SO}"]
        return [f"LoadModule mpm_{self.mpm}_module "
                f"{APACHE_MODULES}/mod_mpm_{self.mpm}.so"]

    def config_text(self, directives=None):
        t = self.root
        lines = [
            f"ServerRoot {t}",
            "ServerName localhost",
            f"PidFile {self.pidfile}",
            f"DefaultRuntimeDir {t}/run",
            f"ErrorLog {self.error_log_path}",
            "LogLevel info" + (" mpm_bucketed:debug"
                               if self.mpm == "bucketed" else ""),
            "User www-data",
            "Group www-data",
            *self.mpm_lines(),
        ]
        for mod in ("authz_core", "mime", "dir", "alias"):
            lines.append(f"LoadModule {mod}_module "
                         f"{APACHE_MODULES}/mod_{mod}.so")
        if self.cgi:
            lines.append(f"LoadModule cgi_module {APACHE_MODULES}/mod_cgi.so")
            lines.append(f"ScriptAlias /cgi-bin/ {t}/cgi-bin/")
        lines += ["TypesConfig /etc/mime.types",
                  *(f"Listen {LOOPBACK}:{p}" for p in self.ports),
                  f"DocumentRoot {t}/htdocs",
                  "DirectoryIndex index.html",
                  "<Location /bucketed-status>",
                  "  SetHandler bucketed-status",
                  "</Location>",
                  self.directives if directives is None else directives]
        return "\n".join(lines) + "\n"

    def write_config(self, directives=None):
        """Rewrites httpd.conf, with other extra directives if given."""
        self.conf.write_text(self.config_text(directives))

    # -- one-shot commands (-t, -M, -V)

    def env(self):
        return process_env(self.preload, self.environ)

    def command(self, *args, timeout=60):
        """Runs httpd -f CONF ARGS; returns the CompletedProcess, with
        .output = stdout + stderr as text."""
        cp = subprocess.run([HTTPD_BIN, "-f", str(self.conf), *args],
                            env=self.env(), capture_output=True, text=True,
                            timeout=timeout)
        cp.output = cp.stdout + cp.stderr
        return cp

    # -- running

    def start(self, *extra_args, wait=True, holder=None, **activation):
        """Starts httpd in the foreground (-DFOREGROUND) as our child, and
        waits until every bucket has a child answering. With holder (a
        bucketbench.activation.Holder), httpd gets its sockets as systemd
        passes them; activation: Holder.popen's listen_pid/listen_fds."""
        argv = [HTTPD_BIN, "-f", str(self.conf), "-DFOREGROUND", *extra_args]
        assert self.proc is None, "already started"
        self.newest_generation = -1
        out = open(self.stdout_path, "ab")
        # Stock prefork and event stop by signalling their whole process
        # group, which would take pytest with them: they get a session of
        # their own.
        popen = (subprocess.Popen if holder is None
                 else lambda argv, env, **kw: holder.popen(argv, env,
                                                           **activation,
                                                           **kw))
        self.proc = popen(argv, env=self.env(), stdout=out,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          start_new_session=self.mpm != "bucketed")
        out.close()
        if wait:
            self.wait_ready()
        return self

    def pidfile_pid(self):
        """The pid the pid file names, or None before it is written."""
        try:
            return int(self.pidfile.read_text())
        except (OSError, ValueError):
            return None

    @property
    def pid(self):
        return self.proc.pid

    def exited(self):
        return self.proc is not None and self.proc.poll() is not None

    def wait_ready(self, timeout=START_TIMEOUT):
        """Until the pid file names our process and the status page shows a
        child in every bucket (or, for another MPM, / answers)."""
        def ready():
            if self.exited():
                raise AssertionError(
                    f"httpd exited with {self.proc.returncode}:\n"
                    + self.output())
            if self.pidfile_pid() != self.pid:
                return False
            if self.mpm != "bucketed" or "-X" in self.proc.args:
                return http_get(self.ports[0])[0] == 200
            st = self.status()
            return all(b["children"] >= 1 for b in st["buckets_list"])
        wait_until(ready, timeout, what=f"httpd {self.conf} to be ready")
        return self

    def status(self, port=None):
        """The status page as the newest generation seen answering since
        the start says it: for a moment after a graceful restart, old
        children kept for the handover still answer (policy_handover.h),
        and an answer of theirs is asked again."""
        def newest():
            status, body = http_get(port or self.ports[0],
                                    "/bucketed-status")
            assert status == 200, f"/bucketed-status answered {status}"
            parsed = parse_status(body.decode())
            if parsed["generation"] < self.newest_generation:
                return None
            self.newest_generation = parsed["generation"]
            return parsed
        return wait_until(newest, 20, what="a status page of generation "
                          f"{self.newest_generation} or later")

    def signal(self, sig):
        os.kill(self.pid, sig)

    def wait_exit(self, timeout=STOP_TIMEOUT):
        """Waits for the parent to exit; returns its exit status."""
        return self.proc.wait(timeout)

    def restart_on_held_sockets(self, holder):
        """A full restart as systemd's socket units make it: a graceful
        stop (SIGWINCH), the parent's exit (status 0), then a new parent
        on the sockets holder keeps."""
        self.signal(signal.SIGWINCH)
        assert self.wait_exit() == 0
        self.proc = None
        self.start(holder=holder, wait=False)
        wait_until(lambda: self.pidfile_pid() == self.pid, 20,
                   what="the new httpd")

    def stop(self):
        """SIGTERM and wait; SIGKILL if it does not go. Returns the exit
        status of the parent."""
        if self.proc is None:
            return None
        return stop_process(self.proc, STOP_TIMEOUT)

    def cgi_in_flight(self):
        """How many of this server's slow CGI scripts run (0: none)."""
        return len(processes_mentioning(str(self.root / "cgi-bin")))

    def children_in_a_cgi(self):
        """How many of the parent's children run one of its CGI scripts:
        exact where cgi_in_flight() is not (a script's own children, its
        sleeps, mention it too for a moment)."""
        cgis = set(processes_mentioning(str(self.root / "cgi-bin")))
        return sum(1 for child in children_of(self.pid)
                   if cgis & set(children_of(child)))

    def leftovers(self):
        """Live processes started from this configuration."""
        return processes_mentioning(str(self.conf))

    def cleanup(self):
        """Finalizer: stops the parent, then SIGKILLs whatever is left of
        this server (children, daemonized parents) and waits for it."""
        try:
            self.stop()
        finally:
            kill_until_gone(self.leftovers, STOP_TIMEOUT,
                            what=f"processes of {self.conf} to go")

    # -- logs

    # CustomLog line that served_by_child() reads.
    PID_LOG = 'CustomLog logs/access.log "%P %>s"'

    def served_by_child(self):
        """Counter {child pid: requests}, from the access log written with
        PID_LOG."""
        return collections.Counter(
            line.split()[0]
            for line in (self.root / "logs" / "access.log").read_text()
            .splitlines())

    def release_held(self):
        """Lets every held CGI, running or to come, answer."""
        self.released_path.touch()

    def error_log(self):
        try:
            return self.error_log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def output(self):
        """What httpd printed on its stdout and stderr, then the error log."""
        try:
            printed = self.stdout_path.read_text(errors="replace")
        except FileNotFoundError:
            printed = ""
        return printed + self.error_log()


def recv_exactly(sock, n):
    """n bytes from a socket; fails if the server closes it first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed by the server"
        data += chunk
    return data


# ---------------------------------------------------------------- buckets

def read_response(sock, received=b""):
    """One HTTP/1.1 response with a Content-Length from sock: (head,
    body, bytes received after it)."""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, received[:200]
        received += chunk
    head, first = received.split(b"\r\n\r\n", 1)
    length = int([line.split(b":", 1)[1] for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:")][0])
    rest = bytearray(first)
    while len(rest) < length:
        chunk = sock.recv(1 << 20)
        assert chunk, (head, len(rest), length)
        rest += chunk
    return head, bytes(rest[:length]), bytes(rest[length:])


def per_bucket(status, key):
    """One field of every bucket of a parsed status page, in bucket order."""
    return [b[key] for b in status["buckets_list"]]


def bucket_sockets_of(server, child):
    """The listening sockets (inodes) of the server's port a child holds:
    with one Listen and one socket per bucket, they tell its bucket."""
    return socket_inodes_of(child) & listening_inodes(server.ports[0])


def bucket_sockets(server):
    """{listening socket inode: [child pids holding it]} once every child
    holds exactly one (a child holds them all from its fork until it closes
    the other buckets' ones), else None."""
    held = collections.defaultdict(list)
    for child in children_of(server.pid):
        mine = bucket_sockets_of(server, child)
        if len(mine) != 1:
            return None
        held[mine.pop()].append(child)
    return held


def need_build(*paths):
    """Skips the test when a build product it needs is missing."""
    for p in paths:
        if not Path(p).exists():
            pytest.skip(f"{p} is not built (run scripts/build.sh)")
