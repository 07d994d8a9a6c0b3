# SPDX-License-Identifier: Apache-2.0
"""The Debian path: `make install`, then a2dismod mpm_prefork, a2enmod
mpm_bucketed, configtest, serving, a2dismod, and prefork is back.

Everything runs in a scratch configuration tree built from the apache2
package's own files (debian_scratch.py): what the machine has installed or
enabled in /etc/apache2 (mod_php, another MPM) does not change the results,
and the live /etc/apache2 and /var/lib/apache2 are compared before and after
every test. The mod_php sites' way is test_debian_php.py.

Environment: BUCKETED_TOP (repository root, default: two levels above this
file), BUCKETED_BUILD (configured build directory, default BUCKETED_TOP).
A missing tool fails the test with a message; nothing is skipped.
"""
import os

import pytest

from debian_scratch import (RUN_USER, SWITCH_MPM, TOP, apxs_query, make,
                            wait_children_dropped)
from debian_scratch import make_scratch  # noqa: F401 (fixture)
from httpd_fixture import http_get

MODULES = ("mod_mpm_bucketed.so", "mod_bucketed_status.so")
DEBIAN_FILES = ("mpm_bucketed.load", "mpm_bucketed.conf",
                "bucketed_status.load", "bucketed_status.conf")
OTHER_MPMS = ("mpm_event", "mpm_worker", "mpm_prefork")


@pytest.fixture
def scratch(make_scratch):
    return make_scratch()


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
    (switch,) = destdir.rglob(SWITCH_MPM)
    assert switch.parent.name == "sbin" and os.access(switch, os.X_OK), switch
    assert switch.read_text() == (TOP / "dist/debian" / SWITCH_MPM).read_text()

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
    assert scratch.mpm() == "bucketed"
    assert "mpm_bucketed_module (shared)" in scratch.ctl("-M").stdout

    pid = scratch.start()
    status, body = http_get(scratch.port, "/index.html")
    assert (status, body) == (200, b"bucketed on Debian\n")
    # Every child past its privilege drop (it is root from fork until then).
    children = wait_children_dropped(pid)
    print("children of %d, all %s: %s" % (pid, RUN_USER, sorted(children)))
    refused = scratch.uninstall(check=False)
    assert refused.returncode != 0 and "a2dismod mpm_bucketed" in refused.stdout, refused.stdout
    assert (scratch.moduledir / "mod_mpm_bucketed.so").exists()
    scratch.stop(pid)

    scratch.a2("a2dismod", "mpm_bucketed")
    scratch.a2("a2enmod", "mpm_prefork")
    assert scratch.enabled_mpms() == ["mpm_prefork"]
    assert "Syntax OK" in scratch.ctl("configtest").stdout
    assert scratch.mpm() == "prefork"

    scratch.uninstall()
    assert list(scratch.moduledir.iterdir()) == []
    assert list(scratch.sbindir.iterdir()) == []
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
    scratch.stop(pid)
