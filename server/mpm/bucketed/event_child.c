/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_child.c: the event child model: what it adds to the life both
 * models share (child_life.c). It sets up what its threads share
 * (event_context.h), starts ThreadsPerChild worker threads (event_worker.c)
 * and one keeper thread (event_keeper.c), takes the stop signals, and
 * stops the threads. It also makes the per-bucket eventfds with which the
 * children of a bucket wake each other.
 *
 * Signals: every thread blocks the stop signals; the main thread takes
 * them with sigtimedwait(). A leave request (AP_SIG_GRACEFUL, as for the
 * prefork model) stops accepting and lets requests in flight and idle
 * keep-alive connections finish (event_keeper.c); SIGTERM/SIGHUP close
 * what waits and end the process once the workers are done, or after a
 * short grace. A look (BUCKETED_SIG_LOOK: the parent saw connections wait
 * in the bucket's accept queue while its children were ready) is passed to
 * the keeper, which wakes the bucket's children if connections wait still
 * (event_keeper.c): a wake-up may have gone to a child killed before it
 * could run again (child_accept.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "child_life.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"

/* After SIGTERM, how long busy workers get before the process ends. */
#define DIE_GRACE apr_time_from_sec(1)

/* ------------------------------------------------------------ the process */

static apr_status_t destroy_turn(void *data)
{
    event_child_ctx *ctx = data;

    /* Nothing to release on Linux; it fails only for a bad semaphore. */
    if (sem_destroy(&ctx->turn) < 0) {
        return errno;
    }
    return APR_SUCCESS;
}

static apr_status_t setup_threads_sync(event_child_ctx *ctx)
{
    apr_status_t rv;

    rv = apr_thread_mutex_create(&ctx->mutex, APR_THREAD_MUTEX_DEFAULT,
                                 ctx->pchild);
    if (rv == APR_SUCCESS) {
        rv = apr_thread_cond_create(&ctx->gone, ctx->pchild);
    }
    if (rv == APR_SUCCESS) {
        if (sem_init(&ctx->turn, 0, 0) < 0) {
            rv = errno;
        }
        else {
            apr_pool_cleanup_register(ctx->pchild, ctx, destroy_turn,
                                      apr_pool_cleanup_null);
        }
    }
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s,
                     BKLOGNO(00026)
                     "bucketed: cannot create the event child's locks");
    }
    return rv;
}

/* What the keeper starts extra workers with: their own pool (nothing
 * else allocates from it) and detached threads. */
static apr_status_t setup_extra_workers(event_child_ctx *ctx)
{
    apr_status_t rv = apr_pool_create(&ctx->extra_pool, ctx->pchild);

    if (rv == APR_SUCCESS) {
        rv = apr_threadattr_create(&ctx->extra_attr, ctx->pchild);
    }
    if (rv == APR_SUCCESS) {
        rv = apr_threadattr_detach_set(ctx->extra_attr, 1);
    }
    if (rv == APR_SUCCESS && ap_thread_stacksize != 0) {
        rv = apr_threadattr_stacksize_set(ctx->extra_attr,
                                          ap_thread_stacksize);
    }
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s, BKLOGNO(00027)
                                                          "bucketed: "
                     "cannot set up the event child's extra workers");
    }
    return rv;
}

/* Waits for the workers to exit: all of them when leaving gracefully
 * (they are idle by then), DIE_GRACE at most after SIGTERM, and joins
 * those that did. Returns whether all did. */
static int stop_workers(event_child_ctx *ctx, worker_info *workers)
{
    apr_time_t deadline = apr_time_now() + DIE_GRACE;
    uint64_t one = 1;
    int all, i;

    ev_lock(ctx);
    ctx->stop_workers = 1;
    /* The workers waiting their turn see stop_workers; the one in the
     * epoll set sees the eventfd, level-triggered and never read. */
    ev_post_turns(ctx, ev_turns_to_post_locked(ctx, ctx->turn_waiters));
    if (write(ctx->stop_fd, &one, sizeof(one)) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00028)
                     "bucketed: write to the workers' stop eventfd");
    }
    while (ctx->running_workers > 0) {
        if (CHILD_LIFE_IS(ctx->life, dying)) {
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
    /* A worker marks itself done under the mutex just before it exits;
     * one still busy is left to the process's end. */
    for (i = 0; i < ctx->threads; i++) {
        workers[i].joinable = workers[i].thread != NULL
                              && !workers[i].running;
    }
    ev_unlock(ctx);
    for (i = 0; i < ctx->threads; i++) {
        apr_status_t thread_rv;
        if (workers[i].joinable) {
            apr_thread_join(&thread_rv, workers[i].thread);
        }
    }
    return all;
}

static void wait_for_signals(event_child_ctx *ctx)
{
    while (!IS(ctx, keeper_done)) {
        struct timespec ts;
        int sig;

        ts.tv_sec = 0;
        ts.tv_nsec = 200 * 1000 * 1000;
        sig = sigtimedwait(&ctx->taken_signals, NULL, &ts);
        if (sig < 0) {
            int err = errno;
            if (err != EAGAIN && err != EINTR) {
                ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                             BKLOGNO(00029)
                             "bucketed: sigtimedwait in an event child");
            }
            continue;
        }
        if (sig == BUCKETED_SIG_LOOK) {
            /* The keeper writes the bucket's eventfd, which siblings
             * share: a write a sibling made block must not stop the
             * thread that takes the stop signals. */
            SET(ctx, asked_to_look);
            ev_wake_keeper(ctx);
            continue;
        }
        if (sig == SIGTERM || sig == SIGHUP) {
            CHILD_LIFE_SET(ctx->life, dying);
        }
        else {
            CHILD_LIFE_SET(ctx->life, leaving);
        }
        ev_wake_keeper(ctx);
    }
}

/* Does nothing: see take_signals(). */
static void on_look_elsewhere(int sig)
{
    (void)sig;
}

/* Before any thread starts: they all inherit this mask, and the main
 * thread takes the stop signals and the look with sigtimedwait(). The look
 * has a handler that does nothing as well: its default action ends the
 * process, and a thread a module starts might open it. */
static void take_signals(child_life *life)
{
    event_child_ctx *ctx = life->model;

    ctx->life = life;
    child_signal_set(&ctx->taken_signals, 1);
    sigaddset(&ctx->taken_signals, BUCKETED_SIG_LOOK);
    child_signal_mask(&ctx->taken_signals);
    child_signal_handle(BUCKETED_SIG_LOOK, on_look_elsewhere,
                        &ctx->taken_signals, SA_RESTART);
}

/* What the threads share: the epoll set, the keeper's set and wake-ups,
 * the callbacks' records, the locks. */
static apr_status_t set_up(child_life *life)
{
    event_child_ctx *ctx = life->model;
    apr_thread_mutex_t *alloc_mutex;
    apr_status_t rv;
    int i;

    /* Threads create and destroy transaction pools under pchild. */
    rv = apr_thread_mutex_create(&alloc_mutex, APR_THREAD_MUTEX_DEFAULT,
                                 life->pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, life->s,
                     BKLOGNO(00030)
                     "bucketed: apr_thread_mutex_create in child");
        return rv;
    }
    apr_allocator_mutex_set(apr_pool_allocator_get(life->pchild),
                            alloc_mutex);
    ctx->s = life->s;
    ctx->conf = life->conf;
    ctx->retained = life->retained;
    ctx->slot = life->slot;
    ctx->bucket = life->bucket;
    ctx->pchild = life->pchild;
    ctx->threads = life->conf->threads.threads_per_child;
    ctx->thread_limit = life->retained->first_thread_limit;
    life->retained->event_child = ctx;
    ctx->epoll_fd = ctx->work_fd = ctx->stop_fd = -1;
    ctx->keeper_fd = ctx->wake_fd = -1;
    ctx->spare_pools = apr_pcalloc(life->pchild, sizeof(apr_pool_t *)
                                   * (ctx->threads + SPARE_POOLS));
    for (i = 0; i < NUM_WAITS; i++) {
        timeout_list_init(&ctx->timeouts[i]);
    }
    for (i = 0; i < ctx->threads; i++) {
        ap_update_child_status_from_indexes(life->slot, i, SERVER_STARTING,
                                            NULL);
    }
    rv = ev_setup_epoll(ctx);
    if (rv == APR_SUCCESS) {
        rv = ev_setup_keeper(ctx);
    }
    if (rv == APR_SUCCESS) {
        rv = ev_setup_callbacks(ctx);
    }
    if (rv == APR_SUCCESS) {
        rv = setup_threads_sync(ctx);
    }
    return rv;
}

/* Starts the workers and the keeper, waits for the stop signals, and
 * stops the threads. A thread that cannot be made is a shortage: the
 * child exits sick and the parent backs off. */
static int serve(child_life *life, int *clean)
{
    event_child_ctx *ctx = life->model;
    apr_threadattr_t *attr;
    apr_thread_t *keeper;
    worker_info *workers;
    apr_status_t rv, thread_rv;
    int i;

    ap_get_scoreboard_process(life->slot)->not_accepting = 0;
    rv = apr_threadattr_create(&attr, life->pchild);
    if (rv == APR_SUCCESS) {
        rv = apr_threadattr_detach_set(attr, 0);
    }
    if (rv == APR_SUCCESS && ap_thread_stacksize != 0) {
        rv = apr_threadattr_stacksize_set(attr, ap_thread_stacksize);
    }
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, rv, life->s, BKLOGNO(00031)
                                                           "bucketed: cannot "
                     "set up the event child's thread attributes");
        return APEXIT_CHILDSICK;
    }
    workers = apr_pcalloc(life->pchild, sizeof(*workers) * ctx->thread_limit);
    for (i = 0; i < ctx->thread_limit; i++) {
        workers[i].num = i;
        workers[i].ctx = ctx;
    }
    ctx->workers = workers;
    rv = setup_extra_workers(ctx);
    if (rv != APR_SUCCESS) {
        return child_setup_exit_code(life->s, life->bucket, rv);
    }
    ev_lock(ctx);
    for (i = 0; i < ctx->threads; i++) {
        workers[i].running = 1;
        rv = apr_thread_create(&workers[i].thread, attr, ev_worker_main,
                               &workers[i], life->pchild);
        if (rv != APR_SUCCESS) {
            ev_unlock(ctx);
            ap_log_error(APLOG_MARK, APLOG_ALERT, rv, life->s, BKLOGNO(00032)
                                                               "bucketed: "
                         "apr_thread_create: unable to create worker "
                         "thread %d", i);
            /* The workers made so far are stopped. */
            workers[i].thread = NULL;
            CHILD_LIFE_SET(life, dying);
            *clean = stop_workers(ctx, workers);
            return APEXIT_CHILDSICK;
        }
        ctx->running_workers++;
    }
    ev_unlock(ctx);
    rv = apr_thread_create(&keeper, attr, ev_keeper_main, ctx, life->pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, rv, life->s, BKLOGNO(00033)
                                                           "bucketed: "
                     "apr_thread_create: unable to create the keeper thread");
        CHILD_LIFE_SET(life, dying);
        *clean = stop_workers(ctx, workers);
        return APEXIT_CHILDSICK;
    }

    wait_for_signals(ctx);
    apr_thread_join(&thread_rv, keeper);
    /* With a worker still busy (SIGTERM), the process leaves without the
     * pool cleanups. */
    *clean = stop_workers(ctx, workers);
    return IS(ctx, sick) ? APEXIT_CHILDSICK : 0;
}

const child_model event_child_model = {
    sizeof(event_child_ctx), take_signals, set_up, serve
};

apr_status_t event_nudges_create(server_rec *s, bucketed_config *conf,
                                 bucketed_retained *retained)
{
    int b;

    for (b = 0; b < conf->plan.num_buckets; b++) {
        bucket_kept *kept = &retained->buckets[b];

        if (kept->nudge >= 0) {
            continue;
        }
        kept->nudge = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (kept->nudge < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, err, s,
                         BKLOGNO(00034) "bucketed: eventfd for bucket %d", b);
            return err;
        }
    }
    return APR_SUCCESS;
}

#else /* !BUCKETED_HAS_EVENT_MODEL */

apr_status_t event_nudges_create(server_rec *s, bucketed_config *conf,
                                 bucketed_retained *retained)
{
    (void)s;
    (void)conf;
    (void)retained;
    return APR_SUCCESS;
}

/* Refused at start-up (-t says so); a child that got here anyway ends. */
static void take_signals(child_life *life)
{
    ap_log_error(APLOG_MARK, APLOG_EMERG, 0, life->s, BKLOGNO(00035)
                                                      "bucketed: ChildModel "
                 "event needs epoll (Linux) and an APR built with threads");
    exit(APEXIT_CHILDFATAL);
}

static apr_status_t set_up(child_life *life)
{
    (void)life;
    return APR_ENOTIMPL;
}

static int serve(child_life *life, int *clean)
{
    (void)life;
    (void)clean;
    return APEXIT_CHILDFATAL;
}

const child_model event_child_model = {
    1, take_signals, set_up, serve
};

#endif /* BUCKETED_HAS_EVENT_MODEL */
