# SPDX-License-Identifier: Apache-2.0
"""The Debian package (debian/): built from a copy of the tree in a
temporary directory, checked by lintian, installed with apt-get on this
machine, switched on in Debian's real apache2, serving on port 80, switched
back and purged.

Unlike test_debian_install.py and test_debian_php.py, which work in scratch
configuration trees, this test changes the live /etc/apache2: that is what
a package does. A fixture saves /etc/apache2 and /var/lib/apache2 (a2enmod's
state markers) beforehand and puts them back afterwards whatever happened,
with any file of the package's paths that a `make install` had put there;
then the two listings (every path with its type, mode, link target or size,
and mtime) must equal the ones taken before. The apache2 this test starts
is stopped by its pid, and no process of it may be left.

It fails, rather than touching anything, when the package is already
installed, when Debian's apache2 is running, when port 80 is taken, or when
mpm_bucketed is the enabled MPM (the test must switch from another one).

Environment: BUCKETED_TOP (repository root, default: two levels above this
file). Root is needed. A missing tool fails the test; nothing is skipped.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from debian_scratch import SYSTEM_PATH, TOP, make_env, wait_children_dropped
from httpd_fixture import (START_TIMEOUT, STOP_TIMEOUT, Timeout, alive, http_get,
                           wait_until)

PACKAGE = "libapache2-mod-mpm-bucketed"
TOOLS = ("dpkg-buildpackage", "dpkg-source", "dpkg-parsechangelog", "dpkg-deb",
         "dpkg-query", "lintian", "apt-get", "a2enmod", "a2dismod", "a2query",
         "apache2ctl", "git")
CONFDIR = Path("/etc/apache2")
STATEDIR = Path("/var/lib/apache2")
ENABLED = CONFDIR / "mods-enabled"
PIDFILE = Path("/var/run/apache2/apache2.pid")
ERROR_LOG = Path("/var/log/apache2/error.log")
MODULE_SO = "/usr/lib/apache2/modules/mod_mpm_bucketed.so"
SWITCH_MPM = "/usr/sbin/bucketed-switch-mpm"
OUR_MODULES = ("mpm_bucketed", "bucketed_status")
APT_ENV = {"PATH": SYSTEM_PATH, "LANG": "C", "DEBIAN_FRONTEND": "noninteractive"}
# A conffile left by an earlier `make install` (unowned, maybe changed)
# must neither make dpkg ask nor be overwritten.
APT_OPTS = ["-y", "-q", "-o", "DPkg::Lock::Timeout=600",
            "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]


def run(cmd, env=None, check=True, timeout=300, cwd=None):
    proc = subprocess.run([str(c) for c in cmd], env=env or APT_ENV, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail("%s exited with %d:\n%s" % (" ".join(map(str, cmd)), proc.returncode,
                                                 proc.stdout[-6000:]))
    return proc


def listing(root):
    """Every path under root (root included): the link target of a link,
    else the mode, mtime and (files) size. A directory's size is left out:
    it grows with entries and does not shrink when they go."""
    snap = {}
    for path in [root] + [Path(d, n) for d, ds, fs in os.walk(root) for n in ds + fs]:
        st = path.lstat()
        if path.is_symlink():
            snap[str(path)] = ("link", os.readlink(path))
        else:
            size = None if path.is_dir() else st.st_size
            snap[str(path)] = (oct(st.st_mode), st.st_mtime_ns, size)
    return snap


def package_installed():
    proc = run(["dpkg-query", "-W", "-f=${Status}", PACKAGE], check=False)
    return proc.returncode == 0 and "installed" in proc.stdout.split()[-1:]


def enabled_mpms():
    return sorted(p.name[:-len(".load")] for p in ENABLED.glob("mpm_*.load"))


def depends_on(module):
    """Enabled modules whose .load header says "# Depends: ... module"."""
    found = []
    for load in ENABLED.glob("*.load"):
        for line in load.read_text(errors="replace").splitlines():
            if line.strip() and not line.startswith("#"):
                break
            fields = line.split(":", 1)
            if fields[0].strip() == "# Depends" and module in fields[1].split():
                found.append(load.name[:-len(".load")])
    return sorted(found)


def server_mpm():
    info = run(["apache2ctl", "-V"]).stdout
    found = re.findall(r"^Server MPM:\s+(\S+)\s*$", info, re.M)
    assert len(found) == 1, info
    return found[0]


def port_80_free():
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("0.0.0.0", 80))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def running_apache2():
    """The pid in Debian's PidFile if that process runs, else None."""
    try:
        pid = int(PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def process_group(pgrp):
    """Live processes of a process group: `apache2 -k start` detaches into
    a session and group of its own, which its children keep, and they stay
    in it even after the parent is gone."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path("/proc", entry, "stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgrp:
            found.append(int(entry))
    return found


def stop_apache2(pid):
    """SIGTERM to the parent; it and every process of its group must go."""
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: not process_group(pid), STOP_TIMEOUT,
                   what="apache2 %d and its children to exit" % pid)
    except Timeout:
        for left in process_group(pid):
            os.kill(left, signal.SIGKILL)
        raise


# ------------------------------------------------------------ the package

def copy_tree(dest):
    """The tree as git sees it (tracked and new files, not the ignored build
    products), with the working copy's contents."""
    listed = run(["git", "-C", TOP, "ls-files", "-z", "--cached", "--others",
                  "--exclude-standard"]).stdout.split("\0")
    for name in filter(None, listed):
        src = TOP / name
        if not os.path.lexists(src):
            continue              # deleted in the working copy
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)


@pytest.fixture(scope="module")
def built():
    """{"deb": the package, "dsc": the source package, "changes": the
    binary build's .changes}, built in a temporary directory."""
    if os.geteuid() != 0:
        pytest.fail("must run as root: the test installs a package")
    missing = [t for t in TOOLS if shutil.which(t, path=SYSTEM_PATH) is None]
    if missing:
        pytest.fail("missing tools: %s (scripts/deps.sh installs them)" % " ".join(missing))
    work = Path(tempfile.mkdtemp(prefix="bucketed-deb-"))
    try:
        version = run(["dpkg-parsechangelog", "-l", TOP / "debian/changelog",
                       "-S", "Version"]).stdout.strip()
        src = work / ("bucketed-" + version)
        src.mkdir()
        copy_tree(src)
        # The source package first, from the clean copy; then the binaries.
        run(["dpkg-source", "-b", src.name], cwd=work)
        # Without a parent make's jobserver (make check runs this test).
        env = make_env()
        env.pop("DEB_BUILD_OPTIONS", None)
        run(["dpkg-buildpackage", "-us", "-uc", "-b"], env=env, cwd=src, timeout=1200)
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        result = {"deb": work / ("%s_%s_%s.deb" % (PACKAGE, version, arch)),
                  "dsc": work / ("bucketed_%s.dsc" % version),
                  "changes": work / ("bucketed_%s_%s.changes" % (version, arch))}
        for path in result.values():
            assert path.is_file(), "%s was not built: %s" % (path, os.listdir(work))
        yield result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_lintian_is_clean(built):
    """No error and no warning on the source or the binary packages; the
    kept tags are overridden in debian/ with their reasons."""
    out = run(["lintian", "--pedantic", built["dsc"], built["changes"]],
              check=False, timeout=600).stdout
    bad = [line for line in out.splitlines() if re.match(r"^[EW]: ", line)]
    assert bad == [], "lintian:\n" + out


def test_control_fields(built):
    """dh_apache2 computed the module ABI dependency; apache2 itself is not
    a dependency (the module needs apache2-bin's ABI, not the service)."""
    fields = run(["dpkg-deb", "-f", built["deb"], "Depends", "Package"]).stdout
    depends = re.search(r"^Depends: (.*)$", fields, re.M).group(1)
    names = [alt.split()[0] for dep in depends.split(",") for alt in dep.split("|")]
    assert "apache2-api-20120211" in names, depends
    assert "apache2" not in names, depends
    listed = run(["dpkg-deb", "-c", built["deb"]]).stdout
    for path in (MODULE_SO, "/usr/lib/apache2/modules/mod_bucketed_status.so",
                 "/etc/apache2/mods-available/mpm_bucketed.load",
                 "/etc/apache2/mods-available/mpm_bucketed.conf",
                 "/etc/apache2/mods-available/bucketed_status.load",
                 "/etc/apache2/mods-available/bucketed_status.conf",
                 SWITCH_MPM, "/usr/sbin/bucketed-socket-units",
                 "/usr/libexec/bucketed/apache2-foreground",
                 "/usr/share/bucketed/systemd/bucketed-socket.conf"):
        assert " ." + path + "\n" in listed, "%s is not in the package:\n%s" % (path, listed)


# ------------------------------------------------------------ the machine

class Machine:
    """The live apache2 configuration as it was before the test, to put
    back afterwards."""

    def __init__(self, deb):
        self.backup = Path(tempfile.mkdtemp(prefix="bucketed-deb-backup-"))
        self.listings = {root: listing(root) for root in (CONFDIR, STATEDIR)}
        self.copies = {CONFDIR: self.backup / "etc", STATEDIR: self.backup / "state"}
        self.started = []
        for root, copy in self.copies.items():
            shutil.copytree(root, copy, symlinks=True)
        # Files at the package's own paths (outside /etc/apache2) that were
        # there before, e.g. from `make install`: the purge removes them.
        self.others = {}
        for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines():
            path = Path(line.split()[-1].lstrip("."))
            if line.startswith("-") and CONFDIR not in path.parents and path.is_file():
                self.others[path] = self.backup / "others" / path.relative_to("/")
                self.others[path].parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, self.others[path])

    def restore(self):
        for pid in self.started:
            if process_group(pid):
                stop_apache2(pid)
        if package_installed():
            run(["apt-get", "purge"] + APT_OPTS + [PACKAGE], check=False)
        for root, copy in self.copies.items():
            sync_tree(copy, root, self.listings[root])
        for path, saved in self.others.items():
            shutil.copy2(saved, path)
        shutil.rmtree(self.backup)


def sync_tree(saved, live, before):
    """Makes live what it was when before was taken, from its copy saved:
    paths added since are removed, changed or missing ones copied back,
    and every mtime set again (a2enmod's links and markers are new files)."""
    for dirpath, dirs, files in os.walk(live, topdown=False):
        for name in files + dirs:
            path = Path(dirpath, name)
            if str(path) not in before:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
    for path_name, state in sorted(before.items()):
        path = Path(path_name)
        copy = saved / path.relative_to(live)
        if state[0] == "link":
            if not path.is_symlink() or os.readlink(path) != state[1]:
                if os.path.lexists(path):
                    path.unlink()
                path.symlink_to(state[1])
        elif copy.is_dir():
            path.mkdir(exist_ok=True)
            os.chmod(path, int(state[0], 8) & 0o7777)
        elif not path.is_file() or path.read_bytes() != copy.read_bytes():
            if os.path.lexists(path):
                path.unlink()
            shutil.copy2(copy, path)
    # Deepest first: setting a directory's entries changes its mtime.
    for path_name, state in sorted(before.items(), key=lambda kv: -kv[0].count("/")):
        if state[0] == "link":
            mtime = Path(saved, Path(path_name).relative_to(live)).lstat().st_mtime_ns
        else:
            mtime = state[1]
        os.utime(path_name, ns=(mtime, mtime), follow_symlinks=False)


@pytest.fixture
def machine(built):
    if package_installed():
        pytest.fail("%s is installed already: purge it first (apt-get purge %s)"
                    % (PACKAGE, PACKAGE))
    if running_apache2():
        pytest.fail("Debian's apache2 is running (pid %d): stop it first" % running_apache2())
    if not port_80_free():
        pytest.fail("port 80 is taken: the test serves Debian's default site there")
    mpms = enabled_mpms()
    if len(mpms) != 1 or mpms == ["mpm_bucketed"]:
        pytest.fail("expected one MPM other than mpm_bucketed enabled in %s, found %s"
                    % (ENABLED, mpms))
    saved = Machine(built["deb"])
    try:
        yield saved
    finally:
        saved.restore()
        after = {root: listing(root) for root in (CONFDIR, STATEDIR)}
        assert after == saved.listings, \
            "/etc/apache2 or /var/lib/apache2 differs from before the test"


def install(deb):
    run(["apt-get", "install"] + APT_OPTS + [deb])
    assert package_installed()


def purge_and_check_gone():
    """apt-get purge; none of the package's files and directories, no
    mpm_bucketed or bucketed_status link or a2enmod state left."""
    owned = run(["dpkg-query", "-L", PACKAGE]).stdout.splitlines()
    run(["apt-get", "purge"] + APT_OPTS + [PACKAGE])
    assert not package_installed()
    left = [p for p in owned if os.path.lexists(p)
            and (not os.path.isdir(p) or "bucketed" in p)]
    assert left == [], "the purge left %s" % left
    for module in OUR_MODULES:
        assert not list(ENABLED.glob(module + ".*")), "%s is still enabled" % module
        assert not list(STATEDIR.glob("module/*/" + module)), "a2enmod state of %s" % module


def start_and_serve():
    """apache2ctl -k start (`start` would hand over to systemd where it
    runs the machine); waits for a 200 from 127.0.0.1:80 and returns the
    parent's pid."""
    log_size = ERROR_LOG.stat().st_size if ERROR_LOG.exists() else 0
    out = run(["apache2ctl", "-k", "start"]).stdout
    try:
        pid = wait_until(running_apache2, START_TIMEOUT, what="apache2's pid file")
        status, body = wait_until(lambda: http_get(80, "/"), START_TIMEOUT,
                                  what="apache2 to answer on 127.0.0.1:80")
    except Timeout as err:
        pytest.fail("%s\n%s\n%s" % (err, out, error_log_since(log_size)))
    return pid, status, log_size


def error_log_since(offset):
    if not ERROR_LOG.exists():
        return "(no error log)"
    with open(ERROR_LOG, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def test_install_switch_serve_back_purge(built, machine):
    before_mpm = enabled_mpms()[0]
    before_links = {p.name: os.readlink(p) for p in ENABLED.iterdir()}

    install(built["deb"])
    # Installed, not enabled: the MPM in use stays.
    assert enabled_mpms() == [before_mpm]
    for module in OUR_MODULES:
        assert (CONFDIR / "mods-available" / (module + ".load")).is_file()
        assert run(["a2query", "-m", module], check=False).returncode != 0, module

    # mod_php's php8.2.load depends on mpm_prefork: a2dismod refuses to
    # disable it, bucketed-switch-mpm keeps PHP enabled.
    keep = depends_on(before_mpm) if before_mpm == "mpm_prefork" else []
    if keep:
        refused = run(["a2dismod", before_mpm], check=False)
        assert refused.returncode != 0, refused.stdout
        run([SWITCH_MPM, "bucketed"])
    else:
        run(["a2dismod", before_mpm])
        run(["a2enmod", "mpm_bucketed"])
    assert enabled_mpms() == ["mpm_bucketed"]
    assert depends_on("mpm_prefork") == keep
    run(["apache2ctl", "configtest"])
    assert server_mpm() == "bucketed"

    pid, status, log_size = start_and_serve()
    machine.started.append(pid)
    assert status == 200
    assert MODULE_SO in Path("/proc/%d/maps" % pid).read_text(), \
        "the running apache2 has not loaded %s" % MODULE_SO
    wait_children_dropped(pid)
    stop_apache2(pid)
    bad = re.findall(r"^.*\[mpm_bucketed:(?:warn|error|crit|alert|emerg)\].*$",
                     error_log_since(log_size), re.M)
    assert bad == [], "\n".join(bad)

    # Back, as docs/building.md says: bucketed off first (Debian's .load
    # files do not list it as a conflict).
    run(["a2dismod", "mpm_bucketed"])
    run(["a2enmod", before_mpm])
    assert {p.name: os.readlink(p) for p in ENABLED.iterdir()} == before_links
    assert server_mpm() == before_mpm[len("mpm_"):]

    purge_and_check_gone()


def test_purge_while_enabled(built, machine):
    """Removing the package while mpm_bucketed is the enabled MPM: prerm
    puts mpm_prefork in its place, dh_apache2's snippets disable bucketed
    (prerm) and forget it (postrm purge). apache2 is left with one MPM and
    a configuration that passes."""
    before_mpm = enabled_mpms()[0]
    install(built["deb"])
    if depends_on(before_mpm) and before_mpm == "mpm_prefork":
        run([SWITCH_MPM, "bucketed"])
    else:
        run(["a2dismod", before_mpm])
        run(["a2enmod", "mpm_bucketed"])
    assert enabled_mpms() == ["mpm_bucketed"]
    # With the socket activation units on: prerm takes them out (with no
    # systemd running here, without asking it).
    units = [Path("/etc/systemd/system/apache2.socket"),
             Path("/etc/systemd/system/apache2.service.d/"
                  "bucketed-socket.conf")]
    try:
        # enable refuses without a running systemd: an existing directory
        # stands for /run/systemd/system, `true` for systemctl.
        run(["bucketed-socket-units", "enable"],
            env={**os.environ, "BUCKETED_SYSTEMCTL": "true",
                 "BUCKETED_SYSTEMD_RUNTIME": "/etc"})
        assert all(u.exists() for u in units), units

        purge_and_check_gone()
        assert not any(u.exists() for u in units), units
    finally:
        for u in units:
            u.unlink(missing_ok=True)
    # The maintscript helper restarts apache2 through invoke-rc.d when the
    # configuration passes (and policy-rc.d allows it): stop it again.
    pid = running_apache2()
    if pid:
        machine.started.append(pid)
    assert enabled_mpms() == ["mpm_prefork"]
    run(["apache2ctl", "configtest"])
