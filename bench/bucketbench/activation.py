# SPDX-License-Identifier: Apache-2.0
"""Listening sockets held the way systemd's socket units hold them, and
processes started with them as sd_listen_fds(3) describes: the sockets as
descriptors 3, 4, ... with LISTEN_FDS, LISTEN_PID (the started process's
own pid) and LISTEN_FDNAMES in its environment.

The holder keeps its sockets open while the server it passes them to
stops and starts again, so connections that arrive in between wait in the
sockets' accept queues. The integration tests and the bench's restart
workload use it alike."""

import os
import socket
import subprocess
import sys

# Runs in the started process before it becomes the server: moves the
# passed descriptors to 3, 4, ..., names its own pid, then execs. Python
# rather than a shell, since a shell redirects only single-digit
# descriptors.
_EXEC_WITH_FDS = r"""
import fcntl, os, sys
fds = [int(f) for f in sys.argv[1].split(",") if f]
# Out of the way first: a passed descriptor may sit where another goes.
high = [fcntl.fcntl(f, fcntl.F_DUPFD_CLOEXEC, 1024) for f in fds]
for f in fds:
    os.close(f)
for i, f in enumerate(high):
    os.dup2(f, 3 + i, inheritable=True)
    os.close(f)
os.environ["LISTEN_PID"] = str(os.getpid())
os.execvpe(sys.argv[2], sys.argv[2:], os.environ)
"""


def listen_socket(host, port, reuseport=True, backlog=4096, v6only=None):
    """A listening TCP socket on host:port (IPv6 when host has a ':');
    SO_REUSEPORT as systemd's ReusePort=yes sets it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6 and v6only is not None:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY,
                        1 if v6only else 0)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


class Holder:
    """Sockets held across the server's restarts (a socket unit's role).

    fds: what is passed, in order: socket objects or any open file objects
    or descriptors (a test may pass a file or a UDP socket on purpose);
    names: LISTEN_FDNAMES entries, or None for none."""

    def __init__(self, fds, names=None):
        self.fds = list(fds)
        self.names = names

    def numbers(self):
        return [f if isinstance(f, int) else f.fileno() for f in self.fds]

    def environ(self, base, listen_fds=None):
        """base plus LISTEN_FDS (the count, or listen_fds as given, to try
        a bad value) and LISTEN_FDNAMES."""
        env = dict(base)
        env["LISTEN_FDS"] = (str(len(self.fds)) if listen_fds is None
                             else listen_fds)
        if self.names is not None:
            env["LISTEN_FDNAMES"] = ":".join(self.names)
        return env

    def popen(self, argv, env, listen_pid=None, listen_fds=None, **kwargs):
        """Starts argv as a process that finds the held sockets at 3, 4, ...
        LISTEN_PID names that process unless listen_pid is given (to try
        one that names another)."""
        numbers = self.numbers()
        env = self.environ(env, listen_fds)
        if listen_pid is not None:
            # The exec helper names its own pid; a wrong one is set after.
            argv = ["/usr/bin/env", f"LISTEN_PID={listen_pid}", *argv]
        command = [sys.executable, "-c", _EXEC_WITH_FDS,
                   ",".join(str(n) for n in numbers), *argv]
        return subprocess.Popen(command, env=env, pass_fds=numbers, **kwargs)

    def close(self):
        for f in self.fds:
            if isinstance(f, int):
                os.close(f)
            else:
                f.close()
        self.fds = []
