/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_steering.c: the eBPF side of the buckets' sockets: each reuseport
 * group's program (the hash's migration, or BucketSteering cpu or load),
 * the socket maps they steer with (retained across restarts, so a group
 * is never without a working map), the map of idle counts the parent
 * publishes for BucketSteering load, and what a child keeps of them.
 * listen_sockets.c opens the sockets and calls in here; nothing here
 * calls back.
 */
#include "listen_steering.h"

#include <errno.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

#include "apr_strings.h"

#include "httpd.h"
#include "http_log.h"
#include "http_main.h"

#include "bucketed.h"
#include "sys_bpf.h"
#include "sys_trial.h"
#include "listen_sockets.h"
#include "listen_steer_slots.h"

APLOG_USE_MODULE(mpm_bucketed);

/* Slots of a new socket map: room for the bucket counts restarts usually
 * move between, so that the map is rarely replaced. */
#define STEER_MAP_MIN_SLOTS 64
int listen_socket_fd(apr_socket_t *sd)
{
    apr_os_sock_t fd = -1;

    apr_os_sock_get(&fd, sd);
    return fd;
}

int listen_socket_leave_group(apr_socket_t *sd)
{
    if (shutdown(listen_socket_fd(sd), SHUT_RD) < 0 && errno != ENOTCONN) {
        return errno;
    }
    return 0;
}

static void close_program(server_rec *s, int prog)
{
    if (close(prog) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00071)
                                                        "bucketed: "
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

    if (getsockopt(listen_socket_fd(lr->sd), SOL_SOCKET, SO_REUSEPORT, &on,
                   &len) < 0) {
        return 0;
    }
    return on;
}

/* The retained map record of the address named key ("%pI"), or NULL. */
static retained_map *steer_map_found(bucketed_retained *retained,
                                     const char *key)
{
    retained_map *rm;

    for (rm = retained->steer_maps; rm; rm = rm->next) {
        if (strcmp(rm->key, key) == 0) {
            return rm;
        }
    }
    return NULL;
}

/* The retained map record of an address, created empty if new. */
static retained_map *steer_map_of(apr_pool_t *ptemp,
                                  bucketed_retained *retained,
                                  const ap_listen_rec *orig)
{
    const char *key = apr_psprintf(ptemp, "%pI", orig->bind_addr);
    retained_map *rm = steer_map_found(retained, key);

    if (rm != NULL) {
        return rm;
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
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00072)
                                                        "bucketed: "
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
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00073)
                                                            "bucketed: "
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
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00074)
                                                    "bucketed: cannot create "
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
 * it is too small. Sockets found in a map another program keeps are
 * listed in *held, for steer_slots_place_when_freed(). 0, or -1 after logging. */
static int fill_steer_map(apr_pool_t *ptemp, server_rec *s,
                          const bucketed_config *conf,
                          bucketed_retained *retained,
                          ap_listen_rec **originals, int i, int copies,
                          retained_map **out, held_elsewhere **held)
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
            ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00075)
                                                        "bucketed: cannot "
                         "create the socket map for %pI",
                         originals[i]->bind_addr);
            return -1;
        }
        rm->entries = entries;
    }
    for (b = 0; b < plan->num_buckets; b++) {
        const ap_listen_rec *lr = retained->generation->buckets[b].listeners;

        for (k = 0; k < plan->buckets[b].num_sockets && lr;
             k++, lr = lr->next) {
            const bucket_socket *bs = &plan->buckets[b].sockets[k];

            if (bs->listener != i) {
                continue;
            }
            switch (steer_slot_place(rm, bs->duplicate,
                                  listen_socket_fd(lr->sd), &err)) {
            case STEER_SLOT_PLACED:
                break;
            case STEER_SLOT_HELD_ELSEWHERE: {
                held_elsewhere *h = apr_palloc(ptemp, sizeof(*h));

                h->slot = bs->duplicate;
                h->fd = listen_socket_fd(lr->sd);
                h->next = *held;
                *held = h;
                break;
            }
            case STEER_SLOT_FAILED:
            default:
                ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00076)
                             "bucketed: cannot put bucket %d's socket for "
                             "%pI in its socket map", b,
                             originals[i]->bind_addr);
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
 * program's descriptor, or -1 after logging, with why in *why; *map is
 * the map, *held its sockets to place once the program is attached. */
static int load_steering_program(apr_pool_t *ptemp, server_rec *s,
                                 const bucketed_config *conf,
                                 bucketed_retained *retained,
                                 ap_listen_rec **originals, int i,
                                 const char **why, retained_map **map,
                                 held_elsewhere **held)
{
    int copies = planned_copies(&conf->plan, i);
    int migrate = conf->migration.mechanism == MIGRATION_EBPF;
    retained_map *rm;
    int err, prog;

    *why = "its socket map could not be made";
    *held = NULL;
    if (fill_steer_map(ptemp, s, conf, retained, originals, i, copies,
                       &rm, held) != 0) {
        return -1;
    }
    *map = rm;
    switch (conf->steering.mode) {
    case STEERING_LOAD:
        if (open_idle_map(s, conf, retained) != 0) {
            *why = "the map of idle counts could not be made";
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
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00077)
                                                    "bucketed: cannot load "
                     "the %s steering program for %pI",
                     steering_name(conf->steering.mode),
                     originals[i]->bind_addr);
        *why = apr_psprintf(ptemp, "BPF_PROG_LOAD: %s", strerror(err));
    }
    return prog;
}

/* A group the chosen steering program (cpu or load) does not steer: the
 * first such failure is kept, in words, in the generation's outcome. */
static void note_unsteered(apr_pool_t *pconf, steering_outcome *o,
                           const ap_listen_rec *orig, const char *why)
{
    if (o->failure == NULL) {
        o->failure = apr_psprintf(pconf, "%pI: %s", orig->bind_addr, why);
    }
    o->failed++;
}

/* The socket maps of addresses no longer listened on, closed and taken
 * off the list: a socket of a dropped address is never drained
 * (plan_socket_action), so nothing of this generation uses them. Emptied
 * first: a socket that a socket unit goes on holding for the address is
 * then free to go into a new map should the address come back (its group
 * keeps the old program, and with it the map, until then). */
static void release_dropped_maps(apr_pool_t *ptemp, server_rec *s,
                                 bucketed_retained *retained,
                                 ap_listen_rec **originals,
                                 int num_listeners)
{
    retained_map **link = &retained->steer_maps;

    while (*link) {
        retained_map *rm = *link;
        int i;

        for (i = 0; i < num_listeners; i++) {
            if (strcmp(rm->key, apr_psprintf(ptemp, "%pI",
                                             originals[i]->bind_addr)) == 0) {
                break;
            }
        }
        if (i < num_listeners) {
            link = &rm->next;
            continue;
        }
        if (rm->fd >= 0) {
            close_steer_map(s, rm);
        }
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, BKLOGNO(00252)
                     "bucketed: socket map of %s released: its address is "
                     "no longer listened on", rm->key);
        *link = rm->next;
    }
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
void listen_steering_attach(apr_pool_t *ptemp, server_rec *s,
                            bucketed_config *conf,
                            bucketed_retained *retained,
                            ap_listen_rec **originals, int num_listeners,
                            int *group_migrates, int *group_drains)
{
    bucket_generation *gen = retained->generation;
    int ebpf = conf->migration.mechanism == MIGRATION_EBPF;
    int drain = conf->migration.mechanism == MIGRATION_DRAIN;
    int steers = conf->steering.mode == STEERING_CPU
                 || conf->steering.mode == STEERING_LOAD;
    int i, prog, mig = -1, mig_failed = 0, err;

    gen->migration_prog_id = 0;
    gen->migration_groups = 0;
    memset(&gen->steering, 0, sizeof(gen->steering));
    release_idle_map(s, retained);
    for (i = 0; i < num_listeners; i++) {
        const char *why = NULL;
        held_elsewhere *held = NULL;
        retained_map *rm = NULL;

        group_migrates[i] = conf->migration.mechanism == MIGRATION_SYSCTL;
        group_drains[i] = 0;
        if (!(ebpf || drain || steers)
            || !in_reuseport_group(originals[i])) {
            continue;
        }
        prog = load_steering_program(ptemp, s, conf, retained, originals, i,
                                     &why, &rm, &held);
        if (prog < 0 && steers) {
            note_unsteered(ptemp, &gen->steering, originals[i], why);
        }
        if (prog < 0 && ebpf) {
            /* One migration program serves every group whose steering
             * program failed, so that the group still migrates. */
            if (mig < 0 && !mig_failed) {
                mig = reuseport_bpf_migrate_load(&err);
                if (mig < 0) {
                    mig_failed = 1;
                    ap_log_error(APLOG_MARK, APLOG_WARNING, err, s,
                                 BKLOGNO(00078)
                                 "bucketed: cannot load the migration "
                                 "program");
                }
            }
            prog = mig;
        }
        if (prog < 0) {
            continue;
        }
        if (gen->migration_prog_id == 0) {
            gen->migration_prog_id = reuseport_bpf_prog_id(prog);
        }
        err = reuseport_bpf_attach(listen_socket_fd(originals[i]->sd), prog);
        if (err != 0) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00079)
                                                            "bucketed: "
                         "cannot attach the %s program to the reuseport "
                         "group of %pI", prog == mig ? "migration"
                         : "steering", originals[i]->bind_addr);
            if (prog != mig && steers) {
                note_unsteered(ptemp, &gen->steering, originals[i],
                               apr_psprintf(ptemp, "setsockopt("
                                            "SO_ATTACH_REUSEPORT_EBPF): %s",
                                            strerror(err)));
            }
        }
        else {
            group_migrates[i] = group_migrates[i] || ebpf;
            group_drains[i] = drain;
            gen->migration_groups++;
            gen->steering.steered += prog != mig && steers;
            if (prog != mig) {
                steer_slots_place_when_freed(s, rm, held);
            }
        }
        if (prog != mig) {
            close_program(s, prog);
        }
    }
    if (mig >= 0) {
        close_program(s, mig);
    }
    release_dropped_maps(ptemp, s, retained, originals, num_listeners);
}

/*
 * Why at a stop: the duplicates close one by one as the children holding
 * them leave, and each close migrates its queue with the generation's
 * program, which picks among the group's sockets still listening: other
 * duplicates, about to close themselves. A connection migrated onto a
 * duplicate that is closing at that very moment (on the other CPU), or
 * whose handshake completes on one as it closes, is reset by the kernel
 * (inet_csk_reqsk_queue_add() finds it no longer listening). The original
 * is the one socket of the group that does not close (a socket unit holds
 * it), so from here on every pick goes to it: slot 0 of the address's map,
 * by the hash program over one slot. Where the kernel cannot migrate but
 * a program can steer (MIGRATION_DRAIN, 4.19-5.13), the same program
 * without migration keeps new connections off the duplicates, so that
 * the children can empty them before they close (graceful_stop()).
 */
int listen_steering_stop(server_rec *s, const bucketed_config *conf,
                         bucketed_retained *retained)
{
    ap_listen_rec *lr;
    int migrate = conf->migration.mechanism == MIGRATION_EBPF, n = 0;

    if (!migrate && conf->migration.mechanism != MIGRATION_DRAIN) {
        return 0;
    }
    for (lr = ap_listeners; lr; lr = lr->next) {
        char key[128];
        retained_map *rm;
        int prog, err;

        if (lr->sd == NULL || !in_reuseport_group(lr)) {
            continue;
        }
        apr_snprintf(key, sizeof(key), "%pI", lr->bind_addr);
        rm = steer_map_found(retained, key);
        if (rm == NULL || rm->fd < 0) {
            continue;
        }
        prog = reuseport_bpf_hash_load(rm->fd, 1, migrate, &err);
        if (prog < 0) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00144)
                         "bucketed: cannot load the stop program for %s",
                         key);
            continue;
        }
        err = reuseport_bpf_attach(listen_socket_fd(lr->sd), prog);
        if (err != 0) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00145)
                         "bucketed: cannot attach the stop program to the "
                         "reuseport group of %s", key);
        }
        else {
            n++;
        }
        close_program(s, prog);
    }
    ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, BKLOGNO(00146)
                 "bucketed: stopping: %d reuseport group(s) now send "
                 "everything to their original socket", n);
    return n;
}

void listen_steering_release(bucketed_retained *retained)
{
    retained_map *rm;

    for (rm = retained->steer_maps; rm; rm = rm->next) {
        if (rm->fd >= 0) {
            reuseport_bpf_sockarray_clear(rm->fd, rm->entries);
        }
    }
}

const char *bucket_listeners_choose_steering(apr_pool_t *p,
                                             bucketed_config *conf,
                                             int online_cpus)
{
    bucket_generation *gen = bucket_generation_get(
        p, &bucketed_get_retained()->generation);
    steering_input in;

    /* auto tries load, and falls back to the hash if the kernel refuses;
     * only where there is something to steer. */
    if (conf->steering_requested != STEERING_HASH
        && conf->plan.num_duplicates > 0 && !gen->steer_trial_done) {
        gen->steer_trial_err = reuseport_bpf_steering_trial(
            conf->steering_requested == STEERING_CPU ? STEERING_CPU
                                                     : STEERING_LOAD,
            &gen->steer_trial_step);
        gen->steer_trial_done = 1;
    }
    in.requested = conf->steering_requested;
    in.reuseport_groups = conf->plan.num_duplicates > 0;
    in.num_buckets = conf->plan.num_buckets;
    in.online_cpus = online_cpus;
    in.trial_err = gen->steer_trial_err;
    in.trial_step = gen->steer_trial_step;
    return steering_choose(p, &in, &conf->steering);
}

int bucket_listeners_steer_to_idle(const bucketed_config *conf,
                                   const bucketed_retained *retained)
{
    const steering_outcome *o = &retained->generation->steering;

    return conf->steering.mode == STEERING_LOAD && retained->idle_map_open
           && o->steered > 0 && o->failed == 0;
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
        err = reuseport_bpf_idle_set(
            retained->idle_map_fd, b,
            (unsigned int)bucket_census_unclaimed(&census[b]),
            (unsigned int)bucket_census_steerable(&census[b]));
        if (err != 0 && !retained->generation->idle_publish_warned) {
            retained->generation->idle_publish_warned = 1;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, ap_server_conf,
                         BKLOGNO(00080)
                         "bucketed: cannot write bucket %d's idle count for "
                         "BucketSteering load", b);
        }
    }
}

void bucket_listeners_child_close_maps(bucketed_retained *retained)
{
    retained_map *rm;

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
}

int listen_steering_put_back(server_rec *s, bucketed_retained *retained,
                             int b, int slot, const ap_listen_rec *lr)
{
    char key[128];
    retained_map *rm;
    int err;

    apr_snprintf(key, sizeof(key), "%pI", lr->bind_addr);
    rm = steer_map_found(retained, key);
    if (rm == NULL || rm->fd < 0) {
        return 0;
    }
    /* The kernel emptied its slot when it left the group; EBUSY with the
     * slot holding it: it never left. */
    if (steer_slot_place(rm, slot, listen_socket_fd(lr->sd), &err)
            != STEER_SLOT_PLACED) {
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00184)
                                                    "bucketed: cannot put "
                     "bucket %d's socket for %pI back in its socket map; "
                     "the kernel's hash picks it meanwhile",
                     b, lr->bind_addr);
        return -1;
    }
    return 0;
}
