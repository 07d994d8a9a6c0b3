# SPDX-License-Identifier: Apache-2.0
"""
Children that exit APEXIT_CHILDSICK (httpd's "resource shortage") are not
respawned in a loop: each bucket waits longer for its next child after
every sick exit, the log says why, the server stays up, and once the
children are healthy again it serves.
"""
import re

from httpd_fixture import (CHILD_MODELS, FAULT_SO, INDEX_BODY, http_get,
                           need_build, wait_until)

HOLD_LINE = re.compile(r"child \d+ of bucket (\d+) exited sick \(it reported "
                       r"a resource shortage\); (\d+) such exit\(s\) in a "
                       r"row in this bucket, its next child in (\d+) s")


def holds_by_bucket(log):
    holds = {}
    for m in HOLD_LINE.finditer(log):
        holds.setdefault(int(m.group(1)), []).append(
            (int(m.group(2)), int(m.group(3))))
    return holds


# Room for a few spare children per bucket, in each model's own terms.
SPARES = {"prefork": "MinSpareServers 2\nMaxSpareServers 4\n",
          "event": "ThreadsPerChild 4\nMinSpareThreads 8\n"
                   "MaxSpareThreads 16\n"}


def test_sick_children_slow_spawning(make_httpd, child_model):
    need_build(FAULT_SO)
    server = make_httpd(directives=f"LoadModule test_fault_module {FAULT_SO}\n"
                                   + CHILD_MODELS[child_model]
                                   + "BucketCount 2\nStartServers 2\n"
                                   + SPARES[child_model])
    flag = server.root / "sick-children"
    flag.write_text("")
    server.start(wait=False)

    # Until some bucket's back-off has reached 8 s.
    wait_until(lambda: any(hold >= 8 for holds in
                           holds_by_bucket(server.error_log()).values()
                           for _, hold in holds), 90,
               what="a bucket's back-off to reach 8 s")
    log = server.error_log()
    assert not server.exited(), server.output()
    sick_exits = log.count("exits sick on purpose")
    holds = holds_by_bucket(log)
    print(f"{sick_exits} sick exits; back-off per bucket: {holds}")
    # A fork loop makes thousands in the same time.
    assert sick_exits <= 30, sick_exits
    for bucket, seen in holds.items():
        waits = [hold for _, hold in seen]
        # The wait doubles with every sick exit in a row: 1, 2, 4, 8 ...
        assert waits == sorted(waits), (bucket, waits)
        assert waits[0] == 1, (bucket, waits)
        for (n, hold) in seen:
            assert hold == min(60, 2 ** (n - 1)), (bucket, seen)

    # Healthy again: the next children stay and the server serves.
    flag.unlink()
    wait_until(lambda: http_get(server.ports[0]) == (200, INDEX_BODY), 90,
               what="the server to serve after the shortage")
    server.wait_ready(timeout=90)
    assert not server.exited()
