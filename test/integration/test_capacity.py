# SPDX-License-Identifier: Apache-2.0
"""
Capacity follows load: a busy Listen address is served by more than its
bucket's even share of children, with SO_REUSEPORT (every bucket has a
socket per address) and without it (one bucket per Listen; children move
to the busy bucket), but never a child whose moving would close a client's
connection; and a request a child proxies to its own server is always
served, however few children there are.
"""
import collections
import re
import time

import pytest

from httpd_fixture import (APACHE_MODULES, CHILD_MODELS, HELD_CGI_BOUND,
                           LOOPBACK, NOREUSEPORT_SO, BackgroundGet, Load,
                           children_of, http_get, need_build,
                           ss_listening, wait_until)
from event_server import get_index, open_keepalive

MAX_WORKERS = 16
# The children of each model for MAX_WORKERS workers, with a bucket's
# spares: prefork 16 children, event 8 of 2 threads.
CAPACITY = {
    "prefork": (f"MaxRequestWorkers {MAX_WORKERS}\nServerLimit {MAX_WORKERS}\n"
                "StartServers 4\nMinSpareServers 2\nMaxSpareServers 4\n"),
    "event": (f"ThreadsPerChild 2\nMaxRequestWorkers {MAX_WORKERS}\n"
              f"ServerLimit {MAX_WORKERS // 2}\nStartServers 4\n"
              "MinSpareThreads 2\nMaxSpareThreads 8\n"),
}
CHILDREN = {"prefork": MAX_WORKERS, "event": MAX_WORKERS // 2}
# Seconds the slow CGI takes: long enough that the load keeps every child
# of the busy address occupied.
CGI_SECONDS = "0.3"
CGI_BODY = b"slow cgi done\n"


def access_log_lines(directives_root):
    """Access log directives recording the serving child's pid and the
    local port of each request."""
    # mod_log_config is built into Debian's httpd.
    return (f"CustomLog {directives_root}/logs/access.log "
            f"\"%P %{{local}}p %>s\"\n")


def served_by(server):
    """{port: set of child pids} from the access log."""
    pids = collections.defaultdict(set)
    path = server.root / "logs" / "access.log"
    for line in path.read_text().splitlines():
        pid, port, _ = line.split()
        pids[int(port)].add(int(pid))
    return pids


def busy_workers(server):
    return sum(b["busy"] for b in server.status(server.ports[1])
               ["buckets_list"])


def skewed_load(server):
    """More clients than children, all on the first port."""
    return Load([server.ports[0]], count=100000, threads=MAX_WORKERS + 8,
                seconds=60, path=f"/cgi-bin/slow.cgi?{CGI_SECONDS}",
                body=CGI_BODY)


def run_skewed(server, child_model, buckets, until):
    """Loads port 0 until the children serving it exceed one bucket's even
    share and nearly every worker is busy; the quiet port keeps answering.
    Returns the first status page (asked on the quiet port) for which
    until(status) holds, waited for while the load runs."""
    even_share = CHILDREN[child_model] // buckets
    load = skewed_load(server).start()
    try:
        wait_until(lambda: busy_workers(server) >= MAX_WORKERS - 2, 60,
                   what=f"at least {MAX_WORKERS - 2} busy workers")
        wait_until(lambda: len(served_by(server)[server.ports[0]])
                   > even_share, 60,
                   what=f"more than {even_share} children to serve the "
                        f"busy port")
        # The quiet port is still answered while the busy one takes
        # (nearly) everything.
        assert http_get(server.ports[1])[0] == 200
        status = wait_until(lambda: until_status(server, until), 60,
                            what="the status page to show it")
    finally:
        result = load.stop()
    assert result.failed == 0, result.errors
    return status


def until_status(server, until):
    status = server.status(server.ports[1])
    return status if until(status) else None


def capacity_config(server_root, child_model, extra=""):
    return (CHILD_MODELS[child_model] + CAPACITY[child_model]
            + access_log_lines(server_root) + extra)


def test_busy_port_uses_every_bucket_with_reuseport(make_httpd, child_model):
    server = make_httpd(listens=2, cgi=True)
    server.write_config(capacity_config(server.root, child_model,
                                        "BucketCount 2\n"))
    server.start()
    assert server.status()["strategy"] == "reuseport"
    # Both buckets' children served the busy port.
    status = run_skewed(server, child_model, 2, lambda st: all(
        b["accepted"] > 0 for b in st["buckets_list"]))
    print(f"served the busy port: {len(served_by(server)[server.ports[0]])} "
          f"children; buckets {status['buckets_list']}")


def test_children_move_to_busy_bucket_without_reuseport(make_httpd,
                                                       child_model):
    """One bucket per Listen: the busy address's bucket gets the free
    slots, then children moved from the quiet bucket, which keeps one
    idle worker and keeps serving; the children moved held no
    connection."""
    need_build(NOREUSEPORT_SO)
    server = make_httpd(listens=2, cgi=True, preload=NOREUSEPORT_SO)
    server.write_config(capacity_config(server.root, child_model))
    server.start()
    status = server.status()
    assert status["strategy"] == "listen"
    assert status["buckets"] == 2
    def busy_and_quiet(st):
        return sorted(st["buckets_list"], key=lambda b: f"{LOOPBACK}:"
                      f"{server.ports[0]}" not in b["listen"])

    def moved(st):
        busy_bucket, quiet_bucket = busy_and_quiet(st)
        # More than its even share in the busy bucket; the quiet bucket
        # gave children away but kept one idle.
        return (busy_bucket["children"] > CHILDREN[child_model] // 2
                and quiet_bucket["idle"] >= 1)
    status = run_skewed(server, child_model, 2, moved)
    print("busy bucket {}, quiet bucket {}".format(*busy_and_quiet(status)))
    log = server.error_log()
    assert "children move between buckets" in log
    assert re.search(r"moves to bucket \d \(0 connection\(s\) open\)", log)


def test_event_child_holding_keepalive_connections_is_not_moved(
        make_httpd):
    """One bucket per Listen, ChildModel event, every slot taken: the busy
    address's bucket would take an idle child of the quiet one, but each
    of those holds an idle keep-alive connection, which moving it would
    close (an HTTP/2 client loses what it had not yet sent). They stay;
    the busy bucket makes do with its own children."""
    need_build(NOREUSEPORT_SO)
    server = make_httpd(listens=2, cgi=True, preload=NOREUSEPORT_SO)
    server.write_config(
        "ChildModel event\nThreadsPerChild 2\nMaxRequestWorkers 8\n"
        "ServerLimit 4\nStartServers 4\nMinSpareThreads 2\n"
        "MaxSpareThreads 8\nKeepAliveTimeout 60\n"
        + access_log_lines(server.root))
    server.start()
    assert server.status()["strategy"] == "listen"
    quiet = server.ports[1]
    log = server.root / "logs" / "access.log"
    # Keep-alive connections to the quiet address until both of its
    # children hold one (a child takes at most 2 + 2 x 2 connections).
    def logged():
        return log.read_text().splitlines() if log.exists() else []

    kept, holders = [], set()
    while len(holders) < 2 and len(kept) < 16:
        before = len(logged())
        kept += open_keepalive(quiet, 1)
        lines = wait_until(lambda: len(logged()) > before and logged(), 10,
                           what="the request's access log line")
        holders.add(int(lines[-1].split()[0]))
    assert len(holders) == 2, holders
    load = Load([server.ports[0]], count=10 ** 6, threads=12, seconds=60,
                path=f"/cgi-bin/slow.cgi?{CGI_SECONDS}", body=CGI_BODY)
    load.start()
    try:
        # The parent found the busy bucket short and nothing it could
        # move (before, it moved a quiet child at once, closing what it
        # held, and reported this only once none was left to move).
        wait_until(lambda: "reached MaxRequestWorkers" in server.error_log(),
                   60, what="the busy bucket to be found short")
        get_index(kept)
        assert holders <= set(children_of(server.pid))
    finally:
        result = load.stop()
        for conn in kept:
            conn.close()
    assert result.failed == 0, result.errors
    assert "moves to bucket" not in server.error_log()


PROXY_PORTS = 8


# (workers, threads per child) of each model's proxy tests.
PROXY_SIZES = {"prefork": [(2, 1), (3, 1), (7, 1)],
               "event": [(4, 2), (6, 2), (8, 4)]}


def self_proxy_config(server, child_model, workers, threads):
    """mod_proxy sends /proxied/ on the first port to the last port of the
    same server, as httpd's own test framework configures prefork."""
    target = server.ports[-1]
    children = workers // threads
    sizing = (f"MinSpareServers 1\nMaxSpareServers 3\nStartServers 2\n"
              if child_model == "prefork" else
              f"ThreadsPerChild {threads}\nStartServers {children}\n"
              "MinSpareThreads 1\nMaxSpareThreads 64\n")
    return (CHILD_MODELS[child_model] + sizing
            + f"MaxRequestWorkers {workers}\nServerLimit {children}\n"
            f"Timeout 20\n"
            f"LoadModule proxy_module {APACHE_MODULES}/mod_proxy.so\n"
            f"LoadModule proxy_http_module "
            f"{APACHE_MODULES}/mod_proxy_http.so\n"
            f"ProxyPass /proxied/ http://{LOOPBACK}:{target}/ timeout=20\n")


@pytest.mark.parametrize("size", [0, 1, 2])
@pytest.mark.parametrize("reuseport", [True, False])
def test_request_proxied_to_own_server_is_served(make_httpd, child_model,
                                                 size, reuseport):
    """Each proxied request holds two workers, its own and the inner
    request's: the inner one must go to a worker that is free (or that the
    bucket gets), never wait behind its own proxy for Timeout and a 502.
    An event child with no idle worker stops accepting; a prefork child
    serves one connection."""
    workers, threads = PROXY_SIZES[child_model][size]
    if not reuseport:
        need_build(NOREUSEPORT_SO)
    server = make_httpd(listens=PROXY_PORTS,
                        preload=None if reuseport else NOREUSEPORT_SO)
    server.write_config(self_proxy_config(server, child_model, workers,
                                          threads))
    server.start()
    status = server.status()
    print(f"{child_model}, MaxRequestWorkers {workers} of {threads} "
          f"thread(s): {status['strategy']}, {status['buckets']} buckets")
    # Buckets of at least two children each.
    assert status["buckets"] <= max(1, workers // threads // 2)
    # Prefork leaves one pair of children spare.
    concurrency = max(1, workers // 2 - (threads == 1))
    load = Load([server.ports[0]], count=60, threads=concurrency,
                path="/proxied/index.html")
    started = time.monotonic()
    result = load.run()
    elapsed = time.monotonic() - started
    print(f"{result} in {elapsed:.1f} s")
    # A request stuck behind its own proxy would wait out Timeout (20 s)
    # and answer 502.
    assert result.failed == 0, result.errors
    assert result.ok == 60
    assert elapsed < 20, f"60 proxied requests took {elapsed:.1f} s"


def test_a_client_queued_behind_busy_children_gets_an_idle_one(make_httpd):
    """Prefork model, 2 buckets of 1 child (MaxRequestWorkers 2: none
    can be added), BucketSteering hash: a held CGI occupies one child, and
    the next one the hash puts in the same bucket waits in its accept
    queue, the other bucket's child idle. A single accept queue would give
    it that child at once. The bucket counts as stalled (BK00108), and the
    idle child moves to it (leaves, and its replacement is forked there):
    the second CGI runs while the first still does. Before, a bucket whose
    every child served counted as busy, never stalled, and the client
    waited until the first CGI ended."""
    server = make_httpd(cgi=True, directives=(
        CHILD_MODELS["prefork"] + "ServerLimit 2\nMaxRequestWorkers 2\n"
        "StartServers 2\nMinSpareServers 1\nMaxSpareServers 2\n"
        "BucketCount 2\nBucketSteering hash\n"))
    server.start()
    port = server.ports[0]
    wait_until(lambda: len(children_of(server.pid)) == 2, 20,
               what="2 children")

    def queued():
        return sum(row["queued"] for row in ss_listening(port))

    def held(count):
        return [BackgroundGet(port, "/cgi-bin/held.cgi",
                              timeout=HELD_CGI_BOUND) for _ in range(count)]

    # The hash puts the second CGI beside the first half the time: try
    # again, releasing both, until it does.
    for _ in range(12):
        server.released_path.unlink(missing_ok=True)
        first = held(1)
        wait_until(lambda: server.cgi_in_flight() >= 1, 20,
                   what="the first CGI running")
        second = held(1)
        try:
            wait_until(lambda: queued() == 1
                       or server.children_in_a_cgi() == 2,
                       20, what="the second CGI running or queued")
            stalled = False
            if queued() == 1:
                # Queued behind the busy child, or seen for an instant
                # before the other bucket's idle child took it: only the
                # first makes its bucket stall.
                wait_until(lambda: server.children_in_a_cgi() == 2, 20,
                           what="the queued CGI running beside the first")
                stalled = "BK00108: bucketed: bucket" in server.error_log()
        finally:
            server.release_held()
        for request in first + second:
            assert request.result() == (200, CGI_BODY)
        if stalled:
            break
    else:
        raise AssertionError("the hash never put two CGIs in one bucket")
