# SPDX-License-Identifier: Apache-2.0
"""Every number of idle keep-alive connections below MaxRequestWorkers
(issue 25's acceptance): for each server and limit, k = 0 .. limit - 1
connections that made one request each and stay open (KeepAliveTimeout
KEEPALIVE_S, so none expires during a point), then sequential
new-connection probes. Stock prefork's one accept queue gives every probe
to its one free child at k = limit - 1; whether bucketed's buckets do the
same, at BucketCount 2 and 4, is what this shows.

Unlike the near-limit workloads (limit.py), whose clients come back every
second, these connections stay idle: a prefork child holding one waits
for its KeepAliveTimeout unless the MPM makes it give the connection up."""

import dataclasses
import socket
import time

from . import configs, faults
from .net import LOOPBACK
from .server import Server

KEEPALIVE_S = 30
PROBES = 20
# The limits swept: MaxRequestWorkers, or None for the MPM's default.
LIMITS = (7, 20, None)
# Up to this limit every k is run; above it (the MPM's default) 0, 1,
# these fractions of the limit, and the limit - 2 and - 1.
EVERY_COUNT_UP_TO = 20
SPREAD_FRACTIONS = (0.25, 0.5, 0.75)
# How long one idle connection may take to get its first answer (a new
# prefork child may have to start for it).
OPEN_TIMEOUT_S = 20
MPM_DEFAULT_LIMIT = {"prefork": 256, "event": 400}


def threaded(spec):
    return spec.mpm == "event" or spec.child_model == "event"


def default_limit(spec):
    return MPM_DEFAULT_LIMIT["event" if threaded(spec) else "prefork"]


def limit_directives(spec, limit, buckets):
    """What sets the limit (None: the MPM's default) and bucketed's
    BucketCount. Threaded servers get one thread per child at a set limit,
    so that limit is also their children."""
    directives = [f"KeepAliveTimeout {KEEPALIVE_S}"]
    if spec.mpm == "bucketed":
        directives.append(f"BucketCount {buckets}")
    if limit is None:
        return directives
    directives.append(f"MaxRequestWorkers {limit}")
    directives.append(f"ServerLimit {limit}")
    if threaded(spec):
        directives += ["ThreadLimit 1", "ThreadsPerChild 1",
                       f"StartServers {max(buckets, 2)}",
                       "MinSpareThreads 1", f"MaxSpareThreads {limit}"]
    return directives


def idle_counts(limit):
    """The k of one limit: every one below it, or a spread of them."""
    if limit <= EVERY_COUNT_UP_TO:
        return list(range(limit))
    return sorted({0, 1, limit - 2, limit - 1}
                  | {int(f * limit) for f in SPREAD_FRACTIONS})


class SweepServer(Server):
    """A Server at one limit: the MPM's defaults otherwise."""

    def __init__(self, *args, sweep_directives=(), **kwargs):
        self.sweep_directives = list(sweep_directives)
        super().__init__(*args, **kwargs)

    def _default_limits(self):
        return True

    def _directives(self):
        kept = [d for d in self.spec.directives
                if not d.startswith("BucketCount ")]
        return kept + self.sweep_directives


def open_idle(port, count):
    """Up to count keep-alive connections, each answered once: (sockets,
    the slowest answer in s, what stopped the opening or None). A
    connection not answered within OPEN_TIMEOUT_S ends the opening: the
    server holds no more."""
    request = (f"GET /{configs.DOC_NAME} HTTP/1.1\r\nHost: localhost\r\n"
               f"\r\n").encode()
    held, slowest = [], 0.0
    for _ in range(count):
        began = time.monotonic()
        try:
            s = socket.create_connection((LOOPBACK, port),
                                         timeout=OPEN_TIMEOUT_S)
        except OSError as error:
            return held, slowest, repr(error)
        try:
            answered = _read_response_after(s, request)
        except OSError as error:
            answered, failure = False, repr(error)
        else:
            failure = "closed or not 200"
        if not answered:
            s.close()
            return held, slowest, failure
        held.append(s)
        slowest = max(slowest, time.monotonic() - began)
    return held, slowest, None


def _read_response_after(s, request):
    """Sends request and reads one response with a Content-Length body;
    whether it was 200."""
    s.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return False
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            return False
        body += chunk
    return head.startswith(b"HTTP/1.1 200")


def closed_by_server(held):
    """How many of the held connections the server has closed."""
    closed = 0
    for s in held:
        s.setblocking(False)
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def close_all(held):
    for s in held:
        s.close()


def point(port, k):
    """One k: a dict for the record. Probes run also when fewer than k
    connections could be opened (the record says how many were)."""
    held, slowest_open, open_failure = open_idle(port, k)
    try:
        probes = faults.Probes(port)
        for _ in range(PROBES):
            probes.one()
        closed = closed_by_server(held)
    finally:
        close_all(held)
    result = probes.result()
    return {"idle": k, "idle_opened": len(held),
            "open_failure": open_failure,
            "open_max_s": round(slowest_open, 3),
            "probes": result["probes"], "slow": result["slow"],
            "timeouts": result["timeouts"], "errors": result["errors"],
            "error_samples": result["error_samples"],
            "max_ms": result["latency_ms"]["max"],
            "idle_closed": closed}


@dataclasses.dataclass
class Config:
    spec: object          # catalog ServerSpec
    limit: object         # MaxRequestWorkers, None: the MPM's default
    buckets: int          # bucketed's BucketCount (others: 1)

    @property
    def label(self):
        limit = self.limit or f"default ({default_limit(self.spec)})"
        text = f"{self.spec.name}, MaxRequestWorkers {limit}"
        return text + (f", BucketCount {self.buckets}"
                       if self.spec.mpm == "bucketed" else "")


def configs_for(specs, limits=LIMITS, bucket_counts=(2, 4)):
    """Every (server, limit, bucket count) to sweep."""
    return [Config(spec, limit, buckets)
            for limit in limits for spec in specs
            for buckets in (bucket_counts if spec.mpm == "bucketed"
                            else (1,))]


def sweep(server, config, counts=None):
    """Every k of config against a started server: a list of point dicts."""
    limit = config.limit or default_limit(config.spec)
    return [point(server.ports[0], k)
            for k in (counts if counts is not None else idle_counts(limit))]


def summary(config, points):
    """One line for a config's points."""
    probes = sum(p["probes"] for p in points)
    slow = [p["idle"] for p in points if p["slow"] or p["timeouts"]]
    short = [p for p in points if p["open_failure"]]
    return (f"{config.label}: {len(points)} idle counts, {probes} probes, "
            f"over {faults.SLOW_PROBE_S:g} s: "
            f"{sum(p['slow'] for p in points)} (at idle "
            f"{', '.join(map(str, slow)) or '-'}), timeouts "
            f"{sum(p['timeouts'] for p in points)}, errors "
            f"{sum(p['errors'] for p in points)}, slowest probe "
            f"{max(p['max_ms'] for p in points):.1f} ms, idle connections "
            f"closed {sum(p['idle_closed'] for p in points)}"
            + (f", could not hold {short[0]['idle']} idle connections "
               f"({short[0]['idle_opened']} answered; "
               f"{short[0]['open_failure']})" if short else ""))
