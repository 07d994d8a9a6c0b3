/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_event: the event child model's directives as values. Pure, like
 * policy_directives.c: the child model, AsyncRequestWorkerFactor, the thread
 * limits with stock event's adjustments and warnings, and which directives
 * belong to which model.
 */
#ifndef POLICY_EVENT_H
#define POLICY_EVENT_H

#include "apr_pools.h"
#include "apr_tables.h"
#include "apr_time.h"

#include "policy_directives.h"

typedef enum {
    CHILD_MODEL_PREFORK = 0,   /* one connection per child process */
    CHILD_MODEL_EVENT          /* threads per child, async keep-alive */
} child_model_e;

/* prefork | event, case-insensitive. */
const char *directive_parse_child_model(apr_pool_t *p, const char *directive,
                                        const char *arg, child_model_e *out);
const char *child_model_name(child_model_e model);

/* Whether a child model serves a protocol that a Protocols directive names.
 * The prefork model does not serve HTTP/2 ("h2", "h2c"): mod_http2 runs
 * each stream on a thread of its own, and the prefork model is where
 * modules that are not thread-safe (mod_php) live; mod_http2 turns itself
 * off under stock prefork for that reason. */
int child_model_serves_protocol(child_model_e model, const char *protocol);

/* A positive decimal number ("2", "1.5", "0.25") of at most 10000; stock
 * event's AsyncRequestWorkerFactor. Stored scaled by 16 as stock does, so
 * the smallest step is 1/16; a value that rounds to 0 is refused. */
#define ASYNC_FACTOR_SCALE 16
const char *directive_parse_async_factor(apr_pool_t *p, const char *directive,
                                         const char *arg, int *scaled);

/* The event model's limits as configured; 0 = not set. max_workers counts
 * threads (MaxRequestWorkers as stock event means it); its default (0)
 * is ServerLimit x ThreadsPerChild. */
typedef struct {
    int server_limit;
    int thread_limit;
    int threads_per_child;
    int max_workers;
    int start_servers;
    int min_spare_threads;
    int max_spare_threads;
} thread_limits;

/*
 * Stock event's checks (same warnings, same adjustments): ThreadsPerChild
 * lowered to ThreadLimit, MaxRequestWorkers raised to ThreadsPerChild and
 * rounded down to a multiple of it, children capped at ServerLimit,
 * MaxSpareThreads raised to MinSpareThreads + ThreadsPerChild. Refused:
 * MinSpareThreads above MaxSpareThreads (both given). Fills *out (the
 * thread values) and *procs, the process view the shared parent runs on:
 * server_limit, max_workers = children (MaxRequestWorkers /
 * ThreadsPerChild), start_servers, and min_spare/max_spare in threads.
 */
const char *thread_limits_check(apr_pool_t *p, const thread_limits *in,
                                const thread_limits *defaults,
                                int hard_server_limit, int hard_thread_limit,
                                thread_limits *out, process_limits *procs,
                                apr_array_header_t *warnings);

/* On a restart: ThreadLimit sized the scoreboard at the first start.
 * Keeps first_thread_limit, lowering ThreadsPerChild (and the children's
 * thread count) to fit, and says so in warnings. */
void thread_limits_keep_thread_limit(apr_pool_t *p, thread_limits *limits,
                                     process_limits *procs,
                                     int first_thread_limit,
                                     apr_array_header_t *warnings);

/* The first directive of the other model the configuration uses (NULL if
 * none), checked once the whole configuration is read: an error naming the
 * directive and the fix, or NULL. */
const char *child_model_conflict(apr_pool_t *p, child_model_e model,
                                 const char *prefork_only_seen,
                                 const char *event_only_seen);

/* Whether an event child may take another connection: it needs an idle
 * worker, and (stock event's rule) its connections, not counting those in
 * lingering close, must be at most ThreadsPerChild + idle workers x
 * AsyncRequestWorkerFactor. */
int event_may_accept(int connections, int idle_workers, int threads_per_child,
                     int async_factor_scaled);

/* How many of its idle keep-alive connections (keepalive_idle of them) an
 * event child closes when its bucket is stalled (event_should_reclaim()) with
 * `waiting` connections in the bucket's accept queue and `children` children
 * in the bucket: its share of the waiting ones, rounded up. Each closed one is
 * swapped for a waiting one (event_swapping()), so the bucket closes about as
 * many as wait, not what each child would need to get back under its own limit
 * (which falls with every busy worker, so that closed far more than waited:
 * docs/design.md). 0 when nothing waits or the child has no idle worker
 * (closing connections frees no worker). A connection waiting for a client's
 * next request is worth less than one a client is waiting to have accepted:
 * the client of a closed keep-alive connection reconnects without a user
 * noticing, one in an accept queue is a user waiting. */
int event_reclaim_share(apr_uint32_t waiting, int children, int idle_workers,
                        int keepalive_idle);

/* Whether a child that closed idle keep-alive connections to make room may
 * still listen beyond the accept rule: until its connections are back to
 * the count it had when it closed them (swap_until; 0: not swapping). */
int event_swapping(int connections, int swap_until);


/* How long the bucket must have been stalled (policy_stall.h: connections
 * wait in its accept queue and none has been accepted) before a child at
 * its connection limit reclaims while the parent could still add a child
 * to the bucket: that child takes the waiting connections (the stall check
 * asks for one at once), so closing keep-alive connections would only
 * lose them; this long, and the new children do not come or do not keep
 * up. */
#define EVENT_RECLAIM_GROWING_AFTER apr_time_from_sec(1)

/* How long a child that has swapped idle keep-alive connections for
 * waiting ones goes on doing so while connections still wait on its
 * sockets, without a new stall: the accepts of a swap end the stall, and
 * a flood of new connections would otherwise be admitted one stall (200
 * ms and more) at a time. */
#define EVENT_RECLAIM_GOES_ON apr_time_from_sec(1)

/* Whether a child at its connection limit, with connections waiting on its
 * sockets, closes idle keep-alive connections to make room for them now:
 * once the parent sees its bucket stalled for bucket_stalled_for (a
 * sibling with room accepts them, and then the bucket is not stalled),
 * and, while the parent could add a child (bucket_can_grow), only after
 * EVENT_RECLAIM_GROWING_AFTER; or when it last did so less than
 * EVENT_RECLAIM_GOES_ON ago (since_last; negative: never). A connection
 * waiting for a client's next request is worth less than one a client is
 * waiting to have accepted, but more than one the server is about to
 * accept anyway. */
int event_should_reclaim(apr_interval_time_t bucket_stalled_for,
                         int bucket_can_grow, apr_interval_time_t since_last);

/* Whether an event child's listening sockets belong in the epoll set its
 * workers wait in: the second half of the rule above only. The first
 * half needs no help there: the kernel wakes only a child with a worker
 * waiting in epoll, and the worker a new connection wakes is that idle
 * worker. */
int event_should_listen(int connections, int idle_workers,
                        int threads_per_child, int async_factor_scaled);

/* The bucket's children take turns at the front of a listening socket's
 * wait queue every this many accepts of a child (event_accept.c says why
 * not at every one). */
#define EVENT_TURN_EVERY 8

/* Whether a child that had made `accepted` accepts before this one goes
 * to the back of the queue now (the first, and every EVENT_TURN_EVERY-th
 * after): only where the kernel wakes one waiter (EPOLLEXCLUSIVE);
 * without it every child is woken anyway. */
int event_takes_turn(apr_uint32_t accepted, int epoll_exclusive);

/* How long no worker of a child may have been idle or have finished
 * anything, with a keep-alive request waiting, before an extra worker
 * starts for it (a request that its own workers wait on, as when
 * mod_proxy sends to this server over a pooled connection this child
 * serves). */
#define EVENT_STUCK_GRACE apr_time_from_msec(100)

typedef enum {
    EVENT_NOT_STUCK,        /* a worker is idle or did something, or no
                             * keep-alive connection waits: start over */
    EVENT_STUCK_WAIT,       /* stuck, not yet for EVENT_STUCK_GRACE */
    EVENT_STUCK_TOO_LONG    /* an extra worker if a request waits */
} event_stuck_e;

/* A child's workers: idle_workers idle; progressed: any came to wait
 * again since the last look; keepalive_waiting: its connections waiting
 * for their next request; stuck_for: since when none of that changed. */
event_stuck_e event_stuck_verdict(int idle_workers, int progressed,
                                  int keepalive_waiting,
                                  apr_interval_time_t stuck_for);

#endif /* POLICY_EVENT_H */
