# SPDX-License-Identifier: Apache-2.0
"""The near-the-limit workloads (issue 25): a server at MaxRequestWorkers
LIMIT_WORKERS, with LIMIT_WORKERS - 1 keep-alive clients that each make a
request, pause PAUSE_S (under the server's KeepAliveTimeout, so their
connections stay open) and make the next; meanwhile sequential probes,
each a new connection (faults.Probes), measure what a new client meets.

A prefork-model server then has one child free. Stock prefork's one accept
queue gives the probe to it; bucketed must too, whichever bucket it sits
in (or move it). The threaded models hold the paused clients' connections
without a thread each, so they show what the limit is not.

Servers keep their MPM's defaults apart from the limit: the prefork
models' spare-children defaults, so that capacity follows the load as
an operator's server does; the threaded ones get ThreadsPerChild so that
bucketed's children (one bucket each at least) and stock event's are the
same in number and size. The record says how many children each server
started over the run (a census of the parent's children every
CENSUS_INTERVAL_S), the held clients' failures (no answer or a wrong one)
and how often the server closed a paused client's connection between
requests (allowed: a client reopens it, as browsers do)."""

import http.client
import threading
import time

from . import configs, faults, procfs
from .catalog import LIMIT_BUCKETS, LIMIT_KINDS, LIMIT_WORKERS

# Debian's KeepAliveTimeout, and the clients' pause under it.
KEEPALIVE_S = 5
PAUSE_S = 1.0
CENSUS_INTERVAL_S = 0.05
# How long the held clients may take to make their first request each.
SETTLE_S = 20
CLIENT_TIMEOUT_S = faults.PROBE_TIMEOUT_S


def _threaded(spec):
    return spec.mpm == "event" or spec.child_model == "event"


def server_settings(kind, spec):
    """The limit of workload kind for the server spec describes."""
    buckets = LIMIT_BUCKETS[kind]
    directives = [f"KeepAliveTimeout {KEEPALIVE_S}",
                  f"MaxRequestWorkers {LIMIT_WORKERS}"]
    if _threaded(spec):
        threads = LIMIT_WORKERS // buckets
        directives += [f"ServerLimit {buckets}", f"StartServers {buckets}",
                       f"ThreadLimit {threads}",
                       f"ThreadsPerChild {threads}",
                       f"MinSpareThreads {threads}",
                       f"MaxSpareThreads {LIMIT_WORKERS}"]
    else:
        directives.append(f"ServerLimit {LIMIT_WORKERS}")
    return faults.ServerSettings(directives=directives, bucket_count=buckets)


class HeldClients:
    """count keep-alive clients, a thread each, that request the static
    file, pause PAUSE_S and request it again until stopped."""

    def __init__(self, port, count):
        self.port = port
        self.count = count
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.answered = 0
        self.failures = 0
        self.closed_between = 0
        self.first_done = 0
        self.samples = []
        self.threads = [threading.Thread(target=self._client, daemon=True)
                        for _ in range(count)]

    def _note(self, field, sample=None):
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)
            if sample and len(self.samples) < faults.Probes.SAMPLES:
                self.samples.append(sample)

    def _request(self, connection):
        """One request; True when answered right. A connection the server
        closed before the request was read counts as closed_between (the
        client reopens it), not as a failure."""
        try:
            connection.request("GET", "/" + configs.DOC_NAME)
            response = connection.getresponse()
            body = response.read()
        except (http.client.RemoteDisconnected, BrokenPipeError,
                ConnectionResetError):
            connection.close()
            self._note("closed_between")
            return False
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            self._note("failures", repr(error))
            return False
        if response.status != 200 or body != configs.DOC_BODY:
            self._note("failures", f"HTTP {response.status}")
            return False
        self._note("answered")
        return True

    def _client(self):
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=CLIENT_TIMEOUT_S)
        first = True
        try:
            while not self.stop.is_set():
                if self._request(connection) and first:
                    first = False
                    self._note("first_done")
                self.stop.wait(PAUSE_S)
        finally:
            connection.close()

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def settled(self):
        with self.lock:
            return self.first_done >= self.count

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(CLIENT_TIMEOUT_S + PAUSE_S + 1)

    def result(self):
        with self.lock:
            return {"held": self.count, "held_answered": self.answered,
                    "held_failures": self.failures,
                    "held_closed_between": self.closed_between,
                    "held_error_samples": list(self.samples)}


class ChildCensus:
    """Every child pid of a server seen while it runs: how many children
    the server started (those alive at the start included)."""

    def __init__(self, server):
        self.server = server
        self.seen = set(procfs.children_of(server.pid))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self.stop.wait(CENSUS_INTERVAL_S):
            self.seen.update(procfs.children_of(self.server.pid))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(1)


def measure(kind, ctx):
    """One run: the held clients settle (each answered once, bounded),
    then probes for the fault window; a dict for the run record."""
    server = ctx.server
    port = server.ports[0]
    census = ChildCensus(server)
    probes = faults.Probes(port)
    with census, HeldClients(port, LIMIT_WORKERS - 1) as held:
        deadline = time.monotonic() + SETTLE_S
        while not held.settled() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not held.settled():
            raise faults.FaultError(
                f"{server.spec.name}: {held.first_done} of {held.count} "
                f"keep-alive clients answered within {SETTLE_S} s")
        probes.until(lambda: False, time.monotonic() + ctx.fault_s)
    result = probes.result() | held.result() | {
        "kind": kind, "window_s": ctx.fault_s,
        "max_request_workers": LIMIT_WORKERS,
        "bucket_count": LIMIT_BUCKETS[kind],
        "children_started": len(census.seen)}
    return {"fault": result, "rps": None}


def section(points, options, heading="##",
            title="Near MaxRequestWorkers (issue 25)"):
    """Markdown: one table per kernel level and near-the-limit workload;
    empty without such points."""
    near = [p for p in points if p.get("fault")
            and p["fault"]["kind"] in LIMIT_KINDS]
    if not near:
        return ""
    lines = [
        f"{heading} {title}", "",
        f"Each server at MaxRequestWorkers {LIMIT_WORKERS}, "
        f"KeepAliveTimeout {KEEPALIVE_S} s, its MPM's other defaults "
        f"(threaded models: ThreadsPerChild {LIMIT_WORKERS} / BucketCount, "
        f"as many children as buckets). {LIMIT_WORKERS - 1} keep-alive "
        f"clients request the static file, pause {PAUSE_S:g} s and request "
        f"it again; once each has been answered, sequential probes (a new "
        f"connection each, limited to {faults.PROBE_TIMEOUT_S} s, every "
        f"{faults.PROBE_INTERVAL_S * 1000:.0f} ms or when the previous one "
        f"ends) run for {options.get('fault_s')} s. p50/p99/max are "
        f"medians over the {options['runs']} runs, the worst run's max in "
        f"parentheses; counts are totals, then per run. A held client's "
        f"connection closed by the server between requests is allowed (a "
        f"client reopens it); children started counts every child pid seen "
        f"during the run.", ""]
    return "\n".join(lines + faults.tables(near, options, heading))


def headline(points, options):
    """Near the limit's figure: probes slower than a second (timeouts
    among them)."""
    return faults.probe_headline(
        points, LIMIT_KINDS, lambda s: s["slow"],
        f"probes over {faults.SLOW_PROBE_S:g} s, every workload")
