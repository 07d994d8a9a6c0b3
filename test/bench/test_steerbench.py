# SPDX-License-Identifier: Apache-2.0
"""Issue 10's bench additions on fixed inputs: the steering rows, the PHP
page under mod_php and the static workload with a fraction of slow
requests (catalog entries, skip reasons, configuration text, wrk's script,
the steering tables). test_steerbench_smoke.py runs them for real."""
import argparse
import collections
import os
import subprocess

import pytest

from bucketbench import cli, configs, load, report, steering
from bucketbench.catalog import (HANDLER_NOT_SUPPORTED, MIXED,
                                 MIXED_SLOW_EVERY, NATIVE, NO_REUSEPORT, PHP,
                                 PHP_NOT_SUPPORTED, SERVERS, SLOW, STATIC,
                                 WORKLOADS, handler_skip_reason)
from bucketbench.environment import Tools
from bucketbench.runner import Plan
from bucketbench.server import Server

PORT = 8080
PREFORK_MODEL = ("prefork", "prefork-lcbr1", "bucketed-reuseport",
                 "bucketed-listen", "bucketed-single", "bucketed-auto",
                 "bucketed-hash", "bucketed-cpu", "bucketed-load")
THREADED = ("event", "event-lcbr1", "bucketed-event", "bucketed-event-b1",
            "bucketed-event-free")


@pytest.mark.parametrize("mode", ["hash", "cpu", "load"])
def test_steering_rows_are_reuseport_buckets_with_their_directive(mode):
    spec = SERVERS[f"bucketed-{mode}"]
    assert spec.mpm == "bucketed" and spec.child_model == ""
    assert f"BucketSteering {mode}" in spec.directives
    assert "BucketStrategy reuseport" in spec.directives
    # Meaningless without SO_REUSEPORT: skipped there, with the reason.
    assert set(spec.not_applicable) == {NO_REUSEPORT}
    assert "SK_REUSEPORT" in spec.not_applicable[NO_REUSEPORT]
    text = _httpd_config(spec, php=False)
    assert f"\nBucketSteering {mode}\n" in text
    # The reuseport row runs the default steering (auto).
    assert not any(d.startswith("BucketSteering")
                   for d in SERVERS["bucketed-reuseport"].directives)


def test_steering_rows_are_skipped_at_the_no_reuseport_level(build):
    args = argparse.Namespace(servers=["bucketed-cpu", "bucketed-load",
                                       "prefork"],
                              levels=[NATIVE, NO_REUSEPORT],
                              workloads=["w1"])
    by_level, skipped = cli._select_servers(args, _tools(build))
    assert [s.name for s in by_level[NATIVE]] == args.servers
    assert [s.name for s in by_level[NO_REUSEPORT]] == ["prefork"]
    assert {(s["server"], s["kernel_level"]) for s in skipped} == {
        ("bucketed-cpu", NO_REUSEPORT), ("bucketed-load", NO_REUSEPORT)}


@pytest.mark.parametrize("name", PREFORK_MODEL)
def test_php_runs_on_every_prefork_model_row(name):
    assert handler_skip_reason(SERVERS[name], PHP) is None


@pytest.mark.parametrize("name", THREADED)
def test_php_skips_threaded_rows(name):
    assert handler_skip_reason(SERVERS[name], PHP) == \
        "mod_php needs a non-threaded MPM"


def test_nginx_sits_out_php_and_the_slow_requests():
    nginx = SERVERS["nginx"]
    assert handler_skip_reason(nginx, PHP) == PHP_NOT_SUPPORTED["nginx"]
    assert handler_skip_reason(nginx, MIXED) == HANDLER_NOT_SUPPORTED[SLOW]
    assert handler_skip_reason(nginx, STATIC) is None
    for name in PREFORK_MODEL + THREADED:
        assert handler_skip_reason(SERVERS[name], MIXED) is None


def test_every_server_is_placed_in_the_new_workloads(build):
    """Each server either serves a new workload or is skipped in it with
    its reason; the plan's server list agrees."""
    names = list(SERVERS)
    args = argparse.Namespace(servers=names, levels=[NATIVE],
                              workloads=["php", "w1-slow5"])
    by_level, skipped = cli._select_servers(args, _tools(build))
    plan = Plan(levels=[NATIVE], workloads=args.workloads, servers=by_level,
                concurrency=[20], runs=1, duration_s=1, warmup_s=0,
                threads=2, timeout_s=2)
    for workload in args.workloads:
        running = {s.name for s in plan.servers_for(NATIVE,
                                                    WORKLOADS[workload])}
        left_out = {s["server"] for s in skipped
                    if workload in s.get("workloads", ())}
        native = {s.name for s in by_level[NATIVE]}
        assert running | left_out == native and not running & left_out
    php_skips = {s["server"]: s["reason"] for s in skipped
                 if s.get("workloads") == ["php"]}
    assert php_skips == {**dict.fromkeys(THREADED, PHP_NOT_SUPPORTED[
        "threaded"]), "nginx": PHP_NOT_SUPPORTED["nginx"]}


def test_the_new_workloads():
    php, mixed = WORKLOADS["php"], WORKLOADS["w1-slow5"]
    for workload in (php, mixed):
        assert workload.listen_count == 1 and not workload.keep_alive
        assert workload.split == (100,) and not workload.skewed
    assert php.handler == PHP and mixed.handler == MIXED
    assert MIXED_SLOW_EVERY == 20        # 5 %, as the title says
    assert "5 %" in mixed.title
    # The mixed workload keeps the static workloads' slots (--slots): the
    # slow requests hold some children while the rest serve.
    plan = Plan(levels=[NATIVE], workloads=["w1-slow5"], servers={},
                concurrency=[400], runs=1, duration_s=1, warmup_s=0,
                threads=2, timeout_s=2, slow_slots=64)
    assert plan.slots_for(mixed, 1024) == 1024


def test_documents_of_each_handler():
    assert configs.documents(PHP) == [(configs.PHP_NAME, configs.PHP_BODY)]
    assert configs.documents(MIXED) == [
        (configs.DOC_NAME, configs.DOC_BODY),
        (configs.SLOW_NAME, configs.SLOW_BODY)]
    assert configs.document(MIXED) == (configs.DOC_NAME, configs.DOC_BODY)
    assert configs.documents(STATIC) == [(configs.DOC_NAME,
                                          configs.DOC_BODY)]


def test_php_page_prints_its_body():
    """The page's source, run by the PHP command line when installed, prints
    exactly what the harness expects from the server."""
    php = "/usr/bin/php"
    if not os.access(php, os.X_OK):
        pytest.skip("no PHP command line (php8.2-cli) to run the page with")
    done = subprocess.run([php, "-n", "-d", "date.timezone=UTC"],
                          input=configs.PHP_SOURCE.encode(),
                          capture_output=True, timeout=30, check=True)
    assert done.stdout == configs.PHP_BODY


def _tools(bucketed_dir, modules_dir="/usr/lib/apache2/modules"):
    """Tools as the harness makes them; bucketed_dir: where the bucketed
    modules are (the build, for tests that need them found)."""
    return Tools(httpd="/usr/sbin/apache2", nginx="/usr/sbin/nginx",
                 wrk="wrk", modules_dir=modules_dir,
                 bucketed_dir=str(bucketed_dir), shim="", slots=64, cores=2)


def _httpd_config(spec, php):
    modules = {"php": "/m/libphp8.2.so"} if php else {}
    return configs.httpd_config(
        root="/srv/x", docroot="/srv/x/htdocs", ports=[PORT], mpm=spec.mpm,
        mpm_module="/m/mpm.so", module_paths=modules, slots=64,
        directives=spec.directives, php=php)


def test_php_configuration_loads_mod_php_with_its_own_ini():
    text = _httpd_config(SERVERS["prefork"], php=True)
    assert 'LoadModule php_module "/m/libphp8.2.so"' in text
    assert 'PHPINIDir "/srv/x"' in text
    match = text.index('<FilesMatch "\\.php$">')
    assert text.index("SetHandler application/x-httpd-php", match) < \
        text.index("</FilesMatch>", match)
    plain = _httpd_config(SERVERS["prefork"], php=False)
    assert "php" not in plain.lower()


def test_php_ini_reads_nothing_of_the_machine():
    ini = configs.php_ini("/srv/x")
    assert "date.timezone = UTC" in ini
    assert 'error_log = "/srv/x/php_error_log"' in ini
    assert "zend_extension = opcache" in ini
    assert "/etc/" not in ini
    # No scan of Debian's conf.d directory either.
    assert configs.PHP_SCAN_DIR_ENV == {"PHP_INI_SCAN_DIR": ""}


def test_php_server_files_and_environment(tmp_path):
    """A PHP server's directory holds the page and the php.ini its
    configuration points at; its clean environment turns the scan off."""
    server = Server(SERVERS["bucketed-load"], NATIVE, [PORT],
                    str(tmp_path / "srv"), _tools(tmp_path), handler=PHP)
    root = tmp_path / "srv"
    assert (root / "htdocs" / configs.PHP_NAME).read_text() == \
        configs.PHP_SOURCE
    assert (root / configs.PHP_INI_NAME).read_text() == \
        configs.php_ini(str(root))
    text = (root / "httpd.conf").read_text()
    assert f'PHPINIDir "{root}"' in text
    assert "\nBucketSteering load\n" in text
    assert "LoadModule php_module" in text and "lua_module" not in text
    env = server._environment()
    assert env["PHP_INI_SCAN_DIR"] == "" and "PHPRC" not in env
    static = Server(SERVERS["prefork"], NATIVE, [PORT],
                    str(tmp_path / "static"), _tools(tmp_path))
    assert "PHP_INI_SCAN_DIR" not in static._environment()


def test_mixed_server_serves_the_slow_handler_too(tmp_path):
    Server(SERVERS["bucketed-cpu"], NATIVE, [PORT], str(tmp_path / "srv"),
           _tools(tmp_path), handler=MIXED)
    docroot = tmp_path / "srv" / "htdocs"
    assert (docroot / configs.SLOW_NAME).exists()
    assert (docroot / configs.DOC_NAME).read_bytes() == configs.DOC_BODY
    text = (tmp_path / "srv" / "httpd.conf").read_text()
    assert "lua_module" in text and "php" not in text.lower()


def test_php_workload_is_dropped_without_mod_php(tmp_path):
    args = argparse.Namespace(workloads=["w1", "php", "w1-slow5"])
    dropped = cli._drop_php_without_module(args, _tools(
        tmp_path, modules_dir=str(tmp_path)))
    assert args.workloads == ["w1", "w1-slow5"]
    assert len(dropped) == 1 and dropped[0]["workloads"] == ["php"]
    assert "libapache2-mod-php8.2" in dropped[0]["reason"]
    assert str(tmp_path / "libphp8.2.so") in dropped[0]["reason"]
    assert "in php: mod_php not found" in report.skip_text(dropped[0])
    # With the module there, nothing is dropped.
    (tmp_path / "libphp8.2.so").write_bytes(b"")
    args = argparse.Namespace(workloads=["php"])
    assert cli._drop_php_without_module(
        args, _tools(tmp_path, modules_dir=str(tmp_path))) == []
    assert args.workloads == ["php"]


def test_wrk_sends_one_request_in_twenty_to_the_slow_page(web_server,
                                                          tmp_path):
    """wrk runs the mixed script for real: every thread sends its every
    20th request to the slow page, all with Connection: close."""
    port, seen = web_server
    threads = 2
    script = tmp_path / "mixed.lua"
    script.write_text(load.lua_script(
        load.thread_ports([port], (100,), threads),
        mixed=(configs.DOC_NAME, configs.SLOW_NAME, MIXED_SLOW_EVERY)))
    command = load.wrk_command("wrk", ports=[port], connections=4,
                               threads=threads, duration_s=1, timeout_s=2,
                               keep_alive=False, script_path=str(script))
    result, _ = load.run_wrk(command, 1, str(tmp_path / "wrk.log"))
    counts = collections.Counter(seen)
    fast = counts.get((f"/{configs.DOC_NAME}", "close"), 0)
    slow = counts.get((f"/{configs.SLOW_NAME}", "close"), 0)
    assert fast + slow == sum(counts.values()), counts
    total = fast + slow
    assert total >= 2 * MIXED_SLOW_EVERY * threads, counts
    # Per thread floor(n / 20), and requests still in flight at the end.
    assert total // MIXED_SLOW_EVERY - threads <= slow \
        <= total // MIXED_SLOW_EVERY + threads, counts
    assert result["requests"] <= total


def _point(server, by_round, workload="w1-slow5", concurrency=1000):
    """A summary point with just what steering.py reads: {round: (req/s,
    p99)}."""
    p99s = sorted(p99 for _, p99 in by_round.values())
    return {"kernel_level": NATIVE, "workload": workload,
            "concurrency": concurrency, "server": server, "label": server,
            "rps": {"median": sorted(r for r, _ in by_round.values())[
                len(by_round) // 2]},
            "latency_ms": {"p99": p99s[len(p99s) // 2]},
            "by_round": [{"round": n, "rps": rps, "p99": p99}
                         for n, (rps, p99) in by_round.items()]}


def test_steering_ratios_are_taken_round_by_round():
    points = [
        _point("prefork", {1: (100, 200.0), 2: (50, 400.0), 3: (100, 100)}),
        _point("bucketed-reuseport", {1: (200, 100.0), 2: (100, 200.0),
                                      3: (150, 50.0)}),
        _point("bucketed-load", {1: (220, 50.0), 2: (90, 50.0)}),
    ]
    rows = steering.steering_rows(points)[(NATIVE, "w1-slow5", 1000)]
    by_server = {row["server"]: row for row in rows}
    load_row = by_server["bucketed-load"]
    # Rounds 1 and 2 only (load has no round 3): 1.1 and 0.9; 0.5, 0.25.
    assert load_row["rps_vs_hash"] == pytest.approx(1.0)
    assert load_row["p99_vs_hash"] == pytest.approx(0.375)
    assert load_row["p99_vs_prefork"] == pytest.approx((0.25 + 0.125) / 2)
    assert "p99_vs_single" not in load_row       # single did not run
    assert "rps_vs_hash" not in by_server["bucketed-reuseport"]
    assert by_server["prefork"]["p99_vs_hash"] == pytest.approx(2.0)
    text = steering.section(points, {}, "##")
    assert "## Steering side by side (issue 10)" in text
    assert "| bucketed-load | 220 | 1.00x | " in text


def test_no_steering_section_without_a_steered_row():
    points = [_point("prefork", {1: (1, 1.0)}),
              _point("bucketed-reuseport", {1: (2, 1.0)})]
    assert steering.steering_rows(points) == {}
    assert steering.section(points, {}) == ""
