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
 * (policy_event.c: the connections, lingering ones aside, at most
 * ThreadsPerChild + idle workers x AsyncRequestWorkerFactor); a child out
 * of the set says so in the scoreboard (not_accepting), where the
 * parent's census sees it.
 *
 * Its own file because everything that adds to the set or takes from the
 * accept queue is here; what runs the connections is event_worker.c.
 */
#include <errno.h>
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
#include "policy_event.h"
#include "event_timeouts.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_child.h"
#include "stats.h"

apr_status_t ev_epoll_create(event_child_ctx *ctx, const char *what,
                             int *fd)
{
    *fd = epoll_create1(EPOLL_CLOEXEC);
    if (*fd < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     BKLOGNO(00039)
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
                         BKLOGNO(00040)
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
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s, BKLOGNO(00041)
                                                           "bucketed: "
                     "epoll_ctl for the eventfd (%s) in an event child",
                     what);
        return err;
    }
    return APR_SUCCESS;
}

apr_status_t ev_setup_epoll(event_child_ctx *ctx)
{
    const bucket *bk = &ctx->retained->generation->buckets[ctx->bucket];
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
    /* Level-triggered and never read: every worker that waits in the set
     * after it is written sees it. */
    if (rv == APR_SUCCESS) {
        rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->stop_fd,
                            &ctx->stop_kind, EV_STOP, 0, EPOLLIN, "stop");
    }
    /* The bucket's, shared with the other children: edge-triggered and
     * never read, so each write wakes one worker of each child once. */
    if (rv == APR_SUCCESS) {
        ctx->nudge_fd = ctx->retained->buckets[ctx->bucket].nudge;
        rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->nudge_fd,
                            &ctx->nudge_kind, EV_NUDGE, 0, EPOLLIN | EPOLLET,
                            "bucket");
    }
    if (rv != APR_SUCCESS) {
        return rv;
    }
    for (lr = bk->listeners; lr; lr = lr->next) {
        ctx->num_listeners++;
    }
    ctx->listeners = apr_pcalloc(ctx->pchild, sizeof(ev_listener)
                                              * ctx->num_listeners);
    for (lr = bk->listeners; lr; lr = lr->next) {
        ctx->listeners[i].kind = EV_LISTENER;
        ctx->listeners[i].lr = lr;
        apr_os_sock_get(&ctx->listeners[i].fd, lr->sd);
        i++;
    }
    ctx->listening = 0;
    return APR_SUCCESS;
}

/* ------------------------------------------------------------ listening */

static int any_listener_readable(event_child_ctx *ctx)
{
    int i;

    for (i = 0; i < ctx->num_listeners; i++) {
        if (ev_listener_readable(ctx, &ctx->listeners[i])) {
            return 1;
        }
    }
    return 0;
}

void ev_nudge_if_waiting(event_child_ctx *ctx)
{
    if (any_listener_readable(ctx)) {
        ev_nudge_bucket(ctx);
    }
}

static int input_waiting(event_child_ctx *ctx, ev_conn *ec);

/* At most one reclaim warning per child this often. */
#define RECLAIM_LOG_INTERVAL apr_time_from_sec(60)

int ev_shut_out_locked(event_child_ctx *ctx)
{
    return !ctx->listening && !ev_closing_down(ctx)
           && ctx->timeouts[WAIT_KEEPALIVE].count > 0
           && any_listener_readable(ctx);
}

int ev_reclaim_keepalive_locked(event_child_ctx *ctx, int want)
{
    timeout_list *q = &ctx->timeouts[WAIT_KEEPALIVE];
    event_timer *t = q->head;
    int open = ev_open_connections(ctx);
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
            timeout_list_remove(q, t);
            ec->reclaimed = 1;
            ctx->reclaimed++;
            ev_force_ready_locked(ctx, ec);
            done++;
        }
        t = next;
    }
    if (done > 0) {
        if (ctx->swap_until < open) {
            ctx->swap_until = open;
        }
        bucket_stats_count_reclaimed(ctx->retained, ctx->bucket, done);
        if (now - ctx->reclaim_logged >= RECLAIM_LOG_INTERVAL) {
            ctx->reclaim_logged = now;
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, ctx->s, BKLOGNO(00042)
                                                               "bucketed: "
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
    unsigned events = ev_listener_events(ctx);
    int want, i;

    want = !ev_closing_down(ctx)
           && (event_should_listen(ev_open_connections(ctx),
                                   ctx->idle_workers - ctx->queued,
                                   ctx->threads, ctx->conf->async_factor)
               || event_swapping(ev_open_connections(ctx), ctx->swap_until));
    if (want == ctx->listening) {
        return;
    }
    for (i = 0; i < ctx->num_listeners; i++) {
        ev_listener *l = &ctx->listeners[i];
        ev_epoll_set(ctx, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, events,
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
                     BKLOGNO(00043)
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
                         BKLOGNO(00044)
                         "bucketed: dup3() over listening socket %pI",
                         l->lr->bind_addr);
        }
    }
    if (close(placeholder) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00045) "bucketed: close of a placeholder socket");
    }
}

/* ------------------------------------------------- the work queue */

void ev_signal_work_locked(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->work_fd, &one, sizeof(one)) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00046)
                     "bucketed: write to the work queue's eventfd");
    }
}

void ev_queue_work_locked(event_child_ctx *ctx, ev_conn *ec)
{
    ec->next = NULL;
    if (ctx->queue_tail != NULL) {
        ctx->queue_tail->next = ec;
    }
    else {
        ctx->queue_head = ec;
    }
    ctx->queue_tail = ec;
    ctx->queued++;
    ev_signal_work_locked(ctx);
    ev_update_listening_locked(ctx);
}

ev_conn *ev_dequeue_work_locked(event_child_ctx *ctx)
{
    ev_conn *ec = ctx->queue_head;

    if (ec != NULL) {
        ctx->queue_head = ec->next;
        if (ctx->queue_head == NULL) {
            ctx->queue_tail = NULL;
        }
        ctx->queued--;
        ev_update_listening_locked(ctx);
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
    timeout_list_insert(&ctx->timeouts[ec->wait], &ec->timer,
                       apr_time_now() + timeout);
    ev_unlock(ctx);
    if (ev_epoll_set(ctx, op, ec->fd, events, ec) < 0) {
        /* Not armed, so still this worker's. */
        ev_lock(ctx);
        if (ec->timer.listed) {
            timeout_list_remove(&ctx->timeouts[ec->wait], &ec->timer);
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
                     err, ctx->s, BKLOGNO(00047)
                                  "bucketed: shutdown of a waiting "
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
                         BKLOGNO(00048)
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

    for (t = ctx->timeouts[WAIT_KEEPALIVE].head; t != NULL; t = t->next) {
        if (input_waiting(ctx, (ev_conn *)((char *)t
                                           - APR_OFFSETOF(ev_conn, timer)))) {
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------- closing, lingering */

/* The connection count falls: a full child may listen again, and a
 * leaving one may be done. The caller owns the connection, so no other
 * thread changes whether its timer is queued. */
void ev_close_conn(event_child_ctx *ctx, ev_conn *ec)
{
    apr_pool_t *p = ec->ptrans;

    if (ec->timer.listed) {
        ev_lock(ctx);
        timeout_list_remove(&ctx->timeouts[ec->wait], &ec->timer);
        ev_unlock(ctx);
    }
    /* Closes the socket, and frees ec. */
    apr_pool_clear(p);
    ev_lock(ctx);
    ev_keep_spare_pool_locked(ctx, p);
    ev_count_connection_locked(ctx, -1);
    ev_update_listening_locked(ctx);
    if (ctx->connections == 0 && ev_closing_down(ctx)) {
        ev_wake_keeper(ctx);
    }
    ev_unlock(ctx);
}

int ev_keeper_set(event_child_ctx *ctx, int op, ev_conn *ec)
{
    struct epoll_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.ptr = ec;
    if (epoll_ctl(ctx->keeper_fd, op, ec->fd, op == EPOLL_CTL_DEL ? NULL : &ev)
        < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s, BKLOGNO(00049)
                                                         "bucketed: "
                     "epoll_ctl(%d) for a lingering connection", op);
        return -1;
    }
    return 0;
}

void ev_linger_in_keeper(event_child_ctx *ctx, ev_conn *ec)
{
    apr_interval_time_t timeout = apr_time_from_sec(
        ec->short_linger ? LINGER_SHORT_SEC : LINGER_NORMAL_SEC);
    int failed;

    ec->wait = WAIT_LINGER;
    /* In the list and in the set at once, as the keeper sees it: it may
     * close the connection as soon as either is done. */
    ev_lock(ctx);
    timeout_list_insert(&ctx->timeouts[WAIT_LINGER], &ec->timer,
                       apr_time_now() + timeout);
    failed = ev_keeper_set(ctx, EPOLL_CTL_ADD, ec) < 0;
    if (failed) {
        timeout_list_remove(&ctx->timeouts[WAIT_LINGER], &ec->timer);
    }
    /* Lingering ones do not count against the accept rule. */
    ev_update_listening_locked(ctx);
    ev_unlock(ctx);
    if (failed) {
        ev_close_conn(ctx, ec);
    }
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
