# SPDX-License-Identifier: Apache-2.0
"""What can be benchmarked: the server configurations, the workloads and the
kernel feature levels, by the names the command line and the reports use."""

from dataclasses import dataclass, field

NATIVE = "native"
NO_REUSEPORT = "no-reuseport"

KERNEL_LEVELS = {
    NATIVE: "this machine's kernel as it is",
    NO_REUSEPORT: "emulated kernel before 3.9: LD_PRELOAD shim "
                  "bench/noreuseport.so makes setsockopt(SO_REUSEPORT) fail "
                  "with ENOPROTOOPT in every server",
}


# What a workload requests: the small static file, or the slow handler (a
# mod_lua page that sleeps, see configs.py), which holds a process per
# request for its whole duration.
STATIC = "static"
SLOW = "slow"
# Issue 10's workloads: a small PHP page under Debian's mod_php; and the
# static file with one request in MIXED_SLOW_EVERY sent to the slow handler
# instead (chosen per request by wrk's script, see load.py), so that some
# children are held while the rest serve the fast page.
PHP = "php"
MIXED = "mixed"
MIXED_SLOW_EVERY = 20
# The handlers that need the slow handler (mod_lua) in the server.
USES_SLOW_HANDLER = (SLOW, MIXED)

# Issue 18's faults (faults.py runs them): the kinds, and the numbers their
# titles quote.
CRASH = "crash"
HANG = "hang"
EMFILE = "emfile"
CRASH_EXIT = "crash-exit"
EMFILE_BUCKET = "emfile-bucket"
FAULT_KINDS = (CRASH, HANG, EMFILE, CRASH_EXIT, EMFILE_BUCKET)
# The EMFILE spells (both need two Listens, see the workloads below).
EMFILE_KINDS = (EMFILE, EMFILE_BUCKET)
FAULT_BUCKETS = 4            # bucketed's BucketCount in the faults
CRASH_RATE = 4               # /crash requests a second
CRASH_EXIT_MCPC = 20         # MaxConnectionsPerChild of crash-exit
FAULT_TITLES = {
    CRASH: f"crash: a module segfaults its child on {CRASH_RATE} requests "
           f"a second",
    HANG: f"hang: every child of one of {FAULT_BUCKETS} buckets SIGSTOPped "
          f"under a Connection: close load (stock: a quarter of its "
          f"children)",
    EMFILE: "emfile: new children cannot set up (EMFILE) for a spell, one "
            "child per bucket killed",
    CRASH_EXIT: f"crash-exit: every exiting child segfaults, "
                f"MaxConnectionsPerChild {CRASH_EXIT_MCPC}",
    EMFILE_BUCKET: f"emfile-bucket: new children cannot set up (EMFILE) "
                   f"for a spell, every child of one of {FAULT_BUCKETS} "
                   f"buckets killed at its start (stock: a quarter of its "
                   f"children)",
}

# Issue 25's near-the-limit workloads (limit.py runs them, as faults: a
# condition held while probes measure what a new client meets): keep-alive
# clients that pause between requests hold all but one of MaxRequestWorkers
# LIMIT_WORKERS, with bucketed at each of these bucket counts.
LIMIT_WORKERS = 20
NEAR_LIMIT_B2 = "near-limit-b2"
NEAR_LIMIT_B4 = "near-limit-b4"
LIMIT_BUCKETS = {NEAR_LIMIT_B2: 2, NEAR_LIMIT_B4: 4}
LIMIT_KINDS = tuple(LIMIT_BUCKETS)
FAULT_TITLES.update({
    kind: f"at MaxRequestWorkers {LIMIT_WORKERS}: {LIMIT_WORKERS - 1} "
          f"keep-alive clients that pause between requests, new-connection "
          f"probes; bucketed with BucketCount {count}"
    for kind, count in LIMIT_BUCKETS.items()})

# Issue 24's full restarts (restart.py runs them): how a server stops and
# starts, and how its rows say it.
RESTART_OWN = "unheld"
RESTART_HELD = "held"
RESTART_SWAP = "swap"
# Issue 39: the graceful restart (httpd's SIGUSR1, nginx's reload by
# SIGHUP), with bucketed's plan changed at every other one or with the
# configuration unchanged (the same restarts without the plan change), and
# the soak (soak.py), which holds its sockets as RESTART_HELD does. A
# variant's name is one word: it ends a server's name after a dash.
RESTART_GRACEFUL = "graceful"
RESTART_GRACEFUL_UNCHANGED = "unchanged"
RESTART_SOAK = "soak"
RESTART_VARIANTS = {
    RESTART_OWN: "stop + start binding its own sockets (control)",
    RESTART_HELD: "sockets held (systemd-style), stop + start",
    RESTART_SWAP: "sockets held, module file replaced by another build "
                  "between stop and start",
    RESTART_GRACEFUL: "graceful restarts (SIGUSR1), BucketCount changed at "
                      "every other one",
    RESTART_GRACEFUL_UNCHANGED: "graceful restarts (SIGUSR1), the "
                                "configuration unchanged",
    RESTART_SOAK: "the soak, sockets held",
}
# What a stock server's graceful restart is (RESTART_GRACEFUL), by kind.
STOCK_GRACEFUL = {"httpd": "graceful restart (SIGUSR1)",
                  "nginx": "reload (SIGHUP)"}

# The skewed workloads fix wrk's threads at 10, so that each thread (and its
# share of the connections) is 10 % of the load: 90/10 is then 9 threads on
# one port and 1 on the other.
SKEW_THREADS = 10


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    listen_count: int        # Listen statements (ports) the servers get
    keep_alive: bool         # False: every request on a new connection
    # Percent of wrk's threads, so of the connections, on each port.
    split: tuple = (100,)
    handler: str = STATIC
    wrk_threads: int = 0     # fixed thread count; 0: --threads
    # Same-round req/s ratio against stock prefork that bucketed must keep
    # (issue 8), or None where no target was set.
    target_vs_prefork: float = None
    # Holds --idle-connections idle keep-alive connections open beside the
    # active load (issue 9; see idle.py).
    idle: bool = False
    # A fault injected while probes measure what clients meet (issue 18;
    # see faults.py): one of faults.FAULT_KINDS, or "".
    fault: str = ""
    # A restart workload (issue 24): bucketed's variants (RESTART_*) beside
    # the stock servers' stop + start; () for the others.
    restart_variants: tuple = ()
    # A workload users serve (issue 26; see users.py): one of
    # users.KINDS, or "". It fixes its own load (users_concurrency
    # connections, not --concurrency).
    users: str = ""
    users_concurrency: int = 0
    # How the stock servers of a restart workload restart (RESTART_OWN or
    # RESTART_GRACEFUL).
    stock_restart: str = RESTART_OWN
    # Issue 39: beside wrk's Connection: close load, keep-alive clients
    # that count every GET and POST they lose (clients.KeepAliveClients).
    counted: bool = False
    # The soak (soak.py; a restart workload of variant RESTART_SOAK).
    soak: bool = False

    @property
    def restart(self):
        return bool(self.restart_variants)

    @property
    def skewed(self):
        return self.name in WORKLOAD_GROUPS["skew"]


def _skew(name, split, handler, what, target=1.0):
    document = "the static file" if handler == STATIC \
        else "the slow handler"
    return Workload(name, f"two Listen ports, {what}, {document}, "
                          f"Connection: close", listen_count=2,
                    keep_alive=False, split=split, handler=handler,
                    wrk_threads=SKEW_THREADS, target_vs_prefork=target)


WORKLOADS = {workload.name: workload for workload in (
    Workload("w1", "one Listen, Connection: close (accept path)",
             listen_count=1, keep_alive=False),
    Workload("w2", "two Listen ports, load split evenly, Connection: close",
             listen_count=2, keep_alive=False, split=(50, 50)),
    Workload("w3", "one Listen, keep-alive", listen_count=1,
             keep_alive=True),
    _skew("skew-all-static", (100, 0), STATIC, "all load on one"),
    _skew("skew-90-static", (90, 10), STATIC, "load split 90/10"),
    # The even split must keep what buckets buy (W2's gain).
    _skew("skew-even-static", (50, 50), STATIC, "load split evenly",
          target=1.5),
    _skew("skew-all-slow", (100, 0), SLOW, "all load on one"),
    _skew("skew-90-slow", (90, 10), SLOW, "load split 90/10"),
    _skew("skew-even-slow", (50, 50), SLOW, "load split evenly"),
    Workload("php", "one Listen, a small PHP page under mod_php, "
             "Connection: close", listen_count=1, keep_alive=False,
             handler=PHP),
    Workload("w1-slow5", f"one Listen, Connection: close, the static file "
             f"but 1 request in {MIXED_SLOW_EVERY} "
             f"({100 // MIXED_SLOW_EVERY} %) to the slow handler",
             listen_count=1, keep_alive=False, handler=MIXED),
    Workload("idle", "one Listen, idle keep-alive connections held open "
             "beside an active keep-alive load", listen_count=1,
             keep_alive=True, idle=True),
    # Two Listens for emfile: a bucketed prefork-model child then waits in
    # epoll, so it sets up an epoll set as every other child does.
    *(Workload(f"fault-{kind}", FAULT_TITLES[kind],
               listen_count=2 if kind in EMFILE_KINDS else 1,
               keep_alive=False,
               fault=kind) for kind in FAULT_KINDS),
    *(Workload(kind, FAULT_TITLES[kind], listen_count=1, keep_alive=True,
               fault=kind) for kind in LIMIT_KINDS),
    # Full restarts under load. The module swap and the control ride on
    # the Connection: close load, where every request needs an accept.
    Workload("restart-close", "full restarts (graceful-stop + start) "
             "under a Connection: close load", listen_count=1,
             keep_alive=False,
             restart_variants=(RESTART_HELD, RESTART_SWAP, RESTART_OWN)),
    Workload("restart-keepalive", "full restarts (graceful-stop + start) "
             "under a keep-alive load", listen_count=1, keep_alive=True,
             restart_variants=(RESTART_HELD,)),
    # Issue 39: what every kind of client loses, bucketed's full restarts
    # and graceful restarts beside stock prefork's and stock event's
    # graceful restarts and nginx's reload.
    Workload("restart-full", "full restarts with held sockets (graceful-"
             "stop + start) under a Connection: close load and keep-alive "
             "GETs and POSTs; stock prefork, stock event and nginx restart "
             "gracefully",
             listen_count=1, keep_alive=False,
             restart_variants=(RESTART_HELD,),
             stock_restart=RESTART_GRACEFUL, counted=True),
    # bucketed's rows say which of its graceful variants they are.
    Workload("restart-graceful", "graceful restarts under a Connection: "
             "close load and keep-alive GETs and POSTs", listen_count=1,
             keep_alive=False,
             restart_variants=(RESTART_GRACEFUL_UNCHANGED, RESTART_GRACEFUL),
             stock_restart=RESTART_GRACEFUL, counted=True),
    Workload("soak", "the soak: Connection: close and keep-alive load, "
             "graceful restarts, full restarts on held sockets, Listen "
             "added and removed, MaxConnectionsPerChild churn, children "
             "killed", listen_count=1, keep_alive=False,
             restart_variants=(RESTART_SOAK,), counted=True, soak=True),
)}

# Issue 26's workloads users serve (users.py): (name, title, keep-alive,
# connections of its load). php-mod is the php workload's page at their
# servers and load (mod_php: the prefork models only).
USERS_WORKLOADS = (
    ("tls-handshake", "HTTPS, TLS 1.3 ECDSA P-256, a full handshake per "
     "connection (Connection: close)", False, 200),
    ("tls-resume", "HTTPS, TLS 1.3, every connection resumes a session "
     "(openssl s_time -reuse processes)", False, 16),
    ("tls-keepalive", "HTTPS, TLS 1.3, keep-alive", True, 200),
    ("h2-streams", "HTTP/2 over TLS, h2load: 10 connections x 100 "
     "streams", True, 10),
    ("h2-conns", "HTTP/2 over TLS, h2load: 100 connections x 10 streams",
     True, 100),
    ("large-1m", "a 1 MB static file, keep-alive, sendfile", True, 50),
    ("large-100m", "a 100 MB static file, keep-alive, sendfile", True, 8),
    ("proxy-default", "reverse proxy to a local backend answering after "
     "10-50 ms, the servers' default limits, Connection: close", False,
     600),
    ("proxy-tuned", "reverse proxy to a local backend answering after "
     "10-50 ms, the harness's limits (--slots), Connection: close", False,
     600),
    ("php-fpm", "a small PHP page through php-fpm (FastCGI, "
     "mod_proxy_fcgi; nginx fastcgi_pass), Connection: close", False, 50),
    ("php-mod", "a small PHP page under mod_php, Connection: close", False,
     50),
)
WORKLOADS.update((name, Workload(name, title, listen_count=1,
                                 keep_alive=keep_alive,
                                 handler=PHP if name == "php-mod"
                                 else STATIC, users=name,
                                 users_concurrency=connections))
                 for name, title, keep_alive, connections
                 in USERS_WORKLOADS)

# Names that stand for several workloads on the command line.
WORKLOAD_GROUPS = {
    "skew": ("skew-all-static", "skew-90-static", "skew-even-static",
             "skew-all-slow", "skew-90-slow", "skew-even-slow"),
    "faults": tuple(f"fault-{kind}" for kind in FAULT_KINDS),
    "restart": ("restart-full", "restart-graceful"),
    "restart-wrk": ("restart-close", "restart-keepalive"),
    "near-limit": LIMIT_KINDS,
    "users": tuple(name for name, *_ in USERS_WORKLOADS),
}
# What runs when --workloads is not given (the skewed and idle ones on
# request).
DEFAULT_WORKLOADS = ("w1", "w2", "w3")


@dataclass(frozen=True)
class ServerSpec:
    name: str
    label: str
    kind: str                      # "httpd" or "nginx"
    mpm: str = ""                  # prefork, event or bucketed for httpd
    directives: tuple = ()         # extra httpd directives
    # Kernel levels where this row means nothing, with the reason shown.
    not_applicable: dict = field(default_factory=dict)
    # What it can serve (STATIC, SLOW).
    handlers: tuple = (STATIC, SLOW)
    # bucketed's ChildModel; "" for the stock MPMs and nginx.
    child_model: str = ""
    # How it restarts in a restart workload (RESTART_*; set by
    # restart.expand), "" elsewhere.
    restart: str = ""
    # Its restart workload's counting keep-alive clients run beside wrk
    # (Workload.counted; set by restart.expand).
    counted: bool = False

    @property
    def one_connection_per_process(self):
        """prefork's model: a process holds its connection, idle or not."""
        return self.mpm == "prefork" or (self.mpm == "bucketed"
                                         and self.child_model != "event")


SERVERS = {spec.name: spec for spec in (
    ServerSpec("prefork", "stock prefork", "httpd", "prefork"),
    ServerSpec("prefork-lcbr1", "stock prefork, ListenCoresBucketsRatio 1",
               "httpd", "prefork", ("ListenCoresBucketsRatio 1",)),
    ServerSpec("event", "stock event", "httpd", "event"),
    ServerSpec("event-lcbr1", "stock event, ListenCoresBucketsRatio 1",
               "httpd", "event", ("ListenCoresBucketsRatio 1",)),
    ServerSpec("bucketed-reuseport", "bucketed, BucketStrategy reuseport",
               "httpd", "bucketed",
               ("BucketStrategy reuseport", "BucketCount auto"),
               {NO_REUSEPORT: "BucketStrategy reuseport refuses to start "
                              "without SO_REUSEPORT; bucketed-auto shows "
                              "the fallback at this level"}),
    ServerSpec("bucketed-listen", "bucketed, BucketStrategy listen",
               "httpd", "bucketed",
               ("BucketStrategy listen", "BucketCount auto")),
    ServerSpec("bucketed-single", "bucketed, BucketStrategy single",
               "httpd", "bucketed",
               ("BucketStrategy single", "BucketCount auto")),
    ServerSpec("bucketed-event", "bucketed, ChildModel event, "
               "BucketStrategy auto", "httpd", "bucketed",
               ("BucketStrategy auto", "BucketCount auto"),
               child_model="event"),
    # The event model with one bucket, beside auto's two on 2 CPUs
    # (issue 25 item 3: do idle keep-alive connections pack the active
    # ones into fewer children when they are split into buckets?).
    ServerSpec("bucketed-event-b1", "bucketed, ChildModel event, "
               "BucketStrategy auto, BucketCount 1", "httpd", "bucketed",
               ("BucketStrategy auto", "BucketCount 1"),
               child_model="event"),
    # The event model with its buckets' children left free to move between
    # CPUs, beside bucketed-event, where BucketAffinity auto keeps them on
    # their bucket's CPUs (issue 26: the tails that migrations cost).
    ServerSpec("bucketed-event-free", "bucketed, ChildModel event, "
               "BucketAffinity off", "httpd", "bucketed",
               ("BucketStrategy auto", "BucketCount auto",
                "BucketAffinity off"),
               child_model="event"),
    ServerSpec("bucketed-auto", "bucketed, BucketStrategy auto",
               "httpd", "bucketed",
               ("BucketStrategy auto", "BucketCount auto"),
               {NATIVE: "with SO_REUSEPORT, auto picks reuseport: same as "
                        "the bucketed-reuseport row"}),
    *(ServerSpec(f"bucketed-{mode}", f"bucketed, BucketStrategy reuseport, "
                 f"BucketSteering {mode}", "httpd", "bucketed",
                 ("BucketStrategy reuseport", "BucketCount auto",
                  f"BucketSteering {mode}"),
                 {NO_REUSEPORT: f"BucketSteering {mode} steers a reuseport "
                                f"group with an eBPF SK_REUSEPORT program; "
                                f"without SO_REUSEPORT there is no group "
                                f"(and BucketStrategy reuseport refuses to "
                                f"start)"})
      for mode in ("hash", "cpu", "load")),
    ServerSpec("nginx", "nginx, listen reuseport (reference ceiling)",
               "nginx", handlers=(STATIC,)),
)}

# Baselines for the run-by-run ratios.
RATIO_BASELINES = ("prefork", "event")
# What the results tables (publication.py) call the servers they compare.
SHORT_NAMES = {"prefork": "stock prefork", "event": "stock event",
               "bucketed-reuseport": "prefork model",
               "bucketed-event": "event model", "nginx": "nginx"}


def base_server(name):
    """The catalog's server a (restart variant's) server name stands for:
    bucketed-event-held is bucketed-event."""
    base, _, variant = name.rpartition("-")
    return base if base in SERVERS and variant in RESTART_VARIANTS \
        else name
# The servers a workload's target_vs_prefork is meant for: bucketed as
# configured in practice. bucketed-single (one bucket, stock prefork's
# arrangement) is shown as a reference, not judged.
TARGET_SERVERS = ("bucketed-reuseport", "bucketed-listen", "bucketed-auto",
                  "bucketed-event")
# The idle workload's targets (issue 9): these servers' active-load p99 and
# memory per idle connection at most the baseline's.
IDLE_BASELINE = "event"
IDLE_TARGET_SERVERS = ("bucketed-event",)
# Why a server that cannot serve a handler is left out of its workloads.
HANDLER_NOT_SUPPORTED = {
    SLOW: "the slow handler is an httpd module (mod_lua); nginx has no "
          "equivalent without third-party modules",
}


# Why a server is left out of the PHP workload.
PHP_NOT_SUPPORTED = {
    "threaded": "mod_php needs a non-threaded MPM",
    "nginx": "mod_php is an httpd module; nginx runs PHP only through "
             "PHP-FPM (FastCGI), another architecture, not measured here",
}


def _threaded(spec):
    return spec.mpm == "event" or spec.child_model == "event"


def handler_skip_reason(spec, handler):
    """Why the server described by spec cannot serve what a workload of
    this handler requests, or None when it can."""
    if handler == PHP:
        if spec.kind == "nginx":
            return PHP_NOT_SUPPORTED["nginx"]
        return PHP_NOT_SUPPORTED["threaded"] if _threaded(spec) else None
    needed = SLOW if handler == MIXED else handler
    if needed in spec.handlers:
        return None
    return HANDLER_NOT_SUPPORTED.get(needed, f"cannot serve {handler}")


# Why a prefork-model server is left out of the idle workload.
IDLE_NOT_SUPPORTED = (
    "one connection per process: its request slots (--slots, 1,024 by "
    "default) cannot hold --idle-connections idle keep-alive connections "
    "(10,000 by default) beside the active load; the rest would wait in the "
    "listen backlog")


# The servers of the faults workloads (and of near-limit, which probes as
# they do): the stock anchors and bucketed in both child models. The others (ListenCoresBucketsRatio, other
# strategies and steerings) add nothing to what a fault shows, and nginx
# cannot load the fault module.
FAULT_SERVERS = ("prefork", "event", "bucketed-reuseport", "bucketed-event")
FAULT_NOT_SUPPORTED = (
    "the faults and near-limit workloads run stock prefork and event and "
    "bucketed in both "
    "child models (" + ", ".join(FAULT_SERVERS) + ") only")


# The servers of the restart workloads: as the faults', for the same
# reasons; each bucketed one runs in every variant of the workload.
RESTART_SERVERS = FAULT_SERVERS
RESTART_NOT_SUPPORTED = (
    "the restart workloads run stock prefork and event and bucketed in "
    "both child models (" + ", ".join(RESTART_SERVERS) + ") only")


# Issue 39's restart workloads: bucketed in both child models beside the
# anchors that restart gracefully, stock prefork (the prefork model's),
# stock event and nginx; the soak runs bucketed only.
COUNTED_RESTART_SERVERS = ("prefork", "event", "bucketed-reuseport",
                           "bucketed-event", "nginx")
COUNTED_RESTART_NOT_SUPPORTED = (
    "the restart workloads with counting clients run bucketed in both "
    "child models beside stock prefork, stock event and nginx ("
    + ", ".join(COUNTED_RESTART_SERVERS) + ") only")
SOAK_SERVERS = ("bucketed-reuseport", "bucketed-event")
# The soak's children each serve this many connections, then exit (the
# churn).
SOAK_MAX_CONNECTIONS_PER_CHILD = 500
SOAK_NOT_SUPPORTED = ("the soak runs bucketed in both child models ("
                      + ", ".join(SOAK_SERVERS) + ") only")


# The servers of the workloads users serve: the stock anchors, bucketed
# in both child models, and nginx.
USERS_SERVERS = FAULT_SERVERS + ("nginx",)
USERS_NOT_SUPPORTED = (
    "the workloads users serve run stock prefork and event, bucketed in "
    "both child models and nginx (" + ", ".join(USERS_SERVERS) + ") only")


def unsupported_reason(spec, workload):
    """Why a server sits a workload out, or None when it runs it."""
    if workload.users and spec.name not in USERS_SERVERS:
        return USERS_NOT_SUPPORTED
    if workload.fault and spec.name not in FAULT_SERVERS:
        return FAULT_NOT_SUPPORTED
    if workload.soak:
        return None if spec.name in SOAK_SERVERS else SOAK_NOT_SUPPORTED
    if workload.counted:
        return None if spec.name in COUNTED_RESTART_SERVERS \
            else COUNTED_RESTART_NOT_SUPPORTED
    if workload.restart and spec.name not in RESTART_SERVERS:
        return RESTART_NOT_SUPPORTED
    reason = handler_skip_reason(spec, workload.handler)
    if reason:
        return reason
    if workload.idle and spec.one_connection_per_process:
        return IDLE_NOT_SUPPORTED
    return None


def server_label(spec, level):
    """nginx cannot use reuseport where the kernel lacks it; say so."""
    if spec.kind == "nginx" and level == NO_REUSEPORT:
        return "nginx, shared listen socket (no reuseport)"
    return spec.label
