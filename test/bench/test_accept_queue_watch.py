# SPDX-License-Identifier: Apache-2.0
"""bench/accept-queue-watch.py against a real listener on loopback: a queue
held non-empty for a known time is one episode about that long; a listener
whose connections are accepted at once is none; a port outside the range
is not watched."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

from bucketbench.net import wait_until

HOLD_S = 1.0
RESULT = re.compile(r"^episodes=(\d+) total_s=([\d.]+) max_s=([\d.]+) "
                    r"max_gap_s=([\d.]+)$")


def _watch(top, low, high):
    return subprocess.Popen(
        [sys.executable, os.path.join(top, "bench", "accept-queue-watch.py"),
         str(low), str(high)], stdout=subprocess.PIPE, text=True)


def _result(watcher):
    watcher.send_signal(signal.SIGINT)
    out, _ = watcher.communicate(timeout=30)
    match = RESULT.match(out.strip())
    assert match, out
    return (int(match.group(1)), float(match.group(3)),
            float(match.group(4)))


def _queued(listener):
    """The listener's accept queue length, as `ss` reports it."""
    port = listener.getsockname()[1]
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[1]) if out.strip() else -1


def test_a_queue_held_for_a_second_is_one_episode(top):
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener, \
            socket.create_server(("127.0.0.1", 0), backlog=16) as other:
        port = listener.getsockname()[1]
        watcher = _watch(top, port, port)
        try:
            clients = [socket.create_connection(("127.0.0.1", port))
                       for _ in range(2)]
            # The other listener is outside the range: its queue is no
            # episode.
            outside = socket.create_connection(("127.0.0.1",
                                                other.getsockname()[1]))
            wait_until(lambda: _queued(listener) == 2, 10,
                       what="2 connections queued")
            queued_at = time.monotonic()
            time.sleep(HOLD_S)   # the stimulus: the queue stays this long
            accepted = [listener.accept()[0] for _ in clients]
            held = time.monotonic() - queued_at
            wait_until(lambda: _queued(listener) == 0, 10,
                       what="the queue empty")
            episodes, longest, gap = _result(watcher)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()
        for s in clients + accepted + [outside]:
            s.close()
    assert episodes == 1
    # Sampled, and the watcher's first sample may come after the queue
    # filled: about the hold, never longer than it by more than a gap.
    assert HOLD_S / 2 <= longest <= held + gap + 0.1, (held, gap, longest)


def test_a_queue_accepted_at_once_is_no_episode(top):
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        port = listener.getsockname()[1]
        watcher = _watch(top, port, port)
        try:
            # Half a second of connections, each accepted at once, while
            # the watcher samples.
            until = time.monotonic() + 0.5
            for _ in range(10000):
                if time.monotonic() > until:
                    break
                with socket.create_connection(("127.0.0.1", port)):
                    listener.accept()[0].close()
            episodes, longest, _ = _result(watcher)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()
    assert (episodes, longest) == (0, 0.0)
