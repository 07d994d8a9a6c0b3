# SPDX-License-Identifier: Apache-2.0
"""Issue 39's restart workloads (bench/bucketbench/restart.py, workloads
restart-full and restart-graceful, `--workloads restart`): the pure parts
on fixed inputs, then bench/run with 2 restarts and 1 round against
bucketed in both child models, stock prefork, stock event and nginx.
Every run must have happened, with the counting keep-alive clients' GETs
and POSTs beside wrk's load, and bucketed must lose no POST (a stopping
child keeps its keep-alive connections: the fixed behaviour)."""
import json

from bucketbench import catalog, procfs, report, restart
from test_smoke import bench

SERVERS = ("prefork", "event", "bucketed-reuseport", "bucketed-event",
           "nginx")
RESTARTS = 2
KEEPALIVE_KEYS = {"requests", "failed", "gets", "gets_failed", "posts",
                  "posts_lost", "retries", "reopened", "told_to_close",
                  "first_errors"}


def test_variants_and_anchors():
    """bucketed restarts the workload's way, stock prefork, stock event
    and nginx gracefully (the anchors), all of them with the counting
    clients; the other servers sit these workloads out."""
    specs = [catalog.SERVERS[name] for name in SERVERS]
    for name, variants in (("restart-full", (catalog.RESTART_HELD,)),
                           ("restart-graceful",
                            (catalog.RESTART_GRACEFUL_UNCHANGED,
                             catalog.RESTART_GRACEFUL))):
        workload = catalog.WORKLOADS[name]
        servers = {s.name: s for s in restart.expand(specs, workload, True)}
        assert {n: s.restart for n, s in servers.items()} == {
            "prefork": catalog.RESTART_GRACEFUL,
            "event": catalog.RESTART_GRACEFUL,
            "nginx": catalog.RESTART_GRACEFUL,
            **{f"{base}-{variant}": variant for variant in variants
               for base in ("bucketed-reuseport", "bucketed-event")}}
        assert all(s.counted for s in servers.values())
        assert servers["prefork"].label.endswith("graceful restart (SIGUSR1)")
        assert servers["event"].label.endswith("graceful restart (SIGUSR1)")
        assert servers["nginx"].label.endswith("reload (SIGHUP)")
        for server_name, spec in catalog.SERVERS.items():
            reason = catalog.unsupported_reason(spec, workload)
            assert (reason is None) == (server_name in SERVERS), server_name
    assert catalog.WORKLOAD_GROUPS["restart"] == ("restart-full",
                                                  "restart-graceful")


def test_graceful_restarts_get_room_for_a_generation():
    threaded = "ServerLimit 8\nThreadsPerChild 32\nMaxRequestWorkers 256\n"
    assert restart._with_room_for_a_generation(threaded) == \
        "ServerLimit 16\nThreadsPerChild 32\nMaxRequestWorkers 256\n"
    prefork = "ServerLimit 64\nMaxRequestWorkers 64\n"
    assert restart._with_room_for_a_generation(prefork) == prefork


def _counted_record(server, round_no, posts_lost):
    errors = dict.fromkeys(report.ERROR_KINDS, 0)
    return {"kernel_level": "native", "workload": "restart-graceful",
            "concurrency": 200, "server": server, "label": server,
            "round": round_no, "ok": True, "error": None,
            "error_log_tail": None, "restarted": False, "rps": 1000.0,
            "requests": 10000, "success": 10000, "errors": errors,
            "latency_ms": {"p99": 10.0},
            "restart": {
                "variant": "graceful", "held": False, "swapped": False,
                "planned": 2, "done": 2, "failed_requests": 0,
                "stop_ms": [1000.0, 3000.0], "start_ms": [100.0, 300.0],
                "total_ms": [1000.0, 3000.0], "slowest_ms": 3000.0,
                "forced_stops": 0, "lingering": 1,
                "keepalive": {"requests": 500, "failed": 7, "gets": 250,
                              "gets_failed": 3, "posts": 250,
                              "posts_lost": posts_lost, "retries": 3,
                              "reopened": 9, "told_to_close": 2,
                              "first_errors": ["lost one"]},
                "closing": {"requests": 300, "failed": 1, "slow": 2,
                            "first_errors": ["reset"]},
                "kernel": {
                    "run": dict.fromkeys(procfs.TCP_COUNTERS, round_no),
                    "per_restart": [
                        dict.fromkeys(procfs.TCP_COUNTERS, round_no - 1),
                        dict.fromkeys(procfs.TCP_COUNTERS, 0)]},
                "timed": [[3.0, 3.5, "CLOSE", 1],
                          [5.0, 7.5, "CLOSE slow", 2],
                          [6.0, 8.5, "CLOSE slow", 2],
                          [9.0, 9.1, "GET", 0]]}}


def test_counted_summary_and_table():
    records = [_counted_record("event", 1, 4), _counted_record("event", 2, 6)]
    point = report.summarize(records)[0]
    kept = point["restart"]["keepalive"]
    assert kept["posts_lost"] == 10 and kept["posts_lost_per_run"] == [4, 6]
    assert kept["gets_failed_per_run"] == [3, 3] and kept["retries"] == 6
    assert point["restart"]["stop_worst_ms"] == 3000.0
    assert point["restart"]["lingering"] == 2
    options = {"levels": ["native"], "workloads": ["restart-graceful"],
               "concurrency": [200], "runs": 2, "restarts": 2}
    text = restart.section([point], options)
    assert "Every kind of client:" in text
    assert "| event | 2/2 | 20,000 | 0 (0/0) | 600 | 2 (1/1) | 4 (2/2) | " \
           "500 | 6 (3/3) | 6 | 500 | 10 (4/6) | 2,000 (3,000), 2 " \
           "children lingered | 200 (300) |" in text
    # Each run's timed failures and slow answers, by restart.
    assert "- event, round 2: outside any restart: 1 GET; restart 1: 1 " \
           "CLOSE; restart 2: 2 CLOSE slow\n" in text
    # The kernel's counters of each run, and how many of its restarts
    # counted any.
    assert "| event" + " | 1/2 (0/1)" * len(procfs.TCP_COUNTERS) + " |" \
        in text


def test_runs_from_before_the_kernel_counters_show_n_a():
    records = [_counted_record("event", 1, 4), _counted_record("event", 2, 6)]
    del records[1]["restart"]["kernel"]
    point = report.summarize(records)[0]
    assert restart.kernel_table([point]).splitlines()[-1] == \
        "| event" + " | n/a" * len(procfs.TCP_COUNTERS) + " |"
    # Nor one recorded with the sums of the restarts' own windows
    # (5aca39a), which said less than they seemed to.
    records = [_counted_record("event", 1, 4)]
    kernel = records[0]["restart"]["kernel"]
    kernel["in_restarts"] = kernel.pop("per_restart")[0]
    point = report.summarize(records)[0]
    assert restart.kernel_table([point]).splitlines()[-1] == \
        "| event" + " | n/a" * len(procfs.TCP_COUNTERS) + " |"


def test_timed_requests_go_to_the_restart_they_overlapped():
    windows = [(10.0, 12.0), (20.0, 25.0)]
    failures = [(9.5, 10.5, "GET"),           # begun before the first
                (13.0, 14.0, "CLOSE"),        # between them
                (30.0, 31.0, "POST")]         # after the last
    slow = [(24.0, 26.0, "CLOSE slow")]       # in the second restart
    assert restart.timed_by_restart(failures, slow, windows, 8.0) == {
        "timed": [[1.5, 2.5, "GET", 1], [5.0, 6.0, "CLOSE", 0],
                  [16.0, 18.0, "CLOSE slow", 2], [22.0, 23.0, "POST", 0]],
        "timed_dropped": 0}


def test_failures_are_kept_before_slow_answers():
    """Past TIMED_KEPT, a run keeps every failure it can and says how
    many it left out, however many slow answers came first."""
    kept = restart.TIMED_KEPT
    slow = [(float(n), n + 3.0, "CLOSE slow") for n in range(kept)]
    failures = [(500.0 + n, 501.0 + n, "CLOSE") for n in range(kept + 5)]
    placed = restart.timed_by_restart(failures, slow, [], 0.0)
    assert [t[2] for t in placed["timed"]] == ["CLOSE"] * kept
    assert placed["timed_dropped"] == kept + 5


def test_a_long_list_of_timed_requests_is_cut_short():
    timed = [[n, n + 1.0, "GET", n] for n in range(1, 10)]
    point = {"label": "stock event", "restart": {"timed": [(2, timed, 3)]}}
    listed = ", ".join(f"restart {n}: 1 GET" for n in range(1, 7))
    assert restart.timed_lines([point])[2] == (
        f"- stock event, round 2: {listed.replace(', r', '; r')}; 3 more "
        f"restarts; 3 more requests not kept")


def test_headline_counts_what_each_client_lost_per_run():
    """The results tables' figure per run on the full restarts, the
    graceful ones and bucketed's graceful ones changing BucketCount, a
    bucketed variant under its base's name: requests failed (wrk's errors
    but its timeouts, the keep-alive GETs' and the counted Connection:
    close clients' failures: 4 a run here besides wrk's), those not
    answered within 2 s (wrk's timeouts, which it counts as errors too,
    and the counted clients' slow answers: 2 a run here) and lost
    POSTs. A stock server's graceful restarts fill its graceful cell."""
    records = []
    for workload, server, failed, late, lost in (
            ("restart-full", "bucketed-event-held", (0, 62), (0, 60),
             (0, 0)),
            ("restart-full", "event", (5, 5), (0, 0), (1, 3)),
            ("restart-full", "nginx", (0, 0), (0, 0), (0, 0)),
            ("restart-graceful", "bucketed-event-unchanged", (0, 0), (0, 0),
             (0, 0)),
            ("restart-graceful", "bucketed-event-graceful", (9, 9), (7, 9),
             (0, 1)),
            ("restart-graceful", "event", (1, 1), (0, 0), (2, 2))):
        for round_no in (1, 2):
            record = _counted_record(server, round_no, lost[round_no - 1])
            record["workload"] = workload
            record["restart"]["failed_requests"] = failed[round_no - 1]
            record["errors"]["timeout"] = late[round_no - 1]
            records.append(record)
    options = {"workloads": ["restart-full", "restart-graceful"]}
    assert restart.headline(report.summarize(records), options) == (
        "requests failed / not answered within 2 s / POSTs lost per run: "
        "event model full 4-6 / 2-62 / 0, graceful 4 / 2 / 0, BucketCount "
        "changed 4-6 / 9-11 / 0-1; stock event full 9 / 2 / 1-3, graceful "
        "5 / 2 / 2; nginx full 4 / 2 / 0")


def check_counted_record(path):
    record = json.loads(path.read_text())
    assert record["ok"], (path.name, record["error"],
                          record["error_log_tail"])
    done = record["restart"]
    assert done["planned"] == done["done"] == RESTARTS
    assert len(done["stop_ms"]) == RESTARTS
    kept = done["keepalive"]
    assert KEEPALIVE_KEYS <= set(kept), path
    assert kept["gets"] > 0 and kept["posts"] > 0, (path.name, kept)
    assert kept["requests"] == kept["gets"] + kept["posts"]
    closing = done["closing"]
    assert closing["requests"] > 0, (path.name, closing)
    # Every failure the clients counted is timed (while they fit).
    failed = [t for t in done["timed"] if not t[2].endswith("slow")]
    assert len(failed) == min(kept["failed"] + closing["failed"],
                              restart.TIMED_KEPT)
    # The kernel's counters this kernel has, over the run and from each
    # restart's start to the next's.
    kernel = done["kernel"]
    assert len(kernel["per_restart"]) == RESTARTS
    assert all(set(one) == set(procfs.tcp_counters())
               for one in [kernel["run"]] + kernel["per_restart"]), kernel
    assert all(0 <= sum(one[name] for one in kernel["per_restart"])
               <= kernel["run"][name] for name in kernel["run"]), kernel
    return record


def test_counted_restart_run(top, build, tmp_path):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "restart", "--servers",
                 ",".join(SERVERS), "--restarts", str(RESTARTS), "--runs",
                 "1", "--warmup", "0", "--slots", "64", "--concurrency",
                 "20", "--restart-stop-timeout", "10", "--out", str(out),
                 timeout=900)
    assert done.returncode == 0, done.stderr
    raw = [check_counted_record(path) for path in (out / "raw").iterdir()]
    ran = {(r["workload"], r["server"]) for r in raw}
    specs = [catalog.SERVERS[name] for name in SERVERS]
    expected = {(name, spec.name)
                for name in catalog.WORKLOAD_GROUPS["restart"]
                for spec in restart.expand(specs, catalog.WORKLOADS[name],
                                           False)}
    assert ran == expected
    lost = {(r["workload"], r["server"]):
            r["restart"]["keepalive"]["posts_lost"] for r in raw}
    bucketed = {key: n for key, n in lost.items()
                if key[1].startswith("bucketed")}
    assert len(bucketed) == 6
    assert not any(bucketed.values()), (
        lost, [r["restart"]["keepalive"]["first_errors"] for r in raw
               if r["server"].startswith("bucketed")])
    # Nor a new connection's request.
    closing = {(r["workload"], r["server"]): r["restart"]["closing"]
               for r in raw if r["server"].startswith("bucketed")}
    assert not any(c["failed"] for c in closing.values()), closing
    text = (out / "report.md").read_text()
    assert "Every kind of client:" in text
    assert "### restart-graceful:" in text and "### restart-full:" in text
