#!/usr/bin/python3
"""bench/accept-queue-watch.py: sample the accept queues of the listening TCP sockets on a
range of local ports every 50 ms (from /proc/net/tcp{,6}: for a listener rx_queue is its
accept queue length) until SIGINT/SIGTERM, then print one line:

    episodes=N total_s=S max_s=M

An episode is one socket whose queue stayed non-empty for at least 200 ms (sampled),
the same threshold as bucketed's stall watch (BK00108), so stock prefork, with one accept
queue per Listen address, and bucketed, with one per bucket, are measured the same way.

Usage: accept-queue-watch.py LOW_PORT HIGH_PORT
"""
import signal
import sys
import time

INTERVAL = 0.05
THRESHOLD = 0.2


def queues(low, high):
    found = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] != "0A":
                        continue
                    port = int(fields[1].rsplit(":", 1)[1], 16)
                    if low <= port <= high:
                        found[fields[9]] = int(fields[4].split(":")[1], 16)
        except FileNotFoundError:
            pass
    return found


def main():
    low, high = int(sys.argv[1]), int(sys.argv[2])
    stop = []
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    since = {}        # socket inode -> time its queue was first seen non-empty
    episodes = []
    while not stop:
        now = time.monotonic()
        q = queues(low, high)
        for inode, start in list(since.items()):
            if q.get(inode, 0) == 0:
                if now - start >= THRESHOLD:
                    episodes.append(now - start)
                del since[inode]
        for inode, n in q.items():
            if n > 0 and inode not in since:
                since[inode] = now
        time.sleep(INTERVAL)
    now = time.monotonic()
    episodes += [now - s for s in since.values() if now - s >= THRESHOLD]
    print("episodes=%d total_s=%.1f max_s=%.1f"
          % (len(episodes), sum(episodes), max(episodes, default=0.0)))


main()
