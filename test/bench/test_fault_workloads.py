# SPDX-License-Identifier: Apache-2.0
"""The faults workloads (issue 18, bench/bucketbench/faults.py): the pure
parts on fixed inputs, then bench/run --workloads faults in a quick mode
against stock prefork and bucketed. Checks that every fault ran and that
the report has its rows with numbers that parse, never what the numbers
are (timing on a shared 2-core machine is not a test)."""
import json
import re

import pytest

from bucketbench import catalog, configs, faults, report
from test_smoke import bench

QUICK_SERVERS = ("prefork", "bucketed-reuseport")
FAULT_WORKLOADS = catalog.WORKLOAD_GROUPS["faults"]
NUMBER = r"-?[\d,]+(\.\d+)?"


def test_windows_scale_with_the_fault_window():
    assert faults.windows(15) == {"crash": 15, "crash-exit": 15,
                                  "hang": 5, "emfile": 5,
                                  "emfile-bucket": 5}
    assert faults.windows(3)["hang"] == 1


def test_bucket_count_replaced_not_added():
    directives = ("BucketStrategy reuseport", "BucketCount auto")
    assert faults.with_bucket_count(directives, 4) == [
        "BucketStrategy reuseport", "BucketCount 4"]


@pytest.mark.parametrize("count, stopped", [(1, 1), (3, 1), (5, 2),
                                            (8, 2), (9, 3)])
def test_stock_share_is_a_bucket_worth(count, stopped):
    assert len(faults.stock_share(list(range(count)))) == stopped


@pytest.mark.parametrize("mpm, model", [("bucketed", "event"),
                                        ("bucketed", ""), ("event", "")])
def test_default_limits_keep_the_child_model(mpm, model):
    """Without the capacity lines (faults), bucketed still gets its
    ChildModel, and no server gets a limit of the harness's."""
    text = configs.httpd_config(
        root="/r", docroot="/d", ports=[8080], mpm=mpm,
        mpm_module="/m.so", module_paths={}, slots=64, child_model=model,
        capacity=False)
    assert ("ChildModel event" in text) == (model == "event")
    for directive in ("MaxRequestWorkers", "StartServers", "ServerLimit",
                      "ThreadsPerChild"):
        assert directive not in text


def test_fault_workloads_run_only_their_servers():
    crash = catalog.WORKLOADS["fault-crash"]
    assert catalog.unsupported_reason(catalog.SERVERS["nginx"], crash)
    for name in catalog.FAULT_SERVERS:
        assert catalog.unsupported_reason(catalog.SERVERS[name],
                                          crash) is None
    assert catalog.WORKLOADS["fault-emfile"].listen_count == 2
    assert catalog.WORKLOADS["fault-emfile-bucket"].listen_count == 2


def _fault_record(server, round_no, kind, p99, **extra):
    result = {"kind": kind, "probes": 10, "ok": 9, "timeouts": 1,
              "errors": 0, "error_samples": [],
              "latency_ms": {"p50": 1.0, "p99": p99, "max": p99 * 2}}
    result.update(extra)
    return {"kernel_level": "native", "workload": f"fault-{kind}",
            "concurrency": 50, "server": server, "label": server,
            "round": round_no, "ok": True, "error": None,
            "error_log_tail": None, "restarted": False, "fault": result,
            "rps": result.get("rps_with")}


def test_summary_and_section_of_fixed_runs():
    records = [_fault_record("prefork", r, "emfile", p99, survived=r != 2,
                             recovery_s=None if r == 2 else 0.5 * r,
                             killed_children=4, children_before=4 + r)
               for r, p99 in ((1, 10.0), (2, 30.0), (3, 20.0))]
    records += [_fault_record("prefork", r, "hang", 5.0, rps_with=50.0,
                              rps_without=100.0, throughput_ratio=0.5,
                              stopped_children=2) for r in (1, 2, 3)]
    points = report.summarize(records)
    emfile = points[0]["fault"]
    assert emfile["p99_ms"] == 20.0 and emfile["worst_max_ms"] == 60.0
    assert emfile["timeouts"] == [1, 1, 1] and emfile["survived"] == 2
    assert emfile["recovery_s"] == 1.0     # median of 0.5 and 1.5
    assert points[1]["fault"]["throughput_ratio"] == 0.5
    assert points[1]["rps"]["median"] == 50.0
    options = {"levels": ["native"], "runs": 3, "fault_s": 15,
               "workloads": ["fault-emfile", "fault-hang"]}
    text = faults.section(points, options)
    assert "| prefork | 10 | 1.0 | 20.0 | 40.0 (60.0) | 3 (1/1/1) | " \
           "0 (0/0/0) | 0 (0/0/0) | 2 of 3 | 1.00 (0.50-1.50) | " \
           "4 of 5/4 of 6/4 of 7 |" in text
    assert "| 0.50x (0.50-0.50) | 2 |" in text
    # The sweep tables and plots leave the faults out.
    assert list(report.workload_groups(points, options)) == []


def test_headline_sums_the_faults_run_by_run():
    """The results tables' figure: timeouts and errors of every fault, per
    run summed over the faults; the near-limit workloads are not faults."""
    records = []
    for server, timeouts in (("bucketed-event", (0, 0)),
                             ("event", (4, 9))):
        for round_no in (1, 2):
            for kind in ("crash", "hang", catalog.LIMIT_KINDS[0]):
                record = _fault_record(server, round_no, kind, 5.0,
                                       timeouts=timeouts[round_no - 1],
                                       errors=1)
                if kind in catalog.LIMIT_KINDS:
                    record["workload"] = kind
                records.append(record)
    assert faults.headline(report.summarize(records), {}) == (
        "failed probes, every fault: event model 4 (2 per run), "
        "stock event 30 (10-20 per run)")


def _rows(text, title_part):
    """The data rows of the table under the heading containing
    title_part, as lists of cells."""
    block = text.split(title_part, 1)[1].split("\n#", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in lines[2:]]


def test_faults_quick_run(top, build, tmp_path):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "faults", "--levels",
                 catalog.NATIVE, "--servers", ",".join(QUICK_SERVERS),
                 "--runs", "1", "--fault-seconds", "3", "--concurrency",
                 "8", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["options"]["fault_s"] == 3
    points = {(p["workload"], p["server"]): p for p in summary["points"]}
    ran = {server for _, server in points}
    assert "prefork" in ran
    text = (out / "report.md").read_text()
    assert "## Faults (issue 18)" in text
    for workload in FAULT_WORKLOADS:
        for server in ran:
            point = points[(workload, server)]
            assert point["ok_runs"] == 1, point["failures"]
            fault = point["fault"]
            assert fault["kind"] == catalog.WORKLOADS[workload].fault
            assert fault["probes"] >= 1
        rows = _rows(text, f"### {workload}:")
        assert len(rows) == len(ran), rows
        for row in rows:
            # probes, p50, p99, max (worst), timeouts, errors: numbers.
            assert re.fullmatch(NUMBER, row[1]), row
            for cell in row[2:4]:
                assert re.fullmatch(NUMBER, cell), row
            assert re.fullmatch(rf"{NUMBER} \({NUMBER}\)", row[4]), row
            for cell in row[5:7]:
                assert re.fullmatch(r"\d+ \(\d+\)", cell), row
    hang = _rows(text, "### fault-hang:")
    assert all(re.fullmatch(rf"{NUMBER}x \({NUMBER}-{NUMBER}\)", row[7])
               for row in hang), hang
    for spell in ("### fault-emfile:", "### fault-emfile-bucket:"):
        emfile = _rows(text, spell)
        assert all(re.fullmatch(r"\d+ \(\d+\)", row[7]) for row in emfile)
        assert all(re.fullmatch(r"[01] of 1", row[8]) for row in emfile)
        assert all(row[9] == "n/a" or re.match(NUMBER, row[9])
                   for row in emfile), emfile
        assert all(re.fullmatch(r"\d+ of \d+", row[10]) for row in emfile)
    for server in ran:
        fault = points[("fault-emfile", server)]["fault"]
        if catalog.SERVERS[server].one_connection_per_process:
            # One connection per process: the kill leaves a child.
            assert all(before > killed
                       for killed, before in fault["killed_of"]), fault
    conf = (out / "servers" / "native-fault-crash-prefork" /
            "httpd.conf").read_text()
    assert "MaxRequestWorkers" not in conf and "test-crash" in conf
    if "bucketed-reuseport" in ran:
        conf = (out / "servers" / "native-fault-emfile-bucketed-reuseport" /
                "httpd.conf").read_text()
        assert "BucketCount 4" in conf and "BucketCount auto" not in conf
    # No plots or sweep tables for the faults.
    assert not list(out.glob("plot-*.png"))


@pytest.mark.parametrize("args, message", [
    (["--fault-seconds", "2"], "--fault-seconds must be at least 3"),
    (["--fault-modules", "/nonexistent"], "the faults workloads need"),
])
def test_faults_bad_input(top, build, tmp_path, args, message):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "faults", *args, "--out",
                 str(out), timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert not out.exists()


class FakeClock:
    """time.monotonic and time.sleep for wait_for_a_spare(): sleeping
    advances it."""

    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def counts_at(clock, steps):
    """A children counter whose count is steps' [(from second, count)]."""
    def count():
        return [n for since, n in steps if since <= clock.now][-1]
    return count


def test_the_emfile_kill_waits_for_a_child_more_than_it_takes():
    # One child per bucket while backing off after the last spell, then
    # the first bucket's second child at 6 s.
    clock = FakeClock()
    count = counts_at(clock, [(0, 4), (6, 5)])
    assert faults.wait_for_a_spare(count, 4, clock=clock.clock,
                                   sleep=clock.sleep) == 5
    assert 6 <= clock.now < 6 + 2 * faults.REST_POLL_S


def test_the_emfile_kill_does_not_wait_for_a_server_at_rest():
    clock = FakeClock()
    count = counts_at(clock, [(0, 6)])
    assert faults.wait_for_a_spare(count, 4, clock=clock.clock,
                                   sleep=clock.sleep) == 6
    assert clock.now == 0


def test_the_emfile_kill_gives_up_on_a_server_without_a_spare():
    clock = FakeClock()
    count = counts_at(clock, [(0, 4)])
    with pytest.raises(faults.FaultError, match="never more than the 4"):
        faults.wait_for_a_spare(count, 4, clock=clock.clock,
                                sleep=clock.sleep)
    assert clock.now >= faults.SPARE_TIMEOUT_S


def test_the_emfile_kill_gives_up_on_a_server_that_exited():
    clock = FakeClock()
    count = counts_at(clock, [(0, 0)])
    with pytest.raises(faults.FaultError, match="exited"):
        faults.wait_for_a_spare(count, 4, alive=lambda: False,
                                clock=clock.clock, sleep=clock.sleep)
    assert clock.now == 0
