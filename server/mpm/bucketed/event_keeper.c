/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_keeper.c: the keeper thread of a ChildModel event child. The
 * workers wait in the child's epoll set themselves (event_waiting.c); the
 * keeper is never on a request's path. It waits in an epoll set of its
 * own, which holds the connections in lingering close and an eventfd to
 * wake it, until the earliest deadline of the timeout lists (at least
 * every EVENT_TICK), and:
 *   - drains what lingering clients still send and closes each once it
 *     has closed its side, many in one wake-up;
 *   - ends waits that timed out: keep-alive (KeepAliveTimeout), write
 *     completion (Timeout), lingering close (2 s short, 30 s normal);
 *   - when the child leaves (graceful restart or stop, MaxConnectionsPer
 *     Child, a move, a new generation), takes the listeners out of the
 *     workers' set and finishes once the child holds no connection. An
 *     idle keep-alive connection stays until its next request (answered
 *     with "Connection: close") or its KeepAliveTimeout, as it would
 *     without the stop: closing it sooner fails a client whose request
 *     crosses the close, and a POST must not be retried. When the child
 *     dies (SIGTERM, or GracefulShutdownTimeout over), it ends every wait
 *     and finishes at once;
 *   - writes the child's connection counts to the scoreboard, which
 *     mod_status's async table shows.
 * A keep-alive or write-completion wait is ended through
 * ev_force_ready_locked(): the connection's own entry in the workers' set
 * fires and a worker closes it, through lingering close unless the child
 * is dying, so the pre-close hooks (mod_ssl's close_notify, mod_http2's
 * GOAWAY) run in a worker.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#endif

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "policy_event.h"
#include "policy_timeouts.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"
#include "stats.h"

/* The keeper looks at its flags at least this often. */
#define EVENT_TICK apr_time_from_msec(100)
/* Events taken from the keeper's set per wake-up. */
#define KEEPER_EVENTS 64

/* The connection whose timer t is. */
#define CONN_OF(t) ((ev_conn *)((char *)(t) - APR_OFFSETOF(ev_conn, timer)))

apr_status_t ev_setup_keeper(event_child_ctx *ctx)
{
    apr_status_t rv = ev_epoll_create(ctx, "keeper", &ctx->keeper_fd);

    if (rv != APR_SUCCESS) {
        return rv;
    }
    return ev_add_eventfd(ctx, ctx->keeper_fd, &ctx->wake_fd, &ctx->wake_kind,
                          EV_WAKE, 0, EPOLLIN, "keeper");
}

/* Keeper only: a lingering connection is closed. Its one-shot entry has
 * fired or is taken out first: a descriptor a forked process (a CGI
 * between fork and exec) still shares would otherwise stay in the set
 * after close() and report a connection that is gone. */
static void close_lingering(event_child_ctx *ctx, ev_conn *ec, int armed)
{
    if (armed) {
        ev_keeper_set(ctx, EPOLL_CTL_DEL, ec);
    }
    ev_close_conn(ctx, ec);
}

/* Reads and discards what a lingering client still sends (its one-shot
 * entry fired); closes once it has closed its side (or the socket
 * failed), otherwise waits again. */
static void drain_linger(event_child_ctx *ctx, ev_conn *ec)
{
    if (ev_linger_done(ec, ctx->linger_buf, sizeof(ctx->linger_buf))
        || ev_keeper_set(ctx, EPOLL_CTL_MOD, ec) < 0) {
        close_lingering(ctx, ec, 0);
    }
}

static void end_wait_locked(event_child_ctx *ctx, event_timer *t)
{
    ev_conn *ec = CONN_OF(t);

    if (t->listed) {
        timeout_list_remove(&ctx->timeouts[ec->wait], t);
    }
    ev_force_ready_locked(ctx, ec);
}

/* Ends every wait of the workers' set in [first, last] (under mutex). */
static void end_all_locked(event_child_ctx *ctx, wait_e first, wait_e last)
{
    int w;

    for (w = first; w <= (int)last; w++) {
        while (ctx->timeouts[w].head != NULL) {
            end_wait_locked(ctx, ctx->timeouts[w].head);
        }
    }
}

/* Lingering connections to close: all of them, or those past their
 * deadline, out of their list and linked through ->next (under mutex). */
static ev_conn *take_lingering_locked(event_child_ctx *ctx, apr_time_t now,
                                      int all)
{
    timeout_list *q = &ctx->timeouts[WAIT_LINGER];
    ev_conn *list = NULL;
    event_timer *t;

    while ((t = all ? q->head : timeout_list_pop_expired(q, now)) != NULL) {
        ev_conn *ec = CONN_OF(t);
        if (t->listed) {
            timeout_list_remove(q, t);
        }
        ec->next = list;
        list = ec;
    }
    return list;
}

/* Those take_lingering_locked() took: still armed. */
static void close_list(event_child_ctx *ctx, ev_conn *list)
{
    ev_conn *ec;

    while ((ec = list) != NULL) {
        list = ec->next;
        close_lingering(ctx, ec, 1);
    }
}

static void expire_locked(event_child_ctx *ctx, apr_time_t now)
{
    event_timer *t;
    int w;

    for (w = WAIT_KEEPALIVE; w <= WAIT_IO; w++) {
        while ((t = timeout_list_pop_expired(&ctx->timeouts[w], now))
               != NULL) {
            end_wait_locked(ctx, t);
        }
    }
}

static void publish_counts_locked(event_child_ctx *ctx)
{
    process_score *ps = ap_get_scoreboard_process(ctx->slot);
    apr_uint32_t waiting_io = 0;
    event_timer *t;

    /* Write completion and a module's wait for I/O share the list. */
    for (t = ctx->timeouts[WAIT_IO].head; t != NULL; t = t->next) {
        waiting_io += CONN_OF(t)->waitio;
    }
    ps->keep_alive = ctx->timeouts[WAIT_KEEPALIVE].count;
    ps->write_completion = ctx->timeouts[WAIT_IO].count - waiting_io;
#ifdef AP_MPMQ_CAN_WAITIO   /* httpd 2.4.63 and later */
    ps->wait_io = waiting_io;
#endif
    ps->lingering_close = ctx->timeouts[WAIT_LINGER].count;
    ps->suspended = ctx->num_suspended;
}

static int wait_ms_locked(event_child_ctx *ctx, apr_time_t now)
{
    apr_time_t next = now + EVENT_TICK;
    apr_time_t callback = ev_next_callback_locked(ctx);
    int w;

    if (callback != 0 && callback < next) {
        next = callback;
    }
    for (w = 0; w < NUM_WAITS; w++) {
        apr_time_t e = timeout_list_next_expiry(&ctx->timeouts[w]);
        if (e != 0 && e < next) {
            next = e;
        }
    }
    return next <= now ? 0 : (int)((next - now + 999) / 1000);
}

/* What the keeper remembers between passes. */
typedef struct {
    int stopping;
    apr_uint64_t waits;              /* ctx->waits when stuck_since was set */
    apr_time_t stuck_since;          /* 0: a worker was idle or done */
} keeper_state;

/*
 * A child at its connection limit takes its sockets out of the set; a
 * connection then waits in the bucket's accept queue for another child of
 * the bucket (which takes it in microseconds), for a request of this one
 * to finish (milliseconds), for a child the parent adds to the bucket
 * (its stall check and a child's start: a few hundred milliseconds), or,
 * when every child of the bucket holds idle keep-alive connections up to
 * its limit and no slot is left, for KeepAliveTimeout. The parent's stall
 * check tells which: this child closes its oldest idle keep-alive
 * connections to make room (ev_reclaim_keepalive_locked) only when
 * event_should_reclaim() says nothing else will take them, its share of
 * the bucket's waiting connections (event_reclaim_share()), and takes as
 * many in their place. Under mutex.
 */
static void reclaim_if_shut_out_locked(event_child_ctx *ctx, apr_time_t now)
{
    apr_time_t census_at = bucket_stats_census_at(ctx->retained);

    /* Once per census: the waiting count it goes by is the parent's, and
     * what this child closes now is not in it yet. */
    if (census_at == ctx->reclaim_census || !ev_shut_out_locked(ctx)
        || !event_should_reclaim(
               bucket_stats_stalled_for(ctx->retained, ctx->bucket),
               bucket_stats_can_grow(ctx->retained, ctx->bucket),
               ctx->swapped_at ? now - ctx->swapped_at : -1)) {
        return;
    }
    ctx->reclaim_census = census_at;
    if (ev_reclaim_keepalive_locked(ctx, event_reclaim_share(
            bucket_stats_waiting(ctx->retained, ctx->bucket),
            bucket_stats_children(ctx->retained, ctx->bucket),
            ctx->idle_workers - ctx->queued,
            ctx->timeouts[WAIT_KEEPALIVE].count)) > 0) {
        ctx->swapped_at = now;
    }
}

/*
 * A keep-alive connection whose next request has come while every worker
 * of the child is busy waits for one of them. When those workers wait on
 * that very request (one mod_proxy sends to this server over a pooled
 * connection this child serves), none ever comes. So when for
 * EVENT_STUCK_GRACE no worker has been idle or finished anything and such
 * a request waits (event_stuck_verdict()), the keeper starts an extra
 * worker for it, while
 * ThreadLimit leaves scoreboard room; it retires once it would wait idle.
 * A child that is merely busy finishes requests and gets none.
 * (Stock event closes a busy child's idle keep-alive connections, which
 * fails a client that reuses one just then and does not help a request
 * already sent.) Under mutex; returns whether to start one.
 */
static int want_extra_worker_locked(event_child_ctx *ctx, keeper_state *ks,
                                    apr_time_t now)
{
    event_stuck_e verdict = event_stuck_verdict(
        ctx->idle_workers, ctx->waits != ks->waits,
        ctx->timeouts[WAIT_KEEPALIVE].count, now - ks->stuck_since);

    if (verdict == EVENT_NOT_STUCK) {
        ks->waits = ctx->waits;
        ks->stuck_since = now;
        return 0;
    }
    if (verdict == EVENT_STUCK_WAIT
        || !ev_keepalive_request_waiting_locked(ctx)) {
        return 0;
    }
    /* The next one, if still needed, after another grace. */
    ks->stuck_since = now;
    return 1;
}

/* One look at the flags, deadlines and counts. Returns the milliseconds
 * to wait for the keeper's set, or -1 when the keeper is done. */
static int keep(event_child_ctx *ctx, keeper_state *ks)
{
    apr_time_t now = apr_time_now();
    ev_conn *to_close;
    int wait_ms = -1, extra = 0, look;

    ev_lock(ctx);
    /* Read here, a tick at most late, rather than at every accept: a child
     * that reaches its limit meanwhile is replaced by the stop
     * (parent_start_in_starved_buckets()). */
    ctx->server_closing = bucket_stats_closing(ctx->retained);
    if (child_life_slot_quiescing(ctx->life)) {
        CHILD_LIFE_SET(ctx->life, leaving);
    }
    ev_update_listening_locked(ctx);
    look = apr_atomic_xchg32(&ctx->asked_to_look, 0);
    /* Out of the set once leaving or dying: close this child's copies. */
    if (ev_closing_down(ctx)) {
        ev_close_listeners_locked(ctx);
    }
    if (CHILD_LIFE_IS(ctx->life, dying)) {
        end_all_locked(ctx, WAIT_KEEPALIVE, WAIT_IO);
        to_close = take_lingering_locked(ctx, now, 1);
    }
    else {
        if (CHILD_LIFE_IS(ctx->life, leaving) && !ks->stopping) {
            ks->stopping = 1;
            ap_get_scoreboard_process(ctx->slot)->quiescing = 1;
        }
        expire_locked(ctx, now);
        ev_hand_out_due_callbacks_locked(ctx, now);
        to_close = take_lingering_locked(ctx, now, 0);
        reclaim_if_shut_out_locked(ctx, now);
        extra = want_extra_worker_locked(ctx, ks, now);
        if (!ks->stopping || ctx->connections > 0) {
            wait_ms = wait_ms_locked(ctx, now);
        }
    }
    publish_counts_locked(ctx);
    ev_unlock(ctx);
    /* Unlocked: the bucket's eventfd is shared with its other children.
     * A child whose copies of the sockets are closed (leaving; only this
     * thread closes them) cannot see what waits: it wakes the bucket all
     * the same. */
    if (look && ctx->listeners_closed) {
        ev_nudge_bucket(ctx);
    }
    else if (look) {
        ev_nudge_if_waiting(ctx);
    }
    close_list(ctx, to_close);
    if (extra && ev_start_extra_worker(ctx)) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, ctx->s, BKLOGNO(00036)
                                                        "bucketed: no "
                     "worker of the child idle or done for %d ms while a "
                     "keep-alive request waits: started an extra worker",
                     (int)apr_time_as_msec(EVENT_STUCK_GRACE));
    }
    if (wait_ms < 0) {
        return -1;
    }
    /* What was just closed may have been the last. */
    if (ks->stopping && to_close != NULL) {
        return 0;
    }
    return wait_ms;
}

void *APR_THREAD_FUNC ev_keeper_main(apr_thread_t *thd, void *arg)
{
    event_child_ctx *ctx = arg;
    struct epoll_event events[KEEPER_EVENTS];
    keeper_state ks = { 0 };
    int wait_ms;

    while ((wait_ms = keep(ctx, &ks)) >= 0) {
        int n, i;

        n = epoll_wait(ctx->keeper_fd, events, KEEPER_EVENTS, wait_ms);
        if (n < 0) {
            int err = errno;
            if (err != EINTR) {
                ap_log_error(APLOG_MARK, APLOG_CRIT, err, ctx->s,
                             BKLOGNO(00037)
                             "bucketed: epoll_wait in the keeper");
                SET(ctx, sick);
                CHILD_LIFE_SET(ctx->life, dying);
            }
            continue;
        }
        for (i = 0; i < n; i++) {
            if (*(int *)events[i].data.ptr == EV_WAKE) {
                uint64_t count;
                if (read(ctx->wake_fd, &count, sizeof(count)) < 0
                    && errno != EAGAIN) {
                    int err = errno;
                    ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                                 BKLOGNO(00038)
                                 "bucketed: read of the keeper's eventfd");
                }
            }
            else {
                drain_linger(ctx, events[i].data.ptr);
            }
        }
    }
    SET(ctx, keeper_done);
    apr_thread_exit(thd, APR_SUCCESS);
    return NULL;
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
