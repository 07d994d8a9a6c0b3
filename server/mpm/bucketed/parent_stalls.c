/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_stalls.c: the stall watch of each bucket's accept queue, at each
 * maintenance pass (policy_stall.h decides): a stall logged, and its
 * remedy carried out, prefork-model children at the limit asked to give
 * up an idle keep-alive connection for a waiting client, or the bucket
 * counted as having no idle child so that the pass gives it one; and its
 * ready children asked to look at its sockets, in case the kernel woke a
 * killed sibling in their place.
 */
#include "parent_context.h"

#include <stdlib.h>

#include "apr_strings.h"

#include "http_log.h"
#include "listen_sockets.h"
#include "stats.h"

APLOG_USE_MODULE(mpm_bucketed);

/* At most one stall warning per bucket this often. */
#define STALL_LOG_INTERVAL apr_time_from_sec(10)

/* A child holding a reclaimable keep-alive connection, and since when. */
struct keepalive_holder {
    apr_time_t since;
    int slot;
};

struct keepalive_holder *parent_holders_create(apr_pool_t *p, int slots)
{
    return apr_pcalloc(p, sizeof(struct keepalive_holder) * slots);
}

static int longest_idle_first(const void *a, const void *b)
{
    const struct keepalive_holder *x = a, *y = b;

    return x->since < y->since ? -1 : x->since > y->since;
}

/* A stalled prefork bucket at the limit: up to `count` of its children
 * whose keep-alive connection has waited longest (and long enough) for
 * its next request are asked to close it and take a waiting connection
 * (stall_remedy_decide). One scan of the slots, then a sort. Returns how
 * many were asked. */
static int ask_give_ups(parent_context *pc, int bucket, int count,
                        apr_time_t now)
{
    int slot, i, found = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        if (pc->slot_views[slot].reclaimable
            && pc->slot_views[slot].bucket == bucket) {
            pc->holders[found].since = pc->keepalive_since[slot];
            pc->holders[found].slot = slot;
            found++;
        }
    }
    qsort(pc->holders, found, sizeof(*pc->holders), longest_idle_first);
    for (i = 0; i < found && i < count; i++) {
        slot = pc->holders[i].slot;
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, pc->s, BKLOGNO(00186)
                     "bucketed: child %" APR_PID_T_FMT " of bucket %d is "
                     "asked to close its keep-alive connection, idle for %"
                     APR_TIME_T_FMT " ms, for a waiting client",
                     pc->retained->slots[slot].pid, bucket,
                     apr_time_as_msec(now - pc->holders[i].since));
        parent_ask_to_give_up(pc, slot);
        pc->slot_views[slot].reclaimable = 0;
    }
    return i;
}

/* Where a look sent to a child of bucket b gets to (policy_stall.h). */
static look_reach bucket_look_reach(const parent_context *pc, int b)
{
    const bucket_rec *bk = &pc->gen->buckets[b];

    if (pc->conf->child_model == CHILD_MODEL_EVENT) {
        return LOOK_REACHES_BUCKET;
    }
    return bucket_wait_mode(bucket_listeners_count(bk),
                            pc->conf->kernel.epoll_exclusive)
           == BUCKET_WAIT_EPOLL ? LOOK_REACHES_CHILD : LOOK_REACHES_NONE;
}

/* Up to `count` ready children of a bucket stalled since stalled_since,
 * not asked to look in this stall yet, are asked. A child that started in
 * the stall needs none: the kernel reports the queued connections to a
 * new epoll set. Returns how many were asked. */
static int ask_looks(parent_context *pc, int bucket, int count,
                     apr_time_t stalled_since, apr_time_t now)
{
    int slot, asked = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit && asked < count;
         slot++) {
        const slot_view *view = &pc->slot_views[slot];

        if (view->state != SLOT_IDLE || view->bucket != bucket
            || view->idle_units <= view->starting_units
            || pc->looked_in[slot] == stalled_since
            || !parent_ask_to_look(pc, slot)) {
            continue;
        }
        pc->looked_in[slot] = stalled_since;
        asked++;
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, pc->s, BKLOGNO(00263)
                     "bucketed: child %" APR_PID_T_FMT " of bucket %d is "
                     "asked to look at its sockets, stalled for %"
                     APR_TIME_T_FMT " ms", pc->retained->slots[slot].pid,
                     bucket, apr_time_as_msec(now - stalled_since));
    }
    return asked;
}

/* Slots held by children asked to leave (a graceful restart's old
 * generation, a child moved or stopped): each frees as its child exits. */
static int slots_leaving(const parent_context *pc)
{
    int slot, n = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        n += pc->slot_views[slot].state == SLOT_LEAVING
             || pc->slot_views[slot].state == SLOT_REPLACING;
    }
    return n;
}

/* Buckets whose queued connections nobody accepts (policy_stall.h) get
 * what stall_remedy_decide() says: their idle keep-alive holders make
 * room, or they count as having no idle child, so that this pass gives
 * them one. The watch goes by the accept queues the parent reads itself,
 * which also go into the census (what steering is told). */
void parent_note_stalls(parent_context *pc, apr_time_t now)
{
    int b, leaving = slots_leaving(pc), idle_total = 0;

    bucket_queue_sample(pc->s, pc->gen);
    /* ChildModel prefork only: an event child whose threads all serve
     * still takes connections (AsyncRequestWorkerFactor), and one moved
     * takes its connections with it. */
    for (b = 0; b < pc->num_buckets
                && pc->conf->child_model == CHILD_MODEL_PREFORK; b++) {
        idle_total += pc->census[b].idle;
    }
    for (b = 0; b < pc->num_buckets; b++) {
        bucket_rec *bk = &pc->gen->buckets[b];
        const bucket_census *c = &pc->census[b];
        int units = c->idle + c->busy;
        int holders = stall_holders_to_ask(
            c->reclaimable, c->idle, leaving,
            stall_watch_stalled_for(&bk->stall, now));
        stall_verdict v = stall_watch_update(
            &bk->stall, bk->queued,
            stall_bucket_busy(units, c->serving, idle_total - c->idle), now,
            stall_watch_after(bk->can_grow, holders));
        stall_remedy remedy = stall_remedy_decide(
            v, stall_watch_stalled_for(&bk->stall, now), bk->queued,
            bk->can_grow, holders);
        look_reach reach = bucket_look_reach(pc, b);
        int looks = stall_looks_to_ask(v, bk->queued, c->idle, reach);

        pc->census[b].queued = (int)bk->queued;
        if (remedy.give_ups > 0
            && ask_give_ups(pc, b, remedy.give_ups, now) < remedy.give_ups) {
            remedy.needs_child = 1;
        }
        if (remedy.needs_child) {
            bucket_census_stalled(&pc->census[b]);
        }
        if (looks > 0) {
            looks = ask_looks(pc, b, looks, bk->stall.stalled_since, now);
        }
        if (v == STALL_BEGAN
            && now - bk->stall_logged >= STALL_LOG_INTERVAL) {
            char asked[64] = "";

            if (reach != LOOK_REACHES_NONE) {
                apr_snprintf(asked, sizeof(asked),
                             "%d child(ren) asked to look, ", looks);
            }
            bk->stall_logged = now;
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, BKLOGNO(00108)
                                                              "bucketed: "
                         "bucket %d stalled: %u connection(s) wait in its "
                         "accept queue, which has not gone down for %"
                         APR_TIME_T_FMT " ms (its children are hung, at "
                         "their connection limit, hold idle keep-alive "
                         "connections, missed a wake-up, or all serve while "
                         "another bucket has an idle one); %s%s", b,
                         bk->queued,
                         apr_time_as_msec(stall_watch_stalled_for(&bk->stall,
                                                                  now)),
                         asked,
                         remedy.needs_child ? "giving it another child"
                         : "its idle keep-alive connections make room");
        }
        else if (v == STALL_ENDED) {
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00109)
                                                           "bucketed: "
                         "bucket %d accepts again after a stall of %"
                         APR_TIME_T_FMT " ms", b,
                         apr_time_as_msec(bk->stall.lasted));
        }
    }
}
