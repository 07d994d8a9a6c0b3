/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent.c: the bucketed parent process. It starts children into slots
 * and buckets (recorded in this process's memory, never read back from
 * shared memory), replaces children that die, runs the per-bucket idle
 * maintenance once a second (policy_maint.c decides, this file acts),
 * and carries out stop, graceful stop, restart and graceful restart.
 *
 * Graceful restart: the parent returns to httpd to read the new
 * configuration while the old children keep accepting; only once the new
 * generation's run begins are the old children asked to leave, and each
 * one is replaced in its slot as it goes. The listening sockets stay open
 * throughout, so nothing queued on them is reset.
 */
#include "parent_context.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "apr_strings.h"

#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"
#include "listen_activation.h"
#include "listen_sockets.h"
#include "listen_steering.h"
#include "stats.h"
#include "sys_notify.h"
#include "parent_record.h"

APLOG_USE_MODULE(mpm_bucketed);

/* Between the once-a-second maintenance passes, a bucket left with no idle
 * child (the kernel's hash keeps sending it connections) gets one this
 * soon. */
#define RESCUE_INTERVAL apr_time_from_msec(100)

static int live_children(parent_context *pc)
{
    int slot, n = 0;

    adopted_slots_check(pc);
    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        n += pc->retained->slots[slot].pid != 0;
    }
    return n;
}

static void signal_all(parent_context *pc, int sig)
{
    bucketed_retained *retained = pc->retained;
    int slot;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        pid_t pid = retained->slots[slot].pid;
        if (adopted_slot_still_ours(pc, slot) && kill(pid, sig) < 0
            && errno != ESRCH) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, pc->s,
                         BKLOGNO(00099)
                         "bucketed: kill(%" APR_PID_T_FMT ", %d)", pid, sig);
        }
    }
}

/* Reaps children until none is left or the deadline passes (0 = none).
 * While they are being asked to leave, the request is repeated, and a hard
 * stop requested meanwhile (SIGTERM during a graceful stop) ends the wait. */
static void reap_until(parent_context *pc, apr_time_t deadline, int asking)
{
    while (live_children(pc) > 0
           && (deadline == 0 || apr_time_now() < deadline)
           && !(asking && pc->retained->mpm->is_ungraceful)) {
        apr_exit_why_e why;
        int status;
        apr_proc_t proc;

        parent_wait_for_child(pc, apr_time_from_sec(1), &proc, &why, &status);
        if (proc.pid != -1) {
            parent_reap_one(pc, &proc, why, status);
        }
        else if (asking) {
            parent_repeat_leave_requests(pc);
        }
    }
}

/* Hard stop of every child: SIGTERM, a few seconds, then SIGKILL. */
static void stop_children_now(parent_context *pc)
{
    signal_all(pc, SIGTERM);
    reap_until(pc, apr_time_now()
                   + apr_time_from_sec(BUCKETED_REAP_TIMEOUT_SEC), 0);
    if (live_children(pc) > 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, BKLOGNO(00100)
                                                          "bucketed: %d "
                     "child(ren) ignored SIGTERM, sending SIGKILL",
                     live_children(pc));
        signal_all(pc, SIGKILL);
        reap_until(pc, 0, 0);
    }
}

/* See graceful_stop(). */
#define STOP_HANDSHAKE_SETTLE apr_time_from_msec(100)
#define CLOSING_POLL apr_time_from_msec(100)
#define STOP_DRAIN_LIMIT apr_time_from_sec(2)
#define STOP_DRAIN_POLL apr_time_from_msec(10)

/* The longest KeepAliveTimeout of any virtual host. */
static apr_interval_time_t longest_keepalive(const server_rec *s)
{
    apr_interval_time_t longest = 0;

    for (; s != NULL; s = s->next) {
        if (s->keep_alive && s->keep_alive_timeout > longest) {
            longest = s->keep_alive_timeout;
        }
    }
    return longest;
}

/* Waits up to `interval` for a child to exit, and reaps it if one did. */
static void reap_within(parent_context *pc, apr_interval_time_t interval)
{
    apr_exit_why_e why;
    int status;
    apr_proc_t proc;

    parent_wait_for_child(pc, interval, &proc, &why, &status);
    if (proc.pid != -1) {
        parent_reap_one(pc, &proc, why, status);
    }
}

/* `limit` from now, or the stop's deadline if sooner (0: none). */
static apr_time_t stop_wait_until(apr_interval_time_t limit,
                                  apr_time_t deadline)
{
    apr_time_t until = apr_time_now() + limit;

    return deadline != 0 && deadline < until ? deadline : until;
}

/* A stop on sockets a service manager holds for the next start: whatever
 * arrives until that start waits in their queues. Closing them at once
 * would leave it waiting for as long as the children keep the keep-alive
 * connections they promised (up to KeepAliveTimeout, so that none closes
 * as its client sends). Instead the children go on accepting and every
 * response says "Connection: close", until no connection waits for its
 * next request (each got it, or timed out) or KeepAliveTimeout has
 * passed: the stop then closes only connections of one request, and new
 * ones wait just for the next start. Bounded by GracefulShutdownTimeout
 * (deadline, 0: none). */
static void serve_until_keepalive_ends(parent_context *pc,
                                       apr_time_t deadline)
{
    apr_time_t until = stop_wait_until(longest_keepalive(pc->s), deadline);

    bucket_stats_set_closing(pc->retained);
    /* Looks only after a first poll: a child that has just sent a response
     * promising keep-alive marks its connection idle a moment later (on a
     * busy machine, much later), and a stop that looked at once would miss
     * it and close the sockets while it waits. */
    for (;;) {
        reap_within(pc, CLOSING_POLL);
        /* SIGTERM, or a child that cannot run at all, ends it. */
        if (live_children(pc) == 0 || apr_time_now() >= until
            || !parent_keepalive_held(pc)
            || pc->retained->mpm->is_ungraceful) {
            break;
        }
        parent_start_in_starved_buckets(pc);
    }
}

/* A kernel that cannot migrate a closing socket's queue (4.19-5.13)
 * resets what is queued on it. The stop program now sends every new
 * connection to the original a service manager holds, so the duplicates'
 * queues only shrink while the children go on accepting: the stop waits
 * until they are empty, at most STOP_DRAIN_LIMIT (children that serve
 * long requests) or until the deadline. */
static void drain_duplicates(parent_context *pc, apr_time_t deadline)
{
    apr_time_t until = stop_wait_until(STOP_DRAIN_LIMIT, deadline);
    int queued;

    while ((queued = bucket_listeners_queued(pc->retained)) > 0
           && live_children(pc) > 0 && apr_time_now() < until) {
        reap_within(pc, STOP_DRAIN_POLL);
    }
    ap_log_error(APLOG_MARK, queued > 0 ? APLOG_WARNING : APLOG_DEBUG, 0,
                 pc->s, BKLOGNO(00255) "bucketed: stopping: %d connection(s) "
                 "left queued on the bucket duplicates, which this kernel "
                 "resets as they close", queued);
}

static void graceful_stop(parent_context *pc)
{
    apr_time_t deadline = 0;
    int slot;

    if (ap_graceful_shutdown_timeout > 0) {
        deadline = apr_time_now()
                   + apr_time_from_sec(ap_graceful_shutdown_timeout);
    }
    if (listen_activation_held()) {
        serve_until_keepalive_ends(pc, deadline);
    }
    /* Before any socket closes (listen_steering.c says why); then, where
     * a service manager holds the original for the next start, a moment
     * for the handshakes already under way on a duplicate to finish
     * there, so that none completes as it closes (the kernel resets
     * those): well under a millisecond on an idle loopback, tens on a
     * busy machine. Without a held socket everything closes anyway. */
    if (listen_steering_stop(pc->s, pc->conf, pc->retained) > 0
        && listen_activation_held()) {
        apr_sleep(STOP_HANDSHAKE_SETTLE);
        if (pc->conf->migration.mechanism == MIGRATION_DRAIN) {
            drain_duplicates(pc, deadline);
        }
    }
    /* New connections get refused as soon as the last child leaves; the
     * parent holds no socket open past that. */
    ap_close_listeners();
    bucket_listeners_close_all(pc->retained);
    /* Through ask_to_leave, so that parent_repeat_leave_requests() below asks
     * again: a request landing between a child's check of its leaving
     * flag and its accept() is otherwise lost, and that child would keep
     * its socket (and the server) alive until GracefulShutdownTimeout. */
    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        if (pc->retained->slots[slot].pid != 0) {
            parent_ask_to_leave(pc, slot, NO_REPLACEMENT);
        }
    }
    reap_until(pc, deadline, 1);
    if (live_children(pc) > 0) {
        stop_children_now(pc);
    }
    listen_steering_release(pc->retained);
}

/* The first pass of a new generation: old children leave (each replaced
 * in its slot as it goes, its replacement in the slot's starting bucket;
 * half of the idle ones once their bucket's new children are ready),
 * then the start-up population. */
static void start_generation(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    int slot, wanted, counted = 0;
    int *seen = apr_pcalloc(pc->pconf, sizeof(int) * pc->num_buckets);

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];

        counted += cs->pid != 0 && cs->generation == pc->generation
                   && !cs->exit_requested;
    }
    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        int bucket, spare;

        if (cs->pid == 0 || cs->generation == pc->generation) {
            continue;
        }
        /* Up to MaxRequestWorkers, old children get a replacement each. */
        bucket = counted < pc->limits->max_workers
                 ? bucket_of_slot(slot, pc->num_buckets) : NO_REPLACEMENT;
        counted += bucket != NO_REPLACEMENT;
        /* A leaving child keeps the connections it holds, idle keep-alive
         * ones until their next request or KeepAliveTimeout: its bucket
         * gets its replacement now, in a free slot if there is one,
         * rather than once it has gone. One that holds none goes at once,
         * and is replaced in its slot. */
        spare = bucket != NO_REPLACEMENT
                && parent_connections_of(pc, slot) > 0
                ? parent_free_slot(pc) : -1;
        if (spare >= 0 && parent_spawn_child(pc, spare, bucket) == 0) {
            bucket = NO_REPLACEMENT;
        }
        else if (bucket != NO_REPLACEMENT
                 && parent_keep_for_handover(pc, slot, bucket, seen)) {
            continue;
        }
        parent_ask_to_leave(pc, slot, bucket);
    }
    wanted = bucket_start_children(pc->limits->start_servers,
                                   pc->num_buckets, pc->limits->max_workers);
    for (slot = 0; slot < wanted && counted < pc->limits->max_workers;
         slot++) {
        if (retained->slots[slot].pid != 0) {
            continue;
        }
        if (parent_spawn_child(pc, slot,
                               bucket_of_slot(slot, pc->num_buckets)) < 0) {
            break;
        }
        counted++;
    }
}

static void log_started(parent_context *pc)
{
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, pc->s, BKLOGNO(00101)
                                                     "%s configured -- "
                 "resuming normal operations", ap_get_server_description());
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00102)
                                                   "Server built: %s",
                 ap_get_server_built());
    ap_log_command_line(pc->pconf, pc->s);
    ap_log_mpm_common(pc->s);
}

/* Which bucket covers which (bucket_plan_covers), for every pass of this
 * generation. */
static const int *plan_covers(apr_pool_t *p, const bucket_plan *plan)
{
    int n = plan->num_buckets, to, from;
    int *covers = apr_palloc(p, sizeof(int) * n * n);

    for (to = 0; to < n; to++) {
        for (from = 0; from < n; from++) {
            covers[to * n + from] = bucket_plan_covers(plan, to, from);
        }
    }
    return covers;
}

int parent_run(apr_pool_t *pconf, apr_pool_t *plog, server_rec *s)
{
    bucketed_config *conf = bucketed_get_config(s);
    bucketed_retained *retained = bucketed_get_retained();
    ap_unixd_mpm_retained_data *mpm = retained->mpm;
    parent_context pc;
    int one_process = conf->one_process;
    apr_time_t last_maintenance = 0, last_pass = 0;

    (void)plog;
    pc.pconf = pconf;
    pc.s = s;
    pc.conf = conf;
    pc.retained = retained;
    pc.limits = &conf->limits;
    pc.gen = retained->generation;
    pc.num_buckets = pc.gen->num_buckets;
    pc.generation = mpm->my_generation;
    pc.census = apr_pcalloc(pconf, sizeof(bucket_census) * pc.num_buckets);
    pc.published_carried = 0;
    pc.published = apr_pcalloc(pconf,
                               sizeof(bucket_census) * pc.num_buckets);
    pc.decisions = apr_pcalloc(pconf, sizeof(bucket_decision)
                                      * pc.num_buckets);
    pc.grow_limit = apr_pcalloc(pconf, sizeof(int) * pc.num_buckets);
    pc.spawn_rate = apr_pcalloc(pconf, sizeof(int) * pc.num_buckets);
    pc.covers = plan_covers(pconf, &conf->plan);
    pc.max_moves = pc.num_buckets * BUCKET_MAX_SPAWN_RATE;
    pc.moves = apr_pcalloc(pconf, sizeof(bucket_move) * pc.max_moves);
    pc.slot_views = apr_pcalloc(pconf, sizeof(slot_view)
                                       * retained->first_server_limit);
    pc.keepalive_since = apr_pcalloc(pconf, sizeof(apr_time_t)
                                            * retained->first_server_limit);
    pc.holders = parent_holders_create(pconf, retained->first_server_limit);
    pc.looked_in = apr_pcalloc(pconf, sizeof(apr_time_t)
                                      * retained->first_server_limit);
    pc.absence = apr_pcalloc(pconf, sizeof(bucket_absence) * pc.num_buckets);
    pc.handover_kept = apr_pcalloc(pconf, sizeof(int) * pc.num_buckets);
    pc.handover_deadline = 0;
    pc.last_monitor = apr_time_now();
    sigemptyset(&pc.sigchld);
    sigaddset(&pc.sigchld, SIGCHLD);

    ap_log_pid(pconf, ap_pid_fname);
    if (!mpm->was_graceful) {
        if (ap_run_pre_mpm(s->process->pool, SB_SHARED) != OK) {
            mpm->mpm_state = AP_MPMQ_STOPPING;
            return !OK;
        }
    }
    ap_scoreboard_image->global->running_generation = mpm->my_generation;
    parent_allocate_tables(retained, s);
    if (retained->takeover != NULL) {
        takeover_adopt_children(&pc);
    }
    bucket_stats_reset(retained);
    retained->maxclients_reported = 0;
    ap_unixd_mpm_set_signals(pconf, one_process);

    if (one_process) {
        mpm->mpm_state = AP_MPMQ_RUNNING;
        parent_note_slot_used(retained, 0);
        parent_record_child(&pc, 0, getpid(), 0);
        parent_run_child(&pc, 0, 0, 0);
    }

    log_started(&pc);
    parent_keep_new_buckets_out(&pc);
    start_generation(&pc);
    mpm->mpm_state = AP_MPMQ_RUNNING;
    notify_send(s, apr_psprintf(pconf, "READY=1\nMAINPID=%" APR_PID_T_FMT
                                "\nSTATUS=serving, generation %d", getpid(),
                                mpm->my_generation));

    while (!mpm->restart_pending && !mpm->shutdown_pending) {
        apr_exit_why_e why;
        int status;
        apr_proc_t proc;

        parent_wait_for_child(&pc, RESCUE_INTERVAL, &proc, &why, &status);
        if (proc.pid != -1) {
            parent_reap_one(&pc, &proc, why, status);
            /* Hundreds of old children leaving after a restart exit
             * without a pause of RESCUE_INTERVAL for seconds: passes wait
             * no longer than that for the reaping to end. A stop or
             * restart come meanwhile makes its own. */
            if (apr_time_now() - last_pass < RESCUE_INTERVAL
                || mpm->restart_pending || mpm->shutdown_pending) {
                continue;
            }
        }
        last_pass = apr_time_now();
        parent_end_handover(&pc, last_pass);
        /* Woken early or not, full maintenance keeps its pace of one pass
         * a second: spawn rates double per pass. */
        if (apr_time_now() - last_maintenance >= apr_time_from_sec(1)) {
            parent_maintain_buckets(&pc, 0);
            parent_repeat_leave_requests(&pc);
            last_maintenance = apr_time_now();
        }
        else {
            parent_maintain_buckets(&pc, 1);
        }
    }

    /* The next generation reuses the sockets; a stop closes them with
     * everyone's queue migrating to the original. */
    parent_buckets_rejoin(&pc);
    if (mpm->shutdown_pending) {
        mpm->mpm_state = AP_MPMQ_STOPPING;
        notify_send(s, "STOPPING=1\nSTATUS=stopping");
        if (mpm->is_ungraceful) {
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                         BKLOGNO(00103) "caught SIGTERM, shutting down");
            listen_steering_stop(s, conf, retained);
            stop_children_now(&pc);
            listen_steering_release(retained);
        }
        else {
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                         BKLOGNO(00104) "caught " AP_SIG_GRACEFUL_STOP_STRING
                         ", shutting down gracefully");
            graceful_stop(&pc);
        }
        ap_remove_pid(pconf, ap_pid_fname);
        return DONE;
    }

    /* Restart. */
    notify_send(s, "RELOADING=1\nSTATUS=restarting");
    mpm->my_generation++;
    mpm->was_graceful = !mpm->is_ungraceful;
    if (mpm->is_ungraceful) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     BKLOGNO(00105) "SIGHUP received.  Attempting to restart");
        stop_children_now(&pc);
    }
    else {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     BKLOGNO(00106) AP_SIG_GRACEFUL_STRING
                     " received.  Doing graceful restart");
    }
    /* For a build of another layout, which cannot read this one's state. */
    parent_record_write(s, retained, mpm->my_generation);
    mpm->restart_pending = 0;
    mpm->is_ungraceful = 0;
    return OK;
}
