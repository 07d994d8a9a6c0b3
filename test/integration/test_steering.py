"""
BucketSteering: `hash` (the kernel's reuseport hash), `cpu` (an eBPF
SK_REUSEPORT program with a socket map sends a connection to the bucket of
the CPU that received it; the bucket's children are kept on that CPU) and
`auto` (hash). On loopback the CPU that receives a connection is the
client's, so a client pinned to CPU c must land in bucket c.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from httpd_fixture import (NOREUSEPORT_SO, TOP, children_of, http_get,
                           need_build, wait_until)
from httpd_fixture import make_httpd  # noqa: F401 (fixture)

BPFTOOL = "/usr/sbin/bpftool"
REQUESTS = 30
PROGRAM_ID = re.compile(r"program id (\d+) on 1 reuseport")

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
        pytest.skip("CPU steering needs two CPUs")
    return cpus[:2]


def test_cpu_steering_sends_each_cpu_to_its_bucket(make_httpd, two_cpus):
    server = make_httpd(directives="BucketCount 2\nBucketSteering cpu\n"
                                   "StartServers 4\nMinSpareServers 2")
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
                                                        two_cpus):
    """The control: with the hash a pinned client reaches both buckets,
    and no child is pinned."""
    server = make_httpd(directives="BucketCount 2\nBucketSteering hash\n"
                                   "StartServers 4")
    server.start()
    assert "steering: hash (BucketSteering hash)" in server.error_log()
    deltas = pinned_deltas(server.ports[0], two_cpus[0])
    assert deltas[0] > 0 and deltas[1] > 0, deltas
    allowed = {cpus_allowed(p) for p in children_of(server.pid)}
    assert all(len(a) > 1 for a in allowed), allowed


def test_auto_is_hash(make_httpd):
    server = make_httpd(directives="BucketCount 2")
    server.start()
    assert "steering: hash (BucketSteering auto" in server.error_log()


@pytest.mark.parametrize("floor", ["4.18", "4.4"])
def test_cpu_steering_refused_by_an_older_kernel(make_httpd, floor):
    """The shim refuses what a kernel before 4.19 lacks: asking for cpu is
    a start-up error naming the feature; auto falls back to hash."""
    need_build(NOREUSEPORT_SO)
    env = {"BUCKETED_SHIM_KERNEL": floor}
    server = make_httpd(directives="BucketCount 2\nBucketSteering cpu",
                        preload=NOREUSEPORT_SO, environ=env)
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert "BucketSteering cpu needs an SK_REUSEPORT eBPF program" in \
        syntax.output, syntax.output
    assert "Linux 4.19+" in syntax.output
    server.start(wait=False)
    assert server.wait_exit() != 0
    assert "BucketSteering cpu needs" in server.output()

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
    server = make_httpd(directives="BucketSteering load")
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert "BucketSteering must be one of auto, hash, cpu, not 'load'" in \
        syntax.output, syntax.output
