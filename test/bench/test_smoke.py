"""bench/run against the real servers: one point, one run, one second per
server. Checks the output files and their schema, never the speed. Then
bad input, which must stop the harness before any load is sent."""
import json
import os
import socket
import subprocess
import sys

import pytest

from bucketbench import catalog, report

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


def bench(top, build, *args, timeout=RUN_TIMEOUT_S):
    env = dict(os.environ, BUCKETED_BUILD=build)
    return subprocess.run([sys.executable, os.path.join(top, "bench", "run"),
                           *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


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
    with open(path) as handle:
        record = json.load(handle)
    assert RUN_KEYS <= set(record), path
    assert record["schema"] == "bucketbench.run/1"
    if record["ok"]:
        assert MEASURED_KEYS <= set(record), path
        assert set(record["errors"]) == set(report.ERROR_KINDS)
        assert record["requests"] >= 0 and record["server_cpu_s"] >= 0
        assert record["server_processes"] >= 1
        if record["requests"]:
            assert set(record["latency_ms"]) >= set(report.LATENCY_KEYS)
    else:
        assert record["error"]
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
        if point["server"].startswith("bucketed") and point["ok_runs"]:
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


@pytest.mark.parametrize("args, message", [
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
