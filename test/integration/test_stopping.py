# SPDX-License-Identifier: Apache-2.0
"""
Graceful stop (SIGWINCH) under Connection: close load, in both child
models, with two Listen addresses and two buckets (so prefork-model
children wait in epoll on two sockets): the server is gone within seconds,
it serves few requests after the signal (stock httpd stops accepting at
once), and a request in flight when the signal came either gets its
full answer or fails at the connection (reset or refused: it was still in
an accept queue when the last holder of its socket closed it).

Resets of such queued connections are not asserted away: stock httpd has
them too (measured here, 7 graceful stops each under this load: stock
prefork a median of 3 reset requests, stock event 0 with up to 3).

The bounds are loose on purpose (a 2-core CI machine shared with other
work); the stop times themselves belong in the benchmark.
"""
import http.client
import signal
import subprocess
import threading
import time

from httpd_fixture import (CHILD_MODELS, LOOPBACK, STOP_TIMEOUT, Load,
                           connection_refused,
                           http_get, wait_until)

# Generous for CI noise: before the fix the prefork model took 12.6 s.
STOP_BOUND = 10
# Responses completed after the signal: the ones in flight (at most one per
# client thread) and what children accepted before they learnt of the stop.
# Before the fix the prefork model served tens of thousands.
SERVED_AFTER_BOUND = 300
THREADS = 8


class TimedLoad(Load):
    """Load that also keeps, per request, when it started and ended and
    what went wrong (None: answered 200 with the expected body)."""

    def __init__(self, ports, **kwargs):
        super().__init__(ports, count=10 ** 9, **kwargs)
        self.log = []
        self._log_lock = threading.Lock()

    def _one(self, port):
        started = time.monotonic()
        try:
            status, body = http_get(port, self.path)
            error = (None if status == 200 and body == self.body
                     else f"status {status}, body {body[:80]!r}")
        except (OSError, http.client.HTTPException) as e:
            error = e
        ended = time.monotonic()
        with self._log_lock:
            self.log.append((started, ended, error))
        return None if error is None else f"port {port}: {error!r}"


def graceful_stop_under_load(server, threads=THREADS, warm_up=500,
                             give_up=STOP_TIMEOUT + 40):
    """Starts `server`, loads it, sends SIGWINCH, waits for the parent to
    exit (`give_up` seconds at most: then stop_seconds is None and the
    caller's cleanup stops the server). Returns what a test asserts and the
    benchmark reports: seconds from the signal to the parent's exit,
    responses completed after the signal, those of requests started after
    it, and the failures of requests in flight at the signal."""
    server.start()
    load = TimedLoad(server.ports, threads=threads, seconds=120).start()
    try:
        wait_until(lambda: load.done() >= warm_up, 30,
                   what="the load to be under way")
        signalled = time.monotonic()
        server.signal(signal.SIGWINCH)
        try:
            status = server.wait_exit(give_up)
            stop_seconds = time.monotonic() - signalled
        except subprocess.TimeoutExpired:
            status, stop_seconds = None, None
    finally:
        load.stop()
    with load._log_lock:
        log = list(load.log)
    return {
        "exit_status": status,
        "stop_seconds": stop_seconds,
        "served_after": sum(1 for _, ended, error in log
                            if error is None and ended > signalled),
        "started_after_served": sum(1 for started, _, error in log
                                    if error is None and started > signalled),
        "in_flight_failed": [error for started, ended, error in log
                             if error is not None and started <= signalled],
        "served_before": sum(1 for _, ended, error in log
                             if error is None and ended <= signalled),
    }


def test_graceful_stop_under_load_is_quick_and_stops_serving(make_httpd,
                                                             child_model):
    server = make_httpd(listens=2, directives=CHILD_MODELS[child_model]
                        + "BucketCount 2\n")
    outcome = graceful_stop_under_load(server)
    print(f"{child_model}: {outcome}")

    assert outcome["stop_seconds"] is not None, outcome
    assert outcome["stop_seconds"] < STOP_BOUND, outcome
    assert outcome["exit_status"] == 0
    assert outcome["served_after"] < SERVED_AFTER_BOUND, outcome
    assert all(isinstance(error, (ConnectionResetError,
                                  ConnectionRefusedError))
               for error in outcome["in_flight_failed"]), outcome
    for port in server.ports:
        wait_until(lambda: connection_refused(port), 10,
                   what=f"port {port} to close")
    assert not server.leftovers()
    assert "caught SIGWINCH, shutting down gracefully" in server.error_log()


def test_keepalive_client_does_not_hold_a_graceful_stop(make_httpd,
                                                         child_model):
    """A client that never stops sending on its keep-alive connection
    (MaxKeepAliveRequests 0): on a graceful stop its child ends the
    connection after the response in progress and leaves, and the server
    is gone. The connection ends with a response that says Connection:
    close, also when the stop came after the response's headers promised
    keep-alive: the request the client sends next is answered, never met
    by a close or a reset. (A prefork-model child keeps the leave signal
    blocked while it serves: the parent's mark on its slot tells it.)"""
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + "KeepAlive On\nMaxKeepAliveRequests 0\n"
                        "KeepAliveTimeout 30\n")
    server.start()
    port = server.ports[0]
    outcome = {"answers": 0, "closed_by_server": False, "error": None}
    stop = threading.Event()

    def client():
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
        deadline = time.monotonic() + 60
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                conn.request("GET", "/")
                resp = conn.getresponse()
                resp.read()
                outcome["answers"] += 1
                if resp.getheader("Connection", "").lower() == "close":
                    outcome["closed_by_server"] = True
                    return
        except (OSError, http.client.HTTPException) as e:
            outcome["error"] = repr(e)
        finally:
            conn.close()

    worker = threading.Thread(target=client, daemon=True)
    worker.start()
    wait_until(lambda: outcome["answers"] >= 50, 20,
               what="the keep-alive client's first answers")
    server.signal(signal.SIGWINCH)
    try:
        assert server.wait_exit() == 0
    finally:
        stop.set()
        worker.join(15)
    assert outcome["error"] is None, outcome
    assert outcome["closed_by_server"], outcome
