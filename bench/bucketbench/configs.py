# SPDX-License-Identifier: Apache-2.0
"""Configuration text for the servers under test. Pure: paths, ports and
sizes in, text out.

Capacity is matched by request slots (--slots S), the number of requests a
server can work on at once:
- prefork and bucketed: S children, all started up front (StartServers =
  MaxRequestWorkers = ServerLimit = MaxSpareServers = S), so no run waits
  for prefork's one-per-second spawn ramp and idle maintenance never kills
  children between runs.
- event: S threads in S / 32 children of 32 threads, all started up front
  (MaxSpareThreads = S).
- nginx: one worker per core, each with S connection slots, so any single
  worker can hold all S at once: headroom for reuseport's uneven hash split.
All of them: one 15-byte static file, no access log, listen backlog 511,
unlimited keep-alive requests with a 5 s keep-alive timeout. The idle
workload (idle.py) changes three things, alike for every server: a 60 s
keep-alive timeout, AsyncRequestWorkerFactor for the threaded httpd models
(room for the idle connections), and worker_connections for nginx; with
its default limits (--limits default) only the timeout: no capacity
directives at all.

The slow handler (workloads with handler "slow"; httpd only) is a mod_lua
page that sleeps SLOW_HANDLER_MS in the process serving it, as a PHP page
under mod_php would, before answering: it holds a request slot for that
long at almost no CPU cost, so the slots, not the 2 cores, bound what a
server serves. A CGI that sleeps was tried first: on 2 cores its
fork+exec per request made the CPU the limit (350-530 req/s against the
1,280 that 64 slots of 50 ms allow) and hid how slots are shared."""

from .catalog import MIXED, PHP, SLOW
from .net import LOOPBACK

DOC_NAME = "hello.txt"
DOC_BODY = b"Hello, bucket!\n"
STATUS_PATH = "/bucketed-status"
SLOW_NAME = "slow.lua"
SLOW_BODY = b"slow page done\n"
SLOW_HANDLER_MS = 50

# The PHP workload's page (Debian's mod_php): a little PHP work, a
# fixed answer (date() of the epoch in the ini's UTC).
PHP_NAME = "hello.php"
PHP_SOURCE = '<?php echo "hello ", date("Y", 0), "\\n";\n'
PHP_BODY = b"hello 1970\n"
PHP_INI_NAME = "php.ini"
# Written to the environment of an httpd running mod_php: empty, so PHP
# scans no directory of extra .ini files (Debian's /etc/php/*/apache2/conf.d).
PHP_SCAN_DIR_ENV = {"PHP_INI_SCAN_DIR": ""}

EVENT_THREADS_PER_CHILD = 32
# prefork and bucketed keep this many idle children: the fewest slots.
MIN_SPARE_SERVERS = 5
LISTEN_BACKLOG = 511
KEEPALIVE_TIMEOUT_S = 5
# nginx counts its listening sockets and log files against worker_connections
# and the descriptor limit; a few dozen spare covers them.
NGINX_SPARE_DESCRIPTORS = 64


def _quote(path):
    return '"' + path.replace('"', '\\"') + '"'


def _threaded(mpm, child_model):
    return mpm == "event" or child_model == "event"


def httpd_capacity(mpm, slots, child_model="", async_factor=None):
    """The MPM directives that give an httpd `slots` request slots;
    child_model: bucketed's ChildModel ("" for the stock MPMs);
    async_factor: AsyncRequestWorkerFactor of the threaded models (None:
    event's default, 2)."""
    model = [f"ChildModel {child_model}"] if child_model else []
    if _threaded(mpm, child_model):
        children = slots // EVENT_THREADS_PER_CHILD
        factor = [f"AsyncRequestWorkerFactor {async_factor}"] \
            if async_factor is not None else []
        return model + factor + [
            f"ServerLimit {children}",
            f"StartServers {children}",
            f"ThreadLimit {EVENT_THREADS_PER_CHILD}",
            f"ThreadsPerChild {EVENT_THREADS_PER_CHILD}",
            f"MaxRequestWorkers {slots}",
            f"MinSpareThreads {EVENT_THREADS_PER_CHILD}",
            f"MaxSpareThreads {slots}",
            "MaxConnectionsPerChild 0",
        ]
    return model + [
        f"ServerLimit {slots}",
        f"StartServers {slots}",
        f"MaxRequestWorkers {slots}",
        f"MinSpareServers {MIN_SPARE_SERVERS}",
        f"MaxSpareServers {slots}",
        "MaxConnectionsPerChild 0",
    ]


def document(handler):
    """(file name, body) of what a workload of this handler requests (the
    mixed workload: its fast page; see documents())."""
    return documents(handler)[0]


def documents(handler):
    """[(file name, body)] of every page a workload of this handler
    requests, the main one first."""
    if handler == SLOW:
        return [(SLOW_NAME, SLOW_BODY)]
    if handler == PHP:
        return [(PHP_NAME, PHP_BODY)]
    if handler == MIXED:
        return [(DOC_NAME, DOC_BODY), (SLOW_NAME, SLOW_BODY)]
    return [(DOC_NAME, DOC_BODY)]


def slow_handler_script():
    """The slow handler's Lua source: sleep, then a short text answer."""
    body = SLOW_BODY.decode().replace("\n", "\\n")
    return (f"-- Written by bucketbench: the slow handler "
            f"(bench/bucketbench/configs.py).\n"
            f"function handle(r)\n"
            f"    r.usleep({SLOW_HANDLER_MS * 1000})\n"
            f"    r.content_type = \"text/plain\"\n"
            f"    r:puts(\"{body}\")\n"
            f"    return apache2.OK\n"
            f"end\n")


def php_ini(root):
    """The php.ini of an httpd running mod_php, in its ServerRoot (found
    through PHPINIDir, so no machine php.ini is read): errors to a log in
    root, UTC, and opcache (from PHP's own extension directory), which
    Debian's package enables by default and PHP users run."""
    return "\n".join([
        "; Written by bucketbench (bench/bucketbench/configs.py).",
        "engine = On",
        "date.timezone = UTC",
        "expose_php = Off",
        "display_errors = Off",
        "log_errors = On",
        f"error_log = {_quote(root + '/php_error_log')}",
        "zend_extension = opcache",
        "opcache.enable = 1",
    ]) + "\n"


def php_lines(root):
    """httpd directives that run .php files with mod_php, its php.ini from
    root (PHPINIDir: the only place the module then looks)."""
    return [f"PHPINIDir {_quote(root)}",
            '<FilesMatch "\\.php$">',
            "    SetHandler application/x-httpd-php",
            "</FilesMatch>"]


# StartServers of the MPMs' defaults: prefork (and bucketed's prefork
# model) 5, event (and bucketed's event model) 3.
DEFAULT_START_SERVERS = {"prefork": 5, "event": 3}


def httpd_processes(mpm, slots, child_model="", capacity=True):
    """Processes an httpd runs once started: the parent and its children
    (capacity False: with the MPM's default limits)."""
    if not capacity:
        model = "event" if _threaded(mpm, child_model) else "prefork"
        return 1 + DEFAULT_START_SERVERS[model]
    if _threaded(mpm, child_model):
        return 1 + slots // EVENT_THREADS_PER_CHILD
    return 1 + slots


def httpd_config(*, root, docroot, ports, mpm, mpm_module, module_paths,
                 slots, directives=(), status_module=None, run_as=None,
                 slow_handler=False, child_model="",
                 keepalive_timeout_s=KEEPALIVE_TIMEOUT_S, async_factor=None,
                 php=False, capacity=True, host=LOOPBACK):
    """httpd.conf for one server, listening on host (loopback, or the
    server address of --net veth).

    root: the server's private directory (ServerRoot, logs, pid, runtime);
    mpm_module: path of the MPM's .so; module_paths: name -> .so path of the
    other modules (authz_core, mime, and lua with slow_handler);
    status_module: path of mod_bucketed_status.so, or None; run_as: (user,
    group) when started as root, which httpd then switches its children to;
    slow_handler: serve SLOW_NAME in the document root as a Lua handler;
    async_factor: see httpd_capacity (the idle workload sets it);
    php: run .php files with mod_php (module_paths must hold "php");
    capacity: False leaves the MPM's default limits (the faults
    workloads), slots unused."""
    lines = [
        f"ServerRoot {_quote(root)}",
        f"DefaultRuntimeDir {_quote(root + '/run')}",
        f"PidFile {_quote(root + '/httpd.pid')}",
        f"ErrorLog {_quote(root + '/error_log')}",
        "LogLevel warn",
        f"ServerName {host}",
    ]
    if run_as:
        lines += [f"User {run_as[0]}", f"Group {run_as[1]}"]
    mpm_symbol = f"mpm_{mpm}_module"
    lines.append(f"LoadModule {mpm_symbol} {_quote(mpm_module)}")
    for name, path in sorted(module_paths.items()):
        lines.append(f"LoadModule {name}_module {_quote(path)}")
    if status_module:
        lines.append(f"LoadModule bucketed_status_module "
                     f"{_quote(status_module)}")
    lines += [f"Listen {host}:{port}" for port in ports]
    lines += [
        f"ListenBacklog {LISTEN_BACKLOG}",
        f"TypesConfig {_quote(root + '/mime.types')}",
        "KeepAlive On",
        "MaxKeepAliveRequests 0",
        f"KeepAliveTimeout {keepalive_timeout_s}",
        f"DocumentRoot {_quote(docroot)}",
        f"<Directory {_quote(docroot)}>",
        "    Require all granted",
        "</Directory>",
    ]
    if slow_handler:
        # One Lua state per process, kept across requests.
        lines += ["LuaScope server",
                  f"<Files {_quote(SLOW_NAME)}>",
                  "    SetHandler lua-script",
                  "</Files>"]
    if php:
        lines += php_lines(root)
    if capacity:
        lines += httpd_capacity(mpm, slots, child_model, async_factor)
    elif child_model:
        lines.append(f"ChildModel {child_model}")
    lines += list(directives)
    if status_module:
        lines += [f"<Location {STATUS_PATH}>",
                  "    SetHandler bucketed-status",
                  "</Location>"]
    return "\n".join(lines) + "\n"


MIME_TYPES = "text/plain txt\n"


def nginx_config(*, root, docroot, ports, slots, workers, reuseport,
                 run_as=None, idle_connections=0,
                 keepalive_timeout_s=KEEPALIVE_TIMEOUT_S,
                 default_limits=False, host=LOOPBACK):
    """nginx.conf for one server, run with `nginx -p root -c this`.
    reuseport: give each worker its own socket per port (needs
    SO_REUSEPORT); otherwise all workers share one socket per port.
    idle_connections: more connection slots per worker, so that any one
    worker can hold the idle workload's connections besides its slots.
    default_limits: no worker_connections or worker_rlimit_nofile (nginx's
    built-in 512 connections per worker; slots and idle_connections
    unused), as httpd gets no capacity directives then. host: the address
    it listens on."""
    connections = slots + idle_connections + NGINX_SPARE_DESCRIPTORS
    limits = "" if default_limits else (
        f"worker_rlimit_nofile {connections};\n")
    events = "" if default_limits else (
        f"    worker_connections {connections};\n")
    listen_flags = f" reuseport backlog={LISTEN_BACKLOG}" if reuseport \
        else f" backlog={LISTEN_BACKLOG}"
    listens = "\n".join(f"        listen {host}:{port}{listen_flags};"
                        for port in ports)
    user = f"user {run_as[0]} {run_as[1]};\n" if run_as else ""
    return f"""{user}daemon off;
master_process on;
worker_processes {workers};
{limits}pid {root}/nginx.pid;
error_log {root}/error_log warn;
events {{
{events}}}
http {{
    access_log off;
    types {{ text/plain txt; }}
    default_type text/plain;
    keepalive_timeout {keepalive_timeout_s}s;
    keepalive_requests 1000000000;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    server {{
{listens}
        root {docroot};
    }}
}}
"""


def nginx_processes(workers):
    return 1 + workers
