/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_maint.c: prefork's idle-server maintenance, one bucket at a time,
 * with the slots shared by all buckets. Counting idle children per bucket
 * (not globally) is the point: a bucket whose children are all busy gets
 * more even while another bucket idles, because the kernel keeps sending
 * connections to its sockets; and when MaxRequestWorkers is reached, idle
 * children move to it from buckets that can spare them.
 */
#include "policy_maint.h"

#include <string.h>
#include "policy_plan.h"

void bucket_census_moved(bucket_census *census, int from, int to, int unit)
{
    census[from].idle -= unit;
    census[from].children--;
    census[to].idle += unit;
    census[to].arriving += unit;
    census[to].children++;
}

int bucket_census_steerable(const bucket_census *census)
{
    int own = census->idle > census->promised
              ? census->idle - census->promised : 0;

    return own + census->handing_over;
}

int bucket_census_unclaimed(const bucket_census *census)
{
    int ready = (census->idle > census->arriving
                 ? census->idle - census->arriving : 0)
                + census->handing_over;

    return ready > census->queued ? ready - census->queued : 0;
}

int bucket_census_to_publish(const bucket_census *census,
                             bucket_census *published, int num_buckets,
                             int carried)
{
    int b, idle_now = 0, idle_before = 0;

    for (b = 0; b < num_buckets; b++) {
        idle_now |= bucket_census_steerable(&census[b]) > 0;
        idle_before |= bucket_census_steerable(&published[b]) > 0
                       && !census[b].stalled;
    }
    if (idle_now || carried || !idle_before) {
        memcpy(published, census, sizeof(*census) * num_buckets);
        return 0;
    }
    for (b = 0; b < num_buckets; b++) {
        if (census[b].stalled) {
            published[b].idle = published[b].promised = 0;
            published[b].handing_over = 0;
        }
    }
    return 1;
}

bucket_spare_limits bucket_spare_share(int min_spare, int max_spare,
                                       int bucket, int num_buckets)
{
    bucket_spare_limits limits;

    if (num_buckets < 1) {
        num_buckets = 1;
    }
    limits.min_spare = min_spare / num_buckets
                       + (bucket < min_spare % num_buckets ? 1 : 0);
    limits.max_spare = max_spare / num_buckets
                       + (bucket < max_spare % num_buckets ? 1 : 0);
    if (limits.min_spare < 1) {
        limits.min_spare = 1;
    }
    if (limits.max_spare <= limits.min_spare) {
        limits.max_spare = limits.min_spare + 1;
    }
    return limits;
}

int bucket_census_tally(const slot_view *slots, int num_slots,
                        int slot_limit, int max_children, int num_buckets,
                        int unit, bucket_census *census)
{
    int b, slot, children = 0;
    int empty = slot_limit > num_slots ? slot_limit - num_slots : 0;

    for (b = 0; b < num_buckets; b++) {
        census[b].idle = census[b].busy = census[b].children = 0;
        census[b].serving = census[b].movable = census[b].stalled = 0;
        census[b].arriving = census[b].queued = 0;
        census[b].reclaimable = census[b].promised = 0;
        census[b].handing_over = 0;
    }
    for (slot = 0; slot < num_slots; slot++) {
        const slot_view *v = &slots[slot];
        int counted = v->bucket >= 0 && v->bucket < num_buckets;

        switch (v->state) {
        case SLOT_EMPTY:
            empty += slot < slot_limit;
            break;
        case SLOT_REPLACING:
            if (counted) {
                census[v->bucket].idle += unit;
                census[v->bucket].arriving += unit;
                census[v->bucket].promised += v->replacement_waits ? unit : 0;
                census[v->bucket].children++;
            }
            if (v->handover_units > 0 && v->handover_bucket >= 0
                && v->handover_bucket < num_buckets) {
                census[v->handover_bucket].handing_over += v->handover_units;
            }
            break;
        case SLOT_IDLE:
        case SLOT_BUSY:
            if (counted) {
                census[v->bucket].idle += v->idle_units;
                census[v->bucket].arriving += v->starting_units;
                census[v->bucket].busy += unit - v->idle_units;
                census[v->bucket].serving += v->serving_units;
                census[v->bucket].children++;
                census[v->bucket].movable += v->state == SLOT_IDLE
                                             && v->idle_units >= unit
                                             && !v->holds_connections;
                census[v->bucket].reclaimable += v->reclaimable;
            }
            break;
        default:
            break;
        }
    }
    for (b = 0; b < num_buckets; b++) {
        children += census[b].children;
    }
    /* Leaving children with no replacement hold slots, not capacity. */
    return empty < max_children - children ? empty
           : max_children > children ? max_children - children : 0;
}

void bucket_census_stalled(bucket_census *census)
{
    census->busy += census->idle - census->arriving;
    census->idle = census->arriving;
    census->handing_over = 0;
    census->stalled = 1;
}

int bucket_start_children(int start_servers, int num_buckets,
                          int max_workers)
{
    int wanted = start_servers;

    if (wanted < num_buckets * BUCKET_MIN_CHILDREN) {
        wanted = num_buckets * BUCKET_MIN_CHILDREN;
    }
    return wanted < max_workers ? wanted : max_workers;
}

static int clamp_rate(int rate)
{
    if (rate < 1) {
        return 1;
    }
    return rate > BUCKET_MAX_SPAWN_RATE ? BUCKET_MAX_SPAWN_RATE : rate;
}

static int unit_of(const bucket_maint_input *in)
{
    return in->unit > 1 ? in->unit : 1;
}

/* Bucket b's share of the spare limits, its maximum at least one child's
 * units above its minimum. */
static bucket_spare_limits share_of(const bucket_maint_input *in, int b)
{
    bucket_spare_limits lim = bucket_spare_share(in->min_spare, in->max_spare,
                                                 b, in->num_buckets);

    if (lim.max_spare < lim.min_spare + unit_of(in)) {
        lim.max_spare = lim.min_spare + unit_of(in);
    }
    return lim;
}

/* Whether bucket b is short of idle units and may get more. */
static int is_short(const bucket_maint_input *in, int b)
{
    bucket_spare_limits lim = share_of(in, b);

    return in->grow_limit[b] > 0 && in->census[b].idle < lim.min_spare;
}

/* Children bucket b wants this pass, within what it may gain. */
static int wanted(const bucket_maint_input *in, const int *spawn_rate, int b)
{
    int want;

    if (in->rescue_only) {
        want = in->census[b].idle == 0;
    }
    else {
        want = is_short(in, b) ? clamp_rate(spawn_rate[b]) : 0;
    }
    return want < in->grow_limit[b] ? want : in->grow_limit[b];
}

/* Children bucket b still wants after what it was given so far. */
static int unmet(const bucket_maint_input *in, const int *spawn_rate,
                 const bucket_decision *d, int b)
{
    return wanted(in, spawn_rate, b) - d[b].spawn - d[b].moved_in;
}

/* Whether bucket b can give bucket `to` an idle child: b wants none
 * itself, keeps at least as many idle children as `to` will then have,
 * and has one that holds no connection unless `to` is stalled. A stalled
 * `to` that covers b may also take b's last idle child (b's clients can
 * be sent to `to`, which a single accept queue would do), from any b that
 * is not stalled itself. */
static int can_give(const bucket_maint_input *in, const int *spawn_rate,
                    const bucket_decision *d, int b, int to)
{
    if (b == to) {
        return 0;
    }
    if (in->census[to].stalled && in->covers != NULL
        && in->covers[to * in->num_buckets + b]) {
        return !in->census[b].stalled && d[b].idle_after >= unit_of(in);
    }
    return wanted(in, spawn_rate, b) <= 0
           && d[b].idle_after >= d[to].idle_after + 2 * unit_of(in)
           && (in->census[to].stalled
               || in->census[b].movable > d[b].moved_out);
}

/* The bucket with the most idle children that can give one to bucket
 * `to`; -1 if none. */
static int find_donor(const bucket_maint_input *in, const int *spawn_rate,
                      const bucket_decision *d, int to)
{
    int b, best = -1;

    for (b = 0; b < in->num_buckets; b++) {
        if (can_give(in, spawn_rate, d, b, to)
            && (best < 0 || d[b].idle_after > d[best].idle_after)) {
            best = b;
        }
    }
    return best;
}

/* Starved buckets (no idle child at all) are served before the others. */
static int served_in_pass(const bucket_maint_input *in, int b, int pass)
{
    return (in->census[b].idle == 0) == (pass == 0);
}

int bucket_maint_decide(const bucket_maint_input *in, int *spawn_rate,
                        bucket_decision *d, bucket_move *moves,
                        int max_moves)
{
    int b, pass, num_moves = 0, free_slots = in->free_slots, idle_total = 0;

    for (b = 0; b < in->num_buckets; b++) {
        d[b].spawn = d[b].moved_in = d[b].moved_out = d[b].stop = 0;
        d[b].report_busy = d[b].starved = 0;
        d[b].idle_after = in->census[b].idle;
    }
    for (pass = 0; pass < 2; pass++) {
        for (b = 0; b < in->num_buckets; b++) {
            int want = unmet(in, spawn_rate, d, b);

            if (!served_in_pass(in, b, pass) || want <= 0) {
                continue;
            }
            if (want > free_slots) {
                want = free_slots;
            }
            d[b].spawn += want;
            d[b].idle_after += want * unit_of(in);
            free_slots -= want;
        }
    }
    /* Under load steering only a stalled bucket takes another's child:
     * new connections go to idle children wherever they are. Except a
     * bucket with no child at all: its sockets are out of their groups
     * (bucket_absence), so it never stalls, and with no slot free it
     * would never get a child back. */
    for (pass = 0; pass < 2; pass++) {
        for (b = 0; b < in->num_buckets; b++) {
            if (!served_in_pass(in, b, pass)
                || (in->steered_to_idle && !in->census[b].stalled
                    && in->census[b].children > 0)) {
                continue;
            }
            while (unmet(in, spawn_rate, d, b) > 0 && num_moves < max_moves) {
                int from = find_donor(in, spawn_rate, d, b);

                if (from < 0) {
                    break;
                }
                moves[num_moves].from = from;
                moves[num_moves].to = b;
                num_moves++;
                d[from].moved_out++;
                d[from].idle_after -= unit_of(in);
                d[b].moved_in++;
                d[b].idle_after += unit_of(in);
            }
        }
    }
    for (b = 0; b < in->num_buckets; b++) {
        idle_total += d[b].idle_after;
    }
    for (b = 0; b < in->num_buckets && !in->rescue_only; b++) {
        bucket_spare_limits lim = share_of(in, b);
        int gained = d[b].spawn + d[b].moved_in;

        if (is_short(in, b)) {
            d[b].starved = gained == 0;
            /* Doubles while the bucket stays short and gets children;
             * back to 1 when nothing could be had (prefork does the same
             * at MaxRequestWorkers). */
            spawn_rate[b] = gained > 0
                             ? clamp_rate(clamp_rate(spawn_rate[b]) * 2) : 1;
        }
        else {
            spawn_rate[b] = 1;
        }
        d[b].report_busy = gained >= BUCKET_BUSY_REPORT;
        /* One at a time, as prefork: a burst may be about to need them.
         * And only while the server as a whole has more idle units than
         * MaxSpare, as prefork counts them: a bucket's share of MaxSpare
         * is often rounded up (two buckets, MaxSpareServers 3: 2 each),
         * and a bucket above it while the other is busy was stopping a
         * child that the next move or spawn started again (issue 25:
         * httpd's test suite at MaxClients 7). */
        if (d[b].idle_after > lim.max_spare && idle_total > in->max_spare) {
            d[b].stop = 1;
            d[b].idle_after -= unit_of(in);
            idle_total -= unit_of(in);
        }
    }
    return num_moves;
}
