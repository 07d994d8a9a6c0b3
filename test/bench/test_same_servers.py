# SPDX-License-Identifier: Apache-2.0
"""bench/same_servers.py: one server named twice runs as two httpds, both
measured in the round, each against the first (issue 26's A/A control for
the large files)."""
import os
import re
import subprocess
import sys

RUN_TIMEOUT_S = 300


def test_same_server_twice_runs_as_two_instances(top, build):
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--servers", "event,event#2", "--rounds", "1", "--duration", "1",
         "--warmup", "1"],
        env=dict(os.environ, BUCKETED_BUILD=build), capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("event", "event#2"):
        run = re.search(rf"^round 0 {re.escape(name)} +(\d+) MB/s "
                        rf"([\d.]+) ms/MB", done.stdout, re.M)
        assert run, done.stdout
        assert int(run.group(1)) > 0
        summary = re.search(rf"^{re.escape(name)} +\d+ MB/s [\d.]+ ms/MB, "
                            rf"vs event ([\d.]+)x \(([\d.]+)\)$",
                            done.stdout, re.M)
        assert summary, done.stdout
    # Two httpds: the second instance is not the first one measured twice.
    pids = set(re.findall(r"^started (\S+) (\d+)$", done.stdout, re.M))
    assert len({pid for _, pid in pids}) == 2, done.stdout
