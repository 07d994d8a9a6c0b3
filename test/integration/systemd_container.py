# SPDX-License-Identifier: Apache-2.0
"""Real systemd for the shipped units (dist/systemd): a Debian 12 container
booted with systemd-nspawn, Debian's apache2 inside at the host's version,
the bucketed modules and the units copied in, and a scenario that runs
there as a systemd service and writes what it measured to a JSON file.

Host side (test_systemd_units.py): rootfs() builds the container's tree
once with debootstrap and apt from the mirror apt already uses, and keeps it
under /var/cache/bucketed/systemd-container (65-90 s to build, 530 MB;
rebuilt only when the host's apache2 version or this file's SCHEMA
changes). run() boots it with a private network (loopback only), a
throwaway overlay over the cached tree, the staged files read-only at
/bucketed and a results directory at /results.

Inside, systemd_scenario.py runs the operator's path as a systemd service
and powers the container off when done."""

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# Bump when the tree built below changes in any way.
SCHEMA = 2
CACHE = Path(os.environ.get("BUCKETED_SYSTEMD_CACHE",
                            "/var/cache/bucketed/systemd-container"))
SUITE = "bookworm"
APACHE_PACKAGES = ("apache2", "apache2-bin", "apache2-data", "apache2-utils")
# python3 runs the scenario; iproute2 (ss) and curl help whoever debugs.
EXTRA_PACKAGES = ("python3", "iproute2", "procps", "curl")
BUILD_TIMEOUT = 900
SCENARIO_UNIT = "bucketed-scenario.service"


# ---------------------------------------------------------------- host side

def _log(message):
    print(f"systemd-container: {message}", file=sys.stderr, flush=True)


def mirror():
    """The Debian archive apt is configured with (deb822 sources first, then
    sources.list): debootstrap fetches from the same place."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for stanza in sources.read_text().split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith("#"):
                    key, value = line.split(":", 1)
                    fields[key.strip()] = value.strip()
            suites = fields.get("Suites", "").split()
            if SUITE in suites and fields.get("URIs"):
                return fields["URIs"].split()[0]
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            words = line.split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                return [w for w in words[1:] if not w.startswith("[")][0]
    return "http://deb.debian.org/debian"


def host_version(package):
    return subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], check=True,
        capture_output=True, text=True).stdout.strip()


def _scenario_unit_text():
    return f"""# SPDX-License-Identifier: Apache-2.0
# Runs the test scenario once the container has booted, then powers off.
[Unit]
Description=bucketed systemd units scenario
After=multi-user.target
ConditionPathExists=/bucketed/systemd_scenario.py
# The host waits for the container to power off: it does when done.
SuccessAction=poweroff
FailureAction=poweroff

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /bucketed/systemd_scenario.py /bucketed /results
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
"""


def _key():
    versions = ",".join(f"{p}={host_version(p)}" for p in APACHE_PACKAGES)
    text = f"{SCHEMA}|{SUITE}|{versions}|{','.join(EXTRA_PACKAGES)}|" \
           f"{_scenario_unit_text()}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _nspawn_base(tree):
    # --register=no --keep-unit: no machined, no system bus (systemd is not
    # PID 1 on the host); the container's processes stay in our cgroup.
    return ["systemd-nspawn", "-D", str(tree), "--register=no",
            "--keep-unit", "--quiet"]


def _build(tree, log):
    url = mirror()
    log(f"debootstrap {SUITE} from {url} into {tree}")
    subprocess.run(["debootstrap", "--variant=minbase",
                    "--include=systemd,systemd-sysv", SUITE, str(tree), url],
                   check=True, timeout=BUILD_TIMEOUT,
                   stdout=subprocess.DEVNULL)
    # The host's sources (security updates included), so apache2 can be
    # installed at exactly the host's version: the modules were built
    # against it.
    apt_dir = tree / "etc/apt"
    (apt_dir / "sources.list").unlink(missing_ok=True)
    for src in Path("/etc/apt/sources.list.d").glob("*.sources"):
        shutil.copy(src, apt_dir / "sources.list.d" / src.name)
    if Path("/etc/apt/sources.list").exists():
        shutil.copy("/etc/apt/sources.list", apt_dir / "sources.list")
    # Nothing may start a service while the tree is built: the build runs
    # on the host's network, and port 80 there is not ours.
    policy = tree / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    pins = [f"{p}={host_version(p)}" for p in APACHE_PACKAGES]
    script = ("set -e; export DEBIAN_FRONTEND=noninteractive; "
              "apt-get update -qq; "
              "apt-get install -y -qq --no-install-recommends "
              "-o APT::Keep-Downloaded-Packages=true "
              + " ".join(pins + list(EXTRA_PACKAGES)))
    subprocess.run(_nspawn_base(tree) + ["/bin/sh", "-c", script],
                   check=True, timeout=BUILD_TIMEOUT,
                   stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    policy.unlink()
    (tree / "etc/hostname").write_text("bucketed-ct\n")
    hosts = tree / "etc/hosts"
    hosts.write_text("127.0.0.1 localhost bucketed-ct\n"
                     "::1 localhost ip6-localhost ip6-loopback\n")
    unit = tree / "etc/systemd/system" / SCENARIO_UNIT
    unit.write_text(_scenario_unit_text())
    wants = tree / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / SCENARIO_UNIT).symlink_to(f"/etc/systemd/system/{SCENARIO_UNIT}")
    # Only root on a console nobody attaches to; no getty to wait for.
    subprocess.run(["chroot", str(tree), "systemctl", "mask",
                    "console-getty.service", "getty@.service"],
                   check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def rootfs(log=_log):
    """The cached container tree, built first if missing or stale; older
    trees are removed so the cache holds one."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tree = CACHE / f"rootfs-{_key()}"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tree / ".complete").exists():
            started = time.monotonic()
            partial = CACHE / f"partial-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            try:
                _build(partial, log)
                (partial / ".complete").write_text(time.ctime() + "\n")
                shutil.rmtree(tree, ignore_errors=True)
                partial.rename(tree)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
            log(f"built {tree} in {time.monotonic() - started:.0f} s")
        for old in CACHE.iterdir():
            if old.is_dir() and old != tree and \
                    old.name.startswith(("rootfs-", "partial-")):
                shutil.rmtree(old, ignore_errors=True)
    return tree


def stage(directory, top, build):
    """What the container gets at /bucketed: a snapshot of the modules (the
    build directory may be rebuilt meanwhile), the units, the Debian
    module files and this script."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("mod_mpm_bucketed.so", "mod_bucketed_status.so"):
        shutil.copy(Path(build) / name, directory / name)
    for name in ("apache2-foreground", "bucketed-socket-units",
                 "bucketed-socket.conf"):
        shutil.copy(Path(top) / "dist/systemd" / name, directory / name)
    for name in ("mpm_bucketed.load.in", "mpm_bucketed.conf"):
        shutil.copy(Path(top) / "dist/debian" / name, directory / name)
    shutil.copy(Path(__file__).with_name("systemd_scenario.py"),
                directory / "systemd_scenario.py")
    return directory


# nspawn's default seccomp filter refuses bpf(2) even to root with
# CAP_SYS_ADMIN; on a host root may call it, and bucketed needs it for the
# per-group program that moves a closing duplicate's queue to the socket
# systemd holds (without it, what is queued there at a stop is reset).
HOST_LIKE = ("--system-call-filter=bpf",)


def run(tree, staged, results, timeout, extra=HOST_LIKE, log=_log):
    """Boots the container and waits for it to power off (the scenario does
    it when done); returns nspawn's exit status and the console text. On
    timeout the container is asked to power off, then killed. extra: more
    nspawn options (HOST_LIKE by default; () shows a container without
    bpf(2))."""
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    console = results / "console.txt"
    # The guest's whole journal, kept for whoever reads a failure:
    # journalctl -D RESULTS/journal.
    (results / "journal").mkdir(exist_ok=True)
    command = _nspawn_base(tree) + [
        "--boot", "--private-network", "--volatile=overlay",
        "--console=pipe", f"--bind-ro={staged}:/bucketed",
        f"--bind={results}:/results",
        f"--bind={results / 'journal'}:/var/log/journal", *extra]
    log("booting: " + " ".join(command))
    with open(console, "wb") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log(f"no power-off after {timeout} s: stopping the container")
            # nspawn turns SIGTERM into an orderly shutdown of the guest.
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
    return rc, console.read_text(errors="replace")
