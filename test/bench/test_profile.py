# SPDX-License-Identifier: Apache-2.0
"""bench/run profile (profile.py, flamegraph.py) on fixed inputs: how
samples are classified, perf script's output parsed, h2load's result read,
the tables and the flame graph's SVG."""
import xml.etree.ElementTree as ElementTree

import pytest

from bucketbench import flamegraph, profile

K = True
U = False

PERF_SCRIPT = """\
   4242 
\tffffffff81a0 finish_task_switch.isra.0+0x9a ([kernel.kallsyms])
\tffffffff81b0 __schedule+0x3e ([kernel.kallsyms])
\tffffffff81c0 inet_csk_accept+0x12 ([kernel.kallsyms])
\tffffffff81d0 __sys_accept4+0x40 ([kernel.kallsyms])
\t7f0000001000 accept4+0x10 (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t7f0000002000 apr_socket_accept+0x2 (/usr/lib/x86_64-linux-gnu/libapr-1.so.0.7.2)
\t7f0000003000 ap_unixd_accept+0x5 (/usr/sbin/apache2)
\t7f0000004000 [unknown] (/usr/lib/apache2/modules/mod_mpm_prefork.so)

1004243 
\t7f0000005000 ev_worker_main+0x5 (/tmp/x/mod_mpm_bucketed.so)

     99 
\t7f0000006000 main+0x5 (/usr/bin/wrk)

"""


def test_parse_perf_script_keeps_the_servers_samples_leaf_first():
    samples = profile.parse_perf_script(PERF_SCRIPT, {4242, 1004243})
    assert len(samples) == 2
    first = samples[0]
    assert first[0] == ("finish_task_switch.isra.0", "kernel", K)
    assert first[4] == ("accept4", "libc.so.6", U)
    assert first[-1] == ("[unknown]", "mod_mpm_prefork.so", U)
    assert samples[1] == [("ev_worker_main", "mod_mpm_bucketed.so", U)]


@pytest.mark.parametrize("stack, category", [
    ([("ev_worker_main", "mod_mpm_bucketed.so", U)], profile.MPM),
    ([("[unknown]", "mod_mpm_event.so", U)], profile.MPM),
    ([("ap_process_request", "apache2", U)], profile.SERVER),
    ([("apr_palloc", "libapr-1.so.0.7.2", U)], profile.SERVER),
    ([("x", "mod_ssl.so", U)], profile.SERVER),
    ([("ngx_http_process_request", "nginx", U)], profile.SERVER),
    ([("EVP_DigestUpdate", "libcrypto.so.3", U)], profile.OPENSSL_CAT),
    ([("memcpy", "libc.so.6", U)], profile.LIBC),
    ([("pcre2_match", "libpcre2-8.so.0", U)], profile.USER_OTHER),
    # The system call decides before the network and the scheduler.
    ([("finish_task_switch.isra.0", "kernel", K),
      ("inet_csk_accept", "kernel", K)], profile.K_ACCEPT),
    ([("tcp_poll", "kernel", K), ("ep_item_poll", "kernel", K),
      ("do_epoll_wait", "kernel", K)], profile.K_EPOLL),
    ([("__schedule", "kernel", K), ("futex_wait", "kernel", K)],
     profile.K_FUTEX),
    ([("tcp_sendmsg", "kernel", K)], profile.K_TCP),
    ([("__schedule", "kernel", K), ("do_sys_poll", "kernel", K)],
     profile.K_SCHED),
    ([("link_path_walk", "kernel", K)], profile.K_OTHER),
    ([], profile.USER_OTHER),
])
def test_classify(stack, category):
    assert profile.classify(stack) == category


def test_owner_looks_past_libc_and_apr_and_counts_mpm_helpers():
    accept = [("inet_csk_accept", "kernel", K), ("accept4", "libc.so.6", U),
              ("apr_socket_accept", "libapr-1.so.0.7.2", U),
              ("ev_accept", "mod_mpm_bucketed.so", U)]
    assert profile.owner(accept) == profile.MPM
    stock = accept[:3] + [("ap_unixd_accept", "apache2", U),
                          ("[unknown]", "mod_mpm_prefork.so", U)]
    assert profile.owner(stock) == profile.MPM
    request = [("tcp_sendmsg", "kernel", K), ("writev", "libc.so.6", U),
               ("apr_socket_sendv", "libapr-1.so.0.7.2", U),
               ("ap_core_output_filter", "apache2", U),
               ("serve_conn", "mod_mpm_bucketed.so", U)]
    assert profile.owner(request) == profile.SERVER


def test_summary_shares_and_folded_stacks():
    samples = profile.parse_perf_script(PERF_SCRIPT, {4242, 1004243})
    summary = profile.summarize_samples(samples)
    assert summary["samples"] == 2
    assert summary["percent"][profile.K_ACCEPT] == 50.0
    assert summary["percent"][profile.MPM] == 50.0
    assert sum(summary["percent"].values()) == pytest.approx(100.0)
    assert summary["switch_percent"] == 50.0
    assert summary["owner_percent"] == {profile.MPM: 100.0}
    stacks = list(summary["folded"])
    assert ("ev_worker_main (mod_mpm_bucketed.so)",) in stacks
    accept = next(s for s in stacks if len(s) > 1)
    assert accept[0] == "[mod_mpm_prefork.so]"
    assert accept[-1] == "finish_task_switch.isra.0 [k]"


def test_frame_colours_follow_the_categories():
    colour = {name: c for name, (_, c) in profile.CATEGORIES.items()}
    assert profile.frame_colour("inet_csk_accept [k]") == \
        colour[profile.K_ACCEPT]
    assert profile.frame_colour("[mod_mpm_prefork.so]") == colour[profile.MPM]
    assert profile.frame_colour("SSL_do_handshake (libssl.so.3)") == \
        colour[profile.OPENSSL_CAT]


def test_flame_graph_is_svg_with_a_bar_per_frame():
    folded = {("main", "a", "b"): 3, ("main", "c"): 1}
    svg = flamegraph.render(folded, "t <&>", lambda _: "#123456",
                            [("one", "#ff0000")])
    root = ElementTree.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in root.iter(ns + "title")]
    assert "all (4 samples, 100.00 %)" in titles
    assert "main (4 samples, 100.00 %)" in titles
    assert "b (3 samples, 75.00 %)" in titles
    assert "c (1 samples, 25.00 %)" in titles
    widths = {g.find(ns + "title").text.split(" ")[0]:
              float(g.find(ns + "rect").get("width"))
              for g in root.iter(ns + "g")}
    assert widths["a"] == pytest.approx(3 * widths["c"])
    assert widths["main"] == pytest.approx(widths["all"])


def test_flame_graph_of_nothing():
    root = ElementTree.fromstring(flamegraph.render({}, "empty"))
    assert root.tag.endswith("svg")


H2LOAD_OUTPUT = """\
finished in 5.00s, 18234.40 req/s, 1.2MB/s
requests: 91172 total, 92172 started, 91172 done, 91000 succeeded, 172 failed, 0 errored, 0 timeout
"""


def test_parse_h2load():
    result = profile.parse_h2load(H2LOAD_OUTPUT)
    assert result["requests"] == 91000
    assert result["rps"] == pytest.approx(91000 / 5.0)
    assert result["errors"] == {"failed": 172, "errored": 0}
    assert profile.parse_h2load("nothing") is None


def test_threads_per_child_rewrites_the_capacity():
    text = ("ServerLimit 32\nStartServers 32\nThreadLimit 32\n"
            "ThreadsPerChild 32\nMaxRequestWorkers 1024\n")
    rewritten, children = profile._threads_per_child(text, 64)
    assert children == 16
    assert "ThreadsPerChild 64\n" in rewritten
    assert "ThreadLimit 64\n" in rewritten
    assert "ServerLimit 16\n" in rewritten
    assert "StartServers 16\n" in rewritten
    assert "MaxRequestWorkers 1024\n" in rewritten


def test_markdown_tables():
    run = {"rps": 100.0, "cpu_ms_per_request": 0.1}
    twice = {"rps": 50.0, "cpu_ms_per_request": 0.2}
    summary = profile.summarize_samples(
        profile.parse_perf_script(PERF_SCRIPT, {4242}))
    summary.pop("folded")
    results = {"workloads": {"w1": {
        "rounds": {"a": [run, run, run], "b": [twice, twice, twice]},
        "profiles": {"a": summary}}}}
    text = profile.markdown(results)
    assert "| b | 50 (50–50) | 0.2000 | 2.00 | 0.50 |" in text
    assert "| kernel: accept (incl. reuseport) | 100.0 |" in text


def test_folded_stacks_read_back_to_the_same_summary(tmp_path):
    samples = profile.parse_perf_script(PERF_SCRIPT, {4242, 1004243})
    summary = profile.summarize_samples(samples)
    path = tmp_path / "w.folded"
    path.write_text("".join(";".join(stack) + f" {count}\n"
                            for stack, count in summary["folded"].items()))
    again = profile.summarize_samples(profile.read_folded(str(path)))
    assert again["percent"] == summary["percent"]
    assert again["owner_percent"] == summary["owner_percent"]


@pytest.mark.parametrize("stack, entry", [
    ([("tcp_sendmsg", "kernel", K), ("__x64_sys_sendto", "kernel", K),
      ("do_syscall_64", "kernel", K), ("send", "libc.so.6", U)], "sendto"),
    ([("clear_page", "kernel", K), ("asm_exc_page_fault", "kernel", K)],
     "page fault"),
    ([("net_rx_action", "kernel", K)], "interrupt"),
    ([("main", "apache2", U)], None),
])
def test_kernel_entry(stack, entry):
    assert profile.kernel_entry(stack) == entry


def test_count_syscalls():
    text = ("  4242 raw_syscalls:sys_enter: NR 232 (3, 7ffd, 1, ffffffff)\n"
            "  4242 raw_syscalls:sys_enter: NR 202 (7f00, 81, 1, 0)\n"
            "  4243 raw_syscalls:sys_enter: NR 202 (7f00, 80, 0, 0)\n"
            "  4243 sched:sched_switch: prev_comm=apache2 prev_pid=4243 "
            "prev_prio=120 prev_state=S ==> next_comm=swapper/1 "
            "next_pid=0 next_prio=120\n"
            "  4243 raw_syscalls:sys_enter: NR 999 (0)\n")
    assert profile.count_syscalls(text) == {
        "epoll_wait": 1, "futex": 2, "context switch": 1, "999": 1}
