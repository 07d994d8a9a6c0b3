/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_stall: whether a bucket has stalled, from what the parent sees
 * of it on every pass: connections waiting in its sockets' accept queues
 * and its children's accept count. Connections that wait while nothing is
 * accepted for a while mean that nobody accepts from that socket, whatever
 * the scoreboard says: children hung (a stuck module, SIGSTOP), event
 * children at their connection limit, children that look idle and are not.
 * The kernel's hash keeps sending the bucket its share of new connections,
 * so such a bucket is counted as having no idle child, and maintenance
 * gives it one. Pure: numbers in, verdict out.
 */
#ifndef POLICY_STALL_H
#define POLICY_STALL_H

#include "apr_time.h"

/* How long connections may wait with nothing accepted before the bucket
 * counts as stalled, and then how long a stalled bucket's new child gets
 * to start accepting before it counts as stalled again (and gets another):
 * far longer than an idle child takes to accept, short beside what a
 * client notices. */
#define STALL_AFTER apr_time_from_msec(200)

typedef struct {
    int seen;                  /* an observation came before */
    apr_uint32_t accepted;     /* the accept count last seen */
    apr_time_t waiting_since;  /* start of the current wait with nothing
                                * accepted; 0 = nothing waits */
    apr_time_t stalled_since;  /* 0 = not stalled */
    apr_interval_time_t lasted;    /* after STALL_ENDED: how long the
                                    * stall lasted */
} stall_watch;

typedef enum {
    STALL_NONE,                /* serving, nothing waits, or a stalled
                                * bucket between two verdicts */
    STALL_BEGAN,               /* stalled now, and was not */
    STALL_GOES_ON,             /* still stalled, another `after` passed */
    STALL_ENDED                /* accepting again after a stall */
} stall_verdict;

/* Folds in one observation at `now`: `queued` connections waiting in the
 * bucket's accept queues, `accepted` the bucket's accept count (it may
 * wrap). BEGAN and GOES_ON come at most once per `after`: each asks for
 * one more child. */
stall_verdict stall_watch_update(stall_watch *watch, apr_uint32_t queued,
                                 apr_uint32_t accepted, apr_time_t now,
                                 apr_interval_time_t after);

/* How long the bucket has been stalled at `now`; 0 when it is not. */
apr_interval_time_t stall_watch_stalled_for(const stall_watch *watch,
                                            apr_time_t now);

#endif /* POLICY_STALL_H */
