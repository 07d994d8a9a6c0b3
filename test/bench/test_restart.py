# SPDX-License-Identifier: Apache-2.0
"""The restart workloads (issue 24, bench/bucketbench/restart.py): the pure
parts on fixed inputs, then bench/run --workloads restart with 2 restarts
and 1 round against stock prefork and event and bucketed in both child
models. The run must have happened: every server's run succeeded, sent
requests and went through its restarts, and says how many requests
failed. How many failed is not judged here (that is the benchmark's)."""
import json
import os

import pytest

from bucketbench import catalog, load, net, report, restart
from test_smoke import RUN_KEYS, bench

SERVERS = ("prefork", "event", "bucketed-reuseport", "bucketed-event")
RESTARTS = 2
RESTART_KEYS = {"variant", "held", "swapped", "planned", "done",
                "interval_s", "failed_requests", "stop_ms", "start_ms",
                "total_ms", "slowest_ms", "forced_stops", "builds"}
MEASURED_KEYS = {"duration_s", "requests", "success", "rps", "errors",
                 "latency_ms", "client_cpu_s", "server_processes",
                 "wrk_command", "restart"}


def test_variants_of_each_server():
    """Stock servers keep their names (the ratio baselines) and restart
    their own way; bucketed runs in each of the workload's variants, the
    swap only with a second build."""
    specs = [catalog.SERVERS[name] for name in SERVERS]
    close = catalog.WORKLOADS["restart-close"]
    names = {s.name: s.restart for s in restart.expand(specs, close, True)}
    assert names == {
        "prefork": catalog.RESTART_OWN, "event": catalog.RESTART_OWN,
        "bucketed-reuseport-held": catalog.RESTART_HELD,
        "bucketed-reuseport-swap": catalog.RESTART_SWAP,
        "bucketed-reuseport-unheld": catalog.RESTART_OWN,
        "bucketed-event-held": catalog.RESTART_HELD,
        "bucketed-event-swap": catalog.RESTART_SWAP,
        "bucketed-event-unheld": catalog.RESTART_OWN}
    without = {s.name for s in restart.expand(specs, close, False)}
    assert not any(name.endswith("-swap") for name in without)
    keepalive = catalog.WORKLOADS["restart-keepalive"]
    assert {s.name for s in restart.expand(specs, keepalive, True)} == {
        "prefork", "event", "bucketed-reuseport-held", "bucketed-event-held"}
    assert catalog.WORKLOAD_GROUPS["restart-wrk"] == ("restart-close",
                                                      "restart-keepalive")


def test_only_the_four_servers_restart():
    close = catalog.WORKLOADS["restart-close"]
    for name, spec in catalog.SERVERS.items():
        reason = catalog.unsupported_reason(spec, close)
        assert (reason is None) == (name in SERVERS), name


def test_wrk_outlives_every_restart():
    """wrk's own bound covers every restart at its longest: the harness,
    not wrk's -d, ends the run."""
    bound = restart.wrk_bound_s(20, 1.5)
    assert bound > restart.LEAD_S + 20 * (
        1.5 + 2 * restart.STOP_TIMEOUT_S + restart.READY_TIMEOUT_S)


def test_background_wrk_reports_a_bound_that_ran_out(web_server,
                                                     tmp_path):
    """Real wrk on loopback: interrupted within its bound, its numbers;
    stopped by itself first (the run outlasted wrk's -d), the run fails
    once its own failures are raised, not a run whose end went without
    load."""
    port, seen = web_server
    script = load.script_file(str(tmp_path), [port], [100], 1)

    def wrk_command(bound_s):
        return load.wrk_command("wrk", ports=[port], connections=1,
                                threads=1, duration_s=bound_s, timeout_s=5,
                                keep_alive=True, script_path=script,
                                document="")

    started = []
    try:
        within = restart.BackgroundWrk(wrk_command, 60,
                                       tmp_path / "within.log")
        started.append(within.process)
        net.wait_until(lambda: len(seen) >= 10, 30,
                       what="wrk's first ten requests")
        result, _ = within.finish()
        within.check_bound()
        assert result["requests"] > 0

        ran_out = restart.BackgroundWrk(wrk_command, 1, tmp_path / "out.log")
        started.append(ran_out.process)
        # Exited by itself, left for finish to reap.
        net.wait_until(lambda: os.waitid(
            os.P_PID, ran_out.process.pid,
            os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None, 30,
            what="wrk -d1s to exit")
        result, _ = ran_out.finish()
        assert result["requests"] > 0
        with pytest.raises(load.LoadError, match=r"its bound, 1 s, ran out"):
            ran_out.check_bound()
    finally:
        for process in started:
            if process.returncode is None:
                process.kill()
                process.wait()


def _record(server, round_no, failed, rps, p99, ok=True):
    record = {"kernel_level": "native", "workload": "restart-close",
              "concurrency": 200, "server": server, "label": server,
              "round": round_no, "ok": ok, "error": None if ok else "boom",
              "error_log_tail": None, "restarted": False}
    if ok:
        errors = dict.fromkeys(report.ERROR_KINDS, 0)
        errors["write"] = failed
        record.update({
            "rps": rps, "requests": int(rps * 10), "success": int(rps * 10),
            "errors": errors, "latency_ms": {"p99": p99},
            "restart": {"variant": "held", "held": True, "swapped": False,
                        "planned": 2, "done": 2, "failed_requests": failed,
                        "stop_ms": [50.0, 100.0 * round_no],
                        "start_ms": [10.0, 20.0],
                        "slowest_ms": 100.0 * round_no, "forced_stops": 0}})
    return record


def test_summary_ratios_and_section_of_fixed_runs():
    records = [_record("event", 1, 50, 1000.0, 10.0),
               _record("event", 2, 70, 2000.0, 20.0),
               _record("bucketed-event-held", 1, 0, 1500.0, 5.0),
               _record("bucketed-event-held", 2, 0, 2000.0, 30.0),
               _record("bucketed-event-held", 3, 0, 0, 0, ok=False)]
    points = {p["server"]: p for p in report.summarize(records)}
    mine = points["bucketed-event-held"]
    assert mine["runs"] == 3 and mine["ok_runs"] == 2
    summary = mine["restart"]
    assert summary["failed_requests"] == [0, 0]
    assert summary["failed_total"] == 0
    assert summary["slowest_median_ms"] == 150.0
    assert summary["slowest_worst_ms"] == 200.0
    assert summary["rps"]["median"] == 1750.0
    assert mine["ratios"]["event"]["per_round"] == [1.5, 1.0]
    assert mine["p99_vs_event"]["per_round"] == [0.5, 1.5]
    assert points["event"]["restart"]["failed_total"] == 120

    options = {"levels": ["native"], "workloads": ["restart-close"],
               "concurrency": [200], "runs": 3, "restarts": 2}
    text = restart.section(list(points.values()), options)
    assert text.startswith("## Full restarts (issue 24)")
    assert "| event | 2/2 |" in text
    assert "120 (50/70)" in text
    assert "1.25x (1.00-1.50x)" in text            # req/s vs stock event
    assert "(1 of 3 runs failed)" in text
    # The sweep sections leave the restart workloads to their own.
    assert not list(report.workload_groups(list(points.values()), options))


def test_summary_of_no_successful_run_is_none():
    assert restart.summarize_runs([_record("event", 1, 0, 0, 0,
                                           ok=False)]) is None


def check_restart_record(path):
    """A restart run record: the schema, and a run that happened."""
    record = json.loads(path.read_text())
    assert RUN_KEYS <= set(record), path
    assert record["schema"] == "bucketbench.run/1"
    assert record["ok"], (path.name, record["error"],
                          record["error_log_tail"])
    assert MEASURED_KEYS <= set(record), path
    assert set(record["errors"]) == set(report.ERROR_KINDS)
    assert record["requests"] > 0 and record["rps"] > 0, path
    held = record["restart"]
    assert RESTART_KEYS <= set(held), path
    assert held["planned"] == held["done"] == RESTARTS
    assert len(held["total_ms"]) == RESTARTS
    assert all(ms > 0 for ms in held["total_ms"])
    assert held["slowest_ms"] == max(held["total_ms"])
    assert isinstance(held["failed_requests"], int)
    assert held["failed_requests"] == sum(record["errors"].values())
    return record


def test_restart_smoke_run(top, build, tmp_path):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "restart-wrk", "--servers",
                 ",".join(SERVERS), "--restarts", str(RESTARTS), "--runs",
                 "1", "--warmup", "0", "--slots", "64", "--concurrency",
                 "20", "--restart-stop-timeout", "5", "--out", str(out),
                 timeout=900)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    options = summary["meta"]["options"]
    assert options["restarts"] == RESTARTS
    assert options["levels"] == [catalog.NATIVE]

    raw = [check_restart_record(path) for path in (out / "raw").iterdir()]
    ran = {(r["workload"], r["server"]) for r in raw}
    # Every variant but the swap (no second build given) ran once.
    specs = [catalog.SERVERS[name] for name in SERVERS]
    for name in catalog.WORKLOAD_GROUPS["restart-wrk"]:
        for spec in restart.expand(specs, catalog.WORKLOADS[name], False):
            assert (name, spec.name) in ran
    assert len(raw) == len(ran)
    by_server = {(r["workload"], r["server"]): r for r in raw}
    held = by_server[("restart-close", "bucketed-event-held")]["restart"]
    assert held["held"] and not held["swapped"]
    assert not by_server[("restart-close", "prefork")]["restart"]["held"]
    assert any(s.get("workloads") == ["restart-close"]
               and "--swap-build" in s["reason"]
               for s in summary["skipped"])

    for point in summary["points"]:
        assert point["restart"]["restarts"] == [RESTARTS]
    text = (out / "report.md").read_text()
    assert "## Full restarts (issue 24)" in text
    assert "### restart-keepalive:" in text


@pytest.mark.parametrize("args, message", [
    (["--restarts", "0"], "--restarts must be at least 1"),
    (["--swap-build", "/nonexistent"], "--swap-build: /nonexistent"),
    (["--restart-stop-timeout", "0"], "--restart-stop-timeout must be"),
])
def test_restart_bad_input(top, build, tmp_path, args, message):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "restart", *args, "--out",
                 str(out), timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert not out.exists()
