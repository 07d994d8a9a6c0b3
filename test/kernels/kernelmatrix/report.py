# SPDX-License-Identifier: Apache-2.0
"""Judging a guest's report and building the kernel x check matrix (pure:
text in, results out). A guest run passes only when its report is whole:
begun, ended, every expected line present once and well-formed, no panic
or oops on the console, and the guest stopped by itself in time. Anything
else is a FAIL, never a pass.

The guest (guest/init.sh) writes these lines to its report port:
  KTEST BEGIN kernel=RELEASE cpus=N
  FEATURE name yes|no detail       kprobe's behavioural findings
  PROBE <bucketed's start-up probe log line>
  CHECK name PASS|FAIL|SKIP detail
  KTEST END
"""
import re
from dataclasses import dataclass, field

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

# What kprobe finds out, in matrix order, with the kernel that brought it.
FEATURES = {
    "reuseport": "SO_REUSEPORT (3.9)",
    "incoming_cpu": "SO_INCOMING_CPU settable (4.4)",
    "cbpf_attach": "SO_ATTACH_REUSEPORT_CBPF attaches (4.5)",
    "cbpf_steers": "CBPF steers TCP connections (4.6)",
    "ebpf_load": "SK_REUSEPORT program loads (4.19)",
    "ebpf_attach": "SO_ATTACH_REUSEPORT_EBPF attaches (4.19)",
    "migrate_prog_load": "SELECT_OR_MIGRATE program loads (5.14)",
    "migrate_sysctl": "tcp_migrate_req sysctl exists (5.14)",
    "migrate_req": "tcp_migrate_req=1 migrates a queued connection (5.14)",
    "epoll_exclusive": "EPOLLEXCLUSIVE accepted on a listener (4.5)",
}

# bucketed's start-up probe against kprobe's finding: key in the log line,
# the values that mean "has it", the feature it must agree with. bucketed
# logs the tcp_migrate_req sysctl's state, not whether migration works (on
# Debian's 5.10 the sysctl exists and nothing migrates): that line is held
# to the sysctl; the migrate_req row shows the behaviour.
PROBE_CHECKS = {
    "probe_reuseport": ("SO_REUSEPORT", ("yes",), "reuseport"),
    "probe_epoll_exclusive": ("EPOLLEXCLUSIVE", ("yes",), "epoll_exclusive"),
    "probe_incoming_cpu": ("SO_INCOMING_CPU", ("yes",), "incoming_cpu"),
    "probe_reuseport_bpf": ("reuseport BPF", ("yes",), "cbpf_steers"),
    "probe_migrate_sysctl": ("tcp_migrate_req", ("on", "off"),
                             "migrate_sysctl"),
}
_PROBE_VALUE = r"(yes|no|absent|on|off)\b"

# Checks the guest reports itself, in matrix order.
GUEST_CHECKS = {
    "start": "httpd with bucketed starts",
    "migration": "bucketed's migration choice agrees (5.14; drain 4.19)",
    "steering": "BucketSteering auto runs its load program where an "
                "SK_REUSEPORT program attaches (4.19), else the hash",
    "strategy": "strategy as the kernel allows",
    "sockets": "one listening socket per bucket",
    "serving": "every bucket serves",
    "graceful": "graceful restart under load, 0 failed",
    "plan_change": "BucketCount 2-4-2-2-4-2-2 under load, 0 failed "
                   "(migration or drain)",
    "full_stop": "4 full restarts on a held socket under load, 0 failed "
                 "(migration or drain)",
    "fallback": "no SO_REUSEPORT (shim): strategy listen",
    "event_model": "ChildModel event serves, graceful under load",
}
# The only checks a guest may SKIP, each with what another check of the
# same report must say for the SKIP to stand: (check, text in its detail).
# plan_change and full_stop may be skipped only where bucketed found
# neither migration nor drain (before 4.19), where resets are expected. A
# SKIP of any other check, or without its condition, fails, so that a
# guest script cannot pass by skipping.
SKIPPABLE = {"plan_change": ("migration", "bucketed: migration: none"),
             "full_stop": ("migration", "bucketed: migration: none")}
# Reported only when something went wrong.
OPTIONAL_CHECKS = {
    "kprobe": "kprobe ran",
    "stop": "httpd stops on SIGTERM",
}

ROWS = {"guest": "guest booted, reported, ended"}
ROWS.update(FEATURES)
ROWS.update({name: f"bucketed probe agrees: {key}"
             for name, (key, _, _) in PROBE_CHECKS.items()})
ROWS["probe_migrate_sysctl"] += " (the sysctl)"
ROWS.update(GUEST_CHECKS)
ROWS.update(OPTIONAL_CHECKS)

_LINE = re.compile(r"^(?:"
                   r"KTEST (?P<ktest>BEGIN|END)(?: (?P<begin>.*))?"
                   r"|FEATURE (?P<feature>\w+) (?P<has>yes|no)(?: (?P<fdetail>.*))?"
                   r"|CHECK (?P<check>\w+) (?P<status>PASS|FAIL|SKIP)(?: (?P<cdetail>.*))?"
                   r"|PROBE (?P<probe>.*)"
                   r")$")
_CONSOLE_FAILURES = re.compile(r"Kernel panic|\bOops\b|\bBUG:|"
                               r"general protection fault|"
                               r"Attempted to kill init")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1bc")


@dataclass
class Cell:
    status: str          # PASS, FAIL or SKIP; features: PASS for yes or no
    value: str           # what the matrix shows
    detail: str = ""


@dataclass
class Parsed:
    begin: str = None                 # the BEGIN line's text, if any
    ended: bool = False
    features: dict = field(default_factory=dict)   # name -> (bool, detail)
    checks: dict = field(default_factory=dict)     # name -> (status, detail)
    probe: str = None
    problems: list = field(default_factory=list)   # garbled, duplicate...


@dataclass
class GuestRun:
    """What the host saw of one guest: how it ended and its two outputs."""
    outcome: str                 # "exited", "timeout" or "error"
    report: str = ""
    console: str = ""
    exit_code: int = None
    seconds: float = 0.0
    attempts: int = 1
    detail: str = ""             # for "error": why it did not run


@dataclass
class KernelResult:
    kernel: str                  # the column title
    cells: dict                  # row name -> Cell
    verdict: str                 # PASS or FAIL
    problems: list


def clean(text):
    """Report or console text as lines: ANSI escapes and CRs removed."""
    return _ANSI.sub("", text).replace("\r", "").split("\n")


def parse_report(text):
    parsed = Parsed()
    for number, line in enumerate(clean(text), 1):
        line = line.strip()
        if not line:
            continue
        if parsed.ended:
            parsed.problems.append(f"line {number} after END: {line[:80]!r}")
            continue
        m = _LINE.match(line)
        if m is None:
            parsed.problems.append(f"line {number} garbled: {line[:80]!r}")
        elif m["ktest"] == "BEGIN":
            if parsed.begin is not None:
                parsed.problems.append(f"line {number}: second BEGIN")
            parsed.begin = m["begin"] or ""
        elif m["ktest"] == "END":
            parsed.ended = True
        elif m["feature"]:
            _add(parsed, parsed.features, FEATURES, m["feature"],
                 (m["has"] == "yes", m["fdetail"] or ""), number)
        elif m["check"]:
            known = dict(GUEST_CHECKS, **OPTIONAL_CHECKS)
            _add(parsed, parsed.checks, known, m["check"],
                 (m["status"], m["cdetail"] or ""), number)
        elif parsed.probe is not None:
            parsed.problems.append(f"line {number}: second PROBE line")
        else:
            parsed.probe = m["probe"]
    return parsed


def _add(parsed, table, known, name, value, number):
    if name not in known:
        parsed.problems.append(f"line {number}: unknown name {name!r}")
    elif name in table:
        parsed.problems.append(f"line {number}: {name} reported twice")
    else:
        table[name] = value


def console_failures(console_text):
    """Lines of the guest console that show the kernel failing."""
    return [line.strip() for line in clean(console_text)
            if _CONSOLE_FAILURES.search(line)]


def probe_findings(probe_line):
    """bucketed's probe line as {key: value}, for the keys present."""
    found = {}
    for key, _, _ in PROBE_CHECKS.values():
        m = re.search(re.escape(key) + " " + _PROBE_VALUE, probe_line or "")
        if m:
            found[key] = m.group(1)
    return found


def _probe_cells(parsed):
    cells = {}
    findings = probe_findings(parsed.probe)
    for name, (key, has_values, feature) in PROBE_CHECKS.items():
        if not parsed.probe:
            cells[name] = Cell(FAIL, FAIL, "no bucketed probe line")
        elif key not in findings:
            cells[name] = Cell(FAIL, FAIL, f"the probe line lacks '{key}'")
        elif feature not in parsed.features:
            cells[name] = Cell(FAIL, FAIL, f"no kprobe finding {feature}")
        else:
            says = findings[key]
            works = parsed.features[feature][0]
            agree = (says in has_values) == works
            cells[name] = Cell(
                PASS if agree else FAIL, PASS if agree else FAIL,
                f"bucketed: {key} {says}; kprobe {feature}: "
                f"{'yes' if works else 'no'}")
    return cells


def _guest_cell(parsed, run, failures):
    why = []
    if run.outcome == "timeout":
        why.append(f"timed out after {run.seconds:.0f} s")
    elif run.outcome == "error":
        why.append(f"did not run: {run.detail}")
    elif run.exit_code not in (0, None):
        why.append(f"qemu exited {run.exit_code}")
    if failures:
        why.append(f"console: {failures[0][:100]}")
    if parsed.begin is None:
        why.append("no BEGIN line")
    if not parsed.ended:
        why.append("no END line")
    why.extend(parsed.problems)
    retried = f" (attempt {run.attempts})" if run.attempts > 1 else ""
    if why:
        return Cell(FAIL, FAIL, "; ".join(why) + retried)
    return Cell(PASS, PASS, f"{parsed.begin}, {run.seconds:.0f} s{retried}")


def _skip_refused(parsed, name):
    """Why a SKIP of check `name` does not stand, or None when it does."""
    if name not in SKIPPABLE:
        return "may not be skipped"
    other, text = SKIPPABLE[name]
    _, detail = parsed.checks.get(other, (None, ""))
    if text not in detail:
        return f"may be skipped only when the {other} check says '{text}'"
    return None


def judge(kernel, run):
    """The KernelResult of one guest run: one cell per row of ROWS that
    applies (optional checks only when reported)."""
    parsed = parse_report(run.report)
    failures = console_failures(run.console)
    cells = {"guest": _guest_cell(parsed, run, failures)}
    missing = "not reported" + ("" if cells["guest"].status == PASS
                                else " (the guest failed)")
    for name in FEATURES:
        if name in parsed.features:
            has, detail = parsed.features[name]
            cells[name] = Cell(PASS, "yes" if has else "no", detail)
        else:
            cells[name] = Cell(FAIL, FAIL, missing)
    cells.update(_probe_cells(parsed))
    for name in list(GUEST_CHECKS) + list(OPTIONAL_CHECKS):
        if name in parsed.checks:
            status, detail = parsed.checks[name]
            refused = _skip_refused(parsed, name) if status == SKIP else None
            if refused:
                cells[name] = Cell(FAIL, FAIL, f"{refused}: {detail}")
            else:
                cells[name] = Cell(status, status, detail)
        elif name in GUEST_CHECKS:
            cells[name] = Cell(FAIL, FAIL, missing)
    verdict = PASS if all(c.status != FAIL for c in cells.values()) else FAIL
    return KernelResult(kernel, cells, verdict, parsed.problems)


def matrix_rows(results):
    """Row names, in ROWS order, that any result has a cell for."""
    return [row for row in ROWS if any(row in r.cells for r in results)]


def render_text(results):
    """The matrix for a terminal: one row per check, one column a kernel."""
    rows = matrix_rows(results)
    header = ["check"] + [r.kernel for r in results]
    table = [header]
    for row in rows:
        table.append([row] + [r.cells[row].value if row in r.cells else "-"
                              for r in results])
    table.append(["VERDICT"] + [r.verdict for r in results])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths))
                     .rstrip() for line in table)


def _md(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(results):
    """The matrix as a Markdown table, then every cell's detail per kernel."""
    rows = matrix_rows(results)
    out = ["| check | " + " | ".join(_md(r.kernel) for r in results) + " |",
           "|---|" + "---|" * len(results)]
    for row in rows:
        values = [r.cells[row].value if row in r.cells else "-"
                  for r in results]
        out.append(f"| {_md(ROWS[row])} | " + " | ".join(values) + " |")
    out.append("| **verdict** | " + " | ".join(f"**{r.verdict}**"
                                               for r in results) + " |")
    for r in results:
        out += ["", f"### {_md(r.kernel)}", ""]
        for row in rows:
            if row in r.cells:
                cell = r.cells[row]
                out.append(f"- `{row}` {cell.value}: {_md(cell.detail)}")
    return "\n".join(out) + "\n"


def render_floors(floors):
    """kprobe's findings per emulated floor ({title: Parsed}) as a
    Markdown table; a finding kprobe did not report shows as FAIL."""
    titles = list(floors)
    out = ["| finding | " + " | ".join(_md(t) for t in titles) + " |",
           "|---|" + "---|" * len(titles)]
    for name, text in FEATURES.items():
        values = []
        for parsed in floors.values():
            has = parsed.features.get(name)
            values.append(FAIL if has is None else "yes" if has[0] else "no")
        out.append(f"| {_md(text)} | " + " | ".join(values) + " |")
    problems = [f"- {_md(t)}: {_md(p)}" for t, parsed in floors.items()
                for p in parsed.problems]
    return "\n".join(out + ([""] + problems if problems else [])) + "\n"


DOC_INTRO = """\
# bucketed on real kernels

Generated by `{command}` on {date}.
Host: {host}; {qemu}.
Guests run under TCG (`-accel {accel} -cpu {cpu}`), {cpus} vCPUs,
{memory} MiB, no network device (each guest talks only to its own loopback). cmpxchg16b is masked because qemu 7.2's TCG crashed Debian's
6.12 in SLUB's cmpxchg16b path in 11 of 20 boots (0 of 18 without it); a
guest that dies before its first check is booted once more.

**Real kernels** (columns below) are Debian's cloud kernels, booted in qemu
with an initramfs holding this machine's Debian apache2, the bucketed
modules built from this tree, busybox, and two static helpers of
`test/kernels/guest/`: `kprobe` (tries each kernel feature and reports what
happened) and `kload` (the HTTP client). Debian's archive has nothing older
than 5.10. **Emulated floors** (the second table) are this machine's kernel
with `bench/noreuseport.so` preloaded and `BUCKETED_SHIM_KERNEL` set: the
shim refuses, with the errno those kernels give, what kernels before 3.9,
4.5, 4.19 and 5.14 lack. The shim sees only calls through libc and does not
change `uname`, so a probe that trusts the version number sees the host's.

Under TCG the guests serve a few hundred requests per second: these runs
check correctness only. Speed numbers come from the host
([benchmarks](benchmarks.md)), never from a guest.

How to read the matrix: a kernel feature row shows what `kprobe` found
(`yes`/`no`, or FAIL when it was not reported); a check row shows PASS,
FAIL or SKIP. The `bucketed probe agrees` rows compare bucketed's start-up
log line (`bucketed: kernel ...`) with `kprobe`'s finding: FAIL means
bucketed believes something about the kernel that is not so. A guest that
hung, panicked, or whose report was incomplete or garbled is FAIL, never a
pass.

`plan_change` restarts gracefully (SIGUSR1, the config file rewritten)
through BucketCount 2, 4, 2, 2, 4, 2, 2 under `kload` and passes with 0
failed requests. A socket the lower count drops is migrated by the kernel
where bucketed's trial found migration (5.14+: it leaves its group, its queue
moving, once no old child accepts from it, then closes: 2 sockets after 4->2),
or drained where it found only SK_REUSEPORT eBPF (4.19-5.13:
still listening, 4 sockets after 4->2, closed at the next restart, 2); the
guest waits for those counts and the matching log lines. Only where the
migration line says `none` (before 4.19: resets expected) may it SKIP.
`steering` reads which steering `BucketSteering auto` chose: `load` wherever
`kprobe` attached an SK_REUSEPORT program, since bucketed's start-up trial
loads its own load program through the same verifier (a refusal would show
as the hash, which every other check would pass with), else the hash.
`event_model` runs `ChildModel event` (ThreadsPerChild 8, BucketCount 2):
every bucket serves, and a graceful restart under load fails nothing.

Run it again: `test/kernels/run --markdown docs/kernels.md` (all kernels,
{minutes} min here); `test/kernels/run --short` is the CI mode
(5.10 and 6.1, no document).
"""


def notes(results):
    """What the matrix shows that a probe must not get wrong."""
    found = []
    for r in results:
        sysctl, works = r.cells.get("migrate_sysctl"), r.cells.get(
            "migrate_req")
        if sysctl and works and sysctl.value == "yes" and works.value == "no":
            found.append(f"- {r.kernel}: `net.ipv4.tcp_migrate_req` exists, "
                         f"yet closing a listener with tcp_migrate_req=1 "
                         f"migrated nothing ({works.detail}). Whether "
                         f"migration works must be probed by behaviour, "
                         f"never by the sysctl file.")
    return found


def plan_changes(results):
    """What plan_change found on each kernel, one line each."""
    return [f"- {r.kernel}: {r.cells['plan_change'].value}: "
            f"{r.cells['plan_change'].detail}"
            for r in results if "plan_change" in r.cells]


FLOORS_NOTE = """\
`kprobe` run on the host in a network namespace of its own, through the
shim. The shim does not emulate SO_INCOMING_CPU (4.4) or EPOLLEXCLUSIVE
(4.5; older kernels ignore the unknown flag), and it is stricter than a
real kernel on one point: Debian's 5.10 (above) loads a SELECT_OR_MIGRATE
program and then migrates nothing, while the shim refuses it with EINVAL.
"""


def render_document(meta, results, floors):
    """docs/kernels.md: the introduction (meta fills it), the real-kernel
    matrix and what it shows, the emulated floors, then every real-kernel
    cell's detail."""
    text = DOC_INTRO.format(**meta)
    matrix = render_markdown(results)
    table, _, details = matrix.partition("\n\n")
    text += "\n## Real kernels\n\n" + table + "\n"
    if notes(results):
        text += "\n" + "\n".join(notes(results)) + "\n"
    if plan_changes(results):
        text += ("\n### Plan changes under load (plan_change)\n\n"
                 + "\n".join(plan_changes(results)) + "\n")
    if floors:
        text += "\n## Emulated floors (this machine's kernel, shim)\n\n"
        text += render_floors(floors) + "\n" + FLOORS_NOTE
    text += "\n## Details\n\n" + details
    return text
