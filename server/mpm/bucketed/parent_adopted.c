/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_adopted.c: the children a take-over adopted from a build of
 * another layout (parent_takeover.c). The parent did not fork them, so
 * before every signal and every count it asks the kernel again whether
 * the pid is still that child (its parent, its start time): a pid it
 * reaped elsewhere could by now name any process. One that is not is
 * dropped from the slot table, never signalled.
 */
#include "parent_context.h"

#include <unistd.h>

#include "http_log.h"

#include "policy_takeover.h"
#include "sys_proc.h"

APLOG_USE_MODULE(mpm_bucketed);

/* The slot dropped, never to be signalled: logged once, as it goes. */
static void drop_slot(parent_context *pc, int slot, takeover_verdict_e v)
{
    child_slot *cs = &pc->retained->slots[slot];

    ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, BKLOGNO(00211)
                 "bucketed: pid %" APR_PID_T_FMT " taken over in slot %d "
                 "is no longer that child (%s): dropped from the slot "
                 "table, never signalled", cs->pid, slot,
                 takeover_verdict_name(v));
    cs->pid = 0;
    cs->taken_over_start = 0;
    cs->exit_requested = 0;
    cs->replace_into = NO_REPLACEMENT;
}

int adopted_slot_still_ours(parent_context *pc, int slot)
{
    child_slot *cs = &pc->retained->slots[slot];
    process_facts f;
    takeover_verdict_e v;

    if (cs->pid == 0 || cs->taken_over_start == 0) {
        return cs->pid != 0;
    }
    proc_read_facts(cs->pid, &f);
    v = takeover_judge_recorded(&f, getpid(), cs->taken_over_start);
    /* Our zombie stays ours until reaped: its pid cannot be reused. */
    if (v == TAKE_OVER
        || (f.found && f.zombie && f.parent == getpid()
            && f.start_ticks == cs->taken_over_start)) {
        return 1;
    }
    drop_slot(pc, slot, v);
    return 0;
}

void adopted_slots_check(parent_context *pc)
{
    int slot;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        if (pc->retained->slots[slot].taken_over_start != 0) {
            adopted_slot_still_ours(pc, slot);
        }
    }
}
