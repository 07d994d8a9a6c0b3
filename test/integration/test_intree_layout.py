# SPDX-License-Identifier: Apache-2.0
"""server/mpm/bucketed carries what httpd's build expects of an MPM directory,
its object list for httpd's build (config3.m4) names the same sources as the
apxs build's MPM_SOURCES (Makefile.am), and the apxs build leaves the source
directories as they are, so that server/mpm/bucketed can be copied into an
httpd tree whole. scripts/intree-build.sh copies it after the apxs build
(scripts/test.sh runs them in that order) and builds httpd with it."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

TOP = Path(os.environ.get("BUCKETED_TOP") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("BUCKETED_BUILD") or TOP)
MPM_DIR = TOP / "server/mpm/bucketed"
# The source directories the apxs build compiles from, relative to TOP.
SOURCE_DIRS = ("server/mpm/bucketed", "modules")


def makefile_variables(text):
    """NAME = value assignments of a Makefile, continuation lines joined."""
    text = text.replace("\\\n", " ")
    return {m.group(1): m.group(2).strip()
            for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", text, re.M)}


def expand(value, variables):
    return re.sub(r"\$\((\w+)\)",
                  lambda m: expand(variables.get(m.group(1), ""), variables), value)


def test_config3_objects_match_makefile_am_sources():
    variables = makefile_variables((TOP / "Makefile.am").read_text())
    sources = expand(variables["MPM_SOURCES"], variables).split()
    assert all(s.startswith("server/mpm/bucketed/") for s in sources), sources
    apxs = sorted(Path(s).stem for s in sources)

    config3 = (MPM_DIR / "config3.m4").read_text().replace("\\\n", " ")
    match = re.search(r'^bucketed_objects="([^"]*)"', config3, re.M)
    assert match, "config3.m4 has no bucketed_objects list"
    objects = match.group(1).split()
    assert all(o.endswith(".lo") for o in objects), objects
    intree = sorted(o[:-len(".lo")] for o in objects)

    assert intree == apxs, ("config3.m4 and Makefile.am's MPM_SOURCES differ: only in "
                            "config3.m4 %s, only in Makefile.am %s"
                            % (sorted(set(intree) - set(apxs)), sorted(set(apxs) - set(intree))))
    for stem in intree:
        assert (MPM_DIR / (stem + ".c")).is_file(), stem + ".c is listed but missing"


def test_httpd_build_files():
    # config.m4 would sort before server/mpm/config.m4 and break configure.
    assert not (MPM_DIR / "config.m4").exists()
    # Threaded where APR has threads (ChildModel event needs them).
    assert "APACHE_MPM_SUPPORTED(bucketed, yes, $bucketed_threaded)" in \
        (MPM_DIR / "config1.m4").read_text()
    assert "APACHE_MPM_MODULE(bucketed, $enable_mpm_bucketed," in (MPM_DIR / "config3.m4").read_text()
    assert (MPM_DIR / "Makefile.in").read_text() == "include $(top_srcdir)/build/special.mk\n"
    assert (MPM_DIR / "mpm_default.h").is_file()


def test_build_leaves_source_directories_as_they_were():
    built = BUILD / "mod_mpm_bucketed.so"
    assert built.is_file(), f"no {built}: build first (scripts/build.sh or make)"
    sources = [f for d in SOURCE_DIRS for f in (TOP / d).rglob("*.[ch]")]
    stale = [str(f.relative_to(TOP)) for f in sources
             if f.stat().st_mtime > built.stat().st_mtime]
    assert not stale, f"{built} is older than {stale}: this would check no build"

    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(TOP), "rev-parse", "--is-inside-work-tree"],
            capture_output=True).returncode != 0:
        pytest.skip(f"{TOP} is not a git checkout: cannot tell generated files")
    status = subprocess.run(
        ["git", "-C", str(TOP), "status", "--porcelain", "--ignored", "--", *SOURCE_DIRS],
        capture_output=True, text=True, check=True).stdout.splitlines()
    # "!!" marks what .gitignore ignores: objects, .libs/, .deps/, *.la.
    generated = [line[3:] for line in status if line.startswith("!! ")]
    assert not generated, ("generated files in the source directories (httpd's make "
                           "would take them as its own): %s; if an older build left them, "
                           "remove them with git clean -fdX %s" % (generated, " ".join(SOURCE_DIRS)))

    if BUILD.resolve() != TOP.resolve():
        # A VPATH build must not mirror the source directories either.
        written = [str(f.relative_to(BUILD)) for d in SOURCE_DIRS if (BUILD / d).exists()
                   for f in (BUILD / d).rglob("*")]
        assert not written, f"the build wrote {written} under {BUILD}"


@pytest.mark.parametrize("dso, module", [
    ("mod_mpm_bucketed.so", "mpm_bucketed_module"),
    ("mod_bucketed_status.so", "bucketed_status_module")])
def test_modules_export_only_their_module_structure(dso, module):
    # httpd loads every module into one global namespace: anything else
    # exported could clash with another module's symbol of the same name.
    out = subprocess.run(["nm", "-D", "--defined-only", str(BUILD / dso)],
                         capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in out.stdout.splitlines()}
    assert names == {module}, sorted(names)


# A file a reader can hold in mind (issue 20): split a file that grows past
# this by what its parts do.
MAX_SOURCE_LINES = 650


def test_no_module_source_file_is_over_the_limit():
    sources = [p for d in SOURCE_DIRS for p in (TOP / d).rglob("*")
               if p.suffix in (".c", ".h")]
    assert sources
    long = {str(p.relative_to(TOP)): n for p in sources
            if (n := len(p.read_text().splitlines())) > MAX_SOURCE_LINES}
    assert long == {}


def check_loops(*args):
    return subprocess.run([str(TOP / "scripts" / "check-loops.py"),
                           *map(str, args)], capture_output=True, text=True)


def test_module_files_form_a_line():
    # No two files call (or include) each other, directly or round a
    # circle: each can be read knowing only those below it.
    out = check_loops(MPM_DIR)
    assert out.returncode == 0, out.stdout + out.stderr


def test_loop_checker_finds_a_loop(tmp_path):
    (tmp_path / "a.c").write_text("int a_one(void)\n{\n    return b_two();\n}\n")
    (tmp_path / "b.c").write_text("/* a_one() in a comment is no call */\n"
                                  "int b_two(void)\n{\n    return 2;\n}\n"
                                  "int b_three(void)\n{\n"
                                  "    return a_one();\n}\n")
    out = check_loops(tmp_path)
    assert out.returncode == 1, out.stdout
    assert "a.c -> b.c: b_two" in out.stdout
    assert "b.c -> a.c: a_one" in out.stdout
    (tmp_path / "b.c").write_text("int b_two(void)\n{\n    return 2;\n}\n")
    out = check_loops(tmp_path)
    assert out.returncode == 0, out.stdout


def test_loop_checker_counts_what_a_header_gives(tmp_path):
    # a.c takes a type and a macro from b.h, which belongs to b.c; b.c
    # calls a.c: a circle, though no two files call each other.
    (tmp_path / "b.h").write_text("#ifndef B_H\n#define B_H\n"
                                  "typedef struct { int n; } b_thing;\n"
                                  "#define B_SIZE 4\n#endif\n")
    (tmp_path / "a.c").write_text('#include "b.h"\n'
                                  "int a_one(b_thing *t)\n{\n"
                                  "    return t->n + B_SIZE;\n}\n")
    (tmp_path / "b.c").write_text('#include "b.h"\n'
                                  "int a_one(b_thing *t);\n"
                                  "int b_two(b_thing *t)\n{\n"
                                  "    return a_one(t);\n}\n")
    out = check_loops(tmp_path)
    assert out.returncode == 1, out.stdout
    assert "a.c -> b.c: B_SIZE, b_thing" in out.stdout
    # The same types in a header that belongs to no file: a line.
    (tmp_path / "b.h").rename(tmp_path / "things.h")
    for name in ("a.c", "b.c"):
        path = tmp_path / name
        path.write_text(path.read_text().replace('"b.h"', '"things.h"'))
    out = check_loops("--layers", tmp_path)
    assert out.returncode == 0, out.stdout
    assert "0 dependencies pointing up" in out.stdout


def test_accept_path_turns_back_at_most_half_as_often_as_before():
    # Issue 27: one accept followed through its calls turned back 38
    # times (37 by this count) before the event model became a line.
    out = check_loops("--follow", "ev_accept_for_worker_locked", MPM_DIR)
    assert out.returncode == 0, out.stderr
    turns = int(re.search(r"(\d+) turn backs", out.stdout).group(1))
    assert turns <= 19, out.stdout


def check_log_tags(*args):
    return subprocess.run([str(TOP / "scripts" / "check-log-tags.py"),
                           *map(str, args)], capture_output=True, text=True)


def test_every_log_line_has_its_own_listed_tag():
    out = check_log_tags(MPM_DIR, TOP / "docs" / "log-messages.md")
    assert out.returncode == 0, out.stdout + out.stderr


def log_tag_case(tmp_path, code, listing):
    """A source directory holding a.c (`code`) and a list (`listing`):
    (the directory, the list)."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "a.c").write_text(code)
    doc = tmp_path / "log-messages.md"
    doc.write_text(listing)
    return src, doc


def test_log_tag_checker_finds_what_is_wrong(tmp_path):
    src, doc = log_tag_case(
        tmp_path,
        "/* ap_log_error( in a comment is no call */\n"
        "void a(void)\n{\n"
        "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,\n"
        "                 BKLOGNO(00001) \"one\");\n"
        "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, \"untagged\");\n"
        "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,\n"
        "                 BKLOGNO(00001) \"again\");\n"
        "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,\n"
        "                 BKLOGNO(00002) SOME_MACRO \" unlisted\");\n}\n",
        "| Tag | Level |\n|---|---|\n| BK00001 | err |\n| BK00009 | err |\n")
    out = check_log_tags(src, doc)
    assert out.returncode == 1, out.stdout
    assert "a.c:6: log call without BKLOGNO" in out.stdout
    assert "a.c:7: BK00001 already used at a.c:4" in out.stdout
    assert "a.c:9: BK00002 is not in" in out.stdout
    assert "BK00009 is listed but no log call has it" in out.stdout
    # Put right, it passes.
    (src / "a.c").write_text(
        "void a(void)\n{\n"
        "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,\n"
        "                 BKLOGNO(00001) \"one\");\n}\n")
    doc.write_text("| BK00001 | err |\n")
    assert check_log_tags(src, doc).returncode == 0


def test_log_tag_checker_refuses_a_retired_tag(tmp_path):
    # A tag whose message is gone is never given to another: an operator's
    # notes and searches still mean the old message by it.
    code = ("void a(void)\n{\n"
            "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,\n"
            "                 BKLOGNO(00003) \"new message\");\n}\n")
    src, doc = log_tag_case(
        tmp_path, code,
        "Retired, never to be reused: BK00003 (gone).\n\n"
        "| BK00003 | err |\n")
    out = check_log_tags(src, doc)
    assert out.returncode == 1, out.stdout
    assert "a.c:3: BK00003 is retired in" in out.stdout
    doc.write_text("Retired, never to be reused: BK00003 (gone).\n\n"
                   "| BK00004 | err |\n")
    (src / "a.c").write_text(code.replace("00003", "00004"))
    assert check_log_tags(src, doc).returncode == 0


def test_log_tag_checker_compares_levels(tmp_path):
    # The level a call logs at must be the one the list gives: an operator
    # who raises LogLevel to see a line must find it there.
    src, doc = log_tag_case(
        tmp_path,
        "void a(void)\n{\n"
        "    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,\n"
        "                 BKLOGNO(00001) \"one\");\n"
        "    ap_log_error(APLOG_MARK, err == EINTR ? APLOG_DEBUG : APLOG_ERR,\n"
        "                 err, s, BKLOGNO(00002) \"two\");\n"
        "    ap_log_perror(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, 0, p,\n"
        "                  BKLOGNO(00003) \"three\");\n}\n",
        "| Tag | Level |\n|---|---|\n| BK00001 | debug |\n"
        "| BK00002 | err |\n| BK00003 | crit |\n")
    out = check_log_tags(src, doc)
    assert out.returncode == 1, out.stdout
    assert "a.c:3: BK00001 is logged at err, " \
        f"{doc} lists debug" in out.stdout
    assert "a.c:5: BK00002 is logged at err or debug, " \
        f"{doc} lists err" in out.stdout
    assert "BK00003" not in out.stdout
    doc.write_text("| BK00001 | err |\n| BK00002 | debug (EINTR), else err |"
                   "\n| BK00003 | crit |\n")
    out = check_log_tags(src, doc)
    assert out.returncode == 0, out.stdout
