# SPDX-License-Identifier: Apache-2.0
"""bench/run against the real servers: one point, one run, one second per
server. Checks the output files and their schema, never the speed. Then
bad input, which must stop the harness before any load is sent."""
import json
import os
import socket
import subprocess
import sys

import pytest

from bucketbench import catalog, cli, report

RUN_TIMEOUT_S = 600
RUN_KEYS = {"schema", "kernel_level", "workload", "concurrency", "server",
            "label", "round", "ok", "error", "error_log_tail", "ports",
            "restarted"}
MEASURED_KEYS = {"duration_s", "requests", "success", "rps", "errors",
                 "latency_ms", "server_cpu_s", "client_cpu_s",
                 "other_cpu_s", "server_processes", "server_pss_bytes",
                 "buckets", "wrk_command"}
POINT_KEYS = {"kernel_level", "emulated", "workload", "concurrency",
              "server", "label", "runs", "ok_runs", "failures", "restarts",
              "rps", "latency_ms", "requests", "success", "errors",
              "server_cpu_s_per_1k", "client_cpu_s_per_1k", "other_cpu_s",
              "server_pss_mb", "server_processes", "buckets", "ratios"}


def bench(top, build, *args, timeout=RUN_TIMEOUT_S, preexec_fn=None):
    """bench/run with args; preexec_fn runs in the child before it (e.g.
    to lower a limit)."""
    env = dict(os.environ, BUCKETED_BUILD=build)
    return subprocess.run([sys.executable, os.path.join(top, "bench", "run"),
                           *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          preexec_fn=preexec_fn)


def one_point(top, build, out, level, servers=None):
    args = ["--workloads", "w1", "--levels", level, "--concurrency", "8",
            "--runs", "1", "--duration", "1", "--warmup", "0",
            "--slots", "32", "--out", str(out)]
    if servers:
        args += ["--servers", servers]
    done = bench(top, build, *args)
    assert done.returncode == 0, done.stderr
    with open(out / "summary.json") as handle:
        return json.load(handle), done


def check_run_record(path):
    """A run's raw record: its schema, and that the run was measured (a
    server that did not start or died fails the smoke test, with why)."""
    with open(path) as handle:
        record = json.load(handle)
    assert RUN_KEYS <= set(record), path
    assert record["schema"] == "bucketbench.run/1"
    assert record["ok"], (path.name, record["error"],
                          record["error_log_tail"])
    assert MEASURED_KEYS <= set(record), path
    assert set(record["errors"]) == set(report.ERROR_KINDS)
    assert record["requests"] >= 0 and record["server_cpu_s"] >= 0
    assert record["server_processes"] >= 1
    if record["requests"]:
        assert set(record["latency_ms"]) >= set(report.LATENCY_KEYS)
    return record


def test_one_point_native(top, build, tmp_path):
    out = tmp_path / "out"
    summary, done = one_point(top, build, out, catalog.NATIVE)
    assert summary["schema"] == report.SUMMARY_SCHEMA
    meta = summary["meta"]
    for key in ("kernel", "httpd", "nginx", "wrk", "cores"):
        assert meta["machine"][key], key
    assert meta["options"]["runs"] == 1

    # Every server either ran or was skipped with a reason.
    ran = {p["server"] for p in summary["points"]}
    skipped = {s["server"]: s["reason"] for s in summary["skipped"]}
    assert ran | set(skipped) == set(catalog.SERVERS)
    assert all(skipped.values())
    assert {"prefork", "event", "nginx"} <= ran

    for point in summary["points"]:
        assert POINT_KEYS <= set(point), point["server"]
        assert point["runs"] == 1
        assert point["ok_runs"] == 1, (point["server"], point["failures"])
        if point["server"].startswith("bucketed"):
            assert point["buckets"]["bucket_count"] >= 1

    raw = sorted((out / "raw").iterdir())
    assert len(raw) == len(summary["points"])
    for path in raw:
        check_run_record(path)

    text = (out / "report.md").read_text()
    assert "| Configuration | Min | Median | Max | Std dev |" in text
    assert meta["machine"]["kernel"] in text
    with open(out / "plot-w1-native.png", "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    assert (out / "servers" / "native-w1-prefork" / "httpd.conf").exists()
    assert "run 1/1" in done.stderr          # progress lines

    # The report can be rebuilt from what the run saved.
    (out / "report.md").unlink()
    rebuilt = bench(top, build, "--report-only", str(out), timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (out / "report.md").read_text() == text


def test_failed_runs_fail_the_run(top, tmp_path):
    """A bucketed module httpd cannot load: every bucketed run fails. The
    harness still writes its results, but exits with RUNS_FAILED, and the
    smoke check above rejects the failed records."""
    broken = tmp_path / "broken-build"
    broken.mkdir()
    for name in ("mod_mpm_bucketed.so", "mod_bucketed_status.so"):
        (broken / name).write_text("not a shared object\n")
    out = tmp_path / "out"
    done = bench(top, str(broken), "--workloads", "w1", "--levels",
                 catalog.NATIVE, "--servers", "prefork,bucketed-reuseport",
                 "--concurrency", "8", "--runs", "1", "--duration", "1",
                 "--warmup", "0", "--slots", "32", "--out", str(out))
    assert done.returncode == cli.RUNS_FAILED, done.stderr
    assert "1 failed" in done.stderr
    points = {p["server"]: p
              for p in json.loads((out / "summary.json").read_text())
              ["points"]}
    assert points["prefork"]["ok_runs"] == 1
    assert points["bucketed-reuseport"]["ok_runs"] == 0
    assert "Failed runs and restarts" in (out / "report.md").read_text()
    records = {path.name: path for path in (out / "raw").iterdir()}
    check_run_record(records["native-w1-c8-prefork-r1.json"])
    with pytest.raises(AssertionError):
        check_run_record(records["native-w1-c8-bucketed-reuseport-r1.json"])


def test_one_point_without_reuseport(top, build, tmp_path):
    """The shim reaches the servers: bucketed falls back to one bucket per
    Listen (when built), and every row is labelled as emulated."""
    summary, _ = one_point(top, build, tmp_path / "out", catalog.NO_REUSEPORT,
                           "prefork-lcbr1,bucketed-auto,nginx")
    points = {p["server"]: p for p in summary["points"]}
    assert points["prefork-lcbr1"]["ok_runs"] == 1
    assert points["nginx"]["label"] == \
        "nginx, shared listen socket (no reuseport)"
    if "bucketed-auto" in points:
        assert points["bucketed-auto"]["buckets"]["strategy"] == "listen"
    text = (tmp_path / "out" / "report.md").read_text()
    assert "no-reuseport (emulated)" in text


def test_one_skewed_point(top, build, tmp_path):
    """One point of a skewed workload with the slow handler: wrk's threads
    split 90/10 across the two ports, every answer is the slow page's, the
    report has the side-by-side section, and nginx sits it out."""
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "skew-90-slow", "--levels",
                 catalog.NATIVE, "--servers", "prefork,bucketed-listen,nginx",
                 "--concurrency", "20", "--runs", "1", "--duration", "1",
                 "--warmup", "0", "--slow-slots", "32", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["options"]["slow_slots"] == 32
    assert {"server": "nginx", "kernel_level": None,
            "workloads": ["skew-90-slow"],
            "reason": catalog.HANDLER_NOT_SUPPORTED[catalog.SLOW]} \
        in summary["skipped"]
    points = {p["server"]: p for p in summary["points"]}
    assert "nginx" not in points
    for point in points.values():
        assert point["ok_runs"] == 1, point["failures"]
        # wrk counts answers other than 2xx; the slow page answered all.
        assert point["success"] > 0 and point["errors"]["non_2xx"] == 0

    raw = {}
    for path in (out / "raw").iterdir():
        record = check_run_record(path)
        raw[record["server"]] = record
    record = raw["prefork"]
    assert record["split"] == [90, 10] and record["handler"] == "slow"
    assert record["slots"] == 32
    command = record["wrk_command"]
    assert command[command.index("-t") + 1] == "10"
    assert command[-1].endswith("/slow.lua")
    busy, quiet = record["ports"]
    script = (out / "servers" / "native-skew-90-slow-prefork" /
              "wrk.lua").read_text()
    assert script.count(f'"{busy}"') == 9 and script.count(f'"{quiet}"') == 1

    if "bucketed-listen" in points:
        # One bucket per Listen: a bucket's accepted count is its port's.
        buckets = points["bucketed-listen"]["buckets"]["accepted"]
        by_port = {int(b["listen"].rsplit(":", 1)[1]): b["accepted"]
                   for b in buckets}
        busy, quiet = raw["bucketed-listen"]["ports"]
        assert by_port[busy] > by_port[quiet] > 0, buckets
        assert all(b["children_at_end"] >= 1 for b in buckets), buckets
    text = (out / "report.md").read_text()
    assert "## Skewed Listen load (issue 8)" in text
    assert "| Configuration | skew-90-slow |" in text


@pytest.mark.parametrize("args, message", [
    (["--workloads", "skew-90-static", "--concurrency", "25"],
     "must be a multiple of 10, got 25"),
    (["--workloads", "w2", "--threads", "3"],
     "cannot carry the split 50/50"),
    (["--workloads", "skew", "--slow-slots", "40"],
     "--slow-slots must be a multiple of 32"),
    (["--workloads", "skew-all-slow", "--modules-dir", "/nonexistent"],
     "needs mod_lua"),
    (["--servers", "prefork,apache1"], "unknown server apache1"),
    (["--workloads", "w9"], "unknown workload w9"),
    (["--levels", "ancient"], "unknown kernel level ancient"),
    (["--wrk", "/nonexistent/wrk"], "wrk not found"),
    (["--nginx", "/nonexistent/nginx"], "nginx not found"),
    (["--concurrency", "1"], "--concurrency"),
])
def test_bad_input_fails_before_any_load(top, build, tmp_path, args,
                                         message):
    out = tmp_path / "out"
    done = bench(top, build, *args, "--out", str(out), timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert not out.exists()


def test_busy_port_fails_before_any_load(top, build, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = tmp_path / "out"
        done = bench(top, build, "--servers", "prefork", "--base-port",
                     str(port), "--out", str(out), timeout=60)
    assert done.returncode == 2
    assert f"port(s) {port}" in done.stderr and "busy" in done.stderr
    assert not out.exists()


def test_memory_subcommand(top, build, tmp_path):
    """bench/run memory with small settings: both servers measured, the
    parent followed across graceful restarts; the numbers are not judged."""
    out = tmp_path / "mem.json"
    done = bench(top, build, "memory", "--restarts", "2", "--slots", "5",
                 "--requests", "20", "--out", str(out), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "child PSS (median): stock prefork" in done.stdout
    result = json.loads(out.read_text())
    assert result["child_pss_kb"]["children"] == [5, 5]
    assert result["child_pss_kb"]["prefork"] > 0
    assert result["child_pss_kb"]["bucketed"] > 0
    parent = result["parent_kb"]
    assert parent["restarts"] == 2
    for key in ("before", "after_first_restart", "after"):
        assert set(parent[key]) == {"Rss", "Pss"}


@pytest.mark.parametrize("args, message", [
    (["--restarts", "0"], "--restarts must be from 1 to 10000"),
    (["--slots", "4"], "--slots must be from 5 to 4096"),
])
def test_memory_bad_input(top, build, args, message):
    done = bench(top, build, "memory", *args, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
