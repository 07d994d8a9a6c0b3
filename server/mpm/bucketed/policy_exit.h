/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_exit: what a child's exit means for its bucket. httpd's contract
 * (ap_process_child_status): a child that exits APEXIT_CHILDSICK hit a
 * resource shortage, so new children come slowly; a child that crashes
 * is replaced, but a bucket whose children keep failing before they are
 * ready gets its next children later and later instead of a fork loop.
 * The back-off slows a bucket's growth, never empties it: the bucket's
 * socket keeps receiving its share of new connections, so a bucket left
 * with no child still gets one child at a time. Pure.
 */
#ifndef POLICY_EXIT_H
#define POLICY_EXIT_H

#include "apr.h"
#include "apr_time.h"

/* Failures further apart than this do not add up. */
#define EXIT_FAILURE_WINDOW apr_time_from_sec(60)
/* The longest a bucket waits for its next child. */
#define EXIT_MAX_HOLD apr_time_from_sec(60)
/* A bucket with no child left waits at most this long after its last
 * failure for one: its clients wait no longer than that, and a child that
 * cannot start costs a fork a second per bucket, no fork loop. */
#define EXIT_FLOOR_RETRY apr_time_from_sec(1)
/* bucket_health_grow_limit(): no limit. */
#define EXIT_GROW_ANY 0x7fffffff

typedef enum {
    CHILD_EXIT_NORMAL,    /* left on request or by its own limits */
    CHILD_EXIT_SICK,      /* exited APEXIT_CHILDSICK */
    CHILD_EXIT_CRASH,     /* killed by a signal nobody in httpd sent before
                           * it was ready to serve */
    CHILD_EXIT_CRASH_SERVING  /* the same once it was ready: a request (or
                           * its exit) crashed it, as a module's bug does;
                           * such crashes come no faster than requests, so
                           * they are replaced at once, as stock prefork
                           * replaces them, and count towards no back-off */
} child_exit_kind;

typedef struct {
    int failures;              /* sick or crashed exits in a row */
    apr_time_t last_failure;
    apr_time_t hold_until;     /* no new child in the bucket before this */
} bucket_health;

/* sick: ap_process_child_status() said APEXIT_CHILDSICK; signaled: the
 * child died of a signal; asked: the parent had asked it to leave;
 * was_ready: it had finished its set-up (reported itself ready). */
child_exit_kind child_exit_classify(int sick, int signaled, int asked,
                                    int was_ready);

/* Whether a child's set-up that failed with err (an errno, or an APR
 * status carrying one) can succeed later: descriptors, memory, threads or
 * processes running out. Such a child exits APEXIT_CHILDSICK and the
 * parent retries at its pace; anything else cannot pass by waiting, and
 * the child exits APEXIT_CHILDFATAL. */
int child_setup_failure_passes(int err);

/* Whether a child that has taken `served` connections takes another:
 * below MaxConnectionsPerChild (max_connections; 0 or less: no limit), or
 * at any count while a stop on held sockets has every child serve on
 * (stopping). Then every child goes within KeepAliveTimeout and a
 * stopping parent replaces no exit, so one that left at its limit would
 * leave its bucket's queue waiting for the next start. */
int child_takes_another(apr_uint32_t served, int max_connections,
                        int stopping);

/* Records an exit in the bucket's health; returns how long the bucket must
 * wait for its next child (0: replace it now). The first crash in a while
 * is replaced at once; sick exits and repeated crashes wait 1 s, then
 * twice as long each time, up to EXIT_MAX_HOLD. */
apr_interval_time_t child_exit_note(bucket_health *health,
                                    child_exit_kind kind, apr_time_t now);

/* How many children the bucket may gain now, given the children it has
 * (running, starting or on their way in): EXIT_GROW_ANY once its back-off
 * is over; while it lasts, 1 when it has no child left and
 * EXIT_FLOOR_RETRY has passed since its last failure, else 0. */
int bucket_health_grow_limit(const bucket_health *health, int children,
                             apr_time_t now);

#endif /* POLICY_EXIT_H */
