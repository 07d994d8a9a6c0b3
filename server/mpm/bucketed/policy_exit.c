/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_exit.c: slowing a bucket's new children after failed exits.
 */
#include <errno.h>

#include "policy_exit.h"

child_exit_kind child_exit_classify(int sick, int signaled, int asked,
                                    int was_ready)
{
    if (sick) {
        return CHILD_EXIT_SICK;
    }
    if (!signaled || asked) {
        return CHILD_EXIT_NORMAL;
    }
    return was_ready ? CHILD_EXIT_CRASH_SERVING : CHILD_EXIT_CRASH;
}

int child_takes_another(apr_uint32_t served, int max_connections,
                        int stopping)
{
    return max_connections <= 0 || stopping
           || served < (apr_uint32_t)max_connections;
}

apr_interval_time_t child_exit_note(bucket_health *health,
                                    child_exit_kind kind, apr_time_t now)
{
    apr_interval_time_t hold;
    int doublings;

    if (kind == CHILD_EXIT_CRASH_SERVING) {
        return 0;
    }
    if (kind == CHILD_EXIT_NORMAL) {
        health->failures = 0;
        health->hold_until = 0;
        return 0;
    }
    if (now - health->last_failure > EXIT_FAILURE_WINDOW) {
        health->failures = 0;
    }
    health->failures++;
    health->last_failure = now;
    /* A lone crash costs nothing; a sick exit starts the back-off. */
    doublings = health->failures - (kind == CHILD_EXIT_CRASH ? 2 : 1);
    if (doublings < 0) {
        health->hold_until = 0;
        return 0;
    }
    hold = apr_time_from_sec(1);
    while (doublings-- > 0 && hold < EXIT_MAX_HOLD) {
        hold *= 2;
    }
    if (hold > EXIT_MAX_HOLD) {
        hold = EXIT_MAX_HOLD;
    }
    health->hold_until = now + hold;
    return hold;
}

int bucket_health_grow_limit(const bucket_health *health, int children,
                             apr_time_t now)
{
    if (now >= health->hold_until) {
        return EXIT_GROW_ANY;
    }
    return children == 0 && now - health->last_failure >= EXIT_FLOOR_RETRY;
}

int child_setup_failure_passes(int err)
{
    switch (err) {
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case ENOBUFS:
    case ENOSPC:
        return 1;
    default:
        return 0;
    }
}
