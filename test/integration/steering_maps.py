# SPDX-License-Identifier: Apache-2.0
"""What the steering programs read, read back with bpftool: BucketSteering
load's array of idle counts per bucket that the parent writes after each
census, and the socket maps every steering program picks from."""
import json
import re
import subprocess
from pathlib import Path

BPFTOOL = "/usr/sbin/bpftool"
PROGRAM_ID = re.compile(r"program id (\d+) on 1 reuseport")


def idle_map_of(server):
    """The id of the array of idle counts of the load program the server
    loaded last (a restart may load another, with an array of its own)."""
    prog_id = PROGRAM_ID.findall(server.error_log())[-1]
    shown = json.loads(subprocess.run(
        [BPFTOOL, "-j", "prog", "show", "id", prog_id], capture_output=True,
        text=True, timeout=30, check=True).stdout)
    for map_id in shown["map_ids"]:
        found = json.loads(subprocess.run(
            [BPFTOOL, "-j", "map", "show", "id", str(map_id)],
            capture_output=True, text=True, timeout=30, check=True).stdout)
        if found["name"] == "bucketed_idle":
            return map_id
    raise AssertionError(f"program {prog_id} has no bucketed_idle map")


def idle_counts(map_id, seen=False):
    """Per bucket, in bucket order: the units the program may still hand
    out (the parent writes the idle units no queued connection claims, the
    program takes one per connection it sends), or (seen) the idle units
    the parent's census saw. Read with bpftool, not over HTTP: a status
    request could itself wait, and would take a unit."""
    dumped = json.loads(subprocess.run(
        [BPFTOOL, "-j", "map", "dump", "id", str(map_id)],
        capture_output=True, text=True, timeout=30, check=True).stdout)
    counts = {}
    for entry in dumped:
        key = int.from_bytes(bytes(int(b, 16) for b in entry["key"]),
                             "little")
        value = bytes(int(b, 16) for b in entry["value"])
        half = value[4:8] if seen else value[0:4]
        counts[key] = int.from_bytes(half, "little", signed=True)
    return [counts[b] for b in sorted(counts)]


def maps_held_by(pid):
    """The ids of the BPF maps a process holds a descriptor of (the
    map_id lines of /proc/PID/fdinfo)."""
    held = set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for entry in fdinfo.iterdir():
        try:
            text = entry.read_text()
        except FileNotFoundError:
            continue
        found = re.search(r"^map_id:\s*(\d+)", text, re.M)
        if found:
            held.add(int(found.group(1)))
    return held


def descriptors_of(pid):
    """How many descriptors a process has open."""
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def map_cookies(map_id):
    """The cookies of the sockets in one socket map; an empty set once the
    map is freed."""
    done = subprocess.run([BPFTOOL, "-j", "map", "dump", "id", str(map_id)],
                          capture_output=True, text=True, timeout=30)
    dumped = json.loads(done.stdout)
    if done.returncode != 0:
        # Freed since it was listed: a server's generation ended.
        assert "No such file or directory" in str(dumped), dumped
        return set()
    return {int.from_bytes(bytes(int(b, 16) for b in entry["value"]),
                           "little")
            for entry in dumped if isinstance(entry.get("value"), list)}


def socket_map_cookies():
    """The cookies of the sockets in every socket map the steering programs
    pick from (bucketed_socks, the machine's: a socket is in one map at
    most), as `ss` prints them (sk:HEX)."""
    shown = json.loads(subprocess.run(
        [BPFTOOL, "-j", "map", "show"], capture_output=True, text=True,
        timeout=30, check=True).stdout)
    cookies = set()
    for found in shown:
        if found.get("name") == "bucketed_socks":
            cookies |= map_cookies(found["id"])
    return cookies


def listening_cookies(port):
    """{inode: cookie} of the sockets listening on a local port."""
    out = subprocess.run(["ss", "-Hltne", f"sport = :{port}"],
                         capture_output=True, text=True, timeout=30,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        inode = re.search(r"\bino:(\d+)", line)
        cookie = re.search(r"\bsk:([0-9a-f]+)", line)
        if inode and cookie:
            found[int(inode.group(1))] = int(cookie.group(1), 16)
    return found
