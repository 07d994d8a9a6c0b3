#!/usr/bin/python3
"""Memory checks that belong in the harness, not in tests:

1. a bucketed child's proportional set size (PSS) against a stock prefork
   child's, same configuration, measured side by side;
2. the bucketed parent's memory across many graceful restarts (it must not
   grow: the parent keeps no per-connection state).

Usage: bench/memory_probe.py [--restarts 100] [--out FILE.json]
Loopback only; every server it starts is stopped by pid."""

import argparse
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bucketbench import configs, environment, procfs  # noqa: E402
from bucketbench.catalog import NATIVE, SERVERS  # noqa: E402
from bucketbench.server import Server, free_ports, http_get  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESTART_TIMEOUT_S = 20
SAMPLE_REQUESTS = 200


def smaps_kb(pid, field):
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def child_pss_kb(server):
    """Median PSS of the server's children after some traffic, so that
    every child has touched its request-handling pages."""
    for _ in range(SAMPLE_REQUESTS):
        http_get(server.ports[0], "/" + configs.DOC_NAME)
    children = [pid for pid in procfs.process_tree(server.pid)
                if pid != server.pid]
    values = sorted(smaps_kb(pid, "Pss") for pid in children)
    return values[len(values) // 2], len(values)


def wait_generation(port, generation):
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            status, body = http_get(port, "/bucketed-status")
        except OSError:
            status, body = 0, b""
        found = re.search(rb"^generation=(\d+)$", body, re.M)
        if status == 200 and found and int(found.group(1)) >= generation:
            return
        time.sleep(0.05)
    raise TimeoutError(f"generation {generation} not reached")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=100)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.restarts < 1 or args.restarts > 10000:
        parser.error("--restarts must be from 1 to 10000")

    tools = environment.Tools(
        httpd="/usr/sbin/apache2", nginx="/usr/sbin/nginx",
        wrk="/usr/bin/wrk", modules_dir="/usr/lib/apache2/modules",
        bucketed_dir=os.environ.get("BUCKETED_BUILD", TOP), shim="",
        slots=64, cores=os.cpu_count())
    result = {"kernel": platform.release(), "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bucketed-mem-") as scratch:
        os.chmod(scratch, 0o755)   # the children run as www-data
        servers = {}
        try:
            for name in ("prefork", "bucketed-reuseport"):
                reason = tools.unavailable_reason(SERVERS[name])
                if reason:
                    sys.exit(f"memory_probe: {name}: {reason}")
                workdir = os.path.join(scratch, name)
                os.makedirs(workdir)
                servers[name] = Server(SERVERS[name], NATIVE, free_ports(1),
                                       workdir, tools)
                servers[name].start()
            stock_kb, stock_n = child_pss_kb(servers["prefork"])
            ours_kb, ours_n = child_pss_kb(servers["bucketed-reuseport"])
            result["child_pss_kb"] = {"prefork": stock_kb, "bucketed": ours_kb,
                                      "children": [stock_n, ours_n],
                                      "ratio": ours_kb / stock_kb}
            print(f"child PSS (median): stock prefork {stock_kb} kB, "
                  f"bucketed {ours_kb} kB, ratio {ours_kb / stock_kb:.3f}")
            servers["prefork"].stop()

            bucketed = servers["bucketed-reuseport"]
            port = bucketed.ports[0]
            before = {f: smaps_kb(bucketed.pid, f) for f in ("Rss", "Pss")}
            for generation in range(1, args.restarts + 1):
                os.kill(bucketed.pid, signal.SIGUSR1)
                wait_generation(port, generation)
                if generation == 1:
                    after_first = {f: smaps_kb(bucketed.pid, f)
                                   for f in ("Rss", "Pss")}
            after = {f: smaps_kb(bucketed.pid, f) for f in ("Rss", "Pss")}
            result["parent_kb"] = {"before": before,
                                   "after_first_restart": after_first,
                                   "after": after,
                                   "restarts": args.restarts}
            print(f"parent after 1 graceful restart: {after_first}; after "
                  f"{args.restarts}: {after} (start: {before})")
        finally:
            for server in servers.values():
                server.stop()
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
