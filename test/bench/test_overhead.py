# SPDX-License-Identifier: Apache-2.0
"""bench/run overhead: its summary on fixed runs, then one short real run that
checks what it writes (never the speed)."""
import json
import os
import subprocess
import sys

import pytest

from bucketbench import overhead


def run(variant, round_no, rps, cpu=0.1, requests=1000, ok=True):
    return {"variant": variant, "round": round_no, "ok": ok, "rps": rps,
            "server_cpu_s": cpu, "requests": requests}


def test_summary_pairs_rounds_with_off():
    records = [run("off", 0, 1000), run("on", 0, 990), run("scraped", 0, 980),
               run("off-again", 0, 1010),
               run("off", 1, 2000), run("on", 1, 2020),
               run("scraped", 1, 1960), run("off-again", 1, 2000),
               # A failed run leaves its round out of that variant's ratios.
               run("off", 2, 500), run("on", 2, 0, ok=False),
               run("scraped", 2, 505), run("off-again", 2, 500)]
    summary = overhead.summarize(records)
    assert list(summary) == [v.name for v in overhead.VARIANTS]
    assert summary["on"]["rps"]["n"] == 2
    assert summary["on"]["ratio_to_off"]["n"] == 2
    assert summary["on"]["ratio_to_off"]["median"] == pytest.approx(1.0)
    assert summary["scraped"]["ratio_to_off"]["median"] == pytest.approx(0.98)
    assert summary["off"]["ratio_to_off"]["median"] == 1.0
    assert summary["off"]["rps"]["median"] == 1000
    # CPU per request: 0.1 s over 1,000 requests = 0.1 s per 1,000.
    assert summary["on"]["server_cpu_ms_per_request"] == pytest.approx(0.1)
    assert summary["on"]["cpu_ratio_to_off"]["median"] == pytest.approx(1.0)
    table = overhead.render_markdown(
        {"rounds": 3, "duration_s": 2, "concurrency": 50, "threads": 2,
         "slots": 128, "wall_time_s": 60}, summary)
    assert table.count("\n| metrics") == len(overhead.VARIANTS)


def test_short_real_run(top, build, tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, BUCKETED_BUILD=build)
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "run"), "overhead",
         "--rounds", "2", "--duration", "1", "--concurrency", "4",
         "--threads", "1", "--slots", "8", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    with open(out / "overhead.json") as handle:
        result = json.load(handle)
    runs = result["runs"]
    assert len(runs) == 2 * len(overhead.VARIANTS)
    assert all(r["ok"] and r["requests"] > 0 for r in runs)
    for r in runs:
        scrapes = r["scrapes"]["ok"]
        # Only the scraped variant is scraped, at least once per run.
        assert (scrapes > 0) == (r["variant"] == "scraped"), r
        assert r["scrapes"]["failed"] == 0
    assert (out / "overhead.md").read_text() in done.stdout
