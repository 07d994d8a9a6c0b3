/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_worker.c: the worker threads of a ChildModel event child. A
 * worker waits in the child's epoll set (event_epoll.c) for whatever is
 * ready: a new connection, which it accepts and serves itself; a
 * connection whose next request, pending output or lingering client is
 * ready; a connection from the work queue. It runs httpd's
 * process_connection hooks under the async contract of conn_state_t and
 * acts on what they leave in c->cs->state (policy_timeouts.c decides): flush
 * pending output, read the next request, or put the connection back into
 * the epoll set to wait without a thread for keep-alive, for the socket
 * to drain, or for the client's FIN in lingering close. The pre-close
 * hooks of lingering close (mod_ssl's close_notify, mod_http2's GOAWAY)
 * run here.
 *
 * Its own file because this is the only code that runs httpd's hooks.
 */
#include <errno.h>
#include <string.h>
#ifdef __linux__
#include <sys/epoll.h>
#endif

#include "httpd.h"
#include "http_connection.h"
#include "http_core.h"
#include "http_log.h"
#include "http_vhost.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "httpd_compat.h"
#include "policy_timeouts.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"

/* Into the epoll set to wait for ec->wait (set) without a thread. */
static void wait_without_thread(event_child_ctx *ctx, ev_conn *ec)
{
    ap_run_suspend_connection(ec->c, NULL);
    ev_start_waiting(ctx, ec);
}

/* Hands the connection to the set until its socket is readable (or
 * writable), within Timeout; `next` then: another flush (write
 * completion) or the hooks again (a module's CONN_STATE_ASYNC_WAITIO). */
static void wait_for_io(event_child_ctx *ctx, ev_conn *ec, int want_write,
                        event_next_e next)
{
    ec->want_write = want_write;
    ec->step = next;
    ec->wait = WAIT_IO;
    ec->waitio = next == EVENT_NEXT_PROCESS;
    wait_without_thread(ctx, ec);
}

/* Lingering close: the pre-close hooks, what is left of the output, the
 * write side shut; what the client sent is read and discarded, and if it
 * has closed its side already (one that shut it after its request), the
 * connection is closed here; otherwise the keeper drains what the client
 * still sends until it closes or the timeout ends. Only an end of file
 * already read skips that wait, so a client whose data is still on its
 * way is never reset. */
static void start_linger(event_child_ctx *ctx, ev_conn *ec)
{
    char buf[LINGER_BUF_SIZE];

    apr_socket_timeout_set(ec->csd, apr_time_from_sec(LINGER_SHORT_SEC));
    ec->cs->state = CONN_STATE_LINGER;
    if (ap_start_lingering_close(ec->c)) {
        ev_close_conn(ctx, ec);
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
    ap_run_suspend_connection(ec->c, NULL);
    if (ev_linger_done(ec, buf, sizeof(buf))) {
        ev_close_conn(ctx, ec);
        return;
    }
    ev_linger_in_keeper(ctx, ec);
}

/* Write completion: the output filters get another go at what is pending. */
static event_next_e flush_output(ev_conn *ec)
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
        ap_log_cerror(APLOG_MARK, APLOG_DEBUG, rv, c, BKLOGNO(00052)
                                                      "bucketed: network "
                      "write failure in write completion");
    }
    r.flush_ok = rv == APR_SUCCESS;
    r.output_pending = c->data_in_output_filters;
    r.want_read = ec->cs->sense == CONN_SENSE_WANT_READ;
    r.keepalive = c->keepalive == AP_CONN_KEEPALIVE;
    r.aborted = c->aborted;
    r.input_pending = c->data_in_input_filters;
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
        ev_close_conn(ctx, ec);
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
                      BKLOGNO(00053)
                      "bucketed: connection aborted by pre_connection");
        ev_close_conn(ctx, ec);
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
#ifdef AP_MPMQ_CAN_WAITIO   /* httpd 2.4.63 and later */
    case CONN_STATE_ASYNC_WAITIO:
        return cs->sense == CONN_SENSE_WANT_WRITE ? EVENT_STATE_WAITIO_WRITE
                                                  : EVENT_STATE_WAITIO_READ;
#endif
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
            if (ec->c->clogging_input_filters) {
                ec->step = event_after_clogged(ec->step);
            }
            ec->cs->sense = CONN_SENSE_DEFAULT;
            continue;
        case EVENT_NEXT_FLUSH:
            ec->step = flush_output(ec);
            continue;
        case EVENT_NEXT_WAIT_WRITE:
        case EVENT_NEXT_WAIT_READ:
            wait_for_io(ctx, ec, ec->step == EVENT_NEXT_WAIT_WRITE,
                        EVENT_NEXT_FLUSH);
            return;
        case EVENT_NEXT_WAITIO_READ:
        case EVENT_NEXT_WAITIO_WRITE:
            /* A module (mod_http2) waits for I/O without a worker: the
             * hooks run again once the socket is ready. */
            wait_for_io(ctx, ec, ec->step == EVENT_NEXT_WAITIO_WRITE,
                        EVENT_NEXT_PROCESS);
            return;
        case EVENT_NEXT_KEEPALIVE:
            /* Also in a leaving child: a response that went out before it
             * learned so promised keep-alive, and the client's next
             * request may be on its way. It is answered (with
             * "Connection: close"); the keeper closes the connection at
             * its KeepAliveTimeout if none comes. */
            if (CHILD_LIFE_IS(ctx->life, dying)) {
                ec->short_linger = 1;
                ec->step = EVENT_NEXT_LINGER;
                continue;
            }
            ec->cs->state = CONN_STATE_KEEPALIVE;
            ec->step = EVENT_NEXT_PROCESS;
            ec->wait = WAIT_KEEPALIVE;
            wait_without_thread(ctx, ec);
            return;
        case EVENT_NEXT_SUSPENDED:
            /* A module's callback finishes the request (mod_dialup). */
            ap_run_suspend_connection(ec->c, NULL);
            if (ev_park_suspended(ctx, ec)) {
                return;
            }
            ap_run_resume_connection(ec->c, NULL);
            ec->step = EVENT_NEXT_RESUME;
            continue;
        case EVENT_NEXT_RESUME:
            ec->step = event_after_process(1, state_of(ec->cs),
                                           ec->c->aborted);
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

/* A connection whose one-shot entry fired: this worker owns it now. */
static void conn_ready(event_child_ctx *ctx, ev_conn *ec, int thread_num,
                       apr_thread_t *thd)
{
    wait_e wait;
    int closing;

    ev_lock(ctx);
    wait = ec->wait;
    closing = ec->closing;
    if (ec->timer.listed) {
        timeout_list_remove(&ctx->timeouts[wait], &ec->timer);
    }
    ec->wait = WAIT_NONE;
    ec->closing = 0;
    if (ec->reclaimed) {
        ec->reclaimed = 0;
        ctx->reclaimed--;
    }
    ev_unlock(ctx);

    if (closing) {
        /* Timed out, or the child is leaving. */
        if (CHILD_LIFE_IS(ctx->life, dying)) {
            ev_close_conn(ctx, ec);
            return;
        }
        if (wait == WAIT_IO) {
            ap_log_cerror(APLOG_MARK, APLOG_DEBUG, 0, ec->c, BKLOGNO(00054)
                                                             "bucketed: %s "
                          "timed out", ec->waitio ? "a module's wait for I/O"
                                                  : "write completion");
            ec->c->aborted = 1;
        }
        ec->short_linger = 1;
        ec->step = EVENT_NEXT_LINGER;
    }
    serve_conn(ctx, ec, thread_num, thd);
}

int ev_turns_to_post_locked(event_child_ctx *ctx, int want)
{
    int waiting = ctx->turn_waiters - ctx->turns_posted;
    int count = want < waiting ? want : waiting;

    if (count <= 0) {
        return 0;
    }
    ctx->turns_posted += count;
    return count;
}

/* A worker cannot take or give turns any more: the child ends. */
static void turns_broken(event_child_ctx *ctx, int err, const char *what)
{
    ap_log_error(APLOG_MARK, APLOG_CRIT, err, ctx->s, BKLOGNO(00195)
                 "bucketed: %s of the workers' turn", what);
    SET(ctx, sick);
    CHILD_LIFE_SET(ctx->life, dying);
    ev_wake_keeper(ctx);
}

int ev_post_turns(event_child_ctx *ctx, int count)
{
    while (count-- > 0) {
        if (sem_post(&ctx->turn) < 0) {
            turns_broken(ctx, errno, "sem_post");
            return -1;
        }
    }
    return 0;
}

/* A follower waits for a turn; called and returns under mutex. 0 once
 * let go; -1 when waiting failed (logged, the child dies). */
static int wait_turn(event_child_ctx *ctx)
{
    int rc;

    ctx->turn_waiters++;
    ev_unlock(ctx);
    while ((rc = sem_wait(&ctx->turn)) < 0 && errno == EINTR) {
        continue;
    }
    if (rc < 0) {
        int err = errno;
        ev_lock(ctx);
        ctx->turn_waiters--;
        turns_broken(ctx, err, "sem_wait");
        return -1;
    }
    ev_lock(ctx);
    ctx->turn_waiters--;
    ctx->turns_posted--;
    return 0;
}

/* Waits for one event; with the lock held on return (NULL: stop, or an
 * extra worker's retirement once it served). One idle worker at a time
 * waits in the epoll set, the others wait their turn: a ready connection
 * wakes a worker only when one gets the CPU to take it, so on a busy
 * machine connections wait in the epoll set's ready list, first come first
 * served, not as woken threads in the run queue, where the scheduler can
 * leave one behind for hundreds of milliseconds while others run. The
 * others wait on a semaphore, not a condition variable: a thread back from
 * pthread_cond_wait() holds the mutex marked contended, and its next
 * unlock makes a futex wake-up whether anybody waits or not (one more
 * system call per event). */
static void *wait_for_event(event_child_ctx *ctx, worker_info *wi, int first)
{
    struct epoll_event ev;
    int n, err, posts;

    for (;;) {
        set_worker_status(ctx, wi->num, SERVER_READY);
        ev_lock(ctx);
        /* An extra worker retires rather than wait again. */
        if (ctx->stop_workers || (!first && wi->num >= ctx->threads)) {
            return NULL;
        }
        ctx->idle_workers++;
        ctx->waits++;
        ev_update_listening_locked(ctx);
        /* A connection left waiting on a listener still in the set has no
         * wake-up coming: this worker tries the listeners, as a worker
         * woken by the bucket's eventfd does. */
        if (ctx->accept_pending && ctx->listening) {
            ctx->accept_pending = 0;
            ctx->idle_workers--;
            return &ctx->nudge_kind;
        }
        while (ctx->leading && !ctx->stop_workers) {
            if (wait_turn(ctx) < 0) {
                ctx->idle_workers--;
                return NULL;
            }
        }
        if (ctx->stop_workers) {
            ctx->idle_workers--;
            return NULL;
        }
        ctx->leading = 1;
        ev_unlock(ctx);
        n = epoll_wait(ctx->epoll_fd, &ev, 1, -1);
        err = n < 0 ? errno : 0;
        ev_lock(ctx);
        ctx->leading = 0;
        ctx->idle_workers--;
        /* The next follower is let go with the mutex free: woken while
         * this worker held it, it would find it taken and wait again, a
         * futex wait and wake and a context switch more for every event. */
        posts = ev_turns_to_post_locked(ctx, 1);
        if (posts > 0) {
            ev_unlock(ctx);
            if (ev_post_turns(ctx, posts) < 0) {
                ev_lock(ctx);
                return NULL;
            }
            ev_lock(ctx);
        }
        if (n > 0) {
            return ev.data.ptr;
        }
        if (err != 0 && err != EINTR) {
            ev_unlock(ctx);
            ap_log_error(APLOG_MARK, APLOG_CRIT, err, ctx->s,
                         BKLOGNO(00055) "bucketed: epoll_wait in a worker");
            SET(ctx, sick);
            CHILD_LIFE_SET(ctx->life, dying);
            ev_lock(ctx);
            ev_wake_keeper(ctx);
            return NULL;
        }
        ev_unlock(ctx);
    }
}

/* One worker thread: serve what the epoll set reports until told to
 * stop. */
void *APR_THREAD_FUNC ev_worker_main(apr_thread_t *thd, void *arg)
{
    worker_info *wi = arg;
    event_child_ctx *ctx = wi->ctx;
    void *ready;
    int first = 1;

    while ((ready = wait_for_event(ctx, wi, first)) != NULL) {
        int kind = *(int *)ready;
        /* This worker took the last idle place of a child that listens:
         * its ready list may hold a listener's wake-up no worker is left
         * to take. Not for a wake-up by the bucket's eventfd, which
         * reached every child of the bucket (see accept_for_worker_locked
         * in event_accept.c). */
        int last_idle = ctx->idle_workers == 0 && ctx->listening
                        && kind != EV_STOP && kind != EV_NUDGE;
        ev_conn *ec = NULL;

        first = 0;
        /* The accept rule is checked under the mutex still held, this
         * worker counted busy already. */
        if (kind == EV_LISTENER) {
            ec = ev_accept_for_worker_locked(ctx, ready);
        }
        else if (kind == EV_NUDGE) {
            ec = ev_accept_nudged_locked(ctx);
        }
        else {
            ev_unlock(ctx);
        }
        set_worker_status(ctx, wi->num, SERVER_BUSY_READ);
        if (last_idle) {
            ev_nudge_if_waiting(ctx);
        }
        if (kind == EV_CONN) {
            conn_ready(ctx, ready, wi->num, thd);
            continue;
        }
        if (kind == EV_WORK) {
            ev_callback *callback;

            ec = ev_take_work(ctx, &callback);
            if (callback != NULL) {
                ev_run_callback(ctx, callback);
            }
        }
        /* EV_STOP: the next wait sees stop_workers. */
        if (ec != NULL) {
            serve_conn(ctx, ec, wi->num, thd);
        }
    }
    ctx->running_workers--;
    wi->running = 0;
    apr_thread_cond_signal(ctx->gone);
    ev_unlock(ctx);
    set_worker_status(ctx, wi->num, CHILD_LIFE_IS(ctx->life, dying)
                                    || wi->num >= ctx->threads
                                    ? SERVER_DEAD : SERVER_GRACEFUL);
    apr_thread_exit(thd, APR_SUCCESS);
    return NULL;
}

int ev_start_extra_worker(event_child_ctx *ctx)
{
    worker_info *wi = NULL;
    apr_status_t rv;
    int i;

    ev_lock(ctx);
    for (i = ctx->threads; i < ctx->thread_limit && wi == NULL; i++) {
        if (!ctx->workers[i].running) {
            wi = &ctx->workers[i];
            wi->running = 1;
            ctx->running_workers++;
        }
    }
    ev_unlock(ctx);
    if (wi == NULL) {
        return 0;
    }
    rv = apr_thread_create(&wi->thread, ctx->extra_attr, ev_worker_main, wi,
                           ctx->extra_pool);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ERR, rv, ctx->s, BKLOGNO(00056)
                                                        "bucketed: "
                     "apr_thread_create: unable to create an extra worker");
        ev_lock(ctx);
        wi->running = 0;
        ctx->running_workers--;
        ev_unlock(ctx);
        return 0;
    }
    return 1;
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
