# SPDX-License-Identifier: Apache-2.0
"""Issue 26's workloads users serve (catalog.USERS_WORKLOADS), run by the
Runner like W1-W3 (servers interleaved within rounds) with their own load:

- tls-handshake, tls-keepalive: wrk over https (TLS 1.3, an ECDSA P-256
  certificate made with openssl in the run's temporary directory). wrk
  makes a new TLS session for every connection it opens, so with
  Connection: close every request pays a full handshake.
- tls-resume: wrk cannot resume sessions, so TLS_RESUME_PROCESSES
  `openssl s_time -reuse` processes run side by side: each makes one full
  handshake, then resumes that session (a TLS 1.3 ticket) for every new
  connection, one HTTP/1.0 request each. s_time reports no latencies; the
  record counts the connections that did not resume.
- h2-streams, h2-conns: h2load over TLS (ALPN h2): connections x
  H2_STREAMS streams; latency percentiles from h2load's per-request log.
  Every load is bounded: a load tool still running LOAD_GRACE_S after its
  duration is killed, the server it ran against is stopped (the Runner
  starts it afresh for the next round), and the run is recorded as
  failed (stock prefork with mod_http2 spun past its load in an earlier
  try).
- large-1m, large-100m: wrk keep-alive GETs of a LARGE_SIZES file, sendfile
  on in every server (httpd: EnableSendfile On; nginx: sendfile on).
- proxy-default, proxy-tuned: each server proxies /backend/ (httpd:
  mod_proxy_http, nginx: proxy_pass with an upstream keep-alive pool) to
  slow_backend.py, which answers after 10-50 ms; the servers' default
  limits, or the harness's (--slots).
- php-fpm: the PHP page of the php workload through Debian's php-fpm8.2,
  started by the harness with its own configuration and a static pool
  of PHP_FPM_CHILDREN (httpd: mod_proxy_fcgi over a Unix socket; nginx:
  fastcgi_pass); php-mod: the page under mod_php.

Every load runs on loopback against 127.0.0.1, bounded in time; helper
processes (backend, php-fpm) run in sessions of their own and are stopped
by their process group."""

import os
import re
import shutil
import ssl
import subprocess
import time
import urllib.request

from . import (configs, load, markdown, placement, procfs, slow_backend,
               stats)
from .catalog import SHORT_NAMES, WORKLOAD_GROUPS, WORKLOADS
from .net import http_get
from .server import CLEAN_PATH, HTTP_TIMEOUT_S, Server, run_as_user

TLS_KINDS = ("tls-handshake", "tls-resume", "tls-keepalive", "h2-streams",
             "h2-conns")
H2_STREAMS = {"h2-streams": 100, "h2-conns": 10}
LARGE_SIZES = {"large-1m": 2 ** 20, "large-100m": 100 * 2 ** 20}
PROXY_KINDS = ("proxy-default", "proxy-tuned")
# The workloads wrk drives, which a rate can pace (h2load and s_time
# cannot be paced per request).
PACEABLE = tuple(name for name in WORKLOAD_GROUPS["users"]
                 if name != "tls-resume" and name not in H2_STREAMS)
PROXY_PATH = "/backend/"
PHP_FPM = "php-fpm"
PHP_FPM_BINARY = "/usr/sbin/php-fpm8.2"
PHP_FPM_CHILDREN = 16
BACKEND_PROCESSES = 2
TLS_RESUME_PROCESSES = 16
LOAD_GRACE_S = 15
# wrk's timeout for the large files: a 100 MB answer takes long under
# load, and a 2 s limit would count slow answers as timeouts.
LARGE_TIMEOUT_S = 20
HELPER_START_S = 20
CERT_NAME = "cert.pem"
KEY_NAME = "key.pem"
FPM_SOCKET = "php-fpm.sock"


class UsersError(Exception):
    """A helper (certificate, backend, php-fpm) could not be set up."""


def _large_name(kind):
    return f"{kind}.bin"


def document(kind):
    """(path, expected body or None: only its length is checked) of what
    the workload's load requests."""
    if kind in LARGE_SIZES:
        return "/" + _large_name(kind), None
    if kind in PROXY_KINDS:
        return PROXY_PATH + "page", slow_backend.BODY
    if kind in (PHP_FPM, "php-mod"):
        return "/" + configs.PHP_NAME, configs.PHP_BODY
    return "/" + configs.DOC_NAME, configs.DOC_BODY


# ---------------------------------------------------------------- helpers

def _start_group(command, log_path, cpus, env=None):
    """A back-end (php-fpm, the slow backend) started on the servers'
    CPUs (cpus; None: not pinned)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log,
                                **placement.server_process(cpus),
                                env=env or {"PATH": CLEAN_PATH, "LANG": "C"})


def _stop_group(process, what):
    procfs.stop_process(process, 10)
    procfs.kill_until_gone(lambda: procfs.process_group(process.pid), 10,
                           what=f"{what} to go")


def _wait_for(check, process, what, log_path):
    deadline = time.monotonic() + HELPER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    with open(log_path, errors="replace") as log:
        tail = log.read()[-2000:]
    raise UsersError(f"{what} did not come up: {tail}")


class Fixtures:
    """What one workload's servers share, made in directory: the TLS
    certificate, the large file, the slow backend, php-fpm."""

    def __init__(self, kind, directory, port, server_cpus=None):
        self.kind = kind
        self.directory = directory
        self.port = port              # the backend's, for proxy kinds
        self.server_cpus = server_cpus    # where the back-ends run
        self.processes = []
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o755)

    @property
    def cert(self):
        return os.path.join(self.directory, CERT_NAME)

    @property
    def key(self):
        return os.path.join(self.directory, KEY_NAME)

    @property
    def fpm_socket(self):
        return os.path.join(self.directory, FPM_SOCKET)

    @property
    def large_file(self):
        return os.path.join(self.directory, _large_name(self.kind))

    def start(self):
        if self.kind in TLS_KINDS:
            self._make_certificate()
        if self.kind in LARGE_SIZES:
            with open(self.large_file, "wb") as handle:
                handle.write(os.urandom(LARGE_SIZES[self.kind]))
            os.chmod(self.large_file, 0o644)
        if self.kind in PROXY_KINDS:
            self._start_backend()
        if self.kind == PHP_FPM:
            self._start_php_fpm()
        self._check_placement()
        return self

    def _check_placement(self):
        """The back-ends (and php-fpm's workers) run on the servers' CPUs
        when they are pinned."""
        if self.server_cpus is None:
            return
        for process, what in self.processes:
            try:
                placement.check_tree(procfs.process_tree(process.pid),
                                     self.server_cpus, what)
            except placement.PlacementError as error:
                raise UsersError(str(error)) from None

    def _make_certificate(self):
        """A fresh ECDSA P-256 key and self-signed certificate."""
        for command in (
                ["openssl", "ecparam", "-name", "prime256v1", "-genkey",
                 "-noout", "-out", self.key],
                ["openssl", "req", "-new", "-x509", "-key", self.key,
                 "-out", self.cert, "-days", "2", "-subj", "/CN=127.0.0.1"]):
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=30)
            if done.returncode:
                raise UsersError(f"{' '.join(command)}: {done.stderr}")
        os.chmod(self.key, 0o644)

    def _start_backend(self):
        log_path = os.path.join(self.directory, "backend.log")
        bench_dir = os.path.dirname(os.path.dirname(os.path.abspath(
            __file__)))
        process = _start_group(
            ["/usr/bin/python3", "-m", "bucketbench.slow_backend",
             str(self.port), str(BACKEND_PROCESSES)], log_path,
            self.server_cpus,
            env={"PATH": CLEAN_PATH, "LANG": "C", "PYTHONPATH": bench_dir})
        self.processes.append((process, "the slow backend"))
        _wait_for(lambda: http_get(self.port, "/ready")[0] == 200, process,
                  "the slow backend", log_path)

    def _start_php_fpm(self):
        if not os.access(PHP_FPM_BINARY, os.X_OK):
            raise UsersError(f"{PHP_FPM_BINARY} not found: install "
                             f"php8.2-fpm (scripts/deps.sh does)")
        ini = os.path.join(self.directory, configs.PHP_INI_NAME)
        with open(ini, "w") as handle:
            handle.write(configs.php_ini(self.directory))
        conf = os.path.join(self.directory, "php-fpm.conf")
        with open(conf, "w") as handle:
            handle.write(php_fpm_config(self.directory, self.fpm_socket,
                                        run_as_user()))
        log_path = os.path.join(self.directory, "php-fpm.stderr")
        process = _start_group(
            [PHP_FPM_BINARY, "--nodaemonize", "--fpm-config", conf,
             "-c", ini], log_path, self.server_cpus,
            env={"PATH": CLEAN_PATH, "LANG": "C",
                 **configs.PHP_SCAN_DIR_ENV})
        self.processes.append((process, "php-fpm"))
        _wait_for(lambda: os.path.exists(self.fpm_socket), process,
                  "php-fpm", log_path)

    def stop(self):
        while self.processes:
            _stop_group(*self.processes.pop())


def php_fpm_config(directory, socket_path, run_as):
    """php-fpm's configuration: no daemon, logs in directory, one static
    pool of PHP_FPM_CHILDREN on a Unix socket the servers' users reach."""
    user = [f"user = {run_as[0]}", f"group = {run_as[1]}",
            f"listen.owner = {run_as[0]}", f"listen.group = {run_as[1]}"] \
        if run_as else []
    return "\n".join([
        "; Written by bucketbench (bench/bucketbench/users.py).",
        "[global]",
        f"pid = {directory}/php-fpm.pid",
        f"error_log = {directory}/php-fpm.log",
        "daemonize = no",
        "[bench]",
        *user,
        f"listen = {socket_path}",
        "listen.mode = 0660",
        f"listen.backlog = {configs.LISTEN_BACKLOG}",
        "pm = static",
        f"pm.max_children = {PHP_FPM_CHILDREN}",
        "pm.max_requests = 0",
    ]) + "\n"


# ---------------------------------------------------------------- servers

def httpd_directives(kind, fixtures, modules_dir, root):
    """What a workload adds to an httpd under test."""
    def load_module(*names):
        return [f'LoadModule {name}_module "{modules_dir}/mod_{name}.so"'
                for name in names]
    lines = []
    if kind in TLS_KINDS:
        lines += load_module("socache_shmcb", "ssl")
        lines += ["SSLEngine on",
                  f'SSLCertificateFile "{fixtures.cert}"',
                  f'SSLCertificateKeyFile "{fixtures.key}"',
                  "SSLProtocol -all +TLSv1.3",
                  f'SSLSessionCache "shmcb:{root}/ssl_scache(512000)"']
    if kind in H2_STREAMS:
        lines += load_module("http2") + ["Protocols h2 http/1.1"]
    if kind in LARGE_SIZES:
        lines.append("EnableSendfile On")
    if kind in PROXY_KINDS:
        lines += load_module("proxy", "proxy_http")
        lines.append(f"ProxyPass {PROXY_PATH} "
                     f"http://127.0.0.1:{fixtures.port}/")
    if kind == PHP_FPM:
        lines += load_module("proxy", "proxy_fcgi")
        lines += ['<FilesMatch "\\.php$">',
                  f'    SetHandler "proxy:unix:{fixtures.fpm_socket}'
                  f'|fcgi://localhost/"',
                  "</FilesMatch>"]
    return lines


def nginx_edit(text, kind, fixtures, ports, docroot):
    """configs.nginx_config's text with what a workload adds."""
    listen = {"ssl": kind in TLS_KINDS, "http2": kind in H2_STREAMS}
    flags = "".join(f" {flag}" for flag, on in listen.items() if on)
    for port in ports:
        text = text.replace(f"listen 127.0.0.1:{port} ",
                            f"listen 127.0.0.1:{port}{flags} ")
    http, server = [], []
    if kind in TLS_KINDS:
        server += [f"ssl_certificate {fixtures.cert};",
                   f"ssl_certificate_key {fixtures.key};",
                   "ssl_protocols TLSv1.3;",
                   "ssl_session_cache shared:SSL:10m;"]
    if kind in LARGE_SIZES:
        server.append("sendfile on;")
    if kind in PROXY_KINDS:
        http += ["upstream backend {",
                 f"    server 127.0.0.1:{fixtures.port};",
                 "    keepalive 64;", "}"]
        server += [f"location {PROXY_PATH} {{",
                   "    proxy_pass http://backend/;",
                   "    proxy_http_version 1.1;",
                   '    proxy_set_header Connection "";', "}"]
    if kind == PHP_FPM:
        server += ["location ~ \\.php$ {",
                   f"    fastcgi_pass unix:{fixtures.fpm_socket};",
                   "    fastcgi_param SCRIPT_FILENAME "
                   "$document_root$fastcgi_script_name;",
                   "    fastcgi_param SCRIPT_NAME $fastcgi_script_name;",
                   "    fastcgi_param REQUEST_METHOD $request_method;",
                   "    fastcgi_param REQUEST_URI $request_uri;",
                   "    fastcgi_param QUERY_STRING $query_string;",
                   "    fastcgi_param SERVER_PROTOCOL $server_protocol;",
                   "}"]
    root_line = f"        root {docroot};\n"
    text = text.replace(root_line, root_line + "".join(
        f"        {line}\n" for line in server))
    return text.replace("    server {\n", "".join(
        f"    {line}\n" for line in http) + "    server {\n", 1)


class UserServer(Server):
    """A Server with a workload's additions (fixtures: its Fixtures)."""

    def __init__(self, *args, fixtures=None, kind="", **kwargs):
        self.fixtures = fixtures
        self.kind = kind
        super().__init__(*args, **kwargs)

    def _default_limits(self):
        return self.kind == "proxy-default" or super()._default_limits()

    def _directives(self):
        return list(super()._directives()) + httpd_directives(
            self.kind, self.fixtures, self.tools.modules_dir, self.workdir)

    def _write_files(self):
        super()._write_files()
        docroot = os.path.join(self.workdir, "htdocs")
        if self.kind in LARGE_SIZES:
            target = os.path.join(docroot, _large_name(self.kind))
            if not os.path.exists(target):
                os.link(self.fixtures.large_file, target)
        if self.kind == PHP_FPM:
            with open(os.path.join(docroot, configs.PHP_NAME), "w") as page:
                page.write(configs.PHP_SOURCE)
        if self.spec.kind == "nginx":
            with open(self.config_path) as conf:
                text = conf.read()
            with open(self.config_path, "w") as conf:
                conf.write(nginx_edit(text, self.kind, self.fixtures,
                                      self.ports, docroot))

    def _readiness_probes(self):
        path, expected = document(self.kind)
        return [(port, path, expected) for port in self.ports]

    def _answer(self, port, path):
        if self.kind not in TLS_KINDS:
            return super()._answer(port, path)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}",
                                    timeout=HTTP_TIMEOUT_S,
                                    context=context) as answer:
            return answer.status, answer.read()


# ---------------------------------------------------------------- load

def _run_bounded(commands, duration_s, log_dir, name):
    """Runs commands side by side, each killed when still running
    LOAD_GRACE_S after duration_s. Returns ([(exit status, output)],
    client CPU seconds, wall seconds, whether any had to be killed)."""
    began = time.monotonic()
    running = []
    for index, command in enumerate(commands):
        log = open(os.path.join(log_dir, f"{name}.{index}.log"), "w+b")
        running.append((subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                         stdout=log,
                                         stderr=subprocess.STDOUT), log))
    try:
        for process, _ in running:
            placement.check_client(process.pid,
                                   os.path.basename(process.args[0]))
    except placement.PlacementError as error:
        for process, log in running:
            process.kill()
            process.wait()
            log.close()
        raise UsersError(str(error)) from None
    deadline = began + duration_s + LOAD_GRACE_S
    cpu_s, killed, outcomes = 0.0, False, []
    for process, log in running:
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                killed = True
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        process.returncode = os.waitstatus_to_exitcode(status)
        cpu_s += usage.ru_utime + usage.ru_stime
        log.seek(0)
        outcomes.append((process.returncode,
                         log.read().decode(errors="replace")))
        log.close()
    return outcomes, cpu_s, time.monotonic() - began, killed


def _no_errors():
    return {"connect": 0, "read": 0, "write": 0, "timeout": 0, "non_2xx": 0}


def parse_h2load(text, latencies_us):
    """h2load's totals in the harness's units; latencies_us: the requests'
    durations from its --log-file. None when it printed no totals."""
    totals = load.h2load_totals(text)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, "
                      r"(\d+) 5xx", text)
    clients = re.search(r"clients?: \d+ total, \d+ started, \d+ done, "
                        r"\d+ succeeded, (\d+) failed", text)
    traffic = re.search(r"traffic: .*?\((\d+)\) total", text)
    protocol = re.search(r"Application protocol: (\S+)", text)
    if not (totals and codes):
        return None
    duration_s, counts = totals
    done = counts["done"]
    errors = _no_errors()
    errors.update(read=counts["errored"], timeout=counts["timeout"],
                  non_2xx=int(codes.group(3)) + int(codes.group(4)),
                  connect=int(clients.group(1)) if clients else 0)
    return {"duration_s": duration_s, "requests": done,
            "success": counts["succeeded"],
            "rps": done / duration_s if duration_s else 0.0,
            "bytes": int(traffic.group(1)) if traffic else 0,
            "errors": errors, "latency_ms": _latencies(latencies_us),
            # Stock prefork's mod_http2 refuses HTTP/2 (AH10034): h2load
            # then falls back to HTTP/1.1, pipelining its streams.
            "protocol": protocol.group(1) if protocol else None}


def _latencies(values_us):
    if not values_us:
        return None
    values = [v / 1000.0 for v in values_us]
    summary = {f"p{pct}": stats.percentile(values, pct)
               for pct in (50, 90, 99)}
    summary.update({"p99.9": stats.percentile(values, 99.9),
                    "min": min(values), "max": max(values),
                    "mean": sum(values) / len(values)})
    return summary


def _h2load_log(path):
    """The durations (us) of h2load's --log-file: start, status, duration
    per line."""
    try:
        with open(path) as handle:
            return [int(line.split("\t")[2]) for line in handle
                    if line.count("\t") >= 2]
    except OSError:
        return []


def parse_s_time(outputs, wall_s):
    """The s_time processes' totals: connections made (each one
    request), those not resumed, bytes; None when one printed none."""
    requests = not_resumed = total_bytes = 0
    for _, text in outputs:
        made = re.search(r"(\d+) connections in \d+ real seconds, (\d+) "
                         r"bytes read per connection", text)
        if not made:
            return None
        count = int(made.group(1))
        requests += count
        total_bytes += count * int(made.group(2))
        marks = text.split("starting", 1)[-1]
        not_resumed += marks.count("*")
    return {"duration_s": wall_s, "requests": requests,
            "success": requests, "rps": requests / wall_s,
            "bytes": total_bytes, "errors": _no_errors(),
            "latency_ms": None, "not_resumed": not_resumed}


def _wrk_commands(wrk, server, kind, workload, concurrency, duration_s,
                  timeout_s, threads, rate):
    script = load.script_file(server.workdir, server.ports, workload.split,
                              threads, rate)
    if kind in LARGE_SIZES:
        timeout_s = max(timeout_s, LARGE_TIMEOUT_S)
    return [load.wrk_command(
        wrk, ports=server.ports, connections=concurrency, threads=threads,
        duration_s=duration_s, timeout_s=timeout_s,
        keep_alive=workload.keep_alive, script_path=script,
        document=document(kind)[0].lstrip("/"),
        scheme="https" if kind in TLS_KINDS else "http")]


def commands(wrk, server, workload, concurrency, duration_s, timeout_s,
             threads, rate=None):
    """The load's commands for one run; rate: wrk paced to that many
    requests a second in all (load.PACED_LUA_TEMPLATE; the wrk-driven
    workloads only, see PACEABLE)."""
    kind = workload.users
    if rate is not None and kind not in PACEABLE:
        raise ValueError(f"{kind} is not driven by wrk and cannot be paced")
    port = server.ports[0]
    path = document(kind)[0]
    if kind == "tls-resume":
        per_process = ["openssl", "s_time", "-connect",
                       f"127.0.0.1:{port}", "-www", path, "-reuse",
                       "-time", str(duration_s)]
        return [per_process] * concurrency
    if kind in H2_STREAMS:
        return [["h2load", "-c", str(concurrency), "-m",
                 str(H2_STREAMS[kind]), "-t", str(threads), "-D",
                 str(duration_s), "--log-file",
                 os.path.join(server.workdir, "h2load-requests.log"),
                 f"https://127.0.0.1:{port}{path}"]]
    return _wrk_commands(wrk, server, kind, workload, concurrency,
                         duration_s, timeout_s, threads, rate)


def run_load(server, workload, concurrency, duration_s, timeout_s,
             threads, wrk, rate=None):
    """One bounded load of a workload users serve against server (rate:
    see commands()).
    Returns (commands, result as load.parse_result's, client CPU s);
    load.LoadError when it failed (a load that overran is killed and the
    server stopped, see the module's text)."""
    kind = workload.users
    command_list = commands(wrk, server, workload, concurrency, duration_s,
                            timeout_s, threads, rate)
    outcomes, cpu_s, wall_s, killed = _run_bounded(
        command_list, duration_s, server.workdir, "load")
    if killed:
        server.stop()
        raise load.LoadError(
            f"the load was still running {LOAD_GRACE_S} s after its "
            f"{duration_s} s and was killed; the server was stopped "
            f"(bounded, see users.py)")
    failed = [(code, text) for code, text in outcomes if code != 0]
    if kind == "tls-resume":
        result = parse_s_time(outcomes, wall_s)
    elif kind in H2_STREAMS:
        result = parse_h2load(outcomes[0][1], _h2load_log(os.path.join(
            server.workdir, "h2load-requests.log")))
    else:
        result = load.parse_result(outcomes[0][1])
    if failed or result is None:
        code, text = (failed or outcomes)[0]
        # The first line is what the progress lines show.
        what = f"exited with status {code}" if failed \
            else "printed no totals (exit status 0)"
        raise load.LoadError(f"{command_list[0][0]} {what}; its last "
                             f"lines:\n"
                             + "\n".join(text.splitlines()[-10:]))
    result["bytes_per_s"] = result["bytes"] / result["duration_s"] \
        if result["duration_s"] else 0.0
    return command_list, result, cpu_s


# ---------------------------------------------------------------- report

def _cell_ratio(point, baseline):
    ratio = point["ratios"].get(baseline)
    if not ratio or ratio["median"] is None:
        return "–"
    rounds = " / ".join(f"{r:.2f}" for r in ratio["per_round"]
                        if r is not None)
    return f"{ratio['median']:.2f}x ({rounds})"


def _fmt(value, digits=0):
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _errors(point):
    total = sum(point["errors"].values())
    if not total:
        return "0"
    return ", ".join(f"{count:,} {kind}"
                     for kind, count in point["errors"].items() if count)


def waiting(point):
    """Clients of a proxy point not held at the backend, by Little's law:
    connections minus req/s times the backend's mean delay (at most the
    connections, at least 0)."""
    mean_s = sum(slow_backend.DELAY_MS) / 2 / 1000
    if point["rps"]["median"] is None:
        return None
    return min(point["concurrency"],
               max(0.0, point["concurrency"]
                   - point["rps"]["median"] * mean_s))


def table(points):
    """One workload's table."""
    large = points[0]["workload"] in LARGE_SIZES
    proxy = points[0]["workload"] in PROXY_KINDS
    rows = []
    for p in points:
        failed = p["runs"] - p["ok_runs"]
        label = p["label"] + (f" ({failed} of {p['runs']} runs failed)"
                              if failed else "")
        rate = _fmt(p["rps"]["median"]) if not large else \
            _fmt(p["mb_per_s"], 0)
        rows.append([label, rate, _cell_ratio(p, "prefork"),
                     _cell_ratio(p, "event"),
                     _fmt(p["latency_ms"]["p50"], 2),
                     _fmt(p["latency_ms"]["p99"], 2), _errors(p),
                     _fmt(p["server_cpu_s_per_1k"], 3) if not large else
                     _fmt(p["server_cpu_ms_per_mb"], 3)]
                    + ([_fmt(waiting(p))] if proxy else []))
    return markdown.table(
        ["Configuration", "MB/s" if large else "req/s",
         "vs stock prefork (per round)", "vs stock event (per round)",
         "p50 ms", "p99 ms", "errors",
         "server CPU ms/MB" if large else "server CPU ms/req"]
        + (["clients waiting (c − req/s × 30 ms)"] if proxy else []), rows)


def annotate(points, records):
    """Adds each large-file point's bytes figures (medians of runs), each
    tls-resume point's count of connections not resumed."""
    for point in points:
        runs = [r for r in records if r["ok"]
                and r["workload"] == point["workload"]
                and r["server"] == point["server"]
                and r["kernel_level"] == point["kernel_level"]]
        if point["workload"] == "tls-resume":
            point["not_resumed"] = sum(r["not_resumed"] for r in runs)
        if point["workload"] in H2_STREAMS:
            point["protocols"] = sorted({r.get("protocol") or "not recorded"
                                         for r in runs})
        if point["workload"] not in LARGE_SIZES:
            continue
        point["mb_per_s"] = stats.median(
            [r["bytes_per_s"] / 2 ** 20 for r in runs])
        point["server_cpu_ms_per_mb"] = stats.median(
            [r["server_cpu_s"] * 1000 / (r["bytes"] / 2 ** 20)
             for r in runs if r["bytes"]])


def groups(points, options):
    for name in options["workloads"]:
        if not WORKLOADS[name].users:
            continue
        group = [p for p in points if p["workload"] == name]
        if group:
            yield name, group


def section(points, options, heading="##",
            title="Workloads users serve side by side", plots=None):
    """The users section: per workload its table and plot."""
    found = list(groups(points, options))
    if not found:
        return ""
    lines = [f"{heading} {title}", "",
             "Medians of the runs; ratios are medians of same-round "
             "ratios (each round's figure listed). Server CPU per request "
             "(per MB for the large files) is the server's process tree's "
             "CPU time over the run divided by what it served. "
             "tls-resume has no latencies (openssl s_time reports none).",
             ""]
    for name, group in found:
        lines += [f"{heading}# {name}: {WORKLOADS[name].title}, "
                  f"{WORKLOADS[name].users_concurrency} connections", "",
                  table(group), ""]
        resumed = [p for p in group if "not_resumed" in p]
        if resumed:
            lines += ["Connections not resumed: " + ", ".join(
                f"{p['label']}: {p['not_resumed']:,}" for p in resumed), ""]
        negotiated = [p for p in group if p.get("protocols")]
        if negotiated:
            lines += ["Protocol h2load negotiated (ALPN): " + "; ".join(
                f"{p['label']}: {', '.join(p['protocols'])}"
                for p in negotiated), ""]
        if plots and plots.get(name):
            lines += [f"![{name}]({plots[name]})", ""]
    return "\n".join(lines)


def plot(path, group, name):
    """A bar chart of one workload: req/s (MB/s) with min-max, p99."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    large = name in LARGE_SIZES
    labels = [p["server"] for p in group]
    scale = (lambda p, v: v * p["mb_per_s"] / p["rps"]["median"]
             if p["rps"]["median"] else 0) if large else (lambda p, v: v)
    medians = [scale(p, p["rps"]["median"] or 0) for p in group]
    low = [m - scale(p, p["rps"]["min"] or 0)
           for m, p in zip(medians, group)]
    high = [scale(p, p["rps"]["max"] or 0) - m
            for m, p in zip(medians, group)]
    figure, (rate_axis, p99_axis) = plt.subplots(1, 2, figsize=(12, 4.6))
    positions = range(len(group))
    rate_axis.bar(positions, medians, yerr=[low, high], capsize=4)
    rate_axis.set_ylabel(("MB/s" if large else "requests/s")
                         + " (median, bars: min-max)")
    p99_axis.bar(positions, [p["latency_ms"]["p99"] or 0 for p in group])
    p99_axis.set_ylabel("p99 latency, ms (median of runs; 0: n/a)")
    for axis in (rate_axis, p99_axis):
        axis.set_xticks(list(positions))
        axis.set_xticklabels(labels, fontsize=8)
        axis.grid(True, axis="y", alpha=0.3)
    figure.suptitle(f"{name}: {WORKLOADS[name].title}", fontsize=9)
    figure.tight_layout(rect=(0, 0, 1, 0.94))
    figure.savefig(path, dpi=90)
    plt.close(figure)


def headline(points, options, server="bucketed-event", baseline="event"):
    """The workloads users serve, for the results tables: the median over
    the workloads of server's same-round req/s ratio against baseline,
    and the range over the workloads."""
    medians = {p["workload"]: p["ratios"][baseline]["median"]
               for p in points if p["server"] == server
               and (p["ratios"].get(baseline) or {}).get("median")}
    if not medians:
        return f"no workload with {server} and {baseline}"
    low = min(medians, key=medians.get)
    high = max(medians, key=medians.get)
    return (f"{SHORT_NAMES[server]} / {SHORT_NAMES[baseline]} req/s over "
            f"{len(medians)} workloads: median "
            f"{stats.median(list(medians.values())):.2f}x ({low} "
            f"{medians[low]:.2f}x to {high} {medians[high]:.2f}x)")
