/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_context.h: the family header of a ChildModel event child: what
 * its files share, and nobody else includes: the context of the process,
 * the record of a connection, its lock, and the functions one file calls
 * in another (all named ev_*), grouped by the file that defines them. It
 * belongs to no file, so every file can include it and still call only
 * those below it.
 *
 * Bottom up; each file calls only those before it (scripts/check-loops.py
 * --layers prints the order):
 *   event_epoll.c    the epoll sets and eventfds: creating them, a change
 *                    to the workers' set, waking the keeper or a worker
 *   event_accept.c   accepting: the connection count and the accept
 *                    rule, the listening sockets in the set or out of
 *                    it, a worker's accept with its connection's pool,
 *                    taking turns, connections found waiting behind one
 *                    (the work queue), waking the bucket
 *   event_waiting.c  connections waiting without a thread (keep-alive,
 *                    write completion, lingering), closing, reclaiming
 *   event_work.c     timed callbacks, suspended connections, a worker's
 *                    take from the work queue
 *   event_worker.c   the worker threads: take turns waiting in the epoll
 *                    set, run what it reports, wait again
 *   event_keeper.c   the keeper thread: timeouts, leaving, reclaiming,
 *                    the scoreboard's connection counts
 *   event_child.c    the process: set-up, signals, threads start and
 *                    stop, exit
 *
 * Linux (epoll, eventfd) with APR's threads only: include it under
 * BUCKETED_HAS_EVENT_MODEL.
 */
#ifndef EVENT_CONTEXT_H
#define EVENT_CONTEXT_H

#include <semaphore.h>
#include <sys/epoll.h>

#include "apr_atomic.h"
#include "apr_thread_cond.h"
#include "apr_thread_mutex.h"
#include "apr_thread_proc.h"

#include "httpd.h"

#include "bucketed.h"
#include "child_life.h"
#include "policy_timeouts.h"

/* What an epoll event's data points at starts with one of these. */
enum { EV_WORK = 1, EV_STOP, EV_NUDGE, EV_LISTENER, EV_CONN, EV_WAKE };

/* Transaction pools kept for reuse beyond the threads' own. */
#define SPARE_POOLS 16

/* Lingering close: how long the client gets to close its side. */
#define LINGER_SHORT_SEC 2
#define LINGER_NORMAL_SEC 30
#define LINGER_BUF_SIZE 8192

typedef struct {
    int kind;                        /* EV_LISTENER */
    ap_listen_rec *lr;
    int fd;
} ev_listener;

/* What a connection waits for without a thread; each has its own timeout
 * list. Keep-alive and write completion wait in the workers' epoll set,
 * lingering close in the keeper's. */
typedef enum {
    WAIT_KEEPALIVE,                  /* next request, KeepAliveTimeout */
    WAIT_IO,                         /* write completion, Timeout */
    WAIT_LINGER,                     /* lingering close */
    NUM_WAITS,
    WAIT_NONE = NUM_WAITS            /* with a worker, or queued for one */
} wait_e;

/*
 * Who owns a connection: the worker that accepted it, or took it from the
 * work queue, or got the one event its one-shot epoll entry delivers;
 * the keeper, once it lingers. Only the owner arms an entry, and it
 * touches the connection no more once armed; so exactly one thread owns
 * a connection at a time, and only an owner closes one. The keeper never
 * takes a connection waiting in the workers' set: when one has to go
 * (timed out, leaving) it marks it `closing` and shuts its socket's read
 * side, which makes the armed entry fire, and the worker that gets the
 * event closes it.
 */
typedef struct ev_conn ev_conn;
struct ev_conn {
    int kind;                        /* EV_CONN */
    event_timer timer;               /* in one of the timeout lists */
    ev_conn *next;                   /* the work queue */
    apr_pool_t *ptrans;
    apr_socket_t *csd;
    int fd;
    conn_rec *c;                     /* NULL until a worker creates it */
    conn_state_t *cs;
    ap_sb_handle_t *sbh;
    event_next_e step;               /* what a worker does with it next */
    wait_e wait;                     /* what it waits for (under mutex) */
    int closing;                     /* the keeper wants it closed (under
                                      * mutex) */
    int want_write;                  /* WAIT_IO: writable, else readable */
    int waitio;                      /* WAIT_IO for CONN_STATE_ASYNC_WAITIO,
                                      * not write completion */
    int reclaimed;                   /* closing to admit new connections
                                      * (under mutex) */
    int registered;                  /* in the epoll set (one-shot) */
    int short_linger;
};

/* A module's timed callback (ap_mpm_register_timed_callback). */
typedef struct ev_callback ev_callback;
struct ev_callback {
    apr_time_t when;
    ap_mpm_callback_fn_t *fn;
    void *baton;
    ev_callback *next;
};

#define SET(ctx, flag) apr_atomic_set32(&(ctx)->flag, 1)
#define IS(ctx, flag) (apr_atomic_read32(&(ctx)->flag) != 0)

typedef struct {
    apr_thread_t *thread;
    int num;                         /* its scoreboard slot */
    int running;                     /* under mutex */
    int joinable;                    /* exited: stop_workers() joins it */
    struct event_child_ctx *ctx;
} worker_info;

typedef struct event_child_ctx {
    struct child_life *life;         /* leaving, dying: CHILD_LIFE_IS() */
    sigset_t taken_signals;          /* the stop signals and the look:
                                      * blocked in every thread; the main
                                      * thread takes them */
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    int slot;
    int bucket;
    int threads;                     /* ThreadsPerChild */
    int thread_limit;                /* the scoreboard's threads per slot */
    worker_info *workers;            /* thread_limit of them: ThreadsPerChild
                                      * workers, then room for extra ones */
    apr_pool_t *extra_pool;          /* the keeper's, for extra workers */
    apr_threadattr_t *extra_attr;    /* detached */
    apr_pool_t *pchild;

    /* The epoll set the workers wait in. */
    int epoll_fd;
    int work_fd;                     /* eventfd (semaphore): queued work */
    int work_kind;                   /* EV_WORK, for the epoll data */
    int stop_fd;                     /* eventfd, written once: stop */
    int stop_kind;                   /* EV_STOP */
    int nudge_fd;                    /* the bucket's eventfd */
    int nudge_kind;                  /* EV_NUDGE */
    ev_listener *listeners;
    int num_listeners;

    /* The keeper's epoll set: connections in lingering close, and an
     * eventfd to wake it. */
    int keeper_fd;
    int wake_fd;
    int wake_kind;                   /* EV_WAKE */
    char linger_buf[LINGER_BUF_SIZE];  /* the keeper's */

    /* Under mutex. */
    apr_thread_mutex_t *mutex;
    apr_thread_cond_t *gone;         /* a worker exited */
    sem_t turn;                      /* posted when the worker waiting in
                                      * the epoll set leaves it: a
                                      * follower may lead (event_worker.c;
                                      * not under mutex) */
    int turn_waiters;                /* followers waiting on turn */
    int turns_posted;                /* posts no follower has taken yet */
    int leading;                     /* a worker waits in the epoll set */
    int listening;                   /* listeners in the epoll set */
    int accept_pending;              /* a connection was left waiting on
                                      * a listener in the set: the next
                                      * worker back idle tries them */
    int listeners_closed;            /* ev_close_listeners_locked() ran */
    timeout_list timeouts[NUM_WAITS]; /* by wait_e */
    ev_conn *queue_head, *queue_tail;  /* the work queue */
    int queued;
    int idle_workers;                /* waiting for work */
    apr_uint64_t waits;              /* times a worker came to wait */
    int running_workers;
    int stop_workers;
    apr_pool_t **spare_pools;
    int num_spare_pools;
    int connections;                 /* open, lingering included */
    int reclaimed;                   /* idle keep-alive connections closed
                                      * to admit new ones, not yet taken
                                      * by a worker to close */
    apr_time_t reclaim_logged;       /* last reclaim warning */
    apr_time_t reclaim_census;       /* the parent's census the last
                                      * reclaim went by */
    apr_time_t swapped_at;           /* the last reclaim that closed
                                      * some; 0 = none */
    int swap_until;                  /* after a reclaim: listens beyond the
                                      * accept rule until its connections
                                      * are back to this (event_swapping);
                                      * 0 = not swapping */
    apr_uint32_t served;             /* accepted, when MaxConnectionsPer
                                      * Child counts them */
    int server_closing;              /* the keeper's copy of
                                      * bucket_stats_closing(): a stop on
                                      * held sockets lets the children
                                      * serve on, past their limit
                                      * (child_takes_another) */
    apr_pool_t *callback_pool;       /* ev_callback records come from here */
    ev_callback *timed;              /* registered, in order of time */
    ev_callback *due_head, *due_tail;  /* due, each with a work unit */
    ev_callback *spare_callbacks;    /* run, for reuse */
    int running_callbacks;
    ev_conn *suspended;              /* connections a module suspended */
    int num_suspended;

    /* Flags any thread may read, set with SET() and read with IS(). */
    apr_uint32_t sick;               /* accept() broke: exit CHILDSICK */
    apr_uint32_t keeper_done;        /* the keeper thread has finished */
    apr_uint32_t accepted;           /* connections accepted (atomic) */
    apr_uint32_t asked_to_look;      /* the parent sent BUCKETED_SIG_LOOK:
                                      * the keeper wakes the bucket if
                                      * connections wait (taken with
                                      * apr_atomic_xchg32) */
} event_child_ctx;

static inline void ev_lock(event_child_ctx *ctx)
{
    apr_thread_mutex_lock(ctx->mutex);
}

static inline void ev_unlock(event_child_ctx *ctx)
{
    apr_thread_mutex_unlock(ctx->mutex);
}

/* ---- event_epoll.c */

/* An epoll set into *fd (a failure is logged and its errno returned); an
 * eventfd in one, its epoll data pointing at *kind = kind_value (a new
 * eventfd when *fd is -1). Before the threads start. */
apr_status_t ev_epoll_create(event_child_ctx *ctx, const char *what,
                             int *fd);
apr_status_t ev_add_eventfd(event_child_ctx *ctx, int epoll_fd, int *fd,
                            int *kind, int kind_value, int flags,
                            unsigned events, const char *what);

/* The epoll set with the work and stop eventfds and the bucket's eventfd;
 * the listeners are added by ev_update_listening_locked(). Logged on
 * failure. Before the threads start. */
apr_status_t ev_setup_epoll(event_child_ctx *ctx);

/* epoll_ctl() on the workers' set (logged on failure: -1). */
int ev_epoll_set(event_child_ctx *ctx, int op, int fd, unsigned events,
                 void *ptr);

/* Wakes the keeper to look at the flags and counts. Any thread. */
void ev_wake_keeper(event_child_ctx *ctx);

/* One unit of work (a queued connection, a due callback) for the work
 * queue's eventfd: wakes one waiting worker. Under mutex. */
void ev_signal_work_locked(event_child_ctx *ctx);

/* ---- event_accept.c */

/* One connection more (+1) or less (-1), published at once: the parent
 * moves to another bucket only a child that holds none (policy_maint.h),
 * so a count a keeper pass late would let it close fresh ones. Under
 * mutex. */
void ev_count_connection_locked(event_child_ctx *ctx, int delta);

/* Connections the accept rule counts: lingering ones and idle keep-alive
 * ones already being closed to make room are on their way out. */
int ev_open_connections(event_child_ctx *ctx);

/* Whether the child is leaving or dying: it takes no more connections. */
int ev_closing_down(event_child_ctx *ctx);

/* A connection's transaction pool kept for reuse, cleared, up to a bound
 * (under mutex). */
void ev_keep_spare_pool_locked(event_child_ctx *ctx, apr_pool_t *p);

/* A new connection from l for the calling worker, which is counted busy:
 * NULL when there is none or the rule says no. Connections found waiting
 * behind it go to the work queue while other workers are idle for them.
 * Called under mutex, returns without it. */
ev_conn *ev_accept_for_worker_locked(event_child_ctx *ctx, ev_listener *l);

/* What a worker whose bucket's eventfd fired takes: a connection from any
 * of the listeners, as ev_accept_for_worker_locked() (called under mutex,
 * returns without it). */
ev_conn *ev_accept_nudged_locked(event_child_ctx *ctx);

/* Puts the listeners into the epoll set or takes them out, as the accept
 * rule says for the counts now (under mutex). */
void ev_update_listening_locked(event_child_ctx *ctx);

/* A leaving or dying child closes its copies of the listening sockets
 * once they are out of the epoll set; workers that still try them find
 * nothing (under mutex). */
void ev_close_listeners_locked(event_child_ctx *ctx);

/* Called by a worker that took the last idle worker's place (none is left
 * waiting in the set): the kernel may have woken this child for a
 * connection of another listener, whose event it has not taken and now
 * nobody will, until a worker is idle again. Wakes the bucket if a
 * listener has a connection waiting. */
void ev_nudge_if_waiting(event_child_ctx *ctx);

/* Wakes a worker of every child of the bucket, through the bucket's
 * eventfd (shared with them: never under mutex, where a write a sibling
 * made block would stop every thread). */
void ev_nudge_bucket(event_child_ctx *ctx);

/* Whether a connection waits in the bucket's accept queue while this
 * child, at its connection limit, is out of the set and holds idle
 * keep-alive connections (under mutex). */
int ev_shut_out_locked(event_child_ctx *ctx);

/* The work queue: a connection queued for a worker, waking one waiting
 * worker; the first queued connection taken off (NULL if none). Under
 * mutex. */
void ev_queue_work_locked(event_child_ctx *ctx, ev_conn *ec);
ev_conn *ev_dequeue_work_locked(event_child_ctx *ctx);

/* ---- event_waiting.c */

/* Puts an owned connection into the workers' epoll set to wait for
 * ec->wait (WAIT_KEEPALIVE or WAIT_IO), in that wait's timeout list. The
 * caller must not touch it afterwards. */
void ev_start_waiting(event_child_ctx *ctx, ev_conn *ec);

/* Makes a waiting connection's armed epoll entry fire so that its next
 * owner closes it (under mutex; it is in no list). */
void ev_force_ready_locked(event_child_ctx *ctx, ev_conn *ec);

/* Whether a keep-alive connection's next request has come (or its client
 * closed) while no worker took it (under mutex). */
int ev_keepalive_request_waiting_locked(event_child_ctx *ctx);

/* Closes up to `want` of the oldest idle keep-alive connections, those
 * whose client has sent nothing yet, and lets the child accept as many
 * beyond the accept rule (swap_until), so that waiting connections take
 * their place (under mutex). Each is ended as a timed-out one is, so the
 * worker its entry wakes closes it cleanly (a FIN, never a reset); they
 * no longer count for the accept rule meanwhile. Returns how many. */
int ev_reclaim_keepalive_locked(event_child_ctx *ctx, int want);

/* Takes an owned connection out of its timeout list, closes the socket (a
 * cleanup of its pool) and frees everything of it. */
void ev_close_conn(event_child_ctx *ctx, ev_conn *ec);

/* Reads and discards what a lingering client sent (its socket non-blocking,
 * into buf): 1 once it has closed its side or the socket failed, so the
 * connection can be closed; 0 when nothing more is there for now. */
int ev_linger_done(ev_conn *ec, char *buf, apr_size_t size);

/* Hands an owned connection whose lingering close has started (the write
 * side shut) to the keeper's set, which drains what the client still
 * sends until it closes or the timeout ends, and counts it in the
 * bucket's `lingered`; ev_keeper_set() adds (or takes out) a lingering
 * connection's one-shot entry there. */
void ev_linger_in_keeper(event_child_ctx *ctx, ev_conn *ec);
int ev_keeper_set(event_child_ctx *ctx, int op, ev_conn *ec);

/* ---- event_work.c: timed callbacks and suspended connections */

apr_status_t ev_setup_callbacks(event_child_ctx *ctx);
/* Any thread: fn(baton) on a worker once t has passed. */
apr_status_t ev_register_timed_callback(event_child_ctx *ctx, apr_time_t t,
                                        ap_mpm_callback_fn_t *fn,
                                        void *baton);
/* Keeper, under mutex: when the first callback is due (0: none); hands
 * those due by now to the workers. */
apr_time_t ev_next_callback_locked(event_child_ctx *ctx);
void ev_hand_out_due_callbacks_locked(event_child_ctx *ctx, apr_time_t now);
/* Worker: what the work queue's eventfd gave it: the first due callback
 * (counted as running), else the first queued connection; NULL both when
 * another worker was first. */
ev_conn *ev_take_work(event_child_ctx *ctx, ev_callback **callback);
/* Worker: runs a callback, then takes back the suspended connections
 * whose requests are done. */
void ev_run_callback(event_child_ctx *ctx, ev_callback *cb);
/* Worker: a connection whose request a module suspended waits, no worker
 * and no timeout, for a callback to finish it; 0 if one already did. */
int ev_park_suspended(event_child_ctx *ctx, ev_conn *ec);

/* ---- event_worker.c */

/* A worker thread (arg: its worker_info). */
void *APR_THREAD_FUNC ev_worker_main(apr_thread_t *thd, void *arg);

/* One more worker beyond ThreadsPerChild, in a free scoreboard slot below
 * ThreadLimit; it retires once it would wait idle. Returns whether one
 * was started. Keeper only. */
int ev_start_extra_worker(event_child_ctx *ctx);

/* Counts as posted the turns that let up to `want` of the followers
 * waiting go (under mutex); ev_post_turns() posts them, best outside it
 * (a follower let go takes the mutex at once). 0 on success; on failure
 * (logged) the child is marked sick and dying. */
int ev_turns_to_post_locked(event_child_ctx *ctx, int want);
int ev_post_turns(event_child_ctx *ctx, int count);

/* ---- event_keeper.c */

/* The keeper's epoll set and its eventfd. Logged on failure. Before the
 * threads start. */
apr_status_t ev_setup_keeper(event_child_ctx *ctx);

/* The keeper thread (arg: the context). */
void *APR_THREAD_FUNC ev_keeper_main(apr_thread_t *thd, void *arg);

#endif /* EVENT_CONTEXT_H */
