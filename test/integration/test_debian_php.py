# SPDX-License-Identifier: Apache-2.0
"""A Debian mod_php site switches to bucketed and back, keeping PHP.

libapache2-mod-php8.2's php8.2.load says `# Depends: mpm_prefork`, so
`a2dismod mpm_prefork` refuses while PHP is enabled and `a2dismod -f
mpm_prefork` disables PHP with it. bucketed-switch-mpm (dist/debian/,
installed by make install) sets the modules that depend on the old MPM
aside, switches the MPM with a2dismod/a2enmod and puts them back.

The scratch tree (debian_scratch.py) is apache2's and libapache2-mod-php8.2's
own files, enabled as their postinsts do on a fresh install. The package
must be installed (scripts/deps.sh installs it): without it the tests fail.
"""
import pytest

from debian_scratch import (FRESH_MPM, installed_version, tree_snapshot,
                            wait_children_dropped)
from debian_scratch import make_scratch  # noqa: F401 (fixture)
from httpd_fixture import APACHE_MODULES, http_get

PHP_PACKAGE = "libapache2-mod-php8.2"
PHP = "php8.2"
PHP_SO = APACHE_MODULES / "libphp8.2.so"
PHP_PAGE = '<?php echo "php ok ", PHP_VERSION;\n'


@pytest.fixture
def php_site(make_scratch):
    """A scratch tree as a fresh Debian install with libapache2-mod-php8.2:
    prefork and php8.2 enabled, an index.php, and bucketed installed."""
    version = installed_version(PHP_PACKAGE)
    if not PHP_SO.is_file():
        pytest.fail("%s is missing: install %s (scripts/deps.sh does)" % (PHP_SO, PHP_PACKAGE))
    site = make_scratch(packages=(PHP_PACKAGE,))
    # As the package's postinst: apache2_switch_mpm prefork, then
    # apache2_invoke enmod php8.2.
    site.a2("a2dismod", "-m", FRESH_MPM)
    site.a2("a2enmod", "-m", "mpm_prefork")
    site.a2("a2enmod", "-m", PHP)
    (site.htdocs / "index.php").write_text(PHP_PAGE)
    # PHP_VERSION is the upstream part of the Debian version: 8.2.36 of
    # 8.2.36-1~deb12u1.
    site.php_body = ("php ok " + version.split(":")[-1].split("-")[0]).encode()
    site.install()
    return site


def enabled_links(site):
    return tree_snapshot(site.confdir / "mods-enabled")


def serve_php(site, mpm):
    """Starts the tree's httpd, checks that it runs `mpm`, that PHP answers
    and that every child dropped its privileges, and stops it."""
    assert site.mpm() == mpm
    modules = site.ctl("-M").stdout
    assert "php_module (shared)" in modules, modules
    pid = site.start()
    wait_children_dropped(pid)
    assert http_get(site.port, "/index.php") == (200, site.php_body)
    assert http_get(site.port, "/index.html") == (200, b"bucketed on Debian\n")
    site.stop(pid)


def test_php_site_switches_to_bucketed_and_back(php_site):
    site = php_site
    assert site.enabled_mpms() == ["mpm_prefork"] and site.enabled(PHP)
    serve_php(site, "prefork")

    # What Debian's tools alone do with this site.
    refused = site.a2("a2dismod", "mpm_prefork", check=False)
    assert refused.returncode != 0 and PHP in refused.stdout, refused.stdout

    switched = site.switch_mpm("bucketed").stdout
    print(switched)
    assert "keeping %s" % PHP in switched
    assert site.enabled_mpms() == ["mpm_bucketed"]
    for name in (PHP + ".load", PHP + ".conf", "mpm_bucketed.conf"):
        assert (site.confdir / "mods-enabled" / name).is_symlink(), name
    # prefork off by the admin (package scripts' apache2_switch_mpm leaves
    # it off); PHP's marker as its postinst left it.
    assert site.marker("mpm_prefork") == "disabled_by_admin"
    assert site.marker("mpm_bucketed") == "enabled_by_admin"
    assert site.marker(PHP) == "enabled_by_maint"
    serve_php(site, "bucketed")

    again = site.switch_mpm("bucketed").stdout
    assert "already" in again, again
    assert site.enabled_mpms() == ["mpm_bucketed"] and site.enabled(PHP)

    print(site.switch_mpm("prefork").stdout)
    assert site.enabled_mpms() == ["mpm_prefork"] and site.enabled(PHP)
    assert site.marker("mpm_prefork") == "enabled_by_admin"
    assert site.marker("mpm_bucketed") == "disabled_by_admin"
    assert site.marker(PHP) == "enabled_by_maint"
    serve_php(site, "prefork")


def test_switch_rolls_back_when_configtest_fails(php_site):
    site = php_site
    conf = site.confdir / "mods-available" / "mpm_bucketed.conf"
    conf.write_text(conf.read_text() + "NoSuchDirective on\n")
    before = enabled_links(site)

    failed = site.switch_mpm("bucketed", check=False)
    assert failed.returncode != 0, failed.stdout
    assert "configtest failed" in failed.stdout and "NoSuchDirective" in failed.stdout, \
        failed.stdout
    # The same links as before: prefork and PHP.
    assert enabled_links(site) == before
    assert site.enabled_mpms() == ["mpm_prefork"] and site.enabled(PHP)
    assert site.mpm() == "prefork"


def test_switch_refuses_bad_arguments(php_site):
    site = php_site
    before = enabled_links(site)
    for args in ([], ["event"], ["bucketed", "prefork"]):
        proc = site.switch_mpm(*args, check=False)
        assert proc.returncode == 2 and "usage" in proc.stdout, (args, proc.stdout)
    assert enabled_links(site) == before
