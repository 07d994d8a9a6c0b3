# SPDX-License-Identifier: Apache-2.0
"""The skewed two-Listen workloads (issue 8) on fixed inputs: how wrk's
threads carry a split, the slow handler's configuration, which servers and
slots each workload gets, the targets and the side-by-side tables."""
import pytest

from bucketbench import catalog, cli, configs, load, report
from bucketbench.catalog import SERVERS, SKEW_THREADS, SLOW, STATIC, WORKLOADS
from bucketbench.runner import Plan

A, B = 8080, 8081


@pytest.mark.parametrize("split, threads, expected", [
    ((100,), 2, [A, A]),
    ((50, 50), 2, [A, B]),
    ((50, 50), 4, [A, B, A, B]),
    ((100, 0), 10, [A] * 10),
    ((90, 10), 10, [A, B] + [A] * 8),
    ((50, 50), 10, [A, B] * 5),
])
def test_thread_ports_carry_the_split(split, threads, expected):
    ports = [A, B][:len(split)]
    assert load.thread_ports(ports, split, threads) == expected


@pytest.mark.parametrize("split, threads, message", [
    ((90, 10), 2, "90 % of 2 is not a whole thread"),
    ((50, 50), 3, "50 % of 3 is not a whole thread"),
    ((60, 30), 10, "adding up to 100"),
])
def test_thread_ports_refuse_an_inexact_split(split, threads, message):
    with pytest.raises(load.SplitError, match=message):
        load.thread_ports([A, B], split, threads)
    assert message in load.split_error(split, threads)


def test_thread_ports_need_a_share_per_port():
    with pytest.raises(load.SplitError, match="2 port"):
        load.thread_ports([A, B], (100,), 2)


def test_lua_script_lists_the_port_of_every_thread():
    script = load.lua_script(load.thread_ports([A, B], (90, 10), 10))
    ports_line = next(line for line in script.splitlines()
                      if line.startswith("local ports"))
    assert ports_line.count(f'"{A}"') == 9 and ports_line.count(f'"{B}"') == 1


def test_wrk_requests_the_workload_document():
    command = load.wrk_command("wrk", ports=[A, B], connections=200,
                               threads=10, duration_s=3, timeout_s=2,
                               keep_alive=False, script_path="x.lua",
                               document=configs.SLOW_NAME)
    assert command[-1] == f"http://127.0.0.1:{A}/slow.lua"
    assert command[command.index("-t") + 1] == "10"
    assert "Connection: close" in command


def test_skew_workloads_are_exact_splits_of_their_threads():
    skewed = [WORKLOADS[name] for name in catalog.WORKLOAD_GROUPS["skew"]]
    assert {w.split for w in skewed} == {(100, 0), (90, 10), (50, 50)}
    assert {w.handler for w in skewed} == {STATIC, SLOW}
    for workload in skewed:
        assert workload.skewed and workload.listen_count == 2
        assert workload.wrk_threads == SKEW_THREADS
        assert load.split_error(workload.split, SKEW_THREADS) is None
        assert not workload.keep_alive
    assert WORKLOADS["skew-even-static"].target_vs_prefork == 1.5
    assert not WORKLOADS["w2"].skewed and \
        WORKLOADS["w2"].target_vs_prefork is None


def _httpd_config(slow):
    return configs.httpd_config(
        root="/srv/x", docroot="/srv/x/htdocs", ports=[A, B], mpm="prefork",
        mpm_module="/m/mod_mpm_prefork.so",
        module_paths={"lua": "/m/mod_lua.so"} if slow else {}, slots=64,
        slow_handler=slow)


def test_slow_handler_configuration():
    text = _httpd_config(slow=True)
    assert 'LoadModule lua_module "/m/mod_lua.so"' in text
    files = text.index('<Files "slow.lua">')
    assert text.index("SetHandler lua-script", files) < \
        text.index("</Files>", files)
    assert "MaxRequestWorkers 64" in text
    assert f"Listen 127.0.0.1:{A}" in text and f"Listen 127.0.0.1:{B}" in text
    assert "lua" not in _httpd_config(slow=False).lower()


def test_slow_handler_script_sleeps_then_answers():
    script = configs.slow_handler_script()
    assert f"r.usleep({configs.SLOW_HANDLER_MS * 1000})" in script
    assert 'r:puts("slow page done\\n")' in script
    assert script.index("usleep") < script.index("r:puts")
    assert configs.document(SLOW) == (configs.SLOW_NAME, configs.SLOW_BODY)
    assert configs.document(STATIC) == (configs.DOC_NAME, configs.DOC_BODY)


def _plan(servers, workloads, slow_slots=64):
    return Plan(levels=["native"], workloads=workloads,
                servers={"native": [SERVERS[s] for s in servers]},
                concurrency=[200], runs=5, duration_s=3, warmup_s=1,
                threads=2, timeout_s=2, slow_slots=slow_slots)


def test_plan_gives_each_workload_its_servers_slots_and_threads():
    plan = _plan(["prefork", "bucketed-reuseport", "nginx"],
                 ["w2", "skew-all-slow"])
    slow, w2 = WORKLOADS["skew-all-slow"], WORKLOADS["w2"]
    assert [s.name for s in plan.servers_for("native", slow)] == \
        ["prefork", "bucketed-reuseport"]
    assert len(plan.servers_for("native", w2)) == 3
    assert plan.slots_for(slow, 1024) == 64
    assert plan.slots_for(w2, 1024) == 1024
    assert plan.threads_for(slow) == SKEW_THREADS
    assert plan.threads_for(w2) == 2
    # nginx sits out the slow workload: 3 + 2 servers, 5 rounds each.
    assert plan.count_runs() == 25 and plan.count_warmups() == 5


def test_workload_group_expands_in_place():
    names = cli._names("w1,skew,w1", list(WORKLOADS), "workload",
                       catalog.WORKLOAD_GROUPS)
    assert names == ["w1", *catalog.WORKLOAD_GROUPS["skew"]]
    with pytest.raises(cli.UsageError, match="known: .*skew"):
        cli._names("w9", list(WORKLOADS), "workload",
                   catalog.WORKLOAD_GROUPS)


def _skew_points(run_record, rounds):
    """Summary points of native c=200 from {(server, workload): [req/s per
    round]}."""
    records = []
    for (server, workload), values in rounds.items():
        for round_no, rps in enumerate(values, 1):
            records.append(run_record(server, round_no, rps,
                                      workload=workload, concurrency=200))
    return report.summarize(records)


def test_target_verdicts_judge_the_median_ratio(run_record):
    points = _skew_points(run_record, {
        ("prefork", "skew-all-slow"): [100, 100, 100],
        ("bucketed-reuseport", "skew-all-slow"): [99, 101, 102],
        ("bucketed-single", "skew-all-slow"): [50, 50, 50],
        ("prefork", "skew-even-static"): [100, 200, 100],
        ("bucketed-listen", "skew-even-static"): [140, 300, 200],
        ("prefork", "w2"): [100, 100, 100],
        ("bucketed-listen", "w2"): [50, 50, 50],
    })
    verdicts = {(v["server"], v["workload"]): v
                for v in report.target_verdicts(points)}
    # single is a reference, w2 has no target: neither is judged.
    assert set(verdicts) == {("bucketed-reuseport", "skew-all-slow"),
                             ("bucketed-listen", "skew-even-static")}
    slow = verdicts[("bucketed-reuseport", "skew-all-slow")]
    assert slow["ratio"] == pytest.approx(1.01) and slow["met"] is True
    assert slow["target"] == 1.0
    even = verdicts[("bucketed-listen", "skew-even-static")]
    # Rounds 1.4, 1.5, 2.0: the median 1.5 reaches 1.5.
    assert even["per_round"] == pytest.approx([1.4, 1.5, 2.0])
    assert even["met"] is True


def test_target_not_met_and_not_judged(run_record):
    points = _skew_points(run_record, {
        ("prefork", "skew-90-static"): [100, 100, 100],
        ("bucketed-reuseport", "skew-90-static"): [98, 99, 120],
        ("bucketed-listen", "skew-90-slow"): [10, 10, 10],
    })
    verdicts = {v["server"]: v for v in report.target_verdicts(points)}
    assert verdicts["bucketed-reuseport"]["met"] is False
    # No prefork run of that workload: nothing to judge against.
    assert verdicts["bucketed-listen"]["met"] is None
    text = report.skew_section(points, {
        "workloads": ["skew-90-static", "skew-90-slow"],
        "levels": ["native"], "concurrency": [200], "slots": 1024,
        "slow_slots": 64}, "##")
    assert "0 of 2 met" in text
    assert "**NOT met**: bucketed-reuseport, skew-90-static, native " \
           "c=200: 0.990x stock prefork (target >= 1.00x; rounds " \
           "0.98-1.20x)" in text
    assert "not judged: bucketed-listen, skew-90-slow" in text


def test_skew_section_puts_the_workloads_side_by_side(run_record):
    points = _skew_points(run_record, {
        ("prefork", "skew-all-static"): [1000, 2000],
        ("bucketed-reuseport", "skew-all-static"): [1500, 3000],
        ("prefork", "skew-all-slow"): [100, 100],
        ("bucketed-reuseport", "skew-all-slow"): [100, 100],
        ("prefork", "w1"): [1, 1],
    })
    options = {"workloads": ["w1", "skew-all-static", "skew-all-slow"],
               "levels": ["native"], "concurrency": [200], "slots": 1024,
               "slow_slots": 64}
    text = report.skew_section(points, options, "##")
    assert text.startswith("## Skewed Listen load (issue 8)")
    assert "### native, c=200" in text
    assert "| Configuration | skew-all-static | skew-all-slow |" in text
    assert "| bucketed-reuseport | 1.50x (2,250) | 1.00x (100) |" in text
    assert "| prefork | – (1,500) | – (100) |" in text
    # Each record counts 1 error of each of the 5 kinds.
    assert "| prefork | 10 / 3,000 | 10 / 200 |" in text
    assert "2 of 2 met" in text
    assert report.skew_section(points, dict(options, workloads=["w1"])) == ""


def test_skipped_servers_say_which_workloads():
    entry = {"server": "nginx", "kernel_level": None,
             "workloads": ["skew-all-slow"], "reason": "no slow handler"}
    assert report.skip_text(entry) == \
        "nginx in skew-all-slow: no slow handler"
    assert report.skip_text({"server": "x", "kernel_level": "native",
                             "reason": "why"}) == "x at native: why"


def test_bucket_table_shows_where_the_children_ended(run_record):
    records = []
    for round_no, children in ((1, [20, 44]), (2, [1, 63])):
        record = run_record("bucketed-listen", round_no, 100,
                            workload="skew-all-slow")
        record["buckets"] = {
            "strategy": "listen", "bucket_count": 2, "spread": 2.0,
            "buckets": [{"bucket": b, "listen": f"127.0.0.1:{port}",
                         "accepted": accepted, "children": kids}
                        for b, port, accepted, kids in
                        ((0, A, 0, children[0]), (1, B, 500, children[1]))]}
        records.append(record)
    [point] = report.summarize(records)
    assert [b["children_at_end"] for b in point["buckets"]["accepted"]] == \
        [1, 63]
    table = report.bucket_table([point])
    assert f"0 (127.0.0.1:{A}) [1 children at end], " \
           f"1,000 (127.0.0.1:{B}) [63 children at end]" in table
