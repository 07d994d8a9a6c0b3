/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_accept.c: a child's wait for its bucket's next connection.
 *
 * One socket: the child blocks in accept(); the kernel wakes one waiter per
 * connection. Several sockets (one per Listen address): each child has its
 * own epoll set holding them with EPOLLEXCLUSIVE, so a connection wakes
 * one idle child, not all of them, and no lock is needed; epoll_pwait()
 * opens the leave signals and the look atomically with the wait. Kernels
 * before 4.5 lack EPOLLEXCLUSIVE: there the bucket's children take turns
 * under its accept mutex, as prefork's do.
 *
 * The kernel gives a connection's wake-up to the first waiter on the
 * socket, and a waiter SIGKILLed stays there until it runs again to die. A
 * connection that comes meanwhile is taken to its grave from a blocked
 * accept(), which nothing here can give back; from epoll it stays queued
 * while the other children sleep on, until the parent's stall watch asks
 * them to look (BUCKETED_SIG_LOOK, parent_stalls.c).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#endif

#include "apr_portable.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "unixd.h"

#include "child_accept.h"
#include "bucketed.h"
#include "bucketed_log.h"

APLOG_USE_MODULE(mpm_bucketed);

static void allow_leave_signals(accept_waiter *w, int allow)
{
    if (sigprocmask(allow ? SIG_UNBLOCK : SIG_BLOCK, &w->leave_signals,
                    NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, w->s,
                     BKLOGNO(00001)
                     "bucketed: sigprocmask for the leave signals");
    }
}

apr_status_t child_accept_on(ap_listen_rec *lr, apr_socket_t **csd,
                             apr_pool_t *ptrans)
{
    void *accepted = NULL;
    apr_status_t rv = lr->accept_func ? lr->accept_func(&accepted, lr, ptrans)
                                      : ap_unixd_accept(&accepted, lr, ptrans);

    *csd = accepted;
    return rv;
}

void accept_waiter_leave(accept_waiter *w)
{
    ap_listen_rec *lr;

    for (lr = w->listeners; lr; lr = lr->next) {
        lr->active = 0;
    }
}

static apr_status_t wait_accept(accept_waiter *w, apr_socket_t **csd,
                                apr_pool_t *ptrans)
{
    apr_status_t rv;

    allow_leave_signals(w, 1);
    rv = *w->leaving ? APR_EINTR : child_accept_on(w->listeners, csd, ptrans);
    allow_leave_signals(w, 0);
    return *w->leaving && rv != APR_SUCCESS ? APR_EINTR : rv;
}

#ifdef __linux__
static apr_status_t epoll_init(accept_waiter *w, apr_pool_t *pchild)
{
    ap_listen_rec *lr;
    int err;

    w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epoll_fd < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, w->s,
                     BKLOGNO(00002)
                     "bucketed: epoll_create1 in a child of bucket %d",
                     w->bucket);
        return err;
    }
    w->events = apr_pcalloc(pchild, sizeof(struct epoll_event)
                                    * w->num_sockets);
    for (lr = w->listeners; lr; lr = lr->next) {
        struct epoll_event ev;
        apr_os_sock_t fd;

        apr_os_sock_get(&fd, lr->sd);
        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN | EPOLLEXCLUSIVE;
        ev.data.ptr = lr;
        if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            err = errno;
            ap_log_error(APLOG_MARK, APLOG_EMERG, err, w->s,
                         BKLOGNO(00003)
                         "bucketed: epoll_ctl(EPOLLEXCLUSIVE) for %pI",
                         lr->bind_addr);
            return err;
        }
    }
    if (sigprocmask(SIG_BLOCK, NULL, &w->wait_mask) < 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, w->s,
                     BKLOGNO(00004) "bucketed: sigprocmask in a child");
        return err;
    }
    sigdelset(&w->wait_mask, AP_SIG_GRACEFUL);
    sigdelset(&w->wait_mask, AP_SIG_GRACEFUL_STOP);
    sigdelset(&w->wait_mask, SIGINT);
    sigdelset(&w->wait_mask, BUCKETED_SIG_LOOK);
    return APR_SUCCESS;
}

/* Whether a leave signal waits, blocked, for delivery. */
static int leave_pending(accept_waiter *w)
{
    sigset_t pending, leave;

    if (sigpending(&pending) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, w->s,
                     BKLOGNO(00005)
                     "bucketed: sigpending in a child of bucket %d",
                     w->bucket);
        return 0;
    }
    sigandset(&leave, &pending, &w->leave_signals);
    return !sigisemptyset(&leave);
}

/* Every socket tried once, for a look: epoll reports none of this
 * child's sockets ready when their wake-up went to another. From a
 * different one each time, so that a busy address cannot keep a look
 * from a quiet one's stranded connection. */
static apr_status_t accept_from_any(accept_waiter *w, apr_socket_t **csd,
                                    apr_pool_t *ptrans)
{
    apr_status_t rv = APR_EAGAIN;
    int i;

    for (i = 0; i < w->num_sockets; i++) {
        ap_listen_rec *lr = w->listeners;
        int skip = bucket_ready_index(w->next_ready, i, w->num_sockets);

        while (skip-- > 0) {
            lr = lr->next;
        }
        rv = child_accept_on(lr, csd, ptrans);
        if (rv == APR_SUCCESS || rv == APR_EGENERAL) {
            break;
        }
    }
    return rv;
}

static apr_status_t wait_epoll(accept_waiter *w, apr_socket_t **csd,
                               apr_pool_t *ptrans)
{
    struct epoll_event *events = w->events;

    for (;;) {
        apr_status_t rv = APR_EAGAIN;
        int n, i;

        if (*w->leaving) {
            return APR_EINTR;
        }
        n = epoll_pwait(w->epoll_fd, events, w->num_sockets, -1,
                        &w->wait_mask);
        if (n < 0) {
            int err = errno;
            if (err != EINTR) {
                ap_log_error(APLOG_MARK, APLOG_ERR, err, w->s,
                             BKLOGNO(00006)
                             "bucketed: epoll_pwait in bucket %d", w->bucket);
                return APR_EGENERAL;
            }
            n = 0;
        }
        /* Linux runs the handlers of the signals epoll_pwait() opened
         * only when they interrupt the wait: one that finds connections
         * ready restores the mask with the leave signal still pending.
         * Under load it always finds some, and a child asked to leave
         * (even by a graceful stop) went on serving until its bucket's
         * queues were empty for a moment (seconds, or never). So look.
         * The connection this wake-up was for is still taken: with
         * EPOLLEXCLUSIVE no other child was woken for it. (The wake-up
         * may be a retired socket's shutdown instead: quietly, below.) */
        if (leave_pending(w)) {
            *w->leaving = 1;
            accept_waiter_leave(w);
        }
        /* Start at a different ready socket each time, so that a busy
         * address cannot starve a quiet one. */
        for (i = 0; i < n; i++) {
            ap_listen_rec *lr =
                events[bucket_ready_index(w->next_ready, i, n)].data.ptr;

            rv = child_accept_on(lr, csd, ptrans);
            if (rv == APR_SUCCESS || rv == APR_EGENERAL) {
                break;
            }
        }
        w->next_ready++;
        /* A leaving child leaves the look to the others. */
        if (rv != APR_SUCCESS && rv != APR_EGENERAL && w->asked_to_look
            && !*w->leaving) {
            w->asked_to_look = 0;
            rv = accept_from_any(w, csd, ptrans);
        }
        if (rv == APR_SUCCESS || rv == APR_EGENERAL) {
            return rv;
        }
        /* EAGAIN: another child was woken too and took it; EINTR; or a
         * look that found nothing. */
    }
}
#endif /* __linux__ */

static apr_status_t mutex_init(accept_waiter *w, apr_pool_t *pchild)
{
    ap_listen_rec *lr;
    apr_status_t rv;

    rv = apr_proc_mutex_child_init(&w->accept_mutex,
                                   apr_proc_mutex_lockfile(w->accept_mutex),
                                   pchild);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, w->s, BKLOGNO(00007)
                                                        "bucketed: "
                     "cannot init the accept mutex of bucket %d in a child",
                     w->bucket);
        return rv;
    }
    rv = apr_pollset_create(&w->pollset, w->num_sockets, pchild, 0);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, w->s,
                     BKLOGNO(00008)
                     "bucketed: apr_pollset_create for %d sockets",
                     w->num_sockets);
        return rv;
    }
    for (lr = w->listeners; lr; lr = lr->next) {
        apr_pollfd_t pfd;

        memset(&pfd, 0, sizeof(pfd));
        pfd.desc_type = APR_POLL_SOCKET;
        pfd.desc.s = lr->sd;
        pfd.reqevents = APR_POLLIN;
        pfd.client_data = lr;
        rv = apr_pollset_add(w->pollset, &pfd);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_EMERG, rv, w->s,
                         BKLOGNO(00009)
                         "bucketed: apr_pollset_add for %pI", lr->bind_addr);
            return rv;
        }
    }
    return APR_SUCCESS;
}

static apr_status_t poll_under_mutex(accept_waiter *w, apr_socket_t **csd,
                                     apr_pool_t *ptrans)
{
    apr_status_t rv;

    for (;;) {
        const apr_pollfd_t *ready;
        apr_int32_t num_ready = 0;

        allow_leave_signals(w, 1);
        rv = *w->leaving ? APR_EINTR
                         : apr_pollset_poll(w->pollset, -1, &num_ready,
                                            &ready);
        allow_leave_signals(w, 0);
        if (*w->leaving) {
            return APR_EINTR;
        }
        if (rv != APR_SUCCESS) {
            if (APR_STATUS_IS_EINTR(rv)) {
                continue;
            }
            ap_log_error(APLOG_MARK, APLOG_ERR, rv, w->s,
                         BKLOGNO(00010)
                         "bucketed: apr_pollset_poll on bucket %d",
                         w->bucket);
            return APR_EGENERAL;
        }
        rv = child_accept_on(ready[bucket_ready_index(w->next_ready++, 0,
                                                      num_ready)].client_data,
                             csd, ptrans);
        if (rv == APR_SUCCESS || rv == APR_EGENERAL) {
            return rv;
        }
    }
}

static apr_status_t wait_mutex(accept_waiter *w, apr_socket_t **csd,
                               apr_pool_t *ptrans)
{
    apr_status_t rv = apr_proc_mutex_lock(w->accept_mutex);

    if (rv != APR_SUCCESS) {
        if (APR_STATUS_IS_EINTR(rv)) {
            return APR_EINTR;
        }
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, w->s, BKLOGNO(00011)
                                                        "bucketed: "
                     "child %" APR_PID_T_FMT " cannot take the accept mutex "
                     "of bucket %d", getpid(), w->bucket);
        return APR_EGENERAL;
    }
    rv = poll_under_mutex(w, csd, ptrans);
    apr_proc_mutex_unlock(w->accept_mutex);
    return rv;
}

/* One socket: a blocking accept(). But the socket is one open file with
 * every generation's copies, and the parent makes it non-blocking for a
 * generation that gives the bucket several sockets (a reload that adds a
 * Listen): this child, of the generation before, would then get EAGAIN
 * at once, again and again, and spin until it leaves, starving the new
 * children on a small machine. So once accept() says EAGAIN, the child
 * waits in epoll from then on, as with several sockets. */
static apr_status_t wait_one_socket(accept_waiter *w, apr_socket_t **csd,
                                    apr_pool_t *ptrans)
{
    apr_status_t rv = wait_accept(w, csd, ptrans);

#ifdef __linux__
    if (APR_STATUS_IS_EAGAIN(rv) && w->epoll_fd < 0) {
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, w->s, BKLOGNO(00256)
                     "bucketed: a child of bucket %d waits in epoll from "
                     "now on: its socket was made non-blocking", w->bucket);
        if (epoll_init(w, w->pchild) != APR_SUCCESS) {
            return APR_EGENERAL;
        }
        w->mode = BUCKET_WAIT_EPOLL;
    }
#endif
    return rv;
}

apr_status_t accept_waiter_init(accept_waiter *w, apr_pool_t *pchild)
{
    ap_listen_rec *lr;

    w->num_sockets = 0;
    for (lr = w->listeners; lr; lr = lr->next) {
        w->num_sockets++;
    }
    w->next_ready = 0;
    w->asked_to_look = 0;
    w->epoll_fd = -1;
    w->pchild = pchild;
    switch (w->mode) {
#ifdef __linux__
    case BUCKET_WAIT_EPOLL:
        return epoll_init(w, pchild);
#endif
    case BUCKET_WAIT_MUTEX:
        return mutex_init(w, pchild);
    default:
        return APR_SUCCESS;
    }
}

apr_status_t accept_waiter_wait(accept_waiter *w, apr_socket_t **csd,
                                apr_pool_t *ptrans)
{
    switch (w->mode) {
#ifdef __linux__
    case BUCKET_WAIT_EPOLL:
        return wait_epoll(w, csd, ptrans);
#endif
    case BUCKET_WAIT_MUTEX:
        return wait_mutex(w, csd, ptrans);
    default:
        return wait_one_socket(w, csd, ptrans);
    }
}

void accept_waiter_close(accept_waiter *w)
{
    apr_status_t rv;

    /* Out of the wait set first: an epoll registration belongs to the open
     * socket, which the parent and the bucket's other children still
     * hold, not to this child's descriptor. */
    if (w->epoll_fd >= 0) {
        if (close(w->epoll_fd) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_ERR, err, w->s,
                         BKLOGNO(00012)
                         "bucketed: close of the epoll set of a child of "
                         "bucket %d", w->bucket);
        }
        w->epoll_fd = -1;
    }
    if (w->pollset != NULL) {
        rv = apr_pollset_destroy(w->pollset);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_ERR, rv, w->s,
                         BKLOGNO(00013)
                         "bucketed: apr_pollset_destroy in a child of "
                         "bucket %d", w->bucket);
        }
        w->pollset = NULL;
    }
    ap_close_listeners_ex(w->listeners);
}
