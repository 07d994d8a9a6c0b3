# SPDX-License-Identifier: Apache-2.0
"""bench/limit_sweep.py: idle keep-alive connections up to MaxRequestWorkers
minus one, then new-connection probes, against real servers (issue 25)."""
import json
import os
import re
import subprocess
import sys

from bucketbench import limit_sweep
from bucketbench.catalog import SERVERS

RUN_TIMEOUT_S = 300


def test_limits_and_idle_counts():
    prefork, event = SERVERS["bucketed-reuseport"], SERVERS["bucketed-event"]
    assert limit_sweep.idle_counts(7) == list(range(7))
    assert limit_sweep.idle_counts(256) == [0, 1, 64, 128, 192, 254, 255]
    assert "MaxRequestWorkers 7" in limit_sweep.limit_directives(
        prefork, 7, 2)
    assert "BucketCount 4" in limit_sweep.limit_directives(prefork, None, 4)
    assert not any(d.startswith("MaxRequestWorkers") for d in
                   limit_sweep.limit_directives(prefork, None, 4))
    # A threaded server at a set limit: one thread per child.
    assert "ThreadsPerChild 1" in limit_sweep.limit_directives(event, 7, 2)
    labels = [c.label for c in limit_sweep.configs_for(
        [SERVERS["prefork"], prefork], limits=(7, None),
        bucket_counts=(2, 4))]
    assert labels == [
        "prefork, MaxRequestWorkers 7",
        "bucketed-reuseport, MaxRequestWorkers 7, BucketCount 2",
        "bucketed-reuseport, MaxRequestWorkers 7, BucketCount 4",
        "prefork, MaxRequestWorkers default (256)",
        "bucketed-reuseport, MaxRequestWorkers default (256), BucketCount 2",
        "bucketed-reuseport, MaxRequestWorkers default (256), BucketCount 4"]


def test_the_limit_minus_one_is_swept_against_real_servers(top, build,
                                                           tmp_path):
    """Every probe is answered (within the probes' 5 s) with every slot
    but one held by an idle connection for 30 s: stock prefork's free
    child takes it, bucketed's prefork model must find its free child or
    make one."""
    out = tmp_path / "sweep.json"
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "limit_sweep.py"),
         "--servers", "prefork,bucketed-reuseport", "--limits", "3",
         "--buckets", "2", "--idle", "0,2", "--out", str(out)],
        env=dict(os.environ, BUCKETED_BUILD=build), capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = json.loads(out.read_text())
    assert [(r["server"], r["limit"], r["buckets"]) for r in records] == [
        ("prefork", 3, 1), ("bucketed-reuseport", 3, 2)]
    for record in records:
        assert [p["idle"] for p in record["points"]] == [0, 2]
        for p in record["points"]:
            assert p["probes"] == limit_sweep.PROBES
            assert p["timeouts"] == 0 and p["errors"] == 0, p
    for label in ("prefork, MaxRequestWorkers 3",
                  "bucketed-reuseport, MaxRequestWorkers 3, BucketCount 2"):
        assert re.search(rf"^{re.escape(label)}: 2 idle counts, 40 probes",
                         done.stdout, re.M), done.stdout
