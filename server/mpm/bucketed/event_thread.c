/*
 * event_thread.c: the event thread of a ChildModel event child. It owns
 * an epoll set holding the bucket's listening sockets (EPOLLEXCLUSIVE
 * where the kernel has it, so the bucket's children are not woken in a
 * herd) and every connection that waits without a thread, each in a
 * timeout list: for its next keep-alive request (KeepAliveTimeout), for
 * the socket to drain its pending output (write completion, Timeout), or
 * for the client's FIN in lingering close (2 s short, 30 s normal). A
 * ready connection goes to the workers' queue (event_worker.c); expired
 * keep-alive and write-completion connections go there too, for their
 * lingering close.
 *
 * It accepts only while a worker is idle for the new connection and the
 * child holds no more than ThreadsPerChild + idle workers x
 * AsyncRequestWorkerFactor connections (lingering ones aside); otherwise
 * it takes its listening sockets out of the epoll set, so the kernel wakes
 * another child of the bucket instead, and says so in the scoreboard
 * (not_accepting), where the parent's census sees it. Leaving, it stops
 * accepting, closes the idle keep-alive connections and finishes once the
 * child holds no connection; dying, it closes whatever waits at once.
 *
 * Its own file because it is the only thread that waits in epoll: nothing
 * here blocks in httpd's hooks.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif

#include "apr_portable.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "child_accept.h"
#include "event_queue.h"

APLOG_USE_MODULE(mpm_bucketed);

#ifdef __linux__

#include "event_child.h"

/* The event thread looks at its flags at least this often. */
#define EVENT_TICK apr_time_from_msec(100)

/* The connection whose timer t is. */
#define CONN_OF(t) ((ev_conn *)((char *)(t) - APR_OFFSETOF(ev_conn, timer)))

/* Any thread: a write to the eventfd in the epoll set. */
void ev_wake_event_thread(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: write to the event thread's eventfd");
    }
}

/* Before the threads start (the process's set-up). */
apr_status_t ev_setup_epoll(event_child_ctx *ctx)
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
    ev_lock(ctx);
    ctx->listeners_off = !on;
    ev_unlock(ctx);
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
    ev_queue_for_worker(ctx, ec);
}

static void close_in_event_thread(event_child_ctx *ctx, ev_conn *ec)
{
    remove_timer(ctx, ec);
    /* Closing the descriptor takes it out of the epoll set. */
    ev_close_conn(ctx, ec);
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
        ev_close_conn(ctx, ec);
        return;
    }
    ec->registered = 1;
    timer_queue_insert(queue_of(ctx, ec->wait), &ec->timer, now + timeout);
}

static void take_handbacks(event_child_ctx *ctx, apr_time_t now)
{
    ev_conn *list, *ec;

    ev_lock(ctx);
    list = ctx->handback;
    ctx->handback = NULL;
    ev_unlock(ctx);
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
    ev_queue_for_worker(ctx, ec);
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
        ev_close_conn(ctx, CONN_OF(t));
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
    ev_lock(ctx);
    idle = ctx->idle_workers - ctx->queued;
    conns = ctx->connections - ctx->queues[WAIT_LINGER].count;
    ev_unlock(ctx);
    return event_may_accept(conns, idle, ctx->threads,
                            ctx->conf->async_factor);
}

/* Accepts from one listener while this child may take connections.
 * Returns 1 when it stopped with connections possibly left in the queue
 * (no EAGAIN seen), 0 when the queue is empty or accepting failed. */
static int accept_ready(event_child_ctx *ctx, ev_listener *l)
{
    while (may_accept(ctx)) {
        apr_pool_t *ptrans = ev_get_pool(ctx);
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
            ev_put_pool(ctx, ptrans);
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
        ev_lock(ctx);
        ctx->connections++;
        ev_unlock(ctx);
        ev_queue_for_worker(ctx, ec);
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

    ev_lock(ctx);
    ps->connections = ctx->connections;
    ev_unlock(ctx);
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

    ev_lock(ctx);
    done = ctx->connections == 0 && ctx->handback == NULL;
    ev_unlock(ctx);
    return done;
}

void *APR_THREAD_FUNC ev_event_thread_main(apr_thread_t *thd, void *arg)
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

#endif /* __linux__ */
