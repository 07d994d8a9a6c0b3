/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_accept_queue.c: accept-queue history of one listening socket,
 * from the parent's samples. See policy_accept_queue.h.
 */
#include "policy_accept_queue.h"

int queue_sample_full(const queue_sample *sample, const queue_watch *watch)
{
    apr_uint32_t limit = sample->backlog > 0 ? sample->backlog : 1;

    if (sample->depth >= limit) {
        return 1;
    }
    /* Unsigned difference: right across the counter's wrap. */
    return sample->has_drops && watch->sampled
           && sample->drops - watch->last_drops != 0;
}

queue_verdict queue_watch_update(queue_watch *watch,
                                 const queue_sample *sample, apr_time_t now,
                                 const queue_watch_limits *limits)
{
    queue_verdict v = { 0, 0, 0, 0 };

    v.full = queue_sample_full(sample, watch);
    if (sample->depth > watch->max_depth) {
        watch->max_depth = sample->depth;
    }
    if (!v.full) {
        watch->full_since = 0;
    }
    else {
        if (watch->full_since == 0) {
            watch->full_since = now;
            /* Drops that made this sample full happened since the previous
             * one: count them with the episode. */
            watch->drops_at_full = watch->sampled ? watch->last_drops
                                                  : sample->drops;
        }
        v.full_for = now - watch->full_since;
        if (sample->has_drops) {
            v.dropped = sample->drops - watch->drops_at_full;
        }
        if (v.full_for >= limits->full_for
            && (watch->last_warning == 0
                || now - watch->last_warning >= limits->interval)) {
            v.warn = 1;
            watch->last_warning = now;
        }
    }
    watch->last_drops = sample->drops;
    watch->sampled = 1;
    return v;
}
