"""Load generation with wrk: one bounded run against one server.

A Lua script does two things wrk cannot do from its command line: `setup`
gives each wrk thread its own server address (two Listen ports get the
threads alternately, so each port gets half the connections), and `done`
prints the totals and latency percentiles as one JSON line."""

import json
import os
import signal
import subprocess
import time

from . import configs

RESULT_MARKER = "BUCKETBENCH-RESULT "
# wrk stops by itself after --duration; past this much extra time the run
# is considered hung and killed.
WRK_GRACE_S = 30

LUA_TEMPLATE = """\
-- Written by bucketbench for one run; see bench/bucketbench/load.py.
local ports = {%(ports)s}
local threads_set_up = 0

function setup(thread)
    local port = ports[threads_set_up %% #ports + 1]
    threads_set_up = threads_set_up + 1
    thread.addr = wrk.lookup("127.0.0.1", port)[1]
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


def lua_script(ports):
    """The Lua script for a run against these ports."""
    quoted = ", ".join(f'"{port}"' for port in ports)
    return LUA_TEMPLATE % {"ports": quoted, "marker": RESULT_MARKER}


def wrk_command(wrk, *, ports, connections, threads, duration_s, timeout_s,
                keep_alive, script_path):
    command = [wrk, "-t", str(threads), "-c", str(connections),
               "-d", f"{duration_s}s", "--timeout", f"{timeout_s}s",
               "-s", script_path]
    if not keep_alive:
        command += ["-H", "Connection: close"]
    return command + [f"http://127.0.0.1:{ports[0]}/{configs.DOC_NAME}"]


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


def run_wrk(command, duration_s, log_path):
    """Runs wrk, bounded in time. Returns (parsed result, client CPU
    seconds); LoadError with wrk's output when it fails or prints nothing."""
    with open(log_path, "w+b") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                   stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + duration_s + WRK_GRACE_S
        while True:
            waited_pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if waited_pid:
                break
            if time.monotonic() > deadline:
                os.kill(process.pid, signal.SIGKILL)
                waited_pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read().decode(errors="replace")
    client_cpu_s = usage.ru_utime + usage.ru_stime
    result = parse_result(text)
    if process.returncode != 0 or result is None:
        raise LoadError(f"wrk exited with status {process.returncode}:\n"
                        + "\n".join(text.splitlines()[-10:]))
    return result, client_cpu_s
