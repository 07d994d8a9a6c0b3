# SPDX-License-Identifier: Apache-2.0
"""
Directive values: every bad one fails `httpd -t` naming its directive;
values httpd merely adjusts pass with a warning; and what a running server
does with a configuration that changes under it (a bad one, a new
ServerLimit) on graceful restart.
"""
import re
import shutil
import signal
import subprocess

import pytest

from httpd_fixture import (CGI_BODY, CHILD_MODELS, HTTPD_BIN, INDEX_BODY,
                           BackgroundGet, connection_refused, http_get,
                           wait_until)

# (extra configuration, the directive its error must name, and a phrase of
# the message saying what is wrong with it)
BAD_VALUES = [
    ("StartServers 0", "StartServers", "from 1 to"),
    ("StartServers -1", "StartServers", "from 1 to"),
    ("StartServers abc", "StartServers", "not 'abc'"),
    ("MinSpareServers 0", "MinSpareServers", "from 1 to"),
    ("MaxSpareServers x", "MaxSpareServers", "not 'x'"),
    ("MaxRequestWorkers 0", "MaxRequestWorkers", "from 1 to"),
    ("ServerLimit 0", "ServerLimit", "from 1 to"),
    ("BucketCount 0", "BucketCount", "'auto' or a whole number"),
    ("BucketCount -2", "BucketCount", "'auto' or a whole number"),
    ("BucketCount lots", "BucketCount", "not 'lots'"),
    ("BucketCount 8\nMaxRequestWorkers 4", "BucketCount",
     "BucketCount 8 needs 8 children, one per bucket; MaxRequestWorkers 4 "
     "runs at most 4 children: use BucketCount 1 to 4, or raise "
     "MaxRequestWorkers"),
    # The event model counts MaxRequestWorkers in threads: the message
    # names both directives that make the children's number.
    ("ChildModel event\nMaxRequestWorkers 100\nThreadsPerChild 25\n"
     "BucketCount 8", "BucketCount",
     "BucketCount 8 needs 8 children, one per bucket; ChildModel event with "
     "MaxRequestWorkers 100 and ThreadsPerChild 25 runs at most 4 children: "
     "use BucketCount 1 to 4, raise MaxRequestWorkers or lower "
     "ThreadsPerChild"),
    ("BucketStrategy bogus", "BucketStrategy", "not 'bogus'"),
    ("MinSpareServers 10\nMaxSpareServers 5", "MinSpareServers",
     "above MaxSpareServers 5"),
    ("MaxConnectionsPerChild -1", "MaxConnectionsPerChild", "from 0 to"),
    ("MaxConnectionsPerChild abc", "MaxConnectionsPerChild", "not 'abc'"),
    ("GracefulShutdownTimeout -5", "GracefulShutdownTimeout", "from 0 to"),
    ("ListenCoresBucketsRatio -1", "ListenCoresBucketsRatio", "from 0 to"),
    ("ListenBacklog 0", "ListenBacklog", "from 1 to 65535"),
    ("ListenBacklog abc", "ListenBacklog", "not 'abc'"),
    ("SendBufferSize 5", "SendBufferSize", "0 (system default)"),
    ("ReceiveBufferSize -1", "ReceiveBufferSize", "0 (system default)"),
]


@pytest.fixture
def config_checker(make_httpd):
    """One server directory; check(extra) runs `httpd -t` on it with the
    extra configuration."""
    server = make_httpd()

    def check(extra):
        server.write_config(extra)
        return server.command("-t")
    return check


@pytest.mark.parametrize("extra,directive,phrase", BAD_VALUES,
                         ids=[b[0].replace("\n", "+") for b in BAD_VALUES])
def test_bad_value_fails_config_test(config_checker, extra, directive,
                                     phrase):
    result = config_checker(extra)
    assert result.returncode != 0, result.output
    assert "Syntax OK" not in result.output
    assert directive in result.output
    assert phrase in result.output


def test_adjusted_value_passes_with_warning(config_checker):
    result = config_checker("MaxRequestWorkers 300\nServerLimit 100")
    assert result.returncode == 0, result.output
    assert "Syntax OK" in result.output
    assert "WARNING" in result.output
    assert "MaxRequestWorkers" in result.output
    assert "decreasing MaxRequestWorkers to 100" in result.output


@pytest.mark.parametrize("section", ["mod_mpm_bucketed.c",
                                     "mpm_bucketed_module"])
def test_ifmodule_knows_the_mpm_by_file_and_by_name(config_checker,
                                                    section):
    """<IfModule> names a module by its identifier or by its source file's
    name, as configurations do for stock MPMs (<IfModule prefork.c>): the
    module's name is its file's, not the path the build compiled it from.
    A directive that does not exist inside <IfModule !...> fails the test
    unless the name is known."""
    result = config_checker(f"<IfModule !{section}>\nNoSuchDirective on\n"
                            "</IfModule>")
    assert result.returncode == 0, result.output
    assert "Syntax OK" in result.output


# The compile-time cap on ServerLimit differs by model (mpm_default.h);
# the warning that lowers a value above it is the same in both, once.
HARD_SERVER_LIMIT = {"prefork": 200000, "event": 20000}


def test_server_limit_clamp_warned_once_in_one_wording(config_checker,
                                                        child_model):
    hard = HARD_SERVER_LIMIT[child_model]
    result = config_checker(CHILD_MODELS[child_model]
                            + f"ServerLimit {hard + 1}")
    assert result.returncode == 0, result.output
    lines = [line for line in result.output.splitlines()
             if "ServerLimit of" in line]
    assert lines == [f"BK00085: bucketed: WARNING: ServerLimit of {hard + 1} "
                     f"exceeds the compile-time limit of {hard} servers, "
                     f"decreasing to {hard}."], result.output


# What stock httpd does, checked with mod_mpm_prefork: the graceful restart
# re-reads the configuration, httpd's main loop finds it bad and the parent
# exits with status 1; a request in flight still completes; the children
# leave and the port is closed. The bucketed parent must do the same, for a
# configuration core rejects and for ones bucketed itself rejects, whether
# while parsing (StartServers abc) or in check_config (MinSpare > MaxSpare).
BAD_ON_RESTART = [
    ("prefork", "NoSuchDirective on", "NoSuchDirective"),
    ("bucketed", "NoSuchDirective on", "NoSuchDirective"),
    ("bucketed", "StartServers abc", "StartServers"),
    ("bucketed", "MinSpareServers 10\nMaxSpareServers 5", "MinSpareServers"),
]


@pytest.mark.parametrize("mpm,bad,named", BAD_ON_RESTART,
                         ids=[f"{m}-{b.split()[0]}"
                              for m, b, _ in BAD_ON_RESTART])
def test_bad_config_on_graceful_restart(make_httpd, mpm, bad, named):
    server = make_httpd(mpm=mpm, cgi=True,
                        directives="StartServers 4\nMinSpareServers 2")
    server.start()
    slow = BackgroundGet(server.ports[0], "/cgi-bin/slow.cgi?2")
    wait_until(server.cgi_in_flight, 10, what="the slow CGI to start")

    server.write_config("StartServers 4\n" + bad)
    server.signal(signal.SIGUSR1)
    assert server.wait_exit() == 1
    assert named in server.output()
    assert slow.result() == (200, (CGI_BODY + "\n").encode())
    wait_until(lambda: not server.leftovers(), 10,
               what="the children to leave")
    wait_until(lambda: connection_refused(server.ports[0]), 10,
               what="the port to close")


def test_server_limit_change_refused_on_restart(make_httpd):
    server = make_httpd(directives="ServerLimit 16\nMaxRequestWorkers 16\n"
                                   "BucketCount 2")
    server.start()
    generation = server.status()["generation"]

    server.write_config("ServerLimit 32\nMaxRequestWorkers 32\nBucketCount 2")
    server.signal(signal.SIGUSR1)
    wait_until(lambda: server.status()["generation"] == generation + 1, 10,
               what="the new generation")
    log = server.error_log()
    assert "changing ServerLimit to 32 from original value of 16 not " \
           "allowed during restart" in log, log
    assert not server.exited()
    assert http_get(server.ports[0]) == (200, INDEX_BODY)


def test_listen_tcp_defer_accept_as_httpd_has_it(make_httpd):
    # directives.c registers ListenTCPDeferAccept only where httpd has it
    # (2.4.66 and later): a feature test that went wrong would drop it here.
    server = make_httpd()
    version = server.command("-v").output
    match = re.search(r"Apache/2\.4\.(\d+)", version)
    assert match, version
    server.write_config("ListenTCPDeferAccept 5")
    result = server.command("-t")
    if int(match.group(1)) >= 66:
        assert result.returncode == 0, result.output
        assert "Syntax OK" in result.output
    else:
        assert result.returncode != 0, result.output
        assert "Invalid command 'ListenTCPDeferAccept'" in result.output


@pytest.mark.parametrize("model,says,never", [
    ("prefork", "children block in accept()", "worker threads"),
    ("event", "worker threads wait on their bucket's sockets in the "
              "child's epoll set", "block in accept()"),
])
def test_config_test_describes_how_each_child_model_waits(make_httpd, model,
                                                         says, never):
    server = make_httpd()
    server.write_config(f"ChildModel {model}\nBucketCount 2")
    result = server.command("-t")
    assert result.returncode == 0, result.output
    assert says in result.output, result.output
    assert never not in result.output, result.output


def config_test_under_nofile(server, limit):
    """`httpd -t` with the soft and hard RLIMIT_NOFILE at `limit`."""
    cp = subprocess.run(["prlimit", f"--nofile={limit}:{limit}", HTTPD_BIN,
                         "-f", str(server.conf), "-t"], env=server.env(),
                        capture_output=True, text=True, timeout=60)
    cp.output = cp.stdout + cp.stderr
    return cp


# Room for 40 buckets: MaxRequestWorkers counts children in the prefork
# model, threads in the event model.
ROOM_FOR_40 = {
    "prefork": "MaxRequestWorkers 80\nServerLimit 80\n",
    "event": "ChildModel event\nThreadsPerChild 2\nMaxRequestWorkers 160\n"
             "ServerLimit 80\n",
}


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit")
@pytest.mark.parametrize("model", sorted(ROOM_FOR_40))
def test_buckets_beyond_descriptor_limit_fail_config_test(make_httpd,
                                                          model):
    # 40 buckets x 2 Listen addresses: 80 sockets in the parent (and 40
    # eventfds in the event model), plus 64 for logs and modules, do not
    # fit under 128 descriptors.
    server = make_httpd(listens=2, directives=ROOM_FOR_40[model]
                        + "BucketStrategy reuseport\nBucketCount 40\n")
    result = config_test_under_nofile(server, 128)
    assert result.returncode != 0, result.output
    assert "Syntax OK" not in result.output
    assert "BucketCount 40 x 2 Listen addresses needs" in result.output
    assert "RLIMIT_NOFILE is 128" in result.output
    assert "lower BucketCount or raise the limit (ulimit -n)" \
        in result.output

    # Fewer buckets fit under the same limit.
    server.write_config(ROOM_FOR_40[model]
                        + "BucketStrategy reuseport\nBucketCount 4\n")
    result = config_test_under_nofile(server, 128)
    assert result.returncode == 0, result.output
    assert "Syntax OK" in result.output
