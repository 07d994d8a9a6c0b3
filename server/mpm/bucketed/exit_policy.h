/*
 * exit_policy: what a child's exit means for its bucket. httpd's contract
 * (ap_process_child_status): a child that exits APEXIT_CHILDSICK hit a
 * resource shortage, so new children come slowly; a child that crashes
 * is replaced, but a bucket whose children keep failing gets its next
 * child later and later instead of a fork loop. Pure.
 */
#ifndef EXIT_POLICY_H
#define EXIT_POLICY_H

#include "apr_time.h"

/* Failures further apart than this do not add up. */
#define EXIT_FAILURE_WINDOW apr_time_from_sec(60)
/* The longest a bucket waits for its next child. */
#define EXIT_MAX_HOLD apr_time_from_sec(60)

typedef enum {
    CHILD_EXIT_NORMAL,    /* left on request or by its own limits */
    CHILD_EXIT_SICK,      /* exited APEXIT_CHILDSICK */
    CHILD_EXIT_CRASH      /* killed by a signal nobody in httpd sent */
} child_exit_kind;

typedef struct {
    int failures;              /* sick or crashed exits in a row */
    apr_time_t last_failure;
    apr_time_t hold_until;     /* no new child in the bucket before this */
} bucket_health;

/* sick: ap_process_child_status() said APEXIT_CHILDSICK; signaled: the
 * child died of a signal; asked: the parent had asked it to leave. */
child_exit_kind child_exit_classify(int sick, int signaled, int asked);

/* Records an exit in the bucket's health; returns how long the bucket must
 * wait for its next child (0: replace it now). The first crash in a while
 * is replaced at once; sick exits and repeated crashes wait 1 s, then
 * twice as long each time, up to EXIT_MAX_HOLD. */
apr_interval_time_t child_exit_note(bucket_health *health,
                                    child_exit_kind kind, apr_time_t now);

/* Whether the bucket may get a new child now. */
int bucket_health_may_grow(const bucket_health *health, apr_time_t now);

#endif /* EXIT_POLICY_H */
