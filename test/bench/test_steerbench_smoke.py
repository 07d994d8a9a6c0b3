# SPDX-License-Identifier: Apache-2.0
"""Issue 10's bench additions against the real servers, with tiny settings:
bench/run runs the PHP and the mixed slow workload once on every row that
can serve them; a PHP server answers its page from its own php.ini; the
steering rows really hold their BPF maps. Never the speed."""
import json
import os
import shutil

import pytest

from bucketbench import bucket_status, catalog, cli, configs, environment
from bucketbench.catalog import NATIVE, PHP, SERVERS
from bucketbench.net import free_ports, http_get
from bucketbench.server import Server

from test_smoke import bench, check_run_record

# The BPF map type (linux/bpf.h) of load steering's idle counts.
BPF_MAP_TYPE_ARRAY = 2
HTTP_TIMEOUT_S = 10
SERVERS_RUN = ("prefork,bucketed-reuseport,bucketed-cpu,bucketed-load,"
               "bucketed-single,event,nginx")


def test_new_workloads_run_on_every_row_that_can_serve_them(top, build,
                                                            tmp_path):
    out = tmp_path / "out"
    done = bench(top, build, "--servers", SERVERS_RUN, "--workloads",
                 "php,w1-slow5", "--levels", NATIVE, "--concurrency", "20",
                 "--runs", "1", "--duration", "1", "--warmup", "0",
                 "--slots", "32", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    skipped = {(s["server"], tuple(s.get("workloads", ()))): s["reason"]
               for s in summary["skipped"]}
    assert skipped == {
        ("event", ("php",)): catalog.PHP_NOT_SUPPORTED["threaded"],
        ("nginx", ("php",)): catalog.PHP_NOT_SUPPORTED["nginx"],
        ("nginx", ("w1-slow5",)): catalog.HANDLER_NOT_SUPPORTED[
            catalog.SLOW]}
    ran = {(p["workload"], p["server"]): p for p in summary["points"]}
    prefork_model = {"prefork", "bucketed-reuseport", "bucketed-cpu",
                     "bucketed-load", "bucketed-single"}
    assert set(ran) == {("php", s) for s in prefork_model} | \
        {("w1-slow5", s) for s in prefork_model | {"event"}}
    for (workload, server), point in ran.items():
        assert point["ok_runs"] == 1, (workload, server, point["failures"])
        assert point["requests"] > 0 and point["errors"]["non_2xx"] == 0
    for path in (out / "raw").iterdir():
        record = check_run_record(path)
        if record["workload"] == "w1-slow5" and record["buckets"]:
            # Connection: close: one connection (or more) per request.
            accepted = sum(b["accepted"]
                           for b in record["buckets"]["buckets"])
            assert accepted >= record["requests"], record["buckets"]
        if record["workload"] == "php":
            assert record["wrk_command"][-1].endswith("/hello.php")
    script = (out / "servers" / "native-w1-slow5-bucketed-load" /
              "wrk.lua").read_text()
    assert "function request()" in script and "/slow.lua" in script
    conf = (out / "servers" / "native-php-bucketed-load" /
            "httpd.conf").read_text()
    assert "\nBucketSteering load\n" in conf and "PHPINIDir" in conf
    text = (out / "report.md").read_text()
    assert "## Steering side by side (issue 10)" in text
    assert "### php (" in text and "### w1-slow5 (" in text


@pytest.fixture
def scratch():
    path = cli._scratch_dir("bucketbench-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tools(build):
    return environment.Tools(
        httpd=os.environ.get("HTTPD_BIN", "/usr/sbin/apache2"), nginx="",
        wrk="", modules_dir="/usr/lib/apache2/modules", bucketed_dir=build,
        shim="", slots=32, cores=os.cpu_count())


def _map_types(pid):
    """The BPF map types of the descriptors process pid holds."""
    types = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                for line in info:
                    if line.startswith("map_type:"):
                        types.append(int(line.split()[1]))
        except FileNotFoundError:
            continue
    return sorted(types)


@pytest.mark.parametrize("name, steering", [
    ("prefork", None),
    ("bucketed-reuseport", "load"),     # BucketSteering auto
    ("bucketed-hash", "hash"),
    ("bucketed-cpu", "cpu"),
    ("bucketed-load", "load"),
])
def test_php_page_from_the_servers_own_ini(build, scratch, name,
                                          steering):
    """The PHP page answers what it prints, PHP read the php.ini in the
    server's directory and no scan directory (nothing of /etc/php), and a
    bucketed row runs the steering its directive asks for (status page;
    load: the parent also holds the array of idle counts)."""
    tools = _tools(build)
    if tools.php_missing_reason():
        pytest.skip(tools.php_missing_reason())
    workdir = os.path.join(scratch, name)
    port = free_ports(1)[0]
    server = Server(SERVERS[name], NATIVE, [port], workdir, tools,
                    handler=PHP)
    probe = os.path.join(workdir, "htdocs", "ini.php")
    with open(probe, "w") as page:
        page.write('<?php echo php_ini_loaded_file(), "|", '
                   'var_export(php_ini_scanned_files(), true), "|", '
                   'date_default_timezone_get();\n')
    os.chmod(probe, 0o644)
    try:
        server.start()
        assert http_get(port, "/" + configs.PHP_NAME,
                        timeout=HTTP_TIMEOUT_S) == (200, configs.PHP_BODY)
        status, body = http_get(port, "/ini.php", timeout=HTTP_TIMEOUT_S)
        assert status == 200
        assert body.decode() == (f"{workdir}/{configs.PHP_INI_NAME}"
                                 f"|false|UTC")
        if steering:
            status = bucket_status.fetch_status(port, HTTP_TIMEOUT_S)
            assert status["steering"].split()[0] == steering, status
            assert (BPF_MAP_TYPE_ARRAY in _map_types(server.pid)) == \
                (steering == "load")
    finally:
        server.stop()
