/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kprobe: what the running kernel does for listener buckets, found by
 * trying it (never by version numbers or the presence of /proc files).
 * Runs as root inside a kernel-matrix guest; built static on the host.
 *
 * Prints one line per feature to stdout:
 *   FEATURE <name> yes|no <detail>
 * "no" carries the errno or what was observed instead. Exits 0 when every
 * probe could be run, 1 when a probe's own set-up failed (the line for that
 * feature then says "no setup: ...").
 *
 * All sockets are on 127.0.0.1 with ports the kernel picks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_INCOMING_CPU
#define SO_INCOMING_CPU 49
#endif
#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif
#ifndef SO_ATTACH_REUSEPORT_EBPF
#define SO_ATTACH_REUSEPORT_EBPF 52
#endif

#define MIGRATE_SYSCTL "/proc/sys/net/ipv4/tcp_migrate_req"
#define CLIENTS 8
#define WAIT_MS 2000

static int setup_failed;

static void feature(const char *name, int yes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void feature(const char *name, int yes, const char *fmt, ...)
{
    va_list ap;

    printf("FEATURE %s %s ", name, yes ? "yes" : "no");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Reports a call's outcome: yes, or no with its errno. Returns 1 for yes. */
static int outcome(const char *name, int failed, const char *call)
{
    if (failed) {
        feature(name, 0, "%s: %s", call, strerror(errno));
        return 0;
    }
    feature(name, 1, "%s works", call);
    return 1;
}

static void setup_error(const char *name, const char *what, int err)
{
    setup_failed = 1;
    feature(name, 0, "setup: %s: %s", what, strerror(err));
}

static int tcp_socket(int reuseport)
{
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd >= 0 && reuseport
        && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static struct sockaddr_in loopback(unsigned short port)
{
    struct sockaddr_in sin;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(port);
    return sin;
}

/* `n` listeners on one port, with SO_REUSEPORT a group in the order of
 * listen(). Returns 0, or -1 with errno. */
static int listeners(int *fds, int n, int reuseport)
{
    struct sockaddr_in sin = loopback(0);
    socklen_t len = sizeof(sin);
    int i;

    for (i = 0; i < n; i++) {
        fds[i] = tcp_socket(reuseport);
        if (fds[i] < 0
            || bind(fds[i], (struct sockaddr *)&sin, sizeof(sin)) != 0
            || listen(fds[i], 64) != 0
            || (i == 0 && getsockname(fds[0], (struct sockaddr *)&sin,
                                      &len) != 0)) {
            int err = errno;
            while (i >= 0) {
                if (fds[i] >= 0) {
                    close(fds[i]);
                }
                i--;
            }
            errno = err;
            return -1;
        }
    }
    return 0;
}

static void close_all(int *fds, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
}

/* Connects `n` clients to the group's port; on loopback the handshake is
 * done when connect() returns, so each is then queued on one listener. */
static int connect_clients(int listener, int *clients, int n)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int i;

    if (getsockname(listener, (struct sockaddr *)&sin, &len) != 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        clients[i] = tcp_socket(0);
        if (clients[i] < 0
            || connect(clients[i], (struct sockaddr *)&sin, sizeof(sin)) != 0) {
            int err = errno;
            close_all(clients, i + 1);
            errno = err;
            return -1;
        }
    }
    return 0;
}

/* Accepts (and closes) what is queued on a listener, waiting up to
 * WAIT_MS for the first one and briefly for the rest. */
static int drain(int listener, int expect)
{
    int got = 0;
    int wait_ms = WAIT_MS;
    struct pollfd pfd;

    pfd.fd = listener;
    pfd.events = POLLIN;
    while (got < expect && poll(&pfd, 1, wait_ms) > 0) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            break;
        }
        close(fd);
        got++;
        wait_ms = 200;
    }
    return got;
}

static int attach_cbpf_return(int fd, unsigned int index)
{
    struct sock_filter code[] = {
        { BPF_RET | BPF_K, 0, 0, index },
    };
    struct sock_fprog prog = { 1, code };

    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog,
                      sizeof(prog));
}

static int probe_reuseport(void)
{
    int fd = tcp_socket(1);

    if (fd >= 0) {
        close(fd);
    }
    return outcome("reuseport", fd < 0, "setsockopt(SO_REUSEPORT)");
}

static void probe_incoming_cpu(void)
{
    int cpu = 0;
    int fd = tcp_socket(0);

    if (fd < 0) {
        setup_error("incoming_cpu", "socket", errno);
        return;
    }
    outcome("incoming_cpu", setsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu,
                                       sizeof(cpu)) != 0,
            "setsockopt(SO_INCOMING_CPU)");
    close(fd);
}

/* Attaches "return 1" and checks that every connection lands on the
 * second listener: attaching alone proves nothing for TCP before 4.6. */
static void probe_cbpf(void)
{
    int group[2], clients[CLIENTS], first, second;

    if (listeners(group, 2, 1) != 0) {
        setup_error("cbpf_attach", "reuseport group", errno);
        return;
    }
    if (!outcome("cbpf_attach", attach_cbpf_return(group[0], 1) != 0,
                 "SO_ATTACH_REUSEPORT_CBPF")) {
        feature("cbpf_steers", 0, "not attached");
        close_all(group, 2);
        return;
    }
    if (connect_clients(group[0], clients, CLIENTS) != 0) {
        setup_error("cbpf_steers", "connect", errno);
        close_all(group, 2);
        return;
    }
    second = drain(group[1], CLIENTS);
    first = drain(group[0], CLIENTS - second);
    feature("cbpf_steers", first == 0 && second == CLIENTS,
            "program returning 1: %d of %d on listener 1, %d on listener 0",
            second, CLIENTS, first);
    close_all(clients, CLIENTS);
    close_all(group, 2);
}

static int bpf_load_sk_reuseport(int attach_type)
{
    struct bpf_insn insns[] = {
        { BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, SK_PASS },
        { BPF_JMP | BPF_EXIT, 0, 0, 0, 0 },
    };
    union bpf_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_SK_REUSEPORT;
    attr.expected_attach_type = attach_type;
    attr.insn_cnt = sizeof(insns) / sizeof(insns[0]);
    attr.insns = (unsigned long)insns;
    attr.license = (unsigned long)"GPL";
    return (int)syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
}

static void probe_ebpf(int have_reuseport)
{
    int group[2];
    int prog = bpf_load_sk_reuseport(BPF_SK_REUSEPORT_SELECT);

    if (!outcome("ebpf_load", prog < 0, "bpf(BPF_PROG_LOAD, SK_REUSEPORT)")) {
        if (have_reuseport) {
            feature("ebpf_attach", 0, "no program");
        }
    }
    else {
        if (!have_reuseport) {
            /* main() reports ebpf_attach */
        }
        else if (listeners(group, 2, 1) != 0) {
            setup_error("ebpf_attach", "reuseport group", errno);
        }
        else {
            outcome("ebpf_attach",
                    setsockopt(group[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF,
                               &prog, sizeof(prog)) != 0,
                    "SO_ATTACH_REUSEPORT_EBPF");
            close_all(group, 2);
        }
        close(prog);
    }
    prog = bpf_load_sk_reuseport(BPF_SK_REUSEPORT_SELECT_OR_MIGRATE);
    if (outcome("migrate_prog_load", prog < 0,
                "bpf(BPF_PROG_LOAD, SK_REUSEPORT, SELECT_OR_MIGRATE)")) {
        close(prog);
    }
}

/* Reads the sysctl into *value; -1 with errno when it cannot be read. */
static int migrate_sysctl_read(int *value)
{
    char buf[16] = "";
    int fd = open(MIGRATE_SYSCTL, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? errno : EIO;
        return -1;
    }
    *value = buf[0] == '1';
    return 0;
}

static int migrate_sysctl_write(int value)
{
    int fd = open(MIGRATE_SYSCTL, O_WRONLY | O_CLOEXEC);
    int rc;

    if (fd < 0) {
        return -1;
    }
    rc = write(fd, value ? "1\n" : "0\n", 2) == 2 ? 0 : -1;
    close(fd);
    return rc;
}

/* With tcp_migrate_req=1, closing a listener must hand its queued
 * connections to the other listener of the group. The connections are put
 * on listener 0 by a CBPF program when one attaches (else by the hash,
 * checked with the count). */
static void probe_migrate(int have_reuseport)
{
    int group[2], clients[CLIENTS], before = 0, moved, steered;

    if (migrate_sysctl_read(&before) != 0) {
        feature("migrate_sysctl", 0, "%s: %s", MIGRATE_SYSCTL,
                strerror(errno));
    }
    else {
        feature("migrate_sysctl", 1, "%s present (%d)", MIGRATE_SYSCTL,
                before);
    }
    if (!have_reuseport) {
        return;
    }
    if (migrate_sysctl_write(1) != 0) {
        feature("migrate_req", 0, "cannot set %s: %s", MIGRATE_SYSCTL,
                strerror(errno));
        return;
    }
    if (listeners(group, 2, 1) != 0) {
        setup_error("migrate_req", "reuseport group", errno);
        migrate_sysctl_write(before);
        return;
    }
    steered = attach_cbpf_return(group[0], 0) == 0;
    if (connect_clients(group[0], clients, CLIENTS) != 0) {
        setup_error("migrate_req", "connect", errno);
        close_all(group, 2);
        migrate_sysctl_write(before);
        return;
    }
    if (!steered) {
        /* Without steering, keep what hashed to listener 1 out of the
         * count: only listener 0's queue is tested. */
        steered = CLIENTS - drain(group[1], CLIENTS);
    }
    else {
        steered = CLIENTS;
    }
    close(group[0]);
    group[0] = -1;
    moved = drain(group[1], steered);
    feature("migrate_req", steered > 0 && moved == steered,
            "tcp_migrate_req=1, closed the listener holding %d queued "
            "connection(s): %d accepted on the other", steered, moved);
    close_all(clients, CLIENTS);
    close_all(group, 2);
    if (migrate_sysctl_write(before) != 0) {
        setup_error("migrate_restore", "restore " MIGRATE_SYSCTL, errno);
    }
}

static void probe_epoll_exclusive(void)
{
    struct epoll_event ev;
    int group[1];
    int ep = epoll_create1(EPOLL_CLOEXEC);

    if (ep < 0) {
        setup_error("epoll_exclusive", "epoll_create1", errno);
        return;
    }
    if (listeners(group, 1, 0) != 0) {
        setup_error("epoll_exclusive", "listener", errno);
        close(ep);
        return;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    outcome("epoll_exclusive",
            epoll_ctl(ep, EPOLL_CTL_ADD, group[0], &ev) != 0,
            "epoll_ctl(EPOLLEXCLUSIVE)");
    close_all(group, 1);
    close(ep);
}

int main(void)
{
    static const char *const need_group[] = {
        "cbpf_attach", "cbpf_steers", "ebpf_attach", "migrate_req",
    };
    int have_reuseport = probe_reuseport();
    size_t i;

    probe_incoming_cpu();
    if (have_reuseport) {
        probe_cbpf();
    }
    probe_ebpf(have_reuseport);
    probe_migrate(have_reuseport);
    probe_epoll_exclusive();
    for (i = 0; i < sizeof(need_group) / sizeof(need_group[0]); i++) {
        if (!have_reuseport) {
            feature(need_group[i], 0, "needs SO_REUSEPORT");
        }
    }
    return setup_failed ? 1 : 0;
}
