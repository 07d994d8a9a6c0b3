# SPDX-License-Identifier: Apache-2.0
"""bench/run on a many-core box: --server-cpus and --client-cpus (the
pinning applied and checked in /proc, overlap refused), the --server-cores
sweep, and --net veth (its namespaces made, served through, deleted on
every way out). The real runs are one point, one run, one second; they
need two CPUs (the reference machine has two) and, for veth, root."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bucketbench import cores, netns, placement, procfs
from bucketbench.net import wait_until

from test_smoke import bench

TINY = ["--workloads", "w1", "--levels", "native", "--concurrency", "8",
        "--runs", "1", "--duration", "1", "--warmup", "0", "--slots", "32"]
# httpd (the event model: a parent and threaded children) and nginx.
SERVERS = "bucketed-event,nginx"
STOP_WAIT_S = 60


def records(out):
    raw = out / "raw"
    return [json.loads((raw / name).read_text())
            for name in sorted(os.listdir(raw))]


def namespaces():
    return netns.listed_namespaces()


def in_namespace(namespace):
    """The live processes in a network namespace ("net:[N]")."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and netns.namespace_of(name) == namespace:
            if procfs.alive(int(name)):
                found.append(int(name))
    return found


# ---------------------------------------------------------------- pure

def test_cpu_lists_read_and_written_as_the_kernel_spells_them():
    assert placement.parse_cpu_list("0-2,5, 7-8", "x") == (0, 1, 2, 5, 7, 8)
    assert placement.format_cpu_list((8, 0, 1, 2, 5, 7)) == "0-2,5,7-8"
    for bad in ("", "a", "3-1", "-1"):
        with pytest.raises(placement.PlacementError):
            placement.parse_cpu_list(bad, "--server-cpus")


def test_one_set_given_the_other_is_the_rest():
    chosen = placement.choose("2-3", None, range(8))
    assert chosen.server_cpus == (2, 3)
    assert chosen.client_cpus == (0, 1, 4, 5, 6, 7)
    assert not chosen.shared and chosen.warning() is None
    assert chosen.with_server_cores(1).server_cpus == (2,)
    shared = placement.choose(None, None, range(8))
    assert shared.shared and "share the servers' CPUs" in shared.warning()


def test_sets_that_overlap_or_leave_a_side_empty_are_refused():
    with pytest.raises(placement.PlacementError, match="overlap on CPU 2-3"):
        placement.choose("0-3", "2-5", range(8))
    with pytest.raises(placement.PlacementError, match="CPU 9 is not one"):
        placement.choose("9", None, range(8))
    with pytest.raises(placement.PlacementError, match="--client-cpus: no"):
        placement.choose("0-7", None, range(8))


def test_the_check_finds_a_process_outside_its_set():
    """check_tree reads what the kernel says, not what was asked: a
    process pinned to CPU 0 passes for {0} and fails for {1}."""
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=lambda:
                               os.sched_setaffinity(0, {0}))
    try:
        assert placement.check_tree([sleeper.pid], (0,), "sleep") \
            == {sleeper.pid: "0"}
        with pytest.raises(placement.PlacementError,
                           match=f"process {sleeper.pid} may run on CPU 0"):
            placement.check_tree([sleeper.pid], (1,), "sleep")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_sweep_tables_cores_across_servers_down():
    def summary(count, rps):
        return {"points": [{
            "kernel_level": "native", "workload": "w1", "concurrency": 8,
            "idle_connections": None, "server": "bucketed-event",
            "label": "bucketed event", "rps": {"median": rps},
            "latency_ms": {"p99": 2.5}, "server_cpu_s_per_1k": 0.05,
            "errors": {"read": 0}}]}
    table = cores.rows({1: summary(1, 1000.0), 2: summary(2, 1900.0)})
    assert [(row["cores"], row["rps"]) for row in table] \
        == [(1, 1000.0), (2, 1900.0)]
    text = cores.render(table, [1, 2, 4])
    assert "| server | 1 core | 2 cores | 4 cores |" in text
    assert "| bucketed event | 1,000 / 2.5 / 0.050 | 1,900 / 2.5 / 0.050 " \
           "| n/a |" in text


# ---------------------------------------------------------------- bad input

def test_overlapping_cpu_sets_stop_the_run_before_any_load(top, build,
                                                           tmp_path):
    done = bench(top, build, *TINY, "--servers", SERVERS, "--server-cpus",
                 "0-1", "--client-cpus", "1", "--out", str(tmp_path / "o"))
    assert done.returncode == 2, done.stderr
    assert "--server-cpus and --client-cpus overlap on CPU 1" in done.stderr
    assert not (tmp_path / "o").exists()


def test_more_server_cores_than_server_cpus_is_refused(top, build, tmp_path):
    done = bench(top, build, *TINY, "--servers", SERVERS, "--server-cpus",
                 "1", "--client-cpus", "0", "--server-cores", "1,2",
                 "--out", str(tmp_path / "o"))
    assert done.returncode == 2, done.stderr
    assert "--server-cores 2: --server-cpus has only 1 CPU(s)" in done.stderr


# ---------------------------------------------------------------- real runs

def test_servers_and_load_tools_pinned_apart_and_checked(top, build,
                                                         tmp_path):
    """--server-cpus 1 --client-cpus 0 as a one-point --server-cores sweep:
    every process of each server (httpd's parent and children, nginx's
    master and workers) was read on CPU 1 after its run, wrk on CPU 0;
    BucketCount and nginx's workers follow the core count; the sweep
    writes its table and plot."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("needs two CPUs (the reference machine has two)")
    out = tmp_path / "out"
    done = bench(top, build, *TINY, "--servers", SERVERS, "--server-cpus",
                 "1", "--client-cpus", "0", "--server-cores", "1",
                 "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "share the servers' CPUs" not in done.stderr
    point = out / "cores-1"
    meta = json.loads((point / "meta.json").read_text())
    assert meta["placement"] == {"server_cpus": "1", "client_cpus": "0",
                                 "shared": False}
    runs = records(point)
    assert {run["server"] for run in runs} == set(SERVERS.split(","))
    for run in runs:
        assert run["ok"], (run["error"], run["error_log_tail"])
        assert len(run["server_cpus"]) >= 2, run["server_cpus"]
        assert set(run["server_cpus"].values()) == {"1"}, run
        assert run["client_cpus"] == "0", run
    configs = point / "servers"
    assert "BucketCount 1" in (
        configs / "native-w1-bucketed-event" / "httpd.conf").read_text()
    assert "worker_processes 1;" in (
        configs / "native-w1-nginx" / "nginx.conf").read_text()
    sweep = json.loads((out / "cores.json").read_text())
    assert {row["cores"] for row in sweep["rows"]} == {1}
    assert "| server | 1 core |" in (out / "cores.md").read_text()
    assert (out / cores.plot_name(("native", "w1", 8, None))).stat().st_size


def test_the_load_crosses_a_veth_pair_between_namespaces_of_its_own(
        top, build, tmp_path):
    """--net veth with --server-cpus 1 --client-cpus 0 (no sweep): the
    servers listen on the veth address in a namespace that is neither the
    harness's (where wrk runs) nor the machine's, wrk gets its answers
    through the pair, each side ran on its CPU, and both namespaces are
    gone afterwards."""
    if netns.unavailable_reason():
        pytest.fail(netns.unavailable_reason())
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("needs two CPUs (the reference machine has two)")
    out = tmp_path / "out"
    done = bench(top, build, *TINY, "--servers", SERVERS, "--net", "veth",
                 "--server-cpus", "1", "--client-cpus", "0",
                 "--out", str(out))
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["net"]["kind"] == "veth"
    names = (meta["net"]["server_namespace"],
             meta["net"]["client_namespace"])
    mine = netns.namespace_of()
    for run in records(out):
        assert run["ok"], (run["error"], run["error_log_tail"])
        assert run["requests"] > 0 and run["success"] == run["requests"]
        assert run["wrk_command"][-1].startswith(
            f"http://{netns.SERVER_ADDRESS}:")
        server, client = run["netns"]["server"], run["netns"]["client"]
        assert len({server, client, mine}) == 3, run["netns"]
        assert set(run["server_cpus"].values()) == {"1"}, run
        assert run["client_cpus"] == "0", run
    assert f"Listen {netns.SERVER_ADDRESS}:" in (
        out / "servers" / "native-w1-bucketed-event" / "httpd.conf"
    ).read_text()
    assert not set(names) & set(namespaces())


def test_veth_namespaces_are_deleted_when_the_run_is_stopped(top, build,
                                                             tmp_path):
    """SIGTERM in the middle of a run: the servers and wrk stop and both
    namespaces go. Without --server-cpus the run warns that the load tools
    share the servers' CPUs."""
    if netns.unavailable_reason():
        pytest.fail(netns.unavailable_reason())
    env = dict(os.environ, BUCKETED_BUILD=build)
    run = subprocess.Popen(
        [sys.executable, os.path.join(top, "bench", "run"), "--workloads",
         "w1", "--levels", "native", "--concurrency", "8", "--runs", "1",
         "--duration", "60", "--warmup", "0", "--slots", "32", "--servers",
         "bucketed-event", "--net", "veth", "--out", str(tmp_path / "out")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    server_ns = f"bench-srv-{run.pid}"
    try:
        served = wait_until(
            lambda: server_ns in namespaces() and subprocess.run(
                ["ip", "netns", "pids", server_ns], capture_output=True,
                text=True, check=False).stdout.split(),
            timeout=120, interval=0.2, what="a server in " + server_ns)
        # The harness is in the client namespace, and wrk with it.
        client_ns = netns.namespace_of(run.pid)
        wait_until(lambda: len(in_namespace(client_ns)) > 1, timeout=60,
                   interval=0.1, what="wrk in the client namespace")
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=STOP_WAIT_S)
    finally:
        if run.poll() is None:
            # A failed wait: still stopped the way that cleans up.
            run.send_signal(signal.SIGTERM)
            try:
                run.communicate(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                run.kill()
                run.communicate()
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert "warning: the load tools share the servers' CPUs" in stderr
    left = set(namespaces()) & {server_ns, f"bench-cli-{run.pid}"}
    assert not left, stderr
    assert not in_namespace(client_ns), "wrk outlived the run"
    deadline = time.monotonic() + STOP_WAIT_S
    while any(os.path.exists(f"/proc/{pid}") for pid in served):
        assert time.monotonic() < deadline, f"server processes {served} left"
        time.sleep(0.1)
