# SPDX-License-Identifier: Apache-2.0
"""
BucketSteering: `hash` (the kernel's reuseport hash), `cpu` (an eBPF
SK_REUSEPORT program with a socket map sends a connection to the bucket of
the CPU that received it; the bucket's children are kept on that CPU) and
`auto` (hash). On loopback the CPU that receives a connection is the
client's, so a client pinned to CPU c must land in bucket c.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from httpd_fixture import (BUILD, CHILD_MODELS, INDEX_BODY, NOREUSEPORT_SO,
                           TOP, BackgroundGet, children_of, free_ports,
                           http_get, need_build, wait_until)
from steering_maps import BPFTOOL, PROGRAM_ID, idle_counts, idle_map_of

REQUESTS = 30
# BucketSteering load's program in this kernel, on loopback sockets (a
# cmocka binary built by `make check`; it needs root, as the program does).
LOAD_PROGRAM_TEST = BUILD / "test" / "unit" / "test_sys_bpf"

# Runs pinned to one CPU: the status page, REQUESTS GETs, the status page
# again; prints each bucket's accepted connections in between.
PINNED_CLIENT = """
import json, os, sys
sys.path.insert(0, {bench!r})
from bucketbench.bucket_status import parse_status
from bucketbench.net import http_get
os.sched_setaffinity(0, {{int(sys.argv[2])}})
port = int(sys.argv[1])
def accepted():
    status, body = http_get(port, "/bucketed-status")
    assert status == 200, status
    return {{b["bucket"]: b["accepted"]
            for b in parse_status(body.decode())["buckets_list"]}}
before = accepted()
for _ in range({requests}):
    assert http_get(port)[0] == 200
after = accepted()
print(json.dumps({{b: after[b] - before.get(b, 0) for b in after}}))
""".format(bench=str(TOP / "bench"), requests=REQUESTS)


def online_cpus():
    return sorted(os.sched_getaffinity(0))


def pinned_deltas(port, cpu):
    """Connections per bucket from a client pinned to cpu (the closing
    status request included)."""
    done = subprocess.run([sys.executable, "-c", PINNED_CLIENT, str(port),
                           str(cpu)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return {int(b): n for b, n in json.loads(done.stdout).items()}


def cpus_allowed(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return None


def bpftool_show(prog_id):
    return subprocess.run([BPFTOOL, "prog", "show", "id", prog_id],
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_cpus():
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs (CPU steering, BucketAffinity)")
    return cpus[:2]


# Spare children in each model's own terms.
CPU_SPARES = {"prefork": "MinSpareServers 2\n",
              "event": "ThreadsPerChild 4\nMinSpareThreads 8\n"}


def test_cpu_steering_sends_each_cpu_to_its_bucket(make_httpd, two_cpus,
                                                    child_model):
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + "BucketCount 2\nBucketSteering cpu\n"
                        "StartServers 4\n" + CPU_SPARES[child_model])
    server.start()
    log = server.error_log()
    assert "steering: cpu (BucketSteering cpu)" in log, log
    # On this kernel the steering program migrates too.
    assert "migration: per-group eBPF (5.14+)" in log, log

    # Read back: the program the log names is loaded, an sk_reuseport
    # program named bucketed_cpu with its socket map.
    if Path(BPFTOOL).exists():
        prog_id = PROGRAM_ID.search(log).group(1)
        shown = bpftool_show(prog_id)
        assert shown.returncode == 0, shown.stderr
        assert "sk_reuseport" in shown.stdout and "bucketed_cpu" in \
            shown.stdout, shown.stdout
        assert "map_ids" in shown.stdout, shown.stdout

    # Every child runs on the one CPU of its bucket, both CPUs in use.
    pins = wait_until(lambda: [cpus_allowed(p)
                               for p in children_of(server.pid)], 20,
                      what="children")
    assert set(pins) == {str(c) for c in two_cpus}, pins

    for cpu in two_cpus:
        bucket = cpu % 2
        deltas = pinned_deltas(server.ports[0], cpu)
        assert deltas[bucket] == REQUESTS + 1, (cpu, deltas)
        assert deltas[1 - bucket] == 0, (cpu, deltas)


def test_hash_steering_spreads_and_leaves_children_free(make_httpd,
                                                        two_cpus,
                                                        child_model):
    """The control: with the hash a pinned client reaches both buckets,
    and no child is pinned."""
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + "BucketCount 2\nBucketSteering hash\n"
                        "StartServers 4\n" + CPU_SPARES[child_model])
    server.start()
    assert "steering: hash (BucketSteering hash)" in server.error_log()
    deltas = pinned_deltas(server.ports[0], two_cpus[0])
    assert deltas[0] > 0 and deltas[1] > 0, deltas
    allowed = {cpus_allowed(p) for p in children_of(server.pid)}
    assert all(len(a) > 1 for a in allowed), allowed


def test_auto_is_load_where_the_kernel_runs_it(make_httpd):
    server = make_httpd(directives="BucketCount 2")
    server.start()
    assert "steering: load (BucketSteering auto)" in server.error_log()
    assert server.status()["steering"] == "load"


@pytest.mark.parametrize("mode", ["cpu", "load"])
def test_a_program_refused_at_attach_is_not_reported_in_force(
        make_httpd, two_cpus, mode):
    """The kernel has everything and the trial passes, but attaching the
    program to the server's own reuseport group is refused (by the shim,
    as a security policy might): the status page and the log say that the
    kernel's hash is in force, and why; no child is pinned to a CPU."""
    need_build(NOREUSEPORT_SO)
    port = free_ports(1)[0]
    env = {"BUCKETED_SHIM_KERNEL": "99.0",
           "BUCKETED_SHIM_REFUSE_ATTACH_PORT": str(port)}
    server = make_httpd(ports=[port], preload=NOREUSEPORT_SO, environ=env,
                        directives=f"BucketCount 2\nBucketSteering {mode}\n"
                        "StartServers 4\nMinSpareServers 2\n")
    server.start()
    steering = server.status()["steering"]
    assert steering.startswith(f"hash (the {mode} program failed: "), \
        steering
    assert "SO_ATTACH_REUSEPORT_EBPF" in steering, steering
    assert "Operation not permitted" in steering, steering
    log = server.error_log()
    assert f"steering in force: hash (the {mode} program failed" in log, log
    allowed = {cpus_allowed(p) for p in children_of(server.pid)}
    assert allowed and all(len(a) > 1 for a in allowed), allowed
    # Still served, by the hash.
    assert http_get(port, "/")[0] == 200


@pytest.mark.parametrize("mode", ["cpu", "load"])
@pytest.mark.parametrize("floor", ["4.18", "4.4"])
def test_steering_refused_by_an_older_kernel(make_httpd, floor, mode):
    """The shim refuses what a kernel before 4.19 lacks: asking for cpu or
    load is a start-up error naming the feature; auto falls back to
    hash."""
    need_build(NOREUSEPORT_SO)
    env = {"BUCKETED_SHIM_KERNEL": floor}
    server = make_httpd(directives=f"BucketCount 2\nBucketSteering {mode}",
                        preload=NOREUSEPORT_SO, environ=env)
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert f"BucketSteering {mode} needs an SK_REUSEPORT eBPF program" in \
        syntax.output, syntax.output
    assert "Linux 4.19+" in syntax.output
    server.start(wait=False)
    assert server.wait_exit() != 0
    assert f"BucketSteering {mode} needs" in server.output()

    fallback = make_httpd(directives="BucketCount 2", preload=NOREUSEPORT_SO,
                          environ=env)
    fallback.start()
    log = fallback.error_log()
    assert "steering: hash (BucketSteering auto" in log, log
    assert "migration: none:" in log, log
    assert http_get(fallback.ports[0])[0] == 200


def test_cpu_steering_with_more_buckets_than_cpus_is_an_error(make_httpd):
    count = len(online_cpus()) + 1
    server = make_httpd(directives=f"BucketCount {count}\n"
                                   "BucketSteering cpu")
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert "BucketSteering cpu needs at most one bucket per online CPU" in \
        syntax.output, syntax.output


def test_bucket_steering_bad_value(make_httpd):
    server = make_httpd(directives="BucketSteering weight")
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert "BucketSteering must be one of auto, hash, cpu, load, not " \
        "'weight'" in syntax.output, syntax.output


# ---------------------------------------------------------------- load

# Two buckets, all slots used, in each model's terms: prefork has three
# children (bucket 0 gets two, bucket 1 one) and two slow requests, event
# two children of one thread and one slow request. Once the slow requests
# hold one bucket's workers busy and the other has one idle, maintenance
# cannot move a child between them (the donor would be left with none
# idle), so the state holds.
LOAD_DIRECTIVES = {
    "prefork": ("BucketCount 2\nServerLimit 3\nMaxRequestWorkers 3\n"
                "StartServers 3\nMinSpareServers 1\nMaxSpareServers 3\n"),
    "event": ("BucketCount 2\nServerLimit 2\nThreadsPerChild 1\n"
              "MaxRequestWorkers 2\nStartServers 2\nMinSpareThreads 1\n"
              "MaxSpareThreads 2\n"),
}
LOAD_WORKERS = {"prefork": 3, "event": 2}
SLOW_SECONDS = 15
QUICK = 10


def one_bucket_all_busy(map_id):
    """(busy bucket, idle bucket) while one has no idle child and the
    other one, else None."""
    idle = idle_counts(map_id, seen=True)
    if sorted(idle) == [0, 1]:
        return idle.index(0), idle.index(1)
    return None


def test_load_steering_avoids_a_busy_bucket(make_httpd, child_model):
    """Slow requests hold one bucket's workers; while the other has
    an idle child, no new connection goes to the busy one. A connection
    steered there would wait in its queue until a slow request ends, so
    the state would end and the busy bucket's accepted count grow. (With
    the hash, each of the QUICK requests would have an even chance of going
    there.)"""
    if not Path(BPFTOOL).exists():
        pytest.skip("bpftool is not installed (scripts/deps.sh)")
    server = make_httpd(cgi=True, directives=CHILD_MODELS[child_model]
                        + LOAD_DIRECTIVES[child_model]
                        + "BucketSteering load")
    workers = LOAD_WORKERS[child_model]
    server.start()
    log = server.error_log()
    assert "steering: load (BucketSteering load)" in log, log
    idle_map = idle_map_of(server)
    wait_until(lambda: sum(idle_counts(idle_map, seen=True)) == workers,
               10, what="every worker idle")
    slow = []
    for held in range(1, workers):
        # The answer comes after SLOW_SECONDS of silence: wait longer.
        slow.append(BackgroundGet(server.ports[0],
                                  f"/cgi-bin/slow.cgi?{SLOW_SECONDS}",
                                  timeout=SLOW_SECONDS + 30))
        wait_until(lambda: sum(idle_counts(idle_map, seen=True))
                   == workers - held, 10,
                   what=f"{held} slow request(s) in progress")
    busy, _ = wait_until(lambda: one_bucket_all_busy(idle_map), 10,
                         what="one bucket all busy")

    def accepted_by_busy():
        # Read while the state holds, so the status request itself goes
        # to the idle bucket.
        wait_until(lambda: one_bucket_all_busy(idle_map) == (busy, 1 - busy),
                   10, what=f"bucket {busy} all busy, the other idle")
        return server.status()["buckets_list"][busy]["accepted"]

    before = accepted_by_busy()
    for _ in range(QUICK):
        accepted_by_busy()
        assert http_get(server.ports[0]) == (200, INDEX_BODY)
    assert accepted_by_busy() == before
    assert all(request.result(SLOW_SECONDS + 30)[0] == 200
               for request in slow)
    assert "cannot" not in server.error_log()


def test_the_load_program_in_this_kernel():
    """The load program loaded into this machine's kernel and attached to a
    reuseport group of two sockets, with idle counts written as the parent
    writes them (test/unit/test_sys_bpf.c): units handed out one per
    connection; once taken, the buckets the census saw idle share the
    connections in proportion to what it saw (9 to 1: bucket 1 gets 10 to
    100 of 400; the first-seen rule before gave it about 200); the only
    one seen gets them all; none seen, the hash splits them."""
    need_build(LOAD_PROGRAM_TEST)
    done = subprocess.run([str(LOAD_PROGRAM_TEST)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
