# SPDX-License-Identifier: Apache-2.0
"""
BucketAffinity: a bucket's children kept on CPUs of their own
(sched_setaffinity, read back from /proc/PID/status). `auto` keeps them
under BucketSteering cpu and the event model's under load steering; `on`
keeps every bucket's, `off` none. The CPUs divided are the server's own:
its affinity as started (taskset, a cpuset), not every online CPU.
"""
import os
import signal
import time

import pytest

from httpd_fixture import CHILD_MODELS, bucket_sockets, http_get
from test_steering import cpus_allowed, two_cpus  # noqa: F401 (fixture)

PIN_WAIT_S = 20


def bucket_pins(server, buckets):
    """Each bucket's children's CPUs, sorted, once every child is in one
    bucket and a bucket's children agree; else None."""
    held = bucket_sockets(server)
    if held is None or len(held) != buckets:
        return None
    per_bucket = [{cpus_allowed(p) for p in pids} for pids in held.values()]
    if any(len(pins) != 1 for pins in per_bucket):
        return None
    return sorted(pins.pop() for pins in per_bucket)


def assert_pins(server, buckets, expected):
    """Waits until the buckets' CPUs are expected (a child forked just now
    holds its bucket's socket an instant before it is kept on its CPUs);
    fails with what was seen."""
    deadline = time.monotonic() + PIN_WAIT_S
    while True:
        seen = bucket_pins(server, buckets)
        if seen == expected or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    assert seen == expected, (seen, expected, server.error_log()[-2000:])


def cpu_list(cpus):
    """/proc's Cpus_allowed_list of a set of CPUs ("0-1", "3", "0,2")."""
    cpus = sorted(cpus)
    if len(cpus) > 1 and cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}"
    return ",".join(str(c) for c in cpus)


def start_on(server, cpus):
    """Starts a server kept on cpus, as taskset -c (or a cpuset) would
    start it: it inherits this process's affinity, set for the while."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return server.start()
    finally:
        os.sched_setaffinity(0, before)


SPARES = {"prefork": "StartServers 4\nMinSpareServers 2\n",
          "event": "StartServers 4\nThreadsPerChild 4\nMinSpareThreads 8\n"}


def make(make_httpd, child_model, directives):
    return make_httpd(directives=CHILD_MODELS[child_model] + SPARES[
        child_model] + directives)


@pytest.mark.parametrize("steering", ["hash", "load"])
def test_on_keeps_each_bucket_on_a_cpu_of_its_own(make_httpd, two_cpus,
                                                   child_model, steering):
    server = start_on(make(make_httpd, child_model,
                           f"BucketCount 2\nBucketSteering {steering}\n"
                           "BucketAffinity on\n"), set(two_cpus))
    assert_pins(server, 2, sorted(str(c) for c in two_cpus))
    log = server.error_log()
    assert (f"affinity: each bucket's children kept on its CPUs "
            f"(BucketAffinity on); bucket 0: CPU {two_cpus[0]}; "
            f"bucket 1: CPU {two_cpus[1]}") in log, log
    assert http_get(server.ports[0])[0] == 200


def test_off_leaves_children_free_under_cpu_steering(make_httpd, two_cpus,
                                                     child_model):
    server = start_on(make(make_httpd, child_model,
                           "BucketCount 2\nBucketSteering cpu\n"
                           "BucketAffinity off\n"), set(two_cpus))
    everywhere = cpu_list(two_cpus)
    assert_pins(server, 2, [everywhere, everywhere])
    assert "affinity: none (BucketAffinity off)" in server.error_log()


def test_auto_under_load_steering(make_httpd, two_cpus, child_model):
    """The event model's buckets are kept apart; the prefork model's
    children are left to the scheduler."""
    server = start_on(make(make_httpd, child_model, "BucketCount 2\n"),
                      set(two_cpus))
    log = server.error_log()
    assert "steering: load (BucketSteering auto)" in log, log
    if child_model == "event":
        assert_pins(server, 2, sorted(str(c) for c in two_cpus))
        assert "(BucketAffinity auto: the event model under load " \
            "steering" in log, log
    else:
        everywhere = cpu_list(two_cpus)
        assert_pins(server, 2, [everywhere, everywhere])
        assert "affinity: none (BucketAffinity auto: the prefork model" \
            in log, log


def test_buckets_divide_the_cpus_the_server_was_started_on(make_httpd,
                                                           two_cpus):
    """Started on one CPU (taskset -c, a cpuset), two buckets share it:
    no child is put on a CPU the server may not use."""
    server = start_on(make(make_httpd, "event",
                           "BucketCount 2\nBucketAffinity on\n"),
                      {two_cpus[1]})
    assert_pins(server, 2, [str(two_cpus[1])] * 2)
    assert (f"bucket 0: CPU {two_cpus[1]}; bucket 1: CPU {two_cpus[1]}"
            in server.error_log())
    assert http_get(server.ports[0])[0] == 200


def test_more_buckets_than_cpus_share_them(make_httpd, two_cpus):
    server = start_on(make(make_httpd, "prefork",
                           "BucketCount 3\nBucketAffinity on\n"),
                      set(two_cpus))
    a, b = (str(c) for c in two_cpus)
    assert_pins(server, 3, sorted([a, b, a]))
    assert f"bucket 0: CPU {a}; bucket 1: CPU {b}; bucket 2: CPU {a}" in \
        server.error_log()


def test_a_graceful_restart_applies_a_new_value(make_httpd, two_cpus):
    """The next generation's children follow the new value; the server
    serves throughout."""
    server = start_on(make(make_httpd, "event",
                           "BucketCount 2\nBucketAffinity on\n"),
                      set(two_cpus))
    assert_pins(server, 2, sorted(str(c) for c in two_cpus))
    server.write_config(CHILD_MODELS["event"] + SPARES["event"]
                        + "BucketCount 2\nBucketAffinity off\n")
    server.signal(signal.SIGUSR1)
    everywhere = cpu_list(two_cpus)
    assert_pins(server, 2, [everywhere, everywhere])
    assert http_get(server.ports[0])[0] == 200


def test_bucket_affinity_bad_value(make_httpd):
    server = make_httpd(directives="BucketAffinity yes")
    syntax = server.command("-t")
    assert syntax.returncode != 0
    assert "BucketAffinity must be one of auto, on, off, not 'yes'" in \
        syntax.output, syntax.output
