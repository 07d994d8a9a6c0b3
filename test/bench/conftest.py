# SPDX-License-Identifier: Apache-2.0
"""Shared setup of the bench tests: where the repository and the build are,
raw run records for the summary's tests, and a loopback web server.

BUCKETED_TOP: the source tree (default: two levels above this file).
BUCKETED_BUILD: where `make` left its artifacts (default: BUCKETED_TOP)."""
import http.server
import os
import threading

import pytest

from bucketbench import net, report

TOP = os.path.abspath(os.environ.get(
    "BUCKETED_TOP", os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.path.abspath(os.environ.get("BUCKETED_BUILD", TOP))


@pytest.fixture
def top():
    return TOP


@pytest.fixture
def build():
    return BUILD


def _run_record(server, round_no, rps, ok=True, workload="w1",
                concurrency=50):
    """A raw run record with just the fields the summary reads."""
    record = {"kernel_level": "native", "workload": workload,
              "concurrency": concurrency, "server": server, "label": server,
              "round": round_no, "ok": ok, "error": None if ok else "boom",
              "error_log_tail": None, "restarted": False}
    if ok:
        record.update({
            "rps": rps, "requests": int(rps), "success": int(rps),
            "errors": dict.fromkeys(report.ERROR_KINDS, 1),
            "latency_ms": dict.fromkeys(report.LATENCY_KEYS, rps / 1000),
            "server_cpu_s": 1.0, "client_cpu_s": 0.5, "other_cpu_s": 0.0,
            "server_pss_bytes": 2 ** 20, "server_processes": 3,
            "buckets": None})
    return record


@pytest.fixture
def run_record():
    """Makes raw run records: run_record(server, round, rps, ok=True,
    workload="w1", concurrency=50)."""
    return _run_record


@pytest.fixture
def web_server():
    """A loopback HTTP server in a thread: /missing answers 404, any other
    path 200. Yields (port, (path, Connection header) of each request)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Connection")))
            code, body = (404, b"nothing here\n") \
                if self.path == "/missing" else (200, b"hello\n")
            try:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass        # wrk hung up at the end of its run

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((net.LOOPBACK, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()
    thread.join(10)
