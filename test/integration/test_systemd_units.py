# SPDX-License-Identifier: Apache-2.0
"""The shipped systemd units (dist/systemd) under real systemd: a Debian 12
container booted with systemd-nspawn (systemd_container.py), Debian's
apache2 at the host's version inside, the operator's path run there as a
service (systemd_scenario.py): enable refused under mpm_event; the switch to bucketed; the one
documented command `bucketed-socket-units enable && systemctl restart
apache2`; restarts and reloads under load in both child models, a restart
from one model to the other, the apache2 packages reinstalled (what `apt
upgrade` does), a reload with a broken configuration, a graceful stop with
a request in flight, a request while stopped; then `disable`.

The load is a closed-loop client inside the container (16 connections,
Connection: close, loopback of the container's own network namespace) over
the three Listen addresses; every request is counted. The container runs
once per session (module-scoped fixture); each test checks one step of its
result.

Costs: the container tree is built once (debootstrap + apt, 65-90 s,
cached under /var/cache/bucketed/systemd-container, rebuilt when the host's
apache2 changes); a run boots in about 2 s and takes 75-80 s.
Environment: BUCKETED_TOP, BUCKETED_BUILD (as the other integration tests),
BUCKETED_SYSTEMD_RESULTS (keep the container's results, journal included,
in this directory). Needs root, systemd-nspawn and debootstrap
(scripts/deps.sh); a missing tool fails the test, nothing is skipped.
"""
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import systemd_container
from httpd_fixture import APACHE_MODULES, HTTPD_BIN

TOP = Path(os.environ.get("BUCKETED_TOP") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("BUCKETED_BUILD") or TOP)
UNITS = TOP / "dist/systemd"
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def container():
    """The scenario's result: {step name: its numbers}, run once."""
    for tool in ("systemd-nspawn", "debootstrap"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} missing: run scripts/deps.sh")
    keep = os.environ.get("BUCKETED_SYSTEMD_RESULTS")
    work = Path(tempfile.mkdtemp(prefix="bucketed-systemd-"))
    results = Path(keep) if keep else work / "results"
    if results.exists():
        shutil.rmtree(results)
    try:
        tree = systemd_container.rootfs()
        staged = systemd_container.stage(work / "stage", TOP, BUILD)
        rc, console = systemd_container.run(tree, staged, results,
                                            RUN_TIMEOUT)
        path = results / "result.json"
        if not path.exists():
            pytest.fail(f"the container wrote no result (nspawn {rc}):\n"
                        f"{console[-3000:]}")
        result = json.loads(path.read_text())
        log = (results / "scenario.log").read_text()
        if result["errors"] or rc is None:
            journal = (results / "journal.txt").read_text() \
                if (results / "journal.txt").exists() else ""
            pytest.fail(f"scenario failed (nspawn {rc}): {result['errors']}\n"
                        f"{log[-4000:]}\n{journal[-4000:]}")
        print(log)
        yield {s["name"]: s for s in result["steps"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def lost(step):
    return f"{step['failed']} of {step['ok'] + step['failed']} failed: " \
           f"{step['reasons']}"


def test_enable_refused_without_bucketed(container):
    step = container["enable refused while mpm_event is loaded"]
    assert step["status"] != 0
    assert "mpm_event, not bucketed" in step["message"]


def test_one_command_switches_to_socket_activation(container):
    step = container["enable && systemctl restart apache2"]
    assert step["status"] == 0, step["output"]
    assert step["type"] == "notify"
    # The process systemd started is apache2 itself (no apachectl between).
    assert step["main_exe"] == "/usr/sbin/apache2"
    lines = [line for line in step["socket_unit"].splitlines()
             if line.startswith(("ListenStream=", "ReusePort=", "Backlog="))]
    assert lines == ["ListenStream=80", "ListenStream=127.0.0.1:8080",
                     "ListenStream=[::1]:8081", "ReusePort=yes",
                     "Backlog=511"]
    # apache2's parent serves on the very sockets systemd holds.
    assert step["systemd_sockets"] == 3
    assert step["shared_with_apache2"] == 3
    assert "matches the configuration" in step["status_tool"]
    # The switch-over itself closes the old server's sockets once: counted
    # and shown, not held to zero.
    print("switch-over:", lost(step))


@pytest.mark.parametrize("name", [
    "systemctl restart, prefork model",
    "systemctl restart into the event model",
    "systemctl restart, event model",
    "apache2 packages reinstalled (dpkg -i) under load",
])
def test_restart_loses_nothing(container, name):
    step = container[name]
    assert step["ok"] > 0
    # Losses here are resets of the duplicates' queues: say whether bucketed
    # could migrate them (BK00092).
    migration = container["enable && systemctl restart apache2"]["migration"]
    assert step["failed"] == 0, f"{lost(step)}; {migration}"
    # Each one was a full restart: a new parent every time.
    assert step["all_new_pids"], step["main_pids"]


@pytest.mark.parametrize("name", ["systemctl reload, prefork model",
                                  "systemctl reload, event model"])
def test_reload_is_graceful(container, name):
    step = container[name]
    assert step["failed"] == 0, lost(step)
    assert len(set(step["main_pids"])) == 1, step["main_pids"]


def test_reload_refuses_broken_configuration(container):
    step = container["reload with a broken configuration"]
    assert step["reload_status"] != 0
    assert step["same_parent"] and step["serving"]
    assert step["active"] == "active"


def test_stop_is_graceful(container):
    step = container["graceful stop with a request in flight"]
    assert step["stop_status"] == 0
    assert step["in_flight"].get("bytes") == 256 * 1024, step["in_flight"]
    assert " 200 " in step["in_flight"]["status"] + " "
    # The stop waited for it (about 3 s were left of its 4 s).
    assert step["stop_seconds"] > 2.0
    assert step["service_after"] == "inactive"
    assert step["socket_after"] == "active"
    again = container["request while stopped starts apache2 (socket activation)"]
    assert " 200 " in again["status"] + " " and again["body_ok"]
    assert again["service_after"] == "active"


def test_disable_restores_debian_unit(container):
    step = container["disable && systemctl restart apache2"]
    assert step["status"] == 0, step["output"]
    assert step["left"] == []
    assert step["type"] == "forking"
    assert step["socket"] == "not-found"
    assert step["serving"]


def test_foreground_wrapper_execs_apache2(tmp_path):
    """Without systemd: the wrapper reads envvars of the instance named by
    APACHE_CONFDIR, creates the run and lock directories, passes -d for a
    non-default instance and -DFOREGROUND, keeps descriptor 3 open and
    execs (the pid systemd started is the server's)."""
    confdir = tmp_path / "apache2-test"
    confdir.mkdir()
    run_dir, lock_dir = tmp_path / "run", tmp_path / "lock"
    (confdir / "envvars").write_text(
        f"export APACHE_RUN_USER=root\n"
        f"export APACHE_RUN_DIR={run_dir}\n"
        f"export APACHE_LOCK_DIR={lock_dir}\n"
        f"export APACHE_ARGUMENTS='-DONE -DTWO'\n"
        f"export APACHE_ULIMIT_MAX_FILES=true\n")
    fake = tmp_path / "fake-apache2"
    fake.write_text("#!/bin/sh\necho \"pid=$$\"\nfor a in \"$@\"; do echo \"arg=$a\"; done\n"
                    "[ -e /proc/self/fd/3 ] && echo fd3=open\n"
                    "echo \"listen_pid=$LISTEN_PID\"\n")
    fake.chmod(0o755)
    env = {"PATH": "/usr/sbin:/usr/bin:/bin", "APACHE_CONFDIR": str(confdir),
           "APACHE_HTTPD": str(fake), "APACHE_STARTED_BY_SYSTEMD": "true"}
    r, w = os.pipe()
    try:
        # The pipe's read end as descriptor 3, as systemd passes a socket.
        proc = subprocess.Popen(
            ["/bin/sh", "-c", 'export LISTEN_PID=$$; exec "$0" extra',
             str(UNITS / "apache2-foreground")],
            env=env, stdout=subprocess.PIPE, text=True, pass_fds=(3,),
            preexec_fn=lambda: os.dup2(r, 3))
        out, _ = proc.communicate(timeout=30)
    finally:
        os.close(r)
        os.close(w)
    assert proc.returncode == 0
    lines = out.splitlines()
    assert f"pid={proc.pid}" in lines
    assert f"listen_pid={proc.pid}" in lines
    assert "fd3=open" in lines
    args = [line[4:] for line in lines if line.startswith("arg=")]
    assert args == ["-d", str(confdir), "-DONE", "-DTWO", "-DFOREGROUND",
                    "extra"]
    assert (run_dir / "socks").is_dir() and lock_dir.is_dir()


def test_unit_tool_refuses_foreign_files(tmp_path):
    """enable and disable never overwrite or remove an apache2.socket they
    did not write (checked before anything else is touched)."""
    (tmp_path / "apache2.socket").write_text("[Socket]\nListenStream=80\n")
    fake_ctl = tmp_path / "apache2ctl"
    fake_ctl.write_text("#!/bin/sh\necho ' mpm_bucketed_module (shared)'\n"
                        "echo ListenStream=80\n")
    fake_ctl.chmod(0o755)
    foreground = tmp_path / "apache2-foreground"
    foreground.write_text("#!/bin/sh\n")
    foreground.chmod(0o755)
    env = {"PATH": "/usr/sbin:/usr/bin:/bin",
           "BUCKETED_UNIT_DIR": str(tmp_path),
           "BUCKETED_FOREGROUND": str(foreground),
           "APACHE2CTL": str(fake_ctl),
           "BUCKETED_SYSTEMD_RUNTIME": str(tmp_path)}
    for command in ("enable", "disable"):
        proc = subprocess.run([str(UNITS / "bucketed-socket-units"), command],
                              env=env, capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
        assert "was not written by bucketed-socket-units" in proc.stderr
    assert (tmp_path / "apache2.socket").read_text() == \
        "[Socket]\nListenStream=80\n"
    assert not (tmp_path / "apache2.service.d").exists()


def fake_tools(tmp_path, conf_text, files=None):
    """A configuration in tmp_path: apache2.conf loading prefork (the
    directives asked for need an MPM) plus conf_text, and files (relative
    path: text) beside it. An apache2ctl that answers as bucketed's does,
    with the real apache2's -D DUMP_INCLUDES of that configuration; a
    systemctl that records its arguments and acts as the real one on the
    enable links, failing where the real one needs the running systemd that
    BUCKETED_SYSTEMD_RUNTIME stands for (a directory that exists), and at
    the command FAIL_SYSTEMCTL names; the wrapper's path."""
    conf = tmp_path / "apache2.conf"
    conf.write_text(f'ServerRoot "{tmp_path}"\n'
                    f"LoadModule mpm_prefork_module "
                    f"{APACHE_MODULES}/mod_mpm_prefork.so\n"
                    "Listen 127.0.0.1:8080\n" + conf_text)
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    ctl = tmp_path / "apache2ctl"
    ctl.write_text(
        "#!/bin/sh\n"
        "case \"$*\" in\n"
        "  -M) echo ' mpm_bucketed_module (shared)' ;;\n"
        "  *BUCKETED_LISTEN_STREAMS*) echo ListenStream=80; "
        "echo 'ListenStream=[::1]:8081'; echo 'Syntax OK' >&2 ;;\n"
        f"  *DUMP_INCLUDES*) exec {HTTPD_BIN} -d '{tmp_path}' -f '{conf}' "
        "-t -D DUMP_INCLUDES ;;\n"
        "  *) exit 1 ;;\n"
        "esac\n")
    units = tmp_path / "units"
    calls = tmp_path / "systemctl.calls"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> '{calls}'\n"
        "down() { echo \"System has not been booted with systemd as init "
        "system (PID 1). Can't operate.\" >&2; exit 1; }\n"
        "[ \"$1\" != \"${FAIL_SYSTEMCTL:-}\" ] || "
        "{ echo \"fake systemctl: $1 failed\" >&2; exit 1; }\n"
        "[ -d \"$BUCKETED_SYSTEMD_RUNTIME\" ] || case \"$1\" in\n"
        "  daemon-reload|is-active) down ;;\n"
        "esac\n"
        "case \"$1\" in\n"
        "  is-active) exit 3 ;;\n"
        f"  enable) mkdir -p '{units}/sockets.target.wants' && "
        f"ln -sf '{units}/apache2.socket' "
        f"'{units}/sockets.target.wants/apache2.socket' ;;\n"
        f"  disable) rm -f '{units}/sockets.target.wants/apache2.socket'; "
        "case \"$*\" in *--now*) [ -d \"$BUCKETED_SYSTEMD_RUNTIME\" ] "
        "|| down ;; esac ;;\n"
        "esac\n")
    foreground = tmp_path / "apache2-foreground"
    foreground.write_text("#!/bin/sh\n")
    for tool in (ctl, systemctl, foreground):
        tool.chmod(0o755)
    runtime = tmp_path / "run-systemd-system"
    runtime.mkdir()
    env = {"PATH": "/usr/sbin:/usr/bin:/bin", "BUCKETED_UNIT_DIR": str(units),
           "BUCKETED_FOREGROUND": str(foreground), "APACHE2CTL": str(ctl),
           "BUCKETED_SYSTEMCTL": str(systemctl),
           "BUCKETED_SYSTEMD_SHARE": str(UNITS),
           "BUCKETED_SYSTEMD_RUNTIME": str(runtime)}
    return env, units, calls


def installed(units):
    """Every file and link under the unit directory, relative."""
    if not units.exists():
        return []
    return sorted(str(p.relative_to(units)) for p in units.rglob("*")
                  if p.is_file() or p.is_symlink())


def unit_lines(path, key):
    """The KEY= lines of a unit file, [] when it does not exist."""
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines()
            if line.startswith(key + "=")]


def written_numbers(units):
    """(the socket unit's Backlog= lines, the stop drop-in's
    TimeoutStopSec= lines)."""
    return (unit_lines(units / "apache2.socket", "Backlog"),
            unit_lines(units / "apache2.service.d/"
                       "bucketed-socket-stop-timeout.conf", "TimeoutStopSec"))


def unit_tool(command, env):
    return subprocess.run([str(UNITS / "bucketed-socket-units"), command],
                          env=env, capture_output=True, text=True, timeout=30)


def test_unit_tool_enable_and_disable(tmp_path):
    """enable writes the socket unit from apache2's own ListenStream lines,
    Backlog from ListenBacklog, the drop-in as shipped, a longer stop
    timeout for a long GracefulShutdownTimeout (plus KeepAliveTimeout,
    httpd's 5 s when unset, plus 30 s), then reloads and enables; disable
    removes all of it, the enable link included."""
    env, units, calls = fake_tools(
        tmp_path, "# ListenBacklog 7\nListenBacklog 1024\n"
                  "  gracefulshutdowntimeout 120\n")
    proc = unit_tool("enable", env)
    assert proc.returncode == 0, proc.stderr
    socket_unit = (units / "apache2.socket").read_text()
    lines = [line for line in socket_unit.splitlines()
             if line.startswith(("ListenStream=", "ReusePort=", "Backlog="))]
    assert lines == ["ListenStream=80", "ListenStream=[::1]:8081",
                     "ReusePort=yes", "Backlog=1024"]
    assert socket_unit.startswith("# SPDX-License-Identifier: Apache-2.0\n")
    dropin = (units / "apache2.service.d/bucketed-socket.conf").read_text()
    shipped = (UNITS / "bucketed-socket.conf").read_text().splitlines()
    # The shipped file with one line added after its first.
    assert dropin.splitlines()[0] == shipped[0]
    assert dropin.splitlines()[2:] == shipped[1:]
    stop = (units / "apache2.service.d/bucketed-socket-stop-timeout.conf")
    assert "TimeoutStopSec=155" in stop.read_text().splitlines()
    assert calls.read_text().splitlines()[:2] == [
        "daemon-reload", "enable --quiet apache2.socket"]
    assert "sockets.target.wants/apache2.socket" in installed(units)

    proc = unit_tool("disable", env)
    assert proc.returncode == 0, proc.stderr
    assert installed(units) == []
    assert "disable --quiet --now apache2.socket" in calls.read_text()


def test_unit_tool_defaults(tmp_path):
    """Without ListenBacklog: httpd's 511; without a long
    GracefulShutdownTimeout: no stop-timeout drop-in."""
    env, units, _ = fake_tools(tmp_path, "GracefulShutdownTimeout 30\n")
    proc = unit_tool("enable", env)
    assert proc.returncode == 0, proc.stderr
    assert "Backlog=511" in (units / "apache2.socket").read_text().splitlines()
    assert sorted(p.name for p in (units / "apache2.service.d").iterdir()) \
        == ["bucketed-socket.conf"]


def test_unit_tool_reads_includes_with_blanks_and_globs(tmp_path):
    """The numbers come from every file apache2 includes, through Include
    and IncludeOptional globs in directories whose names hold blanks, into
    files whose names hold blanks and glob characters (the real apache2
    lists them): Backlog=100, TimeoutStopSec=200+5+30."""
    env, units, _ = fake_tools(
        tmp_path,
        f'Include "{tmp_path}/conf dir/*.conf"\n'
        f'IncludeOptional "{tmp_path}/conf dir/more */*.conf"\n',
        {"conf dir/a b.conf": "ListenBacklog 100\n",
         "conf dir/more x/c [d]*.conf": "GracefulShutdownTimeout 200\n"})
    proc = unit_tool("enable", env)
    assert proc.returncode == 0, proc.stderr
    assert written_numbers(units) == (["Backlog=100"],
                                      ["TimeoutStopSec=235"])


@pytest.mark.parametrize("conf, numbers", [
    # Decimal, leading zeros and all (not octal: 0100 is not 64, 09 is 9).
    ("ListenBacklog 0100\nGracefulShutdownTimeout 0100\n"
     "KeepAliveTimeout 09\n", (["Backlog=100"], ["TimeoutStopSec=139"])),
    ("GracefulShutdownTimeout 000\n", (["Backlog=511"], [])),
    ("GracefulShutdownTimeout 090\n", (["Backlog=511"], ["TimeoutStopSec=125"])),
    # The longest KeepAliveTimeout, a virtual host's too, in httpd's units.
    ("KeepAliveTimeout 100ms\n<VirtualHost 127.0.0.1:8080>\n"
     "KeepAliveTimeout 2mi\n</VirtualHost>\n",
     (["Backlog=511"], ["TimeoutStopSec=150"])),
    ("GracefulShutdownTimeout 56\nKeepAliveTimeout 4500ms\n",
     (["Backlog=511"], ["TimeoutStopSec=91"])),
], ids=["leading-zeros", "zero", "nine", "keepalive-units", "keepalive-ms"])
def test_unit_tool_numbers(tmp_path, conf, numbers):
    """TimeoutStopSec = GracefulShutdownTimeout + the longest
    KeepAliveTimeout + 30, written when above the drop-in's 90."""
    env, units, _ = fake_tools(tmp_path, conf)
    proc = unit_tool("enable", env)
    assert proc.returncode == 0, proc.stderr
    assert written_numbers(units) == numbers


@pytest.mark.parametrize("conf, directive", [
    ("GracefulShutdownTimeout abc\n", "GracefulShutdownTimeout"),
    ("GracefulShutdownTimeout 1e3\n", "GracefulShutdownTimeout"),
    ("KeepAliveTimeout 5d\n", "KeepAliveTimeout"),
])
def test_unit_tool_refuses_non_numbers(tmp_path, conf, directive):
    env, units, calls = fake_tools(tmp_path, conf)
    proc = unit_tool("enable", env)
    assert proc.returncode == 1, proc.stdout
    assert directive in proc.stderr and "nothing was changed" in proc.stderr
    assert installed(units) == [] and not calls.exists()


def test_unit_tool_refuses_an_instance(tmp_path):
    """APACHE_CONFDIR=/etc/apache2-NAME is apache2@NAME.service: its Listen
    addresses must not go into apache2.socket."""
    env, units, calls = fake_tools(tmp_path, "")
    env["APACHE_CONFDIR"] = "/etc/apache2-other"
    for command in ("enable", "disable", "status"):
        proc = unit_tool(command, env)
        assert proc.returncode == 1, (command, proc.stdout)
        assert "instance apache2@other" in proc.stderr, command
    assert installed(units) == [] and not calls.exists()


def test_unit_tool_enable_refused_without_systemd(tmp_path):
    """No running systemd: refused before anything is written (systemctl's
    enable would work offline, its daemon-reload would not)."""
    env, units, calls = fake_tools(tmp_path, "")
    env["BUCKETED_SYSTEMD_RUNTIME"] = str(tmp_path / "absent")
    proc = unit_tool("enable", env)
    assert proc.returncode == 1, proc.stdout
    assert "systemd is not running" in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert installed(units) == [] and not calls.exists()


def test_unit_tool_disable_without_systemd(tmp_path):
    """Enabled while systemd ran, disabled without it (a chroot, a package
    removal in an image): every file goes, the enable link too, or the next
    boot would start a socket unit holding the ports for Debian's unit."""
    env, units, _ = fake_tools(tmp_path, "GracefulShutdownTimeout 100\n")
    assert unit_tool("enable", env).returncode == 0
    assert len(installed(units)) == 4
    (tmp_path / "run-systemd-system").rmdir()
    proc = unit_tool("disable", env)
    assert proc.returncode == 0, proc.stderr
    assert "systemd is not running" in proc.stdout
    assert installed(units) == []


@pytest.mark.parametrize("failing", ["daemon-reload", "enable"])
def test_unit_tool_enable_puts_back(tmp_path, failing):
    """systemctl fails: every file is put back as it was, on a first enable
    (nothing left) and on a second one after a Listen change (the first
    one's files)."""
    env, units, _ = fake_tools(tmp_path, "")
    env["FAIL_SYSTEMCTL"] = failing
    proc = unit_tool("enable", env)
    assert proc.returncode == 1, proc.stdout
    assert installed(units) == []
    assert "put back" in proc.stderr

    env_ok = dict(env, FAIL_SYSTEMCTL="")
    assert unit_tool("enable", env_ok).returncode == 0
    before = {name: (units / name).read_bytes() if not
              (units / name).is_symlink() else "link"
              for name in installed(units)}
    (tmp_path / "apache2.conf").write_text(
        (tmp_path / "apache2.conf").read_text() +
        "ListenBacklog 64\nGracefulShutdownTimeout 300\n")
    proc = unit_tool("enable", env)
    assert proc.returncode == 1, proc.stdout
    assert {name: (units / name).read_bytes() if not
            (units / name).is_symlink() else "link"
            for name in installed(units)} == before


def test_unit_tool_disable_when_systemctl_fails(tmp_path):
    """A daemon-reload that fails after the drop-in is gone: the socket
    unit and its enable link go too (never a drop-in removed with
    apache2.socket left enabled), the socket is not stopped (systemd still
    has the drop-in's Requires=, stopping it would stop apache2), and the
    tool says what is left to do."""
    env, units, calls = fake_tools(tmp_path, "")
    assert unit_tool("enable", env).returncode == 0
    env["FAIL_SYSTEMCTL"] = "daemon-reload"
    proc = unit_tool("disable", env)
    assert proc.returncode == 1, proc.stdout
    assert installed(units) == []
    assert "left to do: systemctl daemon-reload && systemctl stop " \
           "apache2.socket && systemctl restart apache2" in proc.stderr
    assert "--now" not in calls.read_text()


def fake_debian_mpms(tmp_path):
    """A confdir with mpm_bucketed enabled and mpm_prefork available, and
    a2enmod, a2dismod and apache2ctl that only record their arguments."""
    confdir = tmp_path / "apache2"
    for sub in ("mods-available", "mods-enabled"):
        (confdir / sub).mkdir(parents=True)
    for mpm in ("mpm_bucketed", "mpm_prefork"):
        (confdir / "mods-available" / f"{mpm}.load").write_text(
            f"LoadModule {mpm}_module /nonexistent/mod_{mpm}.so\n")
    (confdir / "mods-enabled/mpm_bucketed.load").symlink_to(
        "../mods-available/mpm_bucketed.load")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "tools.calls"
    for tool in ("a2enmod", "a2dismod", "apache2ctl"):
        (bin_dir / tool).write_text(
            f"#!/bin/sh\necho \"{tool} $*\" >> '{calls}'\n")
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/bin",
           "APACHE_CONFDIR": str(confdir)}
    return env, calls


SWITCH_MPM = TOP / "dist/debian/bucketed-switch-mpm"


def test_switch_mpm_refuses_stock_mpm_with_socket_units(tmp_path):
    """With the socket units installed a stock MPM cannot start (systemd
    holds the ports, nothing sends READY=1): refused, nothing run, and the
    message says how to disable them first. Without them it switches."""
    env, calls = fake_debian_mpms(tmp_path)
    tool_env, units, _ = fake_tools(tmp_path, "")
    assert unit_tool("enable", tool_env).returncode == 0
    env["BUCKETED_UNIT_DIR"] = str(units)
    proc = subprocess.run([str(SWITCH_MPM), "prefork"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc.stdout
    assert "bucketed-socket-units disable" in proc.stderr
    assert not calls.exists()

    assert unit_tool("disable", tool_env).returncode == 0
    proc = subprocess.run([str(SWITCH_MPM), "prefork"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().splitlines()[:2] == [
        "a2dismod -q mpm_bucketed", "a2enmod -q mpm_prefork"]
