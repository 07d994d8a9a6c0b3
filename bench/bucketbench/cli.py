# SPDX-License-Identifier: Apache-2.0
"""bench/run (python3 -m bucketbench): the command line. Checks everything
it can before any load is sent (names, tools, ports, the shim), then runs
the plan and writes the results directory. `bench/run memory` runs the
memory checks of memory.py instead."""

import argparse
import atexit
import dataclasses
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time

from . import (cores, environment, faults, idle, load, memory, netns,
               overhead, placement, publication, report, restart, soak,
               users)
from .catalog import (DEFAULT_WORKLOADS, IDLE_NOT_SUPPORTED, KERNEL_LEVELS,
                      NATIVE, NO_REUSEPORT, PHP, SERVERS,
                      USES_SLOW_HANDLER, WORKLOAD_GROUPS, WORKLOADS, handler_skip_reason,
                      unsupported_reason)
from .configs import EVENT_THREADS_PER_CHILD, MIN_SPARE_SERVERS
from .net import Timeout, port_is_free
from .runner import Plan, Progress, Runner
from .server import ServerError
from .shim import ShimError, ensure_shim

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(BENCH_DIR)
DEFAULTS = {"concurrency": [50, 400, 1000, 2000], "runs": 5, "duration": 2,
            "warmup": 1, "slots": 1024, "slow_slots": 64,
            "fault_seconds": faults.DEFAULT_FAULT_S}
# --quick checks that everything runs, within 3 minutes; its numbers are
# too short-lived to quote, hence no warm-up either.
QUICK = {"concurrency": [200], "runs": 2, "duration": 1, "warmup": 0,
         "slots": 256, "slow_slots": 64, "fault_seconds": 3}
# The idle workload: connections held idle, and wrk's active connections
# when --concurrency is not given and only idle workloads run.
IDLE_DEFAULTS = {"connections": "10000", "concurrency": [150],
                 "limits": idle.SLOTS_LIMITS}
# wrk's connections in the hang fault when --concurrency is not given and
# only faults workloads run: a load two cores carry beside the probes.
FAULTS_CONCURRENCY = [50]
# The restart workloads' connections when --concurrency is not given and
# only they run (issue 24's c=200).
RESTART_CONCURRENCY = [restart.DEFAULT_CONCURRENCY]
# Issue 39's restart workloads: 3 interleaved rounds of 20 restarts
# (--quick: QUICK's rounds of QUICK_RESTARTS); the soak: one round.
RESTART_RUNS = 3
QUICK_RESTARTS = 4
SOAK_RUNS = 1
MEMORY_DEFAULTS = {"restarts": 100, "requests": 200, "slots": 64}
MEMORY_MAX_SLOTS = 4096
MEMORY_MAX_RESTARTS = 10000


# bench/run's exit status when the plan ran to its end and wrote its
# results, but at least one run failed (a server that did not start, died,
# or gave wrk nothing to measure): those numbers are missing, and a caller
# (the smoke tests, scripts/demo.sh) must not take the report for complete.
# Bad input is 2 (UsageError); a signal, 128 + its number.
RUNS_FAILED = 3


class UsageError(Exception):
    """Bad input: reported with exit status 2 before any load is sent."""


def _names(text, known, what, groups=None):
    """The names in a comma-separated list, each group name replaced by
    the names it stands for."""
    names = []
    for name in (name.strip() for name in text.split(",")):
        for member in (groups or {}).get(name, (name,) if name else ()):
            if member not in names:
                names.append(member)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"unknown {what} {', '.join(unknown)}; known: "
                         f"{', '.join([*known, *(groups or {})])}")
    if not names:
        raise UsageError(f"no {what} given")
    return names


def _numbers(text, what):
    try:
        numbers = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise UsageError(f"{what} must be whole numbers separated by commas, "
                         f"got {text!r}") from None
    if not numbers or min(numbers) < 1:
        raise UsageError(f"{what} must be positive, got {text!r}")
    return numbers


def _whole_numbers_from_zero(text, option):
    """An option's comma-separated whole numbers from 0 up, each once, in
    the given order."""
    try:
        numbers = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise UsageError(f"{option} must be whole numbers separated by "
                         f"commas, got {text!r}") from None
    if not numbers:
        raise UsageError(f"no {option} given")
    if min(numbers) < 0:
        raise UsageError(f"{option} must be at least 0, got {min(numbers)}")
    return list(dict.fromkeys(numbers))


def _idle_counts(text):
    """--idle-connections: whole numbers from 0 up (0: the active load
    alone, the baseline), comma-separated, each once, in the given order."""
    return _whole_numbers_from_zero(text, "--idle-connections")


def _rates(text):
    """--rate: total req/s to pace the idle workload's active load to,
    whole numbers from 0 up, comma-separated, each once, in the given
    order; 0 (not paced) is None in the plan."""
    return [rate or None
            for rate in _whole_numbers_from_zero(text, "--rate")]


def _add_server_options(parser):
    """Where the httpd under test and its modules are (every subcommand)."""
    parser.add_argument("--httpd", default=os.environ.get(
        "HTTPD_BIN", "/usr/sbin/apache2"), help="stock httpd binary")
    parser.add_argument("--modules-dir", default="/usr/lib/apache2/modules",
                        help="stock httpd modules")
    parser.add_argument("--build-dir", default=os.environ.get(
        "BUCKETED_BUILD", REPO_DIR),
        help="where the build left mod_mpm_bucketed.so (env BUCKETED_BUILD)")


def _tools(args, nginx="", wrk=""):
    return environment.Tools(
        httpd=args.httpd, nginx=nginx, wrk=wrk, modules_dir=args.modules_dir,
        bucketed_dir=args.build_dir, shim="", slots=args.slots,
        cores=os.cpu_count(),
        fault_modules=getattr(args, "fault_modules", ""))


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="bench/run",
        description="Benchmarks stock prefork/event, bucketed and nginx "
                    "serving one small static file on loopback.",
        epilog=f"Exit status: 0 when every run was measured; 2 for bad "
               f"input, before any load is sent; {RUNS_FAILED} when the "
               f"results were written but some runs failed (report.md lists "
               f"them under 'Failed runs and restarts'). bench/run memory "
               f"[options]: the memory checks instead (bench/run memory "
               f"--help); bench/run overhead [options]: the cost of the "
               f"metrics. python3 -m bucketbench, run in bench/ or with "
               f"PYTHONPATH=bench, is the same command.")
    parser.add_argument("--quick", action="store_true",
                        help=f"small plan for development, about 3 minutes: "
                             f"{QUICK}")
    parser.add_argument("--list", action="store_true",
                        help="list servers, workloads and kernel levels, "
                             "with what can run here, and exit")
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help="comma-separated server names (default: all)")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated workloads (default: "
                             f"{','.join(DEFAULT_WORKLOADS)}; 'skew' stands "
                             f"for the skewed two-Listen workloads, "
                             f"'faults' for the fault workloads of "
                             f"issue 18, 'users' for the workloads users "
                             f"serve of issue 26)")
    parser.add_argument("--levels",
                        help=f"kernel feature levels (default: both; "
                             f"{NATIVE} when only restart or users workloads "
                             f"run)")
    parser.add_argument("--concurrency",
                        help=f"comma-separated connection counts (default "
                             f"{DEFAULTS['concurrency']})")
    parser.add_argument("--runs", type=int,
                        help=f"runs per point (default {DEFAULTS['runs']})")
    parser.add_argument("--duration", type=int,
                        help=f"seconds per run (default "
                             f"{DEFAULTS['duration']})")
    parser.add_argument("--warmup", type=int,
                        help=f"seconds of warm-up per server start "
                             f"(default {DEFAULTS['warmup']}; 0: none)")
    parser.add_argument("--slots", type=int,
                        help=f"request slots of every server (default "
                             f"{DEFAULTS['slots']}; a multiple of "
                             f"{EVENT_THREADS_PER_CHILD})")
    parser.add_argument("--slow-slots", type=int,
                        help=f"request slots of every server in the slow "
                             f"handler's workloads (default "
                             f"{DEFAULTS['slow_slots']}; a multiple of "
                             f"{EVENT_THREADS_PER_CHILD})")
    parser.add_argument("--idle-connections",
                        default=IDLE_DEFAULTS["connections"],
                        help="idle keep-alive connections the idle workload "
                             "holds open beside its active load, "
                             "comma-separated counts run one after the "
                             "other in every round (default %(default)s; "
                             "0: none, the active load's own baseline; "
                             "needs that many open files, checked against "
                             "ulimit -Hn)")
    parser.add_argument("--limits", default=IDLE_DEFAULTS["limits"],
                        help="the idle workload's server limits, "
                             "comma-separated: "
                             + "; ".join(f"{name}: {text}" for name, text
                                         in idle.LIMITS.items())
                             + " (default %(default)s)")
    parser.add_argument("--rate", default="0",
                        help="the idle workload's active load paced to this "
                             "many requests a second in all (wrk's delay(): "
                             "each thread sends on a fixed schedule), "
                             "comma-separated rates run one after the "
                             "other in every round; 0: not paced, as fast "
                             "as the server answers (default %(default)s)")
    parser.add_argument("--fault-seconds", type=int,
                        help=f"the faults workloads' window: crash and "
                             f"crash-exit last this long, the hang's wrk "
                             f"runs and the EMFILE spell a third of it "
                             f"(default {DEFAULTS['fault_seconds']})")
    parser.add_argument("--fault-modules", metavar="DIR",
                        default=os.path.join(REPO_DIR, "test", "modules"),
                        help="where scripts/build.sh left mod_test_fault.so "
                             "and emfile_shim.so (default: %(default)s)")
    parser.add_argument("--restarts", type=int,
                        help=f"restarts per run of the restart workloads "
                             f"(default {restart.DEFAULT_RESTARTS}; "
                             f"--quick {QUICK_RESTARTS})")
    parser.add_argument("--soak-seconds", type=int,
                        help=f"length of the soak (default "
                             f"{soak.DEFAULT_SOAK_S}; --quick "
                             f"{soak.QUICK_SOAK_S})")
    parser.add_argument("--restart-interval", type=float,
                        default=restart.DEFAULT_INTERVAL_S,
                        help="seconds a restart workload's server serves "
                             "between one restart and the next (default "
                             "%(default)s)")
    parser.add_argument("--restart-stop-timeout", type=float,
                        default=restart.STOP_TIMEOUT_S,
                        help="seconds a restart's graceful-stop may take "
                             "before the parent is terminated (SIGTERM, "
                             "then SIGKILL; the run counts the forced "
                             "stops; default %(default)s)")
    parser.add_argument("--swap-build", metavar="DIR",
                        default=os.environ.get("BUCKETED_SWAP_BUILD"),
                        help="a second build's directory (its "
                             "mod_mpm_bucketed.so): restart-close then also "
                             "runs bucketed with the module file replaced "
                             "between every stop and start, this build and "
                             "--build-dir's in turn (env "
                             "BUCKETED_SWAP_BUILD; without it that variant "
                             "is skipped)")
    parser.add_argument("--server-cpus", metavar="LIST",
                        help="pin every server (its parent, children and "
                             "back-ends) to these CPUs, e.g. 8-31 (taskset "
                             "-c's format; default: not pinned); checked in "
                             "/proc after every start and run")
    parser.add_argument("--client-cpus", metavar="LIST",
                        help="pin the harness and every load tool it starts "
                             "(wrk, h2load, its own probes) to these CPUs, "
                             "disjoint from --server-cpus (default: the "
                             "CPUs --server-cpus leaves; with neither, the "
                             "load tools share the servers' CPUs and a "
                             "warning says so)")
    parser.add_argument("--server-cores", metavar="COUNTS",
                        dest="server_cores_text",
                        help="a sweep: the whole plan once per count "
                             "(e.g. 1,2,4,8), the servers on that many of "
                             "--server-cpus, bucketed's BucketCount and "
                             "nginx's workers equal to it; writes "
                             "cores.md, cores.json and plot-cores-*.png "
                             "(req/s, p99 and CPU per request against "
                             "cores) beside one results directory per count")
    parser.add_argument("--net", choices=("loopback", "veth"),
                        default="loopback",
                        help="the load's path: loopback (default), or a veth "
                             "pair between two network namespaces the run "
                             "creates and deletes (bench-srv-PID, "
                             "bench-cli-PID; addresses from 198.18.0.0/15 "
                             "inside them only; root; W1-W3, skew and idle "
                             "workloads)")
    parser.add_argument("--threads", type=int, default=2,
                        help="wrk threads (default 2; the skewed workloads "
                             "always use 10)")
    parser.add_argument("--timeout", type=int, default=2,
                        help="wrk request timeout in seconds (default 2)")
    parser.add_argument("--base-port", type=int,
                        help="use ports from here up instead of free ports "
                             "picked by the kernel")
    parser.add_argument("--out", help="results directory (default "
                                      "bench/results/<timestamp>)")
    parser.add_argument("--report-only", metavar="DIR",
                        help="rebuild summary.json, report.md and the plots "
                             "of an earlier run from its meta.json and raw/, "
                             "sending no load")
    parser.add_argument("--publish", metavar="DIR",
                        help="copy an earlier run's tables into "
                             "docs/benchmarks.md and its plots into "
                             "docs/img/, sending no load; of a --plan "
                             "publish directory, every family's, and the "
                             "results tables of the page and README.md")
    parser.add_argument("--plan", choices=("publish",),
                        help="publish: every family of runs (--families) "
                             "at today's defaults, each a bench/run of its "
                             "own in --out DIR/<family>/, and DIR/plan.json "
                             "(the commit, the date, what ran); --quick "
                             "for a smoke test")
    parser.add_argument("--families",
                        default=",".join(publication.FAMILY_NAMES),
                        help="the families --plan publish runs "
                             "(default: %(default)s)")
    parser.add_argument("--resume", action="store_true",
                        help="with --plan publish: go on with the plan in "
                             "--out DIR, running those of --families it "
                             "has not run cleanly (skipped, failed, partly "
                             "failed, cut short or never begun); refused "
                             "where the MPM or the modules (server/, "
                             "modules/) differ from the plan's commit")
    parser.add_argument("--keep-tmp", action="store_true",
                        help="keep the servers' temporary directories")
    _add_server_options(parser)
    parser.add_argument("--nginx", default=shutil.which("nginx")
                        or "/usr/sbin/nginx")
    parser.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    args.runs_given = args.runs is not None
    if args.restarts is None:
        args.restarts = QUICK_RESTARTS if args.quick \
            else restart.DEFAULT_RESTARTS
    if args.soak_seconds is None:
        args.soak_seconds = soak.QUICK_SOAK_S if args.quick \
            else soak.DEFAULT_SOAK_S
    for key in ("runs", "duration", "warmup", "slots", "slow_slots",
                "fault_seconds"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    args.levels_given = args.levels is not None
    args.levels = args.levels or f"{NATIVE},{NO_REUSEPORT}"
    args.concurrency_given = bool(args.concurrency)
    args.concurrency = _numbers(args.concurrency, "--concurrency") \
        if args.concurrency else preset["concurrency"]
    return args


def _validate(args):
    args.servers = _names(args.servers, list(SERVERS), "server")
    args.workloads = _names(args.workloads, list(WORKLOADS), "workload",
                            WORKLOAD_GROUPS)
    args.levels = _names(args.levels, list(KERNEL_LEVELS), "kernel level")
    if not args.concurrency_given \
            and all(WORKLOADS[name].idle for name in args.workloads):
        args.concurrency = list(IDLE_DEFAULTS["concurrency"])
    if not args.concurrency_given \
            and all(WORKLOADS[name].fault for name in args.workloads):
        args.concurrency = list(FAULTS_CONCURRENCY)
    if any(WORKLOADS[name].fault for name in args.workloads):
        _validate_faults(args)
    if all(WORKLOADS[name].restart for name in args.workloads):
        if not args.concurrency_given:
            args.concurrency = list(RESTART_CONCURRENCY)
        if not args.levels_given:
            args.levels = [NATIVE]
    if not args.runs_given:
        if all(WORKLOADS[name].soak for name in args.workloads):
            args.runs = SOAK_RUNS
        elif all(WORKLOADS[name].counted for name in args.workloads) \
                and not args.quick:
            args.runs = RESTART_RUNS
    if any(WORKLOADS[name].restart for name in args.workloads):
        _validate_restart(args)
    if all(WORKLOADS[name].users for name in args.workloads) \
            and not args.levels_given:
        # The workloads users serve measure protocols and paths, not
        # the kernel's reuseport: this kernel as it is.
        args.levels = [NATIVE]
    if args.runs < 1 or args.duration < 1 or args.warmup < 0:
        raise UsageError("--runs and --duration must be at least 1, "
                         "--warmup at least 0")
    if args.threads < 1 or args.timeout < 1:
        raise UsageError("--threads and --timeout must be at least 1")
    if min(args.concurrency) < args.threads:
        raise UsageError(f"every --concurrency must be at least --threads "
                         f"({args.threads}): wrk gives each thread its "
                         f"share of the connections")
    _validate_splits(args)
    for option, slots in (("--slots", args.slots),
                          ("--slow-slots", args.slow_slots)):
        if slots < EVENT_THREADS_PER_CHILD \
                or slots % EVENT_THREADS_PER_CHILD:
            raise UsageError(f"{option} must be a multiple of "
                             f"{EVENT_THREADS_PER_CHILD} (event's threads "
                             f"per child), got {slots}")
    args.limits = _names(args.limits, list(idle.LIMITS), "limits")
    args.idle_connections = _idle_counts(args.idle_connections)
    args.rate = _rates(args.rate)
    if any(WORKLOADS[name].idle for name in args.workloads):
        _validate_idle(args)
    lua = os.path.join(args.modules_dir, "mod_lua.so")
    slow = [name for name in args.workloads
            if WORKLOADS[name].handler in USES_SLOW_HANDLER]
    if slow and not os.path.exists(lua):
        raise UsageError(f"{lua} not found: the slow handler of "
                         f"{', '.join(slow)} needs mod_lua (package "
                         f"apache2-bin)")
    _validate_placement(args)
    if not shutil.which(args.wrk):
        raise UsageError(f"wrk not found ({args.wrk}): install it "
                         f"(apt-get install wrk) or pass --wrk PATH")
    if "nginx" in args.servers and not os.access(args.nginx, os.X_OK):
        raise UsageError(f"nginx not found ({args.nginx}): install it "
                         f"(apt-get install nginx), pass --nginx PATH, or "
                         f"leave it out of --servers")


def _validate_placement(args):
    """--server-cpus, --client-cpus, --server-cores and --net: the
    placement (args.placement) and the core counts (args.server_cores,
    None without a sweep)."""
    try:
        args.placement = placement.choose(args.server_cpus, args.client_cpus,
                                          os.sched_getaffinity(0))
    except placement.PlacementError as error:
        raise UsageError(str(error)) from None
    args.server_cores = None
    if args.server_cores_text:
        if args.placement.server_cpus is None:
            raise UsageError("--server-cores needs --server-cpus (or "
                             "--client-cpus): the sweep takes the servers' "
                             "cores from that set")
        args.server_cores = list(dict.fromkeys(
            _numbers(args.server_cores_text, "--server-cores")))
        too_many = [n for n in args.server_cores
                    if n > len(args.placement.server_cpus)]
        if too_many:
            raise UsageError(
                f"--server-cores {too_many[0]}: --server-cpus has only "
                f"{len(args.placement.server_cpus)} CPU(s) "
                f"({placement.format_cpu_list(args.placement.server_cpus)})")
    if args.net == "veth":
        why = netns.unavailable_reason()
        if why:
            raise UsageError(why)
        loopback_only = [name for name in args.workloads
                         if WORKLOADS[name].fault or WORKLOADS[name].restart
                         or WORKLOADS[name].users]
        if loopback_only:
            raise UsageError(f"--net veth runs the W1-W3, skew and idle "
                             f"workloads; {', '.join(loopback_only)} "
                             f"reach their servers on loopback only")


def _validate_faults(args):
    """The faults workloads' window and fault modules."""
    if args.fault_seconds < 3:
        raise UsageError(f"--fault-seconds must be at least 3, got "
                         f"{args.fault_seconds}")
    missing = [path for path in faults.needed_modules(args.fault_modules)
               if not os.path.exists(path)]
    if missing:
        raise UsageError(f"the faults workloads need {', '.join(missing)}: "
                         f"run scripts/build.sh or pass --fault-modules")


def _validate_restart(args):
    """The restart workloads' counts and the second build."""
    if args.restart_stop_timeout <= 0:
        raise UsageError(f"--restart-stop-timeout must be above 0, got "
                         f"{args.restart_stop_timeout}")
    if args.restarts < 1 or args.restart_interval < 0:
        raise UsageError(f"--restarts must be at least 1 and "
                         f"--restart-interval at least 0, got "
                         f"{args.restarts} and {args.restart_interval}")
    if args.soak_seconds < 1:
        raise UsageError(f"--soak-seconds must be at least 1, got "
                         f"{args.soak_seconds}")
    if args.swap_build:
        module = os.path.join(args.swap_build, "mod_mpm_bucketed.so")
        if not os.path.exists(module):
            raise UsageError(f"--swap-build: {module} not found")


def _validate_idle(args):
    """The idle workload's numbers against this machine's limits; then
    raises this process's open-file limit for it, which the servers and
    wrk inherit."""
    count = max(args.idle_connections)
    active = max(args.concurrency)
    why = idle.check_counts(count, active, args.slots, args.duration,
                            resource.getrlimit(resource.RLIMIT_NOFILE)[1],
                            idle.local_port_range())
    if why:
        raise UsageError(why)
    try:
        idle.raise_nofile_limit(
            idle.required_descriptors(count, active, args.slots))
    except idle.IdleError as error:
        raise UsageError(str(error)) from None


def _validate_splits(args):
    """Each workload's split of the load must be a whole number of wrk
    threads, and every thread of a split workload must get the same number
    of connections, or the split would not be what its name says."""
    for name in args.workloads:
        workload = WORKLOADS[name]
        threads = workload.wrk_threads or args.threads
        why = load.split_error(workload.split, threads)
        if why:
            raise UsageError(f"workload {name}: {why}: pick another "
                             f"--threads")
        if len(workload.split) < 2:
            continue
        uneven = [c for c in args.concurrency if c % threads]
        if uneven:
            raise UsageError(f"workload {name} splits its connections over "
                             f"{threads} wrk threads: every --concurrency "
                             f"must be a multiple of {threads}, got "
                             f"{uneven[0]}")


def _check_ports(base_port, server_count):
    """With --base-port every server owns two fixed ports; all must be free
    now, or the run would fail half-way."""
    ports = range(base_port, base_port + 2 * server_count)
    if ports[-1] > 65535 or base_port < 1:
        raise UsageError(f"--base-port {base_port} leaves no room for "
                         f"{len(ports)} ports")
    busy = [port for port in ports if not port_is_free(port)]
    if busy:
        raise UsageError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 "
                         f"are busy: pick another --base-port or leave it "
                         f"out to use free ports")


def _select_servers(args, tools):
    """{level: [spec]} of what runs, and the skipped list with reasons."""
    skipped = []
    runnable = []
    for name in args.servers:
        reason = tools.unavailable_reason(SERVERS[name])
        if reason:
            skipped.append({"server": name, "kernel_level": None,
                            "reason": reason})
        else:
            runnable.append(SERVERS[name])
    by_level = {}
    for level in args.levels:
        by_level[level] = []
        for spec in runnable:
            if level in spec.not_applicable:
                skipped.append({"server": spec.name, "kernel_level": level,
                                "reason": spec.not_applicable[level]})
            else:
                by_level[level].append(spec)
    for spec in runnable:
        left_out = {}
        for name in args.workloads:
            reason = unsupported_reason(spec, WORKLOADS[name])
            if reason:
                left_out.setdefault(reason, []).append(name)
        for reason, names in left_out.items():
            skipped.append({"server": spec.name, "kernel_level": None,
                            "workloads": names, "reason": reason})
    swapping = [name for name in args.workloads
                if restart.RESTART_SWAP in WORKLOADS[name].restart_variants]
    if swapping and not args.swap_build and any(
            spec.mpm == "bucketed" for spec in runnable):
        skipped.append({"server": "bucketed, module file replaced",
                        "kernel_level": None, "workloads": swapping,
                        "reason": "no second build: pass --swap-build DIR "
                                  "(or BUCKETED_SWAP_BUILD)"})
    return by_level, skipped


def _drop_php_without_module(args, tools):
    """Takes the PHP workloads out of the plan where mod_php is missing;
    the skip entries that say so (none when it is there)."""
    reason = tools.php_missing_reason()
    php = [name for name in args.workloads if WORKLOADS[name].handler == PHP]
    if not reason or not php:
        return []
    args.workloads = [name for name in args.workloads if name not in php]
    return [{"server": "every server", "kernel_level": None,
             "workloads": php, "reason": reason}]


def list_catalog(tools):
    print("servers:")
    for spec in SERVERS.values():
        reason = tools.unavailable_reason(spec)
        state = f"skipped: {reason}" if reason else "available"
        print(f"  {spec.name:20} {spec.label} [{state}]")
        for level, why in spec.not_applicable.items():
            print(f"  {'':20} not run at {level}: {why}")
        for handler in dict.fromkeys(w.handler for w in WORKLOADS.values()):
            why = handler_skip_reason(spec, handler)
            if why:
                print(f"  {'':20} not run with the {handler} handler: {why}")
        if spec.one_connection_per_process:
            print(f"  {'':20} not run in the idle workload: "
                  f"{IDLE_NOT_SUPPORTED}")
    print("workloads (default: " + ",".join(DEFAULT_WORKLOADS) + "):")
    php_reason = tools.php_missing_reason()
    if php_reason:
        print(f"  (the {PHP} handler's workloads are skipped: {php_reason})")
    for workload in WORKLOADS.values():
        print(f"  {workload.name:20} {workload.title}")
    for group, members in WORKLOAD_GROUPS.items():
        print(f"  {group:20} stands for {','.join(members)}")
    print("kernel levels:")
    for level, text in KERNEL_LEVELS.items():
        print(f"  {level:20} {text}")


def _terminate_on_sigterm():
    """SIGTERM unwinds like Ctrl-C, so the finally blocks stop the servers."""
    def handler(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def _save_server_files(scratch_dir, out_dir):
    """Each server's generated configuration, error log and wrk scripts
    (wrk.lua; wrk-rateN.lua for a paced run), for the record."""
    for name in sorted(os.listdir(scratch_dir)):
        source = os.path.join(scratch_dir, name)
        if not os.path.isdir(source):
            continue
        target = os.path.join(out_dir, "servers", name)
        os.makedirs(target, exist_ok=True)
        scripts = [file_name for file_name in sorted(os.listdir(source))
                   if file_name.startswith("wrk")
                   and file_name.endswith(".lua")]
        for file_name in ["httpd.conf", "nginx.conf", "error_log"] \
                + scripts:
            path = os.path.join(source, file_name)
            if os.path.exists(path):
                shutil.copy(path, target)


def _write_meta(out_dir, meta):
    with open(os.path.join(out_dir, "meta.json"), "w") as handle:
        json.dump(meta, handle, indent=1)


def rebuild_report(out_dir):
    """--report-only: the outputs of an earlier run, from what it saved."""
    meta, records = publication.load_run(out_dir)
    _write_outputs(out_dir, meta, records)
    print(f"report: {os.path.join(out_dir, 'report.md')}", file=sys.stderr)


def _write_outputs(out_dir, meta, records):
    """summary.json, the plots and report.md from the run records."""
    # matplotlib only here: the other commands run without it.
    from . import plots
    options = meta["options"]
    points = report.summarize(records)
    report.write_summary(os.path.join(out_dir, "summary.json"), meta, points)
    plot_files = {}
    for level, workload, group in report.workload_groups(points, options):
        name = f"plot-{workload}-{level}.png"
        plots.plot_workload(os.path.join(out_dir, name), group, level,
                            workload, options["concurrency"])
        plot_files[(level, workload)] = name
    for workload, group in users.groups(points, options):
        name = f"plot-users-{workload}.png"
        users.plot(os.path.join(out_dir, name), group, workload)
        plot_files[(None, workload)] = name
    with open(os.path.join(out_dir, "report.md"), "w") as handle:
        handle.write(report.render_markdown(meta, points, plot_files))


def _run_plan(args, tools, by_level, skipped, scratch_dir):
    """The plan once, or with --server-cores once per count, each in a
    results directory cores-N of its own, then the sweep's tables and
    plots (cores.py). The exit status: the first failing point's."""
    if not args.server_cores:
        return _benchmark(args, tools, by_level, skipped, scratch_dir)
    statuses = []
    for count in args.server_cores:
        point_args = argparse.Namespace(**vars(args))
        point_args.out = os.path.join(args.out, f"cores-{count}")
        point_scratch = os.path.join(scratch_dir, f"cores-{count}")
        os.makedirs(point_scratch)
        os.chmod(point_scratch, 0o755)
        point_tools = dataclasses.replace(
            tools,
            server_cpus=args.placement.with_server_cores(count).server_cpus,
            cores=count, bucket_count=count)
        print(f"server cores {count}: servers on CPU "
              f"{placement.format_cpu_list(point_tools.server_cpus)}, "
              f"BucketCount {count}", file=sys.stderr)
        statuses.append(_benchmark(point_args, point_tools, by_level,
                                   skipped, point_scratch, count))
    cores.write(args.out, args.server_cores)
    print(f"server cores sweep: {os.path.join(args.out, 'cores.md')}",
          file=sys.stderr)
    return next((status for status in statuses if status), 0)


def _benchmark(args, tools, by_level, skipped, scratch_dir,
               server_cores=None):
    """Runs the plan and writes the results; the exit status (RUNS_FAILED
    when any run failed: skipped servers and workloads are no runs).
    server_cores: the --server-cores point this run is (None: no sweep)."""
    try:
        if NO_REUSEPORT in args.levels:
            tools.shim = ensure_shim(args.build_dir, REPO_DIR, scratch_dir)
    except ShimError as error:
        print(f"bench/run: {error}", file=sys.stderr)
        return 2
    plan = Plan(levels=args.levels, workloads=args.workloads,
                servers=by_level, concurrency=args.concurrency,
                runs=args.runs, duration_s=args.duration,
                warmup_s=args.warmup, threads=args.threads,
                timeout_s=args.timeout, base_port=args.base_port,
                slow_slots=args.slow_slots,
                idle_counts=tuple(args.idle_connections),
                limits=tuple(args.limits), rates=tuple(args.rate),
                fault_s=args.fault_seconds,
                restarts=args.restarts,
                restart_interval_s=args.restart_interval,
                swap_dir=args.swap_build,
                restart_stop_timeout_s=args.restart_stop_timeout,
                soak_s=args.soak_seconds)
    runs_bucketed = any(spec.mpm == "bucketed"
                        for specs in by_level.values() for spec in specs)
    meta = {"started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "options": {
                "levels": args.levels, "workloads": args.workloads,
                "servers": args.servers, "concurrency": args.concurrency,
                "runs": args.runs, "duration_s": args.duration,
                "warmup_s": args.warmup, "slots": args.slots,
                "slow_slots": args.slow_slots,
                "idle_connections": args.idle_connections,
                "limits": args.limits, "rates": args.rate,
                "fault_s": args.fault_seconds,
                "wrk_threads": args.threads, "timeout_s": args.timeout,
                "base_port": args.base_port, "quick": args.quick,
                "restarts": args.restarts,
                "restart_interval_s": args.restart_interval,
                "restart_stop_timeout_s": args.restart_stop_timeout,
                "soak_s": args.soak_seconds,
                "swap_build": args.swap_build,
                "swap_module": restart.module_facts(args.swap_build)
                if args.swap_build and any(WORKLOADS[name].restart
                                           for name in args.workloads)
                else None},
            "machine": environment.machine_facts(tools),
            "placement": placement.Placement(
                tools.server_cpus, args.placement.client_cpus).record(),
            "net": tools.veth.record() if tools.veth
            else {"kind": "loopback"},
            "server_cores": server_cores,
            "bucketed_modules": tools.freeze_bucketed(scratch_dir)
            if runs_bucketed else None,
            "skipped": skipped,
            # Filled in at the end; a run cut short keeps these nulls.
            "wall_time_s": None, "load_average_at_end": None}
    for entry in skipped:
        print(f"skipping {report.skip_text(entry)}", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    _write_meta(args.out, meta)
    progress = Progress(plan)
    runner = Runner(plan, tools, args.out, scratch_dir, progress)
    atexit.register(runner.stop_all)
    began = time.monotonic()
    progress.say(f"results in {args.out}; {plan.count_runs()} runs planned")
    try:
        records = runner.run()
    finally:
        runner.stop_all()
        _save_server_files(scratch_dir, args.out)
    meta["wall_time_s"] = time.monotonic() - began
    meta["load_average_at_end"] = environment.load_average()
    _write_meta(args.out, meta)
    _write_outputs(args.out, meta, records)
    failed = sum(1 for r in records if not r["ok"])
    print(f"done in {meta['wall_time_s'] / 60:.1f} min: {len(records)} runs, "
          f"{failed} failed; report: {os.path.join(args.out, 'report.md')}",
          file=sys.stderr)
    return RUNS_FAILED if failed else 0


def _run_publish_plan(args):
    """--plan publish: the exit status (publication.run_plan)."""
    families = _names(args.families, list(publication.FAMILY_NAMES),
                      "family")
    if not args.out:
        raise UsageError("--plan publish needs --out DIR")
    has_plan = os.path.exists(os.path.join(args.out, publication.PLAN_FILE))
    if args.resume:
        if not has_plan:
            raise UsageError(f"--resume: {args.out} holds no plan")
        try:
            plan = publication.read_plan(args.out)
        except publication.PublishError as error:
            raise UsageError(f"--resume: {error}") from None
        refusal = publication.resume_refusal(
            plan, args.quick,
            publication.measured_unchanged_since(plan["commit"]))
        if refusal:
            raise UsageError(f"--resume: {refusal}")
    elif has_plan:
        raise UsageError(f"{args.out} already holds a plan (--resume goes "
                         f"on with it)")
    else:
        plan = publication.new_plan(args.quick)
    _terminate_on_sigterm()
    server_args = ["--httpd", args.httpd, "--modules-dir",
                   args.modules_dir, "--build-dir", args.build_dir]
    return publication.run_plan(
        args.out, plan, families, server_args,
        lambda text: print(text, file=sys.stderr, flush=True))


def _scratch_dir(prefix):
    """A temporary directory for the servers' files."""
    scratch_dir = tempfile.mkdtemp(prefix=prefix)
    # Servers started as root serve files as www-data: let it walk in.
    os.chmod(scratch_dir, 0o755)
    return scratch_dir


def parse_memory_args(argv):
    parser = argparse.ArgumentParser(
        prog="bench/run memory",
        description="Memory checks: a bucketed child's PSS against a stock "
                    "prefork child's, and the bucketed parent's memory "
                    "across graceful restarts.")
    parser.add_argument("--restarts", type=int,
                        default=MEMORY_DEFAULTS["restarts"],
                        help=f"graceful restarts of the bucketed parent "
                             f"(default %(default)s; 1 to "
                             f"{MEMORY_MAX_RESTARTS})")
    parser.add_argument("--requests", type=int,
                        default=MEMORY_DEFAULTS["requests"],
                        help="requests to each server before its children "
                             "are measured (default %(default)s)")
    parser.add_argument("--slots", type=int, default=MEMORY_DEFAULTS["slots"],
                        help=f"children of each server (default "
                             f"%(default)s; {MIN_SPARE_SERVERS} to "
                             f"{MEMORY_MAX_SLOTS})")
    parser.add_argument("--out", metavar="FILE.json",
                        help="also write the results there as JSON")
    _add_server_options(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.restarts <= MEMORY_MAX_RESTARTS:
        parser.error(f"--restarts must be from 1 to {MEMORY_MAX_RESTARTS}")
    if not MIN_SPARE_SERVERS <= args.slots <= MEMORY_MAX_SLOTS:
        parser.error(f"--slots must be from {MIN_SPARE_SERVERS} to "
                     f"{MEMORY_MAX_SLOTS} (prefork and bucketed keep "
                     f"{MIN_SPARE_SERVERS} idle children)")
    if args.requests < 0:
        parser.error("--requests must be at least 0")
    return args


def memory_main(argv):
    """bench/run memory: the exit status."""
    args = parse_memory_args(argv)
    _terminate_on_sigterm()
    scratch_dir = _scratch_dir("bucketbench-memory-")
    try:
        result = memory.measure(_tools(args), scratch_dir, args.restarts,
                                args.requests, print)
    except (memory.ProbeError, ServerError, Timeout, OSError) as error:
        print(f"bench/run memory: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out, indent=2)
    return 0


def overhead_main(argv):
    """bench/run overhead (overhead.py): the exit status."""
    parser = argparse.ArgumentParser(prog="bench/run overhead",
                                     description=overhead.DESCRIPTION)
    overhead.add_arguments(parser)
    _add_server_options(parser)
    args = parser.parse_args(argv)
    overhead.check_arguments(parser, args)
    _terminate_on_sigterm()
    scratch_dir = _scratch_dir("bucketbench-overhead-")
    try:
        return overhead.run(_tools(args, wrk=args.wrk), scratch_dir, args)
    except (ServerError, Timeout, OSError) as error:
        print(f"bench/run overhead: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def profile_main(argv):
    """bench/run profile (profile.py): the exit status. Imported here so
    that this hook is the only line profile.py adds to this file's
    imports."""
    from . import profile
    args = profile.parse_args(argv, _add_server_options)
    if args.retabulate:
        with open(os.path.join(args.out, "tables.md"), "w") as out:
            out.write(profile.markdown(profile.retabulate(args.out)))
        return 0
    _terminate_on_sigterm()
    scratch_dir = _scratch_dir("bucketbench-profile-")
    try:
        results = profile.run(_tools(args, nginx=args.nginx, wrk=args.wrk),
                              scratch_dir, args)
    except (ServerError, Timeout, OSError, load.LoadError) as error:
        print(f"bench/run profile: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)
    with open(os.path.join(args.out, "tables.md"), "w") as out:
        out.write(profile.markdown(results))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:
        return profile_main(argv[1:])
    if argv[:1] == ["memory"]:
        return memory_main(argv[1:])
    if argv[:1] == ["overhead"]:
        return overhead_main(argv[1:])
    try:
        args = parse_args(argv)
        tools = _tools(args, nginx=args.nginx, wrk=args.wrk)
        if args.resume and not args.plan:
            raise UsageError("--resume goes on with a --plan publish")
        if args.list:
            list_catalog(tools)
            return 0
        if args.report_only:
            rebuild_report(args.report_only)
            return 0
        if args.publish:
            publication.publish(args.publish)
            return 0
        if args.plan:
            return _run_publish_plan(args)
        _validate(args)
        dropped = _drop_php_without_module(args, tools)
        if not args.workloads:
            raise UsageError("none of the selected workloads can run here: "
                             + "; ".join(d["reason"] for d in dropped))
        by_level, skipped = _select_servers(args, tools)
        skipped = dropped + skipped
        if not any(by_level.values()):
            raise UsageError("none of the selected servers can run here: "
                             + "; ".join(f"{s['server']}: {s['reason']}"
                                         for s in skipped))
        if args.base_port is not None:
            # The idle workload runs every server once per --limits.
            per_server = len(args.limits) if any(
                WORKLOADS[name].idle for name in args.workloads) else 1
            # A restart workload runs bucketed in several variants.
            restarting = max((len(restart.expand(specs, WORKLOADS[name],
                                                 bool(args.swap_build)))
                              for specs in by_level.values()
                              for name in args.workloads
                              if WORKLOADS[name].restart), default=0)
            _check_ports(args.base_port,
                         max(max(map(len, by_level.values())) * per_server,
                             restarting))
        args.out = args.out or os.path.join(
            BENCH_DIR, "results", time.strftime("%Y%m%d-%H%M%S"))
        if os.path.exists(os.path.join(args.out, "summary.json")):
            raise UsageError(f"{args.out} already holds results")
    except (UsageError, publication.PublishError) as error:
        print(f"bench/run: {error}", file=sys.stderr)
        return 2

    _terminate_on_sigterm()
    warning = args.placement.warning()
    if warning:
        print(f"bench/run: warning: {warning}", file=sys.stderr)
    try:
        placement.pin_self(args.placement.client_cpus)
    except placement.PlacementError as error:
        print(f"bench/run: {error}", file=sys.stderr)
        return 2
    if args.placement.server_cpus is not None:
        # nginx gets a worker per CPU it may use.
        tools = dataclasses.replace(
            tools, server_cpus=args.placement.server_cpus,
            cores=len(args.placement.server_cpus))
    scratch_dir = _scratch_dir("bucketbench-")
    veth = None
    try:
        if args.net == "veth":
            veth = netns.VethPair()
            veth.create()
            veth.enter_client()
            tools = dataclasses.replace(
                tools, server_host=netns.SERVER_ADDRESS, veth=veth)
        return _run_plan(args, tools, by_level, skipped, scratch_dir)
    except netns.NetnsError as error:
        print(f"bench/run: --net veth: {error}", file=sys.stderr)
        return 2
    finally:
        if veth:
            for error in veth.remove():
                print(f"bench/run: could not delete a namespace: {error}",
                      file=sys.stderr)
        if args.keep_tmp:
            print(f"kept {scratch_dir}", file=sys.stderr)
        else:
            shutil.rmtree(scratch_dir, ignore_errors=True)
