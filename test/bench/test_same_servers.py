# SPDX-License-Identifier: Apache-2.0
"""bench/same_servers.py: one server named twice runs as two httpds, both
measured in the round, each against the first (issue 26's A/A control for
the workloads users serve), for each kind of load it drives: wrk over
plain HTTP (large files), over TLS, through the proxy's slow backend, and
h2load."""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from bucketbench.environment import BUCKETED_MODULES

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "bench"))
import same_servers  # noqa: E402  (bench/ is not a package)

RUN_TIMEOUT_S = 300


@pytest.mark.parametrize("workload,server,unit,cpu_unit", [
    ("large-1m", "event", "MB/s", "ms/MB"),
    ("large-100m", "event", "MB/s", "ms/MB"),
    ("tls-keepalive", "event", "req/s", "ms/req"),
    ("proxy-default", "event", "req/s", "ms/req"),
    ("h2-conns", "prefork", "req/s", "ms/req"),
])
def test_same_server_twice_runs_as_two_instances(top, build, workload,
                                                 server, unit, cpu_unit):
    names = (server, f"{server}#2")
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--workload", workload, "--servers", ",".join(names),
         "--rounds", "1", "--duration", "1", "--warmup", "1"],
        env=dict(os.environ, BUCKETED_BUILD=build), capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in names:
        run = re.search(rf"^round 0 {re.escape(name)} +(\d+) {unit} "
                        rf"p99 ([\d.]+) ms ([\d.]+) {cpu_unit} "
                        rf"errors (\d+)( \S+)? load", done.stdout, re.M)
        assert run, done.stdout
        assert int(run.group(1)) > 0 and float(run.group(2)) > 0
        if workload == "h2-conns":
            # Stock prefork is refused by mod_http2: h2load falls back.
            assert run.group(5) == " http/1.1", done.stdout
        summary = re.search(rf"^{re.escape(name)} +\d+ {unit} p99 [\d.]+ "
                            rf"ms [\d.]+ {cpu_unit}, vs {server} "
                            rf"([\d.]+)x \(([\d.]+)\), p99 ([\d.]+)x "
                            rf"\(([\d.]+)\), CPU ([\d.]+)x \(([\d.]+)\)$",
                            done.stdout, re.M)
        assert summary, done.stdout
    # The two instances pooled: one server, compared with itself.
    assert re.search(rf"^pooled {re.escape(server)} \(2\) vs "
                     rf"{re.escape(server)}: 1\.00x \(1\.00\), p99 "
                     rf"1\.00x \(1\.00\), CPU 1\.00x \(1\.00\), higher in "
                     rf"0 of 1 rounds$", done.stdout, re.M), done.stdout
    # Two httpds: the second instance is not the first one measured twice.
    pids = set(re.findall(r"^started (\S+) (\d+)$", done.stdout, re.M))
    assert len({pid for _, pid in pids}) == 2, done.stdout


def test_tls_resume_is_refused(top):
    """openssl s_time reports no latencies: not a workload here."""
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--workload", "tls-resume", "--servers", "event"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_a_paced_run_asks_each_server_the_same_rate(top, build):
    """--rate: wrk's Lua delay() paces every server to the rate asked
    (500 req/s; unpaced, TLS keep-alive here runs at thousands), so the
    servers' p99s compare at an equal load."""
    names = ("event", "bucketed-event")
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--workload", "tls-keepalive", "--servers", ",".join(names),
         "--rounds", "1", "--duration", "2", "--warmup", "1",
         "--rate", "500"],
        env=dict(os.environ, BUCKETED_BUILD=build), capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^wrk paced at 500 req/s$", done.stdout, re.M)
    for name in names:
        run = re.search(rf"^round 0 {re.escape(name)} +(\d+) req/s "
                        rf"p99 ([\d.]+) ms", done.stdout, re.M)
        assert run, done.stdout
        # wrk's rate counts a partly used last second, hence the margin.
        assert 0 < int(run.group(1)) <= 600, done.stdout
        assert float(run.group(2)) > 0


@pytest.mark.parametrize("workload,rate", [("h2-conns", "500"),
                                           ("tls-keepalive", "0")])
def test_a_rate_that_cannot_be_paced_is_refused(top, workload, rate):
    """h2load cannot be paced per request, and a rate must be positive:
    exit 2 before any server starts, naming the workloads that can."""
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--workload", workload, "--servers", "event", "--rate", rate],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout
    assert "--rate must be a positive number" in done.stderr
    assert "tls-keepalive" in done.stderr and "h2-conns" not in \
        done.stderr.split("for one of", 1)[1]


def test_an_instance_loads_the_build_it_names(top, build, tmp_path):
    """NAME@BUILD: that instance's httpd maps the bucketed module from
    BUILD, the others from --build-dir (an A/B of two builds)."""
    other = tmp_path / "other-build"
    other.mkdir()
    for name in BUCKETED_MODULES:
        shutil.copy2(os.path.join(build, name), other / name)
    hook = ('echo "maps $NAME $(grep -o "/[^ ]*mod_mpm_bucketed.so" '
            '/proc/${PIDS%% *}/maps | sort -u)"')
    done = subprocess.run(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--workload", "tls-keepalive", "--servers",
         f"bucketed-event,bucketed-event#2@{other}", "--rounds", "1",
         "--duration", "2", "--warmup", "1", "--hook", hook],
        env=dict(os.environ, BUCKETED_BUILD=build), capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    maps = dict(re.findall(r"^maps (\S+) (\S+)$", done.stdout, re.M))
    assert maps == {
        "bucketed-event": os.path.join(build, "mod_mpm_bucketed.so"),
        "bucketed-event#2": str(other / "mod_mpm_bucketed.so")}, \
        done.stdout
    assert re.search(r"^bucketed-event#2 +\d+ req/s .*, vs bucketed-event ",
                     done.stdout, re.M), done.stdout


def test_instances_of_a_server_are_pooled_round_by_round():
    """Per round the mean of a server's instances; a round where one of
    them failed is left out; each server's pool against the first's."""
    run = same_servers.Run
    # Each server: its instances, each a run per round.
    stock = [[run(100, 2.0, 0.060, 0, ""), run(100, 2.0, 0.060, 0, "")],
             [run(300, 4.0, 0.080, 0, ""), run(100, 2.0, 0.060, 0, "")]]
    mine = [[run(200, 3.0, 0.070, 0, ""), None],
            [run(300, 5.0, 0.084, 1, ""), run(200, 3.0, 0.050, 0, "")]]
    pooled = same_servers.pooled_runs(mine)
    assert (pooled[0].rate, pooled[0].p99_ms, pooled[0].cpu_ms,
            pooled[0].errors) == (250, 4.0, pytest.approx(0.077), 1)
    assert pooled[1] is None
    text = same_servers.pooled_summary("bucketed-reuseport@/b", mine,
                                       "prefork",
                                       same_servers.pooled_runs(stock))
    assert text == ("pooled bucketed-reuseport@/b (2) vs prefork: "
                    "1.25x (1.25), p99 1.33x (1.33), CPU 1.10x (1.10), "
                    "higher in 1 of 1 rounds")
    assert same_servers.spec_group("prefork#2") == "prefork"
    assert same_servers.spec_group("bucketed-event#b@/x") == \
        "bucketed-event@/x"


def test_a_stop_signal_stops_the_servers(top, build):
    """SIGTERM during a run: the script exits and the httpd it started is
    stopped, not left running."""
    proc = subprocess.Popen(
        [sys.executable, os.path.join(top, "bench", "same_servers.py"),
         "--workload", "tls-keepalive", "--servers", "prefork",
         "--rounds", "1", "--duration", "60", "--warmup", "1"],
        env=dict(os.environ, BUCKETED_BUILD=build), stdout=subprocess.PIPE,
        text=True)
    try:
        started = None
        for line in proc.stdout:
            started = re.match(r"^started prefork (\d+)$", line)
            if started:
                break
        assert started, "the server never started"
        pid = int(started.group(1))
        os.kill(pid, 0)                     # running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(RUN_TIMEOUT_S) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
