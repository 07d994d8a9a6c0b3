# SPDX-License-Identifier: Apache-2.0
"""
Plan changes that lose nothing: graceful restarts that change BucketCount
close the SO_REUSEPORT duplicates the new plan no longer uses. Whatever
waits in their accept queues is reset on close unless the kernel migrates
it to another socket of the group: bucketed asks for that per group (an
eBPF program attached as BPF_SK_REUSEPORT_SELECT_OR_MIGRATE), leaving the
machine-wide net.ipv4.tcp_migrate_req alone.

Where the kernel cannot migrate but takes an SK_REUSEPORT program with a
socket map (4.19 to 5.13; emulated here by the LD_PRELOAD shim as 5.13,
which refuses the migration attach type), bucketed drains instead: a
removed socket gets no new connection, is accepted from for a generation
and closed at a later restart once empty.

The control runs the same restarts with the shim emulating a 4.18 kernel,
which has neither: there connections are reset, so the zeros mean
something.
"""
import re
import signal
import subprocess
from pathlib import Path

import pytest

from httpd_fixture import (NOREUSEPORT_SO, Load, Timeout, http_get,
                           listening_inodes, log_near, need_build,
                           wait_until)

MIGRATE_REQ = Path("/proc/sys/net/ipv4/tcp_migrate_req")
RESTARTS = 10
COUNTS = (2, 4)
# Draining keeps a removed socket until a later restart: BucketCount 4 -> 2
# leaves duplicates 2 and 3 draining (still listening), the next 2 -> 2
# closes them, 2 -> 4 opens new ones. Listening sockets after each step:
DRAIN_COUNTS = (2, 4, 2)
DRAIN_SOCKETS = (2, 4, 4)
# Each child model with 64 workers.
MODEL_DIRECTIVES = {
    "prefork": ("ChildModel prefork\nStartServers 8\nMinSpareServers 4\n"
                "MaxSpareServers 16\nMaxRequestWorkers 64"),
    "event": ("ChildModel event\nThreadsPerChild 8\nStartServers 4\n"
              "MaxRequestWorkers 64\nMinSpareThreads 8\n"
              "MaxSpareThreads 64"),
}
# Enough client threads that the buckets' queues are seldom empty.
LOAD_THREADS = 24
# What the log says of duplicates, of buckets without a child (BK00180,
# BK00254: their sockets leave their groups; BK00181: back) and of moved
# children (BK00110) and the limit (BK00111).
SOCKET_LOG_TAGS = ("duplicate listener", "BK00180", "BK00254", "BK00181",
                   "BK00110", "BK00111")
PROGRAM_LOG = re.compile(r"per-group eBPF program id (\d+) on 1 reuseport")


def migrate_req():
    return MIGRATE_REQ.read_text().strip()


def directives(count, extra="", model=MODEL_DIRECTIVES["prefork"]):
    return f"BucketCount {count}\n{model}\n{extra}"


def restart_alternating(server, restarts, counts=COUNTS, extra="",
                        model=MODEL_DIRECTIVES["prefork"], sockets=None):
    """Graceful restarts under load, BucketCount going round counts (the
    server starts with counts[0], restart i uses counts[i % len(counts)]),
    each waited on until the address has sockets[...] listening sockets
    (default: one per bucket); returns the load's result."""
    sockets = sockets or counts
    port = server.ports[0]
    generation = server.status()["generation"]
    load = Load(server.ports, count=10**6, threads=LOAD_THREADS,
                seconds=240, minimum=1000).start()
    for i in range(1, restarts + 1):
        count = counts[i % len(counts)]
        listening = sockets[i % len(counts)]
        done = load.done()
        wait_until(lambda: load.done() > done + 200, 30,
                   what="requests before the next restart")
        server.write_config(directives(count, extra, model))
        server.signal(signal.SIGUSR1)
        wait_until(lambda: server.status()["generation"] == generation + i
                   and server.status()["buckets"] == count, 30,
                   what=f"generation {generation + i} with {count} buckets")
        # Every old child gone, so the closed duplicates are really closed.
        try:
            wait_until(lambda: len(listening_inodes(port)) == listening, 30,
                       what=f"{listening} listening sockets")
        except Timeout as e:
            # A socket missing may be a bucket left without a child.
            said = [line for line in server.error_log().splitlines()
                    if any(tag in line for tag in SOCKET_LOG_TAGS)]
            raise AssertionError(
                f"restart {i}: {e} ({len(listening_inodes(port))} "
                f"listening); the log on sockets and buckets' children: "
                f"{said[-10:]}") from e
    done = load.done()
    wait_until(lambda: load.done() > done + 200, 30,
               what="requests after the last restart")
    return load.stop()


@pytest.fixture
def sysctl_untouched():
    """tcp_migrate_req must be 0 before and stay 0: the point is not to
    need it."""
    if not MIGRATE_REQ.exists():
        pytest.skip("no net.ipv4.tcp_migrate_req: kernel before 5.14")
    assert migrate_req() == "0", ("net.ipv4.tcp_migrate_req is on: the test "
                                  "would not show bucketed's own migration")
    yield
    assert migrate_req() == "0"


def test_plan_changes_lose_nothing(make_httpd, sysctl_untouched, child_model):
    settings = MODEL_DIRECTIVES[child_model]
    server = make_httpd(directives=directives(2, model=settings))
    server.start()
    log = server.error_log()
    assert "migration: per-group eBPF (5.14+)" in log, log
    result = restart_alternating(server, RESTARTS, model=settings)
    print(f"with the program ({child_model}): {RESTARTS} restarts, {result}")
    assert result.failed == 0, (result.errors,
                                log_near(server.error_log(), result.errors))
    assert result.ok >= 1000
    log = server.error_log()
    assert log.count("Doing graceful restart") == RESTARTS
    # Each 4 -> 2 restart retired duplicates 2 and 3, saying where their
    # queues went.
    assert log.count("then move to the other sockets of its group") \
        == 2 * (RESTARTS // 2), log
    assert "are reset" not in log, log
    assert http_get(server.ports[0])[0] == 200


@pytest.mark.parametrize("mode,counts", [("cpu", (1, 2)), ("load", COUNTS)])
def test_plan_changes_under_steering_lose_nothing(make_httpd, sysctl_untouched,
                                                  mode, counts, child_model):
    """BucketSteering cpu and load: the steering program migrates too, and
    each generation's socket map takes the sockets back from the last
    one. (cpu allows no more buckets than the 2 CPUs here.)"""
    steer = f"BucketSteering {mode}"
    settings = MODEL_DIRECTIVES[child_model]
    server = make_httpd(directives=directives(counts[0], steer, settings))
    server.start()
    result = restart_alternating(server, RESTARTS, counts=counts,
                                 extra=steer, model=settings)
    print(f"{mode} steering ({child_model}): {RESTARTS} restarts, {result}")
    assert result.failed == 0, (result.errors,
                                log_near(server.error_log(), result.errors))
    log = server.error_log()
    assert log.count(f"steering: {mode} (BucketSteering {mode})") \
        >= RESTARTS // 2
    assert "cannot" not in log, log


def test_removed_listen_says_its_queue_is_reset(make_httpd):
    """The plan-change diff's other case: an address no longer listened on
    leaves its group nothing to migrate to, and the log says so."""
    server = make_httpd(listens=2, directives=directives(2))
    server.start()
    generation = server.status()["generation"]
    kept, dropped = server.ports
    server.ports = [kept]
    server.write_config(directives(2))
    server.signal(signal.SIGUSR1)
    wait_until(lambda: server.status()["generation"] == generation + 1, 30,
               what="the restart without the second Listen")
    log = server.error_log()
    assert re.search(rf"closing duplicate listener 127\.0\.0\.1:{dropped}#1, "
                     r"which the new bucket plan no longer uses: its address "
                     r"is no longer listened on", log), log
    assert http_get(kept)[0] == 200


def test_program_is_loaded_and_attached(make_httpd):
    """Read back: the program the log names is a loaded sk_reuseport
    program (bpftool), and it stays loaded only while the group that holds
    it lives (the parent keeps no descriptor of it)."""
    bpftool = "/usr/sbin/bpftool"
    if not Path(bpftool).exists():
        pytest.skip("bpftool is not installed (scripts/deps.sh)")
    server = make_httpd(directives=directives(2))
    server.start()
    match = PROGRAM_LOG.search(server.error_log())
    assert match, server.error_log()
    prog_id = match.group(1)
    shown = subprocess.run([bpftool, "prog", "show", "id", prog_id],
                           capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert "sk_reuseport" in shown.stdout, shown.stdout
    # The default steering (auto: load) through a map of this
    # generation's sockets, so a socket that goes gets nothing new.
    assert "bucketed_load" in shown.stdout, shown.stdout
    server.stop()
    # The group went with the server's sockets, and the program with it.
    wait_until(lambda: subprocess.run(
        [bpftool, "prog", "show", "id", prog_id], capture_output=True,
        timeout=30).returncode != 0, 20, what=f"program {prog_id} to go")


def drain_steps(restarts):
    """(drains, closes) among restarts 1..restarts of DRAIN_COUNTS."""
    steps = [i % len(DRAIN_COUNTS) for i in range(1, restarts + 1)]
    return steps.count(2), steps.count(0)


def test_without_migration_plan_changes_drain(make_httpd, sysctl_untouched,
                                              child_model):
    """A 5.13 kernel (shim): no migration, so bucketed drains; the same
    kind of restarts under load lose nothing, and the log shows each
    removed socket drained and later closed."""
    need_build(NOREUSEPORT_SO)
    settings = MODEL_DIRECTIVES[child_model]
    server = make_httpd(directives=directives(2, model=settings),
                        preload=NOREUSEPORT_SO,
                        environ={"BUCKETED_SHIM_KERNEL": "5.13"})
    server.start()
    log = server.error_log()
    assert "migration: drain (no migration: the kernel refused a " \
           "SELECT_OR_MIGRATE program" in log, log
    result = restart_alternating(server, RESTARTS, counts=DRAIN_COUNTS,
                                 model=settings, sockets=DRAIN_SOCKETS)
    print(f"draining ({child_model}): {RESTARTS} restarts, {result}")
    assert result.failed == 0, result.errors
    assert result.ok >= 1000
    drains, closes = drain_steps(RESTARTS)
    log = server.error_log()
    assert log.count("draining duplicate listener") == 2 * drains, log
    assert log.count("drained for 1 generation(s), nothing queued") \
        == 2 * closes, log
    assert "are reset" not in log, log
    assert http_get(server.ports[0])[0] == 200


def test_without_migration_or_drain_plan_changes_reset(make_httpd,
                                                       sysctl_untouched):
    """The control: a 4.18 kernel (shim) takes no SK_REUSEPORT program;
    bucketed says so, and the same restarts reset connections."""
    need_build(NOREUSEPORT_SO)
    server = make_httpd(directives=directives(2), preload=NOREUSEPORT_SO,
                        environ={"BUCKETED_SHIM_KERNEL": "4.18"})
    server.start()
    log = server.error_log()
    assert re.search(r"migration: none: .*cannot drain either: the kernel "
                     r"refused an SK_REUSEPORT program.*reset", log), log
    result = restart_alternating(server, RESTARTS, counts=DRAIN_COUNTS,
                                 sockets=(2, 4, 2))
    print(f"neither: {RESTARTS} restarts, {result}")
    assert result.failed > 0, result


def test_draining_sockets_show_where_operators_look(make_httpd, child_model):
    """The status page says what a dropped socket becomes (migration=drain)
    and which bucket drains it; the next restart closes it."""
    need_build(NOREUSEPORT_SO)
    metrics = "<Location /metrics>\n    SetHandler bucketed-metrics\n" \
              "</Location>"
    settings = MODEL_DIRECTIVES[child_model]
    server = make_httpd(directives=directives(4, metrics, settings),
                        preload=NOREUSEPORT_SO,
                        environ={"BUCKETED_SHIM_KERNEL": "5.13"})
    server.start()
    port = server.ports[0]
    assert server.status()["migration"] == "drain"
    generation = server.status()["generation"]
    for step, (count, listening, draining) in enumerate(
            [(2, 4, 2), (2, 2, 0)], start=1):
        server.write_config(directives(count, metrics, settings))
        server.signal(signal.SIGUSR1)
        wait_until(lambda: server.status()["generation"] == generation + step,
                   30, what=f"generation {generation + step}")
        status = server.status()
        assert status["buckets"] == count, status
        assert sum(b.get("draining", 0) for b in status["buckets_list"]) \
            == draining, status
        wait_until(lambda: len(listening_inodes(port)) == listening, 30,
                   what=f"{listening} listening sockets")
        # Whatever bucket a connection lands in, it is served.
        assert http_get(port)[0] == 200
    exposed = http_get(port, "/metrics")[1].decode()
    assert 'migration="drain"' in exposed, exposed
