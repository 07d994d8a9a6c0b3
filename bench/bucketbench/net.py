# SPDX-License-Identifier: Apache-2.0
"""Loopback networking, shared by the harness and the integration tests
(test/integration): free ports, one HTTP GET, and waiting for a condition
that network errors may hold up meanwhile.

Every address here is 127.0.0.1 unless a caller passes the server address
of bench/run --net veth (netns.py), which exists only inside the network
namespaces the harness made: nothing leaves the machine."""

import http.client
import random
import socket
import time

LOOPBACK = "127.0.0.1"
# Default bound of one HTTP request, in seconds.
HTTP_TIMEOUT = 15


# Where free_ports() looks: below the kernel's ephemeral range (32768 and
# up by default), which every outgoing connection takes its local port
# from. A port picked there is free when picked, but a client connection of
# the tests or the harness can take it before the server binds it ("Address
# already in use" at start-up, seen in CI-like runs); nothing takes a port
# below the range unasked.
PORT_RANGE = (20000, 32000)


def _ephemeral_floor():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return PORT_RANGE[1]


def free_ports(count):
    """count distinct loopback ports that can be bound now, picked at
    random below the kernel's ephemeral range. All probes stay bound until
    every port is found, so none repeats; then they are released for the
    server."""
    low, high = PORT_RANGE[0], min(PORT_RANGE[1], _ephemeral_floor())
    candidates = random.sample(range(low, high), high - low)
    probes = []
    try:
        for port in candidates:
            if len(probes) == count:
                break
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                probe.close()
                continue
            probes.append(probe)
        if len(probes) < count:
            raise OSError(f"no {count} free loopback ports in {low}-{high}")
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def port_is_free(port):
    """True when a server could bind the loopback port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Same option the servers set: a port held only by TIME_WAIT
        # connections of an earlier run is usable.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def connection_refused(port):
    """True when nothing accepts connections on the port any more. A port
    from the ephemeral range can be picked as the probe's own source port,
    and on loopback such a connect reaches itself (a TCP self-connect):
    that is no listener either."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=2) as probe:
            return probe.getsockname() == probe.getpeername()
    except ConnectionRefusedError:
        return True


def http_get(port, path="/", timeout=HTTP_TIMEOUT, host=LOOPBACK):
    """One GET http://host:port/path with Connection: close. Returns
    (status, body bytes) whatever the status; OSError or
    http.client.HTTPException when no answer came."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Timeout(AssertionError):
    """A wait_until() condition did not come true in time."""


def wait_until(predicate, timeout, interval=0.02, what=None):
    """Polls predicate() until it returns a true value, which is returned.
    Raises Timeout (an AssertionError) after `timeout` seconds; a predicate
    that raises OSError or http.client errors counts as not yet true."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, http.client.HTTPException) as e:
            last_error = e
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise Timeout(f"timed out after {timeout} s waiting for "
                          f"{what or predicate}{detail}")
        time.sleep(interval)
