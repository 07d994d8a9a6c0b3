/*
 * event_child.h: what the three files of a ChildModel event child share,
 * and nobody else includes: the context of the process, the record of a
 * connection, and the few functions one of them calls in another (all
 * named ev_*).
 *
 *   event_child.c   the process: set-up, signals, threads start and stop,
 *                   exit; the transaction pools the threads share
 *   event_worker.c  the worker threads: run a connection until it waits
 *   event_thread.c  the event thread: epoll, timeouts, accepting,
 *                   keep-alive, lingering close
 *
 * Linux only (epoll, eventfd): include it under __linux__.
 */
#ifndef EVENT_CHILD_H
#define EVENT_CHILD_H

#include "apr_atomic.h"
#include "apr_thread_cond.h"
#include "apr_thread_mutex.h"
#include "apr_thread_proc.h"

#include "httpd.h"

#include "bucketed.h"
#include "event_queue.h"

/* What an epoll event's data points at starts with one of these. */
enum { EV_WAKE = 1, EV_NUDGE, EV_LISTENER, EV_CONN };

/* Lingering close: how long the client gets to close its side. */
#define LINGER_SHORT_SEC 2
#define LINGER_NORMAL_SEC 30
#define LINGER_BUF_SIZE 8192

typedef struct {
    int kind;                        /* EV_LISTENER */
    ap_listen_rec *lr;
    int fd;
} ev_listener;

/* What a connection waits for in the event thread; each has its own
 * timeout list. */
typedef enum {
    WAIT_KEEPALIVE,                  /* next request, KeepAliveTimeout */
    WAIT_IO,                         /* write completion, Timeout */
    WAIT_LINGER,                     /* lingering close */
    NUM_WAITS,
    WAIT_NONE = NUM_WAITS            /* with a worker, or queued for one */
} wait_e;

typedef struct ev_conn ev_conn;
struct ev_conn {
    int kind;                        /* EV_CONN */
    event_timer timer;               /* in one of the event thread's lists */
    ev_conn *next;                   /* worker queue or hand-back list */
    apr_pool_t *ptrans;
    apr_socket_t *csd;
    int fd;
    conn_rec *c;                     /* NULL until a worker creates it */
    conn_state_t *cs;
    ap_sb_handle_t *sbh;
    event_next_e step;               /* what a worker does with it next */
    wait_e wait;                     /* what it waits for, handed back */
    int want_write;                  /* WAIT_IO: writable, else readable */
    int registered;                  /* in the epoll set (one-shot) */
    int short_linger;
};

#define SET(ctx, flag) apr_atomic_set32(&(ctx)->flag, 1)
#define IS(ctx, flag) (apr_atomic_read32(&(ctx)->flag) != 0)

typedef struct {
    apr_thread_t *thread;
    int num;
    struct event_child_ctx *ctx;
} worker_info;

typedef struct event_child_ctx {
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    int slot;
    int bucket;
    int threads;                     /* ThreadsPerChild */
    int thread_limit;                /* the scoreboard's threads per slot */
    apr_pool_t *pchild;
    ap_generation_t generation;

    int epoll_fd;
    int wake_fd;                     /* eventfd */
    int wake_kind;                   /* EV_WAKE, for the epoll data */
    int nudge_fd;                    /* the bucket's eventfd */
    int nudge_kind;                  /* EV_NUDGE */
    ev_listener *listeners;
    int num_listeners;
    int listening;                   /* listeners in the epoll set */

    /* Event thread only. */
    timer_queue queues[NUM_WAITS];   /* by wait_e */
    int served;                      /* connections accepted */
    char linger_buf[LINGER_BUF_SIZE];

    /* Under mutex. */
    apr_thread_mutex_t *mutex;
    apr_thread_cond_t *work;         /* a connection queued, or stop */
    apr_thread_cond_t *gone;         /* a worker exited */
    ev_conn *queue_head, *queue_tail;
    int queued;
    int idle_workers;
    int running_workers;
    int stop_workers;
    int listeners_off;               /* the event thread wants a wake-up
                                      * when a worker becomes idle */
    ev_conn *handback;               /* connections returned by workers */
    apr_pool_t **spare_pools;
    int num_spare_pools;
    int connections;                 /* open, lingering included */

    /* Flags any thread may read, set with SET() and read with IS(). */
    apr_uint32_t leaving;            /* graceful: finish and go */
    apr_uint32_t dying;              /* SIGTERM: go now */
    apr_uint32_t sick;               /* accept() broke: exit CHILDSICK */
    apr_uint32_t event_done;         /* the event thread has finished */
} event_child_ctx;

static inline void ev_lock(event_child_ctx *ctx)
{
    apr_thread_mutex_lock(ctx->mutex);
}

static inline void ev_unlock(event_child_ctx *ctx)
{
    apr_thread_mutex_unlock(ctx->mutex);
}

/* event_child.c: a transaction pool for a new connection (NULL, logged,
 * when none can be made), and one given back, cleared. */
apr_pool_t *ev_get_pool(event_child_ctx *ctx);
void ev_put_pool(event_child_ctx *ctx, apr_pool_t *p);

/* event_child.c: closes the socket (a cleanup of its pool) and frees
 * everything of the connection. The caller owns it and it is in no
 * list. */
void ev_close_conn(event_child_ctx *ctx, ev_conn *ec);

/* event_worker.c: a worker thread (arg: its worker_info). */
void *APR_THREAD_FUNC ev_worker_main(apr_thread_t *thd, void *arg);

/* event_worker.c: hands a connection to the workers (event thread). */
void ev_queue_for_worker(event_child_ctx *ctx, ev_conn *ec);

/* event_thread.c: the epoll set with the wake-up eventfd, the bucket's
 * eventfd and (not yet added) the bucket's listeners. Logged on failure. */
apr_status_t ev_setup_epoll(event_child_ctx *ctx);

/* event_thread.c: wakes the event thread to look at its flags and the
 * hand-back list. Any thread. */
void ev_wake_event_thread(event_child_ctx *ctx);

/* event_thread.c: the event thread (arg: the context). */
void *APR_THREAD_FUNC ev_event_thread_main(apr_thread_t *thd, void *arg);

#endif /* EVENT_CHILD_H */
