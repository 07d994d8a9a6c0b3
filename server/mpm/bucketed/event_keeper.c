/*
 * event_keeper.c: the keeper thread of a ChildModel event child. The
 * workers wait in the epoll set themselves (event_poll.c); the keeper is
 * never on a request's path. It wakes at the earliest deadline of the
 * timeout lists (at least every EVENT_TICK) or when told to, and:
 *   - ends waits that timed out: keep-alive (KeepAliveTimeout), write
 *     completion (Timeout), lingering close (2 s short, 30 s normal);
 *   - when the child leaves (graceful restart or stop, MaxConnectionsPer
 *     Child, a move, a new generation), takes the listeners out of the
 *     epoll set and ends every keep-alive wait, and finishes once the
 *     child holds no connection; when it dies (SIGTERM), ends every wait
 *     and finishes at once;
 *   - writes the child's connection counts to the scoreboard, which
 *     mod_status's async table shows.
 * A wait is ended through ev_force_ready_locked(): the connection's own
 * epoll entry fires and a worker closes it, through lingering close
 * unless the child is dying, so the pre-close hooks (mod_ssl's
 * close_notify, mod_http2's GOAWAY) run in a worker.
 */
#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "event_queue.h"

APLOG_USE_MODULE(mpm_bucketed);

#ifdef __linux__

#include "event_child.h"

/* The keeper looks at its flags at least this often. */
#define EVENT_TICK apr_time_from_msec(100)

/* The connection whose timer t is. */
#define CONN_OF(t) ((ev_conn *)((char *)(t) - APR_OFFSETOF(ev_conn, timer)))

void ev_wake_keeper_locked(event_child_ctx *ctx)
{
    apr_thread_cond_signal(ctx->keeper_wake);
}

static void end_wait(event_child_ctx *ctx, event_timer *t)
{
    ev_conn *ec = CONN_OF(t);

    if (t->queued) {
        timer_queue_remove(&ctx->queues[ec->wait], t);
    }
    ev_force_ready_locked(ctx, ec);
}

static void expire(event_child_ctx *ctx, apr_time_t now)
{
    int w;

    for (w = 0; w < NUM_WAITS; w++) {
        event_timer *t;
        while ((t = timer_queue_pop_expired(&ctx->queues[w], now)) != NULL) {
            end_wait(ctx, t);
        }
    }
}

static void end_all(event_child_ctx *ctx, wait_e first, wait_e last)
{
    int w;

    for (w = first; w <= (int)last; w++) {
        while (ctx->queues[w].head != NULL) {
            end_wait(ctx, ctx->queues[w].head);
        }
    }
}

static void publish_counts(event_child_ctx *ctx)
{
    process_score *ps = ap_get_scoreboard_process(ctx->slot);

    ps->connections = ctx->connections;
    ps->keep_alive = ctx->queues[WAIT_KEEPALIVE].count;
    ps->write_completion = ctx->queues[WAIT_IO].count;
    ps->lingering_close = ctx->queues[WAIT_LINGER].count;
    ps->suspended = 0;
}

static apr_interval_time_t time_to_next(event_child_ctx *ctx, apr_time_t now)
{
    apr_time_t next = now + EVENT_TICK;
    int w;

    for (w = 0; w < NUM_WAITS; w++) {
        apr_time_t e = timer_queue_next_expiry(&ctx->queues[w]);
        if (e != 0 && e < next) {
            next = e;
        }
    }
    /* A deadline already past: the next pass ends it. */
    return next > now ? next - now : 1;
}

void *APR_THREAD_FUNC ev_keeper_main(apr_thread_t *thd, void *arg)
{
    event_child_ctx *ctx = arg;
    int stopping = 0;

    ev_lock(ctx);
    for (;;) {
        apr_time_t now = apr_time_now();

        if (ap_scoreboard_image->global->running_generation
            != ctx->generation) {
            SET(ctx, leaving);
        }
        ev_update_listening_locked(ctx);
        if (IS(ctx, dying)) {
            end_all(ctx, WAIT_KEEPALIVE, WAIT_LINGER);
            break;
        }
        if (IS(ctx, leaving) && !stopping) {
            stopping = 1;
            ap_get_scoreboard_process(ctx->slot)->quiescing = 1;
        }
        if (stopping) {
            /* Handed back to wait for a next request after the sweep
             * before: ended here too. */
            end_all(ctx, WAIT_KEEPALIVE, WAIT_KEEPALIVE);
            if (ctx->connections == 0) {
                break;
            }
        }
        expire(ctx, now);
        publish_counts(ctx);
        apr_thread_cond_timedwait(ctx->keeper_wake, ctx->mutex,
                                  time_to_next(ctx, now));
    }
    publish_counts(ctx);
    ev_unlock(ctx);
    SET(ctx, keeper_done);
    apr_thread_exit(thd, APR_SUCCESS);
    return NULL;
}

#endif /* __linux__ */
