/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefork_child.c: the prefork child model. What it adds to the life both
 * models share (child_life.c): signal handlers, the wait for a connection
 * on the bucket's sockets (child_accept.c), and one connection served at a
 * time (its keep-alive waits: prefork_keepalive.c).
 *
 * Leaving: the parent asks a child to leave with AP_SIG_GRACEFUL (SIGUSR1;
 * SIGWINCH and SIGINT mean the same here). That signal stays blocked while
 * a connection is served, so request processing never sees EINTR from it,
 * and is unblocked only around the wait for the next connection, where it
 * interrupts accept() or poll(). SIGTERM and SIGHUP end the child at once.
 *
 * A child that learns it is leaving closes its copies of the bucket's
 * sockets before anything else (accept_waiter_close()).
 *
 * Making room: at MaxRequestWorkers the parent asks a child waiting for a
 * keep-alive connection's next request to close it for a client waiting in
 * the bucket's accept queue, with BUCKETED_SIG_GIVE_UP; that signal is
 * blocked except in that wait (prefork_keepalive.c). A leaving child keeps
 * the connection (keepalive_gives_up()), as it would without the stop.
 *
 * Looking: the parent asks a ready child of a stalled bucket to try its
 * sockets with BUCKETED_SIG_LOOK, open only in the epoll wait
 * (child_accept.c).
 */
#include <errno.h>
#include <signal.h>

#include "httpd.h"
#include "http_connection.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"

#include "bucketed.h"
#include "child_accept.h"
#include "child_life.h"
#include "listen_sockets.h"
#include "policy_exit.h"
#include "prefork_keepalive.h"
#include "stats.h"

APLOG_USE_MODULE(mpm_bucketed);

typedef struct {
    child_life *life;
    ap_sb_handle_t *sbh;
    accept_waiter waiter;
    keepalive_waiter keepalive;      /* between a connection's requests */
    volatile sig_atomic_t waiting;   /* in accept_waiter_wait() */
} prefork_child;

/* The only file-scope state: this process's context, for its signal
 * handlers. Set once, right after fork, in the child. */
static prefork_child *this_child;

static void on_leave_signal(int sig)
{
    (void)sig;
    CHILD_LIFE_SET(this_child->life, leaving);
    accept_waiter_leave(&this_child->waiter);
}

static void on_give_up_signal(int sig)
{
    (void)sig;
    KEEPALIVE_WAITER_ASKED(&this_child->keepalive);
}

static void on_look_signal(int sig)
{
    (void)sig;
    ACCEPT_WAITER_LOOK(&this_child->waiter);
}

/*
 * SIGTERM/SIGHUP: end now, running the child_stopping hooks and the pool
 * cleanups so that buffered logs are written, as prefork's children do.
 * What the handler does depends on where it lands:
 *  - the exit has begun (child_life_exit() in the main flow, a leave or a
 *    sick exit): nothing. Running it again would destroy the pool twice; the
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
    prefork_child *pc = this_child;

    (void)sig;
    if (CHILD_LIFE_IS(pc->life, exiting)) {
        return;
    }
    CHILD_LIFE_SET(pc->life, dying);
    if (pc->waiting) {
        CHILD_LIFE_SET(pc->life, leaving);
        return;
    }
    child_life_exit(pc->life, 0, 1);
}

static void take_signals(child_life *life)
{
    prefork_child *pc = life->model;
    sigset_t *leave = &pc->waiter.leave_signals;
    sigset_t all;

    pc->life = life;
    this_child = pc;
    child_signal_set(leave, 0);
    child_signal_set(&all, 1);
    sigaddset(&all, BUCKETED_SIG_GIVE_UP);
    sigaddset(&all, BUCKETED_SIG_LOOK);
    /* Blocked while the handlers go in (forked children have every signal
     * blocked already; a -X parent does not). */
    child_signal_mask(&all);
    /* No SA_RESTART: they interrupt accept() and poll(). The look
     * interrupts the epoll wait all the same (signal(7)); should a module
     * open it elsewhere, it restarts what it lands in. */
    child_signal_handle(AP_SIG_GRACEFUL, on_leave_signal, &all, 0);
    child_signal_handle(AP_SIG_GRACEFUL_STOP, on_leave_signal, &all, 0);
    child_signal_handle(SIGINT, on_leave_signal, &all, 0);
    child_signal_handle(SIGTERM, on_die_signal, &all, 0);
    child_signal_handle(SIGHUP, on_die_signal, &all, 0);
    child_signal_handle(BUCKETED_SIG_GIVE_UP, on_give_up_signal, &all, 0);
    child_signal_handle(BUCKETED_SIG_LOOK, on_look_signal, &all,
                        SA_RESTART);

    /* The parent forked with every signal blocked; from here on only the
     * leave signals stay blocked (see child_accept.c), the give-up
     * signal, open only in the keep-alive wait (prefork_keepalive.c), and
     * the look signal, open only in the epoll wait (child_accept.c). */
    child_signal_set(&all, 0);
    sigaddset(&all, BUCKETED_SIG_GIVE_UP);
    sigaddset(&all, BUCKETED_SIG_LOOK);
    child_signal_mask(&all);
}

/* The bucket's sockets to wait on, and how (child_accept.c). */
static apr_status_t set_up(child_life *life)
{
    prefork_child *pc = life->model;
    bucketed_config *conf = life->conf;
    const bucket_rec *bk = &life->retained->generation->buckets[life->bucket];
    accept_waiter *w = &pc->waiter;
    apr_status_t rv;

    w->s = life->s;
    w->bucket = life->bucket;
    w->listeners = bk->listeners;
    w->mode = bucket_wait_mode(bucket_listeners_count(bk),
                               conf->kernel.epoll_exclusive);
    w->accept_mutex = bk->accept_mutex;
    w->leaving = &life->leaving;
    rv = keepalive_waiter_init(&pc->keepalive, life->retained, life->slot,
                               life->bucket);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    return accept_waiter_init(w, life->pchild);
}

static int serve(child_life *life, int *clean)
{
    prefork_child *pc = life->model;
    apr_bucket_alloc_t *bucket_alloc;
    apr_pool_t *ptrans;
    apr_status_t rv;
    apr_uint32_t served = 0;

    (void)clean;
    ap_create_sb_handle(&pc->sbh, life->pchild, life->slot, 0);
    rv = apr_pool_create(&ptrans, life->pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, life->s,
                     BKLOGNO(00122)
                     "bucketed: apr_pool_create for connections");
        return APEXIT_CHILDSICK;
    }
    apr_pool_tag(ptrans, "transaction");
    bucket_alloc = apr_bucket_alloc_create(life->pchild);

    while (!CHILD_LIFE_IS(life, leaving)
           && child_takes_another(served, ap_max_requests_per_child,
                                  bucket_stats_closing(life->retained))) {
        apr_socket_t *csd = NULL;
        conn_rec *c;

        ap_update_child_status(pc->sbh, SERVER_READY, NULL);
        pc->waiting = 1;
        rv = CHILD_LIFE_IS(life, dying)
             ? APR_EINTR : accept_waiter_wait(&pc->waiter, &csd, ptrans);
        pc->waiting = 0;
        if (CHILD_LIFE_IS(life, dying)) {
            /* SIGTERM during the wait; a connection just accepted is
             * closed with the process, as the handler would have. */
            return 0;
        }
        if (rv == APR_EGENERAL && child_life_slot_quiescing(life)) {
            /* Asked to leave (the slot's mark, should the signal not
             * have come), and the parent retired the socket under us. */
            break;
        }
        if (rv == APR_EGENERAL) {
            /* accept() itself is failing: let the parent start a fresh
             * child rather than spin. */
            return APEXIT_CHILDSICK;
        }
        if (rv != APR_SUCCESS) {
            continue;
        }
        bucket_stats_count_accept(life->retained, life->bucket);
        served++;
        c = ap_run_create_connection(ptrans, life->s, csd, life->slot,
                                     pc->sbh, bucket_alloc);
        if (c != NULL) {
            keepalive_waiter_attach(&pc->keepalive, c);
            life->serving = c;
            ap_process_connection(c, csd);
            life->serving = NULL;
            keepalive_waiter_close(&pc->keepalive, c);
        }
        apr_pool_clear(ptrans);
        /* Asked to leave while we were serving. */
        if (child_life_slot_quiescing(life)) {
            CHILD_LIFE_SET(life, leaving);
        }
    }
    accept_waiter_close(&pc->waiter);
    ap_update_child_status(pc->sbh, SERVER_GRACEFUL, NULL);
    return 0;
}

const child_model prefork_child_model = {
    sizeof(prefork_child), take_signals, set_up, serve
};
