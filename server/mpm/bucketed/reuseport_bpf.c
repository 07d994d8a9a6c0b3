/*
 * reuseport_bpf.c: loading and attaching bucketed's reuseport programs,
 * and the trials that show what the kernel does with them.
 *
 * The programs are a handful of instructions, assembled below as data and
 * loaded with bpf(2) through syscall(2) (which is also what lets the
 * LD_PRELOAD shim of bench/ emulate older kernels). That keeps the module
 * free of libbpf and of a clang step, so the apxs and in-tree builds stay
 * plain C; where linux/bpf.h is missing the file still compiles and every
 * load fails with ENOSYS (docs/design.md, "Migration").
 *
 * The enum values taken from the kernel ABI (program and attach types)
 * are named here by number: they never change, and naming them keeps
 * headers from before 4.19 / 5.14, which lack the names, building.
 */
#include "reuseport_bpf.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/bpf.h>)
#include <linux/bpf.h>
#include <sys/syscall.h>
#if defined(SYS_bpf) && defined(SO_ATTACH_REUSEPORT_EBPF) \
    && defined(BPF_OBJ_NAME_LEN)
#define HAVE_REUSEPORT_BPF 1
#endif
#endif
#endif

/* Trial: connections queued before the listener closes; how long to wait
 * for them to be queued. */
#define TRIAL_CONNECTIONS 8
#define TRIAL_WAIT_STEPS 1000
#define TRIAL_WAIT_STEP_NS 1000000L      /* 1 ms; 1 s in all */

#ifdef HAVE_REUSEPORT_BPF

/* Kernel ABI numbers (include/uapi/linux/bpf.h). */
#define ABI_PROG_TYPE_SK_REUSEPORT 21                    /* 4.19 */
#define ABI_SK_REUSEPORT_SELECT_OR_MIGRATE 40            /* 5.14 */
#define ABI_SK_PASS 1

#define PROGRAM_NAME "bucketed_mig"
/* No GPL-only helper is called: the license string is informative. */
#define PROGRAM_LICENSE "Apache-2.0"

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

int reuseport_bpf_built(void)
{
    return 1;
}

int reuseport_bpf_migrate_load(int *err)
{
    /* r0 = SK_PASS; exit */
    struct bpf_insn prog[2];
    union bpf_attr attr;
    long fd;

    memset(prog, 0, sizeof(prog));
    prog[0].code = BPF_ALU64 | BPF_MOV | BPF_K;
    prog[0].dst_reg = BPF_REG_0;
    prog[0].imm = ABI_SK_PASS;
    prog[1].code = BPF_JMP | BPF_EXIT;

    memset(&attr, 0, sizeof(attr));
    attr.prog_type = ABI_PROG_TYPE_SK_REUSEPORT;
    attr.expected_attach_type = ABI_SK_REUSEPORT_SELECT_OR_MIGRATE;
    attr.insn_cnt = sizeof(prog) / sizeof(prog[0]);
    attr.insns = (unsigned long)prog;
    attr.license = (unsigned long)PROGRAM_LICENSE;
    memcpy(attr.prog_name, PROGRAM_NAME, sizeof(PROGRAM_NAME));
    fd = sys_bpf(BPF_PROG_LOAD, &attr);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    *err = 0;
    return (int)fd;
}

int reuseport_bpf_attach(int sock_fd, int prog_fd)
{
    if (setsockopt(sock_fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, &prog_fd,
                   sizeof(prog_fd)) < 0) {
        return errno;
    }
    return 0;
}

unsigned int reuseport_bpf_prog_id(int prog_fd)
{
    struct bpf_prog_info info;
    union bpf_attr attr;

    memset(&info, 0, sizeof(info));
    memset(&attr, 0, sizeof(attr));
    attr.info.bpf_fd = prog_fd;
    attr.info.info_len = sizeof(info);
    attr.info.info = (unsigned long)&info;
    if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) < 0) {
        return 0;
    }
    return info.id;
}

#else /* !HAVE_REUSEPORT_BPF */

int reuseport_bpf_built(void)
{
    return 0;
}

int reuseport_bpf_migrate_load(int *err)
{
    *err = ENOSYS;
    return -1;
}

int reuseport_bpf_attach(int sock_fd, int prog_fd)
{
    (void)sock_fd;
    (void)prog_fd;
    return ENOSYS;
}

unsigned int reuseport_bpf_prog_id(int prog_fd)
{
    (void)prog_fd;
    return 0;
}

#endif /* HAVE_REUSEPORT_BPF */

/* ---- the migration trial */

static int trial_listener(struct sockaddr_in *addr, int *err)
{
    int one = 1;
    socklen_t len = sizeof(*addr);
    /* Non-blocking: accept_all() stops at an empty queue. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0
        || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) < 0
        || listen(fd, TRIAL_CONNECTIONS * 2) < 0
        || getsockname(fd, (struct sockaddr *)addr, &len) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

/* Connections waiting in a listener's accept queue (TCP_INFO reports them
 * as tcpi_unacked for a listening socket); -1 on error. */
static int queued_on(int listener)
{
    struct tcp_info info;
    socklen_t len = sizeof(info);

    memset(&info, 0, sizeof(info));
    if (getsockopt(listener, IPPROTO_TCP, TCP_INFO, &info, &len) < 0) {
        return -1;
    }
    return (int)info.tcpi_unacked;
}

/* Until `want` connections are queued on the listener, at most a second. */
static int wait_queued(int listener, int want)
{
    struct timespec step = { 0, TRIAL_WAIT_STEP_NS };
    int i, n = 0;

    for (i = 0; i < TRIAL_WAIT_STEPS; i++) {
        n = queued_on(listener);
        if (n < 0 || n >= want) {
            break;
        }
        nanosleep(&step, NULL);
    }
    return n;
}

static int accept_all(int listener)
{
    int n = 0, fd;

    while ((fd = accept4(listener, NULL, NULL,
                         SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        close(fd);
        n++;
    }
    return n;
}

static void close_all(int *fds, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        if (fds[i] >= 0) {
            close(fds[i]);
        }
    }
}

void reuseport_bpf_migration_trial(migration_trial *t, int use_program)
{
    struct sockaddr_in addr;
    int clients[TRIAL_CONNECTIONS];
    int first, second = -1, prog = -1, i, err = 0;

    memset(t, 0, sizeof(*t));
    for (i = 0; i < TRIAL_CONNECTIONS; i++) {
        clients[i] = -1;
    }
    if (use_program && !reuseport_bpf_built()) {
        t->outcome = TRIAL_NO_BUILD;
        return;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    first = trial_listener(&addr, &err);
    if (first < 0) {
        t->outcome = TRIAL_SETUP_FAILED;
        t->err = err;
        return;
    }
    /* Every connection to the first listener while it is alone; then the
     * second joins its group, and the first is closed. */
    for (i = 0; i < TRIAL_CONNECTIONS; i++) {
        clients[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (clients[i] < 0
            || connect(clients[i], (struct sockaddr *)&addr,
                       sizeof(addr)) < 0) {
            t->outcome = TRIAL_SETUP_FAILED;
            t->err = errno;
            goto out;
        }
    }
    t->queued = wait_queued(first, TRIAL_CONNECTIONS);
    second = trial_listener(&addr, &err);
    if (second < 0) {
        t->outcome = TRIAL_SETUP_FAILED;
        t->err = err;
        goto out;
    }
    if (use_program) {
        prog = reuseport_bpf_migrate_load(&err);
        if (prog < 0) {
            t->outcome = TRIAL_LOAD_REFUSED;
            t->err = err;
            goto out;
        }
        err = reuseport_bpf_attach(second, prog);
        if (err != 0) {
            t->outcome = TRIAL_ATTACH_REFUSED;
            t->err = err;
            goto out;
        }
    }
    if (t->queued <= 0) {
        t->queued = 0;
        t->outcome = TRIAL_INCONCLUSIVE;
        goto out;
    }
    close(first);
    first = -1;
    t->moved = accept_all(second);
    t->outcome = TRIAL_DONE;
out:
    if (prog >= 0) {
        close(prog);
    }
    if (first >= 0) {
        close(first);
    }
    if (second >= 0) {
        close(second);
    }
    close_all(clients, TRIAL_CONNECTIONS);
}

migration_choice reuseport_bpf_choose_migration(apr_pool_t *p, int reuseport,
                                                int sysctl)
{
    migration_trial with_program, without_program;

    memset(&with_program, 0, sizeof(with_program));
    memset(&without_program, 0, sizeof(without_program));
    if (reuseport) {
        reuseport_bpf_migration_trial(&with_program, 1);
        if (sysctl == 1 && with_program.outcome != TRIAL_DONE) {
            reuseport_bpf_migration_trial(&without_program, 0);
        }
    }
    return migration_choose(p, &with_program, &without_program, sysctl);
}
