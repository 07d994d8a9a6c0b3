# SPDX-License-Identifier: Apache-2.0
"""The results tables: bench/run --publish of a plan's directory writes
docs/benchmarks.md's "Today's results" and README.md's "Results" from the
same rows, at the plan's commit; scripts/check-results.py passes on the
checkout and fails, naming the row, when one figure differs."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from bucketbench import catalog, publication, report, results_table
from test_smoke import bench

CHECK = os.path.join("scripts", "check-results.py")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def check(top, where):
    return subprocess.run([sys.executable, os.path.join(top, CHECK),
                           str(where)], capture_output=True, text=True,
                          check=False)


@pytest.fixture
def copies(top, tmp_path, monkeypatch):
    """A copy of README.md and docs/ that publish writes to instead of the
    real ones; the copy's top directory."""
    shutil.copytree(os.path.join(top, "docs"), tmp_path / "docs")
    shutil.copy(os.path.join(top, "README.md"), tmp_path / "README.md")
    monkeypatch.setattr(publication, "DOCS_PAGE",
                        str(tmp_path / "docs" / "benchmarks.md"))
    monkeypatch.setattr(publication, "README", str(tmp_path / "README.md"))
    monkeypatch.setattr(publication, "PUBLISHED_DIR",
                        str(tmp_path / "published"))
    return tmp_path


def entry(name, status, **extra):
    return {"name": name, "dir": name, "status": status,
            "started_at": "2026-11-28 03:00:00 +0000", **extra}


@pytest.fixture
def plan_dir(top, build, tmp_path):
    """A plan's directory: a real W1 run of stock event and the event model
    as its w1-w3 family, memory's and overhead's results as their commands
    write them, and the soak skipped."""
    plan = tmp_path / "plan"
    done = bench(top, build, "--workloads", "w1", "--levels",
                 catalog.NATIVE, "--servers", "event,bucketed-event",
                 "--concurrency", "8", "--runs", "2", "--duration", "1",
                 "--warmup", "0", "--slots", "32",
                 "--out", str(plan / "w1-w3"))
    assert done.returncode == 0, done.stderr
    (plan / "memory").mkdir()
    (plan / "memory" / "memory.json").write_text(json.dumps(
        {"child_pss_kb": {"prefork": 250, "bucketed": 260, "ratio": 1.04}}))
    (plan / "overhead").mkdir()
    (plan / "overhead" / "overhead.json").write_text(json.dumps(
        {"summary": {"scraped": {"ratio_to_off": {
            "n": 3, "min": 0.97, "median": 0.99, "max": 1.01}}}}))
    (plan / publication.PLAN_FILE).write_text(json.dumps({
        "schema": publication.PLAN_SCHEMA, "commit": COMMIT,
        "dirty": False, "started_at": "2026-11-28 03:00:00 +0000",
        "quick": True, "families": [
            entry("w1-w3", publication.RAN),
            entry("soak", publication.SKIPPED,
                  reason="bench/run: wrk not found"),
            entry("memory", publication.RAN),
            entry("overhead", publication.RAN)]}))
    return plan


def test_the_checkout_agrees(top):
    done = check(top, top)
    assert done.returncode == 0, done.stdout


def test_publish_a_plan(top, copies, plan_dir):
    before = {r.family: r for r in results_table.page_rows(
        (copies / "docs" / "benchmarks.md").read_text())}
    publication.publish(str(plan_dir))
    page = (copies / "docs" / "benchmarks.md").read_text()
    readme = (copies / "README.md").read_text()
    assert results_table.differences(page, readme) == []
    rows = results_table.page_rows(page)
    planned = ("w1-w3", "soak", "memory", "overhead")
    assert [r.family for r in rows] == [f.name for f in publication.FAMILIES]
    by_family = {r.family: r for r in rows}
    assert {(by_family[name].commit, by_family[name].date)
            for name in planned} == {("0123456", "2026-11-28")}
    # The families the plan did not run keep their rows, and the line
    # above the table says so.
    assert all(by_family[name] == before[name] for name in by_family
               if name not in planned)
    assert "are from earlier runs" in page
    assert by_family["w1-w3"].figure.startswith(
        "w1, c=8: event model ")
    assert by_family["w1-w3"].figure.endswith(" stock event's req/s")
    assert by_family["soak"].figure == "skipped: bench/run: wrk not found"
    assert by_family["overhead"].figure == "0.990x (0.970-1.010x) off's req/s"
    # README shows its families only; the soak is not one of them.
    shown = results_table.readme_rows(readme)
    assert [r.what for r in shown] == [by_family[name].what for name in
                                      results_table.README_FAMILIES]
    assert all(r.commit == "0123456" for r in shown
               if r.what in {by_family[name].what for name in planned})
    # The W1 run went to its own section too.
    started = json.loads((plan_dir / "w1-w3" / "meta.json").read_text())[
        "started_at"]
    assert f"bucketbench report {started}" in page.split(
        publication.DOCS_BEGIN)[1]
    assert check(top, copies).returncode == 0

    edited = readme.replace("1.040x stock prefork's", "1.030x stock "
                            "prefork's")
    assert edited != readme
    (copies / "README.md").write_text(edited)
    done = check(top, copies)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"check-results: row {by_family['memory'].what!r}: figure differs: "
        f"page {by_family['memory'].figure!r}, README.md "
        f"{by_family['memory'].figure.replace('1.040x', '1.030x')!r}"]


# The page's rows published before plans were kept in bench/published/:
# each leaves this list when a kept plan measures its family again (since
# 2026-12-01 none: every row is a kept plan's).
ROWS_FROM_BEFORE_KEEPING = set()


def test_the_kept_plans_publish_the_page(top, copies):
    """bench/published/ holds the plans the page's rows were published
    from; published again, oldest first, they write the page, README and
    the plots as they are: every figure of theirs comes from those
    results, and only the rows listed as older come from elsewhere."""
    kept_dir = os.path.join(top, "bench", "published")
    plans = {name: publication.read_plan(os.path.join(kept_dir, name))
             for name in os.listdir(kept_dir)
             if os.path.isfile(os.path.join(kept_dir, name,
                                            publication.PLAN_FILE))}
    assert plans, f"no plan kept in {kept_dir}"
    for name in sorted(plans, key=lambda n: plans[n]["started_at"]):
        publication.publish(os.path.join(kept_dir, name))
    for name in ("README.md", os.path.join("docs", "benchmarks.md")):
        with open(os.path.join(top, name)) as handle:
            assert (copies / name).read_text() == handle.read(), name
    for image in (copies / "docs" / "img").iterdir():
        with open(os.path.join(top, "docs", "img", image.name), "rb") as real:
            assert image.read_bytes() == real.read(), image.name
    measured = set().union(*(
        publication.families_in(plan, publication.MEASURED)
        for plan in plans.values()))
    assert not measured & ROWS_FROM_BEFORE_KEEPING
    assert measured | ROWS_FROM_BEFORE_KEEPING == set(
        publication.FAMILY_NAMES)
    # Kept again (the fixture's PUBLISHED_DIR is elsewhere), the same
    # plans stay.
    assert sorted(path.name for path in (copies / "published").iterdir()) \
        == sorted(plans)


def test_keeping_a_plan_replaces_only_the_plans_it_measured_again(
        tmp_path, copies):
    """A plan published is kept without its runs' servers/; an earlier
    kept plan goes when the new one measured all its families again, and
    stays while one of its rows is still on the page."""
    def plan_of(name, families):
        plan_dir = tmp_path / name
        for family in families:
            (plan_dir / family / "servers").mkdir(parents=True)
            (plan_dir / family / "servers" / "error_log").write_text("")
            (plan_dir / family / "raw.json").write_text("{}")
        plan = {"schema": publication.PLAN_SCHEMA, "commit": COMMIT,
                "dirty": False, "started_at": "2026-11-28 03:00:00 +0000",
                "quick": True, "families": [entry(family, publication.RAN)
                                            for family in families]}
        (plan_dir / publication.PLAN_FILE).write_text(json.dumps(plan))
        return plan_dir, plan

    kept = copies / "published"
    for name, families, left in (
            ("a", ["memory", "overhead"], {"a"}),
            ("b", ["memory"], {"a", "b"}),
            ("c", ["memory", "overhead", "skew"], {"c"})):
        plan_dir, plan = plan_of(name, families)
        with publication._kept(str(plan_dir) + "/", plan):
            pass
        assert {path.name for path in kept.iterdir()} == left, name
        assert (kept / name / "memory" / "raw.json").exists()
        assert not (kept / name / "memory" / "servers").exists()
    # A plan kept already is published where it is: nothing copied.
    with publication._kept(str(kept / "c"),
                           publication.read_plan(str(kept / "c"))):
        pass
    assert {path.name for path in kept.iterdir()} == {"c"}
    assert not list(copies.glob(".keeping-*"))
    # An edit of the page that fails keeps nothing and leaves no copy.
    plan_dir, plan = plan_of("d", ["memory", "overhead", "skew"])
    with pytest.raises(publication.PublishError, match="the edit"):
        with publication._kept(str(plan_dir), plan):
            raise publication.PublishError("the edit failed")
    assert {path.name for path in kept.iterdir()} == {"c"}
    assert not list(copies.glob(".keeping-*"))
    with pytest.raises(publication.PublishError, match="not one of its"):
        with publication._kept(str(kept / "c" / "memory"), plan):
            pass


def test_an_edit_that_cannot_be_made_changes_neither_file(copies):
    """The page's and README's tables are written together or not at all:
    README without its markers leaves the page as it was."""
    page = copies / "docs" / "benchmarks.md"
    readme = copies / "README.md"
    before = page.read_text()
    readme.write_text(readme.read_text().replace(
        results_table.README_BEGIN, ""))
    with pytest.raises(publication.PublishError, match="README.md"):
        publication._edit(
            (str(page), results_table.PAGE_BEGIN, results_table.PAGE_END,
             "new rows"),
            (str(readme), results_table.README_BEGIN,
             results_table.README_END, "new rows"))
    assert page.read_text() == before
    assert not list(copies.glob("**/.publishing-*"))


def test_a_plan_that_cannot_be_kept_changes_nothing(top, copies, tmp_path,
                                                    monkeypatch):
    """Published with no room to keep it (PUBLISHED_DIR's parent a file),
    a plan of one family with a section of its own (the kept idle run)
    is a PublishError, and neither its section nor a table changes."""
    plan_dir = tmp_path / "plan"
    shutil.copytree(os.path.join(top, "bench", "published", "plan-b361ce2",
                                 "idle"), plan_dir / "idle")
    (plan_dir / publication.PLAN_FILE).write_text(json.dumps({
        "schema": publication.PLAN_SCHEMA, "commit": COMMIT,
        "dirty": False, "started_at": "2026-11-28 03:00:00 +0000",
        "quick": False, "families": [entry("idle", publication.RAN)]}))
    page = copies / "docs" / "benchmarks.md"
    publication.replace_generated(publication.IDLE_DOCS_BEGIN,
                                  publication.IDLE_DOCS_END, "an older run")
    before = page.read_text(), (copies / "README.md").read_text()
    (copies / "a-file").write_text("")
    monkeypatch.setattr(publication, "PUBLISHED_DIR",
                        str(copies / "a-file" / "published"))
    with pytest.raises(publication.PublishError, match="cannot make room"):
        publication.publish(str(plan_dir))
    assert (page.read_text(), (copies / "README.md").read_text()) == before


def test_the_pinned_headline_names_both_models_against_stock_event():
    """W1 at the highest concurrency; W3 and lower concurrencies are the
    section's, not the row's; a model not measured is shown as such."""
    def point(server, workload="w1", concurrency=400, median=1.0):
        return {"server": server, "workload": workload,
                "kernel_level": catalog.NATIVE, "concurrency": concurrency,
                "ratios": {"event": {"median": median,
                                     "per_round": [median - 0.1, median,
                                                   median + 0.05]}}}
    points = [point("bucketed-event", median=0.92),
              point("bucketed-reuseport", median=1.04),
              point("bucketed-event", concurrency=50, median=3.0),
              point("bucketed-reuseport", workload="w3", median=2.0)]
    assert report.pinned_headline(points, {}) == (
        "w1, c=400: event model 0.92x (0.82-0.97x), prefork model 1.04x "
        "(0.94-1.09x) stock event's req/s")
    assert report.pinned_headline(points[:1], {}) == (
        "w1, c=400: event model 0.92x (0.82-0.97x), prefork model – "
        "stock event's req/s")
    assert report.pinned_headline(points[3:], {}) == "w1: no point"


def test_a_missing_row_is_named(top, copies):
    readme = (copies / "README.md").read_text()
    row = next(line for line in readme.splitlines()
               if line.startswith("| memory per child"))
    (copies / "README.md").write_text(readme.replace(row + "\n", ""))
    done = check(top, copies)
    assert done.returncode == 1
    assert "'memory per child, prefork model' (family memory) is on the " \
           "page but not in README.md" in done.stdout


def test_a_plan_records_what_cannot_run_here(top, build, tmp_path, copies):
    """A family whose servers cannot start here is recorded as skipped, one
    whose command fails as failed, each with why; published, their rows
    say so, and both tables still agree."""
    plan_dir = tmp_path / "plan"
    missing = tmp_path / "no-httpd"
    done = bench(top, build, "--plan", "publish", "--quick", "--families",
                 "memory,near-limit", "--httpd", str(missing),
                 "--out", str(plan_dir))
    assert done.returncode == 3, done.stderr
    plan = json.loads((plan_dir / publication.PLAN_FILE).read_text())
    head = subprocess.run(["git", "-C", top, "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True)
    assert plan["commit"] == head.stdout.strip()
    assert plan["quick"] is True and plan["dirty"] in (True, False)
    # In the plan's order, whatever the order given.
    assert [(e["name"], e["status"]) for e in plan["families"]] == [
        ("near-limit", publication.SKIPPED), ("memory", publication.FAILED)]
    near, memory = plan["families"]
    assert near["reason"].startswith(f"no run: httpd not found at {missing}")
    assert memory["reason"] == (f"bench/run memory: prefork: httpd not "
                                f"found at {missing}")
    publication.publish(str(plan_dir))
    page = (copies / "docs" / "benchmarks.md").read_text()
    figures = {r.family: r.figure for r in results_table.page_rows(page)}
    assert (figures["near-limit"], figures["memory"]) == (
        f"skipped: {near['reason']}", f"failed: {memory['reason']}")
    assert f"Plan at {publication.short_commit(plan)}" in page
    assert check(top, copies).returncode == 0


def test_a_plan_goes_on_where_it_stopped(top, build, tmp_path, copies):
    """--resume runs the families the plan has not run to the end, at the
    checkout's commit, each entry naming its own; one that ran is kept,
    one that failed runs again from an empty directory; published, the
    line above the table says the plan went on."""
    head = subprocess.run(["git", "-C", top, "rev-parse", "HEAD"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    # The plan began at a commit of the checkout as it is (HEAD where
    # nothing tracked differs from it), so the MPM is the plan's.
    identity = {f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
                for what, value in (("NAME", "test"),
                                    ("EMAIL", "test@localhost"))}
    began = subprocess.run(["git", "-C", top, "stash", "create"],
                           capture_output=True, text=True, check=True,
                           env=dict(os.environ, **identity)
                           ).stdout.strip() or head
    plan_dir = tmp_path / "plan"
    (plan_dir / "memory").mkdir(parents=True)
    (plan_dir / "memory" / "memory.json").write_text(json.dumps(
        {"child_pss_kb": {"prefork": 250, "bucketed": 260, "ratio": 1.04}}))
    (plan_dir / "near-limit").mkdir()
    (plan_dir / "near-limit" / "left-by-the-failed-run").write_text("")
    ran = entry("memory", publication.RAN)
    (plan_dir / publication.PLAN_FILE).write_text(json.dumps({
        "schema": publication.PLAN_SCHEMA, "commit": began, "dirty": False,
        "started_at": "2026-11-28 03:00:00 +0000", "finished_at": None,
        "quick": True, "families": [
            ran, entry("near-limit", publication.FAILED, reason="cut")]}))
    missing = tmp_path / "no-httpd"
    done = bench(top, build, "--plan", "publish", "--quick", "--resume",
                 "--families", "memory,near-limit", "--httpd", str(missing),
                 "--out", str(plan_dir))
    assert done.returncode == 3, done.stderr
    assert "plan: near-limit: its earlier run's directory (failed) " \
        "removed" in done.stderr
    plan = json.loads((plan_dir / publication.PLAN_FILE).read_text())
    assert plan["commit"] == began and plan["finished_at"]
    assert [again["commit"] for again in plan["resumed"]] == [head]
    near, memory = plan["families"]         # in the plan's order
    assert memory == ran
    assert (near["name"], near["status"], near["commit"]) == (
        "near-limit", publication.SKIPPED, head)
    assert not (plan_dir / "near-limit" / "left-by-the-failed-run").exists()
    publication.publish(str(plan_dir))
    page = (copies / "docs" / "benchmarks.md").read_text()
    assert f"; gone on with at {publication.short_commit(near)}, " in page
    assert f"(server/, modules/ as at {began[:7]})" in page
    assert check(top, copies).returncode == 0
    # Gone on with again, with nothing left of what is asked: nothing
    # runs or changes, and the status is still the plan's (near-limit
    # skipped).
    before = (plan_dir / publication.PLAN_FILE).read_text()
    done = bench(top, build, "--plan", "publish", "--quick", "--resume",
                 "--families", "memory", "--out", str(plan_dir))
    assert done.returncode == 3, done.stderr
    assert "nothing to go on with" in done.stderr
    assert (plan_dir / publication.PLAN_FILE).read_text() == before


def test_a_plan_does_not_go_on_over_another_build(top, build, tmp_path):
    """--resume refuses, saying why, a plan of another MPM or modules, of
    a commit git does not know, run with --quick when this is not, or
    begun with changes to tracked files (or no git)."""
    last_change = subprocess.run(
        ["git", "-C", top, "rev-list", "-n", "1", "HEAD", "--", "server"],
        capture_output=True, text=True, check=True).stdout.strip()
    before = subprocess.run(
        ["git", "-C", top, "rev-parse", last_change + "^"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert publication.measured_unchanged_since(before) is False
    assert publication.measured_unchanged_since(COMMIT) is None
    # (the plan's commit, bench/run's options, why it refuses); every plan
    # is one run without --quick.
    cases = ((before, (), "server, modules changed since the plan's "
              f"commit {before[:7]}: its families would measure two builds"),
             (COMMIT, (), "cannot tell whether server, modules "
              "changed since the plan's commit 0123456"),
             (before, ("--quick",), "the plan at "
              f"{before[:7]} was run without --quick"),
             (None, (), "the plan began at unknown, with changes to "
              "tracked files or none known"))
    for number, (commit, options, refusal) in enumerate(cases):
        plan_dir = tmp_path / f"plan-{number}"
        plan_dir.mkdir()
        plan = {"schema": publication.PLAN_SCHEMA, "commit": commit,
                "dirty": False if commit else None,
                "started_at": "2026-11-28 03:00:00 +0000",
                "quick": False, "families": []}
        (plan_dir / publication.PLAN_FILE).write_text(json.dumps(plan))
        done = bench(top, build, "--plan", "publish", "--resume", *options,
                     "--families", "memory", "--out", str(plan_dir))
        assert done.returncode == 2, done.stderr
        assert f"--resume: {refusal}" in done.stderr, done.stderr
        # Nothing ran, nothing was written.
        assert json.loads((plan_dir / publication.PLAN_FILE)
                          .read_text()) == plan
    fresh = tmp_path / "fresh"
    done = bench(top, build, "--plan", "publish", "--resume", "--families",
                 "memory", "--out", str(fresh))
    assert done.returncode == 2
    assert f"--resume: {fresh} holds no plan" in done.stderr


def test_which_families_a_plan_has_left():
    plan = {"families": [entry("restart", publication.RAN),
                         entry("skew", publication.RUNS_FAILED),
                         entry("idle", publication.SKIPPED),
                         entry("faults", publication.CUT_SHORT)]}
    assert publication.families_left(
        plan, {"memory", "restart", "skew", "idle", "faults", "w1-w3"}) == [
        "w1-w3", "skew", "idle", "faults", "memory"]


def test_a_family_stopped_while_it_ran_is_recorded_cut_short(
        tmp_path, monkeypatch, copies):
    """plan.json names the family a plan stopped in, so --resume runs it
    again; published meanwhile, the page keeps the family's earlier row."""
    def stopped(*_):
        raise KeyboardInterrupt
    monkeypatch.setattr(publication, "_run_family", stopped)
    plan_dir = tmp_path / "plan"
    with pytest.raises(KeyboardInterrupt):
        publication.run_plan(str(plan_dir), publication.new_plan(True),
                             {"memory"}, [], lambda _: None)
    plan = json.loads((plan_dir / publication.PLAN_FILE).read_text())
    assert [(e["name"], e["status"]) for e in plan["families"]] == [
        ("memory", publication.CUT_SHORT)]
    assert plan["finished_at"] is None
    assert publication.families_left(plan, {"memory"}) == ["memory"]
    before = {r.family: r for r in results_table.page_rows(
        (copies / "docs" / "benchmarks.md").read_text())}
    publication.publish(str(plan_dir))
    after = {r.family: r for r in results_table.page_rows(
        (copies / "docs" / "benchmarks.md").read_text())}
    assert after == before
