/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_poll.c: the epoll set of a ChildModel event child, which its
 * worker threads wait in themselves (no listener thread hands them
 * anything). It holds:
 *   - the bucket's listening sockets, edge-triggered and with
 *     EPOLLEXCLUSIVE where the kernel has it: a new connection wakes one
 *     waiting worker of one child of the bucket, which accepts it and
 *     serves it; it also looks for connections queued behind it and puts
 *     them in the work queue while other workers are idle for them;
 *   - connections waiting without a thread, one-shot: for the next
 *     keep-alive request or for write completion, each also in a timeout
 *     list the keeper thread (event_keeper.c) watches;
 *   - the work queue's eventfd (a semaphore: one unit per queued
 *     connection), a stop eventfd, and the bucket's eventfd, with which a
 *     child that leaves connections in the accept queue wakes the others.
 *
 * The listening sockets are in the set while the accept rule allows
 * (event_limits.c: the connections, lingering ones aside, at most
 * ThreadsPerChild + idle workers x AsyncRequestWorkerFactor); a child out
 * of the set says so in the scoreboard (not_accepting), where the
 * parent's census sees it.
 *
 * Its own file because everything that adds to the set or takes from the
 * accept queue is here; what runs the connections is event_worker.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#endif

#include "apr_portable.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "child_accept.h"
#include "event_limits.h"
#include "event_queue.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_child.h"

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
                     "epoll_ctl(%d) for descriptor %d in an event child",
                     op, fd);
        return -1;
    }
    return 0;
}

apr_status_t ev_epoll_create(event_child_ctx *ctx, const char *what,
                             int *fd)
{
    *fd = epoll_create1(EPOLL_CLOEXEC);
    if (*fd < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     "bucketed: epoll_create1 for an event child's %s", what);
        return err;
    }
    return APR_SUCCESS;
}

apr_status_t ev_add_eventfd(event_child_ctx *ctx, int epoll_fd, int *fd,
                            int *kind, int kind_value, int flags,
                            unsigned events, const char *what)
{
    struct epoll_event ev;
    int err;

    if (*fd < 0) {
        *fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | flags);
        if (*fd < 0) {
            err = errno;
            ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                         "bucketed: eventfd (%s) in an event child", what);
            return err;
        }
    }
    *kind = kind_value;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.ptr = kind;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, *fd, &ev) < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s, "bucketed: "
                     "epoll_ctl for the eventfd (%s) in an event child",
                     what);
        return err;
    }
    return APR_SUCCESS;
}

apr_status_t ev_setup_epoll(event_child_ctx *ctx)
{
    ap_listen_rec *lr;
    apr_status_t rv;
    int i = 0;

    rv = ev_epoll_create(ctx, "workers", &ctx->epoll_fd);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    /* Level-triggered: every queued unit wakes a worker in turn. */
    rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->work_fd, &ctx->work_kind,
                        EV_WORK, EFD_SEMAPHORE, EPOLLIN, "work queue");
    /* Level-triggered and never read: every worker sees it. */
    if (rv == APR_SUCCESS) {
        rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->stop_fd,
                            &ctx->stop_kind, EV_STOP, 0, EPOLLIN, "stop");
    }
    /* The bucket's, shared with the other children: edge-triggered and
     * never read, so each write wakes one worker of each child once. */
    if (rv == APR_SUCCESS) {
        ctx->nudge_fd = ctx->conf->bucket_nudge[ctx->bucket];
        rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->nudge_fd,
                            &ctx->nudge_kind, EV_NUDGE, 0, EPOLLIN | EPOLLET,
                            "bucket");
    }
    if (rv != APR_SUCCESS) {
        return rv;
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

/* ------------------------------------------------------------ listening */

static int listener_readable(event_child_ctx *ctx, const ev_listener *l)
{
    struct pollfd pfd;
    int n;

    pfd.fd = l->fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    n = poll(&pfd, 1, 0);
    if (n < 0) {
        int err = errno;
        /* Unknown: say readable, so that the bucket is woken for it. */
        ap_log_error(APLOG_MARK, err == EINTR ? APLOG_DEBUG : APLOG_ERR, err,
                     ctx->s, "bucketed: poll of a listening socket");
        return 1;
    }
    return n > 0 && (pfd.revents & POLLIN);
}

static int any_listener_readable(event_child_ctx *ctx)
{
    int i;

    for (i = 0; i < ctx->num_listeners; i++) {
        if (listener_readable(ctx, &ctx->listeners[i])) {
            return 1;
        }
    }
    return 0;
}

/* EPOLLEXCLUSIVE wakes one waiting child per new connection; a child that
 * was woken but leaves connections in the accept queue (it filled up, or
 * is leaving) would strand them until the next connection wakes someone,
 * which never comes when every request in flight waits on one of them (a
 * request proxied to its own server). So such a child wakes every child
 * of its bucket, and those that can take connections try. */
static void nudge_bucket(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->nudge_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: write to bucket %d's eventfd", ctx->bucket);
    }
}

void ev_nudge_if_waiting(event_child_ctx *ctx)
{
    if (any_listener_readable(ctx)) {
        nudge_bucket(ctx);
    }
}

/* Connections the accept rule counts: lingering ones and idle keep-alive
 * ones already being closed to make room are on their way out. */
static int open_connections(event_child_ctx *ctx)
{
    return ctx->connections - ctx->queues[WAIT_LINGER].count
           - ctx->reclaimed;
}

static int closing_down(event_child_ctx *ctx)
{
    return IS(ctx, leaving) || IS(ctx, dying);
}

/* How a listening socket is in the set: edge-triggered, and exclusive
 * where the kernel has it. */
static unsigned listener_events(const event_child_ctx *ctx)
{
    return EPOLLIN | EPOLLET
           | (ctx->conf->kernel.epoll_exclusive ? EPOLLEXCLUSIVE : 0);
}

static int input_waiting(event_child_ctx *ctx, ev_conn *ec);

/* At most one reclaim warning per child this often. */
#define RECLAIM_LOG_INTERVAL apr_time_from_sec(60)

int ev_shut_out_locked(event_child_ctx *ctx)
{
    return !ctx->listening && !closing_down(ctx)
           && ctx->queues[WAIT_KEEPALIVE].count > 0
           && any_listener_readable(ctx);
}

int ev_reclaim_keepalive_locked(event_child_ctx *ctx)
{
    timer_queue *q = &ctx->queues[WAIT_KEEPALIVE];
    event_timer *t = q->head;
    int want = event_reclaim_count(open_connections(ctx),
                                   ctx->idle_workers - ctx->queued,
                                   ctx->threads, ctx->conf->async_factor,
                                   q->count);
    apr_time_t now = apr_time_now();
    int done = 0;

    /* Oldest first: the list is in deadline order (virtual hosts with
     * another KeepAliveTimeout aside). */
    while (done < want && t != NULL) {
        event_timer *next = t->next;
        ev_conn *ec = (ev_conn *)((char *)t - APR_OFFSETOF(ev_conn, timer));
        apr_interval_time_t idle_for =
            now - (t->expiry - ec->c->base_server->keep_alive_timeout);

        if (event_reclaimable(idle_for) && !input_waiting(ctx, ec)) {
            timer_queue_remove(q, t);
            ec->reclaimed = 1;
            ctx->reclaimed++;
            ev_force_ready_locked(ctx, ec);
            done++;
        }
        t = next;
    }
    if (done > 0) {
        bucket_stats_count_reclaimed(ctx->retained, ctx->bucket, done);
        if (now - ctx->reclaim_logged >= RECLAIM_LOG_INTERVAL) {
            ctx->reclaim_logged = now;
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, ctx->s, "bucketed: "
                         "child %" APR_PID_T_FMT " of bucket %d is at its "
                         "connection limit (%d open, ThreadsPerChild %d, "
                         "AsyncRequestWorkerFactor): closing %d idle "
                         "keep-alive connection(s) so that new ones get in "
                         "(raise MaxRequestWorkers or "
                         "AsyncRequestWorkerFactor to keep them)", getpid(),
                         ctx->bucket, ctx->connections, ctx->threads, done);
        }
        ev_update_listening_locked(ctx);
    }
    return done;
}

void ev_update_listening_locked(event_child_ctx *ctx)
{
    unsigned events = listener_events(ctx);
    int want, i;

    want = !closing_down(ctx)
           && event_should_listen(open_connections(ctx),
                                  ctx->idle_workers - ctx->queued,
                                  ctx->threads, ctx->conf->async_factor);
    if (want == ctx->listening) {
        return;
    }
    for (i = 0; i < ctx->num_listeners; i++) {
        ev_listener *l = &ctx->listeners[i];
        epoll_set(ctx, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, events,
                  l);
    }
    ctx->listening = want;
    ap_get_scoreboard_process(ctx->slot)->not_accepting = !want;
    /* A connection that woke this child may be waiting still. */
    if (!want) {
        ev_nudge_if_waiting(ctx);
    }
}

/* A leaving child closes its copies of the listening sockets, so that
 * once every holder has closed its own (the parent closes its at a
 * graceful stop) the kernel stops queueing connections for the bucket.
 * Workers may still poll or accept on these descriptors (an event taken
 * before the sockets left the set, a reservation made before the child
 * began to leave): a plain close() would let the number be reused by
 * whatever the process opens next. So each is replaced (dup2(), atomic)
 * by a socket that never listens: a late poll() finds nothing to read and
 * a late accept() fails with EINVAL, which ap_unixd_accept() returns
 * quietly for an inactive listener. The pool cleanup closes the
 * replacement. Under mutex, once ev_update_listening_locked() has taken
 * them out of the set (an epoll entry belongs to the open socket, which
 * others still hold, not to this descriptor). */
void ev_close_listeners_locked(event_child_ctx *ctx)
{
    int placeholder, i;

    if (ctx->listeners_closed || ctx->listening) {
        return;
    }
    ctx->listeners_closed = 1;
    placeholder = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (placeholder < 0) {
        int err = errno;
        /* The sockets stay open until the child exits, as before. */
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: socket() to close a leaving child's "
                     "listeners");
        return;
    }
    for (i = 0; i < ctx->num_listeners; i++) {
        ev_listener *l = &ctx->listeners[i];

        l->lr->active = 0;
        if (dup3(placeholder, l->fd, O_CLOEXEC) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                         "bucketed: dup3() over listening socket %pI",
                         l->lr->bind_addr);
        }
    }
    if (close(placeholder) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: close of a placeholder socket");
    }
}

/* ------------------------------------------------------------ accepting */

/* Whether one more connection may be accepted, with `idle` workers free
 * for it (under mutex). */
static int may_accept_locked(event_child_ctx *ctx, int idle)
{
    return !closing_down(ctx)
           && event_may_accept(open_connections(ctx), idle, ctx->threads,
                               ctx->conf->async_factor)
           && (ap_max_requests_per_child <= 0
               || ctx->served < ap_max_requests_per_child);
}

/* A connection about to be accepted is counted first, since workers accept
 * at the same time; and it gets its pool in the same critical section
 * (under mutex). Returns whether it was the child's last one under
 * MaxConnectionsPerChild. */
static int reserve_locked(event_child_ctx *ctx, apr_pool_t **ptrans)
{
    ev_count_connection_locked(ctx, 1);
    *ptrans = ev_take_spare_pool_locked(ctx);
    if (ap_max_requests_per_child <= 0) {
        return 0;
    }
    ctx->served++;
    return ctx->served == ap_max_requests_per_child;
}

/* EPOLLEXCLUSIVE wakes the first child in the socket's wait queue that has
 * a worker waiting, and every child has many: the first child registered
 * would take nearly every new connection, up to its accept rule, and the
 * connections of a busy moment would crowd into a few children and queue
 * for their workers while others idle (the idle bench workload: active
 * p99 211 ms against 20 ms with turns). Re-registering the socket puts
 * the child at the back of the queue, so the bucket's children take
 * turns; every TURN_EVERY accepts, since two epoll_ctl() calls on every
 * accept cost the Connection: close path about a tenth more CPU. */
#define TURN_EVERY 8

static void take_turns(event_child_ctx *ctx, ev_listener *l)
{
    if (!ctx->conf->kernel.epoll_exclusive
        || apr_atomic_inc32(&ctx->accepted) % TURN_EVERY != 0) {
        return;
    }
    ev_lock(ctx);
    if (ctx->listening) {
        epoll_set(ctx, EPOLL_CTL_DEL, l->fd, 0, NULL);
        epoll_set(ctx, EPOLL_CTL_ADD, l->fd, listener_events(ctx), l);
    }
    ev_unlock(ctx);
}

/* Accepts on l for a reservation: NULL, with the reservation undone, when
 * none waits or accepting failed. */
static ev_conn *accept_reserved(event_child_ctx *ctx, ev_listener *l,
                                apr_pool_t *ptrans, int last)
{
    apr_socket_t *csd = NULL;
    apr_status_t rv;
    ev_conn *ec;

    if (ptrans == NULL) {
        ptrans = ev_new_pool(ctx);
    }
    if (ptrans == NULL) {
        SET(ctx, sick);
        SET(ctx, leaving);
        rv = APR_ENOMEM;
    }
    else {
        rv = child_accept_on(l->lr, &csd, ptrans);
    }
    if (rv != APR_SUCCESS || csd == NULL) {
        if (rv == APR_EGENERAL) {
            /* Logged by ap_unixd_accept: a resource shortage. */
            SET(ctx, sick);
            SET(ctx, leaving);
        }
        if (ptrans != NULL) {
            apr_pool_clear(ptrans);
        }
        ev_lock(ctx);
        ev_count_connection_locked(ctx, -1);
        ctx->served -= ap_max_requests_per_child > 0;
        if (ptrans != NULL) {
            ev_keep_spare_pool_locked(ctx, ptrans);
        }
        ev_update_listening_locked(ctx);
        ev_unlock(ctx);
        return NULL;
    }
    bucket_stats_count_accept(ctx->retained, ctx->bucket);
    take_turns(ctx, l);
    ec = apr_pcalloc(ptrans, sizeof(*ec));
    ec->kind = EV_CONN;
    ec->wait = WAIT_NONE;
    ec->ptrans = ptrans;
    ec->csd = csd;
    apr_os_sock_get(&ec->fd, csd);
    if (last) {
        SET(ctx, leaving);
        ev_wake_keeper(ctx);
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, ctx->s, "bucketed: child %"
                     APR_PID_T_FMT " reached MaxConnectionsPerChild, "
                     "leaving", getpid());
    }
    return ec;
}

/* Connections queued behind the one a worker took go to the work queue
 * while idle workers are left for them. A poll() looks first, so the
 * usual case (none behind) takes no lock. */
static void accept_behind(event_child_ctx *ctx, ev_listener *l)
{
    while (listener_readable(ctx, l)) {
        apr_pool_t *ptrans = NULL;
        ev_conn *ec;
        int ok, last = 0;

        ev_lock(ctx);
        ok = may_accept_locked(ctx, ctx->idle_workers - ctx->queued);
        if (ok) {
            last = reserve_locked(ctx, &ptrans);
        }
        /* Out of the set when the rule says so, which wakes the bucket
         * for what waits; with no idle worker left, ev_nudge_if_waiting()
         * does. */
        ev_update_listening_locked(ctx);
        ev_unlock(ctx);
        if (!ok) {
            return;
        }
        ec = accept_reserved(ctx, l, ptrans, last);
        if (ec == NULL) {
            return;
        }
        ev_lock(ctx);
        ev_queue_work_locked(ctx, ec);
        ev_unlock(ctx);
    }
}

ev_conn *ev_accept_for_worker_locked(event_child_ctx *ctx, ev_listener *l)
{
    apr_pool_t *ptrans = NULL;
    ev_conn *ec;
    int ok, last = 0;

    /* The calling worker, counted busy already, is the one free for it. */
    ok = may_accept_locked(ctx, ctx->idle_workers - ctx->queued + 1);
    if (ok) {
        last = reserve_locked(ctx, &ptrans);
    }
    ev_update_listening_locked(ctx);
    ev_unlock(ctx);
    if (!ok) {
        if (listener_readable(ctx, l)) {
            nudge_bucket(ctx);
        }
        return NULL;
    }
    ec = accept_reserved(ctx, l, ptrans, last);
    if (ec != NULL) {
        accept_behind(ctx, l);
    }
    return ec;
}

ev_conn *ev_accept_nudged_locked(event_child_ctx *ctx)
{
    ev_conn *ec = NULL;
    int i;

    ev_unlock(ctx);
    for (i = 0; i < ctx->num_listeners && ec == NULL; i++) {
        ev_lock(ctx);
        ec = ev_accept_for_worker_locked(ctx, &ctx->listeners[i]);
    }
    return ec;
}

/* ------------------------------------------ connections waiting in epoll */

void ev_start_waiting(event_child_ctx *ctx, ev_conn *ec)
{
    apr_interval_time_t timeout;
    unsigned events = EPOLLONESHOT;
    int op;

    if (ec->wait == WAIT_KEEPALIVE) {
        timeout = ec->c->base_server->keep_alive_timeout;
        events |= EPOLLIN;
    }
    else {
        timeout = ec->c->base_server->timeout;
        events |= ec->want_write ? EPOLLOUT : EPOLLIN;
    }
    op = ec->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    /* Set before the entry is armed: from then on another worker may own
     * the connection. */
    ec->registered = 1;
    ev_lock(ctx);
    timer_queue_insert(&ctx->queues[ec->wait], &ec->timer,
                       apr_time_now() + timeout);
    ev_unlock(ctx);
    if (epoll_set(ctx, op, ec->fd, events, ec) < 0) {
        /* Not armed, so still this worker's. */
        ev_lock(ctx);
        if (ec->timer.queued) {
            timer_queue_remove(&ctx->queues[ec->wait], &ec->timer);
        }
        ec->wait = WAIT_NONE;
        ec->closing = 0;
        ev_unlock(ctx);
        ec->registered = 0;
        ev_close_conn(ctx, ec);
    }
}

void ev_force_ready_locked(event_child_ctx *ctx, ev_conn *ec)
{
    /* A connection waiting to write is armed for EPOLLOUT only, which
     * shutting the read side does not raise; a full shutdown raises
     * EPOLLHUP, which every entry reports. */
    int how = ec->wait == WAIT_IO && ec->want_write ? SHUT_RDWR : SHUT_RD;

    ec->closing = 1;
    if (shutdown(ec->fd, how) < 0) {
        int err = errno;
        /* ENOTCONN: the client is gone, so the socket is ready anyway. */
        ap_log_error(APLOG_MARK, err == ENOTCONN ? APLOG_DEBUG : APLOG_ERR,
                     err, ctx->s, "bucketed: shutdown of a waiting "
                     "connection");
    }
}

/* Whether a client has sent anything (or closed) on a waiting
 * connection. */
static int input_waiting(event_child_ctx *ctx, ev_conn *ec)
{
    char byte;
    ssize_t n = recv(ec->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);

    if (n < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK) {
            ap_log_error(APLOG_MARK, APLOG_DEBUG, err, ctx->s,
                         "bucketed: recv(MSG_PEEK) on a keep-alive "
                         "connection");
            return 1;
        }
        return 0;
    }
    return 1;
}

int ev_keepalive_request_waiting_locked(event_child_ctx *ctx)
{
    event_timer *t;

    for (t = ctx->queues[WAIT_KEEPALIVE].head; t != NULL; t = t->next) {
        if (input_waiting(ctx, (ev_conn *)((char *)t
                                           - APR_OFFSETOF(ev_conn, timer)))) {
            return 1;
        }
    }
    return 0;
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
