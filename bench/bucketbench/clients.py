# SPDX-License-Identifier: Apache-2.0
"""Clients that count what they lose, shared by the integration tests
(test/integration: Load, KeepAliveLoad) and the harness's restart and soak
workloads (restart.py, soak.py): threads making requests until told to
stop, each failure recorded with the time of day, so that it can be found
among an error log's lines."""

import http.client
import itertools
import random
import select
import threading
import time

from .net import HTTP_TIMEOUT, LOOPBACK


def wall_clock():
    """The time of day as httpd's error log writes it (HH:MM:SS.micro)."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) \
        + f".{int(now % 1 * 1e6):06d}"


class LoadResult:
    def __init__(self):
        self.ok = 0
        self.failed = 0
        self.errors = []          # the first few failures, for the report
        self.lock = threading.Lock()

    def record(self, error=None):
        with self.lock:
            if error is None:
                self.ok += 1
            else:
                self.failed += 1
                if len(self.errors) < 10:
                    self.errors.append(error)

    @property
    def total(self):
        return self.ok + self.failed

    def __repr__(self):
        return (f"LoadResult(ok={self.ok}, failed={self.failed}, "
                f"errors={self.errors})")


class ClientThreads:
    """`threads` threads, each running _work(deadline) over `ports`, until
    `count` requests were made, stop() is called (after at least `minimum`
    requests), or `seconds` pass; what they made is in `result`."""

    def __init__(self, ports, count, threads=8, seconds=60, minimum=0):
        self.ports = list(ports)
        self.count = count
        self.threads = threads
        self.seconds = seconds
        self.minimum = minimum
        self.result = LoadResult()
        self._tickets = itertools.count()
        self._stop = threading.Event()
        self._workers = []

    def _work(self, deadline):
        raise NotImplementedError

    def start(self):
        deadline = time.monotonic() + self.seconds
        for _ in range(self.threads):
            t = threading.Thread(target=self._work, args=(deadline,),
                                 daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def done(self):
        return self.result.total

    def stop(self):
        self._stop.set()
        return self.join()

    def join(self):
        for t in self._workers:
            t.join(self.seconds + HTTP_TIMEOUT + 5)
        return self.result

    def run(self):
        return self.start().join()


class KeepAliveClients(ClientThreads):
    """Clients, each on one persistent connection, making requests over
    and over until stop() (after at least `minimum` requests in all): a
    GET of get = (path, expected body), answered 200 with that body, or,
    with `post` = (path, body, answer), half of them (at random) a POST of
    body to path, answered 200 with `answer`. Each client pauses up to
    `pause` seconds (at random) between its requests.

    A client reuses its connection as curl does: first a poll that does not
    wait; a readable connection (the server closed it while it was idle, as
    it may at any time, RFC 9112 9.6) is closed and a new one opened, which
    is no failure (counted in `reopened`). Any error once the request is
    being sent is a failure, on new and reused connections alike: a GET
    that failed on a reused connection is made again on a new one (counted
    in `retries` too), a POST never is (RFC 9110 9.2.2; counted in
    `posts_lost`; every POST sent in `posts`). Responses that closed the
    connection ("Connection: close", as a stopping server says) are counted
    in `told_to_close`. Every failure is also in `failures`: (monotonic
    time the request was begun, the time it failed, "GET" or "POST");
    with slow_s, every answered request that took longer is in `slow`,
    the same way (a client with a shorter timeout, as wrk's, would have
    failed it)."""

    # The GETs' extra headers, and what their failures are recorded as.
    GET_HEADERS = {}
    GET_LABEL = "GET"

    def __init__(self, ports, get, threads=4, seconds=90, minimum=0,
                 pause=0.0, post=None, slow_s=None):
        super().__init__(ports, count=10 ** 9, threads=threads,
                         seconds=seconds, minimum=minimum)
        self.get = get
        self.pause = pause
        self.post = post
        self.slow_s = slow_s
        self.slow = []
        self.reopened = 0
        self.told_to_close = 0
        self.retries = 0
        self.posts = 0
        self.posts_lost = 0
        self.failures = []
        self._lock = threading.Lock()

    def counts(self):
        """What the clients made and lost, by kind."""
        return {"requests": self.result.total, "failed": self.result.failed,
                "gets": self.result.total - self.posts,
                "gets_failed": self.result.failed - self.posts_lost,
                "posts": self.posts, "posts_lost": self.posts_lost,
                "retries": self.retries, "reopened": self.reopened,
                "told_to_close": self.told_to_close,
                "first_errors": list(self.result.errors)}

    def _count(self, name):
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _request(self, conn, post):
        if post:
            path, body, answer = self.post
            self._count("posts")
            conn.request("POST", path, body=body,
                         headers={"Content-Type": "application/octet-stream"})
        else:
            path, answer = self.get
            conn.request("GET", path, headers=self.GET_HEADERS)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200 or body != answer:
            return f"status {resp.status}, body {body[:80]!r}"
        return None

    @staticmethod
    def _closed_while_idle(conn):
        """Whether the server has closed (or reset) an idle connection: it
        is readable before we sent anything."""
        poller = select.poll()
        poller.register(conn.sock, select.POLLIN)
        return bool(poller.poll(0))

    def _work(self, deadline):
        port = self.ports[next(self._tickets) % len(self.ports)]
        rng = random.Random()
        conn = None
        retry = post = False
        while time.monotonic() < deadline and not (
                self._stop.is_set() and self.result.total >= self.minimum):
            if conn is None:
                conn = http.client.HTTPConnection(LOOPBACK, port,
                                                  timeout=HTTP_TIMEOUT)
            # http.client drops the socket after "Connection: close".
            reused = conn.sock is not None
            if reused and self._closed_while_idle(conn):
                conn.close()
                self._count("reopened")
                reused = False
            if not retry:
                post = self.post is not None and rng.random() < 0.5
            begun = time.monotonic()
            try:
                error = self._request(conn, post)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = None
                error = repr(e)
            ended = time.monotonic()
            label = "POST" if post else self.GET_LABEL
            if error is None and self.slow_s and ended - begun > self.slow_s:
                with self._lock:
                    self.slow.append((begun, ended, label))
            if error is not None:
                with self._lock:
                    self.failures.append((begun, ended, label))
                error = (f"{wall_clock()} port {port}: {label} on a "
                         f"{'reused' if reused else 'new'} connection: "
                         f"{error}")
            self.result.record(error)
            if conn is not None and conn.sock is None:
                self._count("told_to_close")
            if error is not None and post:
                self._count("posts_lost")
            retry = (error is not None and not post and reused
                     and conn is None)
            if retry:
                self._count("retries")
                continue
            if self.pause:
                self._stop.wait(rng.uniform(0, self.pause))
        if conn is not None:
            conn.close()


class NewConnectionClients(KeepAliveClients):
    """KeepAliveClients whose every GET says "Connection: close", so that
    each is made on a new connection, as wrk's Connection: close load
    makes them, but counted, and each failure timed (`failures`, recorded
    as "CLOSE"): nothing is retried (and `told_to_close` counts every
    request)."""

    GET_HEADERS = {"Connection": "close"}
    GET_LABEL = "CLOSE"

    def __init__(self, ports, get, threads=4, seconds=90, slow_s=None):
        super().__init__(ports, get, threads=threads, seconds=seconds,
                         slow_s=slow_s)
