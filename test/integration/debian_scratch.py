# SPDX-License-Identifier: Apache-2.0
"""
debian_scratch: a scratch Debian apache2 configuration tree for the tests of
the Debian path (test_debian_*.py), built from the packages' own files, not
from the machine's /etc/apache2, so that what the machine has installed or
enabled (mod_php, another MPM) does not change the results.

The tree starts as the /etc/apache2 of the installed apache2 package's .deb
(`apt-get download apache2=<installed version>`, `dpkg-deb -x`; its
conffiles are checked against the checksums dpkg recorded at installation),
plus the /etc/apache2 files of further packages (libapache2-mod-php8.2's
php8.2.load and .conf). Then the modules, configurations and MPM that
apache2's postinst enables on a fresh install are enabled in it, with
a2enmod -m as the postinst does.

a2enmod, a2dismod and apache2ctl read APACHE_CONFDIR; a2enmod keeps its
state markers under APACHE_STATE_DIRECTORY; the tree's envvars put the pid
file, logs and locks inside it. The live /etc/apache2 and /var/lib/apache2
are compared before and after every test (the make_scratch fixture).

Environment: BUCKETED_TOP (repository root, default: two levels above this
file), BUCKETED_BUILD (configured build directory, default BUCKETED_TOP).
A missing tool or package fails the test with a message; nothing is skipped.
"""
import atexit
import hashlib
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
                           free_ports, http_get, uids, wait_until)

TOP = Path(os.environ.get("BUCKETED_TOP") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("BUCKETED_BUILD") or TOP)
LIVE_CONFDIR = Path("/etc/apache2")
LIVE_STATEDIR = Path("/var/lib/apache2")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = ("a2enmod", "a2dismod", "apache2ctl", "apache2", "apxs", "make",
         "apt-get", "dpkg-deb", "dpkg-query")
RUN_USER = "www-data"
SWITCH_MPM = "bucketed-switch-mpm"

# What apache2's postinst enables on a fresh install (enable_default_mpm,
# enable_default_modules, enable_default_conf); a2enmod adds the
# dependencies (authz_core, authn_core).
FRESH_MPM = "mpm_event"
FRESH_MODULES = ("authz_host", "auth_basic", "access_compat", "authn_file",
                 "authz_user", "alias", "dir", "autoindex", "env", "mime",
                 "negotiation", "setenvif", "filter", "deflate", "status",
                 "reqtimeout")
FRESH_CONFS = ("charset", "localized-error-pages", "other-vhosts-access-log",
               "security", "serve-cgi-bin")


def require_tools():
    missing = [t for t in TOOLS if shutil.which(t, path=SYSTEM_PATH) is None]
    if missing:
        pytest.fail("missing tools: %s (scripts/deps.sh installs apache2, "
                    "apache2-dev, make)" % " ".join(missing))
    if not (BUILD / "Makefile").is_file():
        pytest.fail("no Makefile in BUCKETED_BUILD=%s: run scripts/build.sh" % BUILD)
    if os.geteuid() != 0:
        pytest.fail("must run as root: httpd switches to APACHE_RUN_USER")


def run(cmd, env, check=True, timeout=120, cwd=None):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, cwd=cwd,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail("%s exited with %d:\n%s"
                    % (" ".join(map(str, cmd)), proc.returncode, proc.stdout))
    return proc


SYSTEM_ENV = {"PATH": SYSTEM_PATH, "LANG": "C"}


def apxs_query(var):
    return run(["apxs", "-q", var], SYSTEM_ENV).stdout.strip()


def make_env():
    """The caller's environment without a parent make's jobserver settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES",
                        "APACHE_CONFDIR", "DESTDIR")}
    env["PATH"] = SYSTEM_PATH + ":" + env.get("PATH", "")
    return env


def make(target, *args, check=True):
    return run(["make", "-C", str(BUILD), target] + list(args), make_env(), check=check)


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


# ------------------------------------------------------- package files

_extracted = {}        # package -> the root its .deb was extracted into
_download_dir = None


def installed_version(package):
    proc = run(["dpkg-query", "-W", "-f=${Status}\t${Version}", package],
               SYSTEM_ENV, check=False)
    status, _, version = proc.stdout.partition("\t")
    if proc.returncode != 0 or status != "install ok installed":
        pytest.fail("package %s is not installed (scripts/deps.sh installs it): %s"
                    % (package, proc.stdout.strip()))
    return version


def check_conffiles(package, root):
    """The extracted conffiles must be the ones dpkg installed: their
    checksums as dpkg recorded them at installation. (Not the live files:
    those are the admin's.)"""
    listing = run(["dpkg-query", "-W", "-f=${Conffiles}", package], SYSTEM_ENV).stdout
    checked = 0
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 2 or "obsolete" in fields[2:]:
            continue
        path, recorded = fields[0], fields[1]
        extracted = root / path.lstrip("/")
        assert extracted.is_file(), "%s's .deb has no %s" % (package, path)
        digest = hashlib.md5(extracted.read_bytes()).hexdigest()
        assert digest == recorded, \
            "%s in the downloaded %s differs from the installed package's" % (path, package)
        checked += 1
    assert checked > 0, "dpkg lists no conffiles of %s" % package


def package_root(package):
    """A directory holding the files of the installed version of package,
    extracted from its .deb (downloaded once per test process)."""
    global _download_dir
    if package in _extracted:
        return _extracted[package]
    version = installed_version(package)
    if _download_dir is None:
        _download_dir = Path(tempfile.mkdtemp(prefix="bucketed-debs-"))
        atexit.register(shutil.rmtree, _download_dir, True)
    debs = _download_dir / package / "debs"
    debs.mkdir(parents=True)
    got = run(["apt-get", "download", "%s=%s" % (package, version)], SYSTEM_ENV,
              check=False, cwd=debs, timeout=300)
    found = list(debs.glob("*.deb"))
    if got.returncode != 0 or len(found) != 1:
        pytest.fail("apt-get download %s=%s failed (apt-get update may help):\n%s"
                    % (package, version, got.stdout))
    root = _download_dir / package / "root"
    run(["dpkg-deb", "-x", str(found[0]), str(root)], SYSTEM_ENV)
    check_conffiles(package, root)
    _extracted[package] = root
    return root


# ------------------------------------------------------- processes

def wait_children_dropped(pid, user=RUN_USER):
    """Waits until the parent has children and every one of them has
    dropped its privileges to user (a child is root between fork and
    privilege drop). Returns {child: uids} as last seen."""
    uid = pwd.getpwnam(user).pw_uid
    seen = {}

    def dropped():
        seen.clear()
        seen.update((child, uids(child)) for child in children_of(pid))
        return seen and all(ids and set(ids) == {uid} for ids in seen.values()) and dict(seen)
    try:
        return wait_until(dropped, START_TIMEOUT,
                          what="every child of %d to run as %s" % (pid, user))
    except Timeout as err:
        pytest.fail("%s; last seen (child: uids): %s" % (err, seen))


# ------------------------------------------------------- the tree

class Scratch:
    """An /etc/apache2 from the packages' files, as a fresh install enables
    it, whose envvars keep run-time files inside the scratch root."""

    def __init__(self, root, packages=()):
        self.root = root
        self.confdir = root / "apache2"
        self.moduledir = root / "modules"
        self.sbindir = root / "sbin"
        self.logdir = root / "log"
        self.statedir = root / "state"
        self.pidfile = root / "run" / "apache2.pid"
        self.htdocs = root / "htdocs"
        self.port = None
        self.started = []          # parents to stop if a test fails
        shutil.copytree(package_root("apache2") / "etc/apache2", self.confdir,
                        symlinks=True)
        for package in packages:
            etc = package_root(package) / "etc/apache2"
            for path in etc.rglob("*"):
                if not path.is_dir():
                    dest = self.confdir / path.relative_to(etc)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, dest)
        for d in (self.moduledir, self.logdir, self.statedir, self.htdocs):
            d.mkdir()
        (self.htdocs / "index.html").write_text("bucketed on Debian\n")
        with open(self.confdir / "envvars", "a") as f:
            f.write("\n# bucketed test: run-time files in the scratch tree\n")
            f.write("export APACHE_RUN_DIR=%s\n" % (root / "run"))
            f.write("export APACHE_PID_FILE=%s\n" % self.pidfile)
            f.write("export APACHE_LOCK_DIR=%s\n" % (root / "lock"))
            f.write("export APACHE_LOG_DIR=%s\n" % self.logdir)
        self.env = {"PATH": SYSTEM_PATH, "LANG": "C",
                    "APACHE_CONFDIR": str(self.confdir),
                    "APACHE_STATE_DIRECTORY": str(self.statedir)}
        self.a2("a2enmod", "-m", FRESH_MPM, *FRESH_MODULES)
        self.a2("a2enconf", "-m", *FRESH_CONFS)
        assert self.enabled_mpms() == [FRESH_MPM]
        (self.confdir / "sites-enabled" / "bucketed-test.conf").write_text(
            "ServerName 127.0.0.1\n"
            "DocumentRoot %s\n"
            "<Directory %s>\n    Require all granted\n</Directory>\n"
            % (self.htdocs, self.htdocs))
        self.set_port(free_ports(1)[0])

    def set_port(self, port):
        self.port = port
        (self.confdir / "ports.conf").write_text("Listen 127.0.0.1:%d\n" % port)

    def enabled_mpms(self):
        return sorted(p.name[:-len(".load")]
                      for p in (self.confdir / "mods-enabled").glob("mpm_*.load"))

    def enabled(self, module):
        return (self.confdir / "mods-enabled" / (module + ".load")).exists()

    def marker(self, module):
        """a2enmod's state marker of a module: e.g. 'disabled_by_admin'."""
        found = [p.parent.name for p in (self.statedir / "module").glob("*/" + module)]
        assert len(found) <= 1, found
        return found[0] if found else None

    def a2(self, tool, *args, check=True):
        return run([tool, "-q"] + list(args), self.env, check=check)

    def use_only_mpm(self, mpm):
        """Whatever MPM is enabled, start from this one."""
        for enabled in self.enabled_mpms():
            self.a2("a2dismod", enabled)
        self.a2("a2enmod", mpm)
        assert self.enabled_mpms() == [mpm]

    def ctl(self, *args, check=True):
        return run(["apache2ctl"] + list(args), self.env, check=check)

    def mpm(self):
        """The MPM `apache2ctl -V` names."""
        info = self.ctl("-V").stdout
        found = re.findall(r"^Server MPM:\s+(\S+)\s*$", info, re.M)
        assert len(found) == 1, info
        return found[0]

    def make_args(self):
        return ["APXS_LIBEXECDIR=%s" % self.moduledir, "APACHE_CONFDIR=%s" % self.confdir,
                "sbindir=%s" % self.sbindir]

    def install(self):
        make("install", *self.make_args())

    def uninstall(self, check=True):
        return make("uninstall", *self.make_args(), check=check)

    def switch_mpm(self, *args, check=True):
        """The installed bucketed-switch-mpm on this tree."""
        return run([str(self.sbindir / SWITCH_MPM)] + list(args), self.env, check=check)

    def error_log(self):
        log = self.logdir / "error.log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else "(no error log)"

    def start(self):
        """apache2ctl -k start (not `start`, which hands over to systemd when
        it runs the machine); waits until httpd answers and every child has
        dropped its privileges; returns the parent's pid from the PidFile."""
        for _ in range(3):
            proc = self.ctl("-k", "start", check=False)
            if proc.returncode == 0:
                try:
                    pid = wait_until(self.serving_pid, START_TIMEOUT,
                                     what="httpd to answer on port %d" % self.port)
                except Timeout as err:
                    pytest.fail("%s\n%s" % (err, self.error_log()))
                self.started.append(pid)
                wait_children_dropped(pid)
                return pid
            if "Address already in use" not in proc.stdout + self.error_log():
                break
            self.set_port(free_ports(1)[0])
        pytest.fail("apache2ctl -k start failed:\n%s\n%s" % (proc.stdout, self.error_log()))

    def serving_pid(self):
        """The pid in the PidFile once httpd answers, else None."""
        text = self.pidfile.read_text().strip()
        return int(text) if text and http_get(self.port, "/") else None

    def stop(self, pid):
        """SIGTERM to the parent: it and its children must go, and the MPM
        must log nothing at warn or above (a slow stop logs that children
        ignored SIGTERM)."""
        os.kill(pid, signal.SIGTERM)
        self.started.remove(pid)
        try:
            wait_until(lambda: not alive(pid) and not children_of(pid), STOP_TIMEOUT,
                       what="httpd %d and its children to exit" % pid)
        except Timeout as err:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("%s\n%s" % (err, self.error_log()))
        bad = re.findall(r"^.*\[mpm_bucketed:(?:warn|error|crit|alert|emerg)\].*$",
                         self.error_log(), re.M)
        assert bad == [], "\n".join(bad)


@pytest.fixture
def make_scratch():
    """Factory of scratch trees (Scratch(root, packages)); stops what they
    started, removes them, and checks that the live /etc/apache2 and
    /var/lib/apache2 did not change."""
    require_tools()
    live_before = (tree_snapshot(LIVE_CONFDIR), tree_snapshot(LIVE_STATEDIR))
    roots, trees = [], []

    def factory(packages=()):
        # 0755, not pytest's 0700 tmp_path: the children, as www-data, read htdocs.
        root = Path(tempfile.mkdtemp(prefix="bucketed-debian-"))
        root.chmod(0o755)
        roots.append(root)
        trees.append(Scratch(root, packages))
        return trees[-1]
    try:
        yield factory
    finally:
        for pid in [pid for sc in trees for pid in sc.started]:
            try:
                os.kill(pid, signal.SIGTERM)
                wait_until(lambda: not alive(pid), STOP_TIMEOUT, what="httpd %d to exit" % pid)
            except ProcessLookupError:
                pass
            except Timeout:
                os.kill(pid, signal.SIGKILL)
        for root in roots:
            shutil.rmtree(root)
    assert (tree_snapshot(LIVE_CONFDIR), tree_snapshot(LIVE_STATEDIR)) == live_before, \
        "the live /etc/apache2 or /var/lib/apache2 changed"
