# SPDX-License-Identifier: Apache-2.0
"""From raw run records to summary.json and report.md."""

import json
from collections import defaultdict

from . import (faults, idle, limit, markdown, restart, stats, steering,
               users)
from .catalog import (IDLE_BASELINE, IDLE_TARGET_SERVERS, KERNEL_LEVELS,
                      NATIVE, RATIO_BASELINES, SHORT_NAMES, TARGET_SERVERS,
                      WORKLOADS)

LATENCY_KEYS = ("p50", "p90", "p99", "p99.9", "max")
ERROR_KINDS = ("connect", "read", "write", "timeout", "non_2xx")
SUMMARY_SCHEMA = "bucketbench.summary/1"


def _point_key(record):
    """(level, workload, concurrency, limits, idle count, rate, server):
    the idle workload's limits, idle count and paced rate are None for the
    others (and in the records of runs before they existed); the rate is
    None too for an idle run not paced."""
    return (record["kernel_level"], record["workload"],
            record["concurrency"], record.get("limits"),
            record.get("idle_connections"), record.get("rate"),
            record["server"])


def _median_of(runs, extract):
    return stats.median([v for v in (extract(r) for r in runs)
                         if v is not None])


def _bucket_summary(runs):
    """Per-bucket accepted connections summed over the runs, and the median
    of the runs' spreads."""
    with_buckets = [r["buckets"] for r in runs if r.get("buckets")]
    if not with_buckets:
        return None
    accepted = {}
    for snapshot in with_buckets:
        for bucket in snapshot["buckets"]:
            entry = accepted.setdefault(bucket["bucket"], {
                "bucket": bucket["bucket"], "listen": bucket.get("listen"),
                "accepted": 0})
            entry["accepted"] += bucket["accepted"]
            # Children move between buckets: the last run's end shows where
            # they went.
            entry["children_at_end"] = bucket.get("children")
    latest = with_buckets[-1]
    return {"strategy": latest["strategy"],
            "bucket_count": latest["bucket_count"],
            "accepted": [accepted[b] for b in sorted(accepted)],
            "spread_median": stats.median(
                [s["spread"] for s in with_buckets
                 if s["spread"] is not None])}


def _point_head(runs):
    """What every point says: where, what, how many runs, what failed."""
    first = runs[0]
    return {
        "kernel_level": first["kernel_level"],
        "emulated": first["kernel_level"] != NATIVE,
        "workload": first["workload"],
        "concurrency": first["concurrency"], "server": first["server"],
        "label": first["label"], "runs": len(runs),
        "ok_runs": sum(1 for r in runs if r["ok"]),
        "failures": [{"round": r["round"], "error": r["error"],
                      "error_log_tail": r["error_log_tail"]}
                     for r in runs if not r["ok"]],
        "restarts": [{"round": r["round"],
                      "log_before_restart": r["log_before_restart"]}
                     for r in runs if r["ok"] and r["restarted"]]}


def _summarize_fault_point(runs):
    """A faults workload's point: the head, the fault's summary
    (faults.summarize_runs) and the hang's loaded req/s as rps."""
    point = _point_head(runs)
    good = [r for r in runs if r["ok"]]
    point["fault"] = faults.summarize_runs(runs)
    point["rps"] = stats.summarize([r.get("rps") for r in good])
    point["by_round"] = [{"round": r["round"], "rps": r.get("rps"),
                          "p99": r["fault"]["latency_ms"]["p99"]}
                         for r in good]
    return point


def _summarize_restart_point(runs):
    """A restart workload's point: the head, the restarts' summary
    (restart.summarize_runs), req/s for the same-round ratios."""
    point = _point_head(runs)
    good = [r for r in runs if r["ok"]]
    point["restart_point"] = True
    point["restart"] = restart.summarize_runs(runs)
    point["rps"] = stats.summarize([r.get("rps") for r in good])
    point["by_round"] = [{"round": r["round"], "rps": r.get("rps"),
                          "p99": r["latency_ms"]["p99"]
                          if r.get("latency_ms") else None} for r in good]
    return point


def _summarize_point(runs):
    first = runs[0]
    if WORKLOADS[first["workload"]].fault:
        return _summarize_fault_point(runs)
    if WORKLOADS[first["workload"]].restart:
        return _summarize_restart_point(runs)
    good = [r for r in runs if r["ok"]]
    point = {
        "kernel_level": first["kernel_level"],
        "emulated": first["kernel_level"] != NATIVE,
        "workload": first["workload"],
        "concurrency": first["concurrency"], "server": first["server"],
        "limits": first.get("limits"),
        "idle_connections": first.get("idle_connections"),
        "rate": first.get("rate"),
        "label": first["label"], "runs": len(runs), "ok_runs": len(good),
        "failures": [{"round": r["round"], "error": r["error"],
                      "error_log_tail": r["error_log_tail"]}
                     for r in runs if not r["ok"]],
        "restarts": [{"round": r["round"],
                      "log_before_restart": r["log_before_restart"]}
                     for r in runs if r["ok"] and r["restarted"]],
        "rps": stats.summarize([r["rps"] for r in good]),
        "latency_ms": {key: _median_of(good, lambda r, k=key:
                                       r["latency_ms"][k]
                                       if r["latency_ms"] else None)
                       for key in LATENCY_KEYS},
        "requests": sum(r["requests"] for r in good),
        "success": sum(r["success"] for r in good),
        "errors": {kind: sum(r["errors"][kind] for r in good)
                   for kind in ERROR_KINDS},
        "server_cpu_s_per_1k": _median_of(good, lambda r: stats.per_thousand(
            r["server_cpu_s"], r["requests"])),
        "client_cpu_s_per_1k": _median_of(good, lambda r: stats.per_thousand(
            r["client_cpu_s"], r["requests"])),
        "other_cpu_s": _median_of(good, lambda r: r["other_cpu_s"]),
        # Measured once per point, after its last run.
        "server_pss_mb": _median_of(good, lambda r:
                                    r["server_pss_bytes"] / 2 ** 20
                                    if r["server_pss_bytes"] is not None
                                    else None),
        "server_processes": _median_of(good, lambda r:
                                       r["server_processes"]),
        "buckets": _bucket_summary(good),
        "idle": _idle_summary(good),
        # For ratios of latency taken round by round (steering.py).
        "by_round": [{"round": r["round"], "rps": r["rps"],
                      "p99": r["latency_ms"]["p99"] if r["latency_ms"]
                      else None} for r in good],
    }
    return point


def _idle_summary(runs):
    """The idle workload's numbers over a point's successful runs: medians
    of the memory measurements (MB) and of the memory per idle connection
    (kB), and the fewest connections opened and found open at the end
    (a server that closes idle connections shows there). None for the
    other workloads."""
    held = [r["idle"] for r in runs if r.get("idle")]
    if not held:
        return None

    def med(key, unit):
        return stats.median([h[key] / unit for h in held
                             if h[key] is not None])
    failures = {}
    for entry in held:
        for reason, count in entry["failures"].items():
            failures[reason] = failures.get(reason, 0) + count
    closed = [idle.closed_count(h["opened"], h["open_at_end"])
              for h in held]
    return {"connections": held[0]["connections"],
            "memory_kind": held[0]["memory_kind"],
            "opened_min": min(h["opened"] for h in held),
            # Runs from before it was counted: every opened one.
            "open_with_idle_min": min(h.get("open_with_idle", h["opened"])
                                      for h in held),
            "open_at_end_min": min(h["open_at_end"] for h in held),
            "open_at_end_median": stats.median([h["open_at_end"]
                                                for h in held]),
            "closed_median": stats.median(closed),
            "closed_min": min(closed), "closed_max": max(closed),
            "failures": failures,
            "memory_before_mb": med("memory_before_bytes", 2 ** 20),
            "memory_with_idle_mb": med("memory_with_idle_bytes", 2 ** 20),
            "memory_at_end_mb": med("memory_at_end_bytes", 2 ** 20),
            "per_connection_kb": med("per_connection_bytes", 1024),
            "open_s": med("open_s", 1),
            "held_s_max": max(h["held_s"] for h in held)}


def _by_round(runs, extract):
    """{round: value} of a point's runs; None for failed runs."""
    return {r["round"]: extract(r) if r["ok"] else None for r in runs}


def _rps(record):
    return record["rps"]


def _idle_p99(record):
    return record["latency_ms"]["p99"] if record["latency_ms"] else None


def _idle_per_connection(record):
    return record["idle"]["per_connection_bytes"]


def _idle_ratios(mine, theirs):
    """Same-round ratios of the idle workload's p99 and memory per idle
    connection against a baseline's runs: {measure: {median, per_round}}."""
    ratios = {}
    for key, extract in (("p99", _idle_p99),
                         ("per_connection", _idle_per_connection)):
        per_round = stats.round_ratios(_by_round(mine, extract),
                                       _by_round(theirs, extract))
        ratios[key] = {"median": stats.median(per_round),
                       "per_round": per_round}
    return ratios


def summarize(records):
    """One summary per point (kernel level, workload, concurrency, server),
    with each server's req/s ratios against the baselines taken round by
    round and summarized by their median."""
    grouped = defaultdict(list)
    for record in records:
        grouped[_point_key(record)].append(record)
    points = {key: _summarize_point(runs) for key, runs in grouped.items()}
    for key, point in points.items():
        server = key[-1]
        point["ratios"] = {}
        mine = _by_round(grouped[key], _rps)
        for baseline in RATIO_BASELINES:
            theirs = grouped.get(key[:-1] + (baseline,))
            if theirs is None or baseline == server:
                continue
            per_round = stats.round_ratios(mine, _by_round(theirs, _rps))
            point["ratios"][baseline] = {"median": stats.median(per_round),
                                         "per_round": per_round}
            if point.get("restart_point") and baseline == "event":
                point["p99_vs_event"] = restart.p99_ratios(grouped[key],
                                                           theirs)
            if point.get("idle") and baseline == IDLE_BASELINE:
                point["idle"]["vs_" + baseline] = _idle_ratios(
                    grouped[key], theirs)
        # The same server without idle connections in the same rounds
        # (and at the same rate).
        without = grouped.get(key[:4] + (0,) + key[5:])
        if point.get("idle") and key[4] and without:
            per_round = stats.round_ratios(mine, _by_round(without, _rps))
            point["idle"]["vs_no_idle"] = {
                "median": stats.median(per_round), "per_round": per_round}
    users.annotate(points.values(), records)
    # Records arrive in running order, so the points keep it: level,
    # workload, concurrency, then servers in their interleaving order.
    return list(points.values())


def write_summary(path, meta, points):
    with open(path, "w") as handle:
        json.dump({"schema": SUMMARY_SCHEMA, "meta": meta,
                   "skipped": meta["skipped"], "points": points}, handle,
                  indent=1)


# ---- markdown ----

def _fmt(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _fmt_ms(value):
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:,.1f}" if value < 1000 \
        else f"{value:,.0f}"


def _fmt_ratio(point, baseline):
    ratio = point["ratios"].get(baseline)
    if ratio is None or ratio["median"] is None:
        return "–"
    return f"{ratio['median']:.2f}x"


def _label(point):
    notes = []
    failed = point["runs"] - point["ok_runs"]
    if failed:
        notes.append(f"{failed} of {point['runs']} runs failed")
    if point["restarts"]:
        notes.append(f"restarted {len(point['restarts'])}x")
    return point["label"] + (f" ({', '.join(notes)})" if notes else "")


def throughput_table(points):
    """The req/s table of one point: Configuration | Min | Median | Max |
    Std dev, plus the same-round ratios."""
    rows = [[_label(p), _fmt(p["rps"]["min"]), _fmt(p["rps"]["median"]),
             _fmt(p["rps"]["max"]), _fmt(p["rps"]["stddev"]),
             _fmt_ratio(p, "prefork"), _fmt_ratio(p, "event")]
            for p in points]
    return markdown.table(["Configuration", "Min", "Median", "Max", "Std dev",
                   "vs prefork", "vs event"], rows)


def detail_table(points):
    rows = []
    for p in points:
        errors = "/".join(str(p["errors"][kind]) for kind in ERROR_KINDS)
        rows.append([p["label"]]
                    + [_fmt_ms(p["latency_ms"][k]) for k in LATENCY_KEYS]
                    + [_fmt(p["success"]), errors,
                       _fmt(p["server_cpu_s_per_1k"], 3),
                       _fmt(p["client_cpu_s_per_1k"], 3),
                       _fmt(p["server_pss_mb"], 1)])
    return markdown.table(["Configuration", "p50 ms", "p90 ms", "p99 ms",
                   "p99.9 ms", "max ms", "ok requests",
                   "errors c/r/w/t/non-2xx", "server CPU s/1k req",
                   "client CPU s/1k req", "server PSS MB at end"], rows)


def bucket_table(points):
    rows = []
    for p in points:
        buckets = p["buckets"]
        if not buckets:
            continue
        accepted = ", ".join(
            f"{b['accepted']:,}" + (f" ({b['listen']})" if b["listen"] else "")
            + (f" [{b['children_at_end']} children at end]"
               if b.get("children_at_end") is not None else "")
            for b in buckets["accepted"])
        spread = buckets["spread_median"]
        rows.append([p["label"], buckets["strategy"] or "?",
                     buckets["bucket_count"] if buckets["bucket_count"]
                     is not None else "?",
                     accepted, "n/a" if spread is None else f"{spread:.1%}"])
    if not rows:
        return ""
    return markdown.table(["Configuration", "strategy", "buckets",
                   "accepted per bucket (all runs)",
                   "spread (max-min)/mean, median"], rows)


def sweep_table(points, concurrencies, cell):
    """One row per server, one column per concurrency; cell(point) gives
    the text of a cell."""
    by_server = {}
    for p in points:
        by_server.setdefault(p["label"], {})[p["concurrency"]] = p
    rows = []
    for label, by_c in by_server.items():
        rows.append([label] + [cell(by_c[c]) if c in by_c else "–"
                               for c in concurrencies])
    return markdown.table(["Configuration"] + [f"c={c}" for c in concurrencies],
                  rows)


def level_title(level):
    emulated = "" if level == NATIVE else " (emulated)"
    return f"{level}{emulated}"


def skip_text(entry):
    """One skipped server as a sentence: what, where, why."""
    where = f" at {entry['kernel_level']}" if entry["kernel_level"] else ""
    workloads = entry.get("workloads")
    if workloads:
        where += f" in {', '.join(workloads)}"
    return f"{entry['server']}{where}: {entry['reason']}"


def target_verdicts(points):
    """Issue 8's targets, point by point: for each workload with a
    target_vs_prefork and each server meant to meet it (TARGET_SERVERS),
    the median same-round ratio against stock prefork, the per-round
    ratios, the target and whether the median reaches it (None when there
    is no ratio to judge: no prefork run or no successful run)."""
    verdicts = []
    for p in points:
        target = WORKLOADS[p["workload"]].target_vs_prefork
        if target is None or p["server"] not in TARGET_SERVERS:
            continue
        ratio = p["ratios"].get("prefork") or {}
        median = ratio.get("median")
        verdicts.append({
            "kernel_level": p["kernel_level"], "workload": p["workload"],
            "concurrency": p["concurrency"], "server": p["server"],
            "label": p["label"], "ratio": median,
            "per_round": ratio.get("per_round", []), "target": target,
            "met": None if median is None else median >= target})
    return verdicts


def _verdict_parts(verdict):
    """(state, ratio, spread) texts of a target verdict: met or not, the
    median ratio and the range of the per-round ratios."""
    state = {True: "met", False: "**NOT met**", None: "not judged"}[
        verdict["met"]]
    rounds = verdict["per_round"]
    spread = (f"; rounds {min(rounds):.2f}-{max(rounds):.2f}x"
              if rounds else "")
    # Three decimals: a median of 0.996 must not read as 1.00 and fail.
    ratio = "n/a" if verdict["ratio"] is None else f"{verdict['ratio']:.3f}x"
    return state, ratio, spread


def _verdict_line(verdict):
    state, ratio, spread = _verdict_parts(verdict)
    return (f"- {state}: {verdict['label']}, {verdict['workload']}, "
            f"{level_title(verdict['kernel_level'])} "
            f"c={verdict['concurrency']}: {ratio} stock prefork (target "
            f">= {verdict['target']:.2f}x{spread})")


def _targets_block(verdicts, what, line):
    """The targets paragraph: how many of the verdicts were met, then one
    line(verdict) each; empty without verdicts."""
    if not verdicts:
        return []
    met = sum(1 for v in verdicts if v["met"])
    return ([f"Targets ({what}): {met} of {len(verdicts)} met.", ""]
            + [line(v) for v in verdicts] + [""])


def _errors_cell(point):
    errors = sum(point["errors"].values())
    return f"{errors:,} / {point['success']:,}"


def skew_section(points, options, heading="##",
                 title="Skewed Listen load (issue 8)"):
    """The skewed-Listen workloads side by side: per kernel level and
    concurrency one table per measure (rows: servers, columns: the skew
    workloads), then the targets of issue 8. Empty without skew points."""
    names = [n for n in options["workloads"] if WORKLOADS[n].skewed]
    skew = [p for p in points if p["workload"] in names]
    if not skew:
        return ""
    lines = [f"{heading} {title}", "",
             f"Two Listen ports; wrk's {WORKLOADS[names[0]].wrk_threads} "
             "threads share the connections between them (all: every "
             "thread on the first port; 90/10: 9 threads and 1; even: 5 "
             "and 5). Static: the 15-byte file with --slots "
             f"{options['slots']} request slots per server; slow: a page "
             "that sleeps 50 ms in the serving process, with --slow-slots "
             f"{options.get('slow_slots')}. Columns are the workloads.", ""]
    measures = (
        ("Median of same-round req/s ratios against stock prefork "
         "(median req/s):",
         lambda p: f"{_fmt_ratio(p, 'prefork')} ({_fmt(p['rps']['median'])})"
         if p["server"] != "prefork" else f"– ({_fmt(p['rps']['median'])})"),
        ("Median p99 latency, ms:", lambda p: _fmt_ms(p["latency_ms"]["p99"])),
        ("Errors (connect+read+write+timeout+non-2xx) / successful "
         "responses, all rounds:", _errors_cell),
    )
    for level, concurrency, at in _groups(skew, options, "concurrency"):
        present = [n for n in names if any(p["workload"] == n for p in at)]
        lines += [f"{heading}# {level_title(level)}, c={concurrency}", ""]
        for title, cell in measures:
            lines += [title, "", _cross_table(at, present, cell), ""]
    lines += _targets_block(
        target_verdicts(skew), "bucketed >= stock prefork on every split, "
        "the even static split >= 1.5x; medians of same-round ratios",
        _verdict_line)
    return "\n".join(lines)


def _idle_count(point):
    return point["idle"]["connections"]


def _errors_by_kind(point):
    """Errors by kind (c/r/w/t/non-2xx) / successful responses."""
    kinds = "/".join(f"{point['errors'][kind]:,}" for kind in ERROR_KINDS)
    return f"{kinds} / {point['success']:,}"


def _closed_cell(held):
    low, high = held["closed_min"], held["closed_max"]
    spread = "" if low == high else f" ({low:,}-{high:,})"
    return f"{held['closed_median']:,.0f}{spread}"


def idle_table(points):
    """One row per idle count and server of an idle-workload group: the
    active load and the server's memory without and with the idle
    connections held."""
    rows = []
    for p in points:
        held = p["idle"]
        if not held:
            continue
        rows.append([
            f"{held['connections']:,}", _label(p), _fmt(p["rps"]["median"]),
            _fmt_ms(p["latency_ms"]["p99"]), _errors_cell(p),
            f"{held['open_with_idle_min']:,} / "
            f"{held['open_at_end_min']:,}",
            _fmt(held["memory_before_mb"], 1),
            _fmt(held["memory_with_idle_mb"], 1),
            _fmt(held["memory_at_end_mb"], 1),
            _fmt(held["per_connection_kb"], 2),
            _fmt_idle_ratio((held.get("vs_" + IDLE_BASELINE) or {})
                            .get("per_connection")),
            _fmt(held["open_s"], 1)])
    kind = next((p["idle"]["memory_kind"].upper() for p in points
                 if p["idle"]), "PSS")
    return markdown.table(["idle", "Configuration", "active req/s", "active p99 ms",
                   "errors / ok responses",
                   "idle open after opening / at end (fewest)",
                   f"{kind} before MB", f"{kind} with idle MB",
                   f"{kind} at end MB", "per idle connection kB",
                   "per idle connection vs stock event", "opening s"], rows)


def idle_side_by_side(points):
    """One row per idle count and server of an idle-workload group: the
    active load beside the idle connections, its same-round ratios against
    stock event and against the server's own runs without idle
    connections, and the idle connections the server closed."""
    rows = []
    for p in points:
        held = p["idle"]
        against = held.get("vs_" + IDLE_BASELINE) or {}
        rows.append([
            f"{held['connections']:,}", _label(p), _fmt(p["rps"]["median"]),
            _fmt_idle_ratio(p["ratios"].get(IDLE_BASELINE)),
            _fmt_idle_ratio(held.get("vs_no_idle")),
            _fmt_ms(p["latency_ms"]["p50"]), _fmt_ms(p["latency_ms"]["p99"]),
            _fmt_idle_ratio(against.get("p99")), _errors_by_kind(p),
            f"{held['opened_min']:,} / {held['connections']:,}",
            _closed_cell(held)])
    return markdown.table(["idle", "Configuration", "active req/s",
                   "req/s vs stock event", "req/s vs own at 0 idle",
                   "active p50 ms", "active p99 ms", "p99 vs stock event",
                   "wrk errors c/r/w/t/non-2xx / ok",
                   "idle opened (fewest) / asked",
                   "idle closed, median (range)"], rows)


def _fmt_idle_ratio(ratio):
    if not ratio or ratio["median"] is None:
        return "–"
    rounds = ratio["per_round"]
    return (f"{ratio['median']:.3f}x ({min(rounds):.3f}-"
            f"{max(rounds):.3f}x)")


# The idle workload's ratio targets (issue 9: p99 and memory; issue 19:
# req/s against stock event and against the server's own runs without idle
# connections, p99): measure -> (what, against what, comparison, target).
IDLE_RATIO_TARGETS = {
    "rps": ("active req/s", "stock event's", ">=", 1.0),
    "rps_no_idle": ("active req/s", "its own without idle connections",
                    ">=", 0.8),
    "p99": ("active-load p99", "stock event's", "<=", 1.0),
    "per_connection": ("memory per idle connection", "stock event's", "<=",
                       1.0),
}


def _idle_ratio(point, measure):
    """The {median, per_round} same-round ratio a target judges, or {}."""
    held = point["idle"]
    if measure == "rps":
        return point["ratios"].get(IDLE_BASELINE) or {}
    if measure == "rps_no_idle":
        return held.get("vs_no_idle") or {}
    return (held.get("vs_" + IDLE_BASELINE) or {}).get(measure) or {}


# Targets a paced run does not judge: its rate is the one asked.
PACED_UNJUDGED = ("rps", "rps_no_idle")


def _verdict_head(point):
    limits = point.get("limits")
    return {"kernel_level": point["kernel_level"],
            "concurrency": point["concurrency"], "server": point["server"],
            "label": point["label"], "limits": limits,
            "idle": _idle_count(point), "rate": point.get("rate")}


def idle_verdicts(points):
    """The idle workload's targets for IDLE_TARGET_SERVERS at every idle
    count above 0: the ratios of IDLE_RATIO_TARGETS (medians of same-round
    ratios; met None: not judged), fewer idle connections closed than the
    baseline (median over the runs; none closed also meets it), and with
    --limits slots none closed at all (in any run). Where the baseline
    answered no request of the active load in any run, it has no req/s or
    p99 to divide by: a server that answered some meets those targets.
    A paced point (--rate) is judged on all but its req/s
    (PACED_UNJUDGED)."""
    by_key = {(p["kernel_level"], p["concurrency"], p.get("limits"),
               _idle_count(p), p.get("rate"), p["server"]): p
              for p in points if p.get("idle")}
    verdicts = []
    for key, p in by_key.items():
        if p["server"] not in IDLE_TARGET_SERVERS or not key[3]:
            continue
        theirs = by_key.get(key[:5] + (IDLE_BASELINE,))
        unanswered = theirs is not None and theirs["success"] == 0 \
            and p["success"] > 0
        for measure, (_, _, comparison, target) in \
                IDLE_RATIO_TARGETS.items():
            if p.get("rate") and measure in PACED_UNJUDGED:
                continue
            ratio = _idle_ratio(p, measure)
            median = ratio.get("median")
            met = None if median is None else (
                median >= target if comparison == ">=" else median <= target)
            baseline_unanswered = unanswered and measure in ("rps", "p99")
            verdicts.append({**_verdict_head(p), "measure": measure,
                             "ratio": median,
                             "per_round": ratio.get("per_round", []),
                             "met": True if baseline_unanswered else met,
                             "baseline_unanswered": baseline_unanswered})
        ours = p["idle"]["closed_median"]
        baseline = theirs["idle"]["closed_median"] if theirs else None
        verdicts.append({**_verdict_head(p), "measure": "closed",
                         "closed": ours, "baseline_closed": baseline,
                         "met": None if baseline is None
                         else ours < baseline or ours == 0})
        if p.get("limits") == idle.SLOTS_LIMITS:
            verdicts.append({**_verdict_head(p), "measure": "none_closed",
                             "closed": p["idle"]["closed_max"],
                             "met": p["idle"]["closed_max"] == 0})
    return verdicts


def _idle_verdict_line(verdict):
    where = (f"{verdict['label']}, {_limits_title(verdict['limits'])}, "
             f"{verdict['idle']:,} idle, "
             f"{level_title(verdict['kernel_level'])} "
             f"c={verdict['concurrency']}{_paced_text(verdict.get('rate'))}")
    measure = verdict["measure"]
    state = {True: "met", False: "**NOT met**", None: "not judged"}[
        verdict["met"]]
    if measure == "closed":
        baseline = "n/a" if verdict["baseline_closed"] is None \
            else f"{verdict['baseline_closed']:,.0f}"
        return (f"- {state}: {where}, idle connections closed: "
                f"{verdict['closed']:,.0f} against stock event's {baseline}"
                f" (medians; target: fewer, or none)")
    if measure == "none_closed":
        return (f"- {state}: {where}, idle connections closed with room for "
                f"all of them: {verdict['closed']:,} in the worst run "
                f"(target: none before KeepAliveTimeout)")
    what, against, comparison, target = IDLE_RATIO_TARGETS[measure]
    if verdict["baseline_unanswered"]:
        return (f"- {state}: {where}, {what}: stock event answered no "
                f"request of the active load (target {comparison} "
                f"{target:.2f}x {against})")
    _, ratio, spread = _verdict_parts(verdict)
    return (f"- {state}: {where}, {what}: {ratio} {against} (target "
            f"{comparison} {target:.2f}x{spread})")


def _limits_title(limits):
    if limits == idle.DEFAULT_LIMITS:
        return "default limits"
    if limits == idle.SLOTS_LIMITS:
        return "--slots limits"
    return "limits not recorded"


def _paced_text(rate):
    """How a heading or target line names a paced rate ('' for None)."""
    return "" if rate is None else f", paced at {rate:,} req/s"


def _idle_groups(points, options):
    """(level, limits, concurrency, rate, points ordered by idle count,
    servers in running order) in the order of the options; runs from
    before --limits have limits None, runs not paced (or from before
    --rate) rate None."""
    for level, concurrency, at in _groups(points, options, "concurrency"):
        for limits in options.get("limits") or [None]:
            for rate in options.get("rates") or [None]:
                group = [p for p in at if p.get("limits") == limits
                         and p.get("rate") == rate]
                if group:
                    yield level, limits, concurrency, rate, sorted(
                        group, key=_idle_count)


def idle_section(points, options, heading="##",
                 title="Idle keep-alive connections beside an active load "
                       "(issue 9)"):
    """The idle workload: per kernel level, limits and concurrency the
    active load beside each idle count (idle_side_by_side) and the memory
    (idle_table), then the targets of issues 9 and 19. Empty without idle
    points."""
    held = [p for p in points if p.get("idle")]
    if not held:
        return ""
    counts = sorted({_idle_count(p) for p in held})
    slots = options["slots"]
    lines = [f"{heading} {title}", "",
             f"Each run: the server started fresh and warmed up; its memory "
             f"(sum over its processes) measured; "
             f"{', '.join(f'{c:,}' for c in counts)} keep-alive "
             f"connections (one count per run, every count in every round) "
             f"opened, each sending one GET and reading the answer, then "
             f"held idle; the memory measured again; wrk's active "
             f"keep-alive load for {options['duration_s']} s; then how "
             f"many idle connections the server had closed. Limits: "
             f"`slots` = {slots:,} request slots and room for every idle "
             f"connection; `default` = no capacity directives. Per idle "
             f"connection = (with idle - before) / idle connections still "
             f"open then (a server at its limits may have closed some "
             f"while they opened). "
             f"Medians over {options['runs']} runs; ratios are medians of "
             f"same-round ratios (range over rounds); errors summed.", ""]
    if any(p.get("rate") for p in held):
        lines += ["Paced: wrk's threads send on fixed schedules that add up "
                  "to the rate asked (`--rate`); active req/s is the rate "
                  "achieved, and the latencies start when wrk writes a "
                  "request, not when it was due.", ""]
    for level, limits, concurrency, rate, at in _idle_groups(held, options):
        limits_text = _limits_title(limits)
        if limits == idle.SLOTS_LIMITS:
            limits_text = f"{slots:,} slots"
        lines += [f"{heading}# {level_title(level)}, {limits_text}, "
                  f"c={concurrency} active{_paced_text(rate)}", "",
                  idle_side_by_side(at), "",
                  "Memory:", "",
                  idle_table([p for p in at if _idle_count(p)]), ""]
    lines += _targets_block(
        idle_verdicts(held), "issue 9: p99 of the active load and memory "
        "per idle connection each <= stock event's; issue 19: active req/s "
        ">= stock event's and >= 0.8x its own without idle connections, "
        "fewer idle connections closed than stock event, none with room "
        "for all", _idle_verdict_line)
    return "\n".join(lines)


def _cross_table(points, workloads, cell):
    """Rows: servers (labels, in running order); columns: workloads."""
    by_label = {}
    for p in points:
        by_label.setdefault(p["label"], {})[p["workload"]] = p
    rows = [[label] + [cell(by_w[w]) if w in by_w else "–"
                       for w in workloads]
            for label, by_w in by_label.items()]
    return markdown.table(["Configuration"] + list(workloads), rows)


def _log_block(tail):
    if not tail:
        return []
    return ["", "  ```", *("  " + line for line in tail.splitlines()),
            "  ```"]


def _failures_section(points):
    """Failed runs, and servers found down and restarted, with log tails."""
    lines = []
    for p in points:
        where = f"{p['kernel_level']} {p['workload']} c={p['concurrency']} " \
                f"{p['server']}"
        for failure in p["failures"]:
            lines.append(f"- {where} round {failure['round']}: "
                         f"{failure['error'].splitlines()[0]}")
            lines += _log_block(failure["error_log_tail"])
        for restart in p["restarts"]:
            lines.append(f"- {where} round {restart['round']}: the server "
                         f"was down before this run and was restarted")
            lines += _log_block(restart["log_before_restart"])
    return lines


def _groups(points, options, field, option=None):
    """(level, value, points) for each kernel level and each value of
    options[option] (default: the option named as the field) that has
    points with that value in the field, in the order of the options."""
    for level in options["levels"]:
        for value in options[option or field]:
            group = [p for p in points if p["kernel_level"] == level
                     and p[field] == value]
            if group:
                yield level, value, group


def workload_groups(points, options):
    """(level, workload, points) for each kernel level and workload that has
    points, in the order of the options; the faults and idle workloads,
    which have their own sections (faults.section, idle_section), plot and
    sweep nothing: an idle point is also one of several limits and idle
    counts, which a sweep over concurrency cannot tell apart."""
    for level, workload, group in _groups(points, options, "workload",
                                          "workloads"):
        if not (WORKLOADS[workload].fault or WORKLOADS[workload].idle
                or WORKLOADS[workload].restart or WORKLOADS[workload].users):
            yield level, workload, group


def _module_lines(modules):
    if not modules:
        return []
    return [f"- {name}: built {info['built']}, sha256 {info['sha256'][:16]}"
            for name, info in modules.items()]


def _where_lines(meta):
    """Where the servers and the load tools ran (reports from before
    --server-cpus and --net say nothing)."""
    lines = []
    placement = meta.get("placement")
    if placement:
        lines.append(
            "- CPUs: servers and load tools share every CPU (the client's "
            "cost is in the numbers)" if placement["shared"] else
            f"- CPUs: servers on {placement['server_cpus']}, load tools on "
            f"{placement['client_cpus']} (pinned, checked in /proc)")
    net = meta.get("net")
    if net:
        lines.append(
            "- network: loopback" if net["kind"] == "loopback" else
            f"- network: a veth pair between namespaces "
            f"{net['server_namespace']} ({net['server_address']}) and "
            f"{net['client_namespace']} ({net['client_address']})")
    if meta.get("server_cores"):
        lines.append(f"- server cores: {meta['server_cores']} (BucketCount "
                     f"{meta['server_cores']})")
    return lines


def context_lines(meta, heading="#"):
    """The title and what a reader needs to judge the numbers: machine,
    kernel, versions, load, modules, options, method."""
    options = meta["options"]
    lines = [f"{heading} bucketbench report {meta['started_at']}", "",
             f"- machine: {meta['machine']['cpu_model']}, "
             f"{meta['machine']['cores']} cores, "
             f"{meta['machine']['memory_gb']} GB, {meta['machine']['os']}",
             f"- kernel (real): {meta['machine']['kernel']}",
             f"- httpd: {meta['machine']['httpd']}; nginx: "
             f"{meta['machine']['nginx']}; wrk: {meta['machine']['wrk']}",
             f"- load average at start / end: "
             f"{meta['machine']['load_average_at_start']} / "
             f"{meta['load_average_at_end']}",
             *_module_lines(meta["bucketed_modules"]),
             "- scheduling: " + meta["machine"].get(
                 "scheduling", "servers in sessions, hence autogroups, of "
                               "their own (reports before 2026-11-26 06:30)"),
             *_where_lines(meta),
             f"- options: {json.dumps(options)}",
             "- wall time: " + (f"{meta['wall_time_s'] / 60:.1f} min"
                                if meta["wall_time_s"] is not None
                                else "n/a (the run was cut short)"),
             "", "Kernel levels:"]
    for level in options["levels"]:
        lines.append(f"- `{level_title(level)}`: {KERNEL_LEVELS[level]}")
    if all(WORKLOADS[name].fault for name in options["workloads"]):
        return lines + ["", f"Each fault ran {options['runs']} times per "
                        "server, servers interleaved within each round; "
                        "every server was started fresh per workload, "
                        "without warm-up. --duration, --warmup and --slots "
                        "do not apply (see the faults section).", ""]
    if all(WORKLOADS[name].restart for name in options["workloads"]):
        return lines + ["", f"Each point ran {options['runs']} times, "
                        "servers interleaved within each round; every "
                        "server was started fresh per workload and warmed "
                        f"up for {options['warmup_s']} s; --duration does "
                        "not apply (see the restarts section).", ""]
    lines += ["", "Each point ran " f"{options['runs']} times for "
              f"{options['duration_s']} s, servers interleaved within each "
              "round; every server was started fresh per workload and "
              f"warmed up for {options['warmup_s']} s at the highest "
              "concurrency. Ratios are the median of same-round "
              "ratios. Latencies are medians over the runs of wrk's "
              "percentiles; requests slower than wrk's timeout "
              f"({options['timeout_s']} s) are counted as timeouts, not "
              "in the latencies. Errors are totals over all runs; non-2xx "
              "counts HTTP status >= 400 as wrk does.", ""]
    return lines


def render_markdown(meta, points, plots, top_level=1):
    """report.md: the run's context, then per kernel level and workload a
    sweep overview, its plot, and per concurrency the tables. plots maps
    (level, workload) to an image path; top_level is the heading level of
    the title (2 when the report sits inside another document)."""
    options = meta["options"]
    skipped = meta["skipped"]
    h1, h2, h3 = ("#" * (top_level + depth) for depth in range(3))
    lines = context_lines(meta, h1)
    if skipped:
        lines += [f"{h2} Skipped", ""]
        lines += [f"- {skip_text(s)}" for s in skipped]
        lines.append("")
    for section in (skew_section(points, options, h2),
                    idle_section(points, options, h2),
                    faults.section(points, options, h2),
                    limit.section(points, options, h2),
                    restart.section(points, options, h2),
                    steering.section(points, options, h2),
                    users.section(points, options, h2, plots={
                        workload: path for (_, workload), path
                        in plots.items()})):
        if section:
            lines += [section, ""]
    for level, workload, group in workload_groups(points, options):
        lines += [f"{h2} {workload.upper()} {WORKLOADS[workload].title}"
                  f" — {level_title(level)}", "",
                  "Median req/s:", "",
                  sweep_table(group, options["concurrency"],
                              lambda p: _fmt(p["rps"]["median"])), "",
                  "Median of same-round req/s ratios against stock prefork:",
                  "", sweep_table(group, options["concurrency"],
                                  lambda p: _fmt_ratio(p, "prefork")), "",
                  "Median p99 latency, ms:", "",
                  sweep_table(group, options["concurrency"],
                              lambda p: _fmt_ms(p["latency_ms"]["p99"])),
                  "", "Median server CPU seconds per 1,000 requests:", "",
                  sweep_table(group, options["concurrency"],
                              lambda p: _fmt(p["server_cpu_s_per_1k"], 3)),
                  ""]
        plot = plots.get((level, workload))
        if plot:
            lines += [f"![{workload} {level}]({plot})", ""]
        for concurrency in options["concurrency"]:
            at_c = [p for p in group if p["concurrency"] == concurrency]
            if not at_c:
                continue
            lines += [f"{h3} {workload.upper()} {level_title(level)} "
                      f"c={concurrency}",
                      "", throughput_table(at_c), "", detail_table(at_c),
                      ""]
            buckets = bucket_table(at_c)
            if buckets:
                lines += [buckets, ""]
    failures = _failures_section(points)
    if failures:
        lines += [f"{h2} Failed runs and restarts", ""] + failures + [""]
    return "\n".join(lines)


# ---- the results tables' figures (publication.py) ----

def ratio_headline(points, workload, server, baseline):
    """server's req/s against baseline's on workload at the native kernel
    level and the highest concurrency: the median of same-round ratios
    and their range."""
    found = [p for p in points if p["workload"] == workload
             and p["server"] == server and p["kernel_level"] == NATIVE]
    if not found:
        return f"{workload}: no {server} point"
    point = max(found, key=lambda p: p["concurrency"])
    return (f"{workload}, c={point['concurrency']}: {SHORT_NAMES[server]} "
            f"{markdown.ratio(point['ratios'].get(baseline))} "
            f"{SHORT_NAMES[baseline]}'s req/s")


def headline(points, options):
    """W1-W3's figure: the event model on W1, a new connection per
    request, against stock event."""
    return ratio_headline(points, "w1", "bucketed-event", "event")


def pinned_headline(points, options):
    """The pinned run's figure: W1 at its highest concurrency, each
    bucketed model against stock event, with the servers and wrk on CPUs
    of their own."""
    found = [p for p in points if p["workload"] == "w1"
             and p["kernel_level"] == NATIVE]
    if not found:
        return "w1: no point"
    top = max(p["concurrency"] for p in found)
    models = []
    for server in ("bucketed-event", "bucketed-reuseport"):
        point = next((p for p in found if p["server"] == server
                      and p["concurrency"] == top), None)
        ratio = point["ratios"].get("event") if point else None
        models.append(f"{SHORT_NAMES[server]} {markdown.ratio(ratio)}")
    return (f"w1, c={top}: " + ", ".join(models)
            + f" {SHORT_NAMES['event']}'s req/s")


def skew_headline(points, options):
    """The skewed load's figure: the prefork model with 90 % of the load on
    one of two Listens, against stock prefork."""
    return ratio_headline(points, "skew-90-static", "bucketed-reuseport",
                          "prefork")
