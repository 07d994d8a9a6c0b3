/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucket.h: the bucket as a record (bucket.c). A bucket is a share of the
 * listening sockets with the children that accept from them. What it
 * keeps across restarts (bucket_kept) and what belongs to one
 * configuration generation (bucket) are two records, the second pointing
 * at the first; the configuration (bucketed_config) holds only what the
 * directives say and the plan they make.
 *
 * Who may write what decides where each part lives:
 * - the kept record: the process pool (it outlives generations), written
 *   by the parent only; its spawn state in memory children never map (the
 *   parent rewrites it every second), its counters in the one shared
 *   segment children write (displayed only: no decision reads them);
 * - the generation's record: pconf, written by the parent only; its census
 *   published for the children in that generation's shared segment.
 * Nothing is ever located through a value read back from shared memory.
 */
#ifndef BUCKET_H
#define BUCKET_H

#include "apr_proc_mutex.h"
#include "apr_time.h"
#include "httpd.h"
#include "ap_listen.h"

#include "policy_exit.h"
#include "policy_stall.h"
#include "policy_steering.h"

/* Counters children write, in anonymous shared memory: only ever
 * displayed, no decision reads them (a child can write anything there). */
typedef struct {
    apr_uint32_t accepted;
    apr_uint32_t reclaimed;          /* idle keep-alive connections closed
                                      * to admit new ones (both models) */
    apr_uint32_t lingered;           /* connections whose lingering close
                                      * waited in the keeper for the
                                      * client (event model) */
} bucket_counter;

/* The parent's spawning state of a bucket, in memory children never map
 * (parent_slots.c). */
typedef struct {
    int spawn_rate;                  /* children to start at once when the
                                      * bucket next needs some */
    bucket_health health;            /* failed exits, back-off */
} bucket_spawning;

/* What a bucket keeps across restarts: one per possible bucket (buckets
 * never outnumber ServerLimit, fixed at the first start), in the retained
 * data. Its sockets and its slots in the steering maps are kept too, by
 * address (retained_socket, retained_map: slot k and duplicate k are
 * bucket k's). */
typedef struct {
    bucket_counter *counter;         /* in the shared segment */
    bucket_spawning *spawning;       /* parent-only memory; NULL until the
                                      * parent's tables exist */
    int nudge;                       /* ChildModel event: the eventfd its
                                      * children wake each other with,
                                      * shared by old and new children;
                                      * -1 = none */
} bucket_kept;

/* What the parent publishes for the children to display and to decide
 * from (stats_counters.c), per bucket. */
typedef struct {
    apr_uint32_t idle;
    apr_uint32_t busy;
    apr_uint32_t can_grow;           /* the parent could start another child
                                      * in the bucket now: a free slot and
                                      * no back-off */
    apr_uint32_t stalled_ms;         /* how long connections have waited in
                                      * its accept queue without it going
                                      * down (policy_stall.h); 0 = not
                                      * stalled */
    apr_uint32_t waiting;            /* connections in its accept queues */
    apr_uint32_t children;           /* children running, starting or on
                                      * their way in */
} published_census;

/* One bucket in one generation. */
typedef struct {
    int index;
    bucket_kept *kept;
    ap_listen_rec *listeners;        /* its sockets: the planned ones, then
                                      * any being drained */
    apr_proc_mutex_t *accept_mutex;  /* BUCKET_WAIT_MUTEX only, else NULL */
    published_census *published;     /* in the generation's segment */
    /* The parent's own, one maintenance pass to the next: */
    apr_uint32_t queued;             /* connections in its accept queues at
                                      * the last sample */
    stall_watch stall;
    apr_time_t stall_logged;         /* last stall warning */
    int can_grow;                    /* at the last pass */
    int sockets_new;                 /* every socket of it was opened for
                                      * this generation: no child of an
                                      * earlier one holds them */
} bucket_rec;

/* The generation's published segment, beside the buckets' census. */
typedef struct {
    apr_time_t census_at;            /* last census; 0 = none yet */
    apr_time_t sampled_at;           /* last socket sample; 0 = none yet */
    apr_uint32_t closing;            /* a stop on held sockets has begun:
                                      * every response says "Connection:
                                      * close" (apr_atomic) */
} published_times;

typedef struct {
    apr_uint32_t sampled;            /* 0 until the first sample */
    apr_uint32_t depth;              /* connections waiting for accept() */
    apr_uint32_t backlog;            /* the accept queue's limit */
    apr_uint32_t max_depth;          /* highest depth sampled */
    apr_uint32_t has_drops;          /* drops below mean something */
    apr_uint32_t drops;              /* packets dropped since it opened */
    apr_uint32_t defer_accept;       /* TCP_DEFER_ACCEPT: no drops */
} published_socket;

/* What one configuration generation built and runs, beside its
 * configuration: in pconf, found through the retained data
 * (retained->generation) by the parent and the children it forks. */
typedef struct bucket_generation {
    int num_buckets;                 /* plan.num_buckets once built */
    bucket_rec *buckets;             /* NULL until open_logs builds them */
    /* BucketSteering's trial, run once per generation (check_config). */
    int steer_trial_done;
    int steer_trial_err;
    const char *steer_trial_step;
    /* What is in force on the reuseport groups (listen_steering.c). */
    steering_outcome steering;
    int idle_publish_warned;         /* BucketSteering load: once */
    unsigned int migration_prog_id;  /* the program attached this
                                      * generation; 0 = none */
    int migration_groups;            /* reuseport groups it is on */
    /* The published segment (stats_counters.c). */
    published_times *times;
    published_socket *sockets;       /* num_sockets entries: bucket by
                                      * bucket, in listener order */
    int num_sockets;
    struct bucket_queue_state *queue; /* the parent's own sampling state */
} bucket_generation;

/* The generation's record, created on first use in pconf and forgotten
 * when pconf is cleared. */
bucket_generation *bucket_generation_get(apr_pool_t *pconf,
                                         bucket_generation **slot);

/* The kept records (first_server_limit of them), in the process pool:
 * no counters, no spawning state, no eventfd yet. */
bucket_kept *bucket_kept_create(apr_pool_t *process_pool,
                                int first_server_limit);

/* The generation's num_buckets records over the kept ones. */
void bucket_generation_build(apr_pool_t *pconf, bucket_generation *gen,
                             bucket_kept *kept, int num_buckets);

#endif /* BUCKET_H */
