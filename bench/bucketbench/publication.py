# SPDX-License-Identifier: Apache-2.0
"""bench/run --plan publish: every family of runs at one commit, each a
bench/run of its own in DIR/<family>/, and DIR/plan.json saying what ran.
bench/run --publish DIR: one family's run copied between its markers in
docs/benchmarks.md; of a plan's directory, every family's, then the page's
"Today's results" table and README.md's "Results" table, one row per
family (results_table.py)."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from . import (faults, limit, memory, overhead, report, restart, soak,
               users)
from . import idle as idle_family
from .catalog import LIMIT_KINDS, WORKLOADS
from .results_table import (PAGE_BEGIN, PAGE_END, README_BEGIN, README_END,
                            Row, TableError, page_rows, page_table,
                            readme_table, replace_between)

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(BENCH_DIR)
DOCS_PAGE = os.path.join(REPO_DIR, "docs", "benchmarks.md")
README = os.path.join(REPO_DIR, "README.md")
PLAN_FILE = "plan.json"
# The results of the plans whose rows the page shows, so that the
# checkout can publish its page again (_kept).
PUBLISHED_DIR = os.path.join(BENCH_DIR, "published")
PLAN_SCHEMA = "bucketbench.plan/1"


def _markers(family=""):
    name = f" {family}" if family else ""
    return (f"<!-- bench/run --publish{name}: generated tables begin -->",
            f"<!-- bench/run --publish{name}: generated tables end -->")


DOCS_BEGIN, DOCS_END = _markers()
SKEW_DOCS_BEGIN, SKEW_DOCS_END = _markers("skew")
IDLE_DOCS_BEGIN, IDLE_DOCS_END = _markers("idle")
FAULTS_DOCS_BEGIN, FAULTS_DOCS_END = _markers("faults")
LIMIT_DOCS_BEGIN, LIMIT_DOCS_END = _markers("near-limit")
RESTART_DOCS_BEGIN, RESTART_DOCS_END = _markers("restart")
COUNTED_DOCS_BEGIN, COUNTED_DOCS_END = _markers("restart-counted")
SOAK_DOCS_BEGIN, SOAK_DOCS_END = _markers("soak")
USERS_DOCS_BEGIN, USERS_DOCS_END = _markers("users")
PINNED_DOCS_BEGIN, PINNED_DOCS_END = _markers("pinned")

# A family's run: bench/run's exit status when it ran (0, or 3: some runs
# failed), and 2 when it refused before sending load (bad input, a tool
# missing here): the family is then skipped with bench/run's reason.
RAN = "ran"
RUNS_FAILED = "ran, some runs failed"
SKIPPED = "skipped"
FAILED = "failed"
STATUS_OF_EXIT = {0: RAN, 3: RUNS_FAILED, 2: SKIPPED}
# The statuses of a family measured to the end (its figure publishable).
MEASURED = (RAN, RUNS_FAILED)
# A family's entry while it runs: what plan.json keeps of one the plan
# stopped during.
CUT_SHORT = "cut short"


class PublishError(Exception):
    """A directory or page publish cannot read or write."""


def _run_headline(of_points):
    """A bench/run family's headline: of_points(points, options) of the
    run's summary."""
    def headline(run_dir):
        meta, records = load_run(run_dir)
        return of_points(report.summarize(records), meta["options"])
    return headline


def _memory_headline(run_dir):
    with open(os.path.join(run_dir, "memory.json")) as handle:
        return memory.headline(json.load(handle))


def _overhead_headline(run_dir):
    with open(os.path.join(run_dir, "overhead.json")) as handle:
        return overhead.headline(json.load(handle)["summary"])


@dataclass(frozen=True)
class Family:
    """One family of the plan: its bench/run arguments (before --out),
    those --quick adds or replaces, its row's words and section, and how
    its headline figure is read from its directory."""
    name: str
    args: tuple
    what: str
    title: str
    anchor: str
    headline: object
    quick_args: tuple = ("--quick",)
    # Where bench/run writes: --out DIR, or (memory) --out DIR/FILE.
    out_file: str = ""
    publishes: bool = True


# Each family's command is the one its section documents, at today's
# defaults. In order of the tables.
FAMILIES = (
    Family("w1-w3", (), "new connections and keep-alive (W1-W3), "
           "the highest concurrency", "W1-W3",
           "#w1-w3-the-accept-path-and-keep-alive",
           _run_headline(report.headline)),
    # The W1 and W3 servers pinned: the servers on CPU 1, wrk and the
    # harness on CPU 0, so that the client's cost is not the server's.
    Family("pinned", ("--workloads", "w1,w3", "--levels", "native",
                      "--servers", "event,bucketed-event,"
                      "bucketed-reuseport,prefork,nginx",
                      "--concurrency", "400", "--runs", "5",
                      "--duration", "5", "--server-cpus", "1",
                      "--client-cpus", "0"),
           "new connections (W1) with the servers on one CPU and wrk on "
           "the other", "pinned",
           "#w1-and-w3-pinned-the-servers-on-one-cpu-wrk-on-the-other",
           _run_headline(report.pinned_headline),
           quick_args=("--quick", "--runs", "2", "--duration", "1")),
    Family("skew", ("--workloads", "skew", "--servers",
                    "prefork,bucketed-reuseport,bucketed-listen,"
                    "bucketed-single", "--concurrency", "400",
                    "--duration", "3"),
           "load skewed between two Listen ports", "skew",
           "#skewed-listen-load-issue-8",
           _run_headline(report.skew_headline)),
    Family("idle", ("--workloads", "idle", "--servers",
                    "event,bucketed-event,nginx", "--levels", "native",
                    "--idle-connections", "0,10000", "--limits", "default"),
           "10,000 idle keep-alive connections, default limits", "idle",
           "#idle-keep-alive-connections-at-the-default-limits-issue-19",
           _run_headline(idle_family.headline)),
    Family("faults", ("--workloads", "faults", "--servers",
                      "prefork,event,bucketed-reuseport,bucketed-event",
                      "--levels", "native", "--runs", "3"),
           "children crashing, hanging, crashing at exit; descriptors "
           "running out", "faults", "#faults-issue-18",
           _run_headline(faults.headline)),
    Family("near-limit", ("--workloads", "near-limit", "--levels", "native",
                          "--runs", "3"),
           "19 of 20 workers held by keep-alive clients", "near the limit",
           "#near-maxrequestworkers-issue-25", _run_headline(limit.headline)),
    Family("restart", ("--workloads", "restart"),
           "20 full and 20 graceful restarts per run under load, every "
           "client counted",
           "counted restarts",
           "#restarts-that-every-client-counts-and-the-soak-issue-39",
           _run_headline(restart.headline)),
    Family("soak", ("--workloads", "soak"),
           "the soak: restarts, reloads, churn and kills under load",
           "soak", "#restarts-that-every-client-counts-and-the-soak-issue-39",
           _run_headline(soak.headline)),
    Family("users", ("--workloads", "users"),
           "TLS, HTTP/2, large files, proxy, PHP", "users",
           "#workloads-users-serve-issue-26", _run_headline(users.headline)),
    Family("memory", ("memory",), "memory per child, prefork model",
           "memory", "#memory-benchrun-memory", _memory_headline,
           quick_args=("--restarts", "10"), out_file="memory.json",
           publishes=False),
    Family("overhead", ("overhead",),
           "per-bucket metrics on, scraped every second", "overhead",
           "#observability-overhead-benchrun-overhead", _overhead_headline,
           quick_args=("--rounds", "3"), publishes=False),
)
FAMILY_NAMES = tuple(family.name for family in FAMILIES)
FAMILY_BY_NAME = {family.name: family for family in FAMILIES}
# What a plan measures: every family of one plan must see them unchanged.
MEASURED_PATHS = ("server", "modules")


# ------------------------------------------------------------------ plan

def _git(*args):
    """git's output in the checkout, None where there is no git."""
    try:
        done = subprocess.run(["git", "-C", REPO_DIR, *args],
                              capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def commit_facts():
    """The commit the plan ran at, and whether tracked files differed from
    it (the build then is not that commit)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": _git("rev-parse", "HEAD"),
            "dirty": None if status is None else bool(status)}


def family_command(family, quick, out_dir, server_args):
    """bench/run's arguments for family, its results in out_dir."""
    args = list(family.args)
    if quick:
        args += family.quick_args
    out = os.path.join(out_dir, family.out_file) if family.out_file \
        else out_dir
    return args + list(server_args) + ["--out", out]


def _last_line(path):
    with open(path) as handle:
        lines = [line.strip() for line in handle if line.strip()]
    return lines[-1] if lines else ""


def _run_family(family, plan_dir, quick, server_args):
    """Runs one family as bench/run does; its entry for plan.json."""
    out_dir = os.path.join(plan_dir, family.name)
    os.makedirs(out_dir, exist_ok=True)
    command = family_command(family, quick, out_dir, server_args)
    log_path = os.path.join(plan_dir, f"{family.name}.log")
    entry = {"name": family.name, "command": ["bench/run", *command],
             "dir": family.name, "log": os.path.basename(log_path),
             "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    began = time.monotonic()
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "bucketbench", *command], cwd=BENCH_DIR,
            stdout=log, stderr=subprocess.STDOUT)
        try:
            status = child.wait()
        except BaseException:
            # SIGTERM, not kill(): bench/run then stops its servers.
            child.terminate()
            child.wait()
            raise
    entry["wall_time_s"] = round(time.monotonic() - began, 1)
    entry["exit_status"] = status
    entry["status"] = STATUS_OF_EXIT.get(status, FAILED)
    if entry["status"] in (SKIPPED, FAILED):
        entry["reason"] = _last_line(log_path) or f"exit status {status}"
    nothing_ran = _nothing_ran(out_dir)
    if entry["status"] == RAN and nothing_ran:
        entry.update(status=SKIPPED, reason=nothing_ran)
    return entry


def _nothing_ran(out_dir):
    """Why a bench/run that planned no run (every server skipped here)
    measured nothing; None when it measured something, or is no bench/run
    of workloads."""
    try:
        with open(os.path.join(out_dir, "summary.json")) as handle:
            summary = json.load(handle)
    except (OSError, ValueError):
        return None
    if summary["points"]:
        return None
    reasons = dict.fromkeys(entry["reason"] for entry in summary["skipped"])
    return "no run: " + ("; ".join(reasons) or "nothing planned")


def _write_plan(plan_dir, plan):
    with open(os.path.join(plan_dir, PLAN_FILE), "w") as handle:
        json.dump(plan, handle, indent=1)


def read_plan(plan_dir):
    """The plan.json of plan_dir; PublishError when it cannot be read."""
    try:
        with open(os.path.join(plan_dir, PLAN_FILE)) as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise PublishError(f"cannot read {PLAN_FILE} in {plan_dir}: "
                           f"{error}") from None


def measured_unchanged_since(commit):
    """Whether the checkout's MEASURED_PATHS (committed or not) are as at
    commit: True, False, or None when git cannot tell."""
    if not commit:
        return None
    try:
        done = subprocess.run(["git", "-C", REPO_DIR, "diff", "--quiet",
                               commit, "--", *MEASURED_PATHS],
                              capture_output=True, check=False)
    except OSError:
        return None
    return {0: True, 1: False}.get(done.returncode)


def resume_refusal(plan, quick, unchanged):
    """Why the plan cannot go on here (None when it can): a --quick plan
    goes on with --quick only, and every family of one plan measures the
    same MPM and modules (unchanged: measured_unchanged_since)."""
    commit = short_commit(plan)
    if plan.get("dirty") is not False:
        return (f"the plan began at {commit}, with changes to tracked "
                f"files or none known: what its families measured is no "
                f"commit to compare with; start a new plan")
    if plan.get("quick") != quick:
        return (f"the plan at {commit} was run "
                f"{'with' if plan.get('quick') else 'without'} --quick; "
                f"go on with it the same way")
    if unchanged is None:
        return (f"cannot tell whether {', '.join(MEASURED_PATHS)} changed "
                f"since the plan's commit {commit} (not a commit here?)")
    if not unchanged:
        return (f"{', '.join(MEASURED_PATHS)} changed since the plan's "
                f"commit {commit}: its families would measure two builds; "
                f"start a new plan")
    return None


def families_in(plan, statuses):
    """The names of the plan's families whose status is one of statuses."""
    return {entry["name"] for entry in plan["families"]
            if entry["status"] in statuses}


def families_left(plan, names):
    """Of names, those the plan has not run cleanly (status RAN: a family
    skipped, failed, partly failed, cut short or never begun runs again),
    in FAMILIES' order."""
    ran = families_in(plan, (RAN,))
    return [name for name in FAMILY_NAMES if name in names
            and name not in ran]


def new_plan(quick):
    """plan.json's content before its first family."""
    return {"schema": PLAN_SCHEMA, **commit_facts(),
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "finished_at": None, "quick": quick, "families": []}


def _in_plan_order(entries):
    """plan.json's family entries in FAMILIES' order, any family unknown
    to this harness last."""
    def position(entry):
        name = entry["name"]
        return FAMILY_NAMES.index(name) if name in FAMILY_NAMES \
            else len(FAMILY_NAMES)
    return sorted(entries, key=position)


def _set_entry(plan_dir, plan, entry):
    """entry in place of its family's in plan, written to plan.json."""
    plan["families"] = _in_plan_order(
        [e for e in plan["families"] if e["name"] != entry["name"]]
        + [entry])
    _write_plan(plan_dir, plan)


def run_plan(plan_dir, plan, names, server_args, say):
    """bench/run --plan publish: every family in names that plan (new_plan
    or read_plan's, to go on with) has not run cleanly (families_left),
    one after the other, at the checkout's commit; plan.json rewritten
    before and after each, so a plan cut short says how far it got and can
    go on (--resume). The exit status: 0 when every family of the plan ran
    and measured every run, else 3."""
    left = families_left(plan, names)
    if plan["families"] and not left:
        say("plan: every family asked for has run; nothing to go on with")
        return 0 if all(e["status"] == RAN for e in plan["families"]) else 3
    os.makedirs(plan_dir, exist_ok=True)
    facts = commit_facts()
    if plan["families"]:
        plan.setdefault("resumed", []).append(
            {**facts, "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z")})
    plan["finished_at"] = None
    _write_plan(plan_dir, plan)
    quick = plan["quick"]
    for name in left:
        family = FAMILY_BY_NAME[name]
        out_dir = os.path.join(plan_dir, name)
        earlier = next((e for e in plan["families"] if e["name"] == name),
                       None)
        _set_entry(plan_dir, plan, {
            "name": name, "dir": name, "status": CUT_SHORT,
            "reason": "the plan stopped while it ran",
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"), **facts})
        if earlier and os.path.exists(out_dir):
            # The family runs again from the start, not into what its
            # earlier run left.
            shutil.rmtree(out_dir)
            say(f"plan: {name}: its earlier run's directory "
                f"({earlier['status']}) removed")
        say(f"plan: {name}: bench/run "
            + " ".join(family_command(family, quick, out_dir, server_args)))
        entry = {**_run_family(family, plan_dir, quick, server_args),
                 **facts}
        _set_entry(plan_dir, plan, entry)
        say(f"plan: {name}: {entry['status']} in "
            f"{entry['wall_time_s'] / 60:.1f} min"
            + (f": {entry['reason']}" if "reason" in entry else ""))
    plan["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
    _write_plan(plan_dir, plan)
    return 0 if all(e["status"] == RAN for e in plan["families"]) else 3


# --------------------------------------------------------------- publish

def load_run(out_dir):
    """(meta, records in running order) of an earlier run."""
    try:
        with open(os.path.join(out_dir, "meta.json")) as handle:
            meta = json.load(handle)
        raw_dir = os.path.join(out_dir, "raw")
        records = []
        for name in os.listdir(raw_dir):
            with open(os.path.join(raw_dir, name)) as handle:
                records.append(json.load(handle))
    except (OSError, ValueError) as error:
        raise PublishError(f"cannot read the run in {out_dir}: {error}") \
            from None
    records.sort(key=lambda record: record["seq"])
    return meta, records


def _edit(*edits):
    """Of each edit (path, begin, end, text), puts text between the lines
    begin and end of the file at path. Every file's new text is made
    before any is written, so that a file without its markers changes
    none; each is written to a temporary file and renamed over its own,
    so that a write that fails leaves that file as it was."""
    contents = []
    try:
        for path, begin, end, text in edits:
            # The file a symbolic link names is the one replaced.
            path = os.path.realpath(path)
            with open(path, encoding="utf-8") as handle:
                contents.append((path, replace_between(
                    handle.read(), begin, end, text, path)))
    except (OSError, TableError) as error:
        raise PublishError(str(error)) from None
    for path, content in contents:
        temporary = None
        try:
            with tempfile.NamedTemporaryFile(
                    "w", encoding="utf-8", dir=os.path.dirname(path),
                    prefix=".publishing-", delete=False) as handle:
                temporary = handle.name
                handle.write(content)
            # Its mode and, where root publishes, its owner as before.
            status = os.stat(path)
            os.chmod(temporary, status.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.chown(temporary, status.st_uid, status.st_gid)
            os.replace(temporary, path)
            temporary = None
        except OSError as error:
            raise PublishError(f"cannot write {path}: {error}") from None
        finally:
            if temporary is not None and os.path.exists(temporary):
                os.unlink(temporary)


def replace_generated(begin, end, text):
    """Puts text between the lines begin and end of docs/benchmarks.md."""
    _edit((DOCS_PAGE, begin, end, text))


def publish(out_dir):
    """--publish DIR: of a plan's directory, every family (publish_plan);
    else DIR's one run."""
    if os.path.exists(os.path.join(out_dir, PLAN_FILE)):
        publish_plan(out_dir)
    else:
        publish_run(out_dir)
    print(f"updated {DOCS_PAGE}", file=sys.stderr)


def publish_run(out_dir):
    """Puts a run's tables into docs/benchmarks.md between its markers and
    its plots into docs/img/bench-*.png. The text around the markers (the
    reading of the numbers) stays as written. A run of skewed workloads
    only goes to the skewed-load section, as its side-by-side tables (the
    full tables stay in its report.md); a run of the idle workload only,
    to the idle section, as its idle tables; a run of faults workloads
    only, to the faults section."""
    meta, records = load_run(out_dir)
    points = report.summarize(records)
    options = meta["options"]
    if all(WORKLOADS[name].users for name in options["workloads"]):
        _publish_users(out_dir, meta, points)
        return
    sections = (
        (lambda w: w.skewed, SKEW_DOCS_BEGIN, SKEW_DOCS_END,
         report.skew_section, "The skewed workloads side by side"),
        (lambda w: w.idle, IDLE_DOCS_BEGIN, IDLE_DOCS_END,
         report.idle_section, "Idle connections beside the active load"),
        (lambda w: w.fault in LIMIT_KINDS, LIMIT_DOCS_BEGIN, LIMIT_DOCS_END,
         limit.section, "Near MaxRequestWorkers side by side"),
        (lambda w: w.fault, FAULTS_DOCS_BEGIN, FAULTS_DOCS_END,
         faults.section, "Faults side by side"),
        (lambda w: w.soak, SOAK_DOCS_BEGIN, SOAK_DOCS_END,
         restart.section, "The soak"),
        (lambda w: w.counted, COUNTED_DOCS_BEGIN, COUNTED_DOCS_END,
         restart.section, "Restarts that every client counts"),
        (lambda w: w.restart, RESTART_DOCS_BEGIN, RESTART_DOCS_END,
         restart.section, "Full restarts side by side"))
    for belongs, begin, end, section, title in sections:
        if all(belongs(WORKLOADS[name]) for name in options["workloads"]):
            text = "\n".join(report.context_lines(meta, "###")) + "\n" \
                + section(points, options, "###", title)
            replace_generated(begin, end, text)
            return
    if not meta.get("placement", {"shared": True})["shared"]:
        # W1-W3 pinned (the plan's pinned family) beside the shared run.
        replace_generated(PINNED_DOCS_BEGIN, PINNED_DOCS_END,
                          report.render_markdown(meta, points, {},
                                                 top_level=3))
        return
    image_dir = os.path.join(os.path.dirname(DOCS_PAGE), "img")
    images = {}
    groups = list(report.workload_groups(points, options))
    os.makedirs(image_dir, exist_ok=True)
    for level, workload, _ in groups:
        name = f"bench-{workload}-{level}.png"
        shutil.copy(os.path.join(out_dir, f"plot-{workload}-{level}.png"),
                    os.path.join(image_dir, name))
        images[(level, workload)] = f"img/{name}"
    tables = report.render_markdown(meta, points, images, top_level=3)
    replace_generated(DOCS_BEGIN, DOCS_END, tables)


def _publish_users(out_dir, meta, points):
    """A run of the workloads users serve: its section between the users
    markers, its plots as docs/img/bench-users-*.png."""
    image_dir = os.path.join(os.path.dirname(DOCS_PAGE), "img")
    os.makedirs(image_dir, exist_ok=True)
    images = {}
    for name, _ in users.groups(points, meta["options"]):
        target = f"bench-users-{name}.png"
        shutil.copy(os.path.join(out_dir, f"plot-users-{name}.png"),
                    os.path.join(image_dir, target))
        images[name] = f"img/{target}"
    text = "\n".join(report.context_lines(meta, "###")) + "\n" \
        + users.section(points, meta["options"], "###", plots=images)
    replace_generated(USERS_DOCS_BEGIN, USERS_DOCS_END, text)


@dataclass
class _Context:
    """What the line above the page's table says: the first measured
    family's machine, and the load averages (1 min) every family saw."""
    machine: dict = None
    loads: list = field(default_factory=list)

    def add(self, meta):
        self.machine = self.machine or meta.get("machine")
        for load in (meta.get("machine", {}).get("load_average_at_start"),
                     meta.get("load_average_at_end")):
            if load:
                self.loads.append(load[0])

    def line(self, plan):
        commit = short_commit(plan)
        heading = (f"Plan at {commit}, {plan['started_at'][:16]}"
                   f"{' (--quick)' * plan['quick']}")
        for resumption in plan.get("resumed", ()):
            heading += (f"; gone on with at {short_commit(resumption)}, "
                        f"{resumption['started_at'][:16]}")
        if plan.get("resumed"):
            paths = ", ".join(path + "/" for path in MEASURED_PATHS)
            heading += f" ({paths} as at {commit})"
        if not self.machine:
            return f"{heading}: no family measured."
        m = self.machine
        load = (f"{min(self.loads):g}-{max(self.loads):g}" if self.loads
                else "n/a")
        return (f"{heading}: {m['cpu_model']}, {m['cores']} cores, "
                f"{m['memory_gb']} GB, {m['os']}; kernel {m['kernel']}; "
                f"{m['httpd']}, {m.get('nginx', 'nginx n/a')}; load average "
                f"(1 min) {load} at the families' starts and ends.")


def short_commit(plan):
    commit = (plan.get("commit") or "unknown")[:7]
    return commit + ("-dirty" if plan.get("dirty") else "")


def _meta_of(run_dir):
    try:
        with open(os.path.join(run_dir, "meta.json")) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def plan_rows(plan_dir, plan, context):
    """One row per family of the plan, in FAMILIES' order; publishes each
    measured family's section on the way."""
    entries = {entry["name"]: entry for entry in plan["families"]}
    rows = []
    for family in FAMILIES:
        entry = entries.get(family.name)
        if entry is None or entry["status"] == CUT_SHORT:
            # Never begun, or stopped (or still running): the page keeps
            # the family's earlier row.
            continue
        run_dir = os.path.join(plan_dir, entry["dir"])
        if entry["status"] in MEASURED:
            if family.publishes:
                publish_run(run_dir)
            context.add(_meta_of(run_dir))
            figure = family.headline(run_dir)
            if entry["status"] == RUNS_FAILED:
                figure += " (some runs failed: see its report)"
        else:
            figure = f"{entry['status']}: {entry['reason']}"
        # A plan gone on with (--resume): each family at its own commit.
        rows.append(Row(family.name, family.what,
                        figure.replace("|", "/"),
                        short_commit(entry if "commit" in entry else plan),
                        entry["started_at"][:10], family.title,
                        family.anchor))
    return rows


def publish_plan(plan_dir):
    """Every family of the plan in plan_dir published as publish_run does,
    then the page's table of today's results and README's results table
    from the same rows."""
    plan = read_plan(plan_dir)
    # Kept first: a plan that cannot be kept changes nothing on the page.
    with _kept(plan_dir, plan):
        context = _Context()
        rows = plan_rows(plan_dir, plan, context)
        line = context.line(plan)
        planned = {row.family for row in rows}
        if planned != {family.name for family in FAMILIES}:
            # A plan of some families: the others keep their rows, each
            # with its own commit and date.
            with open(DOCS_PAGE, encoding="utf-8") as handle:
                kept = {row.family: row for row in page_rows(handle.read())}
            rows = [next((r for r in rows if r.family == family.name), None)
                    or kept.get(family.name) for family in FAMILIES]
            rows = [row for row in rows if row is not None]
            line += (" Rows of the families this plan did not run ("
                     + ", ".join(sorted({r.family for r in rows} - planned))
                     + ") are from earlier runs, at their own commit and "
                       "date.")
        _edit((DOCS_PAGE, PAGE_BEGIN, PAGE_END, page_table(rows, line)),
              (README, README_BEGIN, README_END, readme_table(rows)))


def kept_plans():
    """{name: plan} of the plans kept in PUBLISHED_DIR."""
    plans = {}
    if os.path.isdir(PUBLISHED_DIR):
        for name in sorted(os.listdir(PUBLISHED_DIR)):
            if os.path.isfile(os.path.join(PUBLISHED_DIR, name, PLAN_FILE)):
                plans[name] = read_plan(os.path.join(PUBLISHED_DIR, name))
    return plans


@contextlib.contextmanager
def _kept(plan_dir, plan):
    """Around the page's edits: the plan copied first (all but each run's
    servers/, its configurations and error logs), so that a copy that
    fails leaves the page alone; once the edits are done, the copy put in
    PUBLISHED_DIR as the plan's, and the kept plans whose every family
    this plan measured again removed (those with a row still on the page
    stay, so that `bench/run --publish` of the kept plans, oldest first,
    writes the page). Nothing is copied for a plan kept there already."""
    source = os.path.realpath(plan_dir)
    published = os.path.realpath(PUBLISHED_DIR)
    if os.path.commonpath([source, published]) == published:
        if os.path.dirname(source) != published:
            raise PublishError(f"{plan_dir} is inside {PUBLISHED_DIR} but "
                               f"not one of its plans")
        yield
        return
    if os.path.commonpath([source, published]) == source:
        raise PublishError(f"{PUBLISHED_DIR} is inside the plan {plan_dir}")

    def servers_of_runs(directory, names):
        is_run = os.path.dirname(directory) == source
        return ["servers"] if is_run and "servers" in names else []
    try:
        os.makedirs(os.path.dirname(published), exist_ok=True)
        keeping = tempfile.mkdtemp(dir=os.path.dirname(published),
                                   prefix=".keeping-")
    except OSError as error:
        raise PublishError(f"cannot make room to keep {plan_dir} beside "
                           f"{PUBLISHED_DIR}: {error}") from None
    copy = os.path.join(keeping, "plan")
    try:
        try:
            shutil.copytree(source, copy, ignore=servers_of_runs)
        except OSError as error:
            raise PublishError(f"cannot copy {plan_dir} to keep it: "
                               f"{error}") from None
        yield
        target = os.path.join(published, os.path.basename(source))
        measured = families_in(plan, MEASURED)
        try:
            os.makedirs(published, exist_ok=True)
            if os.path.exists(target):
                shutil.rmtree(target)
            os.rename(copy, target)
            for name, kept in kept_plans().items():
                if name != os.path.basename(target) \
                        and families_in(kept, MEASURED) <= measured:
                    shutil.rmtree(os.path.join(published, name))
        except OSError as error:
            raise PublishError(f"cannot keep the plan in {target}: "
                               f"{error}") from None
    finally:
        shutil.rmtree(keeping, ignore_errors=True)

