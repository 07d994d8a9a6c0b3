# SPDX-License-Identifier: Apache-2.0
"""Booting one guest under qemu, bounded in time: the guest's console and
its report port go to files; a guest still running at the deadline is
killed (by its pid) and counts as timed out. No network device: the guest
has only its own loopback."""
import os
import shutil
import subprocess
import time

from .report import GuestRun, parse_report

ACCEL = "tcg,thread=single"    # multi-threaded TCG was flaky with 6.12
# Without cmpxchg16b: under qemu 7.2's TCG, Debian's 6.12 oopsed in SLUB's
# cmpxchg16b path (double faults in __kmalloc) in 11 of 20 boots, and in
# none of 18 with it masked. No kernel here needs it (x86-64 baseline).
CPU = "qemu64,-cx16"
MEMORY_MB = 1024
CPUS = 2
LOGS = ("console.txt", "report.txt", "qemu.txt")


def qemu_binary():
    return shutil.which("qemu-system-x86_64")


def qemu_version():
    qemu = qemu_binary()
    if qemu is None:
        return "not installed"
    out = subprocess.run([qemu, "--version"], capture_output=True, text=True,
                         timeout=60).stdout
    return out.splitlines()[0] if out else "unknown"


def command(vmlinuz, initrd, console, report, accel=ACCEL):
    return [qemu_binary() or "qemu-system-x86_64",
            "-kernel", vmlinuz, "-initrd", initrd,
            "-append", "console=ttyS0 panic=-1 loglevel=4",
            "-nographic", "-monitor", "none",
            "-serial", f"file:{console}", "-serial", f"file:{report}",
            "-accel", accel, "-cpu", CPU, "-m", str(MEMORY_MB),
            "-smp", str(CPUS),
            "-nic", "none", "-no-reboot"]


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def boot(vmlinuz, initrd, out_dir, timeout, accel=ACCEL):
    """One boot; its console, report and qemu's own output stay in
    out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    console = os.path.join(out_dir, "console.txt")
    report = os.path.join(out_dir, "report.txt")
    for path in (console, report):
        if os.path.exists(path):
            os.unlink(path)
    if qemu_binary() is None:
        return GuestRun("error", detail="qemu-system-x86_64 is not "
                        "installed (Debian package qemu-system-x86)")
    start = time.monotonic()
    with open(os.path.join(out_dir, "qemu.txt"), "w") as qemu_out:
        proc = subprocess.Popen(command(vmlinuz, initrd, console, report,
                                        accel),
                                stdin=subprocess.DEVNULL, stdout=qemu_out,
                                stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=timeout)
            outcome = "exited"
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            code, outcome = None, "timeout"
    return GuestRun(outcome, report=_read(report), console=_read(console),
                    exit_code=code, seconds=time.monotonic() - start,
                    detail=_read(os.path.join(out_dir, "qemu.txt"))[-300:])


def boot_with_retry(vmlinuz, initrd, out_dir, timeout, accel=ACCEL,
                    log=print):
    """boot(), once more if the guest died before its first FEATURE or
    CHECK line (TCG has been seen to lose a boot now and then). The first
    attempt's logs are kept as *-attempt1.txt."""
    run = boot(vmlinuz, initrd, out_dir, timeout, accel)
    parsed = parse_report(run.report)
    if run.outcome != "error" and not parsed.features and not parsed.checks:
        log(f"  the guest stopped before its first check "
            f"({run.outcome}, {run.seconds:.0f} s): booting it again")
        for name in LOGS:
            path = os.path.join(out_dir, name)
            if os.path.exists(path):
                os.replace(path, path.replace(".txt", "-attempt1.txt"))
        first = run
        run = boot(vmlinuz, initrd, out_dir, timeout, accel)
        run.attempts = 2
        run.detail = (f"first attempt: {first.outcome} after "
                      f"{first.seconds:.0f} s; " + run.detail)
    return run
