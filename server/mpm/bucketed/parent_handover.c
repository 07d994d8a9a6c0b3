/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_handover.c: the graceful restart's handover from the old
 * generation's children to the new one's, so that no bucket is left with
 * nobody accepting (policy_handover.h): idle old children kept accepting
 * until their bucket's new children are ready.
 */
#include "parent_context.h"

#include <string.h>

#include "http_log.h"

#include "policy_handover.h"

APLOG_USE_MODULE(mpm_bucketed);

/* Whether a ready old child keeps accepting until its bucket's new
 * children are ready (policy_handover.h); `seen` counts such children per
 * bucket. Its replacement is reserved all the same. */
int parent_keep_for_handover(parent_context *pc, int slot, int bucket,
                             int *seen)
{
    child_slot *cs = &pc->retained->slots[slot];
    int serving = cs->bucket;

    /* Only one ready to accept: not one in a connection, nor one still
     * starting, nor one past its serve loop and exiting
     * (MaxConnectionsPerChild), which holds none. */
    if (cs->exit_requested || serving < 0 || serving >= pc->num_buckets
        || parent_ready_units_of(pc, slot) < parent_child_units(pc)
        || !handover_keeps(pc->conf->child_model == CHILD_MODEL_PREFORK,
                           serving, pc->num_buckets, seen[serving]++)) {
        return 0;
    }
    cs->replace_into = bucket;
    pc->handover_deadline = apr_time_now() + HANDOVER_MAX_WAIT;
    return 1;
}

/* The handover's end, bucket by bucket (policy_handover.h): its kept old
 * children leave once as many of its new children are ready, or at the
 * deadline. */
void parent_end_handover(parent_context *pc, apr_time_t now)
{
    const bucketed_retained *retained = pc->retained;
    int slot, b, any = 0;

    if (pc->handover_deadline == 0) {
        return;
    }
    memset(pc->handover_kept, 0, sizeof(int) * pc->num_buckets);
    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];

        if (parent_kept_for_handover(pc, cs)) {
            pc->handover_kept[cs->bucket]++;
            any = 1;
        }
    }
    if (!any) {
        pc->handover_deadline = 0;
        return;
    }
    for (b = 0; b < pc->num_buckets; b++) {
        int kept = pc->handover_kept[b];
        int ready = kept > 0 ? parent_ready_children(pc, b) : 0;

        if (!handover_releases(kept, ready, now, pc->handover_deadline)) {
            continue;
        }
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, pc->s, BKLOGNO(00253)
                     "bucketed: bucket %d: its %d old child(ren) kept "
                     "accepting leave (%s)", b, kept,
                     now >= pc->handover_deadline
                         ? "its new children are late" : "as many new "
                         "ones are ready");
        for (slot = 0; slot < retained->max_daemons_limit; slot++) {
            const child_slot *cs = &retained->slots[slot];

            if (parent_kept_for_handover(pc, cs) && cs->bucket == b) {
                parent_ask_to_leave(pc, slot, cs->replace_into);
            }
        }
    }
}
