#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/limit_sweep.py: every number of idle keep-alive connections below
MaxRequestWorkers, then new-connection probes (issue 25's acceptance;
bench/bucketbench/limit_sweep.py says what each point does):

  flock /tmp/bench.lock bench/limit_sweep.py --out sweep.json

For each server (stock prefork and event, bucketed's two child models) and
limit (MaxRequestWorkers 7, 20 and the MPM's default; bucketed at
BucketCount 2 and 4) one server is started and swept. Prints a line per
point and per configuration; --out writes every point as JSON."""

import argparse
import json
import os
import shutil
import sys
import tempfile

from bucketbench import environment, limit_sweep
from bucketbench.catalog import NATIVE, SERVERS
from bucketbench.cli import REPO_DIR
from bucketbench.net import free_ports

DEFAULT_SERVERS = "prefork,bucketed-reuseport,event,bucketed-event"


def parse_limit(text):
    return None if text == "default" else int(text)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default=DEFAULT_SERVERS,
                        help="comma-separated names from bench/run --list")
    parser.add_argument("--limits", default="7,20,default",
                        help="MaxRequestWorkers values, or 'default'")
    parser.add_argument("--buckets", default="2,4",
                        help="bucketed's BucketCount values")
    parser.add_argument("--idle", default="",
                        help="the idle counts to run (default: every one "
                             "below the limit, a spread at the default)")
    parser.add_argument("--out", default="", help="JSON file of the points")
    parser.add_argument("--build-dir", default=os.environ.get(
        "BUCKETED_BUILD", REPO_DIR))
    args = parser.parse_args(argv)
    for name in args.servers.split(","):
        if name not in SERVERS:
            parser.error(f"unknown server {name!r} (see bench/run --list)")
    return args


def main(argv):
    args = parse_args(argv)
    tools = environment.debian_tools(args.build_dir)
    specs = [SERVERS[name] for name in args.servers.split(",")]
    configs = limit_sweep.configs_for(
        specs, [parse_limit(t) for t in args.limits.split(",")],
        [int(t) for t in args.buckets.split(",")])
    counts = [int(t) for t in args.idle.split(",")] if args.idle else None
    scratch = tempfile.mkdtemp(prefix="limit-sweep-")
    os.chmod(scratch, 0o755)     # the children read the files as www-data
    records = []
    try:
        for index, config in enumerate(configs):
            server = limit_sweep.SweepServer(
                config.spec, NATIVE, free_ports(1),
                os.path.join(scratch, f"server{index}"), tools,
                sweep_directives=limit_sweep.limit_directives(
                    config.spec, config.limit, config.buckets))
            server.start()
            try:
                points = limit_sweep.sweep(server, config, counts)
            finally:
                server.stop()
            for p in points:
                print(f"  idle {p['idle']:3d}: probes over 1 s {p['slow']}, "
                      f"timeouts {p['timeouts']}, errors {p['errors']}, "
                      f"max {p['max_ms']:.1f} ms, idle closed "
                      f"{p['idle_closed']}, slowest idle answer "
                      f"{p['open_max_s']} s"
                      + (f", only {p['idle_opened']} held: "
                         f"{p['open_failure']}" if p["open_failure"] else ""),
                      flush=True)
            print(limit_sweep.summary(config, points), flush=True)
            records.append({"server": config.spec.name,
                            "limit": config.limit, "buckets": config.buckets,
                            "points": points})
        print(f"load average {os.getloadavg()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(records, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
