# SPDX-License-Identifier: Apache-2.0
"""The prefork model's wait for a keep-alive connection's next request is
the MPM's (prefork_keepalive.c), so that at MaxRequestWorkers it can give
an idle connection up. Away from the limit it must cost what stock
prefork's wait costs and miss nothing: pipelined requests, and over TLS
the bytes mod_ssl has already decrypted, are answered without a wait."""
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from event_server import tls_vhost
from httpd_fixture import (INDEX_BODY, LOOPBACK, children_of, free_ports,
                           read_response, stop_process, wait_until)

REQUESTS = 30
# Long enough for each request to find the child in its wait (the client
# sends the next request only after reading the answer to the last).
PAUSE_S = 0.02
GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
SERVERS = "KeepAlive On\nKeepAliveTimeout 30\nStartServers 2\n" \
          "MinSpareServers 1\nMaxSpareServers 2\n"
# The system calls a wait for the next request can make: the reads, and
# the polls before them (APR's own, and the bucketed filter's ppoll); a
# poll() that strace's attach interrupted resumes as restart_syscall.
WAIT_CALLS = ("read", "poll", "ppoll", "restart_syscall")
# Where strace attaches and detaches within a wait moves a count by a call
# or so over the REQUESTS; a wait that costs a call more moves it by one
# call per request.
EDGE = 0.5
# A line of strace -c's table: % time, seconds, usecs/call, calls,
# errors (blank when none), syscall.
# An strace line of a ppoll() that returned: its fourth argument, the
# signal mask ("NULL", or a set such as "~[KILL STOP RTMIN RT_1]").
PPOLL_MASK = re.compile(r"ppoll\(\[.*?\], \d+, (?:NULL|\{.*?\}), "
                        r"(NULL|~?\[[^\]]*\]), \d+\) = ")
# Longer than the idle a keep-alive connection needs before it may be
# given up (KEEPALIVE_RECLAIM_MIN_IDLE, 500 ms).
RECLAIMABLE_PAUSE_S = 0.8
STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+"
                        r"(?:\d+\s+)?(\w+)\s*$", re.M)


def started(make_httpd, tmp_path, mpm, transport):
    """(server, client socket factory) of a prefork server, stock or
    bucketed's model, serving plaintext or TLS."""
    tls_port = None
    extra = ""
    # Both ports in one pick: two picks can return the same free port.
    plain_port, other_port = free_ports(2)
    if transport == "tls":
        tls_port = other_port
        (tmp_path / mpm).mkdir()
        cert, extra = tls_vhost(tmp_path / mpm, tls_port)
    directives = SERVERS + extra
    if mpm == "bucketed":
        directives = "ChildModel prefork\n" + directives
    server = make_httpd(ports=[plain_port], directives=directives, mpm=mpm)
    server.start()
    port = tls_port or server.ports[0]

    def connect():
        raw = socket.create_connection((LOOPBACK, port), 10)
        if transport == "plain":
            return raw
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False
        return context.wrap_socket(raw)
    return server, connect


def strace_counts(table):
    """{syscall: calls} from strace -c's summary table."""
    return {name: int(calls) for calls, name in STRACE_ROW.findall(table)}


def traced(server, connect, tmp_path, pauses, options):
    """The output file of strace run with `options` on the server's
    children while one keep-alive connection sends a request after each
    pause in `pauses` (seconds; each sent once the child waits for it)."""
    out = tmp_path / f"strace-{server.pid}.txt"
    err = tmp_path / f"strace-{server.pid}.err"
    with connect() as c:
        c.sendall(GET)
        read_response(c)
        children = children_of(server.pid)
        with open(err, "w") as stderr:
            tracer = subprocess.Popen(
                ["strace", "-f", "-o", str(out)] + options
                + [arg for pid in children for arg in ("-p", str(pid))],
                stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_until(lambda: err.read_text().count(" attached")
                       >= len(children), 10, what="strace to attach")
            for pause in pauses:
                time.sleep(pause)
                c.sendall(GET)
                assert read_response(c)[1] == INDEX_BODY
        finally:
            tracer.send_signal(signal.SIGINT)
            try:
                tracer.wait(10)
            except subprocess.TimeoutExpired:
                stop_process(tracer, 5)
    return out


def calls_per_request(server, connect, tmp_path):
    """{system call: calls per keep-alive request} of the server's
    children (strace -c)."""
    out = traced(server, connect, tmp_path, [PAUSE_S] * REQUESTS, ["-c"])
    counts = strace_counts(out.read_text())
    return {name: counts.get(name, 0) / REQUESTS for name in WAIT_CALLS}


def ppoll_masks(trace):
    """The signal-mask argument of every completed ppoll() in an strace
    log: "NULL" where the call left the mask alone."""
    return PPOLL_MASK.findall(trace)


def test_ppoll_masks_reads_strace_lines():
    trace = (
        "41 ppoll([{fd=12, events=POLLIN}], 1, {tv_sec=0, "
        "tv_nsec=499986000}, NULL, 8) = 1 ([{fd=12, revents=POLLIN}], "
        "left {tv_sec=0, tv_nsec=479001000})\n"
        "41 ppoll([{fd=12, events=POLLIN}], 1, {tv_sec=29, "
        "tv_nsec=499000000}, ~[KILL STOP RTMIN RT_1 RT_2], 8 "
        "<unfinished ...>\n"
        "41 ppoll([{fd=12, events=POLLIN}], 1, {tv_sec=29, "
        "tv_nsec=499000000}, ~[KILL STOP RTMIN RT_1 RT_2], 8) = 1 "
        "([{fd=12, revents=POLLIN}], left {tv_sec=28, tv_nsec=1000})\n")
    assert ppoll_masks(trace) == ["NULL", "~[KILL STOP RTMIN RT_1 RT_2]"]


TRANSPORTS = ["plain", pytest.param("tls", marks=pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs openssl"))]


def test_strace_counts_reads_its_table():
    table = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 11.62    0.011280          12       888           ppoll
  9.98    0.009691           5      1777       888 read
------ ----------- ----------- --------- --------- ----------------
100.00    0.097100           6     14216      6221 total
"""
    assert strace_counts(table) == {"ppoll": 888, "read": 1777,
                                    "total": 14216}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_wait_costs_no_more_calls_than_stock_prefork(make_httpd,
                                                         tmp_path, transport):
    """After a response httpd has already looked for a pipelined request
    without blocking; the wait neither looks again (a read that fails with
    EAGAIN) nor lets APR poll again after its own ppoll() (APR polls
    before a read that follows a short one), so a keep-alive request costs
    the reads and polls it costs in stock prefork (counted, not timed)."""
    calls = {mpm: calls_per_request(*started(make_httpd, tmp_path, mpm,
                                             transport), tmp_path)
             for mpm in ("prefork", "bucketed")}
    print(f"calls per keep-alive request: {calls}")
    assert calls["prefork"]["read"] >= 1, calls
    assert calls["bucketed"]["read"] < calls["prefork"]["read"] + EDGE, calls
    assert sum(calls["bucketed"].values()) < \
        sum(calls["prefork"].values()) + EDGE, calls


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pipelined_requests_are_answered_without_a_wait(make_httpd,
                                                        tmp_path, transport):
    """Three requests in one write: each answered in turn on the same
    connection, the second and third from what the first read (plaintext)
    or what mod_ssl decrypted with it (TLS), not after a KeepAliveTimeout;
    then the connection waits, and answers a request sent later."""
    server, connect = started(make_httpd, tmp_path, "bucketed", transport)
    with connect() as c:
        c.settimeout(10)        # far below KeepAliveTimeout (30 s)
        c.sendall(GET * 3)
        rest = b""
        for _ in range(3):
            head, body, rest = read_response(c, rest)
            assert head.startswith(b"HTTP/1.1 200") and body == INDEX_BODY
        assert rest == b""
        time.sleep(PAUSE_S)
        c.sendall(GET)
        assert read_response(c)[1] == INDEX_BODY
    assert "BK00188" not in server.error_log()


def test_the_give_up_signal_opens_only_once_the_wait_could_give_up(
        make_httpd, tmp_path):
    """A client sending requests back to back is waited for with the
    signal mask left alone (ppoll() with no mask: no mask changes a
    request); the give-up signal opens in a wait that lasts long enough
    for its connection to be given up, once per such wait (the mask of
    that ppoll() is a set). The give-up itself: test_at_the_limit.py."""
    server, connect = started(make_httpd, tmp_path, "bucketed", "plain")
    out = traced(server, connect, tmp_path,
                 [PAUSE_S] * REQUESTS + [RECLAIMABLE_PAUSE_S] * 2,
                 ["-e", "trace=ppoll"])
    masks = ppoll_masks(out.read_text())
    print(f"ppoll masks: {masks}")
    assert masks.count("NULL") >= REQUESTS + 2, masks
    opened = [m for m in masks if m != "NULL"]
    assert len(opened) == 2, masks
