# SPDX-License-Identifier: Apache-2.0
"""
No descriptor of the MPM leaks into processes started for other purposes,
and scripts start with an empty signal mask (issue 18, point 5).

The MPM opens SO_REUSEPORT duplicates of the listening sockets, BPF socket
maps (BucketSteering load keeps two kinds in the parent) and, in
ChildModel event, one eventfd per bucket. mod_cgid's daemon (forked from
the parent without exec), the CGIs it starts, the CGIs mod_cgi starts from
a child, and piped loggers must hold none of them; a CGI must not inherit
the signals a child keeps blocked.

Each server runs a CGI that prints what it holds: every entry of its
/proc/self/fd (with readlink) and the SigBlk line of /proc/self/status.
"""
import os
import re
import signal

from httpd_fixture import (APACHE_MODULES, children_of, http_get,
                           listening_inodes, wait_until)

# Prints "fd N TARGET" for each descriptor of the script's own process
# and its SigBlk line. Python, not a shell: a shell may reset its signal
# mask when it starts (and would hide the one it inherited).
REPORT = """import os
def report():
    lines = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            lines.append("fd %s %s" % (fd, os.readlink("/proc/self/fd/" + fd)))
        except OSError:
            pass
    with open("/proc/self/status") as f:
        lines += [l.strip() for l in f if l.startswith("SigBlk:")]
    return "\\n".join(lines) + "\\n"
"""

FD_CGI = """#!/usr/bin/python3
""" + REPORT + """
import sys
sys.stdout.write("Content-Type: text/plain\\r\\n\\r\\n" + report())
"""

# A piped logger that records the same into a file (its path the first
# argument), then drains its pipe.
LOGGER = """#!/usr/bin/python3
""" + REPORT + """
import sys
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(report())
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
for _ in sys.stdin:
    pass
"""

BUCKETS = 4
# BucketSteering load: the parent keeps a socket map per address and the
# map of idle counts open for the whole run (BPF descriptors to leak).
MPM_DIRECTIVES = f"BucketCount {BUCKETS}\nBucketSteering load\n"


def model_directives(model):
    if model == "event":
        return "ChildModel event\nThreadsPerChild 4\nThreadLimit 4\n"
    return ""


def cgid_directives(server):
    return (f"LoadModule cgid_module {APACHE_MODULES}/mod_cgid.so\n"
            f"ScriptSock {server.root}/run/cgid.sock\n"
            f"ScriptAlias /cgi-bin/ {server.root}/cgi-bin/\n")


def install_fd_cgi(server):
    script = server.root / "cgi-bin" / "fds.cgi"
    script.write_text(FD_CGI)
    script.chmod(0o755)


def parse_report(text):
    """({fd: target}, SigBlk as an int) from what FD_CGI / LOGGER print."""
    fds = {}
    sigblk = None
    for line in text.splitlines():
        m = re.match(r"fd (\d+) (.*)$", line)
        if m:
            fds[int(m.group(1))] = m.group(2)
        m = re.match(r"SigBlk:\s*([0-9a-f]+)$", line)
        if m:
            sigblk = int(m.group(1), 16)
    return fds, sigblk


def descriptors_of(pid):
    """{fd: readlink target} of a live process."""
    fds = {}
    for entry in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds[int(entry)] = os.readlink(f"/proc/{pid}/fd/{entry}")
        except OSError:
            pass
    return fds


def mpm_leaks(fds, server):
    """The descriptors in fds that are the MPM's: a listening socket of
    the server's ports (core's originals or the duplicates), a BPF map or
    program, an eventfd or epoll set (anonymous inodes: nothing else in
    these processes opens any)."""
    listening = set()
    for port in server.ports:
        listening |= listening_inodes(port)
    leaks = {}
    for fd, target in fds.items():
        m = re.match(r"socket:\[(\d+)\]$", target)
        if m and int(m.group(1)) in listening:
            leaks[fd] = target + " (listening on the server's port)"
        elif target.startswith("anon_inode:"):
            leaks[fd] = target
    return leaks


def run_fd_cgi(server):
    status, body = http_get(server.ports[0], "/cgi-bin/fds.cgi")
    assert status == 200, (status, body, server.error_log()[-2000:])
    fds, sigblk = parse_report(body.decode())
    assert fds and sigblk is not None, body
    return fds, sigblk


def unix_socket_inode(path):
    """Inode of the listening unix socket bound to path, from
    /proc/net/unix, or None."""
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == str(path):
                return int(fields[6])
    return None


def cgid_daemon(server):
    """The pid of mod_cgid's daemon: the parent's child that holds the
    daemon's unix socket; None until there is one."""
    # mod_cgid appends the parent's pid to ScriptSock.
    inode = unix_socket_inode(f"{server.root}/run/cgid.sock.{server.pid}")
    if inode is None:
        return None
    for pid in children_of(server.pid):
        try:
            if f"socket:[{inode}]" in descriptors_of(pid).values():
                return pid
        except OSError:
            continue
    return None


def signals_blocked(pid):
    """SigBlk of a live process, as an int."""
    with open(f"/proc/{pid}/status") as f:
        return parse_report(f.read())[1]


def assert_parent_descriptors_close_on_exec(server):
    """Whatever forks without apr_proc_create still execs nothing of ours:
    every listening socket, BPF map and eventfd of the parent has
    O_CLOEXEC (fdinfo flags, octal, 02000000)."""
    fds = descriptors_of(server.pid)
    mine = mpm_leaks(fds, server)
    assert any("bpf-map" in t for t in mine.values()), fds
    for fd in mine:
        with open(f"/proc/{server.pid}/fdinfo/{fd}") as f:
            flags = int(re.search(r"^flags:\s*([0-7]+)$", f.read(),
                                  re.M).group(1), 8)
        assert flags & 0o2000000, f"fd {fd} {fds[fd]} lacks O_CLOEXEC"


def assert_daemon_and_cgi_clean(server, daemon):
    leaks = mpm_leaks(descriptors_of(daemon), server)
    assert leaks == {}, f"mod_cgid's daemon {daemon} holds {leaks}"
    assert signals_blocked(daemon) == 0

    fds, sigblk = run_fd_cgi(server)
    assert mpm_leaks(fds, server) == {}, fds
    assert sigblk == 0


def test_cgid_daemon_and_its_cgis_hold_no_mpm_descriptor(make_httpd,
                                                        child_model):
    server = make_httpd(directives="")
    server.write_config(MPM_DIRECTIVES + model_directives(child_model)
                        + cgid_directives(server))
    install_fd_cgi(server)
    server.start()

    assert_parent_descriptors_close_on_exec(server)
    # What the helpers must not hold is there to leak: the parent holds
    # every kind.
    parent = mpm_leaks(descriptors_of(server.pid), server)
    assert sum("bpf-map" in t for t in parent.values()) >= 2, parent
    assert sum("listening" in t for t in parent.values()) == BUCKETS, parent
    if child_model == "event":
        assert sum("eventfd" in t for t in parent.values()) == BUCKETS, parent

    daemon = wait_until(lambda: cgid_daemon(server), 10,
                        what="mod_cgid's daemon")
    assert_daemon_and_cgi_clean(server, daemon)

    # A graceful restart keeps the MPM's descriptors open in the parent
    # and forks a new daemon, which must close them too.
    server.signal(signal.SIGUSR1)
    wait_until(lambda: "Doing graceful restart" in server.error_log(), 10,
               what="the graceful restart")

    def new_daemon_up():
        pid = cgid_daemon(server)
        return pid if pid != daemon else None
    new_daemon = wait_until(new_daemon_up, 20, what="a new cgid daemon")
    assert_daemon_and_cgi_clean(server, new_daemon)


def test_cgi_of_a_child_holds_no_mpm_descriptor(make_httpd, child_model):
    server = make_httpd(directives=MPM_DIRECTIVES
                        + model_directives(child_model),
                        cgi=True)
    install_fd_cgi(server)
    server.start()

    # Several requests, so several children (prefork model) start one.
    for _ in range(8):
        fds, sigblk = run_fd_cgi(server)
        assert mpm_leaks(fds, server) == {}, fds
        assert sigblk == 0, f"the CGI started with signals {sigblk:#x} " \
                            "blocked"


def test_piped_logger_holds_no_mpm_descriptor(make_httpd, child_model):
    server = make_httpd(directives="")
    logger = server.root / "logger.py"
    logger.write_text(LOGGER)
    logger.chmod(0o755)
    report = server.root / "logs" / "logger-report.txt"
    server.write_config(MPM_DIRECTIVES + model_directives(child_model)
                        + f'CustomLog "||{logger} {report}" common\n')
    server.start()

    wait_until(report.exists, 10, what="the piped logger's report")
    fds, sigblk = parse_report(report.read_text())
    assert fds and sigblk is not None
    assert mpm_leaks(fds, server) == {}, fds
    assert sigblk == 0
