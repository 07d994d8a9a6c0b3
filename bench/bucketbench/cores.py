# SPDX-License-Identifier: Apache-2.0
"""bench/run --server-cores: how each server scales with the cores it
gets. The plan ran once per count, in results directories cores-N; this
reads their summaries and writes, beside them, cores.json (one row per
count and point), cores.md (a table per workload and concurrency: req/s,
p99 and server CPU per request against cores) and a plot per table
(plot-cores-<level>-<workload>-c<N>.png)."""

import json
import os

from . import markdown
from .catalog import WORKLOADS


def _summary(out_dir, count):
    with open(os.path.join(out_dir, f"cores-{count}", "summary.json")) as f:
        return json.load(f)


def rows(per_count):
    """One row per core count and measured point of the throughput kind
    (faults and restarts have no req/s to scale): {count: summary}."""
    table = []
    for count, summary in per_count.items():
        for point in summary["points"]:
            workload = WORKLOADS.get(point["workload"])
            if workload is None or workload.fault or workload.restart \
                    or not point.get("rps"):
                continue
            table.append({
                "cores": count, "kernel_level": point["kernel_level"],
                "workload": point["workload"],
                "concurrency": point["concurrency"],
                "idle_connections": point.get("idle_connections"),
                "server": point["server"], "label": point["label"],
                "rps": point["rps"]["median"],
                "p99_ms": (point.get("latency_ms") or {}).get("p99"),
                # Server CPU seconds per 1,000 requests is CPU ms per
                # request.
                "cpu_ms_per_request": point.get("server_cpu_s_per_1k"),
                "errors": sum((point.get("errors") or {}).values()),
            })
    return table


def groups(table):
    """{(level, workload, concurrency, idle): rows} in running order."""
    grouped = {}
    for row in table:
        key = (row["kernel_level"], row["workload"], row["concurrency"],
               row["idle_connections"])
        grouped.setdefault(key, []).append(row)
    return grouped


def _cell(row):
    def number(value, digits):
        return "n/a" if value is None else f"{value:,.{digits}f}"
    return (f"{number(row['rps'], 0)} / {number(row['p99_ms'], 1)} / "
            f"{number(row['cpu_ms_per_request'], 3)}")


def group_title(key):
    level, workload, concurrency, idle = key
    idle_text = f", {idle:,} idle" if idle else ""
    return (f"{workload.upper()} {WORKLOADS[workload].title}, {level}, "
            f"c={concurrency}{idle_text}")


def plot_name(key):
    level, workload, concurrency, idle = key
    idle_text = f"-i{idle}" if idle else ""
    return f"plot-cores-{level}-{workload}-c{concurrency}{idle_text}.png"


def render(table, counts, heading="##", plots=None):
    """cores.md's text: a table per group, servers down, core counts
    across, each cell 'req/s / p99 ms / CPU ms per request'."""
    lines = [f"{heading} Against the server's cores", "",
             "Each cell: median req/s / p99 ms (median of runs) / server "
             "CPU ms per request. The servers ran on the first N CPUs of "
             "--server-cpus with BucketCount N (nginx: N workers); the "
             "load tools on --client-cpus.", ""]
    for key, group in groups(table).items():
        lines += [f"{heading}# {group_title(key)}", ""]
        if plots and key in plots:
            lines += [f"![{group_title(key)}]({plots[key]})", ""]
        servers = list(dict.fromkeys(row["label"] for row in group))
        by_cell = {(row["label"], row["cores"]): row for row in group}
        header = ["server"] + [f"{count} core{'s' * (count != 1)}"
                               for count in counts]
        body = [[label] + [_cell(by_cell[(label, count)])
                           if (label, count) in by_cell else "n/a"
                           for count in counts] for label in servers]
        lines += [markdown.table(header, body), ""]
    return "\n".join(lines)


def write(out_dir, counts):
    """cores.json, cores.md and the plots of a sweep in out_dir."""
    # matplotlib only here: the other commands run without it.
    from . import plots
    per_count = {count: _summary(out_dir, count) for count in counts}
    table = rows(per_count)
    with open(os.path.join(out_dir, "cores.json"), "w") as handle:
        json.dump({"schema": "bucketbench.cores/1", "counts": counts,
                   "rows": table}, handle, indent=1)
    images = {}
    for key, group in groups(table).items():
        images[key] = plot_name(key)
        plots.plot_cores(os.path.join(out_dir, images[key]), group,
                         group_title(key))
    with open(os.path.join(out_dir, "cores.md"), "w") as handle:
        handle.write(render(table, counts, "#", images) + "\n")
