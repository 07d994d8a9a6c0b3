#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/same_servers.py: one workload users serve against a list of
servers in which one server may appear more than once, interleaved round
by round, as bench/run interleaves them (issue 26).

bench/run names each server once, so it cannot show how far two instances
of the same server differ in one run; this can:

  bench/same_servers.py --servers prefork,event,bucketed-event,event#2
  bench/same_servers.py --workload tls-keepalive --rotate \\
      --servers prefork,prefork#2,bucketed-reuseport

A server is NAME[#TAG][@BUILD] (NAME from `bench/run --list`; TAG tells
a second instance apart; BUILD: the directory of the bucketed modules this
instance loads, default --build-dir, for an A/B of two builds in one run).
Each instance is its own httpd with its own directory and port, configured
as bench/run configures NAME for the workload, with the workload's
fixtures (TLS certificate, large file, slow backend, php-fpm) started once
and shared as bench/run shares them. --workload is any of the users
workloads wrk or h2load drive (tls-handshake, tls-keepalive,
h2-streams, h2-conns, large-1m (the default), large-100m, proxy-default,
proxy-tuned, php-fpm, php-mod; not tls-resume, whose openssl s_time
reports no latencies).

--rate N paces wrk to N requests a second in all (the Lua delay() of
bench/run's --rate), so every server is asked the same load and the p99s
compare at an equal rate rather than at whatever each server's closed
loop reached; the workloads h2load drives cannot be paced.

Prints every run's req/s (MB/s for the large files), p99, server CPU per
request (per MB) and errors (h2 workloads: the protocol h2load
negotiated), then per server the medians and the same-round ratios
against the first server, of the throughput, the p99 and the CPU per
request (above 1.00x: slower, or costlier, than the first). Where a
server runs as several instances, the instances of each server (same
NAME and BUILD) are also pooled round by round and compared the same
way (a "pooled" line per server). A run whose load fails is reported
and left out of the medians; its server is started afresh if it was
stopped. Run it under the benchmark lock: flock /tmp/bench.lock ..."""

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from bucketbench import environment, load, procfs, stats, users
from bucketbench.catalog import NATIVE, SERVERS, WORKLOAD_GROUPS, WORKLOADS
from bucketbench.cli import REPO_DIR
from bucketbench.net import free_ports

WRK_TIMEOUT_S = 2
WRK_THREADS = 2
# The users workloads whose load reports latencies (tls-resume's does not).
WORKLOAD_NAMES = [name for name in WORKLOAD_GROUPS["users"]
                  if name != "tls-resume"]


@dataclasses.dataclass
class Run:
    """One run's figures: rate in req/s (MB/s for the large files), server
    CPU in ms per request (per MB)."""
    rate: float
    p99_ms: float
    cpu_ms: float
    errors: int
    protocol: str


def spec_of(text):
    """The catalog's ServerSpec for NAME[#TAG][@BUILD], renamed to
    NAME[#TAG], and BUILD (None when not given)."""
    label, _, build = text.partition("@")
    name = label.split("#", 1)[0]
    if name not in SERVERS:
        raise SystemExit(f"unknown server {name!r} (see bench/run --list)")
    return dataclasses.replace(SERVERS[name], name=label), build or None


def spec_group(text):
    """NAME[@BUILD] of NAME[#TAG][@BUILD]: the instances pooled
    together."""
    label, at, build = text.partition("@")
    return label.split("#", 1)[0] + at + build


def units(kind):
    """(rate unit, CPU unit) of a workload's figures."""
    return ("MB/s", "ms/MB") if kind in users.LARGE_SIZES \
        else ("req/s", "ms/req")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", required=True,
                        help="comma-separated NAME[#TAG][@BUILD]")
    parser.add_argument("--workload", default="large-1m",
                        choices=WORKLOAD_NAMES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5,
                        help="seconds per run")
    parser.add_argument("--warmup", type=int, default=1,
                        help="seconds of warm-up per server")
    parser.add_argument("--rotate", action="store_true",
                        help="rotate the order of the servers every round")
    parser.add_argument("--start-reverse", action="store_true",
                        help="start (and warm up) the servers in the "
                             "reverse of the listed order")
    parser.add_argument("--rate", type=int, default=None,
                        help="pace wrk to this many requests a second")
    parser.add_argument("--hook", default="",
                        help="shell command run 1 s into every run, with "
                             "NAME, PORT, PIDS and ROUND in its environment")
    parser.add_argument("--build-dir", default=os.environ.get(
        "BUCKETED_BUILD", REPO_DIR))
    args = parser.parse_args(argv)
    if args.rate is not None and (args.rate <= 0
                                  or args.workload not in users.PACEABLE):
        parser.error(f"--rate must be a positive number of requests a "
                     f"second, for one of {', '.join(users.PACEABLE)}")
    return args


def start(server, workload, warmup_s, wrk):
    """Starts a server and warms it up (a failed warm-up shows in the
    first run)."""
    server.start()
    print(f"started {server.spec.name} {server.pid}", flush=True)
    try:
        users.run_load(server, workload, workload.users_concurrency,
                       warmup_s, WRK_TIMEOUT_S, WRK_THREADS, wrk)
    except load.LoadError:
        pass


def measure(server, workload, seconds, wrk, hook, round_no, rate=None):
    """One run's Run (rate: wrk paced, see --rate)."""
    pids = procfs.process_tree(server.pid)
    before = procfs.cpu_seconds(server.pid, pids)
    hooked = None
    if hook:
        env = dict(os.environ, NAME=server.spec.name,
                   PORT=str(server.ports[0]), ROUND=str(round_no),
                   PIDS=" ".join(str(pid) for pid in pids))
        hooked = subprocess.Popen(["bash", "-c", "sleep 1; " + hook],
                                  env=env)
    try:
        _, result, _ = users.run_load(server, workload,
                                      workload.users_concurrency, seconds,
                                      WRK_TIMEOUT_S, WRK_THREADS, wrk, rate)
    finally:
        if hooked:
            hooked.wait()
    cpu_s = procfs.cpu_seconds(server.pid, procfs.process_tree(server.pid)) \
        - before
    if workload.users in users.LARGE_SIZES:
        rate = result["bytes_per_s"] / 2 ** 20
        served = result["bytes"] / 2 ** 20
    else:
        rate, served = result["rps"], result["requests"]
    return Run(rate, (result["latency_ms"] or {}).get("p99"),
               cpu_s * 1000 / served if served else 0.0,
               sum(result["errors"].values()), result.get("protocol"))


def _number(value, digits):
    return "n/a" if value is None else f"{value:.{digits}f}"


def describe(run, kind):
    rate_unit, cpu_unit = units(kind)
    protocol = f" {run.protocol}" if run.protocol else ""
    return (f"{run.rate:6.0f} {rate_unit} p99 {_number(run.p99_ms, 2)} ms "
            f"{run.cpu_ms:.4f} {cpu_unit} errors {run.errors}{protocol}")


def _median(values):
    present = [value for value in values if value is not None]
    return stats.median(present) if present else None


def ratios(mine, first, field):
    """Same-round ratios of a Run field, mine over first, for the rounds
    both measured."""
    return [getattr(m, field) / getattr(f, field)
            for m, f in zip(mine, first)
            if m and f and getattr(m, field) and getattr(f, field)]


def _ratio_text(values):
    if not values:
        return "n/a"
    return f"{stats.median(values):.2f}x (" \
        + " / ".join(f"{r:.2f}" for r in values) + ")"


def summary(name, mine, first_name, first, kind):
    """A server's medians and its same-round ratios against the first."""
    rate_unit, cpu_unit = units(kind)
    done = [run for run in mine if run]
    failed = f", {len(mine) - len(done)} runs failed" \
        if len(done) < len(mine) else ""
    return (f"{name:24s} {_number(_median([r.rate for r in done]), 0)} "
            f"{rate_unit} p99 {_number(_median([r.p99_ms for r in done]), 2)}"
            f" ms {_number(_median([r.cpu_ms for r in done]), 4)} "
            f"{cpu_unit}{failed}, vs {first_name} "
            f"{_ratio_text(ratios(mine, first, 'rate'))}, p99 "
            f"{_ratio_text(ratios(mine, first, 'p99_ms'))}, CPU "
            f"{_ratio_text(ratios(mine, first, 'cpu_ms'))}")


def pooled_runs(instances):
    """Per round, the mean Run of a server's instances (None for a round
    in which one of them failed): two instances of one server differ as
    much as two servers may, so a comparison pools them."""
    pooled = []
    for runs in zip(*instances):
        if not all(runs):
            pooled.append(None)
            continue
        pooled.append(Run(
            rate=sum(r.rate for r in runs) / len(runs),
            p99_ms=sum(r.p99_ms or 0 for r in runs) / len(runs) or None,
            cpu_ms=sum(r.cpu_ms for r in runs) / len(runs),
            errors=sum(r.errors for r in runs), protocol=""))
    return pooled


def pooled_summary(group, instances, first_group, first):
    """A server's instances pooled round by round, against the first
    server's: same-round ratios, and in how many rounds its CPU per
    request (per MB) was the higher."""
    mine = pooled_runs(instances)
    cpu = ratios(mine, first, "cpu_ms")
    return (f"pooled {group} ({len(instances)}) vs {first_group}: "
            f"{_ratio_text(ratios(mine, first, 'rate'))}, p99 "
            f"{_ratio_text(ratios(mine, first, 'p99_ms'))}, CPU "
            f"{_ratio_text(cpu)}, higher in "
            f"{sum(r > 1 for r in cpu)} of {len(cpu)} rounds")


def main(argv):
    args = parse_args(argv)
    # A stop signal ends the run as an error does: the servers are
    # stopped (finally, below) rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    workload = WORKLOADS[args.workload]
    tools = environment.debian_tools(args.build_dir)
    scratch = tempfile.mkdtemp(prefix="same-servers-")
    os.chmod(scratch, 0o755)     # the children read the files as www-data
    fixtures = users.Fixtures(args.workload, os.path.join(scratch, "shared"),
                              free_ports(1)[0])
    servers = []
    try:
        fixtures.start()
        groups = {}
        for index, text in enumerate(args.servers.split(",")):
            spec, build = spec_of(text)
            groups.setdefault(spec_group(text), []).append(spec.name)
            servers.append(users.UserServer(
                spec, NATIVE, free_ports(1),
                os.path.join(scratch, f"server{index}"),
                dataclasses.replace(tools, bucketed_dir=build) if build
                else tools,
                handler=workload.handler, fixtures=fixtures,
                kind=args.workload))
        for server in servers[::-1] if args.start_reverse else servers:
            start(server, workload, args.warmup, tools.wrk)
        if args.rate:
            print(f"wrk paced at {args.rate} req/s", flush=True)
        print(f"load average {os.getloadavg()}", flush=True)
        runs = {server.spec.name: [] for server in servers}
        order = list(servers)
        for round_no in range(args.rounds):
            if args.rotate and round_no:
                order = order[1:] + order[:1]
            for server in order:
                try:
                    run = measure(server, workload, args.duration,
                                  tools.wrk, args.hook, round_no, args.rate)
                    text = describe(run, args.workload)
                except load.LoadError as error:
                    run, text = None, "failed: " + str(error).replace(
                        "\n", " | ")
                    if not server.alive():
                        start(server, workload, args.warmup, tools.wrk)
                runs[server.spec.name].append(run)
                print(f"round {round_no} {server.spec.name:24s} {text} "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"load average {os.getloadavg()}")
        first = servers[0].spec.name
        for name, mine in runs.items():
            print(summary(name, mine, first, runs[first], args.workload))
        if any(len(names) > 1 for names in groups.values()):
            group_runs = {group: [runs[name] for name in names]
                          for group, names in groups.items()}
            first_group = next(iter(groups))
            first_pooled = pooled_runs(group_runs[first_group])
            for group, instances in group_runs.items():
                print(pooled_summary(group, instances, first_group,
                                     first_pooled))
    finally:
        for server in servers:
            server.stop()
        fixtures.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
