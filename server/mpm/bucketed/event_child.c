/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_child.c: a child process of ChildModel event. It sets up what its
 * threads share (event_child.h), starts ThreadsPerChild worker threads
 * (event_worker.c) and one keeper thread (event_keeper.c), takes the
 * signals,
 * and stops the threads and ends the process. It also keeps the
 * transaction pools the threads pass between them, and the per-bucket
 * eventfds with which the children of a bucket wake each other.
 *
 * Signals: every thread blocks the stop signals; the main thread takes
 * them with sigtimedwait(). A leave request (AP_SIG_GRACEFUL, as for the
 * prefork model) stops accepting, closes the idle keep-alive connections
 * and lets requests in flight finish; SIGTERM/SIGHUP close what waits and
 * end the process once the workers are done, or after a short grace.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#include <sys/prctl.h>
#endif

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_child.h"

/* After SIGTERM, how long busy workers get before the process ends. */
#define DIE_GRACE apr_time_from_sec(1)

/* ------------------------------------------------------------ the process */

static apr_status_t setup_threads_sync(event_child_ctx *ctx)
{
    apr_status_t rv;

    rv = apr_thread_mutex_create(&ctx->mutex, APR_THREAD_MUTEX_DEFAULT,
                                 ctx->pchild);
    if (rv == APR_SUCCESS) {
        rv = apr_thread_cond_create(&ctx->gone, ctx->pchild);
    }
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s,
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
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s, "bucketed: "
                     "cannot set up the event child's extra workers");
    }
    return rv;
}

/* Ends the process. With every worker gone the pool cleanups run (logs
 * flushed); a worker still busy (SIGTERM) leaves without them. */
static void event_child_exit(event_child_ctx *ctx, int code, int clean)
    __attribute__((noreturn));

static void event_child_exit(event_child_ctx *ctx, int code, int clean)
{
    ctx->retained->mpm->mpm_state = AP_MPMQ_STOPPING;
    ap_run_child_stopping(ctx->pchild, !IS(ctx, dying));
    if (clean) {
        apr_pool_destroy(ctx->pchild);
        exit(code);
    }
    _exit(code);
}

/* Waits for the workers to exit: all of them when leaving gracefully
 * (they are idle by then), DIE_GRACE at most after SIGTERM. Returns
 * whether all did. */
static int stop_workers(event_child_ctx *ctx, worker_info *workers)
{
    apr_time_t deadline = apr_time_now() + DIE_GRACE;
    int all, i;

    uint64_t one = 1;

    ev_lock(ctx);
    ctx->stop_workers = 1;
    /* Level-triggered and never read: it wakes every waiting worker. */
    if (write(ctx->stop_fd, &one, sizeof(one)) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     "bucketed: write to the workers' stop eventfd");
    }
    while (ctx->running_workers > 0) {
        if (IS(ctx, dying)) {
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
    ev_unlock(ctx);
    if (all) {
        for (i = 0; i < ctx->threads; i++) {
            apr_status_t thread_rv;
            if (workers[i].thread != NULL) {
                apr_thread_join(&thread_rv, workers[i].thread);
            }
        }
    }
    return all;
}

/* A parent that dies without stopping its children must not leave them
 * serving: on Linux they are asked to leave when it goes. */
static void leave_with_parent(event_child_ctx *ctx, pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, AP_SIG_GRACEFUL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, ctx->s,
                     "bucketed: prctl(PR_SET_PDEATHSIG)");
    }
    if (getppid() != parent) {
        SET(ctx, leaving);
    }
}

static void wait_for_signals(event_child_ctx *ctx, const sigset_t *set)
{
    while (!IS(ctx, keeper_done)) {
        struct timespec ts;
        int sig;

        ts.tv_sec = 0;
        ts.tv_nsec = 200 * 1000 * 1000;
        sig = sigtimedwait(set, NULL, &ts);
        if (sig < 0) {
            int err = errno;
            if (err != EAGAIN && err != EINTR) {
                ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                             "bucketed: sigtimedwait in an event child");
            }
            continue;
        }
        if (sig == SIGTERM || sig == SIGHUP) {
            SET(ctx, dying);
        }
        else {
            SET(ctx, leaving);
        }
        ev_wake_keeper(ctx);
    }
}

void event_child_main(server_rec *s, bucketed_config *conf,
                      bucketed_retained *retained, int slot, int bucket,
                      pid_t parent)
{
    event_child_ctx *ctx;
    apr_thread_mutex_t *alloc_mutex;
    apr_pool_t *pchild;
    apr_threadattr_t *attr;
    apr_thread_t *keeper;
    worker_info *workers;
    sigset_t stop_signals;
    apr_status_t rv, thread_rv;
    int i, clean;

    /* Before any thread starts: they all inherit this mask, and the main
     * thread takes the stop signals with sigtimedwait(). */
    child_signal_set(&stop_signals, 1);
    child_signal_mask(&stop_signals);
    retained->mpm->mpm_state = AP_MPMQ_STARTING;
    pchild = child_pool_create(s);
    /* Threads create and destroy transaction pools under pchild. */
    rv = apr_thread_mutex_create(&alloc_mutex, APR_THREAD_MUTEX_DEFAULT,
                                 pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, s,
                     "bucketed: apr_thread_mutex_create in child");
        exit(APEXIT_CHILDSICK);
    }
    apr_allocator_mutex_set(apr_pool_allocator_get(pchild), alloc_mutex);

    ctx = apr_pcalloc(pchild, sizeof(*ctx));
    ctx->s = s;
    ctx->conf = conf;
    ctx->retained = retained;
    ctx->slot = slot;
    ctx->bucket = bucket;
    ctx->pchild = pchild;
    ctx->threads = conf->threads.threads_per_child;
    ctx->thread_limit = retained->first_thread_limit;
    ctx->generation = retained->mpm->my_generation;
    retained->event_child = ctx;
    ctx->epoll_fd = ctx->work_fd = ctx->stop_fd = -1;
    ctx->keeper_fd = ctx->wake_fd = -1;
    ctx->spare_pools = apr_pcalloc(pchild, sizeof(apr_pool_t *)
                                           * (ctx->threads + SPARE_POOLS));
    for (i = 0; i < NUM_WAITS; i++) {
        timeout_list_init(&ctx->timeouts[i]);
    }
    for (i = 0; i < ctx->threads; i++) {
        ap_update_child_status_from_indexes(slot, i, SERVER_STARTING, NULL);
    }

    ap_fatal_signal_child_setup(s);
    bucket_listeners_keep_only(conf, bucket);
    bucket_listeners_child_steering(s, conf, retained, bucket);
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
    if (rv != APR_SUCCESS) {
        event_child_exit(ctx, child_setup_exit_code(s, bucket, rv), 1);
    }
    if (ap_run_drop_privileges(pchild, s)) {
        event_child_exit(ctx, APEXIT_CHILDFATAL, 1);
    }
    if (parent != 0) {
        leave_with_parent(ctx, parent);
    }
    ap_run_child_init(pchild, s);
    ap_get_scoreboard_process(slot)->not_accepting = 0;

    rv = apr_threadattr_create(&attr, pchild);
    if (rv == APR_SUCCESS) {
        rv = apr_threadattr_detach_set(attr, 0);
    }
    if (rv == APR_SUCCESS && ap_thread_stacksize != 0) {
        rv = apr_threadattr_stacksize_set(attr, ap_thread_stacksize);
    }
    if (rv != APR_SUCCESS) {
        /* A resource shortage (no thread yet to stop): the parent slows
         * its spawning and tries again. */
        ap_log_error(APLOG_MARK, APLOG_ALERT, rv, s, "bucketed: cannot set "
                     "up the event child's thread attributes");
        event_child_exit(ctx, APEXIT_CHILDSICK, 1);
    }
    workers = apr_pcalloc(pchild, sizeof(*workers) * ctx->thread_limit);
    for (i = 0; i < ctx->thread_limit; i++) {
        workers[i].num = i;
        workers[i].ctx = ctx;
    }
    ctx->workers = workers;
    rv = setup_extra_workers(ctx);
    if (rv != APR_SUCCESS) {
        event_child_exit(ctx, child_setup_exit_code(s, bucket, rv), 1);
    }
    /* Before any worker runs: they serve from their first moment, and
     * modules ask for the state (ap_mpm_query) while serving. */
    retained->mpm->mpm_state = AP_MPMQ_RUNNING;
    ev_lock(ctx);
    for (i = 0; i < ctx->threads; i++) {
        workers[i].running = 1;
        rv = apr_thread_create(&workers[i].thread, attr, ev_worker_main,
                               &workers[i], pchild);
        if (rv != APR_SUCCESS) {
            ev_unlock(ctx);
            ap_log_error(APLOG_MARK, APLOG_ALERT, rv, s, "bucketed: "
                         "apr_thread_create: unable to create worker "
                         "thread %d", i);
            /* Resource shortage: the workers made so far are stopped. */
            workers[i].thread = NULL;
            SET(ctx, dying);
            stop_workers(ctx, workers);
            event_child_exit(ctx, APEXIT_CHILDSICK, 0);
        }
        ctx->running_workers++;
    }
    ev_unlock(ctx);
    rv = apr_thread_create(&keeper, attr, ev_keeper_main, ctx, pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, rv, s, "bucketed: "
                     "apr_thread_create: unable to create the keeper thread");
        SET(ctx, dying);
        stop_workers(ctx, workers);
        event_child_exit(ctx, APEXIT_CHILDSICK, 0);
    }

    wait_for_signals(ctx, &stop_signals);
    apr_thread_join(&thread_rv, keeper);
    clean = stop_workers(ctx, workers);
    event_child_exit(ctx, IS(ctx, sick) ? APEXIT_CHILDSICK : 0, clean);
}

apr_status_t event_nudges_create(server_rec *s, bucketed_config *conf,
                                 bucketed_retained *retained)
{
    int b;

    /* Buckets never outnumber ServerLimit, fixed at the first start. */
    if (retained->nudge == NULL) {
        retained->nudge = apr_palloc(s->process->pool, sizeof(int)
                                     * retained->first_server_limit);
        for (b = 0; b < retained->first_server_limit; b++) {
            retained->nudge[b] = -1;
        }
    }
    for (b = 0; b < conf->plan.num_buckets; b++) {
        if (retained->nudge[b] >= 0) {
            continue;
        }
        retained->nudge[b] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (retained->nudge[b] < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, err, s,
                         "bucketed: eventfd for bucket %d", b);
            return err;
        }
    }
    conf->bucket_nudge = retained->nudge;
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

void event_child_main(server_rec *s, bucketed_config *conf,
                      bucketed_retained *retained, int slot, int bucket,
                      pid_t parent)
{
    (void)conf;
    (void)retained;
    (void)slot;
    (void)bucket;
    (void)parent;
    ap_log_error(APLOG_MARK, APLOG_EMERG, 0, s, "bucketed: ChildModel event "
                 "needs epoll (Linux) and an APR built with threads");
    exit(APEXIT_CHILDFATAL);
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
