# SPDX-License-Identifier: Apache-2.0
"""The idle workload's client side: many keep-alive connections held open
beside wrk's active load (issue 9), and the limits that allow them.

IdleConnections opens its connections from one thread with non-blocking
sockets and one epoll set: at most OPEN_WINDOW connections are on their
way at once (connecting, sending or reading), so the server's listen
backlog (511) never overflows and no SYN waits a second for its
retransmission. Each connection sends one complete keep-alive GET, reads
the whole response, and is then held without another byte. At the end a
zero-timeout poll over all of them tells which ones the server closed.

Loopback only. Everything is bounded: the count by the caller (checked
against the descriptor limit and the ephemeral port range before any load),
the opening by a deadline."""

import errno
import math
import resource
import select
import socket
import time

from . import markdown
from .net import LOOPBACK

# Connections on their way at once while opening.
OPEN_WINDOW = 128
# Bound of the whole opening phase, seconds.
OPEN_TIMEOUT_S = 30
# The keep-alive timeout every server gets in the idle workload: longer than
# opening + a run + counting, so no idle connection simply times out.
KEEPALIVE_TIMEOUT_S = 60
# Seconds of the keep-alive timeout kept free beyond opening and the run.
KEEPALIVE_MARGIN_S = 10
# Descriptors besides the connections: the harness's own files and pipes,
# a server's listening sockets and logs.
SPARE_DESCRIPTORS = 256
# Ephemeral ports left free besides the idle and active connections.
SPARE_PORTS = 1024
# Event MPMs get room for this many times the connections they must hold.
ASYNC_HEADROOM = 1.5
EVENT_DEFAULT_ASYNC_FACTOR = 2
RESPONSE_LIMIT = 65536
# --limits: what capacity the servers get in the idle workload.
SLOTS_LIMITS = "slots"
DEFAULT_LIMITS = "default"
LIMITS = {
    SLOTS_LIMITS: "--slots request slots and room for every idle connection",
    DEFAULT_LIMITS: "each server's default limits: no capacity directives "
                    "(stock event and bucketed: 16 children x 25 threads, "
                    "AsyncRequestWorkerFactor 2; nginx: worker_connections "
                    "512, its built-in default)",
}

_CLOSED = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR


class IdleError(Exception):
    """The idle connections cannot be had here; the message says why."""


# ---------------------------------------------------------------- pure parts

def required_descriptors(idle, active, slots):
    """RLIMIT_NOFILE every process of the run needs: the harness holds the
    idle connections, and any one server process may hold all of them plus
    the active ones (an nginx worker gets slots + idle connection slots)."""
    return idle + max(active, slots) + SPARE_DESCRIPTORS


def async_factor(idle, slots):
    """The AsyncRequestWorkerFactor that lets event servers with `slots`
    worker threads hold `idle` idle connections plus a connection per
    thread with ASYNC_HEADROOM to spare. Stock event (and bucketed's event
    model) accept in a process while it holds at most ThreadsPerChild +
    idle workers x F connections, so with every worker idle the whole
    server holds (F + 1) x MaxRequestWorkers. Never below event's
    default."""
    needed = ASYNC_HEADROOM * (idle + slots) / slots
    return max(EVENT_DEFAULT_ASYNC_FACTOR, math.ceil(needed) - 1)


def event_capacity(factor, slots):
    """Connections an event server holds with every worker idle."""
    return (factor + 1) * slots


def per_connection_bytes(before, with_idle, count):
    """Memory each idle connection costs the server: the growth from before
    opening them to with them held, over how many were held. None when
    either measurement or the count is missing."""
    if before is None or with_idle is None or not count:
        return None
    return (with_idle - before) / count


def check_counts(idle, active, slots, duration_s, nofile_hard, port_range):
    """Why the idle workload cannot run with these numbers, or None.
    nofile_hard: the hard RLIMIT_NOFILE (resource.RLIM_INFINITY allowed);
    port_range: (first, last) of net.ipv4.ip_local_port_range; idle: the
    most idle connections of the run (the command line refuses counts
    below 0)."""
    needed = required_descriptors(idle, active, slots)
    if nofile_hard != resource.RLIM_INFINITY and needed > nofile_hard:
        return (f"--idle-connections {idle} needs {needed:,} open files per "
                f"process (idle + max(active, slots) + {SPARE_DESCRIPTORS}),"
                f" but the hard limit (RLIMIT_NOFILE, ulimit -Hn) is "
                f"{nofile_hard:,}: raise it or lower --idle-connections "
                f"(at most {nofile_hard - needed + idle:,} here)")
    ports = port_range[1] - port_range[0] + 1
    if idle + active + SPARE_PORTS > ports:
        return (f"--idle-connections {idle} plus {active} active "
                f"connections need more than the {ports:,} ephemeral ports "
                f"of net.ipv4.ip_local_port_range {port_range[0]}-"
                f"{port_range[1]} (keeping {SPARE_PORTS} spare)")
    longest = KEEPALIVE_TIMEOUT_S - OPEN_TIMEOUT_S - KEEPALIVE_MARGIN_S
    if duration_s > longest:
        return (f"--duration {duration_s} is too long for the idle "
                f"workload: the idle connections must outlive opening "
                f"({OPEN_TIMEOUT_S} s at most) and the run within the "
                f"servers' keep-alive timeout of {KEEPALIVE_TIMEOUT_S} s; "
                f"at most {longest}")
    return None


def closed_count(opened, open_at_end):
    """Idle connections the server closed during a run: those held after
    opening that were no longer open at the end."""
    return opened - open_at_end


def local_port_range(path="/proc/sys/net/ipv4/ip_local_port_range"):
    with open(path) as handle:
        first, last = (int(value) for value in handle.read().split())
    return first, last


def raise_nofile_limit(needed):
    """Raises this process's soft RLIMIT_NOFILE to `needed` (never lowers
    it); the servers and wrk, started later, inherit it. Reads it back;
    IdleError when the hard limit is too low or the kernel refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise IdleError(f"the hard RLIMIT_NOFILE is {hard:,}, below the "
                        f"{needed:,} the idle workload needs")
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    except (ValueError, OSError) as error:
        raise IdleError(f"cannot raise RLIMIT_NOFILE to {needed:,}: "
                        f"{error}") from None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise IdleError(f"RLIMIT_NOFILE is {soft:,} after raising it to "
                        f"{needed:,}")
    return soft


def response_state(data):
    """(status, complete) of the bytes received so far for one GET: status
    is None until the head has arrived; complete once the body announced
    by Content-Length is all there. ValueError for what is not HTTP/1.x or
    has no Content-Length (the harness's servers always send one)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > RESPONSE_LIMIT:
            raise ValueError("no end of the response head")
        return None, False
    lines = data[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") \
            or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {lines[0]!r}")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None:
        raise ValueError("response without Content-Length")
    return int(parts[1]), len(data) - end - 4 >= length


# ---------------------------------------------------------------- the holder

class IdleConnections:
    """count keep-alive connections to host:port (default loopback), each
    having sent one GET for path and read its response. open(), then
    count_open() as often as needed, then close() (also on error: use it
    as a context manager)."""

    def __init__(self, port, path, count, host=LOOPBACK):
        self.port = port
        self.host = host
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                        f"\r\n").encode("ascii")
        self.count = count
        self.held = {}           # fd -> socket, answered and now idle
        self.watch = select.epoll()
        self.failures = {}       # reason -> how many
        self.began = None        # time.monotonic() when opening began
        self.open_s = None

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()

    def _fail(self, reason):
        self.failures[reason] = self.failures.get(reason, 0) + 1

    def _start_one(self, poller, pending):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((self.host, self.port))
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self._fail(f"connect: {errno.errorcode.get(code, code)}")
            return
        pending[sock.fileno()] = [sock, False, b""]   # socket, sent, data
        poller.register(sock.fileno(), select.EPOLLOUT)

    def _step(self, poller, pending, fd):
        """Moves one pending connection on: connected, request sent,
        response read; once answered it is held (or failed and closed)."""
        entry = pending[fd]
        sock = entry[0]
        try:
            if not entry[1]:
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise OSError(code, f"connect: "
                                        f"{errno.errorcode.get(code, code)}")
                # A few dozen bytes always fit an empty send buffer.
                if sock.send(self.request) != len(self.request):
                    raise OSError(errno.EIO, "short send")
                entry[1] = True
                poller.modify(fd, select.EPOLLIN)
                return
            chunk = sock.recv(4096)
            if not chunk:
                raise OSError(errno.ECONNRESET, "closed before the response")
            entry[2] += chunk
            status, complete = response_state(entry[2])
            if not complete:
                return
            if status != 200:
                raise OSError(errno.EPROTO, f"HTTP {status}")
        except (OSError, ValueError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            self._fail(reason)
            poller.unregister(fd)
            del pending[fd]
            sock.close()
            return
        poller.unregister(fd)
        del pending[fd]
        self.held[fd] = sock
        self.watch.register(fd, select.EPOLLIN | select.EPOLLRDHUP)

    def open(self, timeout_s=OPEN_TIMEOUT_S):
        """Opens the connections; returns how many are held. Connections
        not answered by the deadline are closed and counted as failures."""
        self.began = began = time.monotonic()
        deadline = began + timeout_s
        poller = select.epoll()
        pending = {}
        started = 0
        try:
            while started < self.count or pending:
                while started < self.count and len(pending) < OPEN_WINDOW:
                    self._start_one(poller, pending)
                    started += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for fd, _events in poller.poll(min(left, 1.0)):
                    self._step(poller, pending, fd)
        finally:
            for sock, _sent, _data in pending.values():
                self._fail("no response before the deadline")
                sock.close()
            poller.close()
        self.open_s = time.monotonic() - began
        return len(self.held)

    def held_s(self):
        """Seconds since opening began: how long the first connection has
        been idle, at most (compare with the keep-alive timeout)."""
        return time.monotonic() - self.began

    def count_open(self):
        """How many held connections the server has not closed (no FIN, no
        reset, no error on them): a zero-timeout poll, no bytes sent."""
        closed = 0
        events = self.watch.poll(0, max(1, len(self.held)))
        for fd, mask in events:
            if mask & _CLOSED:
                closed += 1
                continue
            try:
                data = self.held[fd].recv(1, socket.MSG_PEEK
                                          | socket.MSG_DONTWAIT)
            except OSError:
                closed += 1
                continue
            if not data:
                closed += 1
        return len(self.held) - closed

    def close(self):
        for sock in self.held.values():
            sock.close()
        self.held = {}
        self.watch.close()


def headline(points, options):
    """The idle workload's figure for the results tables: the event model's
    req/s with the most idle connections against its own without them
    (same rounds), at the first --limits; stock event's req/s beside."""
    held = [p for p in points if p.get("idle") and p["idle_connections"]
            and p["limits"] == options["limits"][0]]
    if not held:
        return "no run with idle connections"
    most = max(p["idle_connections"] for p in held)
    by_server = {p["server"]: p for p in held
                 if p["idle_connections"] == most}
    parts = [f"{most:,} idle, {options['limits'][0]} limits"]
    ours = by_server.get("bucketed-event")
    if ours:
        parts.append(f"event model "
                     f"{markdown.ratio(ours['idle'].get('vs_no_idle'))} "
                     f"its own req/s without them")
    stock = by_server.get("event")
    if stock:
        rps = stock["rps"]["median"]
        parts.append("stock event " + (f"{rps:,.0f} req/s" if rps
                                       else "answers nothing"))
    return "; ".join(parts)
