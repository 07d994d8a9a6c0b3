# SPDX-License-Identifier: Apache-2.0
"""docs/benchmarks.md as bench/run --publish needs it: every pair of marker
comments once, in order, each replaced by a publish without touching the
rest of the page; a real run published into a copy of the page; and every
relative link of README.md and docs/*.md leading somewhere
(scripts/check-doc-links.py)."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from bucketbench import catalog, publication
from test_smoke import bench

LINK_CHECK = os.path.join("scripts", "check-doc-links.py")


def marker_pairs():
    """(begin, end) of every family bench/run --publish writes:
    publication's *DOCS_BEGIN constants with their *DOCS_END."""
    return [(getattr(publication, name),
             getattr(publication, name[:-len("BEGIN")] + "END"))
            for name in sorted(dir(publication))
            if name.endswith("DOCS_BEGIN")]


@pytest.fixture
def page_copy(tmp_path, monkeypatch):
    """A copy of docs/benchmarks.md (and docs/img/) that publish writes to
    instead of the real page; its path."""
    docs = tmp_path / "docs"
    shutil.copytree(os.path.dirname(publication.DOCS_PAGE), docs)
    page = docs / os.path.basename(publication.DOCS_PAGE)
    monkeypatch.setattr(publication, "DOCS_PAGE", str(page))
    return page


def test_every_marker_pair_once_in_order():
    pairs = marker_pairs()
    assert len(pairs) >= 5
    with open(publication.DOCS_PAGE) as handle:
        page = handle.read()
    for begin, end in pairs:
        assert page.count(begin) == 1, begin
        assert page.count(end) == 1, end
        assert page.index(begin) < page.index(end), begin
    # The archive keeps runs as they were: nothing publishes into it.
    archive = os.path.join(os.path.dirname(publication.DOCS_PAGE),
                           "benchmarks-archive.md")
    with open(archive) as handle:
        assert "<!-- bench/run --publish" not in handle.read()


def test_publish_replaces_only_its_pair(page_copy):
    original = page_copy.read_text()
    for number, (begin, end) in enumerate(marker_pairs()):
        publication.replace_generated(begin, end, f"generated {number}")
    page = page_copy.read_text()
    # Cut every pair's inside out of both: what is left is the same.
    for number, (begin, end) in enumerate(marker_pairs()):
        inside = re.escape(begin) + r"\n(.*?)\n" + re.escape(end)
        assert re.search(inside, page, re.S).group(1) == f"generated {number}"
        page = re.sub(inside, "", page, flags=re.S)
        original = re.sub(re.escape(begin) + ".*?" + re.escape(end), "",
                          original, flags=re.S)
    assert page == original


@pytest.mark.parametrize("pinned", (False, True), ids=("shared", "pinned"))
def test_publish_a_run(top, build, tmp_path, page_copy, pinned):
    """One W1 point of stock prefork, published: the W1-W3 pair holds its
    report and the plot it links to exists; pinned (servers on CPU 1,
    wrk on CPU 0), the pinned pair holds it instead, without a plot. The
    rest of the page is as it was."""
    if pinned and not {0, 1} <= os.sched_getaffinity(0):
        pytest.fail("needs CPUs 0 and 1 (the reference machine has two)")
    out = tmp_path / "out"
    placement = ("--server-cpus", "1", "--client-cpus", "0") if pinned \
        else ()
    done = bench(top, build, "--workloads", "w1", "--levels", catalog.NATIVE,
                 "--servers", "prefork", "--concurrency", "8", "--runs", "1",
                 "--duration", "1", "--warmup", "0", "--slots", "32",
                 *placement, "--out", str(out))
    assert done.returncode == 0, done.stderr
    started = json.loads((out / "meta.json").read_text())["started_at"]
    before = page_copy.read_text()
    publication.publish(str(out))
    page = page_copy.read_text()
    begin, end = (publication.PINNED_DOCS_BEGIN, publication.PINNED_DOCS_END) \
        if pinned else (publication.DOCS_BEGIN, publication.DOCS_END)
    head, rest = page.split(begin)
    inside, tail = rest.split(end)
    assert f"bucketbench report {started}" in inside
    if pinned:
        assert "- CPUs: servers on 1, load tools on 0" in inside
        assert "![" not in inside
    else:
        assert "![w1 native](img/bench-w1-native.png)" in inside
        assert (page_copy.parent / "img" / "bench-w1-native.png").exists()
    old_head, old_rest = before.split(begin)
    assert head == old_head and tail == old_rest.split(end)[1]


def test_doc_links_resolve(top):
    done = subprocess.run([sys.executable, os.path.join(top, LINK_CHECK),
                           top], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_link_check_finds_broken_links(top, tmp_path):
    """A missing file, a missing heading, a missing image: each reported
    with its line; links in code and to other sites are no links."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Top\n\n[ok](docs/a.md#a-heading--with-dash) [gone](docs/b.md)\n"
        "`[code](nowhere.md)` [site](https://example.org/x.md)\n"
        "```\n[fenced](nowhere.md)\n```\n")
    (tmp_path / "docs" / "a.md").write_text(
        "# A heading — with `dash`\n\n## Twice\n\n## Twice\n\n"
        "[self](#twice-1) [bad](#twice-2) ![plot](img/missing.png)\n"
        "[up](../README.md#top)\n")
    done = subprocess.run([sys.executable, os.path.join(top, LINK_CHECK),
                           str(tmp_path)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "README.md:3: docs/b.md (no such file)",
        "docs/a.md:7: #twice-2 (no such heading)",
        "docs/a.md:7: img/missing.png (no such file)"]
