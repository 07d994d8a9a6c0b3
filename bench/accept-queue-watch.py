#!/usr/bin/python3
"""bench/accept-queue-watch.py: sample the accept queues of the listening TCP sockets on a
range of local ports every 50 ms (`ss -ltn`: for a listener Recv-Q is its accept queue
length) until SIGINT/SIGTERM, then print one line:

    episodes=N total_s=S max_s=M max_gap_s=G

An episode is one socket whose queue stayed non-empty for at least 200 ms (sampled),
the same threshold as bucketed's stall watch (BK00108), so stock prefork, with one accept
queue per Listen address, and bucketed, with one per bucket, are measured the same way.
G is the longest time between two samples: an episode is only as exact as that. (Reading
/proc/net/tcp instead lists every connection too, TIME_WAIT ones included: under a
Connection: close load that took 0.5 s a sample, up to 3.7 s, and episodes looked longer
than they were.)

Usage: accept-queue-watch.py LOW_PORT HIGH_PORT
"""
import signal
import subprocess
import sys
import time

INTERVAL = 0.05
THRESHOLD = 0.2


def queues(low, high):
    """Accept queue length by socket inode, of the listeners on ports low-high."""
    listing = subprocess.run(
        ["ss", "-ltnHe", "( sport >= :%d and sport <= :%d )" % (low, high)],
        capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        fields = line.split()
        inode = next((f for f in fields if f.startswith("ino:")), None)
        if inode is not None:
            found[inode] = int(fields[1])
    return found


def main():
    low, high = int(sys.argv[1]), int(sys.argv[2])
    stop = []
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    since = {}        # socket inode -> time its queue was first seen non-empty
    episodes = []
    last = None
    gap = 0.0
    while not stop:
        now = time.monotonic()
        if last is not None:
            gap = max(gap, now - last)
        last = now
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
    print("episodes=%d total_s=%.1f max_s=%.1f max_gap_s=%.2f"
          % (len(episodes), sum(episodes), max(episodes, default=0.0), gap))


main()
