# SPDX-License-Identifier: Apache-2.0
"""bench/run profile: where each server's CPU goes (issue 26, part 3).

For one workload at a time all chosen servers are started (the harness's
Server, with its configurations), then:
- rounds: `--rounds` interleaved runs without the profiler, A B C ... A B
  C ..., each measuring req/s and the server's CPU per request from /proc
  (procfs.cpu_seconds: every thread's schedstat plus the master's reaped
  children); reported as medians and same-round ratios;
- profile: one more run per server under `perf record -a -g`, with DWARF
  call graphs, since Debian builds httpd, APR and OpenSSL without frame
  pointers; only the samples of the server's processes are kept (its
  process tree before and after the run). perf is set up before the
  load starts (Recorder): on a machine running thousands of processes
  its start takes seconds, and a load started first was over before perf
  recorded anything.

`perf script` turns the samples into stacks; classify() puts each sample
in one category (CATEGORIES): the MPM's own code, the server's core and
modules (httpd + APR, or nginx), OpenSSL, libc, other user code, and the
kernel split by path (accept, epoll, futex, TCP/IP, the scheduler, the
rest). The stacks, folded, give a flame graph per server (flamegraph.py).

Workloads: w1 and w3 as in the main harness (catalog.WORKLOADS), `tls`
(wrk over https with Connection: close against mod_ssl / nginx ssl, an
ECDSA P-256 certificate made by openssl at run time: every request a full
handshake) and `h2` (HTTP/2 over TLS with mod_http2, h2load -c100 -m10,
the threaded models only, ThreadsPerChild 64). `--syscalls` adds one
traced run per server counting its system calls and context switches
(syscall_run)."""

import argparse
import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import time

from . import configs, environment, flamegraph, load, procfs, stats
from .catalog import SERVERS, WORKLOADS
from .net import free_ports
from .server import Server, ServerError

DESCRIPTION = ("Profiles servers with perf (call graphs) on w1, w3, tls "
               "and h2, measures CPU per request in interleaved rounds, "
               "and writes tables and flame graphs.")
DEFAULT_SERVERS = ("prefork", "event", "bucketed-reuseport",
                   "bucketed-event", "nginx")
H2_SERVERS = ("event", "bucketed-event")
WORKLOAD_NAMES = ("w1", "w3", "tls", "h2")
H2_THREADS_PER_CHILD = 64
H2_CONNECTIONS = 100
H2_STREAMS = 10
PERF = "/usr/bin/perf"
H2LOAD = "/usr/bin/h2load"
OPENSSL = "/usr/bin/openssl"
# perf's sampling rate (Hz, per CPU) and the user stack it copies per
# sample for DWARF unwinding (bytes).
PERF_FREQUENCY = 999
PERF_STACK_BYTES = 8192
# perf's ring buffer per CPU, in pages: each sample carries its stack copy,
# and on a loaded machine perf's reader falls behind (the default 516 KiB
# lost most samples here).
PERF_BUFFER_PAGES = 4096
# How long perf may take to write out what it holds once told to stop.
PERF_STOP_S = 120
# The profiled window starts this long after the load (perf's setup and
# the load's ramp are left out) and the load outlasts it by as much.
PERF_LEAD_S = 2.0
START_TIMEOUT_S = 90
CERT_NAME = "server.crt"
KEY_NAME = "server.key"

# ------------------------------------------------------------ categories

MPM = "mpm"
SERVER = "server"
OPENSSL_CAT = "openssl"
LIBC = "libc"
USER_OTHER = "user-other"
K_ACCEPT = "k-accept"
K_EPOLL = "k-epoll"
K_FUTEX = "k-futex"
K_TCP = "k-tcpip"
K_SCHED = "k-sched"
K_OTHER = "k-other"
CATEGORIES = {
    MPM: ("the MPM's own code", "#e45756"),
    SERVER: ("httpd core, modules, APR (nginx: nginx)", "#f2a93b"),
    OPENSSL_CAT: ("OpenSSL (libssl, libcrypto)", "#b279a2"),
    LIBC: ("libc", "#eeca3b"),
    USER_OTHER: ("other user code (ld.so, libpcre2, unresolved)", "#bab0ac"),
    K_ACCEPT: ("kernel: accept (incl. reuseport)", "#4c78a8"),
    K_EPOLL: ("kernel: epoll", "#72b7b2"),
    K_FUTEX: ("kernel: futex", "#54a24b"),
    K_TCP: ("kernel: TCP/IP, sockets, loopback", "#9ecae9"),
    K_SCHED: ("kernel: scheduler", "#88d27a"),
    K_OTHER: ("kernel: the rest (syscall entry, VFS, memory, ...)",
              "#d6d6d6"),
}
MPM_DSOS = ("mod_mpm_bucketed.so", "mod_mpm_prefork.so", "mod_mpm_event.so")
SERVER_DSO = re.compile(r"^(apache2|nginx|mod_.*\.so|libapr(util)?-1\.so.*)$")
OPENSSL_DSO = re.compile(r"^lib(ssl|crypto)\.so")
LIBC_DSO = re.compile(r"^libc\.so")
# Kernel paths, by the names of the functions on the stack: the system
# call a sample is under decides first (accept, epoll, futex), then any
# network function, then the scheduler.
ACCEPT_FRAMES = re.compile(r"^(__sys_accept4|do_accept|inet_csk_accept|"
                           r"inet_accept|__x64_sys_accept4?|reuseport_)")
EPOLL_FRAMES = re.compile(r"^(do_epoll_|ep_|__x64_sys_epoll)")
FUTEX_FRAMES = re.compile(r"futex")
TCP_FRAMES = re.compile(r"^(tcp_|__tcp_|ip_|__ip_|inet_|__inet_|sock_|"
                        r"__sock_|sk_|__sk_|skb_|__skb_|__sys_(sendto|"
                        r"recvfrom|shutdown|sendmsg|recvmsg)|net_rx|"
                        r"__netif|netif_|__dev_queue_xmit|loopback_|"
                        r"__napi|napi_|process_backlog|unix_|sockfs_|"
                        r"__sock_release|sock_close)")
SCHED_FRAMES = re.compile(r"^(schedule|__schedule|finish_task_switch|"
                          r"pick_next_task|__pick_next|try_to_wake_up|"
                          r"ttwu_|enqueue_task|dequeue_task|"
                          r"update_curr|psi_|__switch_to|"
                          r"schedule_hrtimeout)")
KERNEL_MARK = "[k]"


def _short_dso(path):
    return os.path.basename(path.strip("()"))


def user_category(dso):
    """The category of a user frame by its shared object's file name."""
    if dso in MPM_DSOS:
        return MPM
    if SERVER_DSO.match(dso):
        return SERVER
    if OPENSSL_DSO.match(dso):
        return OPENSSL_CAT
    if LIBC_DSO.match(dso):
        return LIBC
    return USER_OTHER


def kernel_category(symbols):
    """The kernel path of a sample whose kernel frames (leaf first) are
    symbols."""
    for pattern, category in ((ACCEPT_FRAMES, K_ACCEPT),
                              (EPOLL_FRAMES, K_EPOLL),
                              (FUTEX_FRAMES, K_FUTEX),
                              (TCP_FRAMES, K_TCP),
                              (SCHED_FRAMES, K_SCHED)):
        if any(pattern.search(symbol) for symbol in symbols):
            return category
    return K_OTHER


def classify(stack):
    """The category of one sample. stack: [(symbol, dso, is_kernel)],
    leaf first."""
    if not stack:
        return USER_OTHER
    if stack[0][2]:
        return kernel_category([sym for sym, _, kernel in stack if kernel])
    return user_category(stack[0][1])


# User frames that only pass a call on (the system call wrappers and APR's
# thin layer over them): the owner of a system call is the first frame
# past them.
PASS_THROUGH = (LIBC, USER_OTHER)
# httpd core functions that only MPMs call (stock prefork accepts through
# ap_unixd_accept, checks its pipe of death through ap_mpm_pod_check):
# owned by the MPM that calls them.
MPM_HELPERS = re.compile(r"^(ap_unixd_accept|ap_mpm_podx?_)")


def owner(stack):
    """Whose code a sample's time was spent for: the category of the first
    user frame, leaf first, past libc, APR and unresolved code (so a system
    call the MPM makes through apr_socket_accept or apr_pollset_poll counts
    for the MPM), with MPM_HELPERS counted as the MPM's."""
    for sym, dso, kernel in stack:
        if kernel:
            continue
        category = user_category(dso)
        if category in PASS_THROUGH or dso.startswith("libapr"):
            continue
        if MPM_HELPERS.match(sym):
            return MPM
        return category
    return USER_OTHER


# Where a context switch lands under cpu-clock sampling: the sample is
# taken when interrupts come back on after the switch.
SWITCH_FRAMES = re.compile(r"^(finish_task_switch|__schedule|schedule$|"
                           r"__switch_to)")


def is_switch(stack):
    """A kernel sample taken in the context switch itself."""
    return bool(stack) and stack[0][2] and bool(
        SWITCH_FRAMES.match(stack[0][0]))


def frame_name(symbol, dso, kernel):
    if kernel:
        return f"{symbol} {KERNEL_MARK}"
    if symbol == "[unknown]":
        return f"[{dso}]"
    return f"{symbol} ({dso})"


def parse_frame_name(name):
    """(symbol, dso, is_kernel) back from frame_name's text."""
    if name.endswith(" " + KERNEL_MARK):
        return name[:-len(KERNEL_MARK) - 1], "kernel", True
    if name.startswith("[") and name.endswith("]"):
        return "[unknown]", name[1:-1], False
    symbol, _, dso = name.rpartition(" (")
    return symbol, dso.rstrip(")"), False


def read_folded(path):
    """The samples (leaf-first stacks, one per sample) of a folded file."""
    samples = []
    with open(path) as folded:
        for line in folded:
            text, _, count = line.rstrip("\n").rpartition(" ")
            stack = [parse_frame_name(name) for name in text.split(";")]
            samples += [stack[::-1]] * int(count)
    return samples


def frame_colour(name):
    """The flame graph colour of a frame name made by frame_name."""
    if name.endswith(KERNEL_MARK):
        return CATEGORIES[kernel_category([name[:-len(KERNEL_MARK) - 1]])][1]
    if name.startswith("[") and name.endswith("]"):
        return CATEGORIES[user_category(name[1:-1])][1]
    dso = name.rsplit("(", 1)[-1].rstrip(")")
    return CATEGORIES[user_category(dso)][1]


# perf script -F pid,ip,sym,dso: a header line "<pid>", right-aligned in
# 7 columns, then one line per frame "\t<ip> <symbol> (<dso>)", a blank
# line.
FRAME_LINE = re.compile(r"^\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


def parse_perf_script(text, pids):
    """[(stack, samples)] of the samples of processes in pids: stack is
    [(symbol, dso, is_kernel)], leaf first. Symbols lose their +offset."""
    samples = []
    pid, stack = None, []

    def flush():
        if pid in pids and stack:
            samples.append(stack)

    for line in text.splitlines():
        if not line.strip():
            flush()
            pid, stack = None, []
            continue
        if not line.startswith("\t"):
            # perf pads the pid to 7 columns: the header may start with
            # spaces, frames always with a tab.
            flush()
            fields = line.split()
            pid = next((int(f) for f in fields if f.isdigit()), None)
            stack = []
            continue
        match = FRAME_LINE.match(line)
        if not match:
            continue
        symbol = match.group(2).split("+0x")[0] or "[unknown]"
        dso_path = match.group(3)
        kernel = dso_path.startswith("[kernel") or \
            dso_path.startswith("[guest.kernel")
        stack.append((symbol, "kernel" if kernel else _short_dso(dso_path),
                      kernel))
    flush()
    return samples


SYSCALL_FRAME = re.compile(r"^__(?:x64|do)_sys_(\w+)")


def kernel_entry(stack):
    """Why a kernel sample is in the kernel: the system call (its name), a
    page fault, or "interrupt" (softirq network processing, timers) when
    no system call is on the stack; None for a user sample."""
    if not stack or not stack[0][2]:
        return None
    for symbol, _, kernel in reversed(stack):
        if not kernel:
            continue
        match = SYSCALL_FRAME.match(symbol)
        if match:
            return match.group(1)
        if "page_fault" in symbol:
            return "page fault"
    return "interrupt"


def summarize_samples(samples):
    """Shares (percent of the samples) by category and by owner, the
    folded stacks, and the top leaf symbols per category."""
    by_category = {name: 0 for name in CATEGORIES}
    by_owner = {}
    switches = 0
    entries = {}
    folded = {}
    top = {}
    for stack in samples:
        category = classify(stack)
        by_category[category] += 1
        switches += is_switch(stack)
        entry = kernel_entry(stack)
        if entry:
            entries[entry] = entries.get(entry, 0) + 1
        whose = owner(stack)
        by_owner[whose] = by_owner.get(whose, 0) + 1
        key = tuple(frame_name(*frame) for frame in reversed(stack))
        folded[key] = folded.get(key, 0) + 1
        leaf = frame_name(*stack[0])
        top.setdefault(category, {})
        top[category][leaf] = top[category].get(leaf, 0) + 1
    total = len(samples) or 1
    return {
        "samples": len(samples),
        "percent": {k: 100.0 * v / total for k, v in by_category.items()},
        "owner_percent": {k: 100.0 * v / total for k, v in by_owner.items()},
        "switch_percent": 100.0 * switches / total,
        "kernel_entry_percent": {k: 100.0 * v / total for k, v in sorted(
            entries.items(), key=lambda kv: -kv[1])},
        "top": {k: sorted(v.items(), key=lambda kv: -kv[1])[:8]
                for k, v in top.items()},
        "folded": folded,
    }


# ------------------------------------------------------------ servers

def make_certificate(directory):
    """An ECDSA P-256 key and self-signed certificate for 127.0.0.1."""
    cert = os.path.join(directory, CERT_NAME)
    key = os.path.join(directory, KEY_NAME)
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    os.chmod(key, 0o644)
    return cert, key


def _tls_httpd_lines(modules_dir, cert, key, h2):
    lines = [f'LoadModule ssl_module "{modules_dir}/mod_ssl.so"']
    if h2:
        lines += [f'LoadModule http2_module "{modules_dir}/mod_http2.so"',
                  "Protocols h2 http/1.1"]
    lines += ["SSLEngine on", f'SSLCertificateFile "{cert}"',
              f'SSLCertificateKeyFile "{key}"',
              # No resumption (no session cache, no tickets): every
              # connection is a full handshake.
              "SSLSessionTickets off"]
    return lines


def _threads_per_child(text, threads):
    """httpd.conf text with ThreadLimit/ThreadsPerChild set to threads (the
    children then ServerLimit / the threads' ratio fewer)."""
    slots = int(re.search(r"^MaxRequestWorkers (\d+)$", text,
                          re.M).group(1))
    children = slots // threads
    for name, value in (("ThreadLimit", threads),
                        ("ThreadsPerChild", threads),
                        ("ServerLimit", children),
                        ("StartServers", children)):
        text = re.sub(rf"^{name} \d+$", f"{name} {value}", text, flags=re.M)
    return text, children


def adapt_server(server, workload_name, cert, key, modules_dir):
    """Rewrites the configuration the harness wrote for server for the
    tls and h2 workloads; returns whether it speaks TLS."""
    if workload_name not in ("tls", "h2"):
        return False
    with open(server.config_path) as conf:
        text = conf.read()
    if server.spec.kind == "nginx":
        text = text.replace(" reuseport backlog", " ssl reuseport backlog")
        # TLS 1.3 as httpd negotiates it (Debian's nginx 1.22 offers only
        # up to 1.2 by default), and no resumption: without these, wrk
        # resumed its sessions with nginx (TLS 1.2 tickets) and did full
        # handshakes with httpd, and the comparison was off by 6x.
        text = re.sub(r"(\n        root [^\n]*;)",
                      rf"\1\n        ssl_certificate {cert};"
                      rf"\n        ssl_certificate_key {key};"
                      r"\n        ssl_protocols TLSv1.2 TLSv1.3;"
                      r"\n        ssl_session_tickets off;", text)
    else:
        text += "\n".join(_tls_httpd_lines(modules_dir, cert, key,
                                           workload_name == "h2")) + "\n"
        if workload_name == "h2":
            text, children = _threads_per_child(text, H2_THREADS_PER_CHILD)
            server.expected_processes = 1 + children
    with open(server.config_path, "w") as conf:
        conf.write(text)
    return True


def _https_ok(port):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2,
                                       context=context)
    try:
        conn.request("GET", "/" + configs.DOC_NAME,
                     headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status == 200 and response.read() == configs.DOC_BODY
    finally:
        conn.close()


def wait_tls_ready(server):
    """Server.wait_ready's probe speaks plain HTTP: this one https."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if not server.alive():
            raise ServerError(f"{server.spec.name} exited while starting: "
                              f"{server.error_log_tail()}")
        try:
            if _https_ok(server.ports[0]):
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServerError(f"{server.spec.name}: no https answer within "
                              f"{START_TIMEOUT_S} s")
        time.sleep(0.2)
    # Every child started (the count settles).
    wait_s = time.monotonic() + 10
    while len(procfs.process_tree(server.pid)) < server.expected_processes \
            and time.monotonic() < wait_s:
        time.sleep(0.1)


# ------------------------------------------------------------ load

def load_command(tools, server, workload_name, concurrency, duration_s,
                 tls):
    """The client's command line for one run."""
    url_path = "/" + configs.DOC_NAME
    if workload_name == "h2":
        return [H2LOAD, "-c", str(H2_CONNECTIONS), "-m", str(H2_STREAMS),
                "-t", str(tools.cores), "-D", str(int(duration_s)),
                f"https://127.0.0.1:{server.ports[0]}{url_path}"]
    script = os.path.join(server.workdir, "wrk.lua")
    if not os.path.exists(script):
        with open(script, "w") as handle:
            handle.write(load.lua_script(server.ports))
    command = load.wrk_command(
        tools.wrk, ports=server.ports, connections=concurrency,
        threads=tools.cores, duration_s=duration_s, timeout_s=10,
        keep_alive=WORKLOADS.get(workload_name) is not None
        and WORKLOADS[workload_name].keep_alive, script_path=script)
    if tls:
        command[-1] = f"https://127.0.0.1:{server.ports[0]}{url_path}"
    return command


def parse_h2load(text):
    """h2load's totals: requests succeeded, failed, errored, and req/s."""
    totals = load.h2load_totals(text)
    if totals is None:
        return None
    duration_s, counts = totals
    return {"duration_s": duration_s,
            "rps": counts["succeeded"] / duration_s if duration_s else 0.0,
            "requests": counts["succeeded"],
            "errors": {"failed": counts["failed"],
                       "errored": counts["errored"]}}


def run_load(command, duration_s, log_path):
    """Runs the client; its parsed result (wrk's or h2load's)."""
    if os.path.basename(command[0]) == "h2load":
        with open(log_path, "w") as log:
            done = subprocess.run(command, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  timeout=duration_s + load.WRK_GRACE_S,
                                  check=False)
            log.write(done.stdout)
        result = parse_h2load(done.stdout)
        if result is None:
            raise load.LoadError("h2load printed no result:\n"
                                 + done.stdout[-800:])
        return result
    return load.run_wrk(command, duration_s, log_path)[0]


def measure(server, command, duration_s, log_path):
    """One run: the client's result plus the server's CPU per request."""
    pids = procfs.process_tree(server.pid)
    before = procfs.cpu_seconds(server.pid, pids)
    result = run_load(command, duration_s, log_path)
    pids = procfs.process_tree(server.pid)
    cpu_s = procfs.cpu_seconds(server.pid, pids) - before
    result["server_cpu_s"] = cpu_s
    result["cpu_ms_per_request"] = 1000.0 * cpu_s / result["requests"] \
        if result["requests"] else None
    return result


class ProfileError(Exception):
    """perf failed or saw nothing of the server."""


class Recorder:
    """perf record -a, started disabled and switched on and off through its
    control FIFOs. Starting perf on a busy machine takes seconds (it
    describes every process that runs), so the load begins only once perf
    answers, and the window it records is exactly the one asked for."""

    def __init__(self, data, workdir, what=None):
        self.control = os.path.join(workdir, "perf.ctl")
        self.ack = os.path.join(workdir, "perf.ack")
        for fifo in (self.control, self.ack):
            if os.path.exists(fifo):
                os.unlink(fifo)
            os.mkfifo(fifo)
        self.log = open(data + ".stderr", "w+")
        what = what or ["-F", str(PERF_FREQUENCY), "-g", "--call-graph",
                         f"dwarf,{PERF_STACK_BYTES}"]
        self.process = subprocess.Popen(
            [PERF, "record", "-q", "-m", str(PERF_BUFFER_PAGES)] + what
            + ["-o", data, "-a", "-D", "-1",
             "--control", f"fifo:{self.control},{self.ack}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        # Opened in this order by perf too: the control end first.
        self.control_fd = os.open(self.control, os.O_WRONLY)
        self.ack_fd = os.open(self.ack, os.O_RDONLY)

    def command(self, word):
        """Sends a control command and waits for perf's acknowledgement
        (perf answers only from its main loop: once it records)."""
        os.write(self.control_fd, word.encode() + b"\n")
        answer = os.read(self.ack_fd, 16)
        if not answer:
            raise ProfileError(f"perf record did not acknowledge {word}")

    def finish(self):
        """Stops perf; its stderr."""
        os.close(self.control_fd)
        os.close(self.ack_fd)
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=PERF_STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        if self.process.returncode not in (0, -signal.SIGINT):
            raise ProfileError(f"perf record failed "
                               f"({self.process.returncode}): {text[-800:]}")
        return text


def _recorded_run(server, command, duration_s, data, what=None):
    """The load under perf record (Recorder; what: its event options):
    perf set up first, then the load for duration_s + 2 x PERF_LEAD_S,
    perf recording the middle duration_s. Returns (client output, perf's
    stderr, the server's pids)."""
    pids = procfs.process_tree(server.pid)
    recorder = Recorder(data, server.workdir, what)
    try:
        recorder.command("disable")
        client = subprocess.Popen(
            _with_duration(command, duration_s + 2 * PERF_LEAD_S),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(PERF_LEAD_S)
        recorder.command("enable")
        time.sleep(duration_s)
        recorder.command("disable")
    finally:
        perf_log = recorder.finish()
    output, _ = client.communicate(timeout=duration_s + load.WRK_GRACE_S
                                   + 2 * PERF_LEAD_S)
    # Threads and processes started during the run belong to it too.
    return output, perf_log, set(pids) | set(procfs.process_tree(server.pid))


def _client_result(command, output):
    return parse_h2load(output) if command[0].endswith("h2load") \
        else load.parse_result(output)


# What syscall_run counts: every system call the server enters (by
# number) and every context switch away from one of its threads.
# perf's own calls are left out (it would record its own writes of what it
# records), and the file is capped in case the machine is busier still.
SYSCALL_EVENTS = ["-e", "raw_syscalls:sys_enter", "--exclude-perf",
                  "-e", "sched:sched_switch", "--exclude-perf",
                  "--max-size", "2G"]
SYSCALL_ID = re.compile(r"NR (\d+)")


def syscall_run(server, command, duration_s, out_prefix):
    """One run counting the server's system calls by name and its context
    switches (tracepoints, no sampling): {"requests", "per_request":
    {name: count per request}}."""
    data = out_prefix + ".trace.data"
    output, _, pids = _recorded_run(server, command, duration_s, data,
                                    SYSCALL_EVENTS)
    with open(out_prefix + ".trace.client.log", "w") as log:
        log.write(output)
    script = subprocess.run(
        [PERF, "script", "-i", data, "-F", "pid,event,trace",
         "--pid", ",".join(map(str, sorted(pids)))],
        capture_output=True, text=True, check=False)
    os.unlink(data)
    counts = count_syscalls(script.stdout)
    result = _client_result(command, output)
    # Requests in the traced window: the client's rate times the window.
    requests = result["rps"] * duration_s if result else 0
    return {"requests": requests, "counts": counts,
            "per_request": {name: count / requests
                            for name, count in sorted(
                                counts.items(), key=lambda kv: -kv[1])}
            if requests else {}}


def count_syscalls(text):
    """{system call name or "context switch": count} from perf script -F
    pid,event,trace output of SYSCALL_EVENTS."""
    counts = {}
    for line in text.splitlines():
        if "sys_enter" in line:
            match = SYSCALL_ID.search(line)
            name = SYSCALL_NAMES.get(int(match.group(1)),
                                     match.group(1)) if match else "?"
        elif "sched_switch" in line:
            name = "context switch"
        else:
            continue
        counts[name] = counts.get(name, 0) + 1
    return counts


# x86-64 system call numbers of the calls a web server makes.
SYSCALL_NAMES = {0: "read", 1: "write", 2: "open", 3: "close", 4: "stat",
                 5: "fstat", 7: "poll", 8: "lseek", 9: "mmap", 11: "munmap",
                 13: "rt_sigaction", 14: "rt_sigprocmask", 16: "ioctl",
                 17: "pread64", 19: "readv", 20: "writev", 23: "select",
                 24: "sched_yield", 39: "getpid", 40: "sendfile",
                 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg",
                 48: "shutdown", 54: "setsockopt", 55: "getsockopt",
                 72: "fcntl", 186: "gettid", 202: "futex", 228:
                 "clock_gettime", 232: "epoll_wait", 233: "epoll_ctl",
                 257: "openat", 262: "newfstatat", 270: "pselect6",
                 271: "ppoll", 281: "epoll_pwait", 284: "eventfd",
                 288: "accept4", 290: "eventfd2", 291: "epoll_create1",
                 293: "pipe2", 318: "getrandom", 332: "statx",
                 441: "epoll_pwait2"}


def profile_run(server, command, duration_s, out_prefix):
    """One run under perf record -g: (load result, the server's samples)."""
    data = out_prefix + ".perf.data"
    output, perf_log, pids = _recorded_run(server, command, duration_s,
                                           data)
    with open(out_prefix + ".client.log", "w") as log:
        log.write(output)
    script = subprocess.run(
        [PERF, "script", "-i", data, "-F", "pid,ip,sym,dso", "--no-inline",
         "--pid", ",".join(map(str, sorted(pids)))],
        capture_output=True, text=True, check=False)
    samples = parse_perf_script(script.stdout, pids)
    with open(out_prefix + ".perf.log", "w") as log:
        log.write(f"server pids: {sorted(pids)}\n" + perf_log
                  + script.stderr[-4000:])
    if script.returncode != 0 or not samples:
        raise ProfileError(f"perf script gave no samples of the server "
                           f"(status {script.returncode}); perf.data kept "
                           f"in {data}: {script.stderr[-800:]}")
    os.unlink(data)
    return _client_result(command, output), samples


def _with_duration(command, seconds):
    """command with its duration option set to seconds."""
    command = list(command)
    flag = "-D" if command[0].endswith("h2load") else "-d"
    index = command.index(flag)
    command[index + 1] = str(int(seconds)) if flag == "-D" \
        else f"{int(seconds)}s"
    return command


# ------------------------------------------------------------ driver

def add_arguments(parser):
    parser.add_argument("--servers", default=",".join(DEFAULT_SERVERS),
                        help="servers (default %(default)s; h2 runs only "
                             + ", ".join(H2_SERVERS) + ")")
    parser.add_argument("--workloads", default="w1,w3,tls",
                        help="of " + ", ".join(WORKLOAD_NAMES)
                             + " (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=400)
    parser.add_argument("--slots", type=int, default=1024)
    parser.add_argument("--duration", type=int, default=5,
                        help="seconds per run and profiled seconds")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved unprofiled rounds (0: none)")
    parser.add_argument("--no-perf", action="store_true",
                        help="rounds only, no profile")
    parser.add_argument("--syscalls", action="store_true",
                        help="also count each server's system calls and "
                             "context switches per request (one more run "
                             "each, traced)")
    parser.add_argument("--out", required=True, help="results directory")
    parser.add_argument("--retabulate", action="store_true",
                        help="only recompute the summaries and tables.md "
                             "from the folded stacks in --out")
    parser.add_argument("--svg-dir",
                        help="also write the flame graphs there")
    parser.add_argument("--wrk", default="/usr/bin/wrk")
    parser.add_argument("--nginx", default="/usr/sbin/nginx")


def parse_args(argv, add_server_options):
    """bench/run profile's options; add_server_options(parser) adds the
    harness's own (where httpd and bucketed are)."""
    parser = argparse.ArgumentParser(prog="bench/run profile",
                                     description=DESCRIPTION)
    add_arguments(parser)
    add_server_options(parser)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def check_arguments(parser, args):
    args.servers = args.servers.split(",")
    args.workloads = args.workloads.split(",")
    for name in args.servers:
        if name not in SERVERS:
            parser.error(f"unknown server {name}")
    for name in args.workloads:
        if name not in WORKLOAD_NAMES:
            parser.error(f"unknown workload {name}")
    if args.duration < 1 or args.rounds < 0 or args.concurrency < 2:
        parser.error("--duration >= 1, --rounds >= 0, --concurrency >= 2")


def _start(specs, workload_name, tools, scratch_dir, cert, key):
    servers = []
    listen_count = 1
    for spec in specs:
        workdir = os.path.join(scratch_dir, f"{workload_name}-{spec.name}")
        server = Server(spec, "native", free_ports(listen_count), workdir,
                        tools)
        tls = adapt_server(server, workload_name, cert, key,
                           tools.modules_dir)
        server.launch()
        servers.append((server, tls))
    for server, tls in servers:
        if tls:
            wait_tls_ready(server)
        else:
            server.wait_ready()
    return servers


def run(tools, scratch_dir, args, say=print):
    """The whole plan; writes results.json in args.out and returns it."""
    os.makedirs(args.out, exist_ok=True)
    tools.freeze_bucketed(scratch_dir)
    cert, key = make_certificate(scratch_dir)
    results = {"machine": environment.machine_facts(tools),
               "perf": {"frequency_hz": PERF_FREQUENCY,
                        "call_graph": f"dwarf,{PERF_STACK_BYTES}"},
               "settings": {"concurrency": args.concurrency,
                            "slots": args.slots, "duration_s": args.duration,
                            "rounds": args.rounds},
               "workloads": {}}
    for workload_name in args.workloads:
        names = [n for n in args.servers
                 if workload_name != "h2" or n in H2_SERVERS]
        specs = [SERVERS[name] for name in names]
        servers = []
        try:
            servers = _start(specs, workload_name, tools, scratch_dir, cert,
                             key)
            results["workloads"][workload_name] = _run_workload(
                tools, servers, workload_name, args, say)
        finally:
            for server, _ in servers:
                server.stop()
        with open(os.path.join(args.out, "results.json"), "w") as out:
            json.dump(results, out, indent=1, default=list)
    return results


def _run_workload(tools, servers, workload_name, args, say):
    entry = {"load_average": [], "rounds": {}, "profiles": {}}
    for server, tls in servers:
        warm = load_command(tools, server, workload_name, args.concurrency,
                            1, tls)
        run_load(warm, 1, os.path.join(server.workdir, "warm.log"))
    for round_no in range(args.rounds):
        entry["load_average"].append(environment.load_average())
        for server, tls in servers:
            command = load_command(tools, server, workload_name,
                                   args.concurrency, args.duration, tls)
            result = measure(server, command, args.duration,
                             os.path.join(server.workdir,
                                          f"round{round_no}.log"))
            entry["rounds"].setdefault(server.spec.name, []).append(result)
            say(f"{workload_name} round {round_no + 1} {server.spec.name}: "
                f"{result['rps']:.0f} req/s, "
                f"{result['cpu_ms_per_request'] or 0:.4f} ms CPU/request, "
                f"load {environment.load_average()[0]}")
    if args.no_perf:
        return entry
    for server, tls in servers:
        command = load_command(tools, server, workload_name,
                               args.concurrency, args.duration, tls)
        prefix = os.path.join(args.out, f"{workload_name}-{server.spec.name}")
        entry["load_average"].append(environment.load_average())
        try:
            result, samples = profile_run(server, command, args.duration,
                                          prefix)
        except ProfileError as error:
            entry["profiles"][server.spec.name] = {"error": str(error)}
            say(f"{workload_name} profile {server.spec.name}: {error}")
            continue
        summary = summarize_samples(samples)
        folded = summary.pop("folded")
        with open(prefix + ".folded", "w") as out:
            for stack, count in sorted(folded.items()):
                out.write(";".join(stack) + f" {count}\n")
        title = f"{server.spec.label}: {workload_name}"
        svg = flamegraph.render(
            folded, title, frame_colour,
            [(label, colour) for label, colour in CATEGORIES.values()])
        for directory in filter(None, (args.out, args.svg_dir)):
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(
                    directory, f"{workload_name}-{server.spec.name}.svg"),
                    "w") as out:
                out.write(svg)
        summary["load"] = result
        entry["profiles"][server.spec.name] = summary
        if args.syscalls:
            traced = syscall_run(server, command, args.duration, prefix)
            entry.setdefault("syscalls", {})[server.spec.name] = traced
            say(f"{workload_name} system calls {server.spec.name}: "
                + ", ".join(f"{k} {v:.2f}" for k, v in
                            list(traced["per_request"].items())[:8]))
        say(f"{workload_name} profile {server.spec.name}: "
            f"{summary['samples']} samples, "
            + ", ".join(f"{k} {v:.1f}" for k, v in
                        summary["percent"].items() if v >= 0.5))
    return entry


# ------------------------------------------------------------ tables

def retabulate(out_dir):
    """Summaries recomputed from the folded stacks a run left in out_dir
    (after a change to the classification); results.json updated."""
    path = os.path.join(out_dir, "results.json")
    with open(path) as handle:
        results = json.load(handle)
    for workload_name, entry in results["workloads"].items():
        for name, summary in entry["profiles"].items():
            if "error" in summary:
                continue
            fresh = summarize_samples(read_folded(os.path.join(
                out_dir, f"{workload_name}-{name}.folded")))
            fresh.pop("folded")
            fresh["load"] = summary.get("load")
            entry["profiles"][name] = fresh
    with open(path, "w") as handle:
        json.dump(results, handle, indent=1, default=list)
    return results


def _fmt(value, digits=1):
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(results):
    """Tables of results: per workload, the rounds (medians, same-round
    ratios against the first server) and the profile shares."""
    lines = []
    for workload_name, entry in results["workloads"].items():
        lines.append(f"### {workload_name}\n")
        rounds = entry["rounds"]
        if rounds:
            names = list(rounds)
            base = names[0]
            lines.append(f"| server | req/s (median) | CPU ms/request "
                         f"(median) | CPU/request vs {base} (same-round "
                         f"median) | req/s vs {base} |")
            lines.append("|---|---|---|---|---|")
            for name in names:
                runs = rounds[name]
                cpu = [r["cpu_ms_per_request"] for r in runs]
                rps = [r["rps"] for r in runs]
                cpu_ratio = stats.median([a / b for a, b in zip(
                    cpu, [r["cpu_ms_per_request"] for r in rounds[base]])
                    if a and b] or [0])
                rps_ratio = stats.median([a / b for a, b in zip(
                    rps, [r["rps"] for r in rounds[base]]) if b] or [0])
                lines.append(f"| {name} | {stats.median(rps):.0f} "
                             f"({min(rps):.0f}–{max(rps):.0f}) | "
                             f"{stats.median(cpu):.4f} | "
                             f"{cpu_ratio:.2f} | {rps_ratio:.2f} |")
            lines.append("")
        profiles = {name: summary for name, summary
                    in entry["profiles"].items() if "error" not in summary}
        for name, summary in entry["profiles"].items():
            if "error" in summary:
                lines.append(f"{name}: no profile ({summary['error']})\n")
        if profiles:
            names = list(profiles)
            lines.append("| % of samples | " + " | ".join(names) + " |")
            lines.append("|---|" + "---|" * len(names))
            for category, (label, _) in CATEGORIES.items():
                lines.append(f"| {label} | " + " | ".join(
                    _fmt(profiles[n]["percent"][category]) for n in names)
                    + " |")
            lines.append("| MPM incl. the system calls it makes | " +
                         " | ".join(_fmt(profiles[n]["owner_percent"].get(
                             MPM, 0.0)) for n in names) + " |")
            lines.append("| kernel samples in a context switch (any "
                         "path) | " + " | ".join(
                             _fmt(profiles[n]["switch_percent"])
                             for n in names) + " |")
            lines.append("| samples | " + " | ".join(
                str(profiles[n]["samples"]) for n in names) + " |")
            lines.append("")
            lines += _per_request_table(profiles, rounds)
    return "\n".join(lines) + "\n"


def _per_request_table(profiles, rounds):
    """The profile's shares as microseconds of CPU per request: each share
    times the server's median CPU per request in the unprofiled rounds."""
    names = [name for name in profiles if rounds.get(name)]
    if not names:
        return []
    cpu_us = {name: 1000.0 * stats.median(
        [r["cpu_ms_per_request"] for r in rounds[name]]) for name in names}
    lines = ["| µs CPU per request | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for category, (label, _) in CATEGORIES.items():
        lines.append(f"| {label} | " + " | ".join(
            _fmt(profiles[n]["percent"][category] * cpu_us[n] / 100.0)
            for n in names) + " |")
    lines.append("| all | " + " | ".join(_fmt(cpu_us[n]) for n in names)
                 + " |")
    entries = {}
    for name in names:
        for entry, pct in profiles[name].get("kernel_entry_percent",
                                             {}).items():
            entries[entry] = entries.get(entry, 0.0) + pct
    top = sorted(entries, key=lambda e: -entries[e])[:12]
    lines += ["", "| kernel µs per request, by system call | "
              + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for entry in top:
        lines.append(f"| {entry} | " + " | ".join(
            _fmt(profiles[n].get("kernel_entry_percent", {}).get(entry, 0.0)
                 * cpu_us[n] / 100.0) for n in names) + " |")
    return lines + [""]
