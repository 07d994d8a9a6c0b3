# SPDX-License-Identifier: Apache-2.0
"""The steering rows side by side (issue 10): per kernel level, workload and
concurrency, bucketed with BucketSteering hash (the bucketed-reuseport row),
cpu and load against each other, stock prefork and one shared queue
(bucketed-single). Every ratio is the median of ratios taken round by round,
so the drift of a shared machine between rounds cancels.

Issue 10's targets read from these tables: W1 and W2 at c=1000 p99 at most
0.5x stock prefork's and at most single's, req/s at least 1.6x stock
prefork's; on the skewed-slow workload load steering's p99 well below the
hash's."""

from . import stats
from .catalog import WORKLOADS

HASH = "bucketed-reuseport"
STEERED = ("bucketed-cpu", "bucketed-load")
# The rows the steered ones are compared with, and their column names.
BASELINES = ((HASH, "hash"), ("prefork", "prefork"),
             ("bucketed-single", "single"))


def _by_round(point, key):
    return {run["round"]: run[key] for run in point["by_round"]}


def round_ratio(point, baseline, key):
    """Median over the rounds of point's key (rps or p99) / baseline's, or
    None when no round has both."""
    if point is None or baseline is None:
        return None
    return stats.median(stats.round_ratios(_by_round(point, key),
                                           _by_round(baseline, key)))


def _ratio_text(value):
    return "–" if value is None else f"{value:.2f}x"


def _ms(value):
    return "n/a" if value is None else f"{value:,.1f}"


def steering_rows(points):
    """{(level, workload, concurrency): [row]} where the hash row and at
    least one steered row ran; each row: server, label, median req/s and
    p99 (ms), and for each baseline present the median same-round ratios
    of req/s and of p99 (keys rps_vs_NAME, p99_vs_NAME)."""
    groups = {}
    for p in points:
        key = (p["kernel_level"], p["workload"], p["concurrency"])
        groups.setdefault(key, {})[p["server"]] = p
    result = {}
    for key, by_server in groups.items():
        if HASH not in by_server or not any(s in by_server for s in STEERED):
            continue
        rows = []
        for server, p in by_server.items():
            row = {"server": server, "label": p["label"],
                   "rps": p["rps"]["median"],
                   "p99": p["latency_ms"]["p99"]}
            for baseline, name in BASELINES:
                if baseline == server or baseline not in by_server:
                    continue
                row[f"rps_vs_{name}"] = round_ratio(p, by_server[baseline],
                                                    "rps")
                row[f"p99_vs_{name}"] = round_ratio(p, by_server[baseline],
                                                    "p99")
            rows.append(row)
        result[key] = rows
    return result


def section(points, options, heading="##"):
    """Markdown: one table per kernel level, workload and concurrency with
    steered rows; empty when there are none."""
    rows_by_key = steering_rows(points)
    if not rows_by_key:
        return ""
    names = [name for _, name in BASELINES]
    lines = [f"{heading} Steering side by side (issue 10)", "",
             "bucketed-reuseport is BucketSteering hash (the kernel's "
             "reuseport hash); bucketed-cpu and bucketed-load the eBPF "
             "programs. Ratios: medians of same-round ratios (req/s: "
             "higher is better; p99: lower is better); – where the row is "
             "its own baseline or the baseline did not run.", ""]
    header = ["Configuration", "req/s", *(f"req/s vs {n}" for n in names),
              "p99 ms", *(f"p99 vs {n}" for n in names)]
    for (level, workload, concurrency), rows in rows_by_key.items():
        lines += [f"{heading}# {workload} ({WORKLOADS[workload].title}), "
                  f"{level}, c={concurrency}", "",
                  "| " + " | ".join(header) + " |",
                  "|" + "|".join("---" for _ in header) + "|"]
        for row in rows:
            cells = [row["label"], f"{row['rps']:,.0f}"
                     if row["rps"] is not None else "n/a"]
            cells += [_ratio_text(row.get(f"rps_vs_{n}")) for n in names]
            cells.append(_ms(row["p99"]))
            cells += [_ratio_text(row.get(f"p99_vs_{n}")) for n in names]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
