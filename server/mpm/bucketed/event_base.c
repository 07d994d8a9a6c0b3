/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_base.c: what every part of a ChildModel event child uses, and
 * which uses none of them: the transaction pools its threads share, the
 * eventfds that wake the keeper and the bucket's children, a change to
 * the epoll set, a look at a listening socket. The bottom of the event model's
 * files (event_child.h lists them top down).
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_child.h"

/* A new transaction pool, with an allocator of its own (one thread at a
 * time uses it). */
apr_pool_t *ev_new_pool(event_child_ctx *ctx)
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

apr_pool_t *ev_take_spare_pool_locked(event_child_ctx *ctx)
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

void ev_wake_keeper(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00022) "bucketed: write to the keeper's eventfd");
    }
}

/* ---- the epoll set and the listening sockets */

int ev_epoll_set(event_child_ctx *ctx, int op, int fd, unsigned events,
                 void *ptr)
{
    struct epoll_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.ptr = ptr;
    if (epoll_ctl(ctx->epoll_fd, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev)
        < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s, BKLOGNO(00023)
                                                         "bucketed: "
                     "epoll_ctl(%d) for descriptor %d in an event child",
                     op, fd);
        return -1;
    }
    return 0;
}

int ev_listener_readable(event_child_ctx *ctx, const ev_listener *l)
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
 * of its bucket, and those that can take connections try. */
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

#endif /* BUCKETED_HAS_EVENT_MODEL */
