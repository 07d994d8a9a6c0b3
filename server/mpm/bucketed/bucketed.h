/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucketed.h: what the bucketed MPM's plumbing files share. The pure
 * policy (bucket_plan, bucket_maint, directive_check, kernel_probe) has
 * headers of its own and knows nothing of this one.
 */
#ifndef BUCKETED_H
#define BUCKETED_H

#include <signal.h>

#include "apr_portable.h"
#include "apr_proc_mutex.h"
#include "apr_shm.h"

#include "httpd.h"
#include "http_config.h"
#include "ap_listen.h"
#include "ap_mpm.h"
#include "scoreboard.h"
#include "unixd.h"

#include "bucketed_log.h"
#include "bucket.h"

/* The policy types the configuration and retained data hold; a file
 * includes any other policy header it uses itself. */
#include "policy_plan.h"
#include "policy_directives.h"
#include "policy_event.h"
#include "policy_exit.h"
#include "policy_kernel.h"
#include "policy_affinity.h"
#include "policy_steering.h"

#define BUCKETED_MPM_NAME "bucketed"

/* Children are asked to leave gracefully with AP_SIG_GRACEFUL (SIGUSR1), and
 * at once with SIGTERM; the parent resends a graceful request this often
 * in case it arrived just before the child blocked in accept(). */
#define BUCKETED_EXIT_RESEND_SEC 2
/* A prefork-model child waiting for a keep-alive connection's next request
 * is asked with this one to close it for a client waiting in its bucket's
 * accept queue (prefork_keepalive.c). A realtime signal: httpd and the
 * modules it hosts (mod_php's timeouts, log rotation) use the classic
 * ones. The child keeps it blocked except in that wait. */
#define BUCKETED_SIG_GIVE_UP (SIGRTMIN + 2)
/* A ready child of a stalled bucket is asked with this one to look at the
 * bucket's sockets: it may have slept through its connection's wake-up,
 * which the kernel gave a sibling killed before it could run again
 * (child_accept.c). A prefork-model child keeps it blocked except in its
 * epoll wait; an event child's main thread takes it and wakes the
 * bucket's children (event_child.c). Realtime, as the one above: it
 * queues, so the parent sends it to a child once per stall at most. */
#define BUCKETED_SIG_LOOK (SIGRTMIN + 3)
/* How long a hard stop or restart waits for children before SIGKILL. */
#define BUCKETED_REAP_TIMEOUT_SEC 5

/* Directive values and the plan of one configuration generation: the main
 * server's module config, so a restart starts from fresh defaults. Only
 * configuration: what the generation builds and runs from it is in its
 * bucket_generation (bucket.h). */
typedef struct {
    process_limits configured;       /* as written; 0 = not set */
    process_limits limits;           /* effective, after checks */
    bucket_strategy_e strategy;      /* BucketStrategy */
    int bucket_count;                /* BucketCount; 0 = auto */
    steering_e steering_requested;   /* BucketSteering */
    affinity_e affinity_requested;   /* BucketAffinity */
    int cores_buckets_ratio;         /* ListenCoresBucketsRatio, or
                                      * BUCKET_RATIO_UNSET */
    int listen_backlog;              /* ListenBacklog, for the duplicates */
    int send_buffer_size;            /* SendBufferSize; 0 = system default */
    int receive_buffer_size;         /* ReceiveBufferSize */
    int one_process;                 /* -X / -DONE_PROCESS / -DDEBUG */
    child_model_e child_model;       /* ChildModel */
    thread_limits thread_configured; /* the event model's own directives as
                                      * written (ServerLimit, StartServers,
                                      * MaxRequestWorkers: in configured) */
    thread_limits threads;           /* ChildModel event: effective */
    int async_factor;                /* AsyncRequestWorkerFactor x 16 */
    const char *prefork_only_seen;   /* first directive of one model only */
    const char *event_only_seen;

    /* What the directives come to on this machine, decided at
     * check_config and again at open_logs. */
    kernel_features kernel;
    migration_choice migration;         /* what closing a socket does */
    steering_choice steering;           /* BucketSteering as chosen; what
                                         * is in force: the generation's
                                         * steering outcome */
    bucket_plan plan;
} bucketed_config;

/* What the parent knows of one scoreboard slot, in its own memory: a child
 * can scribble over the shared scoreboard, never over this. */
typedef struct {
    pid_t pid;                       /* 0 = free */
    int bucket;
    ap_generation_t generation;
    apr_time_t exit_requested;       /* 0 = not asked to leave */
    int replace_into;                /* when asked: the bucket of the slot's
                                      * next child, -1 = none */
    apr_uint64_t taken_over_start;   /* a child taken over from a build of
                                      * another layout: its start time,
                                      * checked before every signal and
                                      * count (parent_takeover.c); 0 = one
                                      * this parent forked */
} child_slot;

/* An SO_REUSEPORT duplicate listening socket, kept across restarts so that
 * a graceful restart resets nothing in its accept queue. */
typedef struct retained_socket retained_socket;
struct retained_socket {
    retained_socket *next;
    const char *key;                 /* address and duplicate ordinal */
    apr_socket_t *sd;
    int duplicate;                   /* its ordinal, k > 0 */
    int in_use;                      /* planned or draining in the current
                                      * generation */
    int drained_generations;         /* generations spent out of the
                                      * steering map, accepted from
                                      * (MIGRATION_DRAIN) */
    int retiring;                    /* out of the plan, still in its
                                      * group while old children accept
                                      * from it (PLAN_SOCKET_RETIRE) */
};

/* The socket map behind one address's steering program, kept across
 * generations: slot k always holds the address's k-th socket (bucket k's:
 * 0 the original, k the k-th duplicate), so a restart puts only new
 * sockets in and the group is never without a working map (a socket can
 * be in one such map only, so replacing the map would leave a window in
 * which the kernel's hash picks among every socket of the group, ones
 * being removed included). */
typedef struct retained_map retained_map;
struct retained_map {
    retained_map *next;
    const char *key;                 /* the address */
    int fd;
    int entries;
};

/* ChildModel event needs epoll and eventfd (Linux) and APR's threads;
 * without them its files build empty and ChildModel event is refused. */
#if defined(__linux__) && APR_HAS_THREADS
#define BUCKETED_HAS_EVENT_MODEL 1
#else
#define BUCKETED_HAS_EVENT_MODEL 0
#endif

struct event_child_ctx;
struct child_life;
struct takeover_candidate;

/* The layout of bucketed_retained and of everything it points to, and the
 * signals its children take: a new number for every change to either, so
 * that a graceful restart onto a build with another layout does not read
 * one as the other (bucketed_data.c, policy_upgrade.h), and signals only
 * children that take what it sends (7: only current prefork-model
 * children are sent BUCKETED_SIG_GIVE_UP; a layout-6 parent sends it to
 * leaving event children, which layout 7's would die of; 8: current
 * children take BUCKETED_SIG_LOOK, which layout 7's would die of).
 * Settable at build time only to build a second layout for the tests. */
#ifndef BUCKETED_RETAINED_LAYOUT
#define BUCKETED_RETAINED_LAYOUT 8
#endif

/* Survives the DSO unload/reload of every restart. */
typedef struct {
    ap_unixd_mpm_retained_data *mpm;
    int first_server_limit;          /* sizes the tables; fixed at start */
    int first_thread_limit;          /* the scoreboard's threads per slot
                                      * (1 when started in ChildModel
                                      * prefork); fixed at start */
    int max_daemons_limit;           /* 1 + highest slot ever used */
    child_slot *slots;               /* first_server_limit entries */
    bucket_kept *buckets;            /* first_server_limit records: what
                                      * each bucket keeps (bucket.h) */
    bucket_generation *generation;   /* this generation's buckets and what
                                      * it built (bucket.h); in pconf */
    int maxclients_reported;
    apr_pool_t *socket_pool;         /* retained sockets live here */
    retained_socket *sockets;
    retained_map *steer_maps;        /* CPU / load steering, per address */
    int idle_map_open;               /* BucketSteering load: idle_map_fd is
                                      * this generation's idle counts */
    int idle_map_fd;
    int server_child;                /* set in this process's copy by a
                                      * child the MPM forked to serve:
                                      * anything else that runs the
                                      * drop_privileges hook is a helper
                                      * (mod_cgid's daemon) */
    struct child_life *child_life;   /* in a child's copy: its life, for
                                      * the state httpd asks it
                                      * (child_life_mpm_state) */
    struct event_child_ctx *event_child; /* in a ChildModel event child's
                                      * copy: its context, for the hook
                                      * that registers timed callbacks */
    const char *takeover;            /* set by a graceful restart onto this
                                      * build from one whose state it could
                                      * not read: why; cleared once the
                                      * parent has taken over what the old
                                      * build left (parent_takeover.c) */
    struct takeover_candidate *takeover_candidates; /* the old build's
                                      * children found at open_logs, taken
                                      * into the slot table by parent_run;
                                      * in pconf */
    int num_takeover_candidates;
    int takeover_recorded;           /* found from the old build's record
                                      * (parent_record.h), not the
                                      * scoreboard */
} bucketed_retained;

/* The one symbol the MPM exports (the apxs build hides the others). */
extern module AP_MODULE_DECLARE_DATA mpm_bucketed_module
    __attribute__((visibility("default")));

/* bucketed_data.c: the configuration (of the main server), and the
 * retained data, created on first use. */
bucketed_config *bucketed_get_config(server_rec *s);
bucketed_retained *bucketed_get_retained(void);
/* Records the scoreboard's size, fixed at the first start, where any later
 * build finds it. */
void bucketed_note_limits(bucketed_retained *retained);
/* Where a configuration warning goes: the flags to add to its level
 * (APLOG_STARTUP: the console, at the first start-up pass; 0: the log, at
 * each restart), or -1 at the second start-up pass, which would only
 * repeat it. */
int bucketed_config_warning_flags(const bucketed_retained *retained);

/* directives.c */
extern const command_rec bucketed_cmds[];
void *bucketed_create_server_config(apr_pool_t *p, server_rec *s);

/* event_child.c: one eventfd per bucket for the bucket's children to
 * wake each other (ChildModel event), kept across restarts so that old
 * and new children of a bucket share it (bucket_kept.nudge). */
apr_status_t event_nudges_create(server_rec *s, bucketed_config *conf,
                                 bucketed_retained *retained);

/* event_work.c: ap_mpm_register_timed_callback. A ChildModel event
 * child runs fn(baton) on a worker once t has passed; anywhere else (the
 * prefork model, the parent) APR_ENOTIMPL, as stock prefork answers. */
apr_status_t event_register_timed_callback(bucketed_retained *retained,
                                           apr_time_t t,
                                           ap_mpm_callback_fn_t *fn,
                                           void *baton);

#endif /* BUCKETED_H */
