/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_epoll.c: the epoll sets and eventfds of a ChildModel event child:
 * creating them (the workers' set with the work queue's, the stop and
 * the bucket's eventfds, and the keeper's), a change to the workers' set,
 * a write that wakes the keeper or a worker for queued work. Below
 * everything that accepts or waits (event_context.h lists the files).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif

#include "apr_portable.h"

#include "httpd.h"
#include "http_log.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

#if BUCKETED_HAS_EVENT_MODEL

#include "event_context.h"

apr_status_t ev_epoll_create(event_child_ctx *ctx, const char *what,
                             int *fd)
{
    *fd = epoll_create1(EPOLL_CLOEXEC);
    if (*fd < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                     BKLOGNO(00039)
                     "bucketed: epoll_create1 for an event child's %s", what);
        return err;
    }
    return APR_SUCCESS;
}

apr_status_t ev_add_eventfd(event_child_ctx *ctx, int epoll_fd, int *fd,
                            int *kind, int kind_value, int flags,
                            unsigned events, const char *what)
{
    struct epoll_event ev;
    int err;

    if (*fd < 0) {
        *fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | flags);
        if (*fd < 0) {
            err = errno;
            ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s,
                         BKLOGNO(00040)
                         "bucketed: eventfd (%s) in an event child", what);
            return err;
        }
    }
    *kind = kind_value;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.ptr = kind;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, *fd, &ev) < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ctx->s, BKLOGNO(00041)
                                                           "bucketed: "
                     "epoll_ctl for the eventfd (%s) in an event child",
                     what);
        return err;
    }
    return APR_SUCCESS;
}

apr_status_t ev_setup_epoll(event_child_ctx *ctx)
{
    const bucket_rec *bk = &ctx->retained->generation->buckets[ctx->bucket];
    ap_listen_rec *lr;
    apr_status_t rv;
    int i = 0;

    rv = ev_epoll_create(ctx, "workers", &ctx->epoll_fd);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    /* Level-triggered: every queued unit wakes a worker in turn. */
    rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->work_fd, &ctx->work_kind,
                        EV_WORK, EFD_SEMAPHORE, EPOLLIN, "work queue");
    /* Level-triggered and never read: every worker that waits in the set
     * after it is written sees it. */
    if (rv == APR_SUCCESS) {
        rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->stop_fd,
                            &ctx->stop_kind, EV_STOP, 0, EPOLLIN, "stop");
    }
    /* The bucket's, shared with the other children: edge-triggered and
     * never read, so each write wakes one worker of each child once. */
    if (rv == APR_SUCCESS) {
        ctx->nudge_fd = ctx->retained->buckets[ctx->bucket].nudge;
        rv = ev_add_eventfd(ctx, ctx->epoll_fd, &ctx->nudge_fd,
                            &ctx->nudge_kind, EV_NUDGE, 0, EPOLLIN | EPOLLET,
                            "bucket");
    }
    if (rv != APR_SUCCESS) {
        return rv;
    }
    for (lr = bk->listeners; lr; lr = lr->next) {
        ctx->num_listeners++;
    }
    ctx->listeners = apr_pcalloc(ctx->pchild, sizeof(ev_listener)
                                              * ctx->num_listeners);
    for (lr = bk->listeners; lr; lr = lr->next) {
        ctx->listeners[i].kind = EV_LISTENER;
        ctx->listeners[i].lr = lr;
        apr_os_sock_get(&ctx->listeners[i].fd, lr->sd);
        i++;
    }
    ctx->listening = 0;
    return APR_SUCCESS;
}

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

void ev_wake_keeper(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00022) "bucketed: write to the keeper's eventfd");
    }
}

void ev_signal_work_locked(event_child_ctx *ctx)
{
    uint64_t one = 1;

    if (write(ctx->work_fd, &one, sizeof(one)) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ctx->s,
                     BKLOGNO(00046)
                     "bucketed: write to the work queue's eventfd");
    }
}

#endif /* BUCKETED_HAS_EVENT_MODEL */
