# SPDX-License-Identifier: Apache-2.0
"""The binaries and modules the harness drives, and the facts about the
machine that every result is recorded with."""

import glob
import hashlib
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass

from .net import LOOPBACK

BUCKETED_MODULES = ("mod_mpm_bucketed.so", "mod_bucketed_status.so")
PHP_MODULE = "libphp8.2.so"


@dataclass
class Tools:
    httpd: str           # the stock httpd binary (Debian: /usr/sbin/apache2)
    nginx: str
    wrk: str
    modules_dir: str     # the stock httpd modules
    bucketed_dir: str    # where mod_mpm_bucketed.so & co. are loaded from
    shim: str            # noreuseport.so, or "" when no level needs it
    slots: int
    cores: int
    # mod_test_fault.so and emfile_shim.so (the faults workloads).
    fault_modules: str = ""
    # Where the servers run (placement.py, netns.py): their CPUs (None:
    # not pinned), the address they listen on, the namespace pair of
    # --net veth (None: loopback) and the BucketCount of a --server-cores
    # point (None: each server's own).
    server_cpus: tuple = None
    server_host: str = LOOPBACK
    veth: object = None
    bucket_count: int = None

    def server_command(self, command):
        """A server's command line, in the servers' namespace under --net
        veth."""
        return self.veth.server_command(command) if self.veth else command

    def mpm_module(self, mpm):
        if mpm == "bucketed":
            return os.path.join(self.bucketed_dir, BUCKETED_MODULES[0])
        return os.path.join(self.modules_dir, f"mod_mpm_{mpm}.so")

    def httpd_modules(self, slow_handler=False, php=False):
        """The modules every httpd under test loads besides its MPM:
        authz_core for `Require all granted`, mime for the Content-Type;
        lua for the slow handler; php (mod_php) for the PHP page."""
        names = ("authz_core", "mime") + (("lua",) if slow_handler else ())
        modules = {name: os.path.join(self.modules_dir, f"mod_{name}.so")
                   for name in names}
        if php:
            modules["php"] = self.php_module()
        return modules

    def php_module(self):
        """Debian's mod_php (libapache2-mod-php8.2: libphp8.2.so) in the
        modules directory; the newest libphp*.so there if another version
        is installed instead."""
        found = sorted(glob.glob(os.path.join(self.modules_dir,
                                              "libphp*.so")))
        return found[-1] if found else os.path.join(self.modules_dir,
                                                    PHP_MODULE)

    def php_missing_reason(self):
        """Why the PHP workload cannot run here, or None."""
        path = self.php_module()
        if os.path.exists(path):
            return None
        return (f"mod_php not found ({path}): install libapache2-mod-php8.2 "
                f"(scripts/deps.sh does)")

    @property
    def status_module(self):
        return os.path.join(self.bucketed_dir, BUCKETED_MODULES[1])

    def freeze_bucketed(self, scratch_dir):
        """Copies the bucketed modules into scratch_dir and loads them from
        there: a rebuild during a long run would otherwise overwrite files
        that running servers have mapped. Returns what was copied: digest
        and build time of each, for the record."""
        target = os.path.join(scratch_dir, "modules")
        os.makedirs(target, exist_ok=True)
        copied = {}
        for name in BUCKETED_MODULES:
            source = os.path.join(self.bucketed_dir, name)
            with open(source, "rb") as module:
                digest = hashlib.sha256(module.read()).hexdigest()
            shutil.copy2(source, target)
            copied[name] = {"source": source, "sha256": digest,
                            "built": time.strftime(
                                "%Y-%m-%dT%H:%M:%S%z",
                                time.localtime(os.path.getmtime(source)))}
        self.bucketed_dir = target
        return copied

    def unavailable_reason(self, spec):
        """Why the server described by spec cannot run here, or None."""
        if spec.kind == "nginx":
            return None if os.access(self.nginx, os.X_OK) \
                else f"nginx not found at {self.nginx}"
        if not os.access(self.httpd, os.X_OK):
            return f"httpd not found at {self.httpd}"
        needed = [self.mpm_module(spec.mpm)]
        needed += sorted(self.httpd_modules().values())
        if spec.mpm == "bucketed":
            needed.append(self.status_module)
        missing = [path for path in needed if not os.path.exists(path)]
        if not missing:
            return None
        what = "module not built" if spec.mpm == "bucketed" \
            else "module missing (package apache2 not installed?)"
        return f"{what}: {', '.join(missing)}"


def debian_tools(build_dir, slots=1024):
    """Tools of a Debian machine's stock binaries, bucketed from build_dir
    (the standalone scripts beside bench/run)."""
    return Tools(httpd="/usr/sbin/apache2", nginx="/usr/sbin/nginx",
                 wrk="/usr/bin/wrk", modules_dir="/usr/lib/apache2/modules",
                 bucketed_dir=build_dir, shim="", slots=slots,
                 cores=os.cpu_count())


def _first_line(command):
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    output = (result.stdout + result.stderr).strip().splitlines()
    return output[0].strip() if output else "unknown"


def _cpu_model():
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_total_gb():
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return None


def load_average():
    return [round(value, 2) for value in os.getloadavg()]


def _version(command, prefix=""):
    """The first line a program prints about its version, without the words
    around the version itself: `Server version: Apache/2.4.71 (Debian)`
    becomes `Apache/2.4.71 (Debian)`, wrk's copyright notice goes."""
    line = _first_line(command)
    line = line[len(prefix):] if line.startswith(prefix) else line
    return line.split(" Copyright")[0].strip()


def machine_facts(tools):
    """What a reader needs to judge the numbers: the real kernel, versions,
    cores, memory and how busy the machine was when the run began."""
    return {
        "kernel": platform.release(),
        "os": _first_line(["sh", "-c", ". /etc/os-release && "
                                       "echo $PRETTY_NAME"]),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gb": _memory_total_gb(),
        "httpd": _version([tools.httpd, "-v"], "Server version: "),
        "nginx": _version([tools.nginx, "-v"], "nginx version: "),
        "wrk": _version([tools.wrk, "-v"]),
        "python": platform.python_version(),
        "load_average_at_start": load_average(),
        "scheduling": "servers in the load tools' session (one autogroup)",
    }
