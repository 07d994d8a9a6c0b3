# SPDX-License-Identifier: Apache-2.0
"""For every pytest run of the tree's tests (test/integration, test/bench,
test/kernels): a skip, an xfail or an xpass fails the run unless the test
is listed, with its reason, in allowed-skips.txt beside this file. An
xfail is a test that did not show what it is named for, as a skip is; an
xpass is an xfail mark that no longer says what the test does. Each is
still reported as pytest reports it; the summary names each unlisted one
and the run exits 1."""
import re
from pathlib import Path

import pytest

ALLOWED_SKIPS = Path(__file__).with_name("allowed-skips.txt")


def matcher(pattern):
    """A test id pattern: `*` matches anything, the rest ([ ] too, which
    parametrized ids have) only itself."""
    return re.compile(".*".join(map(re.escape, pattern.split("*"))))


def read_allowed(path):
    """(patterns, problems) of the list: a pattern with no reason is a
    problem."""
    patterns, problems = [], []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition(" ")
        if not reason.strip():
            problems.append(f"{path}:{number}: {pattern} is listed "
                            "without its reason")
        patterns.append(matcher(pattern))
    return patterns, problems


class SkipGate:
    def __init__(self):
        self.patterns, self.problems = read_allowed(ALLOWED_SKIPS)

    def note(self, report):
        if hasattr(report, "wasxfail"):
            # pytest reports an xfail as skipped, an xpass as passed;
            # pytest 7 puts "reason: " before pytest.xfail()'s reason.
            outcome = "xfailed" if report.skipped else "xpassed"
            reason = report.wasxfail.removeprefix("reason: ")
        elif report.skipped:
            outcome = "skipped"
            reason = (report.longrepr[2] if isinstance(report.longrepr, tuple)
                      else str(report.longrepr))
        else:
            return
        if any(p.fullmatch(report.nodeid) for p in self.patterns):
            return
        self.problems.append(f"{report.nodeid} {outcome} ({reason}) and is "
                             f"not in {ALLOWED_SKIPS}")

    def pytest_runtest_logreport(self, report):
        self.note(report)

    def pytest_collectreport(self, report):
        self.note(report)

    def pytest_terminal_summary(self, terminalreporter):
        if self.problems:
            terminalreporter.section("skips not allowed", red=True)
            for problem in self.problems:
                terminalreporter.line(problem)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        # Not over an interruption or an internal error; a run whose only
        # test skipped (no test collected) fails too.
        if self.problems and session.exitstatus in (
                pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config):
    config.pluginmanager.register(SkipGate(), "bucketed-skip-gate")
