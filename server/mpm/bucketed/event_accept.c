/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_accept.c: a ChildModel event worker accepts: a reservation under
 * the accept rule (policy_event.c) taken in the critical section its
 * wake-up is counted in, the accept itself, the bucket's children taking
 * turns at the front of the socket's wait queue, and connections found
 * waiting behind the one taken, queued for idle workers.
 */
#include <errno.h>
#ifdef __linux__
#include <sys/socket.h>
#endif

#include "apr_portable.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "child_accept.h"
#include "policy_event.h"
#include "event_timeouts.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_child.h"
#include "stats.h"

/* Whether one more connection may be accepted, with `idle` workers free
 * for it (under mutex). */
static int may_accept_locked(event_child_ctx *ctx, int idle)
{
    int open = ev_open_connections(ctx);

    return !ev_closing_down(ctx)
           && (event_may_accept(open, idle, ctx->threads,
                                ctx->conf->async_factor)
               || (idle > 0 && event_swapping(open, ctx->swap_until)))
           && child_life_may_serve_more(ctx->served);
}

/* A connection about to be accepted is counted first, since workers accept
 * at the same time; and it gets its pool in the same critical section
 * (under mutex). Returns whether it was the child's last one under
 * MaxConnectionsPerChild. */
static int reserve_locked(event_child_ctx *ctx, apr_pool_t **ptrans)
{
    ev_count_connection_locked(ctx, 1);
    if (!event_swapping(ev_open_connections(ctx), ctx->swap_until)) {
        ctx->swap_until = 0;
    }
    *ptrans = ev_take_spare_pool_locked(ctx);
    if (ap_max_requests_per_child <= 0) {
        return 0;
    }
    ctx->served++;
    return !child_life_may_serve_more(ctx->served);
}

/* EPOLLEXCLUSIVE wakes the first child in the socket's wait queue that has
 * a worker waiting, and every child has many: the first child registered
 * would take nearly every new connection, up to its accept rule, and the
 * connections of a busy moment would crowd into a few children and queue
 * for their workers while others idle. Re-registering the socket puts the
 * child at the back of the queue, so the bucket's children take turns;
 * every EVENT_TURN_EVERY accepts, since two epoll_ctl() calls on every
 * accept cost the Connection: close path measurably more CPU (the figures
 * for both: docs/design.md, "taking turns"). */
static void take_turns(event_child_ctx *ctx, ev_listener *l)
{
    /* apr_atomic_inc32() returns the count before this accept. */
    if (!event_takes_turn(apr_atomic_inc32(&ctx->accepted),
                          ctx->conf->kernel.epoll_exclusive)) {
        return;
    }
    ev_lock(ctx);
    if (ctx->listening) {
        ev_epoll_set(ctx, EPOLL_CTL_DEL, l->fd, 0, NULL);
        ev_epoll_set(ctx, EPOLL_CTL_ADD, l->fd, ev_listener_events(ctx), l);
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
        CHILD_LIFE_SET(ctx->life, leaving);
        rv = APR_ENOMEM;
    }
    else {
        rv = child_accept_on(l->lr, &csd, ptrans);
    }
    if (rv != APR_SUCCESS || csd == NULL) {
        if (rv == APR_EGENERAL) {
            /* Logged by ap_unixd_accept: a resource shortage. */
            SET(ctx, sick);
            CHILD_LIFE_SET(ctx->life, leaving);
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
        CHILD_LIFE_SET(ctx->life, leaving);
        ev_wake_keeper(ctx);
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, ctx->s, BKLOGNO(00020)
                                                         "bucketed: child %"
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
    while (ev_listener_readable(ctx, l)) {
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
        if (ev_listener_readable(ctx, l)) {
            ev_nudge_bucket(ctx);
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

#endif /* BUCKETED_HAS_EVENT_MODEL */
