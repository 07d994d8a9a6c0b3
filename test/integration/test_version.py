# SPDX-License-Identifier: Apache-2.0
"""
One version: configure.ac's AC_INIT is where it is written; debian/changelog
and NEWS.md follow it, and a running build names it in `apache2 -t`'s plan
line (BK00094) and on every view of mod_bucketed_status.
"""
import re
from pathlib import Path

from httpd_fixture import STATUS_DIRECTIVES, http_get

TOP = Path(__file__).resolve().parents[2]



def configure_version():
    text = (TOP / "configure.ac").read_text()
    found = re.search(r"^AC_INIT\(\[bucketed\], \[([^]]+)\]", text, re.M)
    assert found, "configure.ac has no AC_INIT([bucketed], [VERSION] ...)"
    return found.group(1)


def test_changelog_and_news_follow_configure_ac():
    version = configure_version()
    top_entry = (TOP / "debian" / "changelog").read_text().splitlines()[0]
    assert re.match(r"bucketed \(([^)]+)\)", top_entry).group(1) == version
    news = (TOP / "NEWS.md").read_text()
    releases = re.findall(r"^## (\S+)", news, re.M)
    assert releases and releases[0] == version, \
        f"NEWS.md's newest release is {releases[:1]}, configure.ac {version}"


def test_the_plan_line_names_the_version(make_httpd):
    server = make_httpd()
    check = server.command("-t")
    assert check.returncode == 0, check.output
    assert f"bucketed: version {configure_version()}: " in check.output, \
        check.output


def test_the_status_pages_name_the_version(make_httpd):
    version = configure_version()
    server = make_httpd(directives=STATUS_DIRECTIVES)
    server.start()
    assert server.status()["version"] == version
    port = server.ports[0]
    pages = {path: http_get(port, path) for path in
             ("/server-status?auto", "/server-status", "/metrics")}
    for path, (status, _) in pages.items():
        assert status == 200, f"{path} answered {status}"
    auto = pages["/server-status?auto"][1].decode()
    assert f"\nBucketedVersion: {version}\n" in auto, auto
    assert f"<dt>bucketed version {version}</dt>" \
        in pages["/server-status"][1].decode()
    assert re.search(r'^bucketed_info\{version="%s",' % re.escape(version),
                     pages["/metrics"][1].decode(), re.M)
