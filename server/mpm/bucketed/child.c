/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child.c: one bucketed child. It keeps only its own bucket's sockets,
 * waits on them (child_accept.c) and serves one connection at a time,
 * prefork style.
 *
 * Leaving: the parent asks a child to leave with AP_SIG_GRACEFUL (SIGUSR1;
 * SIGWINCH and SIGINT mean the same here). That signal stays blocked while
 * a connection is served, so request processing never sees EINTR from it,
 * and is unblocked only around the wait for the next connection, where it
 * interrupts accept() or poll(). SIGTERM and SIGHUP end the child at once.
 *
 * A child that learns it is leaving closes its copies of the bucket's
 * sockets before anything else (accept_waiter_close()).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "httpd.h"
#include "http_connection.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"

#include "bucketed.h"
#include "child_accept.h"

APLOG_USE_MODULE(mpm_bucketed);

typedef struct {
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    int slot;
    int bucket;
    apr_pool_t *pchild;
    ap_sb_handle_t *sbh;
    accept_waiter waiter;
    volatile sig_atomic_t leaving;
    volatile sig_atomic_t dying;     /* SIGTERM or SIGHUP came */
    volatile sig_atomic_t waiting;   /* in accept_waiter_wait() */
    volatile sig_atomic_t exiting;   /* child_exit() has begun */
} child_context;

/* The only file-scope state: this process's context, for its signal
 * handlers. Set once, right after fork, in the child. */
static child_context *this_child;

static void child_exit(child_context *ctx, int code)
    __attribute__((noreturn));

static void child_exit(child_context *ctx, int code)
{
    int graceful = ctx->leaving && !ctx->dying;

    /* First: a SIGTERM from here on leaves this exit alone (on_die_signal). */
    ctx->exiting = 1;
    ctx->retained->mpm->mpm_state = AP_MPMQ_STOPPING;
    if (ctx->pchild != NULL) {
        ap_run_child_stopping(ctx->pchild, graceful);
        apr_pool_destroy(ctx->pchild);
    }
    exit(code);
}

static void on_leave_signal(int sig)
{
    (void)sig;
    this_child->leaving = 1;
}

/*
 * SIGTERM/SIGHUP: end now, running the child_stopping hooks and the pool
 * cleanups so that buffered logs are written, as prefork's children do.
 * What the handler does depends on where it lands:
 *  - the exit has begun (child_exit() in the main flow, a leave or a sick
 *    exit): nothing. Running it again would destroy the pool twice; the
 *    exit under way ends the process, and the parent's SIGKILL bounds it.
 *  - waiting for a connection: only flags. accept(), epoll_pwait() and
 *    poll() return EINTR (no SA_RESTART) and serve_connections() exits in
 *    the main flow, outside any allocator or module lock. (A signal landing
 *    between the wait's last look at the flags and the system call is seen
 *    at the next connection, or ends with the parent's SIGKILL.)
 *  - serving: the request must end now, so the exit runs here, as stock
 *    prefork's just_die() does. The flag, set first and the stop signals
 *    blocked in the handler (sa_mask), make it run once.
 */
static void on_die_signal(int sig)
{
    child_context *ctx = this_child;

    (void)sig;
    if (ctx->exiting) {
        return;
    }
    ctx->dying = 1;
    if (ctx->waiting) {
        ctx->leaving = 1;
        return;
    }
    child_exit(ctx, 0);
}

static void install_handler(int sig, void (*handler)(int),
                            const sigset_t *mask)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sa.sa_mask = *mask;
    sa.sa_flags = 0;     /* no SA_RESTART: interrupt accept() and poll() */
    if (sigaction(sig, &sa, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ap_server_conf,
                     "bucketed: sigaction(%d) in child", sig);
    }
}

static void checked_sigprocmask(int how, const sigset_t *set)
{
    if (sigprocmask(how, set, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ap_server_conf,
                     "bucketed: sigprocmask in child");
    }
}

void child_signal_set(sigset_t *set, int stop)
{
    sigemptyset(set);
    sigaddset(set, AP_SIG_GRACEFUL);
    sigaddset(set, AP_SIG_GRACEFUL_STOP);
    sigaddset(set, SIGINT);
    if (stop) {
        sigaddset(set, SIGTERM);
        sigaddset(set, SIGHUP);
    }
}

void child_signal_mask(const sigset_t *set)
{
    checked_sigprocmask(SIG_SETMASK, set);
}

static void setup_signals(child_context *ctx)
{
    sigset_t *leave = &ctx->waiter.leave_signals;
    sigset_t all;

    child_signal_set(leave, 0);
    checked_sigprocmask(SIG_BLOCK, leave);

    child_signal_set(&all, 1);
    install_handler(AP_SIG_GRACEFUL, on_leave_signal, &all);
    install_handler(AP_SIG_GRACEFUL_STOP, on_leave_signal, &all);
    install_handler(SIGINT, on_leave_signal, &all);
    install_handler(SIGTERM, on_die_signal, &all);
    install_handler(SIGHUP, on_die_signal, &all);

    /* The parent forked with every signal blocked; from here on only the
     * leave signals stay blocked (see child_accept.c). */
    child_signal_mask(leave);
}

static void serve_connections(child_context *ctx)
{
    ap_generation_t generation = ctx->retained->mpm->my_generation;
    apr_bucket_alloc_t *bucket_alloc;
    apr_pool_t *ptrans;
    apr_status_t rv;
    int served = 0;

    rv = apr_pool_create(&ptrans, ctx->pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s,
                     "bucketed: apr_pool_create for connections");
        child_exit(ctx, APEXIT_CHILDSICK);
    }
    apr_pool_tag(ptrans, "transaction");
    bucket_alloc = apr_bucket_alloc_create(ctx->pchild);

    while (!ctx->leaving) {
        apr_socket_t *csd = NULL;
        conn_rec *c;

        if (ap_max_requests_per_child > 0
            && served >= ap_max_requests_per_child) {
            break;
        }
        ap_update_child_status(ctx->sbh, SERVER_READY, NULL);
        ctx->waiting = 1;
        rv = ctx->dying ? APR_EINTR
                        : accept_waiter_wait(&ctx->waiter, &csd, ptrans);
        ctx->waiting = 0;
        if (ctx->dying) {
            /* SIGTERM during the wait; a connection just accepted is
             * closed with the process, as the handler would have. */
            child_exit(ctx, 0);
        }
        if (rv == APR_EGENERAL) {
            /* accept() itself is failing: let the parent start a fresh
             * child rather than spin. */
            child_exit(ctx, APEXIT_CHILDSICK);
        }
        if (rv != APR_SUCCESS) {
            continue;
        }
        bucket_stats_count_accept(ctx->retained, ctx->bucket);
        served++;
        c = ap_run_create_connection(ptrans, ctx->s, csd, ctx->slot, ctx->sbh,
                                     bucket_alloc);
        if (c != NULL) {
            ap_process_connection(c, csd);
            ap_lingering_close(c);
        }
        apr_pool_clear(ptrans);
        /* A graceful restart happened while we were serving. */
        if (ap_scoreboard_image->global->running_generation != generation) {
            ctx->leaving = 1;
        }
    }
    accept_waiter_close(&ctx->waiter);
    ap_update_child_status(ctx->sbh, SERVER_GRACEFUL, NULL);
}

/* A parent that dies without stopping its children (killed, crashed)
 * must not leave them serving an orphaned configuration: on Linux they
 * are asked to leave when it goes. */
static void leave_with_parent(pid_t parent)
{
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, AP_SIG_GRACEFUL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, ap_server_conf,
                     "bucketed: prctl(PR_SET_PDEATHSIG)");
    }
#endif
    if (getppid() != parent) {
        this_child->leaving = 1;
    }
}

int child_setup_exit_code(server_rec *s, int bucket, apr_status_t rv)
{
    if (child_setup_failure_passes(rv)) {
        ap_log_error(APLOG_MARK, APLOG_ERR, rv, s, "bucketed: a new child of "
                     "bucket %d could not set up (the error above); it exits "
                     "sick, and the parent starts the bucket's next child "
                     "when the shortage may have passed", bucket);
        return APEXIT_CHILDSICK;
    }
    return APEXIT_CHILDFATAL;
}

apr_status_t child_pool_with_allocator(apr_pool_t **p, apr_pool_t *parent,
                                       const char *tag)
{
    apr_allocator_t *allocator;
    apr_status_t rv;

    rv = apr_allocator_create(&allocator);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    apr_allocator_max_free_set(allocator, ap_max_mem_free);
    rv = apr_pool_create_ex(p, parent, NULL, allocator);
    if (rv != APR_SUCCESS) {
        apr_allocator_destroy(allocator);
        return rv;
    }
    apr_allocator_owner_set(allocator, *p);
    apr_pool_tag(*p, tag);
    return APR_SUCCESS;
}

apr_pool_t *child_pool_create(server_rec *s)
{
    apr_pool_t *pchild;
    apr_status_t rv = child_pool_with_allocator(&pchild, s->process->pconf,
                                                "pchild");

    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, s,
                     "bucketed: cannot create the child's pool");
        exit(APEXIT_CHILDSICK);
    }
    return pchild;
}

void child_main(server_rec *s, bucketed_config *conf,
                bucketed_retained *retained, int slot, int bucket,
                pid_t parent)
{
    child_context ctx;
    apr_status_t rv;

    memset(&ctx, 0, sizeof(ctx));
    ctx.s = s;
    ctx.conf = conf;
    ctx.retained = retained;
    ctx.slot = slot;
    ctx.bucket = bucket;
    ctx.waiter.s = s;
    ctx.waiter.bucket = bucket;
    ctx.waiter.listeners = conf->bucket_listeners[bucket];
    ctx.waiter.mode = bucket_wait_mode(bucket_listeners_count(conf, bucket),
                                       conf->kernel.epoll_exclusive);
    ctx.waiter.accept_mutex = conf->accept_mutex[bucket];
    ctx.waiter.leaving = &ctx.leaving;
    this_child = &ctx;
    setup_signals(&ctx);
    retained->mpm->mpm_state = AP_MPMQ_STARTING;

    ctx.pchild = child_pool_create(s);

    ap_fatal_signal_child_setup(s);
    bucket_listeners_keep_only(conf, bucket);
    bucket_listeners_child_steering(s, conf, retained, bucket);
    rv = accept_waiter_init(&ctx.waiter, ctx.pchild);
    if (rv != APR_SUCCESS) {
        child_exit(&ctx, child_setup_exit_code(s, bucket, rv));
    }
    if (ap_run_drop_privileges(ctx.pchild, s)) {
        child_exit(&ctx, APEXIT_CHILDFATAL);
    }
    /* After the identity change, which clears the parent-death signal. */
    if (parent != 0) {
        leave_with_parent(parent);
    }
    ap_run_child_init(ctx.pchild, s);
    ap_create_sb_handle(&ctx.sbh, ctx.pchild, slot, 0);
    ap_update_child_status(ctx.sbh, SERVER_READY, NULL);
    retained->mpm->mpm_state = AP_MPMQ_RUNNING;

    serve_connections(&ctx);
    child_exit(&ctx, 0);
}
