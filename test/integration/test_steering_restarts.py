# SPDX-License-Identifier: Apache-2.0
"""The steering programs' socket maps across restarts: a reload that
drops a Listen address releases the address's map (the parent's
descriptors and maps stay as they were, however many addresses come and
go), and a server that died without its stop (its map, kept alive by the
program it left on the held socket's group, still holds that socket) does
not leave the next server's slot for the socket empty."""
import signal
import socket

import pytest

from bucketbench.activation import Holder, listen_socket
from httpd_fixture import (LOOPBACK, children_of, free_ports, http_get,
                           kill_until_gone, wait_until)
from steering_maps import (descriptors_of, map_cookies, maps_held_by)
from test_steering import two_cpus  # noqa: F401 (fixture)

RELOADS = 4
SO_COOKIE = 57


def reload_with_another_second_port(server, generation):
    server.ports = [server.ports[0], free_ports(1)[0]]
    server.write_config()
    server.signal(signal.SIGUSR1)
    wait_until(lambda: server.status()["generation"] == generation, 30,
               what=f"generation {generation}")
    assert http_get(server.ports[1])[0] == 200


@pytest.mark.parametrize("steering", ["load", "cpu"])
def test_reloads_changing_a_listen_leave_no_map_behind(make_httpd, two_cpus,
                                                       steering):
    server = make_httpd(listens=2, directives=f"BucketCount 2\n"
                        f"BucketSteering {steering}\n")
    server.start()
    generation = server.status()["generation"]
    # One reload first: the steady state of a server that has restarted
    # (what a restart opens once and keeps).
    generation += 1
    reload_with_another_second_port(server, generation)
    fds, maps = descriptors_of(server.pid), len(maps_held_by(server.pid))
    assert maps >= 2, "a socket map per address"
    for _ in range(RELOADS):
        generation += 1
        reload_with_another_second_port(server, generation)
    print(f"BucketSteering {steering}: {RELOADS} reloads, each with another "
          f"second port: descriptors {fds} -> {descriptors_of(server.pid)}, "
          f"BPF maps {maps} -> {len(maps_held_by(server.pid))}")
    wait_until(lambda: descriptors_of(server.pid) == fds
               and len(maps_held_by(server.pid)) == maps, 30,
               what=f"{fds} descriptors and {maps} BPF maps in the parent, "
                    "as before the reloads")
    assert "BK00252" in server.error_log()


def cookie_of(sock):
    return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8),
                          "little")


def socket_maps_hold(pid, cookie):
    """Some socket map the process holds has the socket of that cookie."""
    return any(cookie in map_cookies(m) for m in maps_held_by(pid))


@pytest.mark.parametrize("steering", ["load", "hash"])
def test_a_server_killed_without_its_stop_leaves_no_slot_empty(
        make_httpd, steering):
    """SIGKILL to the parent and its children: no stop empties the map, so
    the held socket stays in it, and the map lives on with the program
    still attached to the socket's group. The next server's map must
    still get the socket in its slot (EBUSY there means "in some map",
    not "in this one"), else its program leaves that slot to the hash."""
    port = free_ports(1)[0]
    held = listen_socket(LOOPBACK, port)
    holder = Holder([held])
    try:
        server = make_httpd(ports=[port], directives=f"BucketCount 2\n"
                            f"BucketSteering {steering}\n")
        server.start(holder=holder)
        cookie = cookie_of(held)
        assert socket_maps_hold(server.pid, cookie)
        assert children_of(server.pid)
        server.signal(signal.SIGKILL)
        server.proc.wait(30)
        server.proc = None
        kill_until_gone(server.leftovers, 30,
                        what="the killed server's children")
        server.start(holder=holder)
        wait_until(lambda: socket_maps_hold(server.pid, cookie), 10,
                   what="the held socket in the new server's socket map")
        assert "BK00250" in server.error_log()
        for _ in range(20):
            assert http_get(port)[0] == 200
    finally:
        holder.close()
