/*
 * child.c: one bucketed child. It keeps only its own bucket's sockets,
 * blocks in accept() on its single socket (or polls its sockets under the
 * bucket's accept mutex when the bucket has several), and serves one
 * connection at a time, prefork style.
 *
 * Leaving: the parent asks a child to leave with AP_SIG_GRACEFUL (SIGUSR1;
 * SIGWINCH and SIGINT mean the same here). That signal stays blocked while
 * a connection is served, so request processing never sees EINTR from it,
 * and is unblocked only around the wait for the next connection, where it
 * interrupts accept() or poll(). SIGTERM and SIGHUP end the child at once.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "apr_poll.h"

#include "httpd.h"
#include "http_connection.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

typedef struct {
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    int slot;
    int bucket;
    apr_pool_t *pchild;
    ap_sb_handle_t *sbh;
    ap_listen_rec *listeners;        /* this bucket's sockets */
    apr_proc_mutex_t *accept_mutex;  /* NULL with a single socket */
    apr_pollset_t *pollset;          /* NULL with a single socket */
    ap_listen_rec *next_polled;      /* round robin among ready sockets */
    sigset_t leave_signals;
    volatile sig_atomic_t leaving;
} child_context;

/* The only file-scope state: this process's context, for its signal
 * handlers. Set once, right after fork, in the child. */
static child_context *this_child;

static void child_exit(child_context *ctx, int code)
    __attribute__((noreturn));

static void child_exit(child_context *ctx, int code)
{
    int graceful = ctx->leaving;

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

/* As prefork's children do: end now, running the pool cleanups so that
 * buffered logs are written. */
static void on_die_signal(int sig)
{
    (void)sig;
    child_exit(this_child, 0);
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
        ap_log_error(APLOG_MARK, APLOG_ERR, errno, ap_server_conf,
                     "bucketed: sigaction(%d) in child", sig);
    }
}

static void setup_signals(child_context *ctx)
{
    sigset_t all;

    sigemptyset(&ctx->leave_signals);
    sigaddset(&ctx->leave_signals, AP_SIG_GRACEFUL);
    sigaddset(&ctx->leave_signals, AP_SIG_GRACEFUL_STOP);
    sigaddset(&ctx->leave_signals, SIGINT);
    sigprocmask(SIG_BLOCK, &ctx->leave_signals, NULL);

    sigemptyset(&all);
    sigaddset(&all, AP_SIG_GRACEFUL);
    sigaddset(&all, AP_SIG_GRACEFUL_STOP);
    sigaddset(&all, SIGINT);
    sigaddset(&all, SIGTERM);
    sigaddset(&all, SIGHUP);
    install_handler(AP_SIG_GRACEFUL, on_leave_signal, &all);
    install_handler(AP_SIG_GRACEFUL_STOP, on_leave_signal, &all);
    install_handler(SIGINT, on_leave_signal, &all);
    install_handler(SIGTERM, on_die_signal, &all);
    install_handler(SIGHUP, on_die_signal, &all);

    /* The parent forked with every signal blocked; from here on only the
     * leave signals stay blocked (see wait_single). */
    sigfillset(&all);
    sigdelset(&all, AP_SIG_GRACEFUL);
    sigdelset(&all, AP_SIG_GRACEFUL_STOP);
    sigdelset(&all, SIGINT);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
}

static void allow_leave_signals(child_context *ctx, int allow)
{
    sigprocmask(allow ? SIG_UNBLOCK : SIG_BLOCK, &ctx->leave_signals, NULL);
}

static apr_status_t accept_on(ap_listen_rec *lr, apr_socket_t **csd,
                              apr_pool_t *ptrans)
{
    void *accepted = NULL;
    apr_status_t rv = lr->accept_func ? lr->accept_func(&accepted, lr, ptrans)
                                      : ap_unixd_accept(&accepted, lr, ptrans);

    *csd = accepted;
    return rv;
}

/* One socket: block in accept(). Returns APR_SUCCESS with *csd, APR_EINTR
 * when asked to leave, APR_EGENERAL when accept() is broken for good. */
static apr_status_t wait_single(child_context *ctx, apr_socket_t **csd,
                                apr_pool_t *ptrans)
{
    apr_status_t rv;

    for (;;) {
        allow_leave_signals(ctx, 1);
        if (ctx->leaving) {
            rv = APR_EINTR;
        }
        else {
            rv = accept_on(ctx->listeners, csd, ptrans);
        }
        allow_leave_signals(ctx, 0);
        if (rv == APR_SUCCESS || rv == APR_EGENERAL || ctx->leaving) {
            return ctx->leaving && rv != APR_SUCCESS ? APR_EINTR : rv;
        }
        /* EINTR from another signal, or a connection reset before we got
         * to it: wait again. */
    }
}

/* Several sockets: poll them under the bucket's accept mutex, so that only
 * one child of the bucket wakes per connection. */
static apr_status_t wait_multi(child_context *ctx, apr_socket_t **csd,
                               apr_pool_t *ptrans)
{
    apr_status_t rv;

    rv = apr_proc_mutex_lock(ctx->accept_mutex);
    if (rv != APR_SUCCESS) {
        if (APR_STATUS_IS_EINTR(rv)) {
            return APR_EINTR;
        }
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s, "bucketed: "
                     "child %" APR_PID_T_FMT " cannot take the accept mutex "
                     "of bucket %d", getpid(), ctx->bucket);
        return APR_EGENERAL;
    }
    for (;;) {
        const apr_pollfd_t *ready;
        apr_int32_t num_ready = 0;
        ap_listen_rec *lr;

        allow_leave_signals(ctx, 1);
        rv = ctx->leaving ? APR_EINTR
                          : apr_pollset_poll(ctx->pollset, -1, &num_ready,
                                             &ready);
        allow_leave_signals(ctx, 0);
        if (ctx->leaving) {
            rv = APR_EINTR;
            break;
        }
        if (rv != APR_SUCCESS) {
            if (APR_STATUS_IS_EINTR(rv)) {
                continue;
            }
            ap_log_error(APLOG_MARK, APLOG_ERR, rv, ctx->s,
                         "bucketed: apr_pollset_poll on bucket %d",
                         ctx->bucket);
            rv = APR_EGENERAL;
            break;
        }
        /* Take the first ready socket at or after the one served last, so
         * a busy address cannot starve a quiet one. */
        lr = ready[0].client_data;
        if (num_ready > 1 && ctx->next_polled != NULL) {
            apr_int32_t i;
            for (i = 0; i < num_ready; i++) {
                if (ready[i].client_data == ctx->next_polled) {
                    lr = ready[i].client_data;
                    break;
                }
            }
        }
        ctx->next_polled = lr->next ? lr->next : ctx->listeners;
        rv = accept_on(lr, csd, ptrans);
        if (rv == APR_SUCCESS || rv == APR_EGENERAL) {
            break;
        }
        /* EAGAIN: another child of the bucket took it (the sockets are
         * non-blocking here); poll again. */
    }
    apr_proc_mutex_unlock(ctx->accept_mutex);
    return rv;
}

static apr_status_t child_init_accept(child_context *ctx)
{
    ap_listen_rec *lr;
    apr_status_t rv;
    int n = 0;

    for (lr = ctx->listeners; lr; lr = lr->next) {
        n++;
    }
    if (ctx->accept_mutex == NULL) {
        return APR_SUCCESS;
    }
    rv = apr_proc_mutex_child_init(&ctx->accept_mutex,
                                   apr_proc_mutex_lockfile(ctx->accept_mutex),
                                   ctx->pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s, "bucketed: "
                     "cannot init the accept mutex of bucket %d in a child",
                     ctx->bucket);
        return rv;
    }
    rv = apr_pollset_create(&ctx->pollset, n, ctx->pchild, 0);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s,
                     "bucketed: apr_pollset_create for %d sockets", n);
        return rv;
    }
    for (lr = ctx->listeners; lr; lr = lr->next) {
        apr_pollfd_t pfd;

        memset(&pfd, 0, sizeof(pfd));
        pfd.desc_type = APR_POLL_SOCKET;
        pfd.desc.s = lr->sd;
        pfd.reqevents = APR_POLLIN;
        pfd.client_data = lr;
        rv = apr_pollset_add(ctx->pollset, &pfd);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_EMERG, rv, ctx->s,
                         "bucketed: apr_pollset_add for %pI", lr->bind_addr);
            return rv;
        }
    }
    return APR_SUCCESS;
}

static void serve_connections(child_context *ctx)
{
    ap_generation_t generation = ctx->retained->mpm->my_generation;
    apr_bucket_alloc_t *bucket_alloc;
    apr_pool_t *ptrans;
    int served = 0;

    apr_pool_create(&ptrans, ctx->pchild);
    apr_pool_tag(ptrans, "transaction");
    bucket_alloc = apr_bucket_alloc_create(ctx->pchild);

    while (!ctx->leaving) {
        apr_socket_t *csd = NULL;
        conn_rec *c;
        apr_status_t rv;

        if (ap_max_requests_per_child > 0
            && served >= ap_max_requests_per_child) {
            break;
        }
        ap_update_child_status(ctx->sbh, SERVER_READY, NULL);
        rv = ctx->pollset ? wait_multi(ctx, &csd, ptrans)
                          : wait_single(ctx, &csd, ptrans);
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
    ap_update_child_status(ctx->sbh, SERVER_GRACEFUL, NULL);
}

/* A parent that dies without stopping its children (killed, crashed)
 * must not leave them serving an orphaned configuration: on Linux they
 * are asked to leave when it goes. */
static void leave_with_parent(pid_t parent)
{
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, AP_SIG_GRACEFUL) < 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, errno, ap_server_conf,
                     "bucketed: prctl(PR_SET_PDEATHSIG)");
    }
#endif
    if (getppid() != parent) {
        this_child->leaving = 1;
    }
}

void child_main(server_rec *s, bucketed_config *conf,
                bucketed_retained *retained, int slot, int bucket,
                pid_t parent)
{
    child_context ctx;
    apr_allocator_t *allocator;
    apr_status_t rv;

    memset(&ctx, 0, sizeof(ctx));
    ctx.s = s;
    ctx.conf = conf;
    ctx.retained = retained;
    ctx.slot = slot;
    ctx.bucket = bucket;
    ctx.listeners = conf->bucket_listeners[bucket];
    ctx.accept_mutex = conf->accept_mutex[bucket];
    this_child = &ctx;
    setup_signals(&ctx);
    retained->mpm->mpm_state = AP_MPMQ_STARTING;

    rv = apr_allocator_create(&allocator);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, s,
                     "bucketed: apr_allocator_create in child");
        exit(APEXIT_CHILDFATAL);
    }
    apr_allocator_max_free_set(allocator, ap_max_mem_free);
    apr_pool_create_ex(&ctx.pchild, s->process->pconf, NULL, allocator);
    apr_allocator_owner_set(allocator, ctx.pchild);
    apr_pool_tag(ctx.pchild, "pchild");

    ap_fatal_signal_child_setup(s);
    bucket_listeners_keep_only(conf, bucket);
    if (child_init_accept(&ctx) != APR_SUCCESS) {
        child_exit(&ctx, APEXIT_CHILDFATAL);
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
