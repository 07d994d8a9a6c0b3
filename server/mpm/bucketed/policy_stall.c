/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_stall.c: a bucket's accept queue that holds connections and
 * never goes down.
 */
#include "policy_stall.h"

stall_verdict stall_watch_update(stall_watch *watch, apr_uint32_t queued,
                                 int all_serving, apr_time_t now,
                                 apr_interval_time_t after)
{
    int drained = watch->seen && queued < watch->queued;

    watch->queued = queued;
    if (!watch->seen || drained || queued == 0 || all_serving) {
        /* Accepting, nothing to accept, or busy: any wait starts
         * afresh. */
        int was_stalled = watch->stalled_since != 0;

        watch->seen = 1;
        watch->waiting_since = 0;
        if (was_stalled) {
            watch->lasted = now - watch->stalled_since;
            watch->stalled_since = 0;
            return STALL_ENDED;
        }
        return STALL_NONE;
    }
    if (watch->waiting_since == 0) {
        watch->waiting_since = now;
    }
    if (now - watch->waiting_since < after) {
        return STALL_NONE;
    }
    /* The next verdict, if the queue does not go down meanwhile, one
     * `after` from now: time for the child this one brings to start. */
    watch->waiting_since = now;
    if (watch->stalled_since == 0) {
        watch->stalled_since = now - after;
        return STALL_BEGAN;
    }
    return STALL_GOES_ON;
}

int stall_bucket_busy(int units, int serving, int idle_elsewhere)
{
    return units > 0 && serving >= units && idle_elsewhere == 0;
}

apr_interval_time_t stall_watch_stalled_for(const stall_watch *watch,
                                            apr_time_t now)
{
    if (watch->stalled_since != 0) {
        return now - watch->stalled_since;
    }
    return 0;
}

int keepalive_reclaimable(apr_interval_time_t idle_for)
{
    return idle_for >= KEEPALIVE_RECLAIM_MIN_IDLE;
}

int keepalive_gives_up(apr_interval_time_t idle_for, apr_uint32_t waiting,
                       int leaving)
{
    return !leaving && waiting > 0 && keepalive_reclaimable(idle_for);
}

int stall_holders_to_ask(int reclaimable, int idle, int leaving_slots,
                         apr_interval_time_t stalled_for)
{
    if (leaving_slots > 0
        || (idle > 0 && stalled_for < STALL_IDLE_PATIENCE)) {
        return 0;
    }
    return reclaimable;
}

int stall_looks_to_ask(stall_verdict v, apr_uint32_t queued, int idle_units,
                       look_reach reach)
{
    if ((v != STALL_BEGAN && v != STALL_GOES_ON) || idle_units <= 0) {
        return 0;
    }
    switch (reach) {
    case LOOK_REACHES_CHILD:
        return queued < (apr_uint32_t)idle_units ? (int)queued : idle_units;
    case LOOK_REACHES_BUCKET:
        return 1;
    default:
        return 0;
    }
}

apr_interval_time_t stall_watch_after(int can_grow, int reclaimable)
{
    return !can_grow && reclaimable > 0 ? STALL_AFTER_RECLAIMING
                                        : STALL_AFTER;
}

stall_remedy stall_remedy_decide(stall_verdict v,
                                 apr_interval_time_t stalled_for,
                                 apr_uint32_t queued, int can_grow,
                                 int reclaimable)
{
    stall_remedy r = { 0, 0 };

    if (v != STALL_BEGAN && v != STALL_GOES_ON) {
        return r;
    }
    if (can_grow || reclaimable <= 0) {
        r.needs_child = 1;
        return r;
    }
    r.give_ups = queued < (apr_uint32_t)reclaimable ? (int)queued
                                                     : reclaimable;
    r.needs_child = stalled_for >= STALL_RECLAIM_FALLBACK
                    || (apr_uint32_t)r.give_ups < queued;
    return r;
}
