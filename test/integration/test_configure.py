# SPDX-License-Identifier: Apache-2.0
"""
configure without cmocka: it says so loudly, and `make check` fails rather
than pass without the unit tests, unless they were turned off
(--disable-unit-tests). Runs configure in a copy of the sources, with
pkg-config shown only APR, so that cmocka looks missing.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
# What autoreconf, configure and a build leave at the top of the sources,
# and anywhere: not copied.
TOP_PRODUCTS = {"objs", "autom4te.cache", "build-aux", "configure",
                "configure~", "config.status", "config.log", "Makefile",
                "Makefile.in", "aclocal.m4", ".git", ".pytest_cache",
                "sanitize-build"}
ANYWHERE = shutil.ignore_patterns("__pycache__", "*.so", "*.o")
# The targets of all-local, taken as built: the check under test comes
# before anything they are needed for.
BUILT = ("mod_mpm_bucketed.so", "mod_bucketed_status.so",
         "bench/noreuseport.so", "test/modules/mod_test_fault.so",
         "test/modules/mod_test_takeover.so",
         "test/modules/emfile_shim.so")
CMOCKA_MISSING = "cmocka not found"


def run(cmd, cwd, env=None):
    cp = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=300)
    cp.output = cp.stdout + cp.stderr
    return cp


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A copy of the sources with configure made (autoreconf)."""
    src = tmp_path_factory.mktemp("configure") / "src"
    shutil.copytree(TOP, src, symlinks=True, ignore=lambda d, names: (
        ANYWHERE(d, names) | (TOP_PRODUCTS & set(names)
                              if Path(d) == TOP else set())))
    out = run(["autoreconf", "-fi"], src)
    assert out.returncode == 0, out.output
    return src


@pytest.fixture
def without_cmocka(tmp_path):
    """An environment whose pkg-config finds APR and nothing else."""
    out = run(["pkg-config", "--variable=pcfiledir", "apr-1"], tmp_path)
    assert out.returncode == 0, out.output
    pcdir = tmp_path / "pkgconfig"
    pcdir.mkdir()
    (pcdir / "apr-1.pc").symlink_to(Path(out.stdout.strip()) / "apr-1.pc")
    env = dict(os.environ, PKG_CONFIG_LIBDIR=str(pcdir), PKG_CONFIG_PATH="")
    assert run(["pkg-config", "--exists", "cmocka"], tmp_path,
               env).returncode != 0
    return env


def make_check(src, env):
    """`make check` with the modules taken as built and pytest replaced by
    `true`: what it does before the integration tests."""
    return run(["make", "check", "PYTEST=true",
                *(f"--old-file={t}" for t in BUILT)], src, env)


def test_missing_cmocka_is_said_and_fails_make_check(sources, without_cmocka):
    out = run(["./configure"], sources, without_cmocka)
    assert out.returncode == 0, out.output
    warnings = [line for line in out.output.splitlines()
                if "WARNING: " + CMOCKA_MISSING in line]
    # Once where it is looked for, once more as configure's last word.
    assert len(warnings) == 2, out.output
    assert out.output.rstrip().splitlines()[-1] == warnings[-1]
    assert "--disable-unit-tests" in out.output
    assert "libcmocka-dev" in out.output

    out = make_check(sources, without_cmocka)
    assert out.returncode != 0, out.output
    assert "cmocka was not found, so the unit tests cannot run" in out.stderr


def test_unit_tests_turned_off_pass_make_check(sources, without_cmocka):
    out = run(["./configure", "--disable-unit-tests"], sources,
              without_cmocka)
    assert out.returncode == 0, out.output
    assert CMOCKA_MISSING not in out.output
    assert "unit tests disabled (--disable-unit-tests)" in out.output

    out = make_check(sources, without_cmocka)
    assert out.returncode == 0, out.output
    assert "cmocka was not found" not in out.output


def test_with_cmocka_no_warning(sources):
    out = run(["./configure"], sources)
    assert out.returncode == 0, out.output
    assert "checking for cmocka... yes" in out.output
    assert CMOCKA_MISSING not in out.output
