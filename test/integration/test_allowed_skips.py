# SPDX-License-Identifier: Apache-2.0
"""
A skipped, xfailed or xpassed test fails the run unless
test/allowed-skips.txt lists it with its reason (test/conftest.py). Runs
pytest on small test files beside a copy of that conftest and list.
"""
import shutil
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
TESTS = """\
import pytest

pytestmark = pytest.mark.filterwarnings("ignore")


def test_runs():
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_skips(n):
    pytest.skip("not on this machine")
"""
HEADER = "# a comment, and a blank line, list nothing\n\n"


def pytest_in(directory, allowed):
    """Runs pytest on `directory` (test files written by the caller) with
    the tree's conftest.py and `allowed` as its list."""
    shutil.copy(TOP / "test" / "conftest.py", directory / "conftest.py")
    (directory / "allowed-skips.txt").write_text(HEADER + allowed)
    (directory / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                          "no:cacheprovider", str(directory)],
                         cwd=directory, capture_output=True, text=True,
                         timeout=120)
    out.output = out.stdout + out.stderr
    return out


def test_unlisted_skip_fails_the_run(tmp_path):
    (tmp_path / "test_a.py").write_text(TESTS)
    out = pytest_in(tmp_path, "")
    assert out.returncode == 1, out.output
    assert "1 passed, 2 skipped" in out.output
    for n in (1, 2):
        assert (f"test_a.py::test_skips[{n}] skipped (Skipped: not on this "
                f"machine) and is not in {tmp_path}/allowed-skips.txt"
                in out.output), out.output
    # Listing one leaves the other failing the run.
    out = pytest_in(tmp_path, "test_a.py::test_skips[1] no such device\n")
    assert out.returncode == 1, out.output
    assert "test_skips[1] skipped" not in out.output
    assert "test_skips[2] skipped" in out.output


def test_listed_skips_pass(tmp_path):
    (tmp_path / "test_a.py").write_text(TESTS)
    out = pytest_in(tmp_path, "test_a.py::test_skips[*] no such device\n")
    assert out.returncode == 0, out.output
    assert "1 passed, 2 skipped" in out.output


def test_listed_without_reason_fails_the_run(tmp_path):
    (tmp_path / "test_a.py").write_text(TESTS)
    out = pytest_in(tmp_path, "test_a.py::test_skips[*]\n")
    assert out.returncode == 1, out.output
    assert "allowed-skips.txt:3: test_a.py::test_skips[*] is listed " \
           "without its reason" in out.output


def test_skipped_module_fails_the_run(tmp_path):
    (tmp_path / "test_b.py").write_text(
        "import pytest\n\n"
        "pytest.skip('needs a tool', allow_module_level=True)\n")
    out = pytest_in(tmp_path, "")
    assert out.returncode == 1, out.output
    assert "test_b.py skipped (Skipped: needs a tool)" in out.output


XFAILS = """\
import pytest

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.xfail(reason="a known bug")
def test_fails_as_marked():
    assert 0


@pytest.mark.xfail(reason="a bug since fixed")
def test_passes_though_marked():
    pass


def test_gives_up():
    pytest.xfail("gave up")


@pytest.mark.xfail(run=False, reason="never run")
def test_not_run():
    pass
"""


def test_unlisted_xfail_and_xpass_fail_the_run(tmp_path):
    (tmp_path / "test_x.py").write_text(XFAILS)
    out = pytest_in(tmp_path, "")
    assert out.returncode == 1, out.output
    assert "3 xfailed, 1 xpassed" in out.output, out.output
    for line in ("test_fails_as_marked xfailed (a known bug)",
                 "test_passes_though_marked xpassed (a bug since fixed)",
                 "test_gives_up xfailed (gave up)",
                 "test_not_run xfailed ([NOTRUN] never run)"):
        assert (f"test_x.py::{line} and is not in "
                f"{tmp_path}/allowed-skips.txt" in out.output), out.output
    # Listed, they pass as skips do.
    out = pytest_in(tmp_path, "test_x.py::* issue 99, a known bug\n")
    assert out.returncode == 0, out.output
    assert "3 xfailed, 1 xpassed" in out.output
    assert "skips not allowed" not in out.output


def test_a_failure_stays_a_failure(tmp_path):
    (tmp_path / "test_c.py").write_text("def test_fails():\n    assert 0\n")
    out = pytest_in(tmp_path, "")
    assert out.returncode == 1, out.output
    assert "1 failed" in out.output
    assert "skips not allowed" not in out.output


def test_the_tree_runs_with_the_gate():
    # test/conftest.py is above every test directory of the tree.
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q",
                          "--trace-config", "-p", "no:cacheprovider",
                          "test/integration/test_allowed_skips.py"],
                         cwd=TOP, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PLUGIN registered: <conftest.SkipGate object" in out.stdout
