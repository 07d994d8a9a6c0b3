# SPDX-License-Identifier: Apache-2.0
"""
Per-bucket observability: mod_status's section (HTML and ?auto), the
Prometheus endpoint (promtool and a real Prometheus server scraping it), the
bucketed-status text page, the parent's accept-queue samples (depth, highest
depth, drops of an overflowing backlog) and its warning about a queue that
stays full.
"""
import errno
import re
import shutil
import signal
import socket
import subprocess
import urllib.request

from httpd_fixture import (CGI_BODY, CHILD_MODELS,
                           HELD_CGI_BOUND, HTTP_TIMEOUT, LOOPBACK,
                           STATUS_DIRECTIVES, STATUS_SO,
                           BackgroundGet, Load, http_get,
                           processes_mentioning, wait_until)
from prometheus_server import Prometheus


# Two Listen ports, one bucket each (BucketStrategy listen: a bucket is the
# address the client connected to), two children each: port 0's bucket can
# be held busy while port 1's answers status requests. When a bucket has no
# idle child the parent moves one over from a bucket with two idle children
# more than it has (policy_maint.c), once here; held CGIs keep that one busy
# too.
# The event model's children get one thread each, so that a held CGI makes
# one of them busy as it makes a prefork child busy.
TWO_CHILDREN_PER_PORT = """
BucketStrategy listen
ServerLimit 4
MaxRequestWorkers 4
StartServers 4
"""
SPARES_OF_ONE_THREAD = {
    "prefork": "MinSpareServers 2\nMaxSpareServers 4\n",
    "event": "ThreadsPerChild 1\nMinSpareThreads 2\nMaxSpareThreads 4\n",
}

WAIT = 20          # bound of every wait on the parent's samples, seconds


# ---------------------------------------------------------------- helpers

def get_text(port, path):
    status, body = http_get(port, path)
    assert status == 200, f"{path} answered {status}"
    return body.decode()


def parse_auto(text):
    """mod_status's ?auto page as {key: value}, split at the first ': '."""
    return dict(line.split(": ", 1) for line in text.splitlines()
                if ": " in line)


_BUCKET_KEY = re.compile(r"BucketedBucket\[(\d+)\](?:Socket\[(\d+)\])?(\w+)$")


def auto_buckets(auto):
    """The BucketedBucket[...] keys of a ?auto page as {bucket: {key: value,
    "sockets": {socket: {key: value}}}}; numbers as int."""
    buckets = {}
    for key, value in auto.items():
        m = _BUCKET_KEY.match(key)
        if not m:
            continue
        value = int(value) if value.isdigit() else value
        bucket = buckets.setdefault(int(m.group(1)), {"sockets": {}})
        if m.group(2) is None:
            bucket[m.group(3)] = value
        else:
            bucket["sockets"].setdefault(int(m.group(2)), {})[
                m.group(3)] = value
    return buckets


def status_auto(port):
    auto = parse_auto(get_text(port, "/server-status?auto"))
    return auto, auto_buckets(auto)


def socket_of(buckets, address):
    """(bucket, socket entry) of the socket listening on address."""
    for number, bucket in buckets.items():
        for entry in bucket["sockets"].values():
            if entry["Listen"] == address:
                return number, entry
    raise AssertionError(f"no socket listens on {address}: {buckets}")


def html_bucket_rows(html):
    """(bucket, children, idle, busy, accepted) of each row of the HTML
    bucket table."""
    section = html.split("Listener buckets", 1)[1]
    return [tuple(int(n) for n in m.groups()) for m in re.finditer(
        r'<tr><td rowspan="\d+">(\d+)</td><td rowspan="\d+">(\d+)</td>'
        r'<td rowspan="\d+">(\d+)</td><td rowspan="\d+">(\d+)</td>'
        r'<td rowspan="\d+">(\d+)</td>', section)]


def sampled(port, buckets_expected):
    """Waits until the parent has published a census and a queue sample
    for every bucket; returns the ?auto page then."""
    def ready():
        auto, buckets = status_auto(port)
        if len(buckets) != buckets_expected:
            return None
        if all(b["Children"] >= 1 and all("QueueDepth" in s
                                          for s in b["sockets"].values())
               for b in buckets.values()):
            return auto, buckets
        return None
    return wait_until(ready, WAIT, what="the parent's first sample")


def total_accepted(buckets):
    return sum(b["Accepted"] for b in buckets.values())


def hold_busy(server, port, count):
    """`count` held CGI requests to port, in the background, each holding a
    child until server.release_held(); returns them once all run (beyond
    the bucket's two children, once children have moved over)."""
    held = [BackgroundGet(port, "/cgi-bin/held.cgi", timeout=HELD_CGI_BOUND)
            for _ in range(count)]
    wait_until(lambda: len(processes_mentioning(
        str(server.root / "cgi-bin"))) >= count, WAIT,
        what=f"{count} held CGIs running")
    return held


def cgi_done(server, held):
    """Releases the held CGIs; whether each then answered."""
    server.release_held()
    return [h.result() for h in held] \
        == [(200, (CGI_BODY + "\n").encode())] * len(held)


class HeldConnections:
    """Client connections to a port that the test keeps open: with
    `request`, each sends a complete GET (so that TCP_DEFER_ACCEPT lets it
    into the accept queue), else nothing. Non-blocking connects: beyond the
    backlog the kernel drops the SYNs, and the clients keep retrying."""

    def __init__(self, port, count, request=True):
        self.socks = []
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex((LOOPBACK, port))
            self.socks.append(s)
        if request:
            for s in self.socks:
                wait_until(lambda: s.connect_ex((LOOPBACK, port)) in
                           (0, errno.EISCONN), HTTP_TIMEOUT,
                           what="a held connection to be established")
                s.setblocking(True)
                s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                          b"Connection: close\r\n\r\n")

    def responses(self):
        """Each connection's status line, once the server answers."""
        lines = []
        for s in self.socks:
            s.settimeout(HTTP_TIMEOUT)
            lines.append(s.makefile("rb").readline().strip())
        return lines

    def close(self):
        for s in self.socks:
            s.close()


# ---------------------------------------------------------------- tests

# Threads per child: the census counts children, idle and busy workers.
THREADS = {"prefork": "", "event": "ThreadsPerChild 4\n"}
WORKERS_PER_CHILD = {"prefork": 1, "event": 4}


def test_mod_status_shows_every_bucket_and_counts_add_up(make_httpd,
                                                         child_model):
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + THREADS[child_model]
                        + "BucketCount 3\nStartServers 6\n"
                        + STATUS_DIRECTIVES)
    server.start()
    port = server.ports[0]
    before, buckets = sampled(port, 3)
    assert before["ServerMPM"] == "bucketed"
    assert before["BucketedStrategy"] == "reuseport"
    assert before["BucketedSteering"] == "load"    # auto, on this kernel
    assert before["BucketedBuckets"] == "3"
    for number, bucket in buckets.items():
        assert bucket["Sockets"] == 1
        assert bucket["Children"] * WORKERS_PER_CHILD[child_model] \
            == bucket["IdleWorkers"] + bucket["BusyWorkers"]
        entry = bucket["sockets"][0]
        assert entry["Listen"] == f"{LOOPBACK}:{port}"
        assert entry["Backlog"] == 511
        # httpd's default AcceptFilter (TCP_DEFER_ACCEPT) makes the
        # kernel count every handshake ACK as a drop: not reported.
        assert entry["DeferAccept"] == 1
        assert "Drops" not in entry

    # Five seconds of load: longer than the queue warning's three, so a
    # queue wrongly seen as full would be warned about.
    result = Load([port], count=10**6, threads=4, seconds=5).run()
    assert result.failed == 0, result.errors
    auto, buckets = status_auto(port)
    accepted = [buckets[b]["Accepted"] for b in sorted(buckets)]
    print(f"{result}; accepted per bucket {accepted}")
    # Every connection is counted once, in one bucket: the load's, plus the
    # status request that reads the counts.
    assert total_accepted(buckets) == total_accepted(
        auto_buckets(before)) + result.total + 1
    assert all(n > 0 for n in accepted), accepted
    # mod_status's own report is intact.
    for key in ("Total Accesses", "BusyWorkers", "IdleWorkers",
                "Scoreboard"):
        assert key in auto, key

    html = get_text(port, "/server-status")
    rows = html_bucket_rows(html)
    assert [row[0] for row in rows] == [0, 1, 2]
    assert sum(row[4] for row in rows) == total_accepted(buckets) + 1
    assert all(row[1] * WORKERS_PER_CHILD[child_model] == row[2] + row[3]
               for row in rows)
    assert "n/a (AcceptFilter)" in html
    assert "<th>Srv</th><th>PID</th>" in html          # mod_status's table
    assert "Scoreboard Key" in html
    assert "accept queue of bucket" not in server.error_log()


def test_busy_bucket_shows_its_queue(make_httpd, child_model):
    server = make_httpd(listens=2, cgi=True,
                        directives=CHILD_MODELS[child_model]
                        + TWO_CHILDREN_PER_PORT
                        + SPARES_OF_ONE_THREAD[child_model]
                        + STATUS_DIRECTIVES)
    server.start()
    busy_port, status_port = server.ports
    _, buckets = sampled(status_port, 2)
    busy, _ = socket_of(buckets, f"{LOOPBACK}:{busy_port}")

    # Its two children and the one moved over: all busy.
    cgis = hold_busy(server, busy_port, 3)
    held = HeldConnections(busy_port, 3)
    try:
        def queued():
            _, buckets = status_auto(status_port)
            _, entry = socket_of(buckets, f"{LOOPBACK}:{busy_port}")
            return (buckets, entry) if entry["QueueDepth"] >= 3 \
                and buckets[busy]["IdleWorkers"] == 0 else None
        buckets, entry = wait_until(
            queued, WAIT, what="a busy bucket with 3 connections queued")
        print(f"busy bucket: {buckets[busy]}")
        assert buckets[busy]["BusyWorkers"] >= 2
        assert entry["MaxQueueDepth"] >= entry["QueueDepth"]

        # The same numbers in the other two views.
        depth = entry["QueueDepth"]
        text = server.status(status_port)["buckets_list"][busy]
        assert text["queue"] == depth and text["idle"] == 0
        metrics = get_text(status_port, "/metrics")
        assert (f'bucketed_listener_queued_connections{{bucket="{busy}",'
                f'listen="{LOOPBACK}:{busy_port}"}} {depth}') in metrics

        # The children finish the CGIs, then serve the queued requests.
        assert cgi_done(server, cgis)
        assert held.responses() == [b"HTTP/1.1 200 OK"] * 3
    finally:
        server.release_held()
        held.close()

    def drained():
        _, buckets = status_auto(status_port)
        _, entry = socket_of(buckets, f"{LOOPBACK}:{busy_port}")
        return entry if entry["QueueDepth"] == 0 else None
    entry = wait_until(drained, WAIT, what="the queue to drain")
    assert entry["MaxQueueDepth"] >= 3


def test_overflowing_backlog_counts_drops_and_warns(make_httpd, child_model):
    """ListenBacklog 1 admits two connections; with the bucket's children
    busy, the kernel drops the SYNs of the others (and their retries) and counts
    them on the socket (SO_MEMINFO). Without TCP_DEFER_ACCEPT (AcceptFilter
    none) nothing else is counted there."""
    server = make_httpd(listens=2, cgi=True,
                        directives=CHILD_MODELS[child_model]
                        + TWO_CHILDREN_PER_PORT
                        + SPARES_OF_ONE_THREAD[child_model] + STATUS_DIRECTIVES
                        + "ListenBacklog 1\nAcceptFilter http none\n")
    server.start()
    busy_port, status_port = server.ports
    address = f"{LOOPBACK}:{busy_port}"
    _, buckets = sampled(status_port, 2)
    busy, entry = socket_of(buckets, address)
    assert entry["Backlog"] == 1
    assert entry["DeferAccept"] == 0
    assert entry["Drops"] == 0

    # Its two children and the one moved over: all busy, so the queue
    # stays full (an event child with a free worker would take every held
    # connection and wait for their requests).
    cgis = hold_busy(server, busy_port, 3)
    held = HeldConnections(busy_port, 6, request=False)
    try:
        def dropping():
            _, buckets = status_auto(status_port)
            _, entry = socket_of(buckets, address)
            return entry if entry["Drops"] > 0 else None
        entry = wait_until(dropping, WAIT, what="drops on the full socket")
        assert entry["MaxQueueDepth"] >= 1
        warning = wait_until(
            lambda: re.search(rf"the accept queue of bucket {busy} "
                              rf"\({re.escape(address)}\) has been full "
                              rf"for \d+ s: .*packet\(s\) dropped",
                              server.error_log()),
            WAIT, what="the full-queue warning")
        print(warning.group(0))
        # The other bucket's socket took every status request of this test
        # and dropped nothing.
        _, buckets = status_auto(status_port)
        _, other = socket_of(buckets, f"{LOOPBACK}:{status_port}")
        assert other["Drops"] == 0
        metrics = get_text(status_port, "/metrics")
        m = re.search(rf'bucketed_listener_drops_total{{bucket="{busy}",'
                      rf'listen="{re.escape(address)}"}} (\d+)', metrics)
        assert m and int(m.group(1)) > 0, metrics
    finally:
        held.close()
    assert cgi_done(server, cgis)
    # One warning per socket per minute, however long it stays full.
    assert len(re.findall(r"the accept queue of bucket",
                          server.error_log())) == 1


def test_metrics_pass_promtool(make_httpd, child_model):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: scripts/deps.sh installs prometheus"
    server = make_httpd(listens=2, directives=CHILD_MODELS[child_model]
                        + "BucketCount 3\n" + STATUS_DIRECTIVES)
    server.start()
    sampled(server.ports[0], 3)
    status, body = http_get(server.ports[0], "/metrics")
    assert status == 200
    conn_type = urllib.request.urlopen(
        f"http://{LOOPBACK}:{server.ports[0]}/metrics",
        timeout=HTTP_TIMEOUT).headers["Content-Type"]
    assert conn_type == "text/plain; version=0.0.4; charset=utf-8"
    check = subprocess.run([promtool, "check", "metrics"], input=body,
                           capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout + check.stderr == b""     # no lint complaints

    text = body.decode()
    families = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    helps = re.findall(r"^# HELP (\S+) ", text, re.M)
    assert [name for name, _ in families] == helps
    for name, kind in families:
        assert name.endswith("_total") == (kind == "counter"), name
    buckets = set(re.findall(
        r'^bucketed_bucket_accepted_connections_total\{bucket="(\d+)"\}',
        text, re.M))
    assert buckets == {"0", "1", "2"}
    listens = set(re.findall(
        r'^bucketed_listener_backlog_connections\{bucket="\d+",'
        r'listen="([^"]+)"\} 511$', text, re.M))
    assert listens == {f"{LOOPBACK}:{p}" for p in server.ports}


def test_prometheus_scrapes_bucket_metrics(make_httpd, child_model):
    assert shutil.which("prometheus"), \
        "prometheus not found: scripts/deps.sh installs it"
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + THREADS[child_model] + "BucketCount 2\n"
                        + STATUS_DIRECTIVES)
    server.start()
    port = server.ports[0]
    sampled(port, 2)
    prometheus = Prometheus(f"{LOOPBACK}:{port}")
    try:
        prometheus.wait_ready()
        before = sum(b["accepted"] for b in server.status()["buckets_list"])
        requests = 200
        result = Load([port], count=requests, threads=4).run()
        assert result.ok == requests, result.errors

        def scraped():
            series = prometheus.query(
                "bucketed_bucket_accepted_connections_total")
            total = sum(float(s["value"][1]) for s in series)
            return series if total >= before + requests else None
        series = wait_until(scraped, 60, interval=0.5,
                            what="Prometheus to scrape the new counts")
        assert sorted(s["metric"]["bucket"] for s in series) == ["0", "1"]
        assert {s["metric"]["job"] for s in series} == {"bucketed"}
        backlog = prometheus.query("bucketed_listener_backlog_connections")
        assert {(s["metric"]["listen"], s["value"][1]) for s in backlog} \
            == {(f"{LOOPBACK}:{port}", "511")}
    finally:
        prometheus.stop()


def test_graceful_restart_to_a_bigger_plan(make_httpd, child_model):
    """The published segment is sized per generation: a restart to more
    buckets and sockets shows all of them."""
    server = make_httpd(listens=2, directives=CHILD_MODELS[child_model]
                        + "BucketCount 2\n" + STATUS_DIRECTIVES)
    server.start()
    sampled(server.ports[0], 2)
    server.write_config(CHILD_MODELS[child_model]
                        + "BucketCount 5\nStartServers 5\n"
                        + STATUS_DIRECTIVES)
    server.signal(signal.SIGUSR1)
    auto, buckets = sampled(server.ports[0], 5)
    assert auto["BucketedGeneration"] == "1"
    # Under reuseport every bucket has a socket on every address.
    for bucket in buckets.values():
        assert sorted(entry["Listen"] for entry in
                      bucket["sockets"].values()) \
            == sorted(f"{LOOPBACK}:{p}" for p in server.ports)
    assert not server.exited()
    assert "Segmentation fault" not in server.error_log()


def test_not_bucketed_shows_nothing(make_httpd):
    """Under another MPM the section is absent and the handlers answer
    404, with the module loaded all the same."""
    server = make_httpd(mpm="prefork",
                        directives=f"LoadModule bucketed_status_module "
                                   f"{STATUS_SO}\n" + STATUS_DIRECTIVES)
    server.start()
    port = server.ports[0]
    auto = get_text(port, "/server-status?auto")
    assert "ServerMPM: prefork" in auto
    assert "Bucketed" not in auto
    assert "Listener buckets" not in get_text(port, "/server-status")
    assert http_get(port, "/metrics")[0] == 404
    assert http_get(port, "/bucketed-status")[0] == 404
