# SPDX-License-Identifier: Apache-2.0
"""PNG plots, one per kernel level and workload: req/s against concurrency
with min-max bars, and p99 latency against concurrency."""

import matplotlib

matplotlib.use("Agg")   # files only; no display on a build machine
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from .catalog import WORKLOADS  # noqa: E402
from .report import level_title  # noqa: E402


def _series(points, concurrencies):
    """label -> lists over concurrencies of (median, min, max, p99)."""
    series = {}
    for point in points:
        entry = series.setdefault(point["label"], {})
        entry[point["concurrency"]] = point
    result = {}
    for label, by_c in series.items():
        present = [c for c in concurrencies if c in by_c
                   and by_c[c]["rps"]["median"] is not None]
        result[label] = {
            "x": [concurrencies.index(c) for c in present],
            "median": [by_c[c]["rps"]["median"] for c in present],
            "min": [by_c[c]["rps"]["min"] for c in present],
            "max": [by_c[c]["rps"]["max"] for c in present],
            "p99": [by_c[c]["latency_ms"]["p99"] for c in present],
        }
    return result


def plot_workload(path, points, level, workload, concurrencies):
    """Writes one PNG for the points of one kernel level and workload."""
    series = _series(points, concurrencies)
    figure, (rps_axis, p99_axis) = plt.subplots(1, 2, figsize=(13, 5.2))
    # Concurrencies sit at even steps: the sweep is roughly geometric and a
    # linear axis would crowd the low end.
    positions = range(len(concurrencies))
    for offset, (label, data) in enumerate(series.items()):
        # Shift each server a little so the min-max bars do not overlap.
        shift = (offset - (len(series) - 1) / 2) * 0.03
        xs = [x + shift for x in data["x"]]
        below = [m - lo for m, lo in zip(data["median"], data["min"])]
        above = [hi - m for m, hi in zip(data["median"], data["max"])]
        rps_axis.errorbar(xs, data["median"], yerr=[below, above],
                          marker="o", capsize=3, label=label)
        p99 = [(x, v) for x, v in zip(xs, data["p99"]) if v is not None]
        if p99:
            p99_axis.plot(*zip(*p99), marker="o", label=label)
    for axis in (rps_axis, p99_axis):
        axis.set_xlim(-0.5, len(concurrencies) - 0.5)
        axis.set_xticks(list(positions))
        axis.set_xticklabels([str(c) for c in concurrencies])
        axis.set_xlabel("concurrent connections")
        axis.grid(True, alpha=0.3)
    rps_axis.set_ylabel("requests/s (median, bars: min-max)")
    rps_axis.set_ylim(bottom=0)
    p99_axis.set_ylabel("p99 latency, ms (median of runs)")
    p99_axis.set_yscale("log")
    title = f"{workload.upper()} {WORKLOADS[workload].title} — " \
            f"kernel {level_title(level)}"
    figure.suptitle(title)
    handles, labels = rps_axis.get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    figure.tight_layout(rect=(0, 0.13, 1, 0.95))
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_cores(path, rows, title):
    """Writes one PNG of a --server-cores sweep (cores.py rows of one
    workload and concurrency): req/s, p99 and server CPU per request
    against the server's cores, a line per server."""
    figure, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    metrics = (("rps", "requests/s (median)", False),
               ("p99_ms", "p99 latency, ms (median of runs)", True),
               ("cpu_ms_per_request", "server CPU ms per request", False))
    counts = sorted({row["cores"] for row in rows})
    for label in dict.fromkeys(row["label"] for row in rows):
        mine = sorted((row for row in rows if row["label"] == label),
                      key=lambda row: row["cores"])
        for axis, (key, _, _) in zip(axes, metrics):
            points = [(row["cores"], row[key]) for row in mine
                      if row[key] is not None]
            if points:
                axis.plot(*zip(*points), marker="o", label=label)
    for axis, (_, name, log_scale) in zip(axes, metrics):
        axis.set_xlabel("server cores (BucketCount)")
        axis.set_ylabel(name)
        axis.set_xticks(counts)
        axis.grid(True, alpha=0.3)
        if log_scale:
            axis.set_yscale("log")
        else:
            axis.set_ylim(bottom=0)
    figure.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    figure.tight_layout(rect=(0, 0.13, 1, 0.95))
    figure.savefig(path, dpi=90)
    plt.close(figure)
