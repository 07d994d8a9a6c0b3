/*
 * exit_policy.c: slowing a bucket's new children after failed exits.
 */
#include "exit_policy.h"

child_exit_kind child_exit_classify(int sick, int signaled, int asked)
{
    if (sick) {
        return CHILD_EXIT_SICK;
    }
    return signaled && !asked ? CHILD_EXIT_CRASH : CHILD_EXIT_NORMAL;
}

apr_interval_time_t child_exit_note(bucket_health *health,
                                    child_exit_kind kind, apr_time_t now)
{
    apr_interval_time_t hold;
    int doublings;

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

int bucket_health_may_grow(const bucket_health *health, apr_time_t now)
{
    return now >= health->hold_until;
}
