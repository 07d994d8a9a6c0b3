#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/same_servers.py: a workload users serve (large-1m by default)
against a list of servers in which one server may appear more than once,
interleaved round by round, as bench/run interleaves them (issue 26).

bench/run names each server once, so it cannot show how far two instances
of the same server differ in one run; this can:

  bench/same_servers.py --servers prefork,event,bucketed-event,event#2

A server is NAME[#TAG] (NAME from `bench/run --list`; TAG tells a second
instance apart). Each instance is its own httpd with its own directory and
port, configured as bench/run configures NAME. Prints every run's MB/s and
server CPU per MB, then the medians and same-round ratios against the first
server. Run it under the benchmark lock: flock /tmp/bench.lock ..."""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile

from bucketbench import environment, procfs, stats, users
from bucketbench.catalog import NATIVE, SERVERS, WORKLOADS
from bucketbench.cli import REPO_DIR
from bucketbench.net import free_ports

WRK_TIMEOUT_S = 2
WRK_THREADS = 2


def spec_of(text):
    """The catalog's ServerSpec for NAME[#TAG], renamed to the whole text."""
    name = text.split("#", 1)[0]
    if name not in SERVERS:
        raise SystemExit(f"unknown server {name!r} (see bench/run --list)")
    return dataclasses.replace(SERVERS[name], name=text)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", required=True,
                        help="comma-separated NAME[#TAG]")
    parser.add_argument("--workload", default="large-1m",
                        choices=sorted(users.LARGE_SIZES))
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
    parser.add_argument("--hook", default="",
                        help="shell command run 1 s into every run, with "
                             "NAME, PORT, PIDS and ROUND in its environment")
    parser.add_argument("--build-dir", default=os.environ.get(
        "BUCKETED_BUILD", REPO_DIR))
    return parser.parse_args(argv)


def measure(server, workload, seconds, wrk, hook, round_no):
    """One run: (MB/s, server CPU ms per MB)."""
    pids = procfs.process_tree(server.pid)
    before = procfs.cpu_seconds(server.pid, pids)
    hooked = None
    if hook:
        env = dict(os.environ, NAME=server.spec.name,
                   PORT=str(server.ports[0]), ROUND=str(round_no),
                   PIDS=" ".join(str(pid) for pid in pids))
        hooked = subprocess.Popen(["bash", "-c", "sleep 1; " + hook],
                                  env=env)
    _, result, _ = users.run_load(server, workload,
                                  workload.users_concurrency, seconds,
                                  WRK_TIMEOUT_S, WRK_THREADS, wrk)
    if hooked:
        hooked.wait()
    cpu_s = procfs.cpu_seconds(server.pid, procfs.process_tree(server.pid)) \
        - before
    megabytes = result["bytes"] / 2 ** 20
    return result["bytes_per_s"] / 2 ** 20, \
        cpu_s * 1000 / megabytes if megabytes else 0.0


def main(argv):
    args = parse_args(argv)
    workload = WORKLOADS[args.workload]
    tools = environment.debian_tools(args.build_dir)
    scratch = tempfile.mkdtemp(prefix="same-servers-")
    os.chmod(scratch, 0o755)     # the children read the files as www-data
    fixtures = users.Fixtures(args.workload, os.path.join(scratch, "shared"),
                              free_ports(1)[0])
    servers = []
    try:
        fixtures.start()
        for index, text in enumerate(args.servers.split(",")):
            servers.append(users.UserServer(
                spec_of(text), NATIVE, free_ports(1),
                os.path.join(scratch, f"server{index}"), tools,
                handler=workload.handler, fixtures=fixtures,
                kind=args.workload))
        for server in servers[::-1] if args.start_reverse else servers:
            server.start()
            print(f"started {server.spec.name} {server.pid}", flush=True)
            users.run_load(server, workload, workload.users_concurrency,
                           args.warmup, WRK_TIMEOUT_S, WRK_THREADS,
                           tools.wrk)
        print(f"load average {os.getloadavg()}", flush=True)
        runs = {server.spec.name: [] for server in servers}
        order = list(servers)
        for round_no in range(args.rounds):
            if args.rotate and round_no:
                order = order[1:] + order[:1]
            for server in order:
                rate, cpu = measure(server, workload, args.duration,
                                    tools.wrk, args.hook, round_no)
                runs[server.spec.name].append((rate, cpu))
                print(f"round {round_no} {server.spec.name:24s} "
                      f"{rate:6.0f} MB/s {cpu:.3f} ms/MB "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"load average {os.getloadavg()}")
        first = servers[0].spec.name
        for name, mine in runs.items():
            ratios = [m[0] / f[0] for m, f in zip(mine, runs[first])]
            print(f"{name:24s} {stats.median([m[0] for m in mine]):6.0f} "
                  f"MB/s {stats.median([m[1] for m in mine]):.3f} ms/MB, "
                  f"vs {first} {stats.median(ratios):.2f}x ("
                  + " / ".join(f"{r:.2f}" for r in ratios) + ")")
    finally:
        for server in servers:
            server.stop()
        fixtures.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
