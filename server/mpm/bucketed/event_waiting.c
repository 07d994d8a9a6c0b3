/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_waiting.c: the connections of a ChildModel event child that wait
 * without a thread: in the workers' epoll set, one-shot, for the next
 * keep-alive request or for write completion, each also in a timeout
 * list the keeper thread (event_keeper.c) watches; in the keeper's set
 * while lingering. Also closing a connection, and the idle keep-alive
 * connections a child at its limit closes so that waiting ones get in.
 * What runs the connections is event_worker.c; what puts the listening
 * sockets in the set and accepts is event_accept.c.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/socket.h>
#endif

#include "httpd.h"
#include "http_log.h"

#include "bucketed.h"
#include "policy_event.h"
#include "policy_stall.h"
#include "policy_timeouts.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"
#include "stats.h"

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
    if (ec->wait == WAIT_KEEPALIVE) {
        /* At once, not at the keeper's next pass: a stop on held sockets
         * serves on while the scoreboard shows a keep-alive wait
         * (serve_until_keepalive_ends() in parent.c). */
        ap_get_scoreboard_process(ctx->slot)->keep_alive =
            ctx->timeouts[WAIT_KEEPALIVE].count;
    }
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

int ev_linger_done(ev_conn *ec, char *buf, apr_size_t size)
{
    apr_status_t rv;

    do {
        apr_size_t n = size;
        rv = apr_socket_recv(ec->csd, buf, &n);
    } while (rv == APR_SUCCESS);
    return !APR_STATUS_IS_EAGAIN(rv);
}

void ev_linger_in_keeper(event_child_ctx *ctx, ev_conn *ec)
{
    apr_interval_time_t timeout = apr_time_from_sec(
        ec->short_linger ? LINGER_SHORT_SEC : LINGER_NORMAL_SEC);
    int failed;

    ec->wait = WAIT_LINGER;
    bucket_stats_count_lingered(ctx->retained, ctx->bucket);
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

/* ------------------------------------- reclaiming idle keep-alive ones */

/* At most one reclaim warning per child this often. */
#define RECLAIM_LOG_INTERVAL apr_time_from_sec(60)

/* Closes up to `want` of the oldest idle keep-alive connections idle long
 * enough whose client has sent nothing yet (under mutex). */
static int close_idle_keepalive_locked(event_child_ctx *ctx, int want,
                                       apr_time_t now)
{
    timeout_list *q = &ctx->timeouts[WAIT_KEEPALIVE];
    event_timer *t = q->head;
    int done = 0;

    /* Oldest first: the list is in deadline order (virtual hosts with
     * another KeepAliveTimeout aside). */
    while (done < want && t != NULL) {
        event_timer *next = t->next;
        ev_conn *ec = (ev_conn *)((char *)t - APR_OFFSETOF(ev_conn, timer));
        apr_interval_time_t idle_for =
            now - (t->expiry - ec->c->base_server->keep_alive_timeout);

        if (keepalive_reclaimable(idle_for) && !input_waiting(ctx, ec)) {
            timeout_list_remove(q, t);
            ec->reclaimed = 1;
            ctx->reclaimed++;
            ev_force_ready_locked(ctx, ec);
            done++;
        }
        t = next;
    }
    return done;
}

int ev_reclaim_keepalive_locked(event_child_ctx *ctx, int want)
{
    int open = ev_open_connections(ctx);
    apr_time_t now = apr_time_now();
    int done = close_idle_keepalive_locked(ctx, want, now);

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

#endif /* BUCKETED_HAS_EVENT_MODEL */
