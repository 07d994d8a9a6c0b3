/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_census.c: what the scoreboard and the parent's slot table say of
 * each child, read every pass (for counting only, never trusted: a child
 * can write its scoreboard entries), and tallied per bucket into the
 * census policy_maint.c decides from.
 */
#include "parent_context.h"

#include "scoreboard.h"

/* The units a child brings: threads per child in ChildModel event. */
int parent_child_units(const parent_context *pc)
{
    return pc->conf->threads.threads_per_child;
}

/* Of a live child's units, how many can take a new connection now: a
 * prefork child ready or starting is one; in ChildModel event, the worker
 * threads ready or starting, none while the child has stopped accepting.
 * Read from the scoreboard, for counting only. */
int parent_idle_units_of(const parent_context *pc, int slot)
{
    int t, idle = 0;

    if (pc->conf->child_model == CHILD_MODEL_EVENT
        && ap_get_scoreboard_process(slot)->not_accepting) {
        return 0;
    }
    for (t = 0; t < parent_child_units(pc); t++) {
        idle += ap_get_scoreboard_worker_from_indexes(slot, t)->status
                <= SERVER_READY;
    }
    return idle;
}

/* Of a live child's units, how many serve a request: not idle, not
 * waiting for a keep-alive connection's next request, not idle in an
 * event child that stopped accepting. */
static int serving_units_of(const parent_context *pc, int slot)
{
    int t, serving = 0;

    for (t = 0; t < parent_child_units(pc); t++) {
        int status = ap_get_scoreboard_worker_from_indexes(slot, t)->status;

        serving += status > SERVER_READY && status != SERVER_BUSY_KEEPALIVE
                   && status != SERVER_IDLE_KILL;
    }
    return serving;
}

/* Of a live child's idle units, those not yet accepting: the child is
 * starting (its scoreboard entries not yet marked ready). */
int parent_starting_units_of(const parent_context *pc, int slot)
{
    int t, starting = 0;

    for (t = 0; t < parent_child_units(pc); t++) {
        starting += ap_get_scoreboard_worker_from_indexes(slot, t)->status
                    < SERVER_READY;
    }
    return starting;
}

int parent_ready_units_of(const parent_context *pc, int slot)
{
    int idle = parent_idle_units_of(pc, slot);

    return idle > 0 ? idle - parent_starting_units_of(pc, slot) : 0;
}

/* A prefork-model child past its serve loop marks its worker
 * SERVER_GRACEFUL as it exits (prefork_child.c) and holds no connection:
 * read as busy, a moved child would hide its replacement from steering
 * until it is reaped. */
apr_uint32_t parent_connections_of(const parent_context *pc, int slot)
{
    int status;

    if (pc->conf->child_model == CHILD_MODEL_EVENT) {
        return ap_get_scoreboard_process(slot)->connections;
    }
    status = ap_get_scoreboard_worker_from_indexes(slot, 0)->status;
    return status > SERVER_READY && status != SERVER_GRACEFUL;
}

/* Whether a current prefork-model child waits for a keep-alive
 * connection's next request, as the scoreboard says. An event child
 * reclaims by itself (event_keeper.c); a leaving child of either model
 * keeps its idle connections until their next request or
 * KeepAliveTimeout, as it would without the stop (a client sending its
 * next request as the connection closes loses it). Read, never trusted:
 * a child that writes it only gets asked to close its own connection. */
static int waits_on_keepalive(const parent_context *pc, int slot,
                              int outgoing)
{
    return pc->conf->child_model == CHILD_MODEL_PREFORK && !outgoing
           && ap_get_scoreboard_worker_from_indexes(slot, 0)->status
              == SERVER_BUSY_KEEPALIVE;
}

/* How long a child has waited, as far as the parent has seen, on idle
 * keep-alive connections at `now` (0: it is not waiting). The parent's
 * own record, from the scoreboard of every pass: only the child knows
 * exactly, and decides. */
static apr_interval_time_t keepalive_idle_for(const parent_context *pc,
                                              int slot, int outgoing,
                                              apr_time_t now)
{
    apr_time_t *since = &pc->keepalive_since[slot];

    if (pc->retained->slots[slot].pid == 0
        || !waits_on_keepalive(pc, slot, outgoing)) {
        *since = 0;
        return 0;
    }
    if (*since == 0) {
        *since = now;
    }
    return now - *since;
}

int parent_keepalive_held(const parent_context *pc)
{
    int slot;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        if (pc->retained->slots[slot].pid == 0) {
            continue;
        }
        if (pc->conf->child_model == CHILD_MODEL_EVENT
            ? ap_get_scoreboard_process(slot)->keep_alive > 0
            : ap_get_scoreboard_worker_from_indexes(slot, 0)->status
              == SERVER_BUSY_KEEPALIVE) {
            return 1;
        }
    }
    return 0;
}

int parent_kept_for_handover(const parent_context *pc, const child_slot *cs)
{
    return cs->pid != 0 && cs->generation != pc->generation
           && !cs->exit_requested && cs->replace_into != NO_REPLACEMENT;
}

/* What the slot table and the scoreboard say of a slot, for the census.
 * The bucket comes from the parent's own table; the scoreboard supplies
 * only the idle/busy status of a child's units. */
static slot_view view_slot(const parent_context *pc, int slot,
                           apr_time_t now)
{
    const child_slot *cs = &pc->retained->slots[slot];
    int outgoing = cs->pid != 0 && parent_child_outgoing(pc, cs);
    apr_interval_time_t keepalive_idle =
        keepalive_idle_for(pc, slot, outgoing, now);
    slot_view v;

    v.bucket = cs->bucket;
    v.idle_units = 0;
    v.holds_connections = 0;
    v.serving_units = 0;
    v.starting_units = 0;
    v.reclaimable = 0;
    v.replacement_waits = 0;
    v.handover_units = 0;
    v.handover_bucket = NO_REPLACEMENT;
    if (cs->pid == 0) {
        v.state = SLOT_EMPTY;
    }
    else if (outgoing) {
        /* Leaving, or an old child kept for the handover: its slot's next
         * child counts, if it has one. A leaving child waiting on idle
         * keep-alive connections keeps that child out until the clients'
         * next requests or KeepAliveTimeout (waits_on_keepalive()). */
        v.state = cs->replace_into != NO_REPLACEMENT
                  && !pc->retained->mpm->shutdown_pending
                  ? SLOT_REPLACING : SLOT_LEAVING;
        /* A stopping parent starts no replacement (child_gone()). */
        v.bucket = v.state == SLOT_REPLACING ? cs->replace_into
                                             : NO_REPLACEMENT;
        /* Kept for the handover, or finishing a connection; one asked to
         * leave with none (a move's idle child) is gone within a pass. */
        v.replacement_waits = v.state == SLOT_REPLACING
                              && (!cs->exit_requested
                                  || parent_connections_of(pc, slot) > 0);
        /* Kept for the handover, it accepts from its old bucket's
         * sockets, a bucket the new plan has (policy_handover.h); where a
         * Listen changed, its units count in groups it does not accept
         * from, for as long as the handover lasts. */
        if (v.state == SLOT_REPLACING && parent_kept_for_handover(pc, cs)) {
            v.handover_units = parent_ready_units_of(pc, slot);
            v.handover_bucket = cs->bucket;
        }
    }
    else if (ap_get_scoreboard_process(slot)->quiescing) {
        /* An event child leaving on its own (MaxConnectionsPerChild, a
         * fault) finishes its connections but takes no new ones: counted
         * as capacity, it would hold back its replacement until it exits,
         * and with every child of a bucket leaving the bucket's queue
         * waits that long. Read from the scoreboard, for counting only
         * (as stock event does): a child that writes it can at most make
         * the parent start children up to ServerLimit. */
        v.state = SLOT_LEAVING;
        v.bucket = NO_REPLACEMENT;
    }
    else {
        v.idle_units = parent_idle_units_of(pc, slot);
        v.starting_units = v.idle_units > 0
                           ? parent_starting_units_of(pc, slot) : 0;
        v.state = v.idle_units > 0 ? SLOT_IDLE : SLOT_BUSY;
        v.holds_connections = parent_connections_of(pc, slot) > 0;
        v.serving_units = serving_units_of(pc, slot);
        v.reclaimable = keepalive_reclaimable(keepalive_idle);
    }
    return v;
}

/* Fills pc->census; returns the free slots. */
int parent_take_census(parent_context *pc, apr_time_t now)
{
    int slot, num_slots = pc->retained->max_daemons_limit;

    for (slot = 0; slot < num_slots; slot++) {
        pc->slot_views[slot] = view_slot(pc, slot, now);
    }
    return bucket_census_tally(pc->slot_views, num_slots,
                               parent_slot_limit(pc), pc->limits->max_workers,
                               pc->num_buckets, parent_child_units(pc),
                               pc->census);
}
