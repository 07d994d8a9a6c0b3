/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_accept: how a child waits for its bucket's next connection, in the
 * mode the plan gives the bucket (bucket_wait_mode): blocked in accept()
 * on its one socket, in epoll_pwait() with EPOLLEXCLUSIVE on several, or
 * polling several under the bucket's accept mutex on kernels before 4.5.
 *
 * The leave signals (prefork_child.c) stay blocked except while waiting, so
 * that request processing never sees EINTR from them; a wait returns APR_EINTR
 * once *leaving is set. The look signal (BUCKETED_SIG_LOOK) is open only in
 * the epoll wait: its handler sets asked_to_look (ACCEPT_WAITER_LOOK), and
 * the child tries every socket once.
 */
#ifndef CHILD_ACCEPT_H
#define CHILD_ACCEPT_H

#include <signal.h>

#include "apr_poll.h"
#include "apr_proc_mutex.h"

#include "httpd.h"
#include "ap_listen.h"

#include "policy_plan.h"

typedef struct {
    server_rec *s;
    int bucket;
    ap_listen_rec *listeners;        /* this bucket's sockets */
    bucket_wait_e mode;
    apr_proc_mutex_t *accept_mutex;  /* BUCKET_WAIT_MUTEX */
    apr_pollset_t *pollset;          /* BUCKET_WAIT_MUTEX */
    int epoll_fd;                    /* BUCKET_WAIT_EPOLL */
    void *events;                    /* BUCKET_WAIT_EPOLL: room for one
                                      * event per socket */
    int num_sockets;
    unsigned int next_ready;         /* wake-ups: rotates the first socket
                                      * tried (bucket_ready_index) */
    sigset_t leave_signals;
    sigset_t wait_mask;              /* BUCKET_WAIT_EPOLL: the signal mask
                                      * while waiting, leave signals and
                                      * the look open */
    volatile apr_uint32_t *leaving;
    volatile sig_atomic_t asked_to_look; /* BUCKETED_SIG_LOOK came: try
                                          * every socket once */
    apr_pool_t *pchild;              /* BUCKET_WAIT_ACCEPT: for the epoll
                                      * set it may switch to */
} accept_waiter;

/* For the look signal's handler. */
#define ACCEPT_WAITER_LOOK(w) ((w)->asked_to_look = 1)

/* For the leave signals' handler: the bucket's sockets are no longer this
 * child's to serve. The parent shuts a retired duplicate down once its
 * children are asked to leave, and one still blocked in accept() then gets
 * EINVAL; the handler runs before httpd looks at it, which logs a failure
 * on an active listener as an error and on an inactive one at debug. Only
 * stores: safe in a handler. */
void accept_waiter_leave(accept_waiter *w);

/* Sets up the waiter's mode in the child (pchild owns what it creates).
 * The caller has filled s, bucket, listeners, mode, accept_mutex,
 * leave_signals and leaving. */
apr_status_t accept_waiter_init(accept_waiter *w, apr_pool_t *pchild);

/* The next connection: APR_SUCCESS with *csd; APR_EINTR when asked to
 * leave; APR_EGENERAL when accepting is broken for good; anything else
 * is worth another try. */
apr_status_t accept_waiter_wait(accept_waiter *w, apr_socket_t **csd,
                                apr_pool_t *ptrans);

/* A leaving child's wait set and its copies of the bucket's sockets are
 * closed: once every holder has closed its own (the parent closes its at a
 * graceful stop), the kernel stops queueing connections to the socket. */
void accept_waiter_close(accept_waiter *w);

/* One accept() on lr, through its accept_func when it has one (mod_ssl
 * and others may set it), else ap_unixd_accept(). */
apr_status_t child_accept_on(ap_listen_rec *lr, apr_socket_t **csd,
                             apr_pool_t *ptrans);

#endif /* CHILD_ACCEPT_H */
