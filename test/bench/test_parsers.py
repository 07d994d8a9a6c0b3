"""Parsing what the harness reads back: wrk's result line and bucketed's
status page."""
import pytest

from bucketbench import bucket_status, load

STATUS_PAGE = """strategy=reuseport
buckets=2
bucket=0 sockets=1 listen=127.0.0.1:8080 children=3 idle=2 busy=1 accepted=1234
bucket=1 sockets=1 listen=127.0.0.1:8080 children=3 idle=3 busy=0 accepted=1000
"""


def test_status_page_parsing():
    status = bucket_status.parse_status(STATUS_PAGE)
    assert status["strategy"] == "reuseport"
    assert status["bucket_count"] == 2
    assert [b["accepted"] for b in status["buckets"]] == [1234, 1000]
    assert status["buckets"][0]["listen"] == "127.0.0.1:8080"


def test_accepted_delta_and_spread():
    before = bucket_status.parse_status(STATUS_PAGE)
    after = bucket_status.parse_status(
        STATUS_PAGE.replace("accepted=1234", "accepted=1334")
                   .replace("accepted=1000", "accepted=1300"))
    delta = bucket_status.accepted_delta(before, after)
    assert [b["accepted"] for b in delta["buckets"]] == [100, 300]
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
