/*
 * event_child.c: a child of ChildModel event. One event thread owns an
 * epoll set holding the bucket's listening sockets (EPOLLEXCLUSIVE where
 * the kernel has it, so the bucket's children are not woken in a herd)
 * and every connection that waits without a thread: for its next
 * keep-alive request (KeepAliveTimeout), for the socket to drain its
 * pending output (write completion, Timeout), or for the client's FIN in
 * lingering close (2 s short, 30 s normal). ThreadsPerChild worker threads
 * take ready connections from a queue and run httpd's process_connection
 * hooks under the async contract of conn_state_t; what they leave in
 * c->cs->state decides where the connection goes next (event_queue.c).
 *
 * The event thread accepts only while a worker is idle for the new
 * connection and the child holds no more than ThreadsPerChild + idle
 * workers x AsyncRequestWorkerFactor connections (lingering ones aside);
 * otherwise it takes its listening sockets out of the epoll set, so the
 * kernel wakes another child of the bucket instead, and says so in the
 * scoreboard (not_accepting), where the parent's census sees it.
 *
 * Signals: every thread blocks the stop signals; the main thread takes
 * them with sigtimedwait(). A leave request (AP_SIG_GRACEFUL, as for the
 * prefork model) stops accepting, closes the idle keep-alive connections
 * and lets requests in flight finish; SIGTERM/SIGHUP close what waits and
 * end the process once the workers are done, or after a short grace.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#endif

#include "apr_atomic.h"
#include "apr_portable.h"
#include "apr_thread_cond.h"
#include "apr_thread_mutex.h"
#include "apr_thread_proc.h"

#include "httpd.h"
#include "http_config.h"
#include "http_connection.h"
#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "http_vhost.h"
#include "mpm_common.h"

#include "bucketed.h"
#include "child_accept.h"
#include "event_queue.h"

APLOG_USE_MODULE(mpm_bucketed);

#ifdef __linux__

/* What an epoll event's data points at starts with one of these. */
enum { EV_WAKE = 1, EV_NUDGE, EV_LISTENER, EV_CONN };

/* Lingering close: how long the client gets to close its side. */
#define LINGER_SHORT_SEC 2
#define LINGER_NORMAL_SEC 30
/* The event thread looks at its flags at least this often. */
#define EVENT_TICK apr_time_from_msec(100)
/* After SIGTERM, how long busy workers get before the process ends. */
#define DIE_GRACE apr_time_from_sec(1)
/* Transaction pools kept for reuse beyond the threads' own. */
#define SPARE_POOLS 16
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

/* The connection whose timer t is. */
#define CONN_OF(t) ((ev_conn *)((char *)(t) - APR_OFFSETOF(ev_conn, timer)))

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

static void lock(event_child_ctx *ctx)
{
    apr_thread_mutex_lock(ctx->mutex);
}

static void unlock(event_child_ctx *ctx)
{
    apr_thread_mutex_unlock(ctx->mutex);
}

static void wake_event_thread(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: write to the event thread's eventfd");
    }
}

/* ---------------------------------------------------------------- pools */

/* A transaction pool for a new connection: a spare one, or a new one with
 * an allocator of its own (one thread at a time uses it). */
static apr_pool_t *get_pool(event_child_ctx *ctx)
{
    apr_pool_t *p = NULL;
    apr_allocator_t *allocator;
    apr_status_t rv;

    lock(ctx);
    if (ctx->num_spare_pools > 0) {
        p = ctx->spare_pools[--ctx->num_spare_pools];
    }
    unlock(ctx);
    if (p != NULL) {
        return p;
    }
    rv = apr_allocator_create(&allocator);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ERR, rv, ctx->s,
                     "bucketed: apr_allocator_create for a connection");
        return NULL;
    }
    apr_allocator_max_free_set(allocator, ap_max_mem_free);
    rv = apr_pool_create_ex(&p, ctx->pchild, NULL, allocator);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ERR, rv, ctx->s,
                     "bucketed: apr_pool_create_ex for a connection");
        apr_allocator_destroy(allocator);
        return NULL;
    }
    apr_allocator_owner_set(allocator, p);
    apr_pool_tag(p, "transaction");
    return p;
}

static void put_pool(event_child_ctx *ctx, apr_pool_t *p)
{
    apr_pool_clear(p);
    lock(ctx);
    if (ctx->num_spare_pools < ctx->threads + SPARE_POOLS) {
        ctx->spare_pools[ctx->num_spare_pools++] = p;
        p = NULL;
    }
    unlock(ctx);
    if (p != NULL) {
        apr_pool_destroy(p);
    }
}

/* Closes the socket (a cleanup of its pool) and frees everything of the
 * connection. The caller owns it and it is in no list. */
static void close_conn(event_child_ctx *ctx, ev_conn *ec)
{
    int wake;

    put_pool(ctx, ec->ptrans);
    lock(ctx);
    ctx->connections--;
    wake = ctx->listeners_off;
    unlock(ctx);
    if (wake) {
        wake_event_thread(ctx);
    }
}

/* ------------------------------------------------------------- workers */

/* Returns a connection to the event thread to wait (ec->wait set). */
static void hand_back(event_child_ctx *ctx, ev_conn *ec)
{
    if (ec->c != NULL) {
        ap_run_suspend_connection(ec->c, NULL);
    }
    lock(ctx);
    ec->next = ctx->handback;
    ctx->handback = ec;
    unlock(ctx);
    wake_event_thread(ctx);
}

/* Lingering close: the pre-close hooks, what is left of the output, the
 * write side shut; then the event thread drains what the client still
 * sends until it closes or the timeout ends. */
static void start_linger(event_child_ctx *ctx, ev_conn *ec)
{
    apr_socket_timeout_set(ec->csd, apr_time_from_sec(LINGER_SHORT_SEC));
    ec->cs->state = CONN_STATE_LINGER;
    if (ap_start_lingering_close(ec->c)) {
        close_conn(ctx, ec);
        return;
    }
    apr_socket_timeout_set(ec->csd, 0);
    apr_socket_opt_set(ec->csd, APR_INCOMPLETE_READ, 0);
    if (ec->short_linger
        || apr_table_get(ec->c->notes, "short-lingering-close")) {
        ec->short_linger = 1;
        ec->cs->state = CONN_STATE_LINGER_SHORT;
    }
    else {
        ec->cs->state = CONN_STATE_LINGER_NORMAL;
    }
    ec->wait = WAIT_LINGER;
    hand_back(ctx, ec);
}

/* Write completion: the output filters get another go at what is pending. */
static event_next_e flush_output(event_child_ctx *ctx, ev_conn *ec)
{
    conn_rec *c = ec->c;
    ap_filter_t *last = c->output_filters;
    event_flush_result r;
    apr_status_t rv;

    ec->cs->state = CONN_STATE_WRITE_COMPLETION;
    ap_update_child_status(ec->sbh, SERVER_BUSY_WRITE, NULL);
    while (last->next != NULL) {
        last = last->next;
    }
    rv = last->frec->filter_func.out_func(last, NULL);
    if (rv != APR_SUCCESS) {
        ap_log_cerror(APLOG_MARK, APLOG_DEBUG, rv, c, "bucketed: network "
                      "write failure in write completion");
    }
    r.flush_ok = rv == APR_SUCCESS;
    r.output_pending = c->data_in_output_filters;
    r.want_read = ec->cs->sense == CONN_SENSE_WANT_READ;
    r.keepalive = c->keepalive == AP_CONN_KEEPALIVE;
    r.aborted = c->aborted;
    r.input_pending = c->data_in_input_filters;
    r.leaving = IS(ctx, leaving) || IS(ctx, dying);
    ec->cs->sense = CONN_SENSE_DEFAULT;
    return event_after_flush(&r);
}

/* A new connection: conn_rec, pre_connection hooks. 0 if it is gone. */
static int create_conn(event_child_ctx *ctx, ev_conn *ec, int thread_num,
                       apr_thread_t *thd)
{
    apr_bucket_alloc_t *ba = apr_bucket_alloc_create(ec->ptrans);
    long id = (long)ctx->slot * ctx->thread_limit + thread_num;
    int rc;

    ap_create_sb_handle(&ec->sbh, ec->ptrans, ctx->slot, thread_num);
    ec->c = ap_run_create_connection(ec->ptrans, ctx->s, ec->csd, id,
                                     ec->sbh, ba);
    if (ec->c == NULL) {
        close_conn(ctx, ec);
        return 0;
    }
    ec->cs = apr_pcalloc(ec->ptrans, sizeof(*ec->cs));
    ec->c->cs = ec->cs;
    ec->c->current_thread = thd;
    ec->cs->state = CONN_STATE_PROCESSING;
    ec->cs->sense = CONN_SENSE_DEFAULT;
    /* The virtual host of the address the connection came to (mod_ssl
     * picks its certificate from it), as ap_process_connection() does. */
    ap_update_vhost_given_ip(ec->c);
    rc = ap_pre_connection(ec->c, ec->csd);
    if (rc != OK && rc != DONE) {
        ap_log_cerror(APLOG_MARK, APLOG_DEBUG, 0, ec->c,
                      "bucketed: connection aborted by pre_connection");
        close_conn(ctx, ec);
        return 0;
    }
    ec->step = EVENT_NEXT_PROCESS;
    return 1;
}

/* What the process_connection hooks left, for event_after_process(). */
static event_state_e state_of(const conn_state_t *cs)
{
    switch (cs->state) {
    case CONN_STATE_PROCESSING:
        return EVENT_STATE_PROCESSING;
    case CONN_STATE_KEEPALIVE:
        return EVENT_STATE_KEEPALIVE;
    case CONN_STATE_WRITE_COMPLETION:
        return EVENT_STATE_WRITE_COMPLETION;
    case CONN_STATE_SUSPENDED:
        return EVENT_STATE_SUSPENDED;
    case CONN_STATE_LINGER:
        return EVENT_STATE_LINGER;
    default:
        return EVENT_STATE_OTHER;
    }
}

/* Runs a connection until it has to wait (handed back) or is closed. */
static void serve_conn(event_child_ctx *ctx, ev_conn *ec, int thread_num,
                       apr_thread_t *thd)
{
    int rc;

    if (ec->c == NULL) {
        if (!create_conn(ctx, ec, thread_num, thd)) {
            return;
        }
    }
    else {
        ap_update_sb_handle(ec->sbh, ctx->slot, thread_num);
        ec->c->current_thread = thd;
        ec->c->id = (long)ctx->slot * ctx->thread_limit + thread_num;
        ap_run_resume_connection(ec->c, NULL);
    }
    for (;;) {
        switch (ec->step) {
        case EVENT_NEXT_PROCESS:
            ec->cs->state = CONN_STATE_PROCESSING;
            rc = ap_run_process_connection(ec->c);
            ec->step = event_after_process(rc == OK || rc == DONE,
                                           state_of(ec->cs), ec->c->aborted);
            continue;
        case EVENT_NEXT_FLUSH:
            ec->step = flush_output(ctx, ec);
            continue;
        case EVENT_NEXT_WAIT_WRITE:
        case EVENT_NEXT_WAIT_READ:
            ec->want_write = ec->step == EVENT_NEXT_WAIT_WRITE;
            ec->step = EVENT_NEXT_FLUSH;
            ec->wait = WAIT_IO;
            hand_back(ctx, ec);
            return;
        case EVENT_NEXT_KEEPALIVE:
            ec->cs->state = CONN_STATE_KEEPALIVE;
            ec->step = EVENT_NEXT_PROCESS;
            ec->wait = WAIT_KEEPALIVE;
            hand_back(ctx, ec);
            return;
        case EVENT_NEXT_SUSPENDED:
            /* This MPM offers no callbacks a module could resume a
             * suspended connection from (ap_mpm_register_timed_callback
             * answers APR_ENOTIMPL), so nobody can own it: close it. */
            ap_log_cerror(APLOG_MARK, APLOG_ERR, 0, ec->c, "bucketed: a "
                          "module suspended the connection, which "
                          "ChildModel event does not support; closing it");
            ec->step = EVENT_NEXT_LINGER;
            continue;
        case EVENT_NEXT_LINGER:
        default:
            start_linger(ctx, ec);
            return;
        }
    }
}

static void set_worker_status(event_child_ctx *ctx, int num, int status)
{
    ap_update_child_status_from_indexes(ctx->slot, num, status, NULL);
}

static void *APR_THREAD_FUNC worker_main(apr_thread_t *thd, void *arg)
{
    worker_info *wi = arg;
    event_child_ctx *ctx = wi->ctx;

    for (;;) {
        ev_conn *ec;
        int wake;

        set_worker_status(ctx, wi->num, SERVER_READY);
        lock(ctx);
        ctx->idle_workers++;
        wake = ctx->listeners_off;
        if (wake) {
            unlock(ctx);
            wake_event_thread(ctx);
            lock(ctx);
        }
        while (ctx->queue_head == NULL && !ctx->stop_workers) {
            apr_thread_cond_wait(ctx->work, ctx->mutex);
        }
        ctx->idle_workers--;
        ec = ctx->queue_head;
        if (ec == NULL) {
            break;
        }
        ctx->queue_head = ec->next;
        if (ctx->queue_head == NULL) {
            ctx->queue_tail = NULL;
        }
        ctx->queued--;
        unlock(ctx);
        set_worker_status(ctx, wi->num, SERVER_BUSY_READ);
        serve_conn(ctx, ec, wi->num, thd);
    }
    ctx->running_workers--;
    apr_thread_cond_signal(ctx->gone);
    unlock(ctx);
    set_worker_status(ctx, wi->num, IS(ctx, dying) ? SERVER_DEAD
                                               : SERVER_GRACEFUL);
    apr_thread_exit(thd, APR_SUCCESS);
    return NULL;
}

/* Hands a connection to the workers (event thread). */
static void queue_for_worker(event_child_ctx *ctx, ev_conn *ec)
{
    ec->next = NULL;
    lock(ctx);
    if (ctx->queue_tail != NULL) {
        ctx->queue_tail->next = ec;
    }
    else {
        ctx->queue_head = ec;
    }
    ctx->queue_tail = ec;
    ctx->queued++;
    apr_thread_cond_signal(ctx->work);
    unlock(ctx);
}

/* -------------------------------------------------------- event thread */

static int epoll_set(event_child_ctx *ctx, int op, int fd, unsigned events,
                     void *ptr)
{
    struct epoll_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.ptr = ptr;
    if (epoll_ctl(ctx->epoll_fd, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev)
        < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s, "bucketed: "
                     "epoll_ctl(%d) for descriptor %d in the event thread",
                     op, fd);
        return -1;
    }
    return 0;
}

static void set_listening(event_child_ctx *ctx, int on)
{
    int i;
    unsigned events = EPOLLIN
                      | (ctx->conf->kernel.epoll_exclusive ? EPOLLEXCLUSIVE
                                                           : 0);

    if (on == ctx->listening) {
        return;
    }
    for (i = 0; i < ctx->num_listeners; i++) {
        ev_listener *l = &ctx->listeners[i];
        epoll_set(ctx, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, events, l);
    }
    ctx->listening = on;
    lock(ctx);
    ctx->listeners_off = !on;
    unlock(ctx);
    ap_get_scoreboard_process(ctx->slot)->not_accepting = !on;
}

static timer_queue *queue_of(event_child_ctx *ctx, wait_e wait)
{
    return &ctx->queues[wait];
}

static void remove_timer(event_child_ctx *ctx, ev_conn *ec)
{
    if (ec->timer.queued) {
        timer_queue_remove(queue_of(ctx, ec->wait), &ec->timer);
    }
}

/* Takes a connection out of the epoll set before a worker gets it (its
 * one-shot entry may still be armed). */
static void unregister(event_child_ctx *ctx, ev_conn *ec)
{
    if (ec->registered) {
        epoll_set(ctx, EPOLL_CTL_DEL, ec->fd, 0, NULL);
        ec->registered = 0;
    }
}

/* To a worker for lingering close (keep-alive expired, stopping). */
static void linger_in_worker(event_child_ctx *ctx, ev_conn *ec, int aborted)
{
    remove_timer(ctx, ec);
    unregister(ctx, ec);
    ec->short_linger = 1;
    ec->c->aborted |= aborted;
    ec->step = EVENT_NEXT_LINGER;
    ec->wait = WAIT_NONE;
    queue_for_worker(ctx, ec);
}

static void close_in_event_thread(event_child_ctx *ctx, ev_conn *ec)
{
    remove_timer(ctx, ec);
    /* Closing the descriptor takes it out of the epoll set. */
    close_conn(ctx, ec);
}

/* A connection a worker handed back: into its list and the epoll set. */
static void start_waiting(event_child_ctx *ctx, ev_conn *ec, apr_time_t now)
{
    apr_interval_time_t timeout;
    unsigned events = EPOLLONESHOT;

    switch (ec->wait) {
    case WAIT_KEEPALIVE:
        if (IS(ctx, leaving) || IS(ctx, dying)) {
            linger_in_worker(ctx, ec, 0);
            return;
        }
        timeout = ec->c->base_server->keep_alive_timeout;
        events |= EPOLLIN;
        break;
    case WAIT_IO:
        timeout = ec->c->base_server->timeout;
        events |= ec->want_write ? EPOLLOUT : EPOLLIN;
        break;
    default:
        timeout = apr_time_from_sec(ec->short_linger ? LINGER_SHORT_SEC
                                                     : LINGER_NORMAL_SEC);
        events |= EPOLLIN;
        break;
    }
    if (epoll_set(ctx, ec->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD,
                  ec->fd, events, ec) < 0) {
        ec->registered = 0;
        close_conn(ctx, ec);
        return;
    }
    ec->registered = 1;
    timer_queue_insert(queue_of(ctx, ec->wait), &ec->timer, now + timeout);
}

static void take_handbacks(event_child_ctx *ctx, apr_time_t now)
{
    ev_conn *list, *ec;

    lock(ctx);
    list = ctx->handback;
    ctx->handback = NULL;
    unlock(ctx);
    while ((ec = list) != NULL) {
        list = ec->next;
        start_waiting(ctx, ec, now);
    }
}

/* Reads and discards what a lingering client still sends; closes once it
 * has closed its side (or fails), otherwise waits again. */
static void drain_linger(event_child_ctx *ctx, ev_conn *ec)
{
    apr_status_t rv;

    do {
        apr_size_t n = sizeof(ctx->linger_buf);
        rv = apr_socket_recv(ec->csd, ctx->linger_buf, &n);
    } while (rv == APR_SUCCESS);
    if (!APR_STATUS_IS_EAGAIN(rv)) {
        close_in_event_thread(ctx, ec);
        return;
    }
    /* The deadline stays the one lingering close started with. */
    if (epoll_set(ctx, EPOLL_CTL_MOD, ec->fd, EPOLLIN | EPOLLONESHOT, ec)
        < 0) {
        close_in_event_thread(ctx, ec);
    }
}

static void conn_ready(event_child_ctx *ctx, ev_conn *ec)
{
    if (ec->wait == WAIT_LINGER) {
        drain_linger(ctx, ec);
        return;
    }
    remove_timer(ctx, ec);
    ec->wait = WAIT_NONE;
    queue_for_worker(ctx, ec);
}

static void expire(event_child_ctx *ctx, apr_time_t now)
{
    event_timer *t;

    while ((t = timer_queue_pop_expired(&ctx->queues[WAIT_KEEPALIVE], now)) != NULL) {
        linger_in_worker(ctx, CONN_OF(t), 0);
    }
    while ((t = timer_queue_pop_expired(&ctx->queues[WAIT_IO], now)) != NULL) {
        ev_conn *ec = CONN_OF(t);
        ap_log_cerror(APLOG_MARK, APLOG_DEBUG, 0, ec->c, "bucketed: write "
                      "completion timed out");
        linger_in_worker(ctx, ec, 1);
    }
    while ((t = timer_queue_pop_expired(&ctx->queues[WAIT_LINGER], now)) != NULL) {
        close_conn(ctx, CONN_OF(t));
    }
}

/* Every keep-alive connection goes to lingering close (stopping). */
static void close_keepalive(event_child_ctx *ctx)
{
    event_timer *t;

    while ((t = ctx->queues[WAIT_KEEPALIVE].head) != NULL) {
        linger_in_worker(ctx, CONN_OF(t), 0);
    }
}

/* SIGTERM: whatever waits is closed at once. */
static void close_all_waiting(event_child_ctx *ctx)
{
    int w;

    for (w = 0; w < NUM_WAITS; w++) {
        event_timer *t;
        while ((t = ctx->queues[w].head) != NULL) {
            close_in_event_thread(ctx, CONN_OF(t));
        }
    }
}

/* Whether one more connection may be accepted now. */
static int may_accept(event_child_ctx *ctx)
{
    int idle, conns;

    if (IS(ctx, leaving) || IS(ctx, dying)) {
        return 0;
    }
    lock(ctx);
    idle = ctx->idle_workers - ctx->queued;
    conns = ctx->connections - ctx->queues[WAIT_LINGER].count;
    unlock(ctx);
    return event_may_accept(conns, idle, ctx->threads,
                            ctx->conf->async_factor);
}

/* Accepts from one listener while this child may take connections.
 * Returns 1 when it stopped with connections possibly left in the queue
 * (no EAGAIN seen), 0 when the queue is empty or accepting failed. */
static int accept_ready(event_child_ctx *ctx, ev_listener *l)
{
    while (may_accept(ctx)) {
        apr_pool_t *ptrans = get_pool(ctx);
        apr_socket_t *csd = NULL;
        apr_status_t rv;
        ev_conn *ec;

        if (ptrans == NULL) {
            SET(ctx, sick);
            SET(ctx, leaving);
            return 1;
        }
        rv = child_accept_on(l->lr, &csd, ptrans);
        if (rv != APR_SUCCESS || csd == NULL) {
            put_pool(ctx, ptrans);
            if (rv == APR_EGENERAL) {
                /* Logged by ap_unixd_accept: a resource shortage. */
                SET(ctx, sick);
                SET(ctx, leaving);
            }
            return 0;
        }
        bucket_stats_count_accept(ctx->retained, ctx->bucket);
        ec = apr_pcalloc(ptrans, sizeof(*ec));
        ec->kind = EV_CONN;
        ec->wait = WAIT_NONE;
        ec->ptrans = ptrans;
        ec->csd = csd;
        apr_os_sock_get(&ec->fd, csd);
        lock(ctx);
        ctx->connections++;
        unlock(ctx);
        queue_for_worker(ctx, ec);
        ctx->served++;
        if (ap_max_requests_per_child > 0
            && ctx->served >= ap_max_requests_per_child) {
            ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, ctx->s, "bucketed: "
                         "child %" APR_PID_T_FMT " reached "
                         "MaxConnectionsPerChild, leaving", getpid());
            SET(ctx, leaving);
            return 1;
        }
    }
    return 1;
}

/* Another child of the bucket could not take all the connections it was
 * woken for: try every socket, if this child can take any. Returns
 * whether connections may still be waiting. */
static int accept_nudged(event_child_ctx *ctx)
{
    int i, left = 0;

    if (!ctx->listening || !may_accept(ctx)) {
        return 0;
    }
    for (i = 0; i < ctx->num_listeners; i++) {
        left |= accept_ready(ctx, &ctx->listeners[i]);
    }
    return left;
}

/* EPOLLEXCLUSIVE wakes one waiting child per new connection, and a child
 * woken for several may take fewer (it filled up, or is leaving); the
 * others would stay in the accept queue until the next connection wakes
 * someone. So such a child wakes every child of its bucket, and those
 * that can take connections try. */
static void nudge_bucket(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (ctx->nudge_fd >= 0 && write(ctx->nudge_fd, &one, sizeof(one)) < 0
        && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: write to bucket %d's eventfd", ctx->bucket);
    }
}

static void publish_counts(event_child_ctx *ctx)
{
    process_score *ps = ap_get_scoreboard_process(ctx->slot);

    lock(ctx);
    ps->connections = ctx->connections;
    unlock(ctx);
    ps->keep_alive = ctx->queues[WAIT_KEEPALIVE].count;
    ps->write_completion = ctx->queues[WAIT_IO].count;
    ps->lingering_close = ctx->queues[WAIT_LINGER].count;
    ps->suspended = 0;
}

static int epoll_timeout_ms(event_child_ctx *ctx, apr_time_t now)
{
    apr_time_t next = now + EVENT_TICK;
    int w;

    for (w = 0; w < NUM_WAITS; w++) {
        apr_time_t e = timer_queue_next_expiry(&ctx->queues[w]);
        if (e != 0 && e < next) {
            next = e;
        }
    }
    return next <= now ? 0 : (int)((next - now + 999) / 1000);
}

static int all_done(event_child_ctx *ctx)
{
    int done;

    lock(ctx);
    done = ctx->connections == 0 && ctx->handback == NULL;
    unlock(ctx);
    return done;
}

static void *APR_THREAD_FUNC event_thread_main(apr_thread_t *thd, void *arg)
{
    event_child_ctx *ctx = arg;
    struct epoll_event events[64];
    int stopping = 0, declined;

    for (;;) {
        apr_time_t now = apr_time_now();
        int n, i;

        if (ap_scoreboard_image->global->running_generation
            != ctx->generation) {
            SET(ctx, leaving);
        }
        if (IS(ctx, dying)) {
            take_handbacks(ctx, now);
            close_all_waiting(ctx);
            break;
        }
        if (IS(ctx, leaving) && !stopping) {
            stopping = 1;
            set_listening(ctx, 0);
            ap_get_scoreboard_process(ctx->slot)->quiescing = 1;
        }
        if (stopping) {
            close_keepalive(ctx);
            if (all_done(ctx)) {
                break;
            }
        }
        else {
            set_listening(ctx, may_accept(ctx));
        }
        publish_counts(ctx);
        n = epoll_wait(ctx->epoll_fd, events, 64,
                       epoll_timeout_ms(ctx, now));
        if (n < 0) {
            int err = errno;
            if (err == EINTR) {
                continue;
            }
            ap_log_error(APLOG_MARK, APLOG_CRIT, err, ctx->s,
                         "bucketed: epoll_wait in the event thread");
            SET(ctx, sick);
            SET(ctx, dying);
            continue;
        }
        now = apr_time_now();
        for (i = 0; i < n; i++) {
            int kind = *(int *)events[i].data.ptr;

            if (kind == EV_WAKE) {
                uint64_t count;
                if (read(ctx->wake_fd, &count, sizeof(count)) < 0
                    && errno != EAGAIN) {
                    int err = errno;
                    ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                                 "bucketed: read of the eventfd");
                }
            }
        }
        /* Hand-backs first: a connection a worker just returned must be
         * in its list before its events or timeouts are looked at. */
        take_handbacks(ctx, now);
        /* New connections before the connections waiting here, so that
         * these do not take the workers a new connection was woken for. */
        declined = 0;
        for (i = 0; i < n; i++) {
            int kind = *(int *)events[i].data.ptr;

            if (kind == EV_LISTENER) {
                declined |= !ctx->listening
                            || accept_ready(ctx, events[i].data.ptr);
            }
            else if (kind == EV_NUDGE) {
                declined |= accept_nudged(ctx);
            }
        }
        for (i = 0; i < n; i++) {
            if (*(int *)events[i].data.ptr == EV_CONN) {
                conn_ready(ctx, events[i].data.ptr);
            }
        }
        if (declined) {
            nudge_bucket(ctx);
        }
        expire(ctx, now);
    }
    set_listening(ctx, 0);
    publish_counts(ctx);
    SET(ctx, event_done);
    apr_thread_exit(thd, APR_SUCCESS);
    return NULL;
}

/* ---------------------------------------------------------- the process */

static void block_stop_signals(sigset_t *set)
{
    sigset_t others;

    sigemptyset(set);
    sigaddset(set, AP_SIG_GRACEFUL);
    sigaddset(set, AP_SIG_GRACEFUL_STOP);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, set, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ap_server_conf,
                     "bucketed: sigprocmask in an event child");
    }
    /* The parent forked with every signal blocked. */
    sigfillset(&others);
    sigdelset(&others, AP_SIG_GRACEFUL);
    sigdelset(&others, AP_SIG_GRACEFUL_STOP);
    sigdelset(&others, SIGINT);
    sigdelset(&others, SIGTERM);
    sigdelset(&others, SIGHUP);
    if (sigprocmask(SIG_UNBLOCK, &others, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ap_server_conf,
                     "bucketed: sigprocmask in an event child");
    }
}

static apr_status_t setup_epoll(event_child_ctx *ctx)
{
    struct epoll_event ev;
    ap_listen_rec *lr;
    int i = 0, err;

    ctx->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epoll_fd < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     "bucketed: epoll_create1 in an event child");
        return err;
    }
    ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->wake_fd < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     "bucketed: eventfd in an event child");
        return err;
    }
    ctx->wake_kind = EV_WAKE;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.ptr = &ctx->wake_kind;
    if (epoll_ctl(ctx->epoll_fd, EPOLL_CTL_ADD, ctx->wake_fd, &ev) < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     "bucketed: epoll_ctl for the eventfd");
        return err;
    }
    ctx->nudge_fd = ctx->conf->bucket_nudge[ctx->bucket];
    ctx->nudge_kind = EV_NUDGE;
    ev.events = EPOLLIN | EPOLLET;
    ev.data.ptr = &ctx->nudge_kind;
    if (epoll_ctl(ctx->epoll_fd, EPOLL_CTL_ADD, ctx->nudge_fd, &ev) < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     "bucketed: epoll_ctl for bucket %d's eventfd",
                     ctx->bucket);
        return err;
    }
    for (lr = ctx->conf->bucket_listeners[ctx->bucket]; lr; lr = lr->next) {
        ctx->num_listeners++;
    }
    ctx->listeners = apr_pcalloc(ctx->pchild, sizeof(ev_listener)
                                              * ctx->num_listeners);
    for (lr = ctx->conf->bucket_listeners[ctx->bucket]; lr; lr = lr->next) {
        ctx->listeners[i].kind = EV_LISTENER;
        ctx->listeners[i].lr = lr;
        apr_os_sock_get(&ctx->listeners[i].fd, lr->sd);
        i++;
    }
    ctx->listening = 0;
    return APR_SUCCESS;
}

static apr_status_t setup_threads_sync(event_child_ctx *ctx)
{
    apr_status_t rv;

    rv = apr_thread_mutex_create(&ctx->mutex, APR_THREAD_MUTEX_DEFAULT,
                                 ctx->pchild);
    if (rv == APR_SUCCESS) {
        rv = apr_thread_cond_create(&ctx->work, ctx->pchild);
    }
    if (rv == APR_SUCCESS) {
        rv = apr_thread_cond_create(&ctx->gone, ctx->pchild);
    }
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s,
                     "bucketed: cannot create the event child's locks");
    }
    return rv;
}

/* Ends the process. With every worker gone the pool cleanups run (logs
 * flushed); a worker still busy (SIGTERM) leaves without them. */
static void event_child_exit(event_child_ctx *ctx, int code, int clean)
    __attribute__((noreturn));

static void event_child_exit(event_child_ctx *ctx, int code, int clean)
{
    ctx->retained->mpm->mpm_state = AP_MPMQ_STOPPING;
    ap_run_child_stopping(ctx->pchild, !IS(ctx, dying));
    if (clean) {
        apr_pool_destroy(ctx->pchild);
        exit(code);
    }
    _exit(code);
}

/* Waits for the workers to exit: all of them when leaving gracefully
 * (they are idle by then), DIE_GRACE at most after SIGTERM. Returns
 * whether all did. */
static int stop_workers(event_child_ctx *ctx, worker_info *workers)
{
    apr_time_t deadline = apr_time_now() + DIE_GRACE;
    int all, i;

    lock(ctx);
    ctx->stop_workers = 1;
    apr_thread_cond_broadcast(ctx->work);
    while (ctx->running_workers > 0) {
        if (IS(ctx, dying)) {
            apr_time_t now = apr_time_now();
            if (now >= deadline) {
                break;
            }
            apr_thread_cond_timedwait(ctx->gone, ctx->mutex,
                                      deadline - now);
        }
        else {
            apr_thread_cond_wait(ctx->gone, ctx->mutex);
        }
    }
    all = ctx->running_workers == 0;
    unlock(ctx);
    if (all) {
        for (i = 0; i < ctx->threads; i++) {
            apr_status_t thread_rv;
            if (workers[i].thread != NULL) {
                apr_thread_join(&thread_rv, workers[i].thread);
            }
        }
    }
    return all;
}

/* A parent that dies without stopping its children must not leave them
 * serving: on Linux they are asked to leave when it goes. */
static void leave_with_parent(event_child_ctx *ctx, pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, AP_SIG_GRACEFUL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, ctx->s,
                     "bucketed: prctl(PR_SET_PDEATHSIG)");
    }
    if (getppid() != parent) {
        SET(ctx, leaving);
    }
}

static void wait_for_signals(event_child_ctx *ctx, const sigset_t *set)
{
    while (!IS(ctx, event_done)) {
        struct timespec ts;
        int sig;

        ts.tv_sec = 0;
        ts.tv_nsec = 200 * 1000 * 1000;
        sig = sigtimedwait(set, NULL, &ts);
        if (sig < 0) {
            int err = errno;
            if (err != EAGAIN && err != EINTR) {
                ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                             "bucketed: sigtimedwait in an event child");
            }
            continue;
        }
        if (sig == SIGTERM || sig == SIGHUP) {
            SET(ctx, dying);
        }
        else {
            SET(ctx, leaving);
        }
        wake_event_thread(ctx);
    }
}

void event_child_main(server_rec *s, bucketed_config *conf,
                      bucketed_retained *retained, int slot, int bucket,
                      pid_t parent)
{
    event_child_ctx *ctx;
    apr_thread_mutex_t *alloc_mutex;
    apr_pool_t *pchild;
    apr_threadattr_t *attr;
    apr_thread_t *event_thread;
    worker_info *workers;
    sigset_t stop_signals;
    apr_status_t rv, thread_rv;
    int i, clean;

    block_stop_signals(&stop_signals);
    retained->mpm->mpm_state = AP_MPMQ_STARTING;
    pchild = child_pool_create(s);
    /* Threads create and destroy transaction pools under pchild. */
    rv = apr_thread_mutex_create(&alloc_mutex, APR_THREAD_MUTEX_DEFAULT,
                                 pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, s,
                     "bucketed: apr_thread_mutex_create in child");
        exit(APEXIT_CHILDSICK);
    }
    apr_allocator_mutex_set(apr_pool_allocator_get(pchild), alloc_mutex);

    ctx = apr_pcalloc(pchild, sizeof(*ctx));
    ctx->s = s;
    ctx->conf = conf;
    ctx->retained = retained;
    ctx->slot = slot;
    ctx->bucket = bucket;
    ctx->pchild = pchild;
    ctx->threads = conf->threads.threads_per_child;
    ctx->thread_limit = retained->first_thread_limit;
    ctx->generation = retained->mpm->my_generation;
    ctx->epoll_fd = ctx->wake_fd = ctx->nudge_fd = -1;
    ctx->spare_pools = apr_pcalloc(pchild, sizeof(apr_pool_t *)
                                           * (ctx->threads + SPARE_POOLS));
    for (i = 0; i < NUM_WAITS; i++) {
        timer_queue_init(&ctx->queues[i]);
    }
    for (i = 0; i < ctx->threads; i++) {
        ap_update_child_status_from_indexes(slot, i, SERVER_STARTING, NULL);
    }

    ap_fatal_signal_child_setup(s);
    bucket_listeners_keep_only(conf, bucket);
    bucket_listeners_child_steering(s, conf, retained, bucket);
    if (setup_epoll(ctx) != APR_SUCCESS
        || setup_threads_sync(ctx) != APR_SUCCESS) {
        event_child_exit(ctx, APEXIT_CHILDFATAL, 1);
    }
    if (ap_run_drop_privileges(pchild, s)) {
        event_child_exit(ctx, APEXIT_CHILDFATAL, 1);
    }
    if (parent != 0) {
        leave_with_parent(ctx, parent);
    }
    ap_run_child_init(pchild, s);
    ap_get_scoreboard_process(slot)->not_accepting = 0;

    apr_threadattr_create(&attr, pchild);
    apr_threadattr_detach_set(attr, 0);
    if (ap_thread_stacksize != 0) {
        apr_threadattr_stacksize_set(attr, ap_thread_stacksize);
    }
    workers = apr_pcalloc(pchild, sizeof(*workers) * ctx->threads);
    lock(ctx);
    for (i = 0; i < ctx->threads; i++) {
        workers[i].num = i;
        workers[i].ctx = ctx;
        rv = apr_thread_create(&workers[i].thread, attr, worker_main,
                               &workers[i], pchild);
        if (rv != APR_SUCCESS) {
            unlock(ctx);
            ap_log_error(APLOG_MARK, APLOG_ALERT, rv, s, "bucketed: "
                         "apr_thread_create: unable to create worker "
                         "thread %d", i);
            /* Resource shortage: the workers made so far are stopped. */
            workers[i].thread = NULL;
            SET(ctx, dying);
            stop_workers(ctx, workers);
            event_child_exit(ctx, APEXIT_CHILDSICK, 0);
        }
        ctx->running_workers++;
    }
    unlock(ctx);
    retained->mpm->mpm_state = AP_MPMQ_RUNNING;
    rv = apr_thread_create(&event_thread, attr, event_thread_main, ctx,
                           pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, rv, s, "bucketed: "
                     "apr_thread_create: unable to create the event thread");
        SET(ctx, dying);
        stop_workers(ctx, workers);
        event_child_exit(ctx, APEXIT_CHILDSICK, 0);
    }

    wait_for_signals(ctx, &stop_signals);
    apr_thread_join(&thread_rv, event_thread);
    clean = stop_workers(ctx, workers);
    event_child_exit(ctx, IS(ctx, sick) ? APEXIT_CHILDSICK : 0, clean);
}

apr_status_t event_nudges_create(server_rec *s, bucketed_config *conf,
                                 bucketed_retained *retained)
{
    int b;

    /* Buckets never outnumber ServerLimit, fixed at the first start. */
    if (retained->nudge == NULL) {
        retained->nudge = apr_palloc(s->process->pool, sizeof(int)
                                     * retained->first_server_limit);
        for (b = 0; b < retained->first_server_limit; b++) {
            retained->nudge[b] = -1;
        }
    }
    for (b = 0; b < conf->plan.num_buckets; b++) {
        if (retained->nudge[b] >= 0) {
            continue;
        }
        retained->nudge[b] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (retained->nudge[b] < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, err, s,
                         "bucketed: eventfd for bucket %d", b);
            return err;
        }
    }
    conf->bucket_nudge = retained->nudge;
    return APR_SUCCESS;
}

#else /* !__linux__ */

apr_status_t event_nudges_create(server_rec *s, bucketed_config *conf,
                                 bucketed_retained *retained)
{
    (void)s;
    (void)conf;
    (void)retained;
    return APR_SUCCESS;
}

void event_child_main(server_rec *s, bucketed_config *conf,
                      bucketed_retained *retained, int slot, int bucket,
                      pid_t parent)
{
    (void)conf;
    (void)retained;
    (void)slot;
    (void)bucket;
    (void)parent;
    ap_log_error(APLOG_MARK, APLOG_EMERG, 0, s, "bucketed: ChildModel event "
                 "needs epoll (Linux)");
    exit(APEXIT_CHILDFATAL);
}

#endif /* __linux__ */
