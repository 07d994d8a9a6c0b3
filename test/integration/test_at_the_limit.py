# SPDX-License-Identifier: Apache-2.0
"""At MaxRequestWorkers, the free child serves whichever bucket the client
came to. Every child but one holds an idle keep-alive connection (Debian's
KeepAlive On, a long KeepAliveTimeout), as a PHP site's few large children
do at a traffic peak; then new clients come one at a time. With one accept
queue (stock prefork) the free child takes each; with buckets, the kernel's
hash may send a client to a bucket whose children all hold keep-alive
connections, where it would wait out the KeepAliveTimeout. BucketSteering
auto (load steering) sends it to the bucket that has the free child."""
import os
import re
import shutil
import signal
import socket
import ssl

import pytest

from bucketbench.procfs import established_inodes, sigstop, socket_inodes_of
from event_server import tls_vhost
from httpd_fixture import (CHILD_MODELS, LOOPBACK, children_of, free_ports,
                           per_bucket, read_response, wait_until)
from steering_maps import idle_counts, idle_map_of

KEEPALIVE_TIMEOUT = 30
# Far below KEEPALIVE_TIMEOUT: a probe that waits for a keep-alive
# connection to expire fails; one served by the free child does not.
PROBE_TIMEOUT = 10
PROBES = 20
BURSTS = 5
KEEPALIVE_GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"

LIMITS = {
    "prefork": "MaxRequestWorkers {n}\nServerLimit {n}\nStartServers {n}\n"
               "MinSpareServers 1\nMaxSpareServers {n}\n",
    "event": "ThreadsPerChild 1\nMaxRequestWorkers {n}\nServerLimit {n}\n"
             "StartServers {n}\nMinSpareThreads 1\nMaxSpareThreads {n}\n"
             "AsyncRequestWorkerFactor 1\n",
}


def at_the_limit(make_httpd, child_model, workers, buckets, extra=""):
    """A started server of `workers` children (threads) over `buckets`
    buckets, with a long KeepAliveTimeout."""
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + LIMITS[child_model].format(n=workers)
                        + f"BucketCount {buckets}\nKeepAlive On\n"
                        f"KeepAliveTimeout {KEEPALIVE_TIMEOUT}\n" + extra)
    server.start()
    return server


def keepalive_connection(port):
    c = socket.create_connection((LOOPBACK, port), PROBE_TIMEOUT)
    c.sendall(KEEPALIVE_GET)
    assert c.recv(4096).startswith(b"HTTP/1.1 200")
    return c


def probe(port):
    with socket.create_connection((LOOPBACK, port), PROBE_TIMEOUT) as c:
        c.settimeout(PROBE_TIMEOUT)
        c.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                  b"Connection: close\r\n\r\n")
        return c.recv(4096)[:12]


@pytest.mark.parametrize("workers,buckets", [(7, 2), (20, 2), (20, 4)])
def test_one_free_child_serves_every_bucket(make_httpd, child_model,
                                            workers, buckets):
    server = at_the_limit(make_httpd, child_model, workers, buckets)
    port = server.ports[0]
    held = [keepalive_connection(port) for _ in range(workers - 1)]
    try:
        answers = [probe(port) for _ in range(PROBES)]
    finally:
        for c in held:
            c.close()
    assert answers == [b"HTTP/1.1 200"] * PROBES


@pytest.mark.parametrize("workers,buckets", [(8, 2), (8, 4)])
def test_a_burst_the_size_of_the_limit_needs_no_move(make_httpd, workers,
                                                     buckets):
    """Prefork model, every child idle: as many clients as children
    connect at once, each keeping its connection after one request, so each
    needs a child of its own. With one accept queue (stock prefork) each
    finds one. Within one census (100 ms) the steering program's idle
    counts are what the parent last wrote, so unless each connection it
    sends takes one from them, the hash splits the burst and some bucket
    gets more clients than children: it stalls (BK00108) and a child is
    moved in (BK00110), an exit and a fork, while a client waits."""
    server = at_the_limit(make_httpd, "prefork", workers, buckets)
    port = server.ports[0]
    idle_map = idle_map_of(server)
    for _ in range(BURSTS):
        wait_until(lambda: sum(idle_counts(idle_map)) == workers, 30,
                   what=f"all {workers} children idle, as steering sees it")
        clients = [socket.create_connection((LOOPBACK, port), PROBE_TIMEOUT)
                   for _ in range(workers)]
        try:
            for c in clients:
                c.settimeout(PROBE_TIMEOUT)
                c.sendall(KEEPALIVE_GET)
            answers = [c.recv(4096)[:12] for c in clients]
        finally:
            for c in clients:
                c.close()
        assert answers == [b"HTTP/1.1 200"] * workers
    log = server.error_log()
    assert "BK00108" not in log and "BK00110" not in log, log


def held_state(c):
    """What became of a held connection, read without blocking: "open",
    "closed" (EOF: the server gave it up cleanly) or "reset"."""
    c.setblocking(False)
    try:
        return "closed" if c.recv(4096) == b"" else "open"
    except BlockingIOError:
        return "open"
    except ConnectionResetError:
        return "reset"
    finally:
        c.setblocking(True)


def most_given_up(buckets):
    """How many held connections the probes may cost. Each probe comes
    alone and asks Connection: close, so it needs one free child in its
    bucket, and the child that gave a connection up for it is free again
    in the same bucket once it has answered: one held connection a bucket
    at most (the status page's `reclaimed`, by bucket, says which), and
    no more than the probes."""
    return min(buckets, PROBES // 2)


@pytest.mark.parametrize("workers,buckets", [(4, 2), (8, 4)])
def test_at_the_limit_an_idle_keepalive_connection_makes_room(
        make_httpd, workers, buckets):
    """Prefork model (the event model holds idle keep-alive connections
    without a worker, and reclaims them at its own connection limit:
    test_idle_keepalive.py). Every child holds an idle keep-alive connection: no child is free in
    any bucket, and none can be started. Stock prefork would make each new
    client wait until a keep-alive connection expires (KeepAliveTimeout,
    here 30 s); bucketed closes one that has been idle long enough
    (docs/design.md, "At the limit itself") in the client's bucket, so
    each probe is answered long before, and only as many held connections
    are closed as probes needed (most_given_up: fewer than are held), each
    with a FIN, never a reset."""
    server = at_the_limit(make_httpd, "prefork", workers, buckets)
    port = server.ports[0]
    held = [keepalive_connection(port) for _ in range(workers)]
    try:
        answers = [probe(port) for _ in range(PROBES // 2)]
        states = [held_state(c) for c in held]
        for c, state in zip(held, states):
            if state == "open":
                c.sendall(KEEPALIVE_GET)
                assert c.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for c in held:
            c.close()
    given_up = per_bucket(server.status(), "reclaimed")
    print(f"held connections: {states}; given up, by bucket: {given_up}")
    assert answers == [b"HTTP/1.1 200"] * (PROBES // 2)
    assert states.count("reset") == 0, states
    assert 1 <= states.count("closed") <= most_given_up(buckets), states
    # Each was one the MPM gave up, and no bucket gave up two.
    assert sum(given_up) == states.count("closed"), (given_up, states)
    assert max(given_up) == 1, given_up


def logged_at(log, tag):
    """The time (seconds of the day) of the first line of `log` (part of
    an error log) with `tag`."""
    line = next(line for line in log.splitlines() if tag in line)
    clock = re.search(r"(\d\d):(\d\d):(\d\d\.\d+) \d{4}\]", line)
    hours, minutes, seconds = clock.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_at_the_limit_a_ready_child_that_does_not_accept_is_waited_for(
        make_httpd):
    """Prefork model, 2 children in 1 bucket: one holds an idle keep-alive
    connection, the other is ready but stopped (SIGSTOP). A new client's
    bucket stalls with a ready child that does not accept, which is most
    often one starved of CPU (the seconds after a graceful restart's forks
    on two cores): the holder is not asked at once, since a client that
    sends its next request as its connection closes loses it, but once the
    stall has lasted 2 s (STALL_IDLE_PATIENCE) the ready child counts as
    hung and the holder gives its connection up for the client, which is
    answered. So the ask (BK00186) comes at least 1.5 s after the stall
    was seen (BK00108); before, in the same pass (0.2 s)."""
    server = at_the_limit(make_httpd, "prefork", 2, 1)
    port = server.ports[0]
    held = keepalive_connection(port)
    holding = established_inodes(port)
    ready = [pid for pid in children_of(server.pid)
             if not socket_inodes_of(pid) & holding]
    assert len(ready) == 1, ready
    logged_before = len(server.error_log())
    # Probed only once it has stopped: a child woken by the SIGSTOP with
    # the probe already queued accepts it before it stops.
    sigstop(ready)
    try:
        assert probe(port) == b"HTTP/1.1 200"
        assert held_state(held) == "closed"
    finally:
        os.kill(ready[0], signal.SIGCONT)
        held.close()
    log = server.error_log()[logged_before:]
    waited = (logged_at(log, "BK00186") - logged_at(log, "BK00108")) % 86400
    assert waited >= 1.5, log


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_at_the_limit_an_idle_tls_connection_makes_room(make_httpd,
                                                        tmp_path):
    """The same over TLS: the wait for the next request sees what mod_ssl
    has already decrypted, kept connections go on serving, and a connection
    given up ends cleanly (close_notify, then EOF), not with a reset."""
    (tls_port,) = free_ports(1)
    workers, buckets = 4, 2
    cert, tls = tls_vhost(tmp_path, tls_port)
    server = at_the_limit(make_httpd, "prefork", workers, buckets, tls)
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False

    def tls_connection():
        raw = socket.create_connection((LOOPBACK, tls_port), PROBE_TIMEOUT)
        s = context.wrap_socket(raw, suppress_ragged_eofs=False)
        s.settimeout(PROBE_TIMEOUT)
        s.sendall(KEEPALIVE_GET)
        assert read_response(s)[0].startswith(b"HTTP/1.1 200")
        return s

    held = [tls_connection() for _ in range(workers)]
    try:
        probes = []
        for _ in range(PROBES // 2):
            with tls_connection() as p:
                probes.append(p)
        ended = []
        for s in held:
            s.setblocking(False)
            try:
                ended.append(s.recv(4096) == b"")
            except ssl.SSLWantReadError:
                ended.append(False)
            s.setblocking(True)
        for s, gone in zip(held, ended):
            if not gone:
                s.sendall(KEEPALIVE_GET)
                assert read_response(s)[0].startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
    given_up = per_bucket(server.status(), "reclaimed")
    assert len(probes) == PROBES // 2
    assert 1 <= sum(ended) <= most_given_up(buckets), ended
    assert sum(given_up) == sum(ended), (given_up, ended)
    assert max(given_up) == 1, given_up
