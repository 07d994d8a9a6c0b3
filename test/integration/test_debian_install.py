"""The Debian path: `make install`, then a2dismod mpm_prefork, a2enmod
mpm_bucketed, configtest, serving, a2dismod, and prefork is back.

Everything runs against a scratch copy of /etc/apache2: a2enmod, a2dismod and
apache2ctl read APACHE_CONFDIR, a2enmod keeps its state markers under
APACHE_STATE_DIRECTORY, and the copied envvars put the pid file, logs and
locks in the scratch directory. The live /etc/apache2 and /var/lib/apache2
are compared before and after every test.

Environment: BUCKETED_TOP (repository root, default: two levels above this
file), BUCKETED_BUILD (configured build directory, default BUCKETED_TOP).
A missing tool fails the test with a message; nothing is skipped.
"""
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from httpd_fixture import (START_TIMEOUT, STOP_TIMEOUT, Timeout, alive, children_of,
                           free_ports, http_get, wait_until)

TOP = Path(os.environ.get("BUCKETED_TOP") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("BUCKETED_BUILD") or TOP)
LIVE_CONFDIR = Path("/etc/apache2")
LIVE_STATEDIR = Path("/var/lib/apache2")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = ("a2enmod", "a2dismod", "apache2ctl", "apache2", "apxs", "make")
MODULES = ("mod_mpm_bucketed.so", "mod_bucketed_status.so")
DEBIAN_FILES = ("mpm_bucketed.load", "mpm_bucketed.conf",
                "bucketed_status.load", "bucketed_status.conf")
OTHER_MPMS = ("mpm_event", "mpm_worker", "mpm_prefork")


def require_tools():
    missing = [t for t in TOOLS if shutil.which(t, path=SYSTEM_PATH) is None]
    if missing:
        pytest.fail("missing tools: %s (scripts/deps.sh installs apache2, "
                    "apache2-dev, make)" % " ".join(missing))
    if not (LIVE_CONFDIR / "mods-available").is_dir():
        pytest.fail("%s/mods-available is missing: the Debian apache2 package "
                    "is needed" % LIVE_CONFDIR)
    if not (BUILD / "Makefile").is_file():
        pytest.fail("no Makefile in BUCKETED_BUILD=%s: run scripts/build.sh" % BUILD)
    if os.geteuid() != 0:
        pytest.fail("must run as root: httpd switches to APACHE_RUN_USER")


def run(cmd, env, check=True, timeout=120):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail("%s exited with %d:\n%s"
                    % (" ".join(map(str, cmd)), proc.returncode, proc.stdout))
    return proc


def apxs_query(var):
    return subprocess.run(["apxs", "-q", var], stdout=subprocess.PIPE, text=True,
                          check=True, env={"PATH": SYSTEM_PATH}).stdout.strip()


def make_env():
    """The caller's environment without a parent make's jobserver settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES",
                        "APACHE_CONFDIR", "DESTDIR")}
    env["PATH"] = SYSTEM_PATH + ":" + env.get("PATH", "")
    return env


def make(target, *args):
    return run(["make", "-C", str(BUILD), target] + list(args), make_env())


def tree_snapshot(root):
    """Every path under root with its link target or size and mtime."""
    if not root.exists():
        return {}
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            snap[str(path)] = (os.readlink(path) if path.is_symlink()
                               else (st.st_size, st.st_mtime_ns))
    return snap


class Scratch:
    """A copy of /etc/apache2 whose envvars keep run-time files inside it."""

    def __init__(self, root):
        self.root = root
        self.confdir = root / "apache2"
        self.moduledir = root / "modules"
        self.logdir = root / "log"
        self.pidfile = root / "run" / "apache2.pid"
        self.htdocs = root / "htdocs"
        self.port = None
        self.started = []          # parents to stop if a test fails
        shutil.copytree(LIVE_CONFDIR, self.confdir, symlinks=True)
        for d in (self.moduledir, self.logdir, root / "state", self.htdocs):
            d.mkdir()
        (self.htdocs / "index.html").write_text("bucketed on Debian\n")
        with open(self.confdir / "envvars", "a") as f:
            f.write("\n# bucketed test: run-time files in the scratch tree\n")
            f.write("export APACHE_RUN_DIR=%s\n" % (root / "run"))
            f.write("export APACHE_PID_FILE=%s\n" % self.pidfile)
            f.write("export APACHE_LOCK_DIR=%s\n" % (root / "lock"))
            f.write("export APACHE_LOG_DIR=%s\n" % self.logdir)
        for site in (self.confdir / "sites-enabled").iterdir():
            site.unlink()
        (self.confdir / "sites-enabled" / "bucketed-test.conf").write_text(
            "ServerName 127.0.0.1\n"
            "DocumentRoot %s\n"
            "<Directory %s>\n    Require all granted\n</Directory>\n"
            % (self.htdocs, self.htdocs))
        self.set_port(free_ports(1)[0])
        self.env = {"PATH": SYSTEM_PATH, "LANG": "C",
                    "APACHE_CONFDIR": str(self.confdir),
                    "APACHE_STATE_DIRECTORY": str(root / "state")}

    def set_port(self, port):
        self.port = port
        (self.confdir / "ports.conf").write_text("Listen 127.0.0.1:%d\n" % port)

    def enabled_mpms(self):
        return sorted(p.name[:-len(".load")]
                      for p in (self.confdir / "mods-enabled").glob("mpm_*.load"))

    def a2(self, tool, module, check=True):
        return run([tool, "-q", module], self.env, check=check)

    def use_only_mpm(self, mpm):
        """Whatever the live configuration enables, start from this MPM."""
        for enabled in self.enabled_mpms():
            self.a2("a2dismod", enabled)
        self.a2("a2enmod", mpm)
        assert self.enabled_mpms() == [mpm]

    def ctl(self, *args, check=True):
        return run(["apache2ctl"] + list(args), self.env, check=check)

    def install(self):
        make("install", "APXS_LIBEXECDIR=%s" % self.moduledir,
             "APACHE_CONFDIR=%s" % self.confdir)

    def error_log(self):
        log = self.logdir / "error.log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else "(no error log)"

    def start(self):
        """apache2ctl -k start (not `start`, which hands over to systemd when
        it runs the machine); returns the parent's pid from the PidFile."""
        for _ in range(3):
            proc = self.ctl("-k", "start", check=False)
            if proc.returncode == 0:
                try:
                    pid = wait_until(self.serving_pid, START_TIMEOUT,
                                     what="httpd to answer on port %d" % self.port)
                except Timeout as err:
                    pytest.fail("%s\n%s" % (err, self.error_log()))
                self.started.append(pid)
                return pid
            if "Address already in use" not in proc.stdout + self.error_log():
                break
            self.set_port(free_ports(1)[0])
        pytest.fail("apache2ctl -k start failed:\n%s\n%s" % (proc.stdout, self.error_log()))

    def serving_pid(self):
        """The pid in the PidFile once httpd answers, else None."""
        text = self.pidfile.read_text().strip()
        return int(text) if text and http_get(self.port, "/") else None


def child_users(pid):
    return [pwd.getpwuid(os.stat("/proc/%d" % child).st_uid).pw_name
            for child in children_of(pid)]


def stop(scratch, pid):
    """SIGTERM to the parent: it and its children must go, and the MPM must
    log nothing at warn or above (a slow stop logs that children ignored
    SIGTERM)."""
    os.kill(pid, signal.SIGTERM)
    scratch.started.remove(pid)
    try:
        wait_until(lambda: not alive(pid) and not children_of(pid), STOP_TIMEOUT,
                   what="httpd %d and its children to exit" % pid)
    except Timeout as err:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("%s\n%s" % (err, scratch.error_log()))
    bad = re.findall(r"^.*\[mpm_bucketed:(?:warn|error|crit|alert|emerg)\].*$",
                     scratch.error_log(), re.M)
    assert bad == [], "\n".join(bad)


@pytest.fixture
def scratch():
    require_tools()
    live_before = (tree_snapshot(LIVE_CONFDIR), tree_snapshot(LIVE_STATEDIR))
    # 0755, not pytest's 0700 tmp_path: the children, as www-data, read htdocs.
    root = Path(tempfile.mkdtemp(prefix="bucketed-debian-"))
    root.chmod(0o755)
    sc = Scratch(root)
    try:
        yield sc
    finally:
        for pid in list(sc.started):
            try:
                os.kill(pid, signal.SIGTERM)
                wait_until(lambda: not alive(pid), STOP_TIMEOUT, what="httpd %d to exit" % pid)
            except ProcessLookupError:
                pass
        shutil.rmtree(root)
    assert (tree_snapshot(LIVE_CONFDIR), tree_snapshot(LIVE_STATEDIR)) == live_before, \
        "the live /etc/apache2 or /var/lib/apache2 changed"


def test_destdir_install_and_uninstall(scratch):
    destdir = scratch.root / "destdir"
    libexecdir = apxs_query("LIBEXECDIR")
    mods = destdir / apxs_query("SYSCONFDIR").lstrip("/") / "mods-available"
    make("install", "DESTDIR=%s" % destdir)

    for module in MODULES:
        assert (destdir / libexecdir.lstrip("/") / module).is_file(), module
    assert sorted(p.name for p in mods.iterdir()) == sorted(DEBIAN_FILES)
    load = (mods / "mpm_bucketed.load").read_text().splitlines()
    conflicts = load[0].split(":", 1)
    assert conflicts[0] == "# Conflicts", load
    assert sorted(conflicts[1].split()) == sorted(OTHER_MPMS)
    assert ("LoadModule mpm_bucketed_module %s/mod_mpm_bucketed.so" % libexecdir) in load
    for conf in ("mpm_bucketed.conf", "bucketed_status.conf"):
        assert (mods / conf).read_text() == (TOP / "dist/debian" / conf).read_text()

    make("uninstall", "DESTDIR=%s" % destdir)
    left = [p for p in destdir.rglob("*") if not p.is_dir()]
    assert left == [], "make uninstall left %s" % left


def test_conf_has_every_directive_with_a_comment():
    conf = (TOP / "dist/debian/mpm_bucketed.conf").read_text().splitlines()
    settings = dict(line.split(None, 1) for line in conf if line and not line.startswith("#"))
    assert settings == {
        "StartServers": "5", "MinSpareServers": "5", "MaxSpareServers": "10",
        "MaxRequestWorkers": "150", "MaxConnectionsPerChild": "0",
        "BucketStrategy": "auto", "BucketCount": "auto"}
    comments = "\n".join(line for line in conf if line.startswith("#"))
    for directive in settings:
        assert "# %s:" % directive in comments, directive


def test_switch_to_bucketed_and_back(scratch):
    scratch.use_only_mpm("mpm_prefork")
    scratch.install()

    refused = scratch.a2("a2enmod", "mpm_bucketed", check=False)
    assert refused.returncode != 0 and "conflict" in refused.stdout.lower(), refused.stdout
    assert scratch.enabled_mpms() == ["mpm_prefork"]

    scratch.a2("a2dismod", "mpm_prefork")
    scratch.a2("a2enmod", "mpm_bucketed")
    assert scratch.enabled_mpms() == ["mpm_bucketed"]
    assert (scratch.confdir / "mods-enabled/mpm_bucketed.conf").is_symlink()
    assert "Syntax OK" in scratch.ctl("configtest").stdout
    info = scratch.ctl("-V").stdout
    assert any(line.split() == ["Server", "MPM:", "bucketed"] for line in info.splitlines()), info
    assert "mpm_bucketed_module (shared)" in scratch.ctl("-M").stdout

    pid = scratch.start()
    status, body = http_get(scratch.port, "/index.html")
    assert (status, body) == (200, b"bucketed on Debian\n")
    users = child_users(pid)
    assert users and set(users) == {"www-data"}, "children of %d run as %s" % (pid, users)
    refused = run(["make", "-C", str(BUILD), "uninstall",
                   "APXS_LIBEXECDIR=%s" % scratch.moduledir,
                   "APACHE_CONFDIR=%s" % scratch.confdir], make_env(), check=False)
    assert refused.returncode != 0 and "a2dismod mpm_bucketed" in refused.stdout, refused.stdout
    assert (scratch.moduledir / "mod_mpm_bucketed.so").exists()
    stop(scratch, pid)

    scratch.a2("a2dismod", "mpm_bucketed")
    scratch.a2("a2enmod", "mpm_prefork")
    assert scratch.enabled_mpms() == ["mpm_prefork"]
    assert "Syntax OK" in scratch.ctl("configtest").stdout
    assert any(line.split() == ["Server", "MPM:", "prefork"]
               for line in scratch.ctl("-V").stdout.splitlines())

    make("uninstall", "APXS_LIBEXECDIR=%s" % scratch.moduledir,
         "APACHE_CONFDIR=%s" % scratch.confdir)
    assert list(scratch.moduledir.iterdir()) == []
    for name in DEBIAN_FILES:
        assert not (scratch.confdir / "mods-available" / name).exists(), name


def test_status_module_enables(scratch):
    scratch.install()
    scratch.use_only_mpm("mpm_bucketed")
    scratch.a2("a2enmod", "bucketed_status")
    assert "bucketed_status_module (shared)" in scratch.ctl("-M").stdout
    pid = scratch.start()
    status, body = http_get(scratch.port, "/bucketed-status")
    assert status == 200 and b"mpm=bucketed" in body, (status, body)
    stop(scratch, pid)
