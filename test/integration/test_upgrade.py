# SPDX-License-Identifier: Apache-2.0
"""A graceful restart onto another build of the MPM (a package upgrade
between two reloads): the new build loads into a parent whose kept state
the old build wrote. With the same state layout it takes it over as on any
graceful restart; with another layout it must not read it: it starts over,
closes the old build's bucket sockets and asks the old children (taken from
the scoreboard) to leave, and no request under load fails.

The second build is this tree compiled again with another
BUCKETED_RETAINED_LAYOUT, in a directory of the test's own."""
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from bucketbench.activation import Holder, listen_socket
from httpd_fixture import (APACHE_MODULES, BUILD, CGI_BODY, CHILD_MODELS,
                           LOOPBACK, MPM_SO, TOP, Load, alive,
                           children_of, free_ports, http_get,
                           listening_inodes, need_build, wait_until)
from steering_maps import listening_cookies, map_cookies, maps_held_by
from test_restart_clients import hold_on_every_child, \
    out_of_accept_queues, served_after_held_connections

MPM_DIR = TOP / "server" / "mpm" / "bucketed"
TAKEOVER_SO = BUILD / "test" / "modules" / "mod_test_takeover.so"
BUCKETS = 3


@pytest.fixture(scope="module")
def other_layout_build():
    """mod_mpm_bucketed.so of this tree with state layout 9999."""
    work = Path(tempfile.mkdtemp(prefix="bucketed-layout-"))
    wrappers = []
    for source in sorted(MPM_DIR.glob("*.c")):
        wrapper = work / source.name
        wrapper.write_text(f'#include "{source}"\n')
        wrappers.append(str(wrapper))
    cp = subprocess.run(
        ["apxs", "-c", "-o", str(work / "mod_mpm_bucketed.la"),
         "-Wc,-std=gnu99", "-Wc,-fvisibility=hidden",
         "-Wc,-DBUCKETED_RETAINED_LAYOUT=9999", *wrappers],
        cwd=work, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    yield work / ".libs" / "mod_mpm_bucketed.so"
    shutil.rmtree(work, ignore_errors=True)


def install(build, path):
    """build at path by rename: overwriting a loaded .so crashes it."""
    tmp = path.with_suffix(".tmp")
    shutil.copyfile(build, tmp)
    os.replace(tmp, path)


def load_from_a_copy(server, build=MPM_SO):
    """Has server load build from a copy in its ServerRoot, which install()
    replaces: its path (call after the last write_config())."""
    loaded = server.root / "mod_mpm_bucketed.so"
    shutil.copyfile(build, loaded)
    server.conf.write_text(server.conf.read_text().replace(
        str(MPM_SO), str(loaded)))
    return loaded


def graceful_restart(server, generation):
    server.signal(signal.SIGUSR1)
    wait_until(lambda: server.status()["generation"] == generation, 20,
               what=f"generation {generation}")


def test_graceful_restart_onto_another_layout(make_httpd, child_model,
                                              other_layout_build):
    sizing = ("ThreadsPerChild 4\nMaxRequestWorkers 32\nStartServers 3\n"
              if child_model == "event" else "StartServers 6\n")
    server = make_httpd(directives=CHILD_MODELS[child_model] + sizing
                        + f"BucketCount {BUCKETS}\n")
    loaded = load_from_a_copy(server)
    server.start()
    port = server.ports[0]
    load = Load(server.ports, count=10 ** 6, threads=4, seconds=120,
                minimum=500).start()
    generation = server.status()["generation"]

    for step, build in enumerate((other_layout_build, MPM_SO), 1):
        old_children = set(children_of(server.pid))
        old_sockets = listening_inodes(port)
        before = load.done()
        wait_until(lambda: load.done() > before + 100, 30,
                   what="requests before the restart")
        install(build, loaded)
        graceful_restart(server, generation + step)
        # The old build's children leave, and its sockets with them.
        wait_until(lambda: not old_children & set(children_of(server.pid)),
                   30, what="the old build's children to leave")
        new_sockets = listening_inodes(port)
        assert len(new_sockets) == BUCKETS
        # Core's socket is kept; the old duplicates are gone.
        assert len(new_sockets & old_sockets) == 1
        log = server.error_log()
        assert log.count("BK00142") == step, log[-3000:]
        assert log.count("BK00143") == step
        took = [line for line in log.splitlines() if "BK00143" in line][-1]
        # Children come and go with the load: at least one was running.
        assert int(took.split("took ")[1].split()[0]) >= 1, took
        before = load.done()
        wait_until(lambda: load.done() > before + 100, 30,
                   what="requests after the restart")

    result = load.stop()
    assert result.failed == 0, result
    assert http_get(port)[0] == 200
    # The census is the parent's, once a second or so.
    wait_until(lambda: all(b["children"] >= 1
                           for b in server.status()["buckets_list"]), 20,
               what="a child in every bucket")


def test_same_layout_takes_the_state_over(make_httpd):
    """Another copy of the same build: an ordinary graceful restart, no
    take-over, the same sockets."""
    server = make_httpd(directives=f"BucketCount {BUCKETS}\n")
    loaded = load_from_a_copy(server)
    server.start()
    sockets = listening_inodes(server.ports[0])
    install(MPM_SO, loaded)
    graceful_restart(server, server.status()["generation"] + 1)
    assert listening_inodes(server.ports[0]) == sockets
    assert "BK00142" not in server.error_log()


def test_an_upgrade_leaves_every_socket_in_its_map(make_httpd,
                                                   other_layout_build):
    """A graceful restart onto another layout and back, then an ordinary
    one: every listening socket must be in one of the parent's socket
    maps, and the parent must hold no more maps than it started with.
    Before, the parent kept the old build's maps; core's Listen socket,
    still in the old socket map, could not join the new one (EBUSY), so
    every restart after an upgrade waited 2 s for it in vain (BK00251) and
    its slot was steered by the kernel's hash until a full stop."""
    server = make_httpd(directives=f"BucketCount {BUCKETS}\n")
    loaded = load_from_a_copy(server)
    server.start()
    port = server.ports[0]
    generation = server.status()["generation"]
    maps_at_start = len(maps_held_by(server.pid))
    assert maps_at_start > 0
    for step, build in enumerate((other_layout_build, MPM_SO, MPM_SO), 1):
        install(build, loaded)
        graceful_restart(server, generation + step)
    log = server.error_log()
    assert log.count("BK00260") == 2, log[-3000:]
    assert "BK00251" not in log
    held = maps_held_by(server.pid)
    assert len(held) == maps_at_start

    def outside_the_maps():
        in_maps = set().union(*(map_cookies(map_id) for map_id in held))
        return set(listening_cookies(port).values()) - in_maps
    # An old child that has not left yet still holds the duplicates the
    # new plan closed; once the old generation has gone, every socket
    # left listening is in a map.
    wait_until(lambda: not outside_the_maps(), 30,
               what="every listening socket in a socket map")


def helpers_planted(log, when):
    """The helpers mod_test_takeover wrote into slots at `when`
    (open_logs, post_config)."""
    return {int(line.split("names helper ")[1].split()[0])
            for line in log.splitlines()
            if "names helper" in line and f"({when})" in line}


@pytest.mark.parametrize("recorded", [True, False],
                         ids=["recorded", "scoreboard"])
def test_takeover_trusts_no_pid_a_child_writes(make_httpd, child_model,
                                               other_layout_build, recorded):
    """Before a restart onto another layout, a compromised child writes into
    scoreboard slots the pid of a process that is not the server's, and the
    pids of the parent's other children (a piped logger, mod_cgid's
    daemon); a third-party module holds a reuseport listening socket. The
    new build signals none of them, closes no socket of theirs, and stops
    in bounded time: from the old build's record of its children, and
    (the record spoiled, as from a build before it) from the scoreboard
    with the kernel's word on each pid."""
    need_build(TAKEOVER_SO)
    held_port = free_ports(1)[0]
    sizing = ("ThreadsPerChild 4\nMaxRequestWorkers 32\nStartServers 3\n"
              if child_model == "event" else "StartServers 6\n")
    server = make_httpd(directives="")
    piped = server.root / "logs" / "piped.log"
    directives = (CHILD_MODELS[child_model] + sizing
                  + f"BucketCount {BUCKETS}\n"
                  + f"LoadModule test_takeover_module {TAKEOVER_SO}\n"
                  + f"LoadModule cgid_module {APACHE_MODULES}/mod_cgid.so\n"
                  + f"ScriptSock {server.root}/run/cgid.sock\n"
                  + f"ScriptAlias /cgi-bin/ {server.root}/cgi-bin/\n"
                  + f'CustomLog "||/usr/bin/tee -a {piped}" "%r"\n'
                  + f"TestTakeoverListen {held_port}\n"
                  + "<Location /plant>\n  SetHandler test-plant-pid\n"
                  + "</Location>\n")
    server.directives = directives
    server.write_config()
    loaded = load_from_a_copy(server)
    server.start()
    port = server.ports[0]
    held = listening_inodes(held_port)
    assert len(held) == 1
    foreign = subprocess.Popen(["sleep", "600"])
    try:
        status, body = http_get(port, f"/plant?{foreign.pid}")
        assert status == 200, body
        # A worker whose slot no longer names it: mod_test_takeover counts
        # it among the helpers.
        planter = int(body.split()[1].rstrip(b":"))
        old_children = set(children_of(server.pid))

        server.conf.write_text(server.conf.read_text().replace(
            "TestTakeoverListen", "TestTakeoverPlantHelpers on\n"
            + ("" if recorded else "TestTakeoverForgetRecord on\n")
            + "TestTakeoverListen"))
        install(other_layout_build, loaded)
        graceful_restart(server, server.status()["generation"] + 1)
        log = server.error_log()
        # The new configuration's piped logger and mod_cgid's daemon, at
        # least (the old configuration's, planted too, are httpd's to
        # retire).
        planted = helpers_planted(log, "post_config") - old_children
        assert len(planted) >= 2, log[-3000:]
        wait_until(lambda: not old_children & set(children_of(server.pid)),
                   30, what="the old build's children to leave")

        # Nothing the child wrote was signalled: the foreign process and
        # the helpers run on, the logger logs, the daemon serves CGI.
        assert foreign.poll() is None
        for pid in planted:
            assert alive(pid), f"helper {pid} was signalled\n" + log[-3000:]
        assert http_get(port, "/cgi-bin/slow.cgi?0") == (
            200, CGI_BODY.encode() + b"\n")
        wait_until(lambda: "slow.cgi?0" in piped.read_text(), 20,
                   what="the piped logger to log")
        # The third-party module's socket is still open.
        assert listening_inodes(held_port) == held
        # How the new build found the old one's children: the record, or
        # the scoreboard with the kernel's word on each pid.
        took = [line for line in log.splitlines() if "BK00143" in line][-1]
        assert ("from the record" in took) == recorded, took
        # The old build's workers, at least one, are taken over either way.
        assert int(took.split("took ")[1].split()[0]) >= 1, took
        if not recorded:
            refused = {int(line.split("names pid ")[1].split(",")[0])
                       for line in log.splitlines() if "BK00210" in line}
            # Read at open_logs: what was written then, the old
            # configuration's helpers among it, is refused.
            early = helpers_planted(log, "open_logs") - {planter}
            assert early | {foreign.pid} <= refused, "\n".join(
                line for line in log.splitlines()
                if "BK0014" in line or "BK0021" in line or "helper" in line)

        server.signal(signal.SIGTERM)
        server.wait_exit()
        log = server.error_log()
        assert "BK00100" not in log, log[-3000:]
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


def test_takeover_leaves_the_kept_passed_socket(make_httpd, other_layout_build):
    """With systemd holding the socket, the parent keeps its own copy of
    it for a reload that brings its Listen back. A take-over from a build
    that left no record closes reuseport listeners on Listen addresses
    (where the old build's duplicates were), but never that copy: the next
    generation finds it open (no BK00230, 'closed by something else')."""
    need_build(TAKEOVER_SO)
    port = free_ports(1)[0]
    held = listen_socket(LOOPBACK, port)
    holder = Holder([held], names=["web"])
    try:
        server = make_httpd(ports=[port], directives=(
            f"BucketCount {BUCKETS}\n"
            f"LoadModule test_takeover_module {TAKEOVER_SO}\n"
            "TestTakeoverForgetRecord on\n"))
        loaded = load_from_a_copy(server)
        server.start(holder=holder)
        generation = server.status()["generation"]
        install(other_layout_build, loaded)
        graceful_restart(server, generation + 1)
        log = server.error_log()
        assert "it kept no record" in log, log[-3000:]
        # An ordinary graceful restart: the kept copy is checked again.
        graceful_restart(server, generation + 2)
        log = server.error_log()
        assert "BK00230" not in log, log[-3000:]
        assert http_get(port)[0] == 200
    finally:
        holder.close()


def test_a_taken_over_child_is_never_asked_to_give_up(make_httpd,
                                                      other_layout_build):
    """Event model with no slot to spare (ServerLimit 2, each child holding
    idle keep-alive connections, KeepAliveTimeout 30 s), then a graceful
    restart onto another layout while a new client waits: the parent must
    not ask a child taken over from the other build to give up its idle
    connections (BUCKETED_SIG_GIVE_UP), no more than its own leaving
    children: that build may not take the signal (this tree's event
    children do not: its default action would end the child, with the
    requests it serves and the held connections). Each held connection's
    next request must be answered, with Connection: close, and the
    waiting client once a slot is free."""
    directives = (CHILD_MODELS["event"] + "ServerLimit 2\nThreadsPerChild 4\n"
                  "MaxRequestWorkers 8\nStartServers 2\nMinSpareThreads 4\n"
                  "MaxSpareThreads 8\nBucketCount 2\nKeepAliveTimeout 30\n")
    server = make_httpd(directives=directives)
    loaded = load_from_a_copy(server, other_layout_build)
    server.start()
    port = server.ports[0]
    wait_until(lambda: len(children_of(server.pid)) == 2, 20,
               what="2 children")
    old = set(children_of(server.pid))
    held = hold_on_every_child(port, old)
    install(MPM_SO, loaded)
    server.signal(signal.SIGUSR1)
    wait_until(lambda: "BK00143" in server.error_log(), 20,
               what="the old build's children taken over")
    wait_until(lambda: out_of_accept_queues(server, old), 20,
               what="the taken-over children out of the accept queues")
    served_after_held_connections(port, held, server.error_log)
    wait_until(lambda: old.isdisjoint(children_of(server.pid)), 20,
               what="the taken-over children gone")
