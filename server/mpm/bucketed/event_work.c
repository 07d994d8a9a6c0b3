/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_work.c: what a ChildModel event child's workers are handed
 * besides what their epoll set reports: the work queue (connections to
 * serve, and due callbacks, one eventfd unit each); and the timed
 * callbacks and suspended connections behind them, the part of httpd's
 * async API that mod_dialup uses: a handler registers a callback
 * (ap_mpm_register_timed_callback) and returns SUSPENDED; the connection
 * then waits with no worker and no timeout until a callback finishes its
 * request
 * (ap_process_request_after_handler() sets CONN_STATE_WRITE_COMPLETION or
 * CONN_STATE_LINGER). The keeper hands each callback to a worker when it
 * is due. httpd 2.4 has no hook through which a module gives a suspended
 * connection back, so once no callback runs any more the worker that ran
 * the last one looks at the suspended connections and takes back each
 * one whose state moved on.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "httpd.h"
#include "http_log.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"

/* ---- timed callbacks and suspended connections */

apr_status_t ev_setup_callbacks(event_child_ctx *ctx)
{
    apr_status_t rv = apr_pool_create(&ctx->callback_pool, ctx->pchild);

    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, rv, ctx->s,
                     BKLOGNO(00050)
                     "bucketed: cannot create the timed callbacks' pool");
    }
    return rv;
}

apr_status_t ev_register_timed_callback(event_child_ctx *ctx, apr_time_t t,
                                        ap_mpm_callback_fn_t *fn,
                                        void *baton)
{
    ev_callback *cb, **at;

    ev_lock(ctx);
    if (CHILD_LIFE_IS(ctx->life, dying)) {
        ev_unlock(ctx);
        return APR_EGENERAL;
    }
    cb = ctx->spare_callbacks;
    if (cb != NULL) {
        ctx->spare_callbacks = cb->next;
    }
    else {
        cb = apr_palloc(ctx->callback_pool, sizeof(*cb));
    }
    cb->when = apr_time_now() + (t > 0 ? t : 0);
    cb->fn = fn;
    cb->baton = baton;
    /* In order of time; equal times in order of registration. */
    for (at = &ctx->timed; *at != NULL && (*at)->when <= cb->when;
         at = &(*at)->next) {
    }
    cb->next = *at;
    *at = cb;
    /* The keeper sleeps until the first one: a new first one wakes it. */
    if (ctx->timed == cb) {
        ev_wake_keeper(ctx);
    }
    ev_unlock(ctx);
    return APR_SUCCESS;
}

apr_time_t ev_next_callback_locked(event_child_ctx *ctx)
{
    return ctx->timed != NULL ? ctx->timed->when : 0;
}

void ev_hand_out_due_callbacks_locked(event_child_ctx *ctx, apr_time_t now)
{
    while (ctx->timed != NULL && ctx->timed->when <= now) {
        ev_callback *cb = ctx->timed;

        ctx->timed = cb->next;
        cb->next = NULL;
        if (ctx->due_tail != NULL) {
            ctx->due_tail->next = cb;
        }
        else {
            ctx->due_head = cb;
        }
        ctx->due_tail = cb;
        ev_signal_work_locked(ctx);
    }
}

static ev_callback *take_due_callback_locked(event_child_ctx *ctx)
{
    ev_callback *cb = ctx->due_head;

    if (cb != NULL) {
        ctx->due_head = cb->next;
        if (ctx->due_head == NULL) {
            ctx->due_tail = NULL;
        }
        ctx->running_callbacks++;
    }
    return cb;
}

/* ---- the workers' share of the work queue */

ev_conn *ev_take_work(event_child_ctx *ctx, ev_callback **callback)
{
    uint64_t unit;
    ev_conn *ec = NULL;

    /* One unit per queued connection or due callback: a worker that gets
     * none was beaten to it by another. Callbacks first: a connection
     * may be waiting for one. */
    *callback = NULL;
    if (read(ctx->work_fd, &unit, sizeof(unit)) < 0) {
        int err = errno;
        if (err != EAGAIN) {
            ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                         BKLOGNO(00051)
                         "bucketed: read of the work queue's eventfd");
        }
        return NULL;
    }
    ev_lock(ctx);
    *callback = take_due_callback_locked(ctx);
    if (*callback == NULL) {
        ec = ev_dequeue_work_locked(ctx);
    }
    ev_unlock(ctx);
    return ec;
}

/* The suspended connections a module has finished with, once no callback
 * runs (one still running may be finishing a request whose state it
 * already set): out of the list, into the work queue, each to go on from
 * the state its request left. Under mutex. */
static void resume_finished_locked(event_child_ctx *ctx)
{
    ev_conn **at = &ctx->suspended;

    if (ctx->running_callbacks > 0) {
        return;
    }
    while (*at != NULL) {
        ev_conn *ec = *at;

        if (ec->cs->state == CONN_STATE_SUSPENDED) {
            at = &ec->next;
            continue;
        }
        *at = ec->next;
        ctx->num_suspended--;
        ec->step = EVENT_NEXT_RESUME;
        ev_queue_work_locked(ctx, ec);
    }
}

void ev_run_callback(event_child_ctx *ctx, ev_callback *cb)
{
    cb->fn(cb->baton);
    ev_lock(ctx);
    ctx->running_callbacks--;
    cb->next = ctx->spare_callbacks;
    ctx->spare_callbacks = cb;
    resume_finished_locked(ctx);
    ev_unlock(ctx);
}

int ev_park_suspended(event_child_ctx *ctx, ev_conn *ec)
{
    int parked = 0;

    ev_lock(ctx);
    /* A callback may have finished the request already; if one still
     * runs, the list is where it will look. */
    if (ec->cs->state == CONN_STATE_SUSPENDED || ctx->running_callbacks > 0) {
        ec->next = ctx->suspended;
        ctx->suspended = ec;
        ctx->num_suspended++;
        parked = 1;
    }
    ev_unlock(ctx);
    return parked;
}

apr_status_t event_register_timed_callback(bucketed_retained *retained,
                                           apr_time_t t,
                                           ap_mpm_callback_fn_t *fn,
                                           void *baton)
{
    if (retained->event_child == NULL) {
        return APR_ENOTIMPL;
    }
    return ev_register_timed_callback(retained->event_child, t, fn, baton);
}

#else /* !BUCKETED_HAS_EVENT_MODEL */

apr_status_t event_register_timed_callback(bucketed_retained *retained,
                                           apr_time_t t,
                                           ap_mpm_callback_fn_t *fn,
                                           void *baton)
{
    (void)retained;
    (void)t;
    (void)fn;
    (void)baton;
    return APR_ENOTIMPL;
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
