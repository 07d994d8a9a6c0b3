# SPDX-License-Identifier: Apache-2.0
"""The idle workload (issue 9): its pure parts on fixed inputs (limits,
AsyncRequestWorkerFactor, memory per connection, the response parser, the
report's rows and targets), the holder against a loopback server the test
controls, one run against the real servers with 200 idle connections, and
bad input."""
import json
import resource
import socket
import threading

import pytest

from bucketbench import catalog, configs, idle, report
from bucketbench.catalog import SERVERS, WORKLOADS
from bucketbench.net import LOOPBACK, wait_until
from bucketbench.runner import Plan
# The smoke tests' way to run bench/run (test/bench is on the import path).
from test_smoke import bench

INF = resource.RLIM_INFINITY
PORTS = (32768, 60999)


# ---------------------------------------------------------------- limits

def test_required_descriptors_cover_the_busiest_process():
    # The harness holds 10,000; an nginx worker may hold them plus its
    # 1,024 slots.
    assert idle.required_descriptors(10000, 150, 1024) \
        == 10000 + 1024 + idle.SPARE_DESCRIPTORS
    assert idle.required_descriptors(100, 2000, 1024) \
        == 100 + 2000 + idle.SPARE_DESCRIPTORS


@pytest.mark.parametrize("count, slots, factor", [
    (10000, 1024, 16),    # 1.5 x 11,024 / 1,024 = 16.1 -> (16 + 1) x 1,024
    (200, 32, 10),        # 1.5 x 232 / 32 = 10.9 -> (10 + 1) x 32 = 352
    (10, 1024, 2),        # never below event's default
])
def test_async_factor_gives_room_for_the_idle_connections(count, slots,
                                                          factor):
    assert idle.async_factor(count, slots) == factor
    capacity = idle.event_capacity(factor, slots)
    assert capacity >= idle.ASYNC_HEADROOM * (count + slots)
    assert capacity >= count + slots


def test_per_connection_bytes():
    assert idle.per_connection_bytes(1000, 3000, 10) == 200
    assert idle.per_connection_bytes(3000, 1000, 10) == -200
    assert idle.per_connection_bytes(None, 3000, 10) is None
    assert idle.per_connection_bytes(1000, None, 10) is None
    assert idle.per_connection_bytes(1000, 3000, 0) is None


@pytest.mark.parametrize("count, hard, ports, duration, message", [
    (0, INF, PORTS, 2, "--idle-connections must be at least 1, got 0"),
    (-5, INF, PORTS, 2, "at least 1"),
    (10000, 4096, PORTS, 2, "the hard limit (RLIMIT_NOFILE, ulimit -Hn) is "
                            "4,096"),
    (10000, INF, (40000, 49999), 2, "ephemeral ports"),
    (10000, INF, PORTS, 25, "--duration 25 is too long"),
])
def test_check_counts_refuses(count, hard, ports, duration, message):
    assert message in idle.check_counts(count, 150, 1024, duration, hard,
                                        ports)


def test_check_counts_accepts_the_defaults():
    assert idle.check_counts(10000, 150, 1024, 5, 20000, PORTS) is None
    assert idle.check_counts(10000, 150, 1024, 20, INF, PORTS) is None


def test_raise_nofile_limit_refuses_above_the_hard_limit():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == INF:
        pytest.skip("no hard limit to exceed")
    with pytest.raises(idle.IdleError, match="hard RLIMIT_NOFILE"):
        idle.raise_nofile_limit(hard + 1)


# ---------------------------------------------------------------- parser

@pytest.mark.parametrize("data, expected", [
    (b"HTTP/1.1 200 OK\r\nContent-Len", (None, False)),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nHello", (200, False)),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nHello", (200, True)),
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", (404, True)),
])
def test_response_state(data, expected):
    assert idle.response_state(data) == expected


@pytest.mark.parametrize("data", [
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"x" * (idle.RESPONSE_LIMIT + 1),
])
def test_response_state_refuses(data):
    with pytest.raises(ValueError):
        idle.response_state(data)


# ---------------------------------------------------------------- holder

class TinyServer:
    """Accepts connections on loopback, answers each one GET and keeps
    them; close_some(n) then closes n of them from the server's side."""

    def __init__(self):
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port = self.listener.getsockname()[1]
        self.kept = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.listener.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            with self.lock:
                self.kept.append(conn)

    def close_some(self, count):
        with self.lock:
            for conn in self.kept[:count]:
                conn.close()
            self.kept = self.kept[count:]

    def shutdown(self):
        self.stop = True
        self.thread.join()
        self.listener.close()
        self.close_some(len(self.kept))


def test_holder_sees_what_the_server_closed():
    server = TinyServer()
    try:
        with idle.IdleConnections(server.port, "/x", 40) as held:
            assert held.open(timeout_s=30) == 40
            assert held.failures == {} and held.open_s > 0
            assert held.count_open() == 40
            server.close_some(15)
            wait_until(lambda: held.count_open() == 25, 10,
                       what="25 connections left open")
            assert held.held_s() >= held.open_s
    finally:
        server.shutdown()


def test_holder_counts_failures_when_nobody_listens():
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]       # bound, not listening: refused
        with idle.IdleConnections(port, "/x", 5) as held:
            assert held.open(timeout_s=10) == 0
            assert sum(held.failures.values()) == 5
            assert held.count_open() == 0


# ---------------------------------------------------------------- catalog

def test_prefork_models_sit_the_idle_workload_out():
    workload = WORKLOADS["idle"]
    assert not workload.idle or workload.keep_alive
    out = {name for name, spec in SERVERS.items()
           if catalog.unsupported_reason(spec, workload)}
    assert out == {"prefork", "prefork-lcbr1", "bucketed-reuseport",
                   "bucketed-listen", "bucketed-single", "bucketed-auto",
                   "bucketed-cpu", "bucketed-load"}
    assert catalog.unsupported_reason(SERVERS["prefork"], workload) \
        == catalog.IDLE_NOT_SUPPORTED
    plan = Plan(levels=["native"], workloads=["idle"],
                servers={"native": list(SERVERS.values())},
                concurrency=[150], runs=1, duration_s=1, warmup_s=0,
                threads=2, timeout_s=2, idle_connections=100)
    assert [s.name for s in plan.servers_for("native", workload)] == \
        ["event", "event-lcbr1", "bucketed-event", "nginx"]
    assert "idle" not in catalog.DEFAULT_WORKLOADS


def test_idle_configs_are_alike_for_both_event_servers():
    factor = idle.async_factor(10000, 1024)
    texts = []
    for spec in (SERVERS["event"], SERVERS["bucketed-event"]):
        text = configs.httpd_config(
            root="/r", docroot="/d", ports=[8080], mpm=spec.mpm,
            mpm_module="/m.so", module_paths={}, slots=1024,
            child_model=spec.child_model,
            keepalive_timeout_s=idle.KEEPALIVE_TIMEOUT_S,
            async_factor=factor)
        assert f"AsyncRequestWorkerFactor {factor}\n" in text
        assert "KeepAliveTimeout 60\n" in text
        texts.append([line for line in text.splitlines()
                      if line.split(" ")[0] in (
                          "ServerLimit", "ThreadsPerChild",
                          "MaxRequestWorkers", "AsyncRequestWorkerFactor",
                          "KeepAliveTimeout", "StartServers")])
    assert texts[0] == texts[1]
    plain = configs.httpd_config(
        root="/r", docroot="/d", ports=[8080], mpm="event",
        mpm_module="/m.so", module_paths={}, slots=1024)
    assert "AsyncRequestWorkerFactor" not in plain
    assert f"KeepAliveTimeout {configs.KEEPALIVE_TIMEOUT_S}\n" in plain
    nginx = configs.nginx_config(
        root="/r", docroot="/d", ports=[8080], slots=1024, workers=2,
        reuseport=True, idle_connections=10000, keepalive_timeout_s=60)
    assert "worker_connections 11088;" in nginx
    assert "worker_rlimit_nofile 11088;" in nginx
    assert "keepalive_timeout 60s;" in nginx


# ---------------------------------------------------------------- report

def _idle_record(run_record, server, round_no, p99, before, with_idle,
                 open_at_end=100):
    record = run_record(server, round_no, 1000.0, workload="idle",
                        concurrency=150)
    record["latency_ms"]["p99"] = p99
    record["idle"] = {
        "connections": 100, "opened": 100, "failures": {"refused": 1},
        "open_at_end": open_at_end, "open_s": 0.5, "held_s": 3.0,
        "memory_kind": "pss", "memory_before_bytes": before,
        "memory_with_idle_bytes": with_idle,
        "memory_at_end_bytes": with_idle + 2 ** 20,
        "per_connection_bytes": idle.per_connection_bytes(before, with_idle,
                                                          100),
        "server_nofile_min": 20000}
    return record


def test_idle_summary_rows_and_targets(run_record):
    mb = 2 ** 20
    records = []
    # Round 1: bucketed-event's p99 lower, its memory per connection the
    # same; round 2: p99 higher, memory lower; round 3: both higher.
    for round_no, (event, ours) in enumerate((
            ((20.0, 10 * mb, 13 * mb), (10.0, 8 * mb, 11 * mb)),
            ((20.0, 10 * mb, 13 * mb), (30.0, 8 * mb, 10 * mb)),
            ((20.0, 10 * mb, 13 * mb), (40.0, 8 * mb, 12 * mb))), 1):
        records.append(_idle_record(run_record, "event", round_no, *event))
        records.append(_idle_record(run_record, "bucketed-event", round_no,
                                    *ours, open_at_end=100 - round_no))
    points = {p["server"]: p for p in report.summarize(records)}
    ours = points["bucketed-event"]["idle"]
    assert ours["open_at_end_min"] == 97
    assert ours["failures"] == {"refused": 3}
    assert ours["memory_before_mb"] == 8.0
    assert ours["memory_with_idle_mb"] == 11.0
    assert ours["memory_at_end_mb"] == 12.0
    # (11 - 8) MB / 100 connections = 30.72 kB
    assert ours["per_connection_kb"] == pytest.approx(30.72)
    vs = ours["vs_event"]
    assert vs["p99"]["per_round"] == [0.5, 1.5, 2.0]
    assert vs["p99"]["median"] == 1.5
    assert vs["per_connection"]["per_round"] == [1.0, pytest.approx(2 / 3),
                                                 pytest.approx(4 / 3)]
    assert "vs_event" not in points["event"]["idle"]

    verdicts = {v["measure"]: v for v in report.idle_verdicts(
        list(points.values()))}
    assert verdicts["p99"]["met"] is False
    assert verdicts["per_connection"]["met"] is True

    table = report.idle_table([points["event"], points["bucketed-event"]])
    assert "| PSS before MB | PSS with idle MB | PSS at end MB |" in table
    row = table.splitlines()[3]
    assert row.startswith("| bucketed-event | 1,000 | 30.0 | 15 / 3,000 | "
                          "97 / 100 | 8.0 | 11.0 | 12.0 | 30.72 | 0.5 |")
    options = {"levels": ["native"], "concurrency": [150], "runs": 3,
               "duration_s": 2}
    text = report.idle_section(list(points.values()), options)
    assert "### native, 100 idle, c=150 active" in text
    assert "| bucketed-event | 1.00x | 1.500x (0.500-2.000x) | 1.000x " \
           "(0.667-1.333x) |" in text
    assert "1 of 2 met" in text
    assert report.idle_section(
        [p for p in report.summarize([run_record("event", 1, 5.0)])],
        options) == ""


# ---------------------------------------------------------------- real runs

def test_idle_workload_against_the_real_servers(top, build, tmp_path):
    """200 idle connections, one run of 1 s per server: every server that
    can hold them holds them all to the end, beside wrk's requests; the
    prefork models are skipped with the reason."""
    needed = idle.required_descriptors(200, 150, 1024)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != INF and hard < needed:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) is below the "
                    f"{needed} this run needs")
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "idle", "--levels", "native",
                 "--servers", "event,bucketed-event,nginx,prefork",
                 "--idle-connections", "200", "--runs", "1", "--duration",
                 "1", "--warmup", "0", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["options"]["idle_connections"] == 200
    assert summary["meta"]["options"]["concurrency"] == [150]
    assert {"server": "prefork", "kernel_level": None, "workloads": ["idle"],
            "reason": catalog.IDLE_NOT_SUPPORTED} in summary["skipped"]
    points = {p["server"]: p for p in summary["points"]}
    # bucketed-event runs when the module is built (test_smoke checks that).
    assert {"event", "nginx"} <= set(points) <= {"event", "bucketed-event",
                                                 "nginx"}
    for name, point in points.items():
        assert point["ok_runs"] == 1, point["failures"]
        assert point["success"] > 0
    for path in (out / "raw").iterdir():
        record = json.loads(path.read_text())
        held = record["idle"]
        assert held["opened"] == 200 and held["failures"] == {}, held
        if record["server"] == "event":
            # Stock event closes a process's keep-alive connections when
            # all its workers are busy (its AsyncRequestWorkerFactor
            # documentation): on a loaded machine some of these go.
            assert 0 <= held["open_at_end"] <= 200, held
        else:
            # bucketed's event model and nginx close an idle connection
            # only at its keep-alive timeout (60 s, far off).
            assert held["open_at_end"] == 200, held
        assert held["held_s"] < idle.KEEPALIVE_TIMEOUT_S
        for key in ("memory_before_bytes", "memory_with_idle_bytes",
                    "memory_at_end_bytes"):
            assert held[key] > 0, (record["server"], key)
        assert held["server_nofile_min"] >= 200
        if record["server"] != "nginx":
            # httpd builds a connection's pools for each: kilobytes apiece.
            assert held["per_connection_bytes"] > 1024, held
        else:
            assert held["per_connection_bytes"] is not None
    conf = (out / "servers" / "native-idle-event" / "httpd.conf").read_text()
    assert "KeepAliveTimeout 60\n" in conf
    assert f"AsyncRequestWorkerFactor {idle.async_factor(200, 1024)}" in conf
    text = (out / "report.md").read_text()
    assert "## Idle keep-alive connections beside an active load" in text
    assert "| 200 / 200 |" in text


def _low_hard_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.mark.parametrize("args, preexec_fn, message", [
    (["--idle-connections", "0"], None,
     "--idle-connections must be at least 1, got 0"),
    (["--idle-connections", "2000"], _low_hard_limit,
     "the hard limit (RLIMIT_NOFILE, ulimit -Hn) is 1,024"),
    (["--idle-connections", "100", "--duration", "30"], None,
     "--duration 30 is too long for the idle workload"),
])
def test_idle_bad_input_fails_before_any_load(top, build, tmp_path, args,
                                              preexec_fn, message):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "idle", "--servers", "event",
                 *args, "--out", str(out), preexec_fn=preexec_fn,
                 timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not out.exists()


def test_idle_not_checked_without_the_idle_workload(top, build, tmp_path):
    """--idle-connections only matters to the idle workload: --list with a
    bad value still works (nothing is validated that does not run)."""
    done = bench(top, build, "--list", "--idle-connections", "0", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "not run in the idle workload" in done.stdout
