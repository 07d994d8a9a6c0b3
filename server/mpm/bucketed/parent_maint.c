/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_maint.c: the parent's maintenance passes, once a second and the
 * quick rescue passes between them: the census of every bucket's idle and
 * busy units (parent_census.c), the stall check (parent_stalls.c), then
 * policy_maint.c's decision carried out (spawns, moves, surplus stops).
 */
#include "parent_context.h"

#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"
#include "listen_sockets.h"
#include "listen_absence.h"
#include "listen_steering.h"
#include "stats.h"

APLOG_USE_MODULE(mpm_bucketed);

/* The highest slot whose child of this bucket is ready to accept, every
 * unit of it idle, and not yet asked to leave; in ChildModel event the one
 * holding the fewest connections, and none that holds any if
 * `without_connections`. -1 if none. */
static int idle_child_of(const parent_context *pc, int bucket,
                         int without_connections)
{
    int slot, best = -1;
    apr_uint32_t fewest = 0;

    for (slot = pc->retained->max_daemons_limit - 1; slot >= 0; slot--) {
        const child_slot *cs = &pc->retained->slots[slot];
        apr_uint32_t conns;

        if (cs->pid == 0 || cs->bucket != bucket
            || parent_child_outgoing(pc, cs)
            || ap_get_scoreboard_worker_from_indexes(slot, 0)->status
               != SERVER_READY
            || parent_idle_units_of(pc, slot) < parent_child_units(pc)) {
            continue;
        }
        conns = parent_connections_of(pc, slot);
        if (without_connections && conns > 0) {
            continue;
        }
        if (best < 0 || conns < fewest) {
            best = slot;
            fewest = conns;
        }
    }
    return best;
}

static void carry_out(parent_context *pc, int bucket,
                      const bucket_decision *d)
{
    int i, slot;

    if (d->report_busy) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00107)
                                                       "bucketed: "
                     "bucket %d seems busy (you may need to increase "
                     "StartServers, or Min/MaxSpareServers), adding %d "
                     "children, there are %d idle, and %d total children",
                     bucket, d->spawn + d->moved_in,
                     pc->census[bucket].idle,
                     pc->census[bucket].idle + pc->census[bucket].busy);
    }
    for (i = 0; i < d->spawn; i++) {
        slot = parent_free_slot(pc);
        if (slot < 0 || parent_spawn_child(pc, slot, bucket) < 0) {
            break;
        }
    }
    if (d->stop && (slot = idle_child_of(pc, bucket, 0)) >= 0) {
        parent_ask_to_leave(pc, slot, NO_REPLACEMENT);
    }
}

/* Processes holding bucket's sockets, from the parent's own table: its
 * children of any generation, and those on their way in (the replacement
 * of a child asked to leave, or kept for the handover). */
static int processes_holding(const parent_context *pc, int bucket)
{
    int slot, n = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        const child_slot *cs = &pc->retained->slots[slot];

        n += cs->pid != 0
             && (cs->bucket == bucket
                 || parent_counted_bucket(pc, cs) == bucket);
    }
    return n;
}

/* The bucket's children that got through their set-up (from the
 * scoreboard: it only decides when BK00181 is logged). */
int parent_ready_children(const parent_context *pc, int bucket)
{
    int slot, n = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        const child_slot *cs = &pc->retained->slots[slot];

        n += cs->pid != 0 && cs->bucket == bucket
             && cs->generation == pc->generation
             && parent_slot_was_ready(pc, slot);
    }
    return n;
}

/* Whether a socket shut down leaves nothing behind: every group of the
 * bucket's sockets migrates, and those sockets are the bucket's own. */
static int buckets_can_leave(const parent_context *pc)
{
    const bucketed_config *conf = pc->conf;
    int b, groups = 0;

    if (conf->plan.strategy != BUCKET_STRATEGY_REUSEPORT
        || pc->num_buckets < 2) {
        return 0;
    }
    if (conf->migration.mechanism == MIGRATION_SYSCTL) {
        return 1;
    }
    for (b = 0; b < pc->num_buckets; b++) {
        if (conf->plan.buckets[b].num_sockets > groups) {
            groups = conf->plan.buckets[b].num_sockets;
        }
    }
    return conf->migration.mechanism == MIGRATION_EBPF
           && pc->gen->migration_groups >= groups;
}

static void log_spell_end(parent_context *pc, int b)
{
    bucket_absence_spell_ended(&pc->absence[b]);
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00181)
                                                   "bucketed: bucket %d has "
                 "a child again; its sockets are back in their reuseport "
                 "groups", b);
}

/* Failing children are the operator's to look into; a full slot table
 * is what a restart or a move goes through while old children leave. */
static void log_spell_start(const parent_context *pc, int b)
{
    if (pc->grow_limit[b] == 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, BKLOGNO(00180)
                     "bucketed: bucket %d has no child and cannot get one "
                     "now (its children fail to start); its sockets leave "
                     "their reuseport groups: what is queued on them moves "
                     "to the other buckets, and new connections go there "
                     "until it has a child again", b);
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00254)
                 "bucketed: bucket %d has no child and no slot is free for "
                 "one (the last generation's children are leaving, or "
                 "MaxRequestWorkers is reached); its sockets leave their "
                 "reuseport groups until it has a child: what is queued "
                 "on them moves to the other buckets", b);
}

/* A bucket with no process and none to be had this pass leaves its
 * reuseport groups, its queue moving to the other buckets' sockets
 * (policy_steering.h, bucket_absence); a child forked into it listens
 * on them again once set up, and once it is ready they go back into
 * their steering maps (parent_bucket_rejoin). */
static void note_absences(parent_context *pc)
{
    absence_input in;
    int b, c;

    in.can_migrate = buckets_can_leave(pc);
    for (b = 0; b < pc->num_buckets; b++) {
        bucket_absence *a = &pc->absence[b];

        in.processes = processes_holding(pc, b);
        in.ready = parent_ready_children(pc, b);
        in.can_grow = pc->gen->buckets[b].can_grow;
        in.others_in = 0;
        for (c = 0; c < pc->num_buckets; c++) {
            in.others_in += c != b && !pc->absence[c].out;
        }
        switch (bucket_absence_decide(a, &in)) {
        case ABSENCE_TAKE_OUT:
            if (bucket_listeners_leave(pc->s, pc->conf, pc->retained, b)
                != 0) {
                break;
            }
            if (bucket_absence_took_out(a)) {
                log_spell_start(pc, b);
            }
            break;
        case ABSENCE_BACK_IN:
            if (parent_bucket_rejoin(pc, b) != 0) {
                break;
            }
            if (a->spell) {
                log_spell_end(pc, b);
            }
            else {
                ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s,
                             BKLOGNO(00265) "bucketed: bucket %d's first "
                             "child is ready; its sockets are in their "
                             "reuseport groups", b);
            }
            break;
        case ABSENCE_SPELL_ENDS:
            log_spell_end(pc, b);
            break;
        default:
            break;
        }
    }
}

/* Whether an old child accepts from bucket b's sockets when a graceful
 * restart begins: one of b that got through its set-up and was not asked
 * to leave before, where the new generation kept b's sockets. */
static int old_child_accepts(const parent_context *pc, int b)
{
    int slot;

    if (pc->gen->buckets[b].sockets_new) {
        return 0;
    }
    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        const child_slot *cs = &pc->retained->slots[slot];

        if (cs->pid != 0 && cs->bucket == b && !cs->exit_requested
            && parent_slot_was_ready(pc, slot)) {
            return 1;
        }
    }
    return 0;
}

/* ChildModel prefork, at a graceful restart, before any child is forked:
 * a bucket that no old child accepts from (one the restart adds, or one
 * still waiting for its first child when the restart came) would get its
 * share of new connections while its first child waits for a slot, which
 * with every slot taken comes only as old children leave (the handover
 * keeps some up to 5 s), and then sets up. Its sockets leave their
 * groups, as a childless bucket's do (note_absences), and its first child
 * listens on them once set up; meanwhile the old children kept for the
 * handover take the connections. Not at a first start (no old child),
 * nor in the event model, whose old children stop accepting at the
 * restart: there every bucket waits for its new children alike. */
void parent_keep_new_buckets_out(parent_context *pc)
{
    int slot, b, old_children = 0, accepted_from = 0;

    if (pc->conf->child_model != CHILD_MODEL_PREFORK
        || !buckets_can_leave(pc)) {
        return;
    }
    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        old_children += pc->retained->slots[slot].pid != 0;
    }
    for (b = 0; b < pc->num_buckets; b++) {
        accepted_from += old_child_accepts(pc, b);
    }
    if (old_children == 0 || accepted_from == 0) {
        return;
    }
    for (b = 0; b < pc->num_buckets; b++) {
        if (old_child_accepts(pc, b)
            || bucket_listeners_leave(pc->s, pc->conf, pc->retained, b)
               != 0) {
            continue;
        }
        bucket_absence_new(&pc->absence[b]);
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00264)
                     "bucketed: bucket %d has no old child accepting from "
                     "its sockets: they stay out of their reuseport groups "
                     "until its first child is ready, and new connections "
                     "go to the other buckets", b);
    }
}

/* BucketSteering load's idle counts from this pass's census
 * (bucket_census_to_publish); `fresh` after a move, whose counts must not
 * be carried over from before it. */
static void publish_to_steering(parent_context *pc, int fresh)
{
    pc->published_carried = bucket_census_to_publish(
        pc->census, pc->published, pc->num_buckets,
        fresh || pc->published_carried);
    bucket_listeners_publish_idle(pc->conf, pc->retained, pc->published,
                                  pc->num_buckets);
}

/* The decision's input as of now: this pass's census and free slots,
 * each bucket's grow limit and spawn rate; no child taken over that is
 * no longer counts. A full pass's, not steered to idle, until the caller
 * says otherwise. */
static void take_maint_input(parent_context *pc, bucket_maint_input *in,
                             apr_time_t now)
{
    int b;

    adopted_slots_check(pc);
    in->num_buckets = pc->num_buckets;
    in->unit = parent_child_units(pc);
    in->census = pc->census;
    in->grow_limit = pc->grow_limit;
    in->min_spare = pc->limits->min_spare;
    in->max_spare = pc->limits->max_spare;
    in->free_slots = parent_take_census(pc, now);
    in->rescue_only = 0;
    in->covers = pc->covers;
    in->steered_to_idle = 0;
    for (b = 0; b < pc->num_buckets; b++) {
        bucket_rec *bk = &pc->gen->buckets[b];

        pc->grow_limit[b] = bucket_health_grow_limit(
            &bk->kept->spawning->health, pc->census[b].children, now);
        bk->can_grow = in->free_slots > 0 && pc->grow_limit[b] > 0;
        pc->spawn_rate[b] = bk->kept->spawning->spawn_rate;
    }
}

/* No child leaves at MaxConnectionsPerChild while a stop serves on, but
 * one that left just before it (the next pass would have replaced it) or
 * crashed since is not replaced (child_gone() replaces no exit during a
 * stop); and a bucket whose children are all busy gets none from the
 * passes, which a stop does not make. Its queue would wait for the next
 * start. A rescue pass allowed no move: the stop has put every bucket
 * back in its groups, and moves or stops now would cost capacity for
 * good. The slots are shared out before any fork: one that fails leaves
 * its slot to the next poll, 100 ms on. */
void parent_start_in_starved_buckets(parent_context *pc)
{
    bucket_maint_input in;
    int b;

    take_maint_input(pc, &in, apr_time_now());
    in.rescue_only = 1;
    bucket_maint_decide(&in, pc->spawn_rate, pc->decisions, pc->moves, 0);
    for (b = 0; b < pc->num_buckets; b++) {
        if (pc->decisions[b].spawn > 0) {
            ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, pc->s, BKLOGNO(00261)
                         "bucketed: stopping: bucket %d has no idle child; "
                         "starting one to serve it until the stop ends", b);
            carry_out(pc, b, &pc->decisions[b]);
        }
    }
}

/* Whether an old child may still take a connection from bucket's sockets
 * (bucket numbered as in the plan it was in; the retired duplicate's
 * bucket is in no later plan, so its children are all old): one not asked
 * to leave; one asked and still in its set-up, which would listen on a
 * shut-down socket again (bucket_listeners_listen_again); in ChildModel
 * event, one asked and still in its epoll set. A prefork-model child
 * asked to leave and past its set-up is done with them: one still in
 * accept() when they go gets EINVAL and leaves as asked (prefork_child.c).
 * Waiting to see each out of SERVER_READY kept the queue waiting on the
 * socket for as long as the last of hundreds of leaving children took to
 * be scheduled: 3-5 s on two cores with 512 of them, and wrk's requests
 * on it timed out. */
static int old_child_accepts_from(void *baton, int bucket)
{
    const parent_context *pc = baton;
    int event = pc->conf->child_model == CHILD_MODEL_EVENT;
    int slot;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        const child_slot *cs = &pc->retained->slots[slot];

        if (cs->pid != 0 && cs->bucket == bucket
            && cs->generation != pc->generation
            && (!cs->exit_requested
                || (event ? parent_idle_units_of(pc, slot)
                          : parent_starting_units_of(pc, slot)) > 0)) {
            return 1;
        }
    }
    return 0;
}

/* A full pass (once a second) or a rescue pass (in between): see
 * bucket_maint_decide(), which takes arrays: filled from the bucket
 * records, and the spawn rates written back. */
void parent_maintain_buckets(parent_context *pc, int rescue_only)
{
    bucketed_retained *retained = pc->retained;
    bucket_maint_input in;
    apr_time_t now = apr_time_now();
    int b, i, num_moves, starved = 0, moved = 0;

    take_maint_input(pc, &in, now);
    parent_note_stalls(pc, now);
    note_absences(pc);
    bucket_listeners_retire(pc->s, retained, old_child_accepts_from, pc);
    in.rescue_only = rescue_only;
    in.steered_to_idle = bucket_listeners_steer_to_idle(pc->conf, retained);
    bucket_stats_publish_census(pc->gen, pc->census, now);
    publish_to_steering(pc, 0);
    num_moves = bucket_maint_decide(&in, pc->spawn_rate, pc->decisions,
                                    pc->moves, pc->max_moves);
    for (b = 0; b < pc->num_buckets; b++) {
        pc->gen->buckets[b].kept->spawning->spawn_rate = pc->spawn_rate[b];
        carry_out(pc, b, &pc->decisions[b]);
        starved |= pc->decisions[b].starved;
    }
    for (i = 0; i < num_moves; i++) {
        /* bucket_maint_decide() moves a child that holds connections
         * only to a stalled bucket. */
        const bucket_move *m = &pc->moves[i];
        int slot = idle_child_of(pc, m->from, !pc->census[m->to].stalled);

        if (slot >= 0) {
            ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, pc->s, BKLOGNO(00110)
                                                            "bucketed: "
                         "child %" APR_PID_T_FMT " of bucket %d moves to "
                         "bucket %d (%u connection(s) open)",
                         pc->retained->slots[slot].pid, m->from, m->to,
                         (unsigned)parent_connections_of(pc, slot));
            parent_ask_to_leave(pc, slot, m->to);
            bucket_census_moved(pc->census, m->from, m->to,
                                parent_child_units(pc));
            moved = 1;
        }
    }
    if (moved) {
        publish_to_steering(pc, 1);
    }
    if (starved && !retained->maxclients_reported) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, pc->s, BKLOGNO(00111)
                                                      "bucketed: server "
                     "reached MaxRequestWorkers setting (%d children over %d "
                     "buckets, none idle to move), consider raising the "
                     "MaxRequestWorkers setting", pc->limits->max_workers,
                     pc->num_buckets);
        retained->maxclients_reported = 1;
    }
}

/* A leave request can land just before a child blocks in accept(), where
 * nothing interrupts it; asking again is harmless and closes that gap. */
void parent_repeat_leave_requests(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    apr_time_t now = apr_time_now();
    int slot;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        if (cs->pid != 0 && cs->exit_requested != 0
            && now - cs->exit_requested
               > apr_time_from_sec(BUCKETED_EXIT_RESEND_SEC)) {
            parent_ask_again(pc, slot);
        }
    }
}

