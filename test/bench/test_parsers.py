# SPDX-License-Identifier: Apache-2.0
"""Parsing what the harness reads back: wrk's result line and bucketed's
status page."""
import pytest

from bucketbench import bucket_status, load

STATUS_PAGE = """mpm=bucketed
strategy=reuseport
reason=SO_REUSEPORT works: one socket per bucket
kernel=reuseport=yes incoming_cpu=yes
generation=3
buckets=2
bucket=1 sockets=2 listen=127.0.0.1:8080 [::1]:8081 children=3 idle=3 busy=0 accepted=1000
bucket=0 sockets=2 listen=127.0.0.1:8080 [::1]:8081 children=3 idle=2 busy=1 accepted=1234
"""


def test_status_page_parsing():
    status = bucket_status.parse_status(STATUS_PAGE)
    assert status["strategy"] == "reuseport"
    assert status["buckets"] == 2
    assert status["generation"] == 3
    # Header values run to the end of the line, spaces and "=" included.
    assert status["reason"] == "SO_REUSEPORT works: one socket per bucket"
    assert status["kernel"] == "reuseport=yes incoming_cpu=yes"
    buckets = status["buckets_list"]
    assert [b["bucket"] for b in buckets] == [0, 1]
    assert [b["accepted"] for b in buckets] == [1234, 1000]
    assert buckets[0] == {"bucket": 0, "sockets": 2,
                          "listen": ["127.0.0.1:8080", "[::1]:8081"],
                          "children": 3, "idle": 2, "busy": 1,
                          "accepted": 1234}


def test_status_page_bucket_without_listeners():
    status = bucket_status.parse_status(
        "buckets=1\nbucket=0 sockets=0 listen= children=0 idle=0 busy=0 "
        "accepted=0\n")
    assert status["buckets_list"][0]["listen"] == []
    assert status["buckets_list"][0]["children"] == 0


def test_status_page_appended_fields():
    status = bucket_status.parse_status(
        "buckets=1\nsteering=hash\nbucket=0 sockets=1 listen=127.0.0.1:80 "
        "children=2 idle=1 busy=1 accepted=7 queue=3 max_queue=5 "
        "backlog=511\n")
    assert status["steering"] == "hash"
    bucket = status["buckets_list"][0]
    assert (bucket["accepted"], bucket["queue"], bucket["max_queue"],
            bucket["backlog"]) == (7, 3, 5, 511)
    assert "drops" not in bucket


def test_accepted_delta_and_spread():
    before = bucket_status.parse_status(STATUS_PAGE)
    after = bucket_status.parse_status(
        STATUS_PAGE.replace("accepted=1234", "accepted=1334")
                   .replace("children=3 idle=3 busy=0 accepted=1000",
                            "children=5 idle=5 busy=0 accepted=1300"))
    delta = bucket_status.accepted_delta(before, after)
    assert [b["accepted"] for b in delta["buckets"]] == [100, 300]
    # Children as the second snapshot has them (they move between buckets).
    assert [b["children"] for b in delta["buckets"]] == [3, 5]
    assert delta["buckets"][0]["listen"] == "127.0.0.1:8080 [::1]:8081"
    assert delta["strategy"] == "reuseport" and delta["bucket_count"] == 2
    assert delta["spread"] == pytest.approx(1.0)   # (300 - 100) / 200


def test_wrk_result_line():
    stdout = ("Running 1s test @ http://127.0.0.1:1/hello.txt\n"
              + load.RESULT_MARKER
              + '{"duration_us":2000000,"requests":1000,"bytes":250000,'
                '"errors":{"connect":1,"read":2,"write":3,"status":4,'
                '"timeout":5},"latency_us":{"min":100,"mean":1500.5,'
                '"max":9000,"stdev":10.0,"p50":1000,"p90":2000,"p99":3000,'
                '"p99.9":4000}}\n')
    result = load.parse_result(stdout)
    assert result["rps"] == 500
    assert result["success"] == 996
    assert result["errors"] == {"connect": 1, "read": 2, "write": 3,
                                "timeout": 5, "non_2xx": 4}
    assert result["latency_ms"]["p99.9"] == 4.0


def test_wrk_without_result_line():
    assert load.parse_result("unable to connect to 127.0.0.1:1\n") is None


def test_lua_script_gives_threads_the_ports_in_turn():
    script = load.lua_script([8080, 8081])
    assert 'local ports = {"8080", "8081"}' in script
    assert load.RESULT_MARKER in script


def test_bucketed_event_row_gets_event_capacity():
    """The bucketed-event row: ChildModel event, then stock event's thread
    directives for the same request slots, and one process per
    ThreadsPerChild slots."""
    from bucketbench import catalog, configs

    spec = catalog.SERVERS["bucketed-event"]
    assert spec.mpm == "bucketed" and spec.child_model == "event"
    lines = configs.httpd_capacity(spec.mpm, 256, spec.child_model)
    assert lines[0] == "ChildModel event"
    assert lines[1:] == configs.httpd_capacity("event", 256)
    assert configs.httpd_processes(spec.mpm, 256, spec.child_model) \
        == configs.httpd_processes("event", 256)
    # The prefork-model rows keep one process per slot and no ChildModel.
    prefork_lines = configs.httpd_capacity("bucketed", 256)
    assert not any(line.startswith("ChildModel") for line in prefork_lines)
    assert configs.httpd_processes("bucketed", 256) == 257


def test_bucketed_event_b1_row_is_the_event_row_with_one_bucket():
    """bucketed-event-b1: the bucketed-event row but BucketCount 1, which
    its configuration keeps at the default limits too (no capacity
    directives)."""
    from bucketbench import catalog, configs

    auto = catalog.SERVERS["bucketed-event"]
    one = catalog.SERVERS["bucketed-event-b1"]
    assert (one.mpm, one.child_model) == (auto.mpm, auto.child_model)
    assert one.directives == tuple("BucketCount 1"
                                   if d == "BucketCount auto" else d
                                   for d in auto.directives)
    text = configs.httpd_config(
        root="/r", docroot="/d", ports=[8080], mpm=one.mpm,
        mpm_module="/m.so", module_paths={}, slots=1024,
        child_model=one.child_model, directives=one.directives,
        capacity=False)
    lines = text.splitlines()
    assert "ChildModel event" in lines and "BucketCount 1" in lines
    assert not any(line.startswith(("ThreadsPerChild", "ServerLimit"))
                   for line in lines)


def test_bucketed_event_free_row_is_the_event_row_with_affinity_off():
    """bucketed-event-free: the bucketed-event row with its children left
    free to move between CPUs (BucketAffinity off; auto keeps them)."""
    from bucketbench import catalog

    auto = catalog.SERVERS["bucketed-event"]
    free = catalog.SERVERS["bucketed-event-free"]
    assert (free.mpm, free.child_model) == (auto.mpm, auto.child_model)
    assert free.directives == auto.directives + ("BucketAffinity off",)
