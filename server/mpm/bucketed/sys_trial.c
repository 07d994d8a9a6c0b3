/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_trial.c: the trials that show, at start-up, what this kernel
 * does with a reuseport group on loopback: whether connections queued on
 * a listener that closes are handed to the rest of its group (with or
 * without bucketed's migration program), whether a draining socket keeps
 * its queue, and whether a steering program steers. Programs and maps
 * come from sys_bpf.c.
 */
#include "sys_trial.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "sys_bpf.h"

/* Trial: connections queued before the listener closes; how long to wait
 * for them to be queued. */
#define TRIAL_CONNECTIONS 8
#define TRIAL_WAIT_STEPS 1000
#define TRIAL_WAIT_STEP_NS 1000000L      /* 1 ms; 1 s in all */

#ifdef __linux__

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

int reuseport_bpf_queued(int listener)
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
        n = reuseport_bpf_queued(listener);
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

/* Two listeners of one group on 127.0.0.1, an ephemeral port (in *addr
 * then): 0, or the errno (fds[] that opened are left for the caller). */
static int trial_pair(struct sockaddr_in *addr, int *fds)
{
    int i, err = 0;

    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (i = 0; i < 2; i++) {
        fds[i] = trial_listener(addr, &err);
        if (fds[i] < 0) {
            return err;
        }
    }
    return 0;
}

/* TRIAL_CONNECTIONS clients connected to addr: 0, or the errno. */
static int connect_clients(int *clients, const struct sockaddr_in *addr)
{
    int i;

    for (i = 0; i < TRIAL_CONNECTIONS; i++) {
        clients[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (clients[i] < 0
            || connect(clients[i], (const struct sockaddr *)addr,
                       sizeof(*addr)) < 0) {
            return errno;
        }
    }
    return 0;
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
    t->err = connect_clients(clients, &addr);
    if (t->err != 0) {
        t->outcome = TRIAL_SETUP_FAILED;
        goto out;
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

void reuseport_bpf_drain_trial(migration_trial *t)
{
    struct sockaddr_in addr;
    int clients[TRIAL_CONNECTIONS];
    /* the two listeners, then the map and the program */
    int fds[4] = { -1, -1, -1, -1 }, i, err = 0;

    memset(t, 0, sizeof(*t));
    for (i = 0; i < TRIAL_CONNECTIONS; i++) {
        clients[i] = -1;
    }
    if (!reuseport_bpf_built()) {
        t->outcome = TRIAL_NO_BUILD;
        return;
    }
    t->err = trial_pair(&addr, fds);
    if (t->err != 0) {
        t->outcome = TRIAL_SETUP_FAILED;
        goto out;
    }
    /* The first listener is the one left out: only the second is in the
     * map the program selects from. */
    fds[2] = reuseport_bpf_sockarray_create(1, &err);
    if (fds[2] >= 0) {
        err = reuseport_bpf_sockarray_set(fds[2], 0, fds[1]);
        if (err == 0) {
            fds[3] = reuseport_bpf_hash_load(fds[2], 1, 0, &err);
        }
    }
    if (fds[3] < 0) {
        t->outcome = TRIAL_LOAD_REFUSED;
        t->err = err;
        goto out;
    }
    err = reuseport_bpf_attach(fds[0], fds[3]);
    if (err != 0) {
        t->outcome = TRIAL_ATTACH_REFUSED;
        t->err = err;
        goto out;
    }
    t->err = connect_clients(clients, &addr);
    if (t->err != 0) {
        t->outcome = TRIAL_SETUP_FAILED;
        goto out;
    }
    t->queued = TRIAL_CONNECTIONS;
    t->moved = wait_queued(fds[1], TRIAL_CONNECTIONS);
    if (reuseport_bpf_queued(fds[0]) != 0 || t->moved < 0) {
        t->moved = 0;
    }
    t->outcome = TRIAL_DONE;
out:
    close_all(fds, 4);
    close_all(clients, TRIAL_CONNECTIONS);
}

int reuseport_bpf_steering_trial(steering_e mode, const char **step)
{
    struct sockaddr_in addr;
    int fds[2] = { -1, -1 }, map = -1, idle = -1, prog = -1, err = 0, i;

    *step = "the trial sockets";
    err = trial_pair(&addr, fds);
    if (err != 0) {
        goto out;
    }
    *step = "BPF_MAP_CREATE of a REUSEPORT_SOCKARRAY";
    map = reuseport_bpf_sockarray_create(2, &err);
    if (map < 0) {
        goto out;
    }
    *step = "BPF_MAP_UPDATE_ELEM with a listening socket";
    for (i = 0; i < 2; i++) {
        err = reuseport_bpf_sockarray_set(map, i, fds[i]);
        if (err != 0) {
            goto out;
        }
    }
    *step = "BPF_PROG_LOAD of an SK_REUSEPORT program";
    if (mode == STEERING_LOAD) {
        *step = "BPF_MAP_CREATE of an array";
        idle = reuseport_bpf_idle_map_create(2, &err);
        if (idle < 0) {
            goto out;
        }
        *step = "BPF_PROG_LOAD of an SK_REUSEPORT program";
        prog = reuseport_bpf_load_load(map, idle, 2, 0, &err);
    }
    else {
        prog = reuseport_bpf_cpu_load(map, 2, 0, &err);
    }
    if (prog < 0) {
        goto out;
    }
    *step = "setsockopt(SO_ATTACH_REUSEPORT_EBPF)";
    err = reuseport_bpf_attach(fds[0], prog);
out:
    if (prog >= 0) {
        close(prog);
    }
    if (idle >= 0) {
        close(idle);
    }
    if (map >= 0) {
        close(map);
    }
    close_all(fds, 2);
    return err;
}

#else /* !__linux__: the trials use Linux's TCP_INFO and accept4() */

void reuseport_bpf_migration_trial(migration_trial *t, int use_program)
{
    (void)use_program;
    memset(t, 0, sizeof(*t));
    t->outcome = TRIAL_SETUP_FAILED;
    t->err = ENOSYS;
}

int reuseport_bpf_queued(int listener)
{
    (void)listener;
    return -1;
}

void reuseport_bpf_drain_trial(migration_trial *t)
{
    memset(t, 0, sizeof(*t));
    t->outcome = TRIAL_SETUP_FAILED;
    t->err = ENOSYS;
}

int reuseport_bpf_steering_trial(steering_e mode, const char **step)
{
    (void)mode;
    *step = "the trial (Linux only)";
    return ENOSYS;
}

#endif /* __linux__ */

migration_choice reuseport_bpf_choose_migration(apr_pool_t *p, int reuseport,
                                                int sysctl)
{
    migration_trial with_program, without_program, drain;

    memset(&with_program, 0, sizeof(with_program));
    memset(&without_program, 0, sizeof(without_program));
    memset(&drain, 0, sizeof(drain));
    if (reuseport) {
        reuseport_bpf_migration_trial(&with_program, 1);
        if (sysctl == 1 && with_program.outcome != TRIAL_DONE) {
            reuseport_bpf_migration_trial(&without_program, 0);
        }
        reuseport_bpf_drain_trial(&drain);
    }
    return migration_choose(p, &with_program, &without_program, &drain,
                            sysctl);
}
