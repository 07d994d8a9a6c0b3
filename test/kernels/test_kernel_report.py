# SPDX-License-Identifier: Apache-2.0
"""The kernel-matrix tool judged on fixtures: a whole report passes; a
missing, garbled or duplicated line, a panic, a timeout or a dead qemu
fails, never passes."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kernelmatrix import report  # noqa: E402
from kernelmatrix.report import FAIL, PASS, GuestRun  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")


def fixture(name):
    with open(os.path.join(FIXTURES, name), newline="") as f:
        return f.read()


GOOD = fixture("report-5.10.txt")
CONSOLE_OK = fixture("console-ok.txt")


def judged(report_text=GOOD, console=CONSOLE_OK, outcome="exited",
           exit_code=0):
    run = GuestRun(outcome, report=report_text, console=console,
                   exit_code=exit_code, seconds=14.0)
    return report.judge("5.10", run)


def without(text, prefix):
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(prefix)]
    assert len(kept) == len(lines) - 1, f"fixture has one {prefix!r} line"
    return "".join(kept)


def replace_line(text, prefix, new):
    return "".join(new + "\r\n" if line.startswith(prefix) else line
                   for line in text.splitlines(keepends=True))


def test_the_whole_report_passes_with_every_row():
    result = judged()
    assert result.verdict == PASS, result.cells
    assert set(result.cells) == set(report.ROWS) - set(
        report.OPTIONAL_CHECKS)
    assert result.cells["guest"].status == PASS
    assert result.cells["migrate_req"].value == "no"      # Debian's 5.10
    assert result.cells["migrate_sysctl"].value == "yes"
    assert result.cells["migration"].detail.startswith(
        "bucketed: migration: drain")                     # 4.19-5.13
    assert result.cells["plan_change"].value == PASS
    assert result.cells["full_stop"].value == PASS
    assert result.cells["event_model"].value == PASS
    assert result.cells["steering"].detail.startswith(
        "bucketed: steering: load (BucketSteering auto)")  # 4.19+
    assert result.cells["graceful"].detail.endswith("failed=0 first_error=none")
    assert result.cells["plan_change"].detail.endswith(
        "failed=0 first_error=none")
    assert "failed=0 first_error=none" in result.cells["full_stop"].detail


@pytest.mark.parametrize("prefix", [
    "CHECK graceful", "CHECK serving", "CHECK event_model",
    "CHECK plan_change", "CHECK full_stop", "CHECK steering",
    "FEATURE cbpf_steers", "FEATURE migrate_req"])
def test_a_missing_line_fails_its_row_and_the_kernel(prefix):
    name = prefix.split()[1]
    result = judged(without(GOOD, prefix))
    assert result.cells[name].status == FAIL
    assert "not reported" in result.cells[name].detail
    assert result.verdict == FAIL


def test_no_probe_line_fails_every_probe_row():
    result = judged(without(GOOD, "PROBE "))
    for name in report.PROBE_CHECKS:
        assert result.cells[name].status == FAIL
    assert result.verdict == FAIL


@pytest.mark.parametrize("garbled", [
    "CHECK serving PA[    3.112] random: crng init done",
    "CHECK graceful MAYBE ok",
    "FEATURE cbpf_steers perhaps",
    "CHEC",
    "\x00\x00\x00",
])
def test_a_garbled_line_fails_the_guest(garbled):
    text = GOOD.replace("KTEST END", garbled + "\r\nKTEST END")
    result = judged(text)
    assert result.cells["guest"].status == FAIL
    assert "garbled" in result.cells["guest"].detail
    assert result.verdict == FAIL


@pytest.mark.parametrize("line", [
    "CHECK graceful PA[ 9.1] sd 0:0:0:0: attached",       # garbled
    "CHECK graceful FAIL ok=120 failed=3 first_error=x",  # failed
    "CHECK graceful SKIP no time",                        # not skippable
])
def test_a_bad_check_line_fails_its_row_and_the_kernel(line):
    result = judged(replace_line(GOOD, "CHECK graceful", line))
    assert result.cells["graceful"].status == FAIL
    assert result.verdict == FAIL


NO_MIGRATION = ("CHECK migration PASS bucketed: migration: none: the kernel "
                "refused a SELECT_OR_MIGRATE program (Invalid argument: Linux "
                "before 5.14?); kprobe migrate_req: no")
SKIPPABLE = ["plan_change", "full_stop"]


def skip_line(check):
    return (f"CHECK {check} SKIP no migration or drain before 4.19: "
            f"resets expected; ok=3900 failed=14 first_error=reset")


@pytest.mark.parametrize("check", SKIPPABLE)
def test_a_check_may_be_skipped_where_the_kernel_has_no_migration(check):
    text = replace_line(replace_line(GOOD, "CHECK migration", NO_MIGRATION),
                        f"CHECK {check}", skip_line(check))
    result = judged(text)
    assert result.cells[check].value == "SKIP"
    assert result.verdict == PASS


@pytest.mark.parametrize("migration", [
    None,                                 # the fixture's: drain on 5.10
    "CHECK migration PASS bucketed: migration: per-group eBPF (5.14+): a "
    "trial listener closed with 8 queued connection(s) handed them all to "
    "its group; kprobe migrate_req: yes",
    "CHECK migration FAIL no migration line; kprobe migrate_req: no",
])
@pytest.mark.parametrize("check", SKIPPABLE)
def test_a_check_may_not_be_skipped_with_migration_or_drain(migration,
                                                            check):
    text = replace_line(GOOD, f"CHECK {check}", skip_line(check))
    if migration:
        text = replace_line(text, "CHECK migration", migration)
    result = judged(text)
    assert result.cells[check].status == FAIL
    assert "may be skipped only when the migration check says" in \
        result.cells[check].detail
    assert result.verdict == FAIL


@pytest.mark.parametrize("check", SKIPPABLE)
def test_a_check_may_not_be_skipped_without_a_migration_line(check):
    text = replace_line(without(GOOD, "CHECK migration"), f"CHECK {check}",
                        skip_line(check))
    result = judged(text)
    assert result.cells[check].status == FAIL
    assert result.verdict == FAIL


def test_the_event_model_may_not_be_skipped_any_more():
    text = replace_line(GOOD, "CHECK event_model",
                        "CHECK event_model SKIP the event child model does "
                        "not exist yet")
    result = judged(text)
    assert result.cells["event_model"].status == FAIL
    assert "may not be skipped" in result.cells["event_model"].detail
    assert result.verdict == FAIL


def test_a_line_reported_twice_fails():
    text = GOOD.replace("KTEST END", "CHECK serving PASS again\r\nKTEST END")
    result = judged(text)
    assert "reported twice" in result.cells["guest"].detail
    assert result.verdict == FAIL


def test_an_unknown_name_fails():
    text = GOOD.replace("KTEST END", "CHECK teleport PASS\r\nKTEST END")
    assert judged(text).verdict == FAIL


def test_lines_after_the_end_fail():
    assert judged(GOOD + "CHECK late PASS\r\n").verdict == FAIL


def test_an_optional_check_counts_when_reported():
    text = GOOD.replace("KTEST END",
                        "CHECK stop FAIL httpd still runs\r\nKTEST END")
    result = judged(text)
    assert result.cells["stop"].status == FAIL
    assert result.verdict == FAIL


def test_a_panic_fails_even_a_whole_report():
    result = judged(console=fixture("console-panic.txt"))
    assert result.cells["guest"].status == FAIL
    assert "Kernel panic" in result.cells["guest"].detail
    assert result.verdict == FAIL


def test_a_timeout_fails_even_a_whole_report():
    result = judged(outcome="timeout", exit_code=None)
    assert "timed out" in result.cells["guest"].detail
    assert result.verdict == FAIL


def test_a_guest_cut_short_fails_every_unreported_row():
    cut = GOOD[:GOOD.index("CHECK serving")]
    result = judged(cut, outcome="timeout", exit_code=None)
    for name in ("serving", "graceful", "plan_change", "fallback",
                 "event_model"):
        assert result.cells[name].status == FAIL
        assert "the guest failed" in result.cells[name].detail
    assert result.cells["start"].status == PASS
    assert result.verdict == FAIL


@pytest.mark.parametrize("run", [
    GuestRun("exited", report="", console="", exit_code=0),
    GuestRun("exited", report=GOOD, console=CONSOLE_OK, exit_code=1),
    GuestRun("error", detail="qemu-system-x86_64 is not installed"),
])
def test_an_empty_report_or_a_failed_qemu_fails(run):
    result = report.judge("5.10", run)
    assert result.cells["guest"].status == FAIL
    assert result.verdict == FAIL


def test_no_begin_line_fails():
    assert judged(without(GOOD, "KTEST BEGIN")).verdict == FAIL


def test_the_probe_must_agree_with_the_behaviour():
    # bucketed claims BPF steering while kprobe saw it not steer.
    text = replace_line(GOOD, "FEATURE cbpf_steers",
                        "FEATURE cbpf_steers no 4 of 8 on listener 1")
    result = judged(text)
    assert result.cells["probe_reuseport_bpf"].status == FAIL
    assert result.cells["cbpf_steers"].value == "no"
    assert result.verdict == FAIL


def test_the_probe_line_must_name_each_finding():
    text = replace_line(GOOD, "PROBE ",
                        "PROBE bucketed: kernel 5.10.0: SO_REUSEPORT yes")
    result = judged(text)
    assert result.cells["probe_reuseport"].status == PASS
    assert "lacks 'reuseport BPF'" in result.cells["probe_reuseport_bpf"].detail
    assert result.verdict == FAIL


def test_probe_findings_read_the_log_line():
    found = report.probe_findings(
        "bucketed: kernel 3.8.0: SO_REUSEPORT no (Protocol not available), "
        "EPOLLEXCLUSIVE no, SO_INCOMING_CPU no, reuseport BPF no, "
        "tcp_migrate_req absent")
    assert found == {"SO_REUSEPORT": "no", "EPOLLEXCLUSIVE": "no",
                     "SO_INCOMING_CPU": "no",
                     "reuseport BPF": "no", "tcp_migrate_req": "absent"}


def test_the_matrix_shows_each_kernel_and_its_verdict():
    good = judged()
    bad = report.judge("6.12", GuestRun("timeout", report=GOOD[:200],
                                        seconds=300.0))
    text = report.render_text([good, bad])
    lines = text.splitlines()
    assert lines[0].split()[0] == "check" and "6.12" in lines[0]
    verdict = [line for line in lines if line.startswith("VERDICT")][0]
    assert verdict.split()[1:] == [PASS, FAIL]
    serving = [line for line in lines if line.startswith("serving")][0]
    assert serving.split()[1:] == [PASS, FAIL]

    markdown = report.render_markdown([good, bad])
    assert "| **verdict** | **PASS** | **FAIL** |" in markdown
    assert "### 6.12" in markdown and "timed out after 300 s" in markdown


def test_the_floor_table_marks_missing_findings():
    floors = {"shim 3.8": report.parse_report(
        "FEATURE reuseport no setsockopt(SO_REUSEPORT): Protocol not "
        "available\n")}
    table = report.render_floors(floors)
    assert "| SO_REUSEPORT (3.9) | no |" in table
    assert "| SO_INCOMING_CPU settable (4.4) | FAIL |" in table


def test_the_document_says_what_is_real_and_what_emulated():
    meta = {"command": "test/kernels/run --markdown docs/kernels.md",
            "date": "2026-11-22", "host": "h", "qemu": "QEMU 7.2",
            "accel": "tcg,thread=single", "cpu": "qemu64", "cpus": 2,
            "memory": 1024,
            "minutes": 3}
    doc = report.render_document(meta, [judged()], {})
    assert "correctness only" in doc and "Emulated floors" in doc
    assert "## Real kernels" in doc and "## Details" in doc
    assert "| **verdict** | **PASS** |" in doc
    # Debian's 5.10 has the sysctl without the behaviour: the document says so.
    assert "`net.ipv4.tcp_migrate_req` exists, yet" in doc
    # What the plan changes found, per kernel: 5.10 drains, nothing failed.
    assert "### Plan changes under load" in doc
    assert "- 5.10: PASS: dropped sockets drained" in doc
