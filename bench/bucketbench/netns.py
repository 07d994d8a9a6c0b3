# SPDX-License-Identifier: Apache-2.0
"""bench/run --net veth: the load crosses a veth pair between two network
namespaces the harness creates, instead of loopback.

Loopback takes a shortcut through the kernel's IP stack; a veth pair is
the real IP path of two hosts (without a NIC's RSS queues). The harness
makes bench-srv-<pid> for the servers and bench-cli-<pid> for itself and
its load tools, with one end of the pair in each and an address from
198.18.0.0/15 (RFC 2544's benchmarking range) on each end. Those
addresses exist only inside the two namespaces: nothing is added to, nor
routed from, the machine's own network. The servers run under
`ip netns exec bench-srv-<pid>`; the harness moves itself into
bench-cli-<pid> before it starts any thread or client, so every load tool
and probe it starts is there too. remove() deletes both namespaces (and
with them the pair): bench/run calls it on every way out, errors and
signals included. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2.
"""

import ctypes
import os
import shutil
import subprocess
import threading

SERVER_ADDRESS = "198.18.0.1"
CLIENT_ADDRESS = "198.18.0.2"
PREFIX_LENGTH = 30
SERVER_LINK = "veth-srv"
CLIENT_LINK = "veth-cli"
NETNS_DIR = "/run/netns"
# setns(2)'s nstype for a network namespace (linux/sched.h).
CLONE_NEWNET = 0x40000000


class NetnsError(Exception):
    """The namespaces or the pair could not be made, or entered."""


def _ip(*args):
    """Runs ip ARGS; NetnsError with its message when it fails."""
    command = ["ip", *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetnsError(f"{' '.join(command)}: {error}") from None
    if result.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: "
                         f"{(result.stderr or result.stdout).strip()}")
    return result.stdout


def unavailable_reason():
    """Why --net veth cannot run here, or None."""
    if os.geteuid() != 0:
        return "--net veth needs root (it creates network namespaces)"
    if not shutil.which("ip"):
        return "--net veth needs ip (package iproute2)"
    return None


def namespace_of(pid="self"):
    """The network namespace a process is in, as /proc names it
    ("net:[4026531840]"); None when it is gone or not ours to read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def listed_namespaces():
    """The names `ip netns list` shows."""
    return [line.split()[0] for line in _ip("netns", "list").splitlines()
            if line.strip()]


class VethPair:
    """The two namespaces and the pair between them; tag tells this run's
    names from another's (default: this process's pid)."""

    def __init__(self, tag=None):
        tag = os.getpid() if tag is None else tag
        self.server_namespace = f"bench-srv-{tag}"
        self.client_namespace = f"bench-cli-{tag}"
        self.created = []

    def create(self):
        """Makes both namespaces, the pair and its addresses; on failure
        removes what it made and raises NetnsError."""
        try:
            for name in (self.server_namespace, self.client_namespace):
                _ip("netns", "add", name)
                self.created.append(name)
            _ip("-n", self.client_namespace, "link", "add", CLIENT_LINK,
                "type", "veth", "peer", "name", SERVER_LINK,
                "netns", self.server_namespace)
            for name, link, address in (
                    (self.server_namespace, SERVER_LINK, SERVER_ADDRESS),
                    (self.client_namespace, CLIENT_LINK, CLIENT_ADDRESS)):
                _ip("-n", name, "addr", "add",
                    f"{address}/{PREFIX_LENGTH}", "dev", link)
                _ip("-n", name, "link", "set", link, "up")
                _ip("-n", name, "link", "set", "lo", "up")
        except NetnsError:
            self.remove()
            raise
        return self

    def remove(self):
        """Deletes the namespaces this pair made (the veth ends go with
        them); what cannot be deleted is reported, not raised, so that
        the rest of the clean-up runs."""
        left = []
        while self.created:
            name = self.created.pop()
            try:
                _ip("netns", "delete", name)
            except NetnsError as error:
                left.append(str(error))
        return left

    def server_command(self, command):
        """command run in the servers' namespace. `ip netns exec` execs it
        in place, so its pid is the server's own."""
        return ["ip", "netns", "exec", self.server_namespace, *command]

    def enter_client(self):
        """Moves this process into the clients' namespace. setns() moves
        the calling thread only: done while it is the only one, every
        thread and process started afterwards is there as well."""
        if threading.active_count() != 1:
            raise NetnsError("cannot enter the client namespace: the "
                             "harness already runs other threads")
        libc = ctypes.CDLL(None, use_errno=True)
        path = os.path.join(NETNS_DIR, self.client_namespace)
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(descriptor, CLONE_NEWNET) != 0:
                error = ctypes.get_errno()
                raise NetnsError(f"setns({path}): {os.strerror(error)}")
        finally:
            os.close(descriptor)

    def record(self):
        """For meta.json."""
        return {"kind": "veth", "server_namespace": self.server_namespace,
                "client_namespace": self.client_namespace,
                "server_address": SERVER_ADDRESS,
                "client_address": CLIENT_ADDRESS}
