/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefork_keepalive: how a prefork-model child waits for a keep-alive
 * connection's next request. httpd would wait inside its socket read, where
 * nothing but the request or KeepAliveTimeout ends the wait; this waits in
 * the MPM instead, so that the child can close the connection when its
 * parent asks (BUCKETED_SIG_GIVE_UP): at MaxRequestWorkers, a client waiting
 * in the bucket's accept queue is then served by a child whose connection
 * has been idle long enough (keepalive_reclaimable), where stock prefork's
 * client waits for a child to free (docs/design.md, "At the limit itself").
 */
#ifndef PREFORK_KEEPALIVE_H
#define PREFORK_KEEPALIVE_H

#include <signal.h>

#include "httpd.h"

#include "bucketed.h"

typedef struct {
    bucketed_retained *retained;
    int slot;
    int bucket;
    sigset_t wait_mask;              /* the signal mask in a wait idle
                                      * long enough for a give-up: the
                                      * give-up signal open */
    volatile sig_atomic_t asked;     /* the give-up signal came */
    int gave_up;                     /* the current connection was given
                                      * up: close it without lingering */
} keepalive_waiter;

/* The child's waiter, once its signal handlers are in: the wait's mask is
 * the current one with BUCKETED_SIG_GIVE_UP open. */
apr_status_t keepalive_waiter_init(keepalive_waiter *kw,
                                   bucketed_retained *retained, int slot,
                                   int bucket);

/* For the give-up signal's handler. */
#define KEEPALIVE_WAITER_ASKED(kw) ((kw)->asked = 1)

/* Puts the wait on a new connection, before ap_process_connection(). */
void keepalive_waiter_attach(keepalive_waiter *kw, conn_rec *c);

/* The connection's end once httpd is done with it: at once, after the
 * close_notify and FIN, if it was given up (the client sends nothing more,
 * and a pooled proxy connection would not close its end for seconds);
 * else httpd's lingering close. */
void keepalive_waiter_close(keepalive_waiter *kw, conn_rec *c);

/* At start-up, with the other hooks. */
void keepalive_waiter_register(void);

#endif /* PREFORK_KEEPALIVE_H */
