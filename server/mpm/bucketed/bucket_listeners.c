/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucket_listeners.c: the sockets of each bucket. Core opens one socket
 * per Listen address (ap_listeners); a plan that gives an address several
 * buckets needs SO_REUSEPORT duplicates of that socket, opened here with
 * the same options, and kept in retained memory so that the next
 * generation reuses them instead of resetting what waits in their queues.
 *
 * Every socket ends up in exactly one bucket, so its blocking mode can be
 * chosen per bucket: blocking for a bucket's only socket (children sleep
 * in accept()), non-blocking when a bucket waits on several. A socket being
 * drained (steering.h, MIGRATION_DRAIN) is appended to one bucket's list
 * after its planned ones.
 */
#include <errno.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apr_strings.h"

#include "httpd.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"
#include "util_mutex.h"

#include "bucketed.h"
#include "reuseport_bpf.h"

APLOG_USE_MODULE(mpm_bucketed);

/* Slots of a new socket map: room for the bucket counts restarts usually
 * move between, so that the map is rarely replaced. */
#define STEER_MAP_MIN_SLOTS 64

/* Integer options a duplicate copies from its original. SO_REUSEPORT is
 * set separately (it must be on); buffer sizes come from configuration,
 * since reading them back would pin the kernel's auto-tuned values. */
static const struct {
    int level;
    int name;
    const char *label;
    int inet6_only;
} cloned_options[] = {
    { SOL_SOCKET,   SO_REUSEADDR,     "SO_REUSEADDR",     0 },
    { SOL_SOCKET,   SO_KEEPALIVE,     "SO_KEEPALIVE",     0 },
    { IPPROTO_TCP,  TCP_NODELAY,      "TCP_NODELAY",      0 },
    { IPPROTO_TCP,  TCP_DEFER_ACCEPT, "TCP_DEFER_ACCEPT", 0 },
    { IPPROTO_IPV6, IPV6_V6ONLY,      "IPV6_V6ONLY",      1 },
};

static int os_fd(apr_socket_t *sd)
{
    apr_os_sock_t fd = -1;

    apr_os_sock_get(&fd, sd);
    return fd;
}

static apr_status_t set_reuseport(server_rec *s, const ap_listen_rec *lr,
                                  apr_socket_t *sd)
{
    int on = 1;

    if (setsockopt(os_fd(sd), SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) < 0) {
        apr_status_t rv = errno;
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: setsockopt(SO_REUSEPORT) for %pI",
                     lr->bind_addr);
        return rv;
    }
    return APR_SUCCESS;
}

static apr_status_t clone_options(server_rec *s, const ap_listen_rec *orig,
                                  apr_socket_t *dup)
{
    int from = os_fd(orig->sd), to = os_fd(dup);
    apr_size_t i;

    for (i = 0; i < sizeof(cloned_options) / sizeof(cloned_options[0]); i++) {
        int value = 0;
        socklen_t len = sizeof(value);

        if (cloned_options[i].inet6_only
            && orig->bind_addr->family != APR_INET6) {
            continue;
        }
        if (getsockopt(from, cloned_options[i].level, cloned_options[i].name,
                       &value, &len) < 0) {
            apr_status_t rv = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         "bucketed: getsockopt(%s) on %pI",
                         cloned_options[i].label, orig->bind_addr);
            return rv;
        }
        if (setsockopt(to, cloned_options[i].level, cloned_options[i].name,
                       &value, sizeof(value)) < 0) {
            apr_status_t rv = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         "bucketed: setsockopt(%s, %d) on a duplicate of %pI",
                         cloned_options[i].label, value, orig->bind_addr);
            return rv;
        }
    }
    return APR_SUCCESS;
}

/* Not fatal, as for core's own sockets: the kernel default still works. */
static void set_buffer_sizes(server_rec *s, const bucketed_config *conf,
                             const ap_listen_rec *orig, apr_socket_t *dup)
{
    apr_status_t rv;

    if (conf->send_buffer_size) {
        rv = apr_socket_opt_set(dup, APR_SO_SNDBUF, conf->send_buffer_size);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, "bucketed: cannot "
                         "set SendBufferSize on a duplicate of %pI",
                         orig->bind_addr);
        }
    }
    if (conf->receive_buffer_size) {
        rv = apr_socket_opt_set(dup, APR_SO_RCVBUF, conf->receive_buffer_size);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, "bucketed: cannot "
                         "set ReceiveBufferSize on a duplicate of %pI",
                         orig->bind_addr);
        }
    }
}

static apr_socket_t *open_duplicate(apr_pool_t *pool, server_rec *s,
                                    const bucketed_config *conf,
                                    const ap_listen_rec *orig)
{
    apr_socket_t *dup;
    apr_status_t rv;

    rv = apr_socket_create(&dup, orig->bind_addr->family, SOCK_STREAM,
                           APR_PROTO_TCP, pool);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot create a duplicate socket for %pI",
                     orig->bind_addr);
        return NULL;
    }
    set_buffer_sizes(s, conf, orig, dup);
    if (clone_options(s, orig, dup) != APR_SUCCESS
        || set_reuseport(s, orig, dup) != APR_SUCCESS) {
        apr_socket_close(dup);
        return NULL;
    }
    rv = apr_socket_bind(dup, orig->bind_addr);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot bind a duplicate socket to %pI "
                     "with SO_REUSEPORT (is another process bound there?)",
                     orig->bind_addr);
        apr_socket_close(dup);
        return NULL;
    }
    rv = apr_socket_listen(dup, conf->listen_backlog);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: listen() on a duplicate socket for %pI",
                     orig->bind_addr);
        apr_socket_close(dup);
        return NULL;
    }
    return dup;
}

/* The duplicate_th copy of orig: reused from the last generation when it
 * exists, opened otherwise. */
static apr_socket_t *get_duplicate(apr_pool_t *ptemp, server_rec *s,
                                   const bucketed_config *conf,
                                   bucketed_retained *retained,
                                   const ap_listen_rec *orig, int duplicate)
{
    const char *key = apr_psprintf(ptemp, "%pI#%d", orig->bind_addr,
                                   duplicate);
    retained_socket *rs;
    apr_socket_t *sd;

    for (rs = retained->sockets; rs; rs = rs->next) {
        if (strcmp(rs->key, key) == 0) {
            rs->in_use = 1;
            rs->drained_generations = 0;
            return rs->sd;
        }
    }
    sd = open_duplicate(retained->socket_pool, s, conf, orig);
    if (sd == NULL) {
        return NULL;
    }
    /* Only a socket that opened gets a record: a failure at every restart
     * would otherwise grow the long-lived pool. */
    rs = apr_pcalloc(retained->socket_pool, sizeof(*rs));
    rs->sd = sd;
    rs->key = apr_pstrdup(retained->socket_pool, key);
    rs->duplicate = duplicate;
    rs->in_use = 1;
    rs->next = retained->sockets;
    retained->sockets = rs;
    return rs->sd;
}

/* The listener (index into originals) whose duplicate rs is, or -1 when
 * its address is no longer listened on. */
static int listener_of(apr_pool_t *ptemp, const retained_socket *rs,
                       ap_listen_rec **originals, int num_listeners)
{
    int i;

    for (i = 0; i < num_listeners; i++) {
        const char *prefix = apr_psprintf(ptemp, "%pI#",
                                          originals[i]->bind_addr);
        if (strncmp(rs->key, prefix, strlen(prefix)) == 0) {
            return i;
        }
    }
    return -1;
}

/* Appends a socket being drained to bucket b's list: it is accepted from
 * like the bucket's own, and no steering map holds it. */
static void adopt_draining(apr_pool_t *pconf, bucketed_config *conf, int b,
                           const ap_listen_rec *orig, apr_socket_t *sd)
{
    ap_listen_rec **tail = &conf->bucket_listeners[b];
    ap_listen_rec *mine = apr_pmemdup(pconf, orig, sizeof(*orig));

    while (*tail) {
        tail = &(*tail)->next;
    }
    mine->sd = sd;
    mine->next = NULL;
    *tail = mine;
}

/* Duplicates the new plan does not use: steering.c decides whether each
 * is drained (kept one more generation, out of the steering maps) or
 * closed; this says so and does it. Children of the old generation keep
 * their own descriptors until they leave: a closed socket really closes,
 * and its queue migrates or is reset, with the last one. */
static void settle_unused_duplicates(apr_pool_t *pconf, server_rec *s,
                                     bucketed_config *conf,
                                     bucketed_retained *retained,
                                     ap_listen_rec **originals,
                                     int num_listeners,
                                     const int *group_migrates,
                                     const int *group_drains)
{
    retained_socket **link = &retained->sockets;

    while (*link) {
        retained_socket *rs = *link;
        plan_socket_state st;
        int listener;

        if (rs->in_use) {
            link = &rs->next;
            continue;
        }
        listener = listener_of(pconf, rs, originals, num_listeners);
        st.in_new_plan = 0;
        st.group_stays = listener >= 0;
        st.group_migrates = listener >= 0 && group_migrates[listener];
        st.group_drains = listener >= 0 && group_drains[listener];
        st.drained_generations = rs->drained_generations;
        st.queued = reuseport_bpf_queued(os_fd(rs->sd));
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "bucketed: %s",
                     plan_socket_describe(pconf, &st, rs->key,
                                          conf->migration.reason));
        if (plan_socket_action(&st) == PLAN_SOCKET_DRAIN) {
            adopt_draining(pconf, conf,
                           rs->duplicate % conf->plan.num_buckets,
                           originals[listener], rs->sd);
            rs->in_use = 1;
            rs->drained_generations++;
            link = &rs->next;
            continue;
        }
        apr_socket_close(rs->sd);
        *link = rs->next;
    }
}

static void close_program(server_rec *s, int prog)
{
    if (close(prog) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: "
                     "close() of a reuseport program's descriptor");
    }
}

/* Whether the original socket has SO_REUSEPORT on, i.e. is in a reuseport
 * group (bucketed sets it only on originals it duplicates; the setting
 * outlives generations with the socket). */
static int in_reuseport_group(const ap_listen_rec *lr)
{
    int on = 0;
    socklen_t len = sizeof(on);

    if (getsockopt(os_fd(lr->sd), SOL_SOCKET, SO_REUSEPORT, &on, &len) < 0) {
        return 0;
    }
    return on;
}

/* The retained map record of an address, created empty if new. */
static retained_map *steer_map_of(apr_pool_t *ptemp,
                                  bucketed_retained *retained,
                                  const ap_listen_rec *orig)
{
    const char *key = apr_psprintf(ptemp, "%pI", orig->bind_addr);
    retained_map *rm;

    for (rm = retained->steer_maps; rm; rm = rm->next) {
        if (strcmp(rm->key, key) == 0) {
            return rm;
        }
    }
    rm = apr_pcalloc(retained->socket_pool, sizeof(*rm));
    rm->key = apr_pstrdup(retained->socket_pool, key);
    rm->fd = -1;
    rm->next = retained->steer_maps;
    retained->steer_maps = rm;
    return rm;
}

static void close_steer_map(server_rec *s, retained_map *rm)
{
    reuseport_bpf_sockarray_clear(rm->fd, rm->entries);
    if (close(rm->fd) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: "
                     "close() of the socket map of %s", rm->key);
    }
    rm->fd = -1;
    rm->entries = 0;
}

/* Closes the last generation's array of idle counts (its size is the
 * bucket count; the socket maps stay). */
static void release_idle_map(server_rec *s, bucketed_retained *retained)
{
    if (retained->idle_map_open) {
        if (close(retained->idle_map_fd) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: "
                         "close() of the idle count map");
        }
        retained->idle_map_open = 0;
    }
}

/* BucketSteering load: one array of idle counts for every group, written
 * by the parent after each census. 0, or -1 after logging. */
static int open_idle_map(server_rec *s, const bucketed_config *conf,
                         bucketed_retained *retained)
{
    int err, fd;

    if (retained->idle_map_open) {
        return 0;
    }
    fd = reuseport_bpf_idle_map_create(conf->plan.num_buckets, &err);
    if (fd < 0) {
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, "bucketed: cannot create "
                     "the map of idle counts");
        return -1;
    }
    retained->idle_map_fd = fd;
    retained->idle_map_open = 1;
    return 0;
}

/* The sockets the plan gives listener i: one per bucket under the
 * reuseport strategy (bucket b's is its b-th socket), just the original
 * otherwise. */
static int planned_copies(const bucket_plan *plan, int i)
{
    int b, k, n = 0;

    for (b = 0; b < plan->num_buckets; b++) {
        for (k = 0; k < plan->buckets[b].num_sockets; k++) {
            n += plan->buckets[b].sockets[k].listener == i;
        }
    }
    return n;
}

/* Puts listener i's planned sockets in its retained map, each in the slot
 * of its duplicate ordinal; creates the map first when there is none or
 * it is too small. 0, or -1 after logging. */
static int fill_steer_map(apr_pool_t *ptemp, server_rec *s,
                          const bucketed_config *conf,
                          bucketed_retained *retained,
                          ap_listen_rec **originals, int i, int copies,
                          retained_map **out)
{
    const bucket_plan *plan = &conf->plan;
    retained_map *rm = steer_map_of(ptemp, retained, originals[i]);
    int b, k, err;

    if (rm->fd >= 0 && rm->entries < copies) {
        /* More copies than the map has slots: a new map, and the short
         * window the retained map exists to avoid. */
        close_steer_map(s, rm);
    }
    if (rm->fd < 0) {
        int entries = copies > STEER_MAP_MIN_SLOTS ? copies
                                                   : STEER_MAP_MIN_SLOTS;

        rm->fd = reuseport_bpf_sockarray_create(entries, &err);
        if (rm->fd < 0) {
            ap_log_error(APLOG_MARK, APLOG_ERR, err, s, "bucketed: cannot "
                         "create the socket map for %pI",
                         originals[i]->bind_addr);
            return -1;
        }
        rm->entries = entries;
    }
    for (b = 0; b < plan->num_buckets; b++) {
        const ap_listen_rec *lr = conf->bucket_listeners[b];

        for (k = 0; k < plan->buckets[b].num_sockets && lr;
             k++, lr = lr->next) {
            const bucket_socket *bs = &plan->buckets[b].sockets[k];

            if (bs->listener != i) {
                continue;
            }
            /* EBUSY: the socket is in the map already, so in this very
             * slot (a socket only ever goes to its ordinal's). */
            err = reuseport_bpf_sockarray_set(rm->fd, bs->duplicate,
                                              os_fd(lr->sd));
            if (err != 0 && err != EBUSY) {
                ap_log_error(APLOG_MARK, APLOG_ERR, err, s, "bucketed: "
                             "cannot put bucket %d's socket for %pI in its "
                             "socket map", b, originals[i]->bind_addr);
                return -1;
            }
        }
    }
    *out = rm;
    return 0;
}

/* The steering program (hash, CPU or load) of listener i's group over its
 * retained map: it selects among the first `copies` slots, so a socket
 * beyond them (one being drained or closed) gets nothing new. Returns the
 * program's descriptor, or -1 after logging why. */
static int load_steering_program(apr_pool_t *ptemp, server_rec *s,
                                 const bucketed_config *conf,
                                 bucketed_retained *retained,
                                 ap_listen_rec **originals, int i)
{
    int copies = planned_copies(&conf->plan, i);
    int migrate = conf->migration.mechanism == MIGRATION_EBPF;
    retained_map *rm;
    int err, prog;

    if (fill_steer_map(ptemp, s, conf, retained, originals, i, copies,
                       &rm) != 0) {
        return -1;
    }
    switch (conf->steering.mode) {
    case STEERING_LOAD:
        if (open_idle_map(s, conf, retained) != 0) {
            return -1;
        }
        prog = reuseport_bpf_load_load(rm->fd, retained->idle_map_fd,
                                       copies, migrate, &err);
        break;
    case STEERING_CPU:
        prog = reuseport_bpf_cpu_load(rm->fd, copies, migrate, &err);
        break;
    default:
        prog = reuseport_bpf_hash_load(rm->fd, copies, migrate, &err);
        break;
    }
    if (prog < 0) {
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, "bucketed: cannot load "
                     "the %s steering program for %pI",
                     steering_name(conf->steering.mode),
                     originals[i]->bind_addr);
    }
    return prog;
}

/* Puts this generation's program on every reuseport group, before any of
 * its sockets is closed: a steering program with a map of this
 * generation's sockets (the hash's, or BucketSteering cpu or load) where
 * the group migrates (it is then loaded to migrate too), drains, or is
 * steered; a group whose steering program fails gets the migration
 * program where the kernel migrates. group_migrates[i] and
 * group_drains[i] say what each group then does with a socket that goes.
 * Program descriptors are closed at once: each group holds its own
 * reference (so a program lives exactly as long as its group), and no
 * child inherits one. */
static void attach_programs(apr_pool_t *ptemp, server_rec *s,
                            bucketed_config *conf,
                            bucketed_retained *retained,
                            ap_listen_rec **originals, int num_listeners,
                            int *group_migrates, int *group_drains)
{
    int ebpf = conf->migration.mechanism == MIGRATION_EBPF;
    int drain = conf->migration.mechanism == MIGRATION_DRAIN;
    int steer = ebpf || drain || conf->steering.mode == STEERING_CPU
                || conf->steering.mode == STEERING_LOAD;
    int i, prog, mig = -1, mig_failed = 0, err;

    conf->migration_prog_id = 0;
    conf->migration_groups = 0;
    release_idle_map(s, retained);
    for (i = 0; i < num_listeners; i++) {
        group_migrates[i] = conf->migration.mechanism == MIGRATION_SYSCTL;
        group_drains[i] = 0;
        if (!steer || !in_reuseport_group(originals[i])) {
            continue;
        }
        prog = load_steering_program(ptemp, s, conf, retained, originals, i);
        if (prog < 0 && ebpf) {
            /* One migration program serves every group whose steering
             * program failed, so that the group still migrates. */
            if (mig < 0 && !mig_failed) {
                mig = reuseport_bpf_migrate_load(&err);
                if (mig < 0) {
                    mig_failed = 1;
                    ap_log_error(APLOG_MARK, APLOG_WARNING, err, s,
                                 "bucketed: cannot load the migration "
                                 "program");
                }
            }
            prog = mig;
        }
        if (prog < 0) {
            continue;
        }
        if (conf->migration_prog_id == 0) {
            conf->migration_prog_id = reuseport_bpf_prog_id(prog);
        }
        err = reuseport_bpf_attach(os_fd(originals[i]->sd), prog);
        if (err != 0) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: "
                         "cannot attach the %s program to the reuseport "
                         "group of %pI", prog == mig ? "migration"
                         : "steering", originals[i]->bind_addr);
        }
        else {
            group_migrates[i] = group_migrates[i] || ebpf;
            group_drains[i] = drain;
            conf->migration_groups++;
        }
        if (prog != mig) {
            close_program(s, prog);
        }
    }
    if (mig >= 0) {
        close_program(s, mig);
    }
}

const char *bucket_listeners_choose_steering(apr_pool_t *p,
                                             bucketed_config *conf,
                                             int online_cpus)
{
    steering_input in;

    if ((conf->steering_requested == STEERING_CPU
         || conf->steering_requested == STEERING_LOAD)
        && !conf->steer_trial_done) {
        conf->steer_trial_err = reuseport_bpf_steering_trial(
            conf->steering_requested, &conf->steer_trial_step);
        conf->steer_trial_done = 1;
    }
    in.requested = conf->steering_requested;
    in.reuseport_groups = conf->plan.num_duplicates > 0;
    in.num_buckets = conf->plan.num_buckets;
    in.online_cpus = online_cpus;
    in.trial_err = conf->steer_trial_err;
    in.trial_step = conf->steer_trial_step;
    return steering_choose(p, &in, &conf->steering);
}

void bucket_listeners_publish_idle(bucketed_config *conf,
                                   bucketed_retained *retained,
                                   const bucket_census *census,
                                   int num_buckets)
{
    int b, err;

    if (conf->steering.mode != STEERING_LOAD || !retained->idle_map_open) {
        return;
    }
    for (b = 0; b < num_buckets && b < conf->plan.num_buckets; b++) {
        err = reuseport_bpf_idle_set(retained->idle_map_fd, b,
                                     census[b].idle > 0
                                         ? (unsigned int)census[b].idle : 0);
        if (err != 0 && !conf->idle_publish_warned) {
            conf->idle_publish_warned = 1;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, ap_server_conf,
                         "bucketed: cannot write bucket %d's idle count for "
                         "BucketSteering load", b);
        }
    }
}

void bucket_listeners_child_steering(server_rec *s,
                                     const bucketed_config *conf,
                                     bucketed_retained *retained, int bucket)
{
    retained_map *rm;
#ifdef __linux__
    cpu_set_t allowed, mine;
    int cpu;
#endif

    for (rm = retained->steer_maps; rm; rm = rm->next) {
        if (rm->fd >= 0) {
            close(rm->fd);
            rm->fd = -1;
        }
    }
    if (retained->idle_map_open) {
        close(retained->idle_map_fd);
        retained->idle_map_open = 0;
    }
    if (conf->steering.mode != STEERING_CPU) {
        return;
    }
#ifdef __linux__
    if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: "
                     "sched_getaffinity in the child of bucket %d", bucket);
        return;
    }
    CPU_ZERO(&mine);
    for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &allowed)
            && steering_cpu_in_bucket(cpu, bucket, conf->plan.num_buckets)) {
            CPU_SET(cpu, &mine);
        }
    }
    if (CPU_COUNT(&mine) == 0) {
        return;     /* none of its CPUs allowed here: leave it free */
    }
    if (sched_setaffinity(0, sizeof(mine), &mine) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: "
                     "sched_setaffinity in the child of bucket %d", bucket);
    }
#else
    (void)s;
    (void)bucket;
#endif
}

void bucket_listeners_close_all(bucketed_retained *retained)
{
    retained_socket *rs;

    for (rs = retained->sockets; rs; rs = rs->next) {
        apr_socket_close(rs->sd);
    }
    retained->sockets = NULL;
}

/* close() of a retained descriptor in a helper process; 1 when it was
 * open. */
static int close_inherited(server_rec *s, int *fd, const char *what)
{
    if (*fd < 0) {
        return 0;
    }
    if (close(*fd) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: close() "
                     "of the inherited %s in pid %" APR_PID_T_FMT, what,
                     getpid());
    }
    *fd = -1;
    return 1;
}

int bucket_listeners_close_for_helper(server_rec *s,
                                      bucketed_retained *retained)
{
    retained_socket *rs;
    retained_map *rm;
    int b, n = 0;

    for (rs = retained->sockets; rs; rs = rs->next) {
        n++;
    }
    /* Through APR, which also drops each socket's pool cleanups: the
     * helper's exit must not close the numbers again. */
    bucket_listeners_close_all(retained);
    for (rm = retained->steer_maps; rm; rm = rm->next) {
        n += close_inherited(s, &rm->fd, "socket map");
        rm->entries = 0;
    }
    if (retained->idle_map_open) {
        n += close_inherited(s, &retained->idle_map_fd, "idle count map");
        retained->idle_map_open = 0;
    }
    if (retained->nudge != NULL) {
        for (b = 0; b < retained->first_server_limit; b++) {
            n += close_inherited(s, &retained->nudge[b], "bucket eventfd");
        }
    }
    return n;
}

static apr_status_t create_accept_mutex(apr_pool_t *pconf, server_rec *s,
                                        bucketed_config *conf, int bucket)
{
    apr_status_t rv;

    rv = ap_proc_mutex_create(&conf->accept_mutex[bucket], NULL,
                              AP_ACCEPT_MUTEX_TYPE,
                              apr_itoa(pconf, bucket), s, pconf, 0);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot create the accept mutex of bucket %d",
                     bucket);
        return rv;
    }
    rv = ap_unixd_set_proc_mutex_perms(conf->accept_mutex[bucket]);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot set permissions on the accept mutex "
                     "of bucket %d", bucket);
    }
    return rv;
}

int bucket_listeners_open(apr_pool_t *pconf, server_rec *s,
                          bucketed_config *conf, bucketed_retained *retained)
{
    const bucket_plan *plan = &conf->plan;
    ap_listen_rec **originals, *lr;
    int *duplicated, *group_migrates, *group_drains;
    int num_listeners = 0, b, k;
    retained_socket *rs;
    apr_status_t rv;

    for (lr = ap_listeners; lr; lr = lr->next) {
        num_listeners++;
    }
    originals = apr_palloc(pconf, sizeof(*originals) * num_listeners);
    duplicated = apr_pcalloc(pconf, sizeof(*duplicated) * num_listeners);
    group_migrates = apr_pcalloc(pconf,
                                 sizeof(*group_migrates) * num_listeners);
    group_drains = apr_pcalloc(pconf, sizeof(*group_drains) * num_listeners);
    num_listeners = 0;
    for (lr = ap_listeners; lr; lr = lr->next) {
        originals[num_listeners++] = lr;
    }
    if (retained->socket_pool == NULL) {
        rv = apr_pool_create(&retained->socket_pool, s->process->pool);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         "bucketed: apr_pool_create for the sockets");
            return !OK;
        }
        apr_pool_tag(retained->socket_pool, "bucketed_sockets");
    }
    for (rs = retained->sockets; rs; rs = rs->next) {
        rs->in_use = 0;
    }

    conf->bucket_listeners = apr_pcalloc(pconf, sizeof(ap_listen_rec *)
                                                * plan->num_buckets);
    conf->accept_mutex = apr_pcalloc(pconf, sizeof(apr_proc_mutex_t *)
                                            * plan->num_buckets);
    for (b = 0; b < plan->num_buckets; b++) {
        const bucket_def *def = &plan->buckets[b];
        ap_listen_rec **tail = &conf->bucket_listeners[b];

        for (k = 0; k < def->num_sockets; k++) {
            const bucket_socket *bs = &def->sockets[k];
            ap_listen_rec *orig = originals[bs->listener];
            ap_listen_rec *mine = apr_pmemdup(pconf, orig, sizeof(*orig));

            mine->next = NULL;
            if (bs->duplicate > 0) {
                if (!duplicated[bs->listener]) {
                    /* The original joins the group: Linux lets an already
                     * listening socket take SO_REUSEPORT, and then accepts
                     * duplicates bound beside it. */
                    if (set_reuseport(s, orig, orig->sd) != APR_SUCCESS) {
                        return !OK;
                    }
                    duplicated[bs->listener] = 1;
                }
                mine->sd = get_duplicate(pconf, s, conf, retained, orig,
                                         bs->duplicate);
                if (mine->sd == NULL) {
                    return !OK;
                }
            }
            *tail = mine;
            tail = &mine->next;
        }
    }
    attach_programs(pconf, s, conf, retained, originals, num_listeners,
                    group_migrates, group_drains);
    settle_unused_duplicates(pconf, s, conf, retained, originals,
                             num_listeners, group_migrates, group_drains);
    for (b = 0; b < plan->num_buckets; b++) {
        int count = bucket_listeners_count(conf, b);

        for (lr = conf->bucket_listeners[b]; lr; lr = lr->next) {
            /* Non-blocking where a child waits on several sockets, and
             * always in ChildModel event, whose workers accept after
             * epoll. */
            rv = apr_socket_opt_set(lr->sd, APR_SO_NONBLOCK,
                                    count > 1 || conf->child_model
                                                 == CHILD_MODEL_EVENT);
            if (rv != APR_SUCCESS) {
                ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                             "bucketed: cannot set the blocking mode of %pI",
                             lr->bind_addr);
                return !OK;
            }
        }
        if (bucket_wait_mode(count, conf->kernel.epoll_exclusive)
                == BUCKET_WAIT_MUTEX
            && create_accept_mutex(pconf, s, conf, b) != APR_SUCCESS) {
            return !OK;
        }
    }
    return OK;
}

int bucket_listeners_count(const bucketed_config *conf, int bucket)
{
    const ap_listen_rec *lr;
    int n = 0;

    for (lr = conf->bucket_listeners[bucket]; lr; lr = lr->next) {
        n++;
    }
    return n;
}

void bucket_listeners_keep_only(bucketed_config *conf, int bucket)
{
    int b;

    for (b = 0; b < conf->plan.num_buckets; b++) {
        ap_listen_rec *lr;

        if (b == bucket) {
            continue;
        }
        for (lr = conf->bucket_listeners[b]; lr; lr = lr->next) {
            apr_socket_close(lr->sd);
        }
    }
}
