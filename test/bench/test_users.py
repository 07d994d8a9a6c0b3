# SPDX-License-Identifier: Apache-2.0
"""The workloads users serve (issue 26, bench/bucketbench/users.py): the
pure parts on fixed inputs, then every one of them run very briefly by
bench/run against the real servers (stock prefork and event, bucketed in
both child models, nginx). Checks that every run succeeded, bucketed's
with no error, that tls-resume's connections resumed, and that its record
and the report are well-formed, never what the throughput or latency is
(timing on a shared 2-core machine is not a test)."""
import json
import os

import pytest

from bucketbench import catalog, load, report, users
from test_smoke import bench

SERVERS = catalog.USERS_SERVERS
USERS = catalog.WORKLOAD_GROUPS["users"]
# A run of bench/run for all of them: 11 workloads, 5 servers, 1 s each.
ALL_TIMEOUT_S = 900

H2LOAD_OUTPUT = """\
Application protocol: h2
finished in 1.00s, 6900.00 req/s, 1.23MB/s
requests: 6900 total, 7000 started, 6900 done, 6890 succeeded, 10 failed, \
4 errored, 3 timeout
status codes: 6890 2xx, 0 3xx, 2 4xx, 1 5xx
traffic: 1.23MB (1289000) total, 0.1MB (100000) headers
"""
S_TIME_OUTPUT = ("starting\nrrrr*rr\n\n800 connections in 0.52s; "
                 "1500.00 connections/user sec, bytes read 40000\n"
                 "800 connections in 2 real seconds, 250 bytes read per "
                 "connection\n")


def test_group_names_every_new_workload():
    assert set(USERS) == {name for name, *_ in catalog.USERS_WORKLOADS}
    for name in USERS:
        workload = catalog.WORKLOADS[name]
        assert workload.users == name and workload.users_concurrency > 0
        assert catalog.unsupported_reason(catalog.SERVERS["prefork-lcbr1"],
                                          workload)
    assert catalog.unsupported_reason(catalog.SERVERS["nginx"],
                                      catalog.WORKLOADS["php-mod"])
    assert catalog.unsupported_reason(catalog.SERVERS["nginx"],
                                      catalog.WORKLOADS["php-fpm"]) is None


def test_h2load_totals_and_latencies():
    result = users.parse_h2load(H2LOAD_OUTPUT, [1000, 2000, 3000])
    assert result["requests"] == 6900 and result["success"] == 6890
    assert result["errors"] == {"connect": 0, "read": 4, "write": 0,
                                "timeout": 3, "non_2xx": 3}
    assert result["bytes"] == 1289000
    assert result["latency_ms"]["p50"] == 2.0
    assert result["protocol"] == "h2"
    assert users.parse_h2load("no totals", []) is None


def test_h2load_run_time_in_its_own_unit():
    """A run cut short prints ms or us: read, not taken for no totals."""
    requests = ("requests: 10 total, 10 started, 10 done, 0 succeeded, "
                "10 failed, 10 errored, 0 timeout\n")
    for printed, seconds in (("5.00s", 5.0), ("38.44ms", 0.03844),
                             ("812.00us", 0.000812)):
        text = f"finished in {printed}, 0.00 req/s, 0B/s\n{requests}"
        duration_s, counts = load.h2load_totals(text)
        assert duration_s == pytest.approx(seconds)
        assert counts["errored"] == 10 and counts["succeeded"] == 0
    assert load.h2load_totals(requests) is None


def test_s_time_totals_count_connections_not_resumed():
    result = users.parse_s_time([(0, S_TIME_OUTPUT)] * 2, 2.0)
    assert result["requests"] == 1600 and result["rps"] == 800.0
    assert result["not_resumed"] == 2 and result["latency_ms"] is None
    assert result["bytes"] == 1600 * 250
    assert users.parse_s_time([(0, "starting\n")], 1.0) is None


def test_nginx_gets_tls_http2_and_the_proxy():
    class Fixtures:
        cert, key, port = "/c.pem", "/k.pem", 4321
        fpm_socket = "/s"
    text = ("http {\n    server {\n        listen 127.0.0.1:80 reuseport;\n"
            "        root /d;\n    }\n}\n")
    h2 = users.nginx_edit(text, "h2-conns", Fixtures, [80], "/d")
    assert "listen 127.0.0.1:80 ssl http2 reuseport;" in h2
    assert "ssl_protocols TLSv1.3;" in h2
    proxy = users.nginx_edit(text, "proxy-tuned", Fixtures, [80], "/d")
    assert proxy.index("upstream backend") < proxy.index("server {")
    assert "server 127.0.0.1:4321;" in proxy and " ssl" not in proxy
    lines = users.httpd_directives("tls-resume", Fixtures, "/m", "/r")
    assert "SSLProtocol -all +TLSv1.3" in lines


def test_headline_spans_the_workloads(run_record):
    """The results tables' figure: the median over the workloads of the
    event model's same-round ratio against stock event, and the two
    ends."""
    records = [run_record(server, round_no, rps, workload=workload)
               for workload, ours in (("tls-handshake", 1.2),
                                      ("php-fpm", 0.9), ("large-1m", 1.0))
               for round_no in (1, 2)
               for server, rps in (("event", 1000.0),
                                   ("bucketed-event", 1000.0 * ours))]
    for record in records:
        record.update(bytes=2 ** 20, bytes_per_s=2 ** 20)
    assert users.headline(report.summarize(records), {}) == (
        "event model / stock event req/s over 3 workloads: median 1.00x "
        "(php-fpm 0.90x to tls-handshake 1.20x)")


@pytest.fixture(scope="module")
def users_run(tmp_path_factory):
    """One brief bench/run of every workload users serve."""
    top = os.environ.get("BUCKETED_TOP", os.path.join(
        os.path.dirname(__file__), "..", ".."))
    top = os.path.abspath(top)
    build = os.path.abspath(os.environ.get("BUCKETED_BUILD", top))
    out = tmp_path_factory.mktemp("users") / "run"
    done = bench(top, build, "--workloads", "users", "--servers",
                 ",".join(SERVERS), "--runs", "1", "--duration", "1",
                 "--warmup", "0", "--slots", "128", "--out", str(out),
                 timeout=ALL_TIMEOUT_S)
    records = [json.loads((out / "raw" / name).read_text())
               for name in sorted(os.listdir(out / "raw"))]
    # A failed run's whole error: the progress lines show its first line.
    assert done.returncode == 0, done.stderr + "".join(
        f"\n{r['server']} {r['workload']}: {r['error']}"
        for r in records if not r["ok"])
    return out, records


@pytest.mark.parametrize("name", USERS)
def test_each_workload_ran_on_every_server(users_run, name):
    _, records = users_run
    ran = [r for r in records if r["workload"] == name]
    expected = [server for server in SERVERS if catalog.unsupported_reason(
        catalog.SERVERS[server], catalog.WORKLOADS[name]) is None]
    assert sorted(r["server"] for r in ran) == sorted(expected)
    for record in ran:
        where = f"{name} {record['server']}"
        assert record["ok"], f"{where}: {record['error']}"
        assert record["concurrency"] == \
            catalog.WORKLOADS[name].users_concurrency
        assert record["bytes"] > 0 and record["bytes_per_s"] > 0, where
        if name != "large-100m":    # 1 s may end before one 100 MB answer
            assert record["success"] > 0, where
        assert set(record["errors"]) == {"connect", "read", "write",
                                         "timeout", "non_2xx"}
        if record["server"].startswith("bucketed"):
            # What README claims of bucketed: every request answered. The
            # baselines' own errors (stock event's on TLS keep-alive and
            # HTTP/2, nginx's as a proxy, some runs) are what is measured
            # against, counted in the report.
            assert sum(record["errors"].values()) == 0, \
                f"{where}: {record['errors']}"
        assert record["server_cpu_s"] >= 0 and record["client_cpu_s"] > 0
        if name == "tls-resume":
            assert record["latency_ms"] is None
            # s_time -reuse offers its first connection's session on every
            # later one; a server that does not resume it gives each a
            # full handshake (marked, counted as not resumed).
            assert record["requests"] > 0, where
            assert record["not_resumed"] <= record["requests"] // 10, \
                f"{where}: {record['not_resumed']} of " \
                f"{record['requests']} connections not resumed"
        elif record["success"]:
            assert record["latency_ms"]["p50"] <= record["latency_ms"]["p99"]
        if name in users.H2_STREAMS:
            assert record["protocol"] in ("h2", "http/1.1"), where


def test_report_has_each_table_and_plot(users_run):
    out, _ = users_run
    text = (out / "report.md").read_text()
    assert "## Workloads users serve side by side" in text
    for name in USERS:
        assert f"### {name}: " in text
        assert (out / f"plot-users-{name}.png").stat().st_size > 0
