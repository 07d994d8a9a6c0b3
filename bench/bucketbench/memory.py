# SPDX-License-Identifier: Apache-2.0
"""bench/run memory: memory checks that belong in the harness, not in tests.

1. a bucketed child's proportional set size (PSS) against a stock prefork
   child's, same configuration, measured side by side;
2. the bucketed parent's memory across many graceful restarts (it must not
   grow: the parent keeps no per-connection state).

The servers are the benchmark's own (catalog "prefork" and
"bucketed-reuseport", started by server.Server); loopback only, and every
server started is stopped."""

import os
import platform
import signal

from . import bucket_status, configs, procfs
from .catalog import NATIVE, SERVERS
from .net import free_ports, http_get, wait_until
from .server import HTTP_TIMEOUT_S, Server, ServerError

SERVER_NAMES = ("prefork", "bucketed-reuseport")
RESTART_TIMEOUT_S = 20
PARENT_FIELDS = ("Rss", "Pss")


class ProbeError(Exception):
    """The check could not be made; the message says why."""


def _rollup(pid, fields):
    values = procfs.smaps_rollup_kb(pid)
    if not values:
        raise ProbeError(f"cannot read /proc/{pid}/smaps_rollup (run as "
                           f"the servers' user or root)")
    return {field: values[field] for field in fields}


def child_pss_kb(server, requests):
    """Median PSS of the server's children after `requests` requests, so
    that every child has touched its request-handling pages; and how many
    children there were."""
    for _ in range(requests):
        status, _body = http_get(server.ports[0], "/" + configs.DOC_NAME,
                                 timeout=HTTP_TIMEOUT_S)
        if status != 200:
            raise ProbeError(f"{server.spec.name} answered HTTP {status}")
    children = [pid for pid in procfs.process_tree(server.pid)
                if pid != server.pid]
    if not children:
        raise ProbeError(f"{server.spec.name} has no children")
    values = sorted(_rollup(pid, ("Pss",))["Pss"] for pid in children)
    return values[len(values) // 2], len(values)


def wait_generation(port, generation):
    """Until the status page shows the generation (or a later one)."""
    wait_until(lambda: bucket_status.fetch_status(port, HTTP_TIMEOUT_S)
               .get("generation", -1) >= generation, RESTART_TIMEOUT_S,
               interval=0.05, what=f"generation {generation}")


def measure(tools, scratch_dir, restarts, requests, say):
    """Both checks; the result as a dict. Starts the servers in scratch_dir
    and stops them before returning."""
    result = {"kernel": platform.release(), "cores": os.cpu_count(),
              "slots": tools.slots}
    servers = {}
    try:
        for name in SERVER_NAMES:
            reason = tools.unavailable_reason(SERVERS[name])
            if reason:
                raise ProbeError(f"{name}: {reason}")
            workdir = os.path.join(scratch_dir, name)
            os.makedirs(workdir)
            servers[name] = Server(SERVERS[name], NATIVE, free_ports(1),
                                   workdir, tools)
            try:
                servers[name].start()
            except ServerError as error:
                raise ProbeError(f"{error}\n{servers[name].error_log_tail()}"
                                 ) from None
        stock_kb, stock_n = child_pss_kb(servers["prefork"], requests)
        ours_kb, ours_n = child_pss_kb(servers["bucketed-reuseport"],
                                       requests)
        result["child_pss_kb"] = {"prefork": stock_kb, "bucketed": ours_kb,
                                  "children": [stock_n, ours_n],
                                  "ratio": ours_kb / stock_kb}
        say(f"child PSS (median): stock prefork {stock_kb} kB, "
            f"bucketed {ours_kb} kB, ratio {ours_kb / stock_kb:.3f}")
        servers.pop("prefork").stop()

        bucketed = servers["bucketed-reuseport"]
        port = bucketed.ports[0]
        before = _rollup(bucketed.pid, PARENT_FIELDS)
        for generation in range(1, restarts + 1):
            os.kill(bucketed.pid, signal.SIGUSR1)
            wait_generation(port, generation)
            if generation == 1:
                after_first = _rollup(bucketed.pid, PARENT_FIELDS)
        after = _rollup(bucketed.pid, PARENT_FIELDS)
        result["parent_kb"] = {"before": before,
                               "after_first_restart": after_first,
                               "after": after, "restarts": restarts}
        say(f"parent after 1 graceful restart: {after_first}; after "
            f"{restarts}: {after} (start: {before})")
    finally:
        for server in servers.values():
            server.stop()
    return result


def headline(result):
    """The memory checks' figure for the results tables."""
    pss = result["child_pss_kb"]
    return (f"child PSS {pss['ratio']:.3f}x stock prefork's "
            f"({pss['bucketed']:,.0f} against {pss['prefork']:,.0f} kB)")
