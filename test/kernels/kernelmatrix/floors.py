# SPDX-License-Identifier: Apache-2.0
"""Emulated kernel floors on this machine's kernel: kprobe (built
dynamic, so that LD_PRELOAD applies) under bench/noreuseport.so with
BUCKETED_SHIM_KERNEL set, in a network namespace of its own (kprobe sets
tcp_migrate_req, which is per namespace: the machine's stays untouched)."""
import os
import platform
import shutil
import subprocess

from .initramfs import CFLAGS, GUEST_DIR
from .report import parse_report

# (BUCKETED_SHIM_KERNEL, what it emulates); None: the kernel as it is.
FLOORS = [
    ("3.8", "before 3.9"),
    ("4.4", "before 4.5"),
    ("4.18", "before 4.19"),
    ("5.13", "before 5.14"),
    (None, f"this machine's kernel, {platform.release()}"),
]


class FloorError(Exception):
    pass


def probe_floors(shim, scratch):
    """{title: Parsed} of kprobe at each floor."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        raise FloorError("needs root and unshare(1) for a private network "
                         "namespace")
    kprobe = os.path.join(scratch, "kprobe-dynamic")
    done = subprocess.run([shutil.which("cc") or "gcc", *CFLAGS, "-o", kprobe,
                           os.path.join(GUEST_DIR, "kprobe.c")],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise FloorError(f"compiling kprobe: {done.stderr}")
    results = {}
    for version, what in FLOORS:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        if version is not None:
            env.update(LD_PRELOAD=shim, BUCKETED_SHIM_KERNEL=version)
        title = f"shim {version} ({what})" if version else what
        done = subprocess.run(
            ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0"',
             kprobe], env=env, capture_output=True, text=True, timeout=120)
        results[title] = parse_report(done.stdout)
        if done.returncode != 0:
            results[title].problems.append(
                f"kprobe exited {done.returncode}: {done.stderr.strip()}")
    return results
