# SPDX-License-Identifier: Apache-2.0
"""What bucketed's observability costs: the same load against the same
bucketed configuration with the metrics off, on, and on with a Prometheus-
style scrape every second, in many interleaved rounds (the way nginx-lua's
Prometheus metrics were measured), reporting min/median/max/stddev of
req/s per configuration and the per-round ratio to "off".

    bench/run overhead [--rounds 30] [--out DIR]

The configurations (all servers run at once, each on its own port):
- off:     bucketed without mod_bucketed_status. The per-connection counter
           increment and the parent's once-a-second socket sampling are part
           of the MPM and run here too: "off" cannot remove them.
- off-again: a second, identical "off" server: the difference between two
           servers that differ in nothing but their ports and processes.
- on:      mod_bucketed_status loaded, /metrics configured, nobody asking.
- scraped: as "on", with GET /metrics every second during every run.

Load: wrk, Connection: close (every request is a new connection, so the
accept path, where the counter is, runs for every request), a small static
file. Each round runs them all in a rotated order, so drifts of this shared
machine hit them alike and each round's ratios compare neighbours."""

import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass

from . import environment, load, procfs, stats
from .catalog import NATIVE, ServerSpec
from .net import free_ports, http_get
from .server import Server, ServerError

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DESCRIPTION = ("Overhead of bucketed's metrics: interleaved runs with them "
               "off, on, and on with a scrape every second.")
METRICS_PATH = "/metrics"
SCRAPE_INTERVAL_S = 1.0
BASELINE = "off"
DEFAULTS = {"rounds": 30, "duration": 2, "concurrency": 50, "slots": 128,
            "threads": 2}


@dataclass
class Variant:
    name: str
    title: str
    status_module: bool      # load mod_bucketed_status
    scrape: bool             # GET /metrics every second during runs


VARIANTS = (
    Variant("off", "metrics off (no mod_bucketed_status)", False, False),
    # The same as "off" on other ports, in other processes: how far two
    # identical servers differ here, the yardstick for the others.
    Variant("off-again", "metrics off, a second identical server", False,
            False),
    Variant("on", "metrics on, not scraped", True, False),
    Variant("scraped", "metrics on, scraped every second", True, True),
)

METRICS_DIRECTIVES = (f"<Location {METRICS_PATH}>",
                      "    SetHandler bucketed-metrics",
                      "</Location>")


class _Tools(environment.Tools):
    """The harness's tools, with mod_bucketed_status left out when a
    variant turns the metrics off."""

    def __init__(self, base, with_status):
        super().__init__(**{f: getattr(base, f)
                            for f in base.__dataclass_fields__})
        self.with_status = with_status

    @property
    def status_module(self):
        if not self.with_status:
            return None
        return super().status_module


class Scraper:
    """GET /metrics every SCRAPE_INTERVAL_S in a thread, until stopped."""

    def __init__(self, port):
        self.port = port
        self.done = threading.Event()
        self.ok = 0
        self.failed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.is_set():
            try:
                status, body = http_get(self.port, METRICS_PATH)
                if status == 200 and b"bucketed_bucket_accepted" in body:
                    self.ok += 1
                else:
                    self.failed += 1
            except OSError:
                self.failed += 1
            self.done.wait(SCRAPE_INTERVAL_S)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def add_arguments(parser):
    parser.add_argument("--rounds", type=int, default=DEFAULTS["rounds"],
                        help="runs per configuration (default %(default)s)")
    parser.add_argument("--duration", type=int,
                        default=DEFAULTS["duration"],
                        help="seconds per run (default %(default)s)")
    parser.add_argument("--concurrency", type=int,
                        default=DEFAULTS["concurrency"],
                        help="wrk connections (default %(default)s)")
    parser.add_argument("--slots", type=int, default=DEFAULTS["slots"],
                        help="children of every server, all started up "
                             "front (default %(default)s)")
    parser.add_argument("--threads", type=int, default=DEFAULTS["threads"],
                        help="wrk threads (default %(default)s)")
    parser.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    parser.add_argument("--out", help="results directory (default "
                                      "bench/results/overhead-<timestamp>)")


def check_arguments(parser, args):
    if args.rounds < 1 or args.duration < 1 or args.threads < 1 \
            or args.concurrency < args.threads or args.slots < 1:
        parser.error("--rounds, --duration, --threads and --slots must be "
                     "at least 1, --concurrency at least --threads")
    if not shutil.which(args.wrk):
        parser.error(f"wrk not found ({args.wrk}): apt-get install wrk")


def _measure(server, args, scrape):
    script = os.path.join(server.workdir, "wrk.lua")
    if not os.path.exists(script):
        with open(script, "w") as handle:
            handle.write(load.lua_script(server.ports))
    command = load.wrk_command(
        args.wrk, ports=server.ports, connections=args.concurrency,
        threads=args.threads, duration_s=args.duration, timeout_s=2,
        keep_alive=False, script_path=script)
    cpu_before = procfs.cpu_seconds(server.pid,
                                    procfs.process_tree(server.pid))
    scraper = Scraper(server.ports[0])
    if scrape:
        with scraper:
            result, _ = load.run_wrk(command, args.duration,
                                     os.path.join(server.workdir, "wrk.log"))
    else:
        result, _ = load.run_wrk(command, args.duration,
                                 os.path.join(server.workdir, "wrk.log"))
    if not server.alive():
        raise ServerError(f"{server.spec.name} died during the run")
    result["server_cpu_s"] = procfs.cpu_seconds(
        server.pid, procfs.process_tree(server.pid)) - cpu_before
    result["scrapes"] = {"ok": scraper.ok, "failed": scraper.failed}
    return result


def summarize(records):
    """Per variant: req/s statistics, server CPU per request, and the
    per-round ratios of its req/s and of its CPU per request to the
    baseline's (pairing runs of one round cancels the machine's drift)."""
    rps, cpu = {}, {}
    for record in records:
        rounds = rps.setdefault(record["variant"], {})
        rounds[record["round"]] = record["rps"] if record["ok"] else None
        cpu.setdefault(record["variant"], {})[record["round"]] = \
            stats.per_thousand(record["server_cpu_s"], record["requests"]) \
            if record["ok"] else None
    summary = {}
    for variant in VARIANTS:
        rounds = rps.get(variant.name, {})
        cpu_rounds = cpu.get(variant.name, {})
        summary[variant.name] = {
            "title": variant.title,
            "rps": stats.summarize(list(rounds.values())),
            "server_cpu_ms_per_request": stats.median(
                [v for v in cpu_rounds.values() if v is not None]),
            "ratio_to_off": stats.summarize(stats.round_ratios(
                rounds, rps.get(BASELINE, {}))),
            "cpu_ratio_to_off": stats.summarize(stats.round_ratios(
                cpu_rounds, cpu.get(BASELINE, {}))),
        }
    return summary


def render_markdown(meta, summary):
    lines = [
        f"{meta['rounds']} interleaved rounds, {meta['duration_s']} s of wrk "
        f"each, c={meta['concurrency']}, {meta['threads']} wrk threads, "
        f"`Connection: close`, {meta['slots']} children per server; "
        f"{meta['wall_time_s'] / 60:.1f} min.",
        "",
        "| configuration | runs | req/s min | median | max | stddev "
        "| req/s ratio to off | server CPU ms/request | CPU ratio to off |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def num(value, fmt="{:,.0f}"):
        return "-" if value is None else fmt.format(value)
    for point in summary.values():
        rps = point["rps"]
        lines.append(
            f"| {point['title']} | {rps['n']} | {num(rps['min'])} "
            f"| {num(rps['median'])} | {num(rps['max'])} "
            f"| {num(rps['stddev'])} "
            f"| {num(point['ratio_to_off']['median'], '{:.3f}')} "
            f"| {num(point['server_cpu_ms_per_request'], '{:.4f}')} "
            f"| {num(point['cpu_ratio_to_off']['median'], '{:.3f}')} |")
    lines += ["", "Ratios: medians of the per-round ratios to the same "
              "round's off run. CPU: the server's processes, per request."]
    return "\n".join(lines) + "\n"


def run(base_tools, scratch, args):
    """Runs the plan; writes overhead.json and overhead.md to args.out and
    prints the table. The exit status."""
    out = args.out or os.path.join(
        BENCH_DIR, "results", time.strftime("overhead-%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    servers = []
    began = time.monotonic()
    try:
        frozen = base_tools.freeze_bucketed(scratch)
        for variant in VARIANTS:
            spec = ServerSpec(f"bucketed-{variant.name}", variant.title,
                              "httpd", "bucketed",
                              METRICS_DIRECTIVES if variant.status_module
                              else ())
            workdir = os.path.join(scratch, variant.name)
            os.makedirs(workdir)
            server = Server(spec, NATIVE, free_ports(1), workdir,
                            _Tools(base_tools, variant.status_module))
            server.launch()
            servers.append((variant, server))
        for variant, server in servers:
            server.wait_ready()
            # Warm-up, not recorded.
            _measure(server, args, variant.scrape)
        meta = {"started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "rounds": args.rounds, "duration_s": args.duration,
                "concurrency": args.concurrency, "threads": args.threads,
                "slots": args.slots,
                "machine": {key: value for key, value in
                            environment.machine_facts(base_tools).items()
                            if key != "nginx"},
                "bucketed_modules": frozen}
        records = []
        for round_no in range(args.rounds):
            shift = round_no % len(servers)
            for variant, server in servers[shift:] + servers[:shift]:
                record = {"variant": variant.name, "round": round_no}
                try:
                    record.update(_measure(server, args, variant.scrape),
                                  ok=True)
                except (load.LoadError, ServerError) as error:
                    record.update(ok=False, error=str(error))
                records.append(record)
                print(f"round {round_no + 1}/{args.rounds} {variant.name}: "
                      f"{record.get('rps', 0):,.0f} req/s"
                      + ("" if record["ok"] else f" FAILED {record['error']}"),
                      file=sys.stderr)
    finally:
        for _, server in servers:
            server.stop()
    meta["wall_time_s"] = time.monotonic() - began
    meta["load_average_at_end"] = environment.load_average()
    summary = summarize(records)
    with open(os.path.join(out, "overhead.json"), "w") as handle:
        json.dump({"meta": meta, "summary": summary, "runs": records},
                  handle, indent=1)
    table = render_markdown(meta, summary)
    with open(os.path.join(out, "overhead.md"), "w") as handle:
        handle.write(table)
    print(table)
    print(f"results in {out}", file=sys.stderr)
    return 0 if all(r["ok"] for r in records) else 1


def headline(summary):
    """The overhead's figure for the results tables: the metrics scraped
    every second against off, the median of same-round ratios and their
    range."""
    ratio = summary["scraped"]["ratio_to_off"]
    if ratio["median"] is None:
        return "no round measured"
    return (f"{ratio['median']:.3f}x ({ratio['min']:.3f}-"
            f"{ratio['max']:.3f}x) off's req/s")
