# SPDX-License-Identifier: Apache-2.0
"""The near-the-limit workloads (issue 25, bench/bucketbench/limit.py): the
server settings on fixed inputs, then bench/run --workloads near-limit in a
quick mode against the four servers it compares. Checks that every run
held its keep-alive clients and probed, and that the report has the rows
with numbers that parse, never what the numbers are (timing on a shared
2-core machine is not a test)."""
import json
import re

from bucketbench import catalog, limit
from test_smoke import bench

NUMBER = r"-?[\d,]+(\.\d+)?"
COUNTS = r"\d+ \(\d+\)"


def test_prefork_models_get_the_limit_and_their_spare_defaults():
    settings = limit.server_settings(catalog.NEAR_LIMIT_B4,
                                     catalog.SERVERS["bucketed-reuseport"])
    assert settings.bucket_count == 4
    assert f"MaxRequestWorkers {catalog.LIMIT_WORKERS}" in settings.directives
    assert f"ServerLimit {catalog.LIMIT_WORKERS}" in settings.directives
    assert not any(d.startswith(("StartServers", "MinSpare", "MaxSpare"))
                   for d in settings.directives)


def test_threaded_models_get_a_child_per_bucket():
    for name in ("event", "bucketed-event"):
        settings = limit.server_settings(catalog.NEAR_LIMIT_B4,
                                         catalog.SERVERS[name])
        threads = catalog.LIMIT_WORKERS // 4
        assert "ServerLimit 4" in settings.directives
        assert f"ThreadsPerChild {threads}" in settings.directives


def test_near_limit_quick_run(top, build, tmp_path):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "near-limit-b2", "--levels",
                 catalog.NATIVE, "--runs", "1", "--fault-seconds", "3",
                 "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    points = {p["server"]: p for p in summary["points"]}
    assert set(points) == set(catalog.FAULT_SERVERS)
    for server, point in points.items():
        assert point["ok_runs"] == 1, point["failures"]
        fault = point["fault"]
        assert fault["kind"] == catalog.NEAR_LIMIT_B2
        assert fault["probes"] >= 1
        assert fault["children_started"] >= 1
    raw = [json.loads(path.read_text()) for path in (out / "raw").iterdir()]
    for record in raw:
        held = record["fault"]
        # Every held client was answered before the probes began.
        assert held["held"] == catalog.LIMIT_WORKERS - 1
        assert held["held_answered"] >= held["held"], held
    text = (out / "report.md").read_text()
    assert "## Near MaxRequestWorkers (issue 25)" in text
    assert "## Faults (issue 18)" not in text
    block = text.split("### near-limit-b2:", 1)[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in block.splitlines() if line.startswith("|")][2:]
    assert len(rows) == len(points), rows
    for row in rows:
        assert re.fullmatch(NUMBER, row[1]), row
        for cell in row[5:10]:
            assert re.fullmatch(COUNTS, cell), row
    conf = (out / "servers" / "native-near-limit-b2-bucketed-reuseport" /
            "httpd.conf").read_text()
    assert "BucketCount 2" in conf and "BucketCount auto" not in conf
    assert f"MaxRequestWorkers {catalog.LIMIT_WORKERS}" in conf
