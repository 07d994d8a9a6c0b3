# SPDX-License-Identifier: Apache-2.0
"""
Every httpd from 2.4.52 on builds bucketed: scripts/check-httpd-api.py
fails when the code uses a name newer than 2.4.52
(scripts/httpd-api-since.txt) without a guard only newer httpd passes, or
without a fallback for older httpd (httpd_compat.h).
"""
import subprocess
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
CHECKER = TOP / "scripts" / "check-httpd-api.py"


def check(*args):
    return subprocess.run([str(CHECKER), *map(str, args)],
                          capture_output=True, text=True)


def test_the_tree_uses_newer_httpd_only_guarded():
    out = check()
    assert out.returncode == 0, out.stdout + out.stderr


def test_list_names_what_2_4_52_lacks():
    # The names the CI build against Debian's httpd would never miss.
    listed = (TOP / "scripts" / "httpd-api-since.txt").read_text()
    for name in ("CONN_STATE_PROCESSING", "CONN_STATE_KEEPALIVE",
                 "CONN_STATE_ASYNC_WAITIO", "AP_MPMQ_CAN_WAITIO", "wait_io",
                 "ap_set_listentcpdeferaccept", "DEFAULT_TCP_DEFER_ACCEPT"):
        assert f"\n{name} " in listed, name


def write(directory, name, text):
    (directory / name).write_text(text)


def problems_in(directory):
    out = check(directory)
    assert out.returncode in (0, 1), out.stderr
    return [line.split(": ", 1)[1] for line in out.stdout.splitlines()]


def test_checker_finds_unguarded_uses(tmp_path):
    write(tmp_path, "plain.c",
          "/* CONN_STATE_KEEPALIVE in a comment is no use */\n"
          "static const char *s = \"AP_MPMQ_CAN_WAITIO\";\n"
          "int f(conn_rec *c)\n{\n"
          "    c->cs->state = CONN_STATE_PROCESSING;\n"
          "    return 0;\n}\n")
    write(tmp_path, "older_guard.c",
          "#ifdef AP_REG_PCRE_COMPILED    /* 2.4.53: too old a guard */\n"
          "int g = CONN_STATE_ASYNC_WAITIO;\n"
          "#endif\n"
          "#if AP_MODULE_MAGIC_AT_LEAST(20120211, 134)\n"
          "int h = CONN_STATE_ASYNC_WAITIO;\n"
          "#endif\n"
          "#if defined(AP_MPMQ_CAN_WAITIO) || defined(X)\n"
          "int i = CONN_STATE_ASYNC_WAITIO;\n"
          "#endif\n"
          "#ifdef AP_MPMQ_CAN_WAITIO\n"
          "#else\n"
          "int j = CONN_STATE_ASYNC_WAITIO;\n"
          "#endif\n"
          "#if !defined(AP_MPMQ_CAN_WAITIO) && OTHER  /* else: either */\n"
          "#else\n"
          "int k = CONN_STATE_ASYNC_WAITIO;\n"
          "#endif\n")
    found = problems_in(tmp_path)
    assert found == [
        "CONN_STATE_ASYNC_WAITIO is httpd 2.4.63 (MMN 20120211.135), newer "
        "than 2.4.52: guard it (#ifdef, AP_MODULE_MAGIC_AT_LEAST) or give "
        "older httpd a fallback (httpd_compat.h)"] * 5 + [
        "CONN_STATE_PROCESSING is httpd 2.4.63 (MMN 20120211.135), newer "
        "than 2.4.52: guard it (#ifdef, AP_MODULE_MAGIC_AT_LEAST) or give "
        "older httpd a fallback (httpd_compat.h)"], found
    lines = [line.split(": ", 1)[0].rsplit("/", 1)[1]
             for line in check(tmp_path).stdout.splitlines()]
    assert lines == ["older_guard.c:2", "older_guard.c:5", "older_guard.c:8",
                     "older_guard.c:12", "older_guard.c:16", "plain.c:5"]


def test_checker_accepts_guards_and_fallbacks(tmp_path):
    write(tmp_path, "compat.h",
          "#if !AP_MODULE_MAGIC_AT_LEAST(20120211, 135)\n"
          "#define CONN_STATE_PROCESSING CONN_STATE_READ_REQUEST_LINE\n"
          "#endif\n")
    write(tmp_path, "guarded.c",
          "#include \"compat.h\"\n"
          "int a = CONN_STATE_PROCESSING;\n"
          "#ifdef AP_MPMQ_CAN_WAITIO   /* 2.4.63, as wait_io */\n"
          "int b(process_score *ps) { return ps->wait_io; }\n"
          "#endif\n"
          "#if AP_MODULE_MAGIC_AT_LEAST(20120211, 137) && defined(Y)\n"
          "int c = AP_MPMQ_CAN_WAITIO;\n"
          "#endif\n"
          "#ifndef DEFAULT_TCP_DEFER_ACCEPT\n"
          "#else\n"
          "void *d = ap_set_listentcpdeferaccept;\n"
          "#endif\n"
          "#if defined(AP_MPMQ_CAN_WAITIO) \\\n"
          "    && 1\n"
          "int e = CONN_STATE_KEEPALIVE;\n"
          "#endif\n"
          "#if OTHER\n"
          "#elif defined(AP_MPMQ_CAN_WAITIO)\n"
          "int f = CONN_STATE_KEEPALIVE;\n"
          "#endif\n"
          "#if !defined(AP_MPMQ_CAN_WAITIO)\n"
          "#else\n"
          "int g = CONN_STATE_KEEPALIVE;\n"
          "#endif\n")
    assert problems_in(tmp_path) == []
    # Without the header, the fallback is not there.
    write(tmp_path, "other.c", "int f = CONN_STATE_PROCESSING;\n")
    assert len(problems_in(tmp_path)) == 1
    # A fallback httpd may already have is a redefinition there.
    write(tmp_path, "compat.h",
          "#define CONN_STATE_PROCESSING CONN_STATE_READ_REQUEST_LINE\n")
    found = problems_in(tmp_path)
    assert found[0].startswith("defines CONN_STATE_PROCESSING (httpd "
                               "2.4.63) where httpd may have it"), found
