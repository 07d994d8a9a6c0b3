# SPDX-License-Identifier: Apache-2.0
"""Load generation with wrk: one bounded run against one server.

A Lua script does two things wrk cannot do from its command line: `setup`
gives each wrk thread its own server address, and `done` prints the totals
and latency percentiles as one JSON line. wrk gives every thread the same
number of connections, so a workload's split of the load between its ports
(e.g. 90/10) is a split of the threads (9 threads on one port, 1 on the
other): see thread_ports(). One wrk process, so one latency histogram
over both ports.

A paced run (the idle workload's --rate) adds a delay() to the script: each
wrk thread gives its connections send times on one schedule of its own,
spaced so that the threads together ask a fixed rate. wrk starts a
request's latency clock when it writes the request, after the delay, so
the latencies are the server's answers, not the waits between requests
(wrk 4.1, src/wrk.c: socket_writeable sets the start after the delay)."""

import json
import os
import re
import signal
import subprocess
import time

from . import configs, placement
from .net import LOOPBACK

RESULT_MARKER = "BUCKETBENCH-RESULT "
# wrk stops by itself after --duration; past this much extra time the run
# is considered hung and killed.
WRK_GRACE_S = 30

LUA_TEMPLATE = """\
-- Written by bucketbench for one run; see bench/bucketbench/load.py.
-- The port of each thread, in the order wrk sets them up.
local ports = {%(ports)s}
local host = "%(host)s"
local threads_set_up = 0

function setup(thread)
    local port = ports[threads_set_up %% #ports + 1]
    threads_set_up = threads_set_up + 1
    thread.addr = wrk.lookup(host, port)[1]
end

function done(summary, latency, requests)
    local latency_json = "null"
    if summary.requests > 0 then
        latency_json = string.format(
            '{"min":%%d,"mean":%%.1f,"max":%%d,"stdev":%%.1f,' ..
            '"p50":%%d,"p90":%%d,"p99":%%d,"p99.9":%%d}',
            latency.min, latency.mean, latency.max, latency.stdev,
            latency:percentile(50), latency:percentile(90),
            latency:percentile(99), latency:percentile(99.9))
    end
    local e = summary.errors
    io.write(string.format(
        '%(marker)s{"duration_us":%%d,"requests":%%d,"bytes":%%d,' ..
        '"errors":{"connect":%%d,"read":%%d,"write":%%d,"status":%%d,' ..
        '"timeout":%%d},"latency_us":%%s}\\n',
        summary.duration, summary.requests, summary.bytes, e.connect,
        e.read, e.write, e.status, e.timeout, latency_json))
end
"""


# Appended to the script of a mixed workload: wrk asks request() for every
# request; each thread sends its every Nth to the slow page. Built in
# init(), once wrk has set the Host header (and -H's Connection: close).
MIXED_LUA_TEMPLATE = """\
-- Mixed load: every %(every)d-th request of each thread to %(slow)s.
local fast_request, slow_request
local sent = 0

function init(args)
    fast_request = wrk.format(nil, "%(fast)s")
    slow_request = wrk.format(nil, "%(slow)s")
end

function request()
    sent = sent + 1
    if sent %% %(every)d == 0 then
        return slow_request
    end
    return fast_request
end
"""


# Appended to the script of a paced run. wrk asks delay() (milliseconds,
# truncated to whole ones) each time one of the thread's connections has
# its answer; the thread's Lua state is shared by its connections, so the
# schedule is the thread's: each answered connection gets the next free
# send time. A schedule that fell behind restarts from now rather than
# sending the missed requests in a burst, so a server that cannot keep up
# gets less than the rate asked (the achieved rate is in the result).
# The clock: clock_gettime(CLOCK_MONOTONIC) through LuaJIT's FFI (wrk's
# Lua has no clock finer than a second).
PACED_LUA_TEMPLATE = """\
-- Paced: each thread sends one request every %(interval_ms).4f ms.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bucketbench_timespec;
int clock_gettime(int clock, bucketbench_timespec *now);
]]
local CLOCK_MONOTONIC = 1
local clock = ffi.new("bucketbench_timespec")
local interval_ms = %(interval_ms).6f
local next_send_ms = nil

local function now_ms()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, clock)
    return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end

function delay()
    local now = now_ms()
    if next_send_ms == nil or next_send_ms < now then
        next_send_ms = now
    end
    local wait = next_send_ms - now
    next_send_ms = next_send_ms + interval_ms
    return wait
end
"""


def pacing_interval_ms(rate, threads):
    """Milliseconds between the requests of one of `threads` wrk threads
    so that together they ask `rate` requests a second."""
    return threads * 1000.0 / rate


class SplitError(ValueError):
    """A split of the load that wrk's threads cannot make exactly."""


def split_error(split, threads):
    """Why `threads` wrk threads cannot carry `split` (percent per port)
    exactly, or None when they can."""
    if sum(split) != 100 or min(split) < 0:
        return f"the split {split} must be percentages adding up to 100"
    uneven = [pct for pct in split if pct * threads % 100]
    if uneven:
        return (f"{threads} wrk thread(s) cannot carry the split "
                f"{'/'.join(map(str, split))} exactly "
                f"({uneven[0]} % of {threads} is not a whole thread)")
    return None


def thread_ports(ports, split, threads):
    """The port of each of wrk's threads: split[i] percent of the threads
    (so of the connections) on ports[i], the ports' threads in turn. Ports
    with a 0 % share get no thread (they still exist: the server listens
    on them). SplitError when the threads cannot make the split."""
    if len(split) != len(ports):
        raise SplitError(f"{len(ports)} port(s) but a split of "
                         f"{len(split)}: {split}")
    why = split_error(split, threads)
    if why:
        raise SplitError(why)
    remaining = [pct * threads // 100 for pct in split]
    order = []
    while any(remaining):
        for index, left in enumerate(remaining):
            if left:
                order.append(ports[index])
                remaining[index] -= 1
    return order


def lua_script(ports, mixed=None, interval_ms=None, host=LOOPBACK):
    """The Lua script for a run: ports[i] is the port of thread i (see
    thread_ports); with fewer ports than threads they are taken in turn.
    mixed: (fast document, slow document, N) to send every Nth request of
    each thread to the slow document instead of the fast one.
    interval_ms: pace each thread to one request this often
    (pacing_interval_ms); None: as fast as the server answers.
    host: the servers' address (loopback, or that of --net veth)."""
    quoted = ", ".join(f'"{port}"' for port in ports)
    script = LUA_TEMPLATE % {"ports": quoted, "marker": RESULT_MARKER,
                             "host": host}
    if mixed:
        fast, slow, every = mixed
        script += MIXED_LUA_TEMPLATE % {"fast": "/" + fast,
                                        "slow": "/" + slow, "every": every}
    if interval_ms is not None:
        script += PACED_LUA_TEMPLATE % {"interval_ms": interval_ms}
    return script


def script_file(workdir, ports, split, threads, rate=None, mixed=None,
                host=LOOPBACK):
    """The path of a server's wrk script in workdir (lua_script for its
    ports, split and threads; rate: paced to that many requests a second
    in all), written the first time it is asked for: one file per rate."""
    name = "wrk.lua" if rate is None else f"wrk-rate{rate}.lua"
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
        interval_ms = None if rate is None \
            else pacing_interval_ms(rate, threads)
        with open(path, "w") as handle:
            handle.write(lua_script(thread_ports(ports, split, threads),
                                    mixed=mixed, interval_ms=interval_ms,
                                    host=host))
    return path


def wrk_command(wrk, *, ports, connections, threads, duration_s, timeout_s,
                keep_alive, script_path, document=configs.DOC_NAME,
                scheme="http", host=LOOPBACK):
    command = [wrk, "-t", str(threads), "-c", str(connections),
               "-d", f"{duration_s}s", "--timeout", f"{timeout_s}s",
               "-s", script_path]
    if not keep_alive:
        command += ["-H", "Connection: close"]
    return command + [f"{scheme}://{host}:{ports[0]}/{document}"]


# h2load's totals. It prints its run time in the unit that suits it: a
# run cut short (every connection refused, say) finishes in ms or us.
H2LOAD_FINISHED = re.compile(r"finished in ([\d.]+)(us|ms|s), ")
H2LOAD_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
    r"(\d+) failed, (\d+) errored, (\d+) timeout")
H2LOAD_COUNTS = ("total", "started", "done", "succeeded", "failed",
                 "errored", "timeout")
SECONDS_PER_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def h2load_totals(text):
    """(run time in seconds, {count: n} of H2LOAD_COUNTS) of h2load's
    output, or None when it printed no totals."""
    finished = H2LOAD_FINISHED.search(text)
    requests = H2LOAD_REQUESTS.search(text)
    if not finished or not requests:
        return None
    seconds = float(finished.group(1)) * SECONDS_PER_UNIT[finished.group(2)]
    return seconds, dict(zip(H2LOAD_COUNTS, map(int, requests.groups())))


def parse_result(stdout):
    """wrk's totals from the script's JSON line, in the harness's units
    (seconds, milliseconds), or None when wrk printed none."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            raw = json.loads(line[len(RESULT_MARKER):])
            break
    else:
        return None
    duration_s = raw["duration_us"] / 1e6
    errors = raw["errors"]
    latency = raw["latency_us"]
    return {
        "duration_s": duration_s,
        "requests": raw["requests"],
        "success": raw["requests"] - errors["status"],
        "rps": raw["requests"] / duration_s if duration_s else 0.0,
        "bytes": raw["bytes"],
        "errors": {"connect": errors["connect"], "read": errors["read"],
                   "write": errors["write"], "timeout": errors["timeout"],
                   "non_2xx": errors["status"]},
        "latency_ms": None if latency is None else
        {key: value / 1000.0 for key, value in latency.items()},
    }


class LoadError(Exception):
    pass


def _kill(pid):
    os.kill(pid, signal.SIGKILL)
    os.wait4(pid, 0)


def _wait_bounded(pid, bound_s):
    """(wait status, rusage) of a child, killed when still running after
    bound_s."""
    deadline = time.monotonic() + bound_s
    while True:
        waited_pid, status, usage = os.wait4(pid, os.WNOHANG)
        if waited_pid:
            return status, usage
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return status, usage
        time.sleep(0.01)


def run_wrk(command, duration_s, log_path):
    """Runs wrk, bounded in time. Returns (parsed result, client CPU
    seconds); the result's client_cpus says where wrk ran
    (placement.check_client). LoadError with wrk's output when it fails
    or prints nothing, or when it runs off the harness's CPUs. wrk does
    not outlive the call: an interruption (SIGTERM, Ctrl-C) kills it."""
    with open(log_path, "w+b") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                   stdout=output, stderr=subprocess.STDOUT)
        try:
            client_cpus = placement.check_client(process.pid, "wrk")
            status, usage = _wait_bounded(process.pid,
                                          duration_s + WRK_GRACE_S)
        except placement.PlacementError as error:
            _kill(process.pid)
            raise LoadError(str(error)) from None
        except BaseException:
            _kill(process.pid)
            raise
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read().decode(errors="replace")
    client_cpu_s = usage.ru_utime + usage.ru_stime
    result = parse_result(text)
    if process.returncode != 0 or result is None:
        raise LoadError(f"wrk exited with status {process.returncode}:\n"
                        + "\n".join(text.splitlines()[-10:]))
    result["client_cpus"] = client_cpus
    return result, client_cpu_s
