# SPDX-License-Identifier: Apache-2.0
"""The scenario test_systemd_units.py runs inside a Debian 12 container
booted with systemd (systemd_container.py boots it), as a systemd service:

    python3 systemd_scenario.py STAGE RESULTS

STAGE holds what the Debian package would install (the modules, the units,
the module's .load/.conf); RESULTS gets result.json (each step's numbers),
scenario.log, apache2's journal and error log. The steps are the
operator's path: Debian's apache2 as installed, enable refused under
mpm_event, the switch to bucketed, the one documented command, restarts
and reloads under load in both child models, a restart from one model to
the other, the apache2 packages reinstalled, a reload with a broken
configuration, a graceful stop with a request in flight, a request while
stopped, then the units disabled again. The load is a bounded closed-loop
client on the container's own loopback."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

# Where the files the Debian package installs go, as it installs them.
UNIT_TOOL = "/usr/sbin/bucketed-socket-units"
FOREGROUND = "/usr/libexec/bucketed/apache2-foreground"
DROPIN_SHARE = "/usr/share/bucketed/systemd/bucketed-socket.conf"
MODULE_DIR = "/usr/lib/apache2/modules"
RESTART_SPACING = 2.5


def sh(command, check=True, timeout=180, env=None):
    """Runs a shell command; returns (status, stdout+stderr)."""
    proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    out = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{command}` exited {proc.returncode}:\n{out}")
    return proc.returncode, out


def unit_property(unit, name):
    return sh(f"systemctl show -p {name} --value {unit}")[1].strip()


def http_get(family, host, port, path="/ok.txt", timeout=20):
    """One request with Connection: close; returns (status line, body)."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n"
                  f"Connection: close\r\n\r\n".encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(errors="replace"), body


class Load:
    """A bounded closed-loop client: `threads` connections at a time, each a
    new one per request (Connection: close), spread over the addresses.
    Every request is counted as ok or failed with a reason; failures also
    keep their time. Stops at stop() or after `limit` seconds."""

    def __init__(self, addresses, body, threads=16, limit=600):
        self.addresses = addresses
        self.body = body
        self.threads = threads
        self.began = time.monotonic()
        self.deadline = self.began + limit
        self.ok = 0
        self.failed = Counter()
        self.failure_times = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.workers = []

    def _run(self, index):
        n = index
        while not self.halt.is_set() and time.monotonic() < self.deadline:
            family, host, port = self.addresses[n % len(self.addresses)]
            n += 1
            try:
                status, body = http_get(family, host, port)
                if status.split(" ")[1:2] != ["200"]:
                    reason = f"status {status}"
                elif body != self.body:
                    reason = f"short body ({len(body)} bytes)"
                else:
                    reason = None
            except OSError as e:
                reason = type(e).__name__
            with self.lock:
                if reason is None:
                    self.ok += 1
                else:
                    self.failed[f"{host}:{port} {reason}"] += 1
                    self.failure_times.append(
                        (round(time.monotonic() - self.began, 3),
                         f"{host}:{port} {reason}"))

    def start(self):
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self.workers.append(t)
        return self

    def snapshot(self):
        with self.lock:
            return self.ok, sum(self.failed.values())

    def stop(self):
        self.halt.set()
        for t in self.workers:
            t.join(timeout=30)
        return {"ok": self.ok, "failed": sum(self.failed.values()),
                "reasons": dict(self.failed),
                # When, from the load's start: set against the steps' times.
                "failure_times": self.failure_times[:50]}


class Scenario:
    """The operator's path, step by step; every step's numbers go into
    self.result, written to RESULTS/result.json as it goes."""

    def __init__(self, stage_dir, results):
        self.stage = Path(stage_dir)
        self.results = Path(results)
        self.result = {"steps": [], "errors": []}
        self.started = time.monotonic()
        self.addresses = [(socket.AF_INET, "127.0.0.1", 80),
                          (socket.AF_INET, "127.0.0.1", 8080),
                          (socket.AF_INET6, "::1", 8081)]
        self.body = b"bucketed ok\n"

    def note(self, message):
        line = f"[{time.monotonic() - self.started:7.2f}] {message}"
        print(line, flush=True)
        with open(self.results / "scenario.log", "a") as f:
            f.write(line + "\n")

    def save(self):
        (self.results / "result.json").write_text(
            json.dumps(self.result, indent=2, sort_keys=True))

    def step(self, name, **data):
        data["name"] = name
        self.result["steps"].append(data)
        self.note(f"{name}: {json.dumps(data, sort_keys=True)}")
        self.save()

    # -- setup

    def install(self):
        """The files the Debian package would install, at its paths, and a
        site: a small file for the load, a rate-limited big one for the
        graceful stop, two more Listen addresses (IPv4 and IPv6)."""
        for name in ("mod_mpm_bucketed.so", "mod_bucketed_status.so"):
            shutil.copy(self.stage / name, f"{MODULE_DIR}/{name}")
        load = (self.stage / "mpm_bucketed.load.in").read_text()
        Path("/etc/apache2/mods-available/mpm_bucketed.load").write_text(
            load.replace("@MODULE_DIR@", MODULE_DIR))
        shutil.copy(self.stage / "mpm_bucketed.conf",
                    "/etc/apache2/mods-available/mpm_bucketed.conf")
        for src, dst, mode in (
                ("bucketed-socket-units", UNIT_TOOL, 0o755),
                ("apache2-foreground", FOREGROUND, 0o755),
                ("bucketed-socket.conf", DROPIN_SHARE, 0o644)):
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.stage / src, dst)
            os.chmod(dst, mode)
        www = Path("/var/www/html")
        (www / "ok.txt").write_bytes(self.body)
        (www / "slow").mkdir(exist_ok=True)
        (www / "slow/big.bin").write_bytes(b"x" * (256 * 1024))
        Path("/etc/apache2/conf-available/bucketed-test.conf").write_text(
            "# SPDX-License-Identifier: Apache-2.0\n"
            "ServerName localhost\n"
            "# bucketed's plan, kernel probe and socket adoption\n"
            "<IfModule mpm_bucketed_module>\n"
            "    LogLevel warn mpm_bucketed:info\n"
            "</IfModule>\n"
            "Listen 127.0.0.1:8080\n"
            "Listen [::1]:8081\n"
            "# 256 KiB at 64 KiB/s: a request in flight for about 4 s\n"
            "<Location /slow>\n"
            "    SetOutputFilter RATE_LIMIT\n"
            "    SetEnv rate-limit 64\n"
            "</Location>\n")
        sh("a2enconf -q bucketed-test && a2enmod -q ratelimit")

    def serves(self):
        """Every address answers one request right now."""
        for family, host, port in self.addresses:
            status, body = http_get(family, host, port)
            if " 200 " not in status + " " or body != self.body:
                return False
        return True

    def main_pid(self):
        return int(unit_property("apache2.service", "MainPID") or 0)

    def held_by_both(self):
        """Whether apache2's parent holds the very sockets systemd holds
        for apache2.socket (same inodes, PID 1 is systemd here)."""
        def socket_inodes(pid):
            inodes = set()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
            return inodes
        listening = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:] + \
                Path("/proc/net/tcp6").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                listening.add(fields[9])
        systemd = socket_inodes(1) & listening
        apache = socket_inodes(self.main_pid()) & listening
        return sorted(systemd), sorted(systemd & apache)

    # -- the steps

    def restart_under_load(self, name, count, command="systemctl restart apache2"):
        load = Load(self.addresses, self.body).start()
        time.sleep(1.0)
        durations, windows, pids = [], [], [self.main_pid()]
        try:
            for _ in range(count):
                began = time.monotonic()
                sh(command)
                durations.append(round(time.monotonic() - began, 3))
                windows.append((round(began - load.began, 3),
                                round(time.monotonic() - load.began, 3)))
                pids.append(self.main_pid())
                # systemd refuses a 6th start within 10 s (its default
                # StartLimitBurst=5 per StartLimitIntervalSec=10s, which
                # manual restarts count towards too).
                time.sleep(RESTART_SPACING)
        finally:
            counts = load.stop()
        self.step(name, restarts=count, command=command,
                  seconds=durations, windows=windows, main_pids=pids,
                  all_new_pids=len(set(pids)) == len(pids), **counts)
        return counts

    def graceful_stop(self):
        """A request in flight (about 4 s of rate-limited download) when
        `systemctl stop apache2` starts must complete; then the socket is
        still held and a new request starts apache2 again."""
        outcome = {}

        def slow():
            try:
                status, body = http_get(socket.AF_INET, "127.0.0.1", 80,
                                        "/slow/big.bin", timeout=60)
                outcome["status"], outcome["bytes"] = status, len(body)
            except OSError as e:
                outcome["error"] = repr(e)

        t = threading.Thread(target=slow, daemon=True)
        t.start()
        time.sleep(1.0)
        began = time.monotonic()
        rc, out = sh("systemctl stop apache2", check=False)
        stop_seconds = round(time.monotonic() - began, 3)
        t.join(timeout=60)
        state = unit_property("apache2.service", "ActiveState")
        socket_state = unit_property("apache2.socket", "ActiveState")
        self.step("graceful stop with a request in flight",
                  stop_status=rc, stop_seconds=stop_seconds,
                  in_flight=outcome, service_after=state,
                  socket_after=socket_state)
        began = time.monotonic()
        status, body = http_get(socket.AF_INET, "127.0.0.1", 80)
        self.step("request while stopped starts apache2 (socket activation)",
                  status=status, body_ok=body == self.body,
                  seconds=round(time.monotonic() - began, 3),
                  service_after=unit_property("apache2.service",
                                              "ActiveState"))

    def bad_reload(self):
        """A configuration that does not parse: reload refuses, the server
        keeps serving with the same parent."""
        broken = Path("/etc/apache2/conf-enabled/zz-broken.conf")
        before = self.main_pid()
        broken.write_text("ThisIsNotADirective on\n")
        rc, out = sh("systemctl reload apache2", check=False)
        time.sleep(1.0)
        serving = self.serves()
        broken.unlink()
        self.step("reload with a broken configuration", reload_status=rc,
                  same_parent=self.main_pid() == before, serving=serving,
                  active=unit_property("apache2.service", "ActiveState"))

    def upgrade_under_load(self):
        """What `apt upgrade` of apache2 does: dpkg unpacks and configures
        the packages, and apache2's postinst restarts the service."""
        debs = " ".join(sorted(
            str(p) for p in Path("/var/cache/apt/archives").glob("apache2*.deb")))
        command = ("DEBIAN_FRONTEND=noninteractive dpkg -i "
                   "--force-confold " + debs)
        return self.restart_under_load("apache2 packages reinstalled (dpkg -i) "
                                       "under load", 1, command)

    def run(self):
        self.install()
        # Debian as installed: mpm_event, its own unit.
        rc, out = sh(f"{UNIT_TOOL} enable", check=False)
        self.step("enable refused while mpm_event is loaded",
                  status=rc, message=out.strip()[-300:])
        sh("systemctl restart apache2")
        sh("a2dismod -q mpm_event && a2enmod -q mpm_bucketed "
           "&& systemctl restart apache2")
        self.step("switched to bucketed under Debian's unit",
                  serving=self.serves(),
                  type=unit_property("apache2.service", "Type"))

        # The one documented command, under load (the old server's sockets
        # close once: this switch-over is the last restart that may lose).
        load = Load(self.addresses, self.body).start()
        time.sleep(1.0)
        began = time.monotonic()
        rc, out = sh(f"{UNIT_TOOL} enable && systemctl restart apache2",
                     check=False)
        seconds = round(time.monotonic() - began, 3)
        time.sleep(1.0)
        counts = load.stop()
        systemd_sockets, shared = self.held_by_both()
        pid = self.main_pid()
        # What bucketed found it can do with a closing duplicate's queue.
        migration = [line.split("bucketed: ", 1)[-1] for line in
                     Path("/var/log/apache2/error.log").read_text()
                     .splitlines() if "BK00092" in line]
        self.step("enable && systemctl restart apache2", status=rc,
                  output=out.strip()[-600:], seconds=seconds,
                  type=unit_property("apache2.service", "Type"),
                  main_exe=os.readlink(f"/proc/{pid}/exe") if pid else "",
                  socket_unit=Path("/etc/systemd/system/apache2.socket")
                  .read_text() if Path("/etc/systemd/system/apache2.socket")
                  .exists() else "",
                  systemd_sockets=len(systemd_sockets),
                  shared_with_apache2=len(shared),
                  status_tool=sh(f"{UNIT_TOOL} status", check=False)[1],
                  migration=migration[-1] if migration else "",
                  **counts)

        self.restart_under_load("systemctl restart, prefork model", 5)
        self.restart_under_load("systemctl reload, prefork model", 3,
                                "systemctl reload apache2")
        # A change a graceful restart does not apply: the child model,
        # with the event model's directives in place of prefork's.
        Path("/etc/apache2/mods-available/mpm_bucketed.conf").write_text(
            "ChildModel event\n"
            "StartServers 2\n"
            "MinSpareThreads 25\n"
            "MaxSpareThreads 75\n"
            "ThreadsPerChild 25\n"
            "MaxRequestWorkers 150\n"
            "MaxConnectionsPerChild 0\n")
        self.restart_under_load("systemctl restart into the event model", 1)
        self.restart_under_load("systemctl restart, event model", 5)
        self.restart_under_load("systemctl reload, event model", 3,
                                "systemctl reload apache2")
        self.upgrade_under_load()
        self.bad_reload()
        self.graceful_stop()

        rc, out = sh(f"{UNIT_TOOL} disable && systemctl restart apache2",
                     check=False)
        left = [p for p in ("/etc/systemd/system/apache2.socket",
                            "/etc/systemd/system/apache2.service.d")
                if Path(p).exists()]
        self.step("disable && systemctl restart apache2", status=rc,
                  output=out.strip()[-300:], left=left,
                  type=unit_property("apache2.service", "Type"),
                  socket=unit_property("apache2.socket", "LoadState"),
                  serving=self.serves())


def scenario(stage_dir, results):
    sc = Scenario(stage_dir, results)
    try:
        sc.run()
    except Exception as e:  # noqa: BLE001 (reported to the host, then off)
        sc.result["errors"].append(f"{type(e).__name__}: {e}")
        sc.note(f"error: {e}")
    finally:
        sc.result["seconds"] = round(time.monotonic() - sc.started, 1)
        sc.save()
        with contextlib.suppress(Exception):
            journal = sh("journalctl --no-pager -o short-monotonic "
                         "-u apache2.service -u apache2.socket", check=False)[1]
            (Path(results) / "journal.txt").write_text(journal)
            shutil.copy("/var/log/apache2/error.log",
                        Path(results) / "error.log")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: systemd_scenario.py STAGE RESULTS", file=sys.stderr)
        sys.exit(2)
    scenario(sys.argv[1], sys.argv[2])
