/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_accept.c: everything a ChildModel event child does to take new
 * connections, in one file (as nginx keeps accepting, its mutex and
 * enabling accept events in one):
 *   - the bucket's listening sockets in the workers' epoll set or out of
 *     it, as the accept rule (policy_event.c) says for the counts now; a
 *     child out of the set says so in the scoreboard (not_accepting),
 *     where the parent's census sees it; a leaving child closes its
 *     copies;
 *   - the child's connection count, which the accept rule reads, and the
 *     connections' transaction pools (a new connection takes a spare one
 *     or a new one; a closed one's is kept for reuse);
 *   - a worker's accept: a reservation under the accept rule taken in
 *     the critical section its wake-up is counted in, the accept itself,
 *     the bucket's children taking turns at the front of the socket's
 *     wait queue, and connections found waiting behind the one taken,
 *     queued for idle workers (the work queue);
 *   - waking the bucket's other children when connections are left
 *     waiting in its accept queue.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/socket.h>
#endif

#include "apr_portable.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "bucketed.h"
#include "child_accept.h"
#include "child_life.h"
#include "policy_event.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"
#include "stats.h"

/* ------------------------------------- connections, and their pools */

void ev_count_connection_locked(event_child_ctx *ctx, int delta)
{
    ctx->connections += delta;
    ap_get_scoreboard_process(ctx->slot)->connections = ctx->connections;
}

int ev_open_connections(event_child_ctx *ctx)
{
    return ctx->connections - ctx->timeouts[WAIT_LINGER].count
           - ctx->reclaimed;
}

int ev_closing_down(event_child_ctx *ctx)
{
    return CHILD_LIFE_IS(ctx->life, leaving)
           || CHILD_LIFE_IS(ctx->life, dying);
}

/* A new transaction pool, with an allocator of its own (one thread at a
 * time uses it). */
static apr_pool_t *new_pool(event_child_ctx *ctx)
{
    apr_pool_t *p;
    apr_status_t rv = child_pool_with_allocator(&p, ctx->pchild,
                                                "transaction");

    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ERR, rv, ctx->s,
                     BKLOGNO(00021)
                     "bucketed: cannot create a connection's pool");
        return NULL;
    }
    return p;
}

static apr_pool_t *take_spare_pool_locked(event_child_ctx *ctx)
{
    return ctx->num_spare_pools > 0 ? ctx->spare_pools[--ctx->num_spare_pools]
                                    : NULL;
}

/* Kept for reuse up to a bound, destroyed beyond it. */
void ev_keep_spare_pool_locked(event_child_ctx *ctx, apr_pool_t *p)
{
    if (ctx->num_spare_pools < ctx->threads + SPARE_POOLS) {
        ctx->spare_pools[ctx->num_spare_pools++] = p;
    }
    else {
        apr_pool_destroy(p);
    }
}

/* ------------------------------------------------ the listening sockets */

/* How a listening socket is in the set: edge-triggered, and exclusive
 * where the kernel has it. */
static unsigned listener_events(const event_child_ctx *ctx)
{
    return EPOLLIN | EPOLLET
           | (ctx->conf->kernel.epoll_exclusive ? EPOLLEXCLUSIVE : 0);
}

/* Whether a listening socket has a connection waiting (1 when poll()
 * fails: better a needless wake-up than a stranded connection). */
static int listener_readable(event_child_ctx *ctx, const ev_listener *l)
{
    struct pollfd pfd;
    int n;

    pfd.fd = l->fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    n = poll(&pfd, 1, 0);
    if (n < 0) {
        int err = errno;
        /* Unknown: say readable, so that the bucket is woken for it. */
        ap_log_error(APLOG_MARK, err == EINTR ? APLOG_DEBUG : APLOG_ERR, err,
                     ctx->s, BKLOGNO(00024)
                             "bucketed: poll of a listening socket");
        return 1;
    }
    return n > 0 && (pfd.revents & POLLIN);
}

/* EPOLLEXCLUSIVE wakes one waiting child per new connection; a child that
 * was woken but leaves connections in the accept queue (it filled up, or
 * is leaving) would strand them until the next connection wakes someone,
 * which never comes when every request in flight waits on one of them (a
 * request proxied to its own server). So such a child wakes every child
 * of its bucket, and those that can take connections try (event_context.h:
 * ev_nudge_bucket). */
void ev_nudge_bucket(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->nudge_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00025)
                     "bucketed: write to bucket %d's eventfd", ctx->bucket);
    }
}

static int any_listener_readable(event_child_ctx *ctx)
{
    int i;

    for (i = 0; i < ctx->num_listeners; i++) {
        if (listener_readable(ctx, &ctx->listeners[i])) {
            return 1;
        }
    }
    return 0;
}

void ev_nudge_if_waiting(event_child_ctx *ctx)
{
    if (any_listener_readable(ctx)) {
        ev_nudge_bucket(ctx);
    }
}

int ev_shut_out_locked(event_child_ctx *ctx)
{
    return !ctx->listening && !ev_closing_down(ctx)
           && ctx->timeouts[WAIT_KEEPALIVE].count > 0
           && any_listener_readable(ctx);
}

/* Takes the first `count` listeners out of the set, all but `missing`
 * (one the kernel did not take in). */
static void take_out_locked(event_child_ctx *ctx, int count,
                            const ev_listener *missing)
{
    int i;

    for (i = 0; i < count; i++) {
        ev_listener *l = &ctx->listeners[i];

        if (l != missing) {
            ev_epoll_set(ctx, EPOLL_CTL_DEL, l->fd, 0, NULL);
        }
    }
}

/* The kernel refused a listening socket into the set (ev_epoll_set()
 * logged its errno), and the others are out again: the child would
 * otherwise believe it listens while no connection reaches it. It says
 * so in the scoreboard and leaves, sick (the kernel is short of memory
 * for the entry, ENOMEM, or of entries, ENOSPC): the parent starts
 * another at its back-off's pace; the bucket's other children are woken
 * for what waits. Under mutex. */
static void cannot_listen_locked(event_child_ctx *ctx)
{
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, ctx->s, BKLOGNO(00150)
                 "bucketed: child %" APR_PID_T_FMT " of bucket %d could "
                 "not put its listening sockets in its epoll set: it "
                 "leaves, and the parent starts another", getpid(),
                 ctx->bucket);
    ctx->listening = 0;
    ap_get_scoreboard_process(ctx->slot)->not_accepting = 1;
    SET(ctx, sick);
    CHILD_LIFE_SET(ctx->life, leaving);
    ev_wake_keeper(ctx);
    ev_nudge_if_waiting(ctx);
}

/* Every listener into the set: whether the kernel took them all (if not,
 * none is left in). */
static int put_in_locked(event_child_ctx *ctx)
{
    unsigned events = listener_events(ctx);
    int i;

    for (i = 0; i < ctx->num_listeners; i++) {
        ev_listener *l = &ctx->listeners[i];

        if (ev_epoll_set(ctx, EPOLL_CTL_ADD, l->fd, events, l) < 0) {
            take_out_locked(ctx, i, NULL);
            return 0;
        }
    }
    return 1;
}

void ev_update_listening_locked(event_child_ctx *ctx)
{
    int want;

    want = !ev_closing_down(ctx)
           && (event_should_listen(ev_open_connections(ctx),
                                   ctx->idle_workers - ctx->queued,
                                   ctx->threads, ctx->conf->async_factor)
               || event_swapping(ev_open_connections(ctx), ctx->swap_until));
    if (want == ctx->listening) {
        return;
    }
    if (want && !put_in_locked(ctx)) {
        cannot_listen_locked(ctx);
        return;
    }
    if (!want) {
        take_out_locked(ctx, ctx->num_listeners, NULL);
        /* Back in the set, the kernel reports what waits. */
        ctx->accept_pending = 0;
    }
    ctx->listening = want;
    ap_get_scoreboard_process(ctx->slot)->not_accepting = !want;
    /* A connection that woke this child may be waiting still. */
    if (!want) {
        ev_nudge_if_waiting(ctx);
    }
}

/* A leaving child closes its copies of the listening sockets, so that
 * once every holder has closed its own (the parent closes its at a
 * graceful stop) the kernel stops queueing connections for the bucket.
 * Workers may still poll or accept on these descriptors (an event taken
 * before the sockets left the set, a reservation made before the child
 * began to leave): a plain close() would let the number be reused by
 * whatever the process opens next. So each is replaced (dup2(), atomic)
 * by a socket that never listens: a late poll() finds nothing to read and
 * a late accept() fails with EINVAL, which ap_unixd_accept() returns
 * quietly for an inactive listener. The pool cleanup closes the
 * replacement. Under mutex, once ev_update_listening_locked() has taken
 * them out of the set (an epoll entry belongs to the open socket, which
 * others still hold, not to this descriptor). */
void ev_close_listeners_locked(event_child_ctx *ctx)
{
    int placeholder, i;

    if (ctx->listeners_closed || ctx->listening) {
        return;
    }
    ctx->listeners_closed = 1;
    placeholder = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (placeholder < 0) {
        int err = errno;
        /* The sockets stay open until the child exits, as before. */
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00043)
                     "bucketed: socket() to close a leaving child's "
                     "listeners");
        return;
    }
    for (i = 0; i < ctx->num_listeners; i++) {
        ev_listener *l = &ctx->listeners[i];

        l->lr->active = 0;
        if (dup3(placeholder, l->fd, O_CLOEXEC) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                         BKLOGNO(00044)
                         "bucketed: dup3() over listening socket %pI",
                         l->lr->bind_addr);
        }
    }
    if (close(placeholder) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00045) "bucketed: close of a placeholder socket");
    }
}

/* ------------------------------------------------- the work queue */

void ev_queue_work_locked(event_child_ctx *ctx, ev_conn *ec)
{
    ec->next = NULL;
    if (ctx->queue_tail != NULL) {
        ctx->queue_tail->next = ec;
    }
    else {
        ctx->queue_head = ec;
    }
    ctx->queue_tail = ec;
    ctx->queued++;
    ev_signal_work_locked(ctx);
    ev_update_listening_locked(ctx);
}

ev_conn *ev_dequeue_work_locked(event_child_ctx *ctx)
{
    ev_conn *ec = ctx->queue_head;

    if (ec != NULL) {
        ctx->queue_head = ec->next;
        if (ctx->queue_head == NULL) {
            ctx->queue_tail = NULL;
        }
        ctx->queued--;
        ev_update_listening_locked(ctx);
    }
    return ec;
}

/* ------------------------------------------------------------ accepting */

/* Whether one more connection may be accepted, with `idle` workers free
 * for it (under mutex). */
static int may_accept_locked(event_child_ctx *ctx, int idle)
{
    int open = ev_open_connections(ctx);

    return !ev_closing_down(ctx)
           && (event_may_accept(open, idle, ctx->threads,
                                ctx->conf->async_factor)
               || (idle > 0 && event_swapping(open, ctx->swap_until)))
           && child_takes_another(ctx->served, ap_max_requests_per_child,
                                  ctx->server_closing);
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
    *ptrans = take_spare_pool_locked(ctx);
    if (ap_max_requests_per_child <= 0) {
        return 0;
    }
    ctx->served++;
    return !child_takes_another(ctx->served, ap_max_requests_per_child,
                                ctx->server_closing);
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
    if (ctx->listening
        && ev_epoll_set(ctx, EPOLL_CTL_DEL, l->fd, 0, NULL) == 0
        && ev_epoll_set(ctx, EPOLL_CTL_ADD, l->fd, listener_events(ctx),
                        l) < 0) {
        /* Out of the set now: so are the others, and the child leaves. */
        take_out_locked(ctx, ctx->num_listeners, l);
        cannot_listen_locked(ctx);
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
        ptrans = new_pool(ctx);
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

/* A connection this child could not take waits on a listening socket
 * that stays in its set, edge-triggered: no new wake-up comes for it
 * until another connection arrives. The next worker of the child to come
 * back idle tries the sockets once (event_worker.c). Under mutex. */
static void left_behind_locked(event_child_ctx *ctx)
{
    if (ctx->listening) {
        ctx->accept_pending = 1;
    }
}

/* Connections queued behind the one a worker took go to the work queue
 * while idle workers are left for them. A poll() looks first, so the
 * usual case (none behind) takes no lock. */
static void accept_behind(event_child_ctx *ctx, ev_listener *l)
{
    while (listener_readable(ctx, l)) {
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
        if (!ok) {
            left_behind_locked(ctx);
        }
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

/* A worker's accept on l. A child woken by the bucket's eventfd (nudged)
 * that cannot take the connection does not write to it again: that
 * wake-up reached every child of the bucket, and the children that cannot
 * take it would otherwise wake each other for as long as it waits. */
static ev_conn *accept_for_worker_locked(event_child_ctx *ctx,
                                         ev_listener *l, int nudged)
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
        if (!nudged && listener_readable(ctx, l)) {
            ev_nudge_bucket(ctx);
            ev_lock(ctx);
            left_behind_locked(ctx);
            ev_unlock(ctx);
        }
        return NULL;
    }
    ec = accept_reserved(ctx, l, ptrans, last);
    if (ec != NULL) {
        accept_behind(ctx, l);
    }
    return ec;
}

ev_conn *ev_accept_for_worker_locked(event_child_ctx *ctx, ev_listener *l)
{
    return accept_for_worker_locked(ctx, l, 0);
}

ev_conn *ev_accept_nudged_locked(event_child_ctx *ctx)
{
    ev_conn *ec = NULL;
    int i;

    ev_unlock(ctx);
    for (i = 0; i < ctx->num_listeners && ec == NULL; i++) {
        ev_lock(ctx);
        ec = accept_for_worker_locked(ctx, &ctx->listeners[i], 1);
    }
    return ec;
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
