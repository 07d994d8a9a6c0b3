# SPDX-License-Identifier: Apache-2.0
"""The soak (issue 39, bench/bucketbench/soak.py): its schedule and
report on fixed inputs, then bench/run --workloads soak for SOAK_S
seconds against bucketed in both child models. Every event must have
happened, every kind of client must have been counted, bucketed must lose
no POST but to a killed child, and the resources must be reported at the
start and the end."""
import json
import os
import socket
import subprocess
import threading
import time

from bucketbench import catalog, procfs, report, restart, soak
from test_smoke import bench

SOAK_S = 15
SOAK_KEYS = {"planned_s", "seconds", "events_planned", "events_done",
             "skipped_late", "kills_missed", "graceful_stops", "full_stops",
             "forced_stops", "lingering", "listen_probe_failures",
             "failed_requests", "keepalive", "closing", "settled",
             "at_start", "at_end", "kernel_after", "timed",
             "timed_dropped"}


def test_schedule_of_a_short_and_an_hour_long_soak():
    """A CI-sized soak plans every kind of event; an hour's keeps the
    periods."""
    short = soak.plan_events(SOAK_S)
    assert [at for at, _ in short] == sorted(at for at, _ in short)
    # Two graceful restarts: the second done changes Listen.
    assert [kind for _, kind in short].count(soak.GRACEFUL) == 2
    assert {kind for _, kind in short} == {soak.GRACEFUL, soak.FULL,
                                           soak.KILL}
    assert all(at < SOAK_S for at, _ in short)
    hour = soak.plan_events(3600)
    # Listen changes are chosen as graceful restarts are done, not planned.
    assert {kind for _, kind in hour} == set(soak.PLANNED_KINDS)
    assert soak.events_planned(hour) == {soak.GRACEFUL: 719,  # every 5 s
                                         soak.FULL: 59,       # every minute
                                         soak.KILL: 276}      # every 13 s


def test_every_second_graceful_restart_done_changes_listen():
    """Counted over those done, not planned: skipped ones change nothing,
    and an address added is the next change's to remove."""
    kinds = []
    added = False
    for done in range(8):
        kind = soak.reload_kind(done, added)
        kinds.append(kind)
        added = {soak.LISTEN_ADD: True, soak.LISTEN_REMOVE: False}.get(
            kind, added)
    assert kinds == [soak.GRACEFUL, soak.LISTEN_ADD, soak.GRACEFUL,
                     soak.LISTEN_REMOVE] * 2


def test_who_holds_a_removed_listen_is_named():
    """The parent, a child known from before the restart, one started
    after its signal (which the restart's wait for the old children could
    not know of), and one gone by the time it is looked at."""
    old = {101, 102}
    assert soak.holder_role(100, 100, old, 30.0, 8.0) == "the parent (100)"
    assert soak.holder_role(101, 100, old, 30.0, 8.0) == \
        "child 101, from before the restart"
    assert soak.holder_role(205, 100, old, 7.95, 8.0) == \
        "child 205, started 0.05 s after the restart's signal"
    assert soak.holder_role(206, 100, old, None, 8.0) == \
        "child 206, gone since"


def test_a_removed_listen_still_listening_is_noted_with_its_holder(
        monkeypatch):
    """Against a real loopback socket held by this process (standing in
    for the server's parent): noted with its holder and that it still
    accepted at the bound; closed during the wait (once its holders are
    named, however long that takes on a busy machine), noted as refused
    then; refused at once, nothing noted."""
    server = _Server()
    server.pid = os.getpid()
    events = soak._Soak(server, stop_timeout_s=0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    events._probe_removed(port, set(), time.monotonic())
    assert events.listen_probe_failures == [
        f"port {port} removed: still accepts; its sockets held by the "
        f"parent ({os.getpid()}); still accepting 0.5 s later"]
    events.stop_timeout_s = 10
    holders_of = procfs.holders_of

    def close_once_named(inodes, pids):
        named = holders_of(inodes, pids)
        threading.Timer(0.3, listener.close).start()
        return named
    monkeypatch.setattr(procfs, "holders_of", close_once_named)
    events._probe_removed(port, set(), time.monotonic())
    assert events.listen_probe_failures[1].startswith(
        f"port {port} removed: still accepts; its sockets held by the "
        f"parent ({os.getpid()}); refused ")
    events._probe_removed(port, set(), time.monotonic())
    assert len(events.listen_probe_failures) == 2


def test_losses_go_to_the_event_that_caused_them():
    log = [(5.0, 8.0, soak.GRACEFUL), (8.0, 8.2, soak.KILL),
           (8.2, 11.0, soak.FULL)]
    failures = [(1.0, 1.1, "GET"),         # before any event
                (7.9, 8.3, "POST"),        # in flight at the kill
                (8.1, 8.15, "GET"),        # begun while it died
                (8.25, 8.3, "POST"),       # after it: the full restart's
                (8.5, 9.0, "CLOSE"),       # a new connection, the same
                (7.0, 9.5, "CLOSE slow"),  # answered late: the kill's
                (6.0, 6.5, "POST")]        # during the graceful restart
    losses = soak.attribute_losses(log, failures)
    assert losses[soak.START] == {"gets_failed": 1, "posts_lost": 0,
                                  "closes_failed": 0, "closes_slow": 0}
    assert losses[soak.KILL] == {"gets_failed": 1, "posts_lost": 1,
                                 "closes_failed": 0, "closes_slow": 1}
    assert losses[soak.FULL] == {"gets_failed": 0, "posts_lost": 1,
                                 "closes_failed": 1, "closes_slow": 0}
    assert losses[soak.GRACEFUL] == {"gets_failed": 0, "posts_lost": 1,
                                     "closes_failed": 0, "closes_slow": 0}


def test_each_failure_is_timed_with_its_event():
    log = [(105.0, 108.0, soak.GRACEFUL), (108.0, 108.2, soak.KILL)]
    failures = [(108.1, 108.15, "GET"), (101.0, 101.5, "POST"),
                (109.0, 109.5, "CLOSE")]
    timed = soak.timed_failures(log, failures, 100.0)
    assert timed == {"timed": [[1.0, 1.5, "POST", soak.START, None],
                               [8.1, 8.15, "GET", soak.KILL, 8.0],
                               [9.0, 9.5, "CLOSE", soak.GRACEFUL, 5.0]],
                     "timed_dropped": 0}
    point = {"label": "bucketed", "restart": {"soaks": [timed]}}
    lines = soak.timed_lines([point])
    assert lines[2:5] == [
        "- bucketed: POST begun at 1.000 s, failed at 1.500 s, before any "
        "event",
        "- bucketed: GET begun at 8.100 s, failed at 8.150 s, after the "
        "kill at 8.0 s",
        "- bucketed: CLOSE begun at 9.000 s, failed at 9.500 s, after the "
        "graceful at 5.0 s"]
    # Past restart.TIMED_KEPT, the first ones, and how many more; with two
    # soaks of a point, each says which run it is.
    many = [(100.0 + n, 100.5 + n, "GET") for n in range(
        restart.TIMED_KEPT + 3)]
    cut = soak.timed_failures([], many, 100.0)
    assert len(cut["timed"]) == restart.TIMED_KEPT
    assert cut["timed_dropped"] == 3
    point = {"label": "bucketed", "restart": {"soaks": [timed, cut]}}
    lines = soak.timed_lines([point])
    assert lines[2].startswith("- bucketed, run 1: POST begun at 1.000 s")
    assert lines[-2] == "- bucketed, run 2: 3 more not kept"


def test_soak_servers_and_their_churn():
    workload = catalog.WORKLOADS["soak"]
    specs = [catalog.SERVERS[name] for name in catalog.SOAK_SERVERS]
    servers = restart.expand(specs, workload, False)
    assert [s.name for s in servers] == ["bucketed-reuseport-soak",
                                         "bucketed-event-soak"]
    for spec in servers:
        assert spec.counted and spec.restart == catalog.RESTART_SOAK
        assert spec.directives[-1] == (
            f"MaxConnectionsPerChild "
            f"{catalog.SOAK_MAX_CONNECTIONS_PER_CHILD}")
    for name, spec in catalog.SERVERS.items():
        reason = catalog.unsupported_reason(spec, workload)
        assert (reason is None) == (name in catalog.SOAK_SERVERS), name


# What the soak must leave as it found it (RSS may grow, and the number of
# children follows the load).
SOAK_HELD_KEYS = ("descriptors", "bpf_maps", "bpf_progs", "sysv_segments",
                  "posix_segments", "runtime_files")


def test_headline_says_what_each_soak_lost_and_kept():
    """The results tables' figure: per soaked server, the keep-alive
    clients' losses to restarts and reloads apart from a killed child's,
    the Connection: close failures, and the parent's resources (but RSS)
    that differ at the end."""
    def record(server, failed, descriptors_at_end):
        at_start = dict.fromkeys(soak.RESOURCE_KEYS, 4)
        return {"kernel_level": "native", "workload": "soak",
                "concurrency": 20, "server": server, "label": server,
                "round": 1, "ok": True, "error": None,
                "error_log_tail": None, "restarted": False, "rps": 100.0,
                "requests": 1000, "latency_ms": {"p99": 1.0},
                "soak": {"failed_requests": failed,
                         "keepalive": {"gets_failed": 3, "posts_lost": 1},
                         "closing": {"requests": 50, "failed": 4},
                         "losses_after": {
                             "graceful": {"gets_failed": 1, "posts_lost": 0,
                                          "closes_failed": 1},
                             "kill": {"gets_failed": 2, "posts_lost": 1,
                                      "closes_failed": 3}},
                         "events_done": {"graceful": 9, "kill": 4},
                         "at_start": at_start,
                         "at_end": dict(at_start, rss_kb=9,
                                        descriptors=descriptors_at_end)}}
    points = report.summarize([record("bucketed-event-soak", 2, 5),
                               record("bucketed-reuseport-soak", 0, 4)])
    assert soak.headline(points, {}) == (
        "event model: restarts and reloads 1 GETs failed / 0 POSTs lost / "
        "1 counted Connection: close failed, 4 children killed 2 / 1 / 3; "
        "wrk 2 failed (a killed child's among them); changed at the end: "
        "descriptors; prefork model: restarts and reloads 1 GETs failed / "
        "0 POSTs lost / 1 counted Connection: close failed, 4 children "
        "killed 2 / 1 / 3; wrk 0 failed (a killed child's among them); "
        "changed at the end: nothing")


def test_a_late_graceful_restart_is_the_only_event_skipped():
    """A soak keeps to its length: a graceful restart a whole period late
    is left out, as the next one is due; a full restart or a kill is done
    however late."""
    period = soak.GRACEFUL_EVERY_S
    assert not soak.skip_when_late(soak.GRACEFUL, 0.0)
    assert not soak.skip_when_late(soak.GRACEFUL, period - 0.1)
    assert soak.skip_when_late(soak.GRACEFUL, period)
    for kind in (soak.FULL, soak.KILL):
        assert not soak.skip_when_late(kind, 10 * period), kind


def test_soak_run(top, build, tmp_path):
    out = tmp_path / "out"
    done = bench(top, build, "--workloads", "soak", "--soak-seconds",
                 str(SOAK_S), "--warmup", "0", "--slots", "64",
                 "--concurrency", "20", "--restart-stop-timeout", "10",
                 "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr
    records = [json.loads(path.read_text())
               for path in (out / "raw").iterdir()]
    assert sorted(r["server"] for r in records) == [
        "bucketed-event-soak", "bucketed-reuseport-soak"]
    for record in records:
        assert record["ok"], (record["server"], record["error"],
                              record["error_log_tail"])
        s = record["soak"]
        assert SOAK_KEYS <= set(s)
        assert s["planned_s"] == SOAK_S
        # Every graceful restart planned was done (or skipped, late), and
        # one more where the end removed the extra Listen; every full
        # restart was done; the extra Listen came and went.
        planned, done = s["events_planned"], s["events_done"]
        reloads = sum(done[kind] for kind in soak.RELOAD_KINDS)
        assert reloads + s["skipped_late"] - planned[soak.GRACEFUL] \
            in (0, 1), s
        assert done[soak.FULL] == planned[soak.FULL] >= 1
        assert s["events_done"][soak.LISTEN_REMOVE] == \
            s["events_done"][soak.LISTEN_ADD] >= 1
        assert s["events_done"][soak.KILL] + s["kills_missed"] == \
            s["events_planned"][soak.KILL]
        assert not s["listen_probe_failures"], s["listen_probe_failures"]
        kept = s["keepalive"]
        assert record["requests"] > 0
        assert kept["gets"] > 0 and kept["posts"] > 0
        assert s["closing"]["requests"] > 0
        # Every loss is put down to the event it followed; a killed child
        # may take a request in flight with it, nothing else may lose a
        # POST or a new connection's request.
        made = dict(kept, closes_failed=s["closing"]["failed"],
                    closes_slow=s["closing"]["slow"])
        for key in soak.ATTRIBUTED_KEYS:
            assert sum(after[key] for after in s["losses_after"].values()) \
                == made[key]
        assert len(s["timed"]) + s["timed_dropped"] == \
            kept["failed"] + s["closing"]["failed"]
        not_killed = [after[key] for kind, after
                      in s["losses_after"].items() if kind != soak.KILL
                      for key in ("posts_lost", "closes_failed")]
        assert not any(not_killed), (s["losses_after"],
                                     kept["first_errors"],
                                     s["closing"]["first_errors"])
        for when in ("at_start", "at_end"):
            assert set(s[when]) == set(soak.RESOURCE_KEYS)
            assert s[when]["descriptors"] > 0 and s[when]["rss_kb"] > 0
            assert s[when]["processes"] > 1
        # What the parent holds comes back to where it started: nothing
        # leaks per restart, reload, Listen added and removed, or kill.
        leaked = {key: (s["at_start"][key], s["at_end"][key])
                  for key in SOAK_HELD_KEYS
                  if s["at_start"][key] != s["at_end"][key]}
        assert not leaked, (record["server"], leaked)
        # The kernel's counters, over the whole soak, by the kind of
        # event they followed.
        after = s["kernel_after"]
        assert set(after) <= {soak.START, *soak.EVENT_KINDS}
        assert soak.START in after and soak.GRACEFUL in after
        assert (soak.KILL in after) == bool(s["events_done"][soak.KILL])
        assert all(set(one) == set(procfs.tcp_counters())
                   for one in after.values()), after
    text = (out / "report.md").read_text()
    assert "## The soak (issue 39)" in text
    assert "### soak — native" in text


def test_a_soak_from_before_slow_answers_were_attributed_says_so():
    """A run recorded before the soak put slow answers down to events
    shows n/a there, not 0."""
    losses = {"kill": {"gets_failed": 2, "posts_lost": 1,
                       "closes_failed": 0}}
    assert soak._losses_text({"losses_after": losses},
                             lambda kind: kind == soak.KILL) == \
        "2 / 1 / 0 / n/a"
    losses["kill"]["closes_slow"] = 7
    assert soak._losses_text({"losses_after": losses},
                             lambda kind: kind == soak.KILL) == \
        "2 / 1 / 0 / 7"


class _Server:
    """A server whose restarts take no time and whose child to kill is
    `child`: None (none found) or the pid of one already gone."""

    def __init__(self):
        self.child = None

    def graceful_restart(self, stop_timeout_s):
        return {"stop_ms": 1.0, "lingering": 0, "old_children": set()}

    def kill_child(self, rng):
        return self.child


def test_kernel_counters_go_to_the_event_they_followed(monkeypatch):
    """Each event's counters run from its start to the next's, the last's
    to the end of the counting; a kill that found no child is no event:
    its span stays its predecessor's."""
    readings = iter([{"ListenOverflows": n, "TCPSynRetrans": 2 * n}
                     for n in (0, 1, 3, 6, 10, 15)])
    monkeypatch.setattr(procfs, "tcp_counters", lambda: next(readings))
    server = _Server()
    events = soak._Soak(server, stop_timeout_s=1)
    events.start_counting()                                         # 0
    events.run_event(soak.GRACEFUL)                                 # 1
    events.run_event(soak.KILL)                                     # 3
    assert events.kills_missed == 1
    gone = subprocess.Popen(["true"])
    gone.wait()
    server.child = gone.pid
    events.run_event(soak.KILL)                                     # 6
    events.run_event(soak.GRACEFUL)                                 # 10
    events.stop_counting()                                          # 15
    assert events.done[soak.KILL] == 1
    after = events.counters_by_event()
    assert after == {
        soak.START: {"ListenOverflows": 1, "TCPSynRetrans": 2},
        soak.GRACEFUL: {"ListenOverflows": 5 + 5, "TCPSynRetrans": 10 + 10},
        soak.KILL: {"ListenOverflows": 4, "TCPSynRetrans": 8}}
    point = {"label": "bucketed", "restart": {"soaks": [
        {"kernel_after": after}, {}]}}
    rows = soak.kernel_table([point]).splitlines()
    assert rows[-2] == "| bucketed | 15 (4) | n/a | 30 (8) | n/a | n/a |"
    assert rows[-1] == "| bucketed" + " | n/a" * len(procfs.TCP_COUNTERS) \
        + " |"
