/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent.c: the bucketed parent process. It starts children into slots
 * and buckets (recorded in this process's memory, never read back from
 * shared memory), replaces children that die, runs the per-bucket idle
 * maintenance once a second (bucket_maint.c decides, this file acts),
 * and carries out stop, graceful stop, restart and graceful restart.
 *
 * Graceful restart: the parent returns to httpd to read the new
 * configuration while the old children keep accepting; only once the new
 * generation's run begins are the old children asked to leave, and each
 * one is replaced in its slot as it goes. The listening sockets stay open
 * throughout, so nothing queued on them is reset.
 */
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "httpd.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"

#include "bucket_maint.h"
#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

/* replace_into for a child asked to leave whose slot stays free. */
#define NO_REPLACEMENT (-1)

typedef struct {
    apr_pool_t *pconf;
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    const process_limits *limits;
    int num_buckets;
    ap_generation_t generation;
    bucket_census *census;           /* per bucket, reused every pass */
    bucket_decision *decisions;      /* per bucket, reused every pass */
    int *grow_limit;                 /* per bucket, reused every pass */
    int *can_grow;                   /* per bucket, reused every pass */
    apr_uint32_t *queued;            /* per bucket, reused every pass */
    stall_watch *stall;              /* per bucket */
    apr_time_t *stall_logged;        /* per bucket: last stall warning */
    bucket_move *moves;              /* room for every move of a pass */
    int max_moves;
    slot_view *slot_views;           /* per slot, reused every pass */
    sigset_t sigchld;                /* blocked; taken by wait_for_child */
    apr_time_t last_monitor;
} parent_context;

/* The monitor hook (mod_systemd's status, mod_watchdog ...) runs at the
 * pace ap_wait_or_timeout() gives it: every ten one-second turns. */
#define MONITOR_INTERVAL_SEC 10
/* Between the once-a-second maintenance passes, a bucket left with no idle
 * child (the kernel's hash keeps sending it connections) gets one this
 * soon. */
#define RESCUE_INTERVAL apr_time_from_msec(100)
/* At most one stall warning per bucket this often. */
#define STALL_LOG_INTERVAL apr_time_from_sec(10)

static void checked_sigprocmask(parent_context *pc, int how,
                                const sigset_t *set, sigset_t *old)
{
    if (sigprocmask(how, set, old) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, pc->s,
                     "bucketed: sigprocmask in the parent");
    }
}

/* ap_wait_or_timeout()'s job without its race: a child that exits just
 * before that function's one-second sleep is noticed only after it, and
 * during a graceful restart its bucket would stay empty that long. Here
 * SIGCHLD is blocked while waiting and taken with sigtimedwait(), which
 * returns at once when one is pending. proc->pid is -1 when no
 * child exited within the timeout (or another signal came first). */
static void wait_for_child(parent_context *pc, apr_interval_time_t timeout,
                           apr_proc_t *proc, apr_exit_why_e *why,
                           int *status)
{
    struct timespec ts;
    sigset_t saved;

    if (apr_time_now() - pc->last_monitor
        >= apr_time_from_sec(MONITOR_INTERVAL_SEC)) {
        pc->last_monitor = apr_time_now();
        ap_run_monitor(pc->pconf, pc->s);
    }
    /* Blocked only here, so that nothing the parent starts (piped
     * loggers, mod_cgid's daemon) inherits a blocked SIGCHLD. */
    checked_sigprocmask(pc, SIG_BLOCK, &pc->sigchld, &saved);
    if (!APR_STATUS_IS_CHILD_DONE(apr_proc_wait_all_procs(proc, status, why,
                                                          APR_NOWAIT,
                                                          pc->pconf))) {
        ts.tv_sec = apr_time_sec(timeout);
        ts.tv_nsec = apr_time_usec(timeout) * 1000;
        if (sigtimedwait(&pc->sigchld, NULL, &ts) < 0 && errno != EAGAIN
            && errno != EINTR) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_ERR, err, pc->s,
                         "bucketed: sigtimedwait(SIGCHLD)");
            apr_sleep(timeout);
        }
        if (!APR_STATUS_IS_CHILD_DONE(apr_proc_wait_all_procs(
                proc, status, why, APR_NOWAIT, pc->pconf))) {
            proc->pid = -1;
        }
    }
    checked_sigprocmask(pc, SIG_SETMASK, &saved, NULL);
}

/* Memory only the parent uses and keeps writing (a slot entry per fork,
 * spawn rates every second). Were it inherited, every write would leave
 * the children holding yet another private copy of the page, and their
 * proportional set size would grow with the number of forks; with
 * MADV_DONTFORK the children never map it. Zeroed, never freed: it lives
 * as long as the process. */
static void *parent_only_memory(server_rec *s, apr_size_t size)
{
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (mem == MAP_FAILED) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, "bucketed: mmap of "
                     "%" APR_SIZE_T_FMT " bytes for the slot table; using "
                     "inherited memory", size);
        return apr_pcalloc(s->process->pool, size);
    }
#ifdef MADV_DONTFORK
    if (madvise(mem, size, MADV_DONTFORK) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s,
                     "bucketed: madvise(MADV_DONTFORK) on the slot table");
    }
#endif
    return mem;
}

static void allocate_tables(bucketed_retained *retained, server_rec *s)
{
    int n = retained->first_server_limit;

    /* Buckets never outnumber MaxRequestWorkers, hence ServerLimit. */
    if (retained->slots == NULL) {
        retained->slots = parent_only_memory(s, sizeof(child_slot) * n);
        retained->spawn_rate = parent_only_memory(s, sizeof(int) * n);
        retained->health = parent_only_memory(s, sizeof(bucket_health) * n);
    }
}

static void note_slot_used(bucketed_retained *retained, int slot)
{
    if (slot + 1 > retained->max_daemons_limit) {
        retained->max_daemons_limit = slot + 1;
    }
}

static void record_child(parent_context *pc, int slot, pid_t pid, int bucket)
{
    child_slot *cs = &pc->retained->slots[slot];
    process_score *ps = ap_get_scoreboard_process(slot);

    cs->pid = pid;
    cs->bucket = bucket;
    cs->generation = pc->generation;
    cs->exit_requested = 0;
    cs->replace_into = NO_REPLACEMENT;
    /* Shown by mod_status and bucketed-status; never read back here. */
    ps->pid = pid;
    ps->generation = pc->generation;
    ps->bucket = bucket;
    ps->quiescing = 0;
    ap_run_child_status(pc->s, pid, pc->generation, slot, MPM_CHILD_STARTED);
}

/* The child model's main function; never returns. */
static void run_child(parent_context *pc, int slot, int bucket, pid_t parent)
    __attribute__((noreturn));

static void run_child(parent_context *pc, int slot, int bucket, pid_t parent)
{
    /* Keeps the drop_privileges hook from closing this child's sockets. */
    pc->retained->server_child = 1;
    if (pc->conf->child_model == CHILD_MODEL_EVENT) {
        event_child_main(pc->s, pc->conf, pc->retained, slot, bucket, parent);
    }
    child_main(pc->s, pc->conf, pc->retained, slot, bucket, parent);
}

static int spawn_child(parent_context *pc, int slot, int bucket)
{
    pid_t parent = getpid(), pid;
    sigset_t block, saved;

    note_slot_used(pc->retained, slot);
    ap_update_child_status_from_indexes(slot, 0, SERVER_STARTING, NULL);
    /* Held until the child has its own handlers: a SIGTERM landing on the
     * parent's inherited handler would be lost, and the child would live
     * on until SIGKILL. */
    sigfillset(&block);
    checked_sigprocmask(pc, SIG_BLOCK, &block, &saved);
    pid = fork();
    if (pid < 0) {
        int err = errno;
        apr_interval_time_t hold;

        checked_sigprocmask(pc, SIG_SETMASK, &saved, NULL);
        ap_update_child_status_from_indexes(slot, 0, SERVER_DEAD, NULL);
        /* Out of processes or memory, as a sick exit says: the bucket
         * backs off (and keeps its floor child's retries), instead of the
         * parent sleeping through every other bucket's needs. */
        hold = child_exit_note(&pc->retained->health[bucket],
                               CHILD_EXIT_SICK, apr_time_now());
        ap_log_error(APLOG_MARK, APLOG_ERR, err, pc->s, "bucketed: fork: "
                     "unable to start a child for slot %d (bucket %d); the "
                     "bucket's next child in %" APR_TIME_T_FMT " s", slot,
                     bucket, apr_time_sec(hold));
        return -1;
    }
    if (pid == 0) {
        run_child(pc, slot, bucket, parent);
    }
    checked_sigprocmask(pc, SIG_SETMASK, &saved, NULL);
    record_child(pc, slot, pid, bucket);
    return 0;
}

static int find_slot(const bucketed_retained *retained, pid_t pid)
{
    int i;

    for (i = 0; i < retained->max_daemons_limit; i++) {
        if (retained->slots[i].pid == pid) {
            return i;
        }
    }
    return -1;
}

/* Asks a child to leave gracefully. replace_into: the bucket whose child
 * takes the slot once it is gone, or NO_REPLACEMENT. */
static void ask_to_leave(parent_context *pc, int slot, int replace_into)
{
    child_slot *cs = &pc->retained->slots[slot];

    if (kill(cs->pid, AP_SIG_GRACEFUL) < 0 && errno != ESRCH) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, pc->s, "bucketed: "
                     "kill(%" APR_PID_T_FMT ", SIGUSR1)", cs->pid);
    }
    cs->exit_requested = apr_time_now();
    cs->replace_into = replace_into;
    ap_get_scoreboard_process(slot)->quiescing = 1;
}

/* The asked child exits; asking again (see repeat_leave_requests) keeps
 * its replacement. */
static void ask_again(parent_context *pc, int slot)
{
    ask_to_leave(pc, slot, pc->retained->slots[slot].replace_into);
}

/* Records an exit in its bucket's health (any unasked exit, and a failed
 * one even when asked); returns whether the bucket may get its
 * replacement now. */
static int note_exit(parent_context *pc, const child_slot *cs,
                             pid_t pid, child_exit_kind kind)
{
    bucket_health *health = &pc->retained->health[cs->bucket];
    apr_interval_time_t hold = child_exit_note(health, kind, apr_time_now());

    if (kind == CHILD_EXIT_SICK) {
        /* prefork's answer to a resource shortage: start slowly again. */
        pc->retained->spawn_rate[cs->bucket] = 1;
    }
    if (kind == CHILD_EXIT_CRASH_SERVING) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, "bucketed: child "
                     "%" APR_PID_T_FMT " of bucket %d crashed while serving; "
                     "replaced at once", pid, cs->bucket);
    }
    if (hold > 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, "bucketed: child "
                     "%" APR_PID_T_FMT " of bucket %d %s; %d such exit(s) in "
                     "a row in this bucket, its next child in %" APR_TIME_T_FMT
                     " s", pid, cs->bucket,
                     kind == CHILD_EXIT_SICK
                         ? "exited sick (it reported a resource shortage)"
                         : "was killed by a signal",
                     health->failures, apr_time_sec(hold));
    }
    return hold == 0;
}

/* Every unit of the slot (ChildModel event: every worker thread) is dead,
 * so the census of the slot's next child does not count what its
 * predecessor left behind. */
static void mark_slot_dead(parent_context *pc, int slot)
{
    int t;

    for (t = 0; t < pc->retained->first_thread_limit; t++) {
        ap_update_child_status_from_indexes(slot, t, SERVER_DEAD, NULL);
    }
    ap_get_scoreboard_process(slot)->not_accepting = 0;
    ap_get_scoreboard_process(slot)->connections = 0;
}

/* Children the bucket has (running, starting or on their way in), from
 * the parent's own table. */
static int children_in(const parent_context *pc, int bucket)
{
    int slot, n = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        const child_slot *cs = &pc->retained->slots[slot];

        if (cs->pid == 0) {
            continue;
        }
        if (cs->exit_requested) {
            n += cs->replace_into == bucket && slot < pc->limits->max_workers;
        }
        else {
            n += cs->bucket == bucket && cs->generation == pc->generation;
        }
    }
    return n;
}

/* Whether any unit of the slot's child had reported itself ready (or
 * busy): it got through its set-up. A hint read from the scoreboard, used
 * only to pace replacements (exit_policy.h). */
static int slot_was_ready(const parent_context *pc, int slot)
{
    int t;

    for (t = 0; t < pc->retained->first_thread_limit; t++) {
        int status = ap_get_scoreboard_worker_from_indexes(slot, t)->status;

        if (status != SERVER_DEAD && status != SERVER_STARTING) {
            return 1;
        }
    }
    return 0;
}

/* A child gone: free its slot, and start its replacement if there is one:
 * the bucket it was asked to leave for, or its own bucket when it left
 * unasked (crashed, or reached MaxConnectionsPerChild), unless that
 * bucket's children keep failing. */
static void child_gone(parent_context *pc, int slot, pid_t pid,
                       child_exit_kind kind)
{
    bucketed_retained *retained = pc->retained;
    child_slot *cs = &retained->slots[slot];
    int asked = cs->exit_requested != 0;
    int next_bucket = asked ? cs->replace_into : cs->bucket;
    int replace = next_bucket >= 0 && next_bucket < pc->num_buckets
                  && !retained->mpm->shutdown_pending
                  && !retained->mpm->restart_pending
                  && slot < pc->limits->max_workers;

    if (!asked || kind != CHILD_EXIT_NORMAL) {
        if (cs->bucket < pc->num_buckets
            && !note_exit(pc, cs, pid, kind)) {
            replace = 0;
        }
    }
    mark_slot_dead(pc, slot);
    ap_get_scoreboard_process(slot)->pid = 0;
    ap_run_child_status(pc->s, pid, cs->generation, slot, MPM_CHILD_EXITED);
    cs->pid = 0;
    cs->exit_requested = 0;
    cs->replace_into = NO_REPLACEMENT;
    if (replace && bucket_health_grow_limit(&retained->health[next_bucket],
                                            children_in(pc, next_bucket),
                                            apr_time_now()) > 0) {
        spawn_child(pc, slot, next_bucket);
    }
}

static void reap_one(parent_context *pc, apr_proc_t *proc,
                     apr_exit_why_e why, int status)
{
    bucketed_retained *retained = pc->retained;
    int slot = find_slot(retained, proc->pid);
    int processed = ap_process_child_status(proc, why, status);
    ap_generation_t old_gen;

    if (processed == APEXIT_CHILDFATAL
        && slot >= 0 && retained->slots[slot].generation == pc->generation) {
        /* A child of the current configuration cannot run at all. */
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, pc->s, "bucketed: child "
                     "%" APR_PID_T_FMT " exited with a fatal error, "
                     "shutting down", proc->pid);
        retained->mpm->shutdown_pending = 1;
        retained->mpm->is_ungraceful = 1;
    }
    if (slot >= 0) {
        child_gone(pc, slot, proc->pid, child_exit_classify(
            processed == APEXIT_CHILDSICK, APR_PROC_CHECK_SIGNALED(why),
            retained->slots[slot].exit_requested != 0,
            slot_was_ready(pc, slot)));
    }
    else if (ap_unregister_extra_mpm_process(proc->pid, &old_gen)) {
        ap_run_child_status(pc->s, proc->pid, old_gen, -1, MPM_CHILD_EXITED);
    }
#if APR_HAS_OTHER_CHILD
    else if (apr_proc_other_child_alert(proc, APR_OC_REASON_DEATH, status)
             == APR_SUCCESS) {
        /* a piped logger or the like, restarted by its owner */
    }
#endif
}

/* The units a child brings: threads per child in ChildModel event. */
static int child_units(const parent_context *pc)
{
    return pc->conf->threads.threads_per_child;
}

/* Of a live child's units, how many can take a new connection now: a
 * prefork child ready or starting is one; in ChildModel event, the worker
 * threads ready or starting, none while the child has stopped accepting.
 * Read from the scoreboard, for counting only. */
static int idle_units_of(const parent_context *pc, int slot)
{
    int t, idle = 0;

    if (pc->conf->child_model == CHILD_MODEL_EVENT
        && ap_get_scoreboard_process(slot)->not_accepting) {
        return 0;
    }
    for (t = 0; t < child_units(pc); t++) {
        idle += ap_get_scoreboard_worker_from_indexes(slot, t)->status
                <= SERVER_READY;
    }
    return idle;
}

/* Connections a live child holds open: an event child's own count (its
 * idle keep-alive ones too); a prefork child's is its busy worker's. */
static apr_uint32_t connections_of(const parent_context *pc, int slot)
{
    if (pc->conf->child_model == CHILD_MODEL_EVENT) {
        return ap_get_scoreboard_process(slot)->connections;
    }
    return ap_get_scoreboard_worker_from_indexes(slot, 0)->status
           > SERVER_READY;
}

/* What the slot table and the scoreboard say of a slot, for the census.
 * The bucket comes from the parent's own table; the scoreboard supplies
 * only the idle/busy status of a child's units. */
static slot_view view_slot(const parent_context *pc, int slot)
{
    const child_slot *cs = &pc->retained->slots[slot];
    slot_view v;

    v.bucket = cs->bucket;
    v.idle_units = 0;
    v.holds_connections = 0;
    if (cs->pid == 0) {
        v.state = SLOT_EMPTY;
    }
    else if (cs->exit_requested) {
        v.state = cs->replace_into != NO_REPLACEMENT
                  && slot < pc->limits->max_workers
                  ? SLOT_REPLACING : SLOT_LEAVING;
        v.bucket = cs->replace_into;
    }
    else if (cs->generation != pc->generation) {
        v.state = SLOT_LEAVING;
    }
    else {
        v.idle_units = idle_units_of(pc, slot);
        v.state = v.idle_units > 0 ? SLOT_IDLE : SLOT_BUSY;
        v.holds_connections = connections_of(pc, slot) > 0;
    }
    return v;
}

/* Fills pc->census; returns the free slots. */
static int take_census(parent_context *pc)
{
    int slot, num_slots = pc->retained->max_daemons_limit;

    for (slot = 0; slot < num_slots; slot++) {
        pc->slot_views[slot] = view_slot(pc, slot);
    }
    return bucket_census_tally(pc->slot_views, num_slots,
                               pc->limits->max_workers, pc->num_buckets,
                               child_units(pc), pc->census) + (pc->limits->max_workers
                                              > num_slots
                                              ? pc->limits->max_workers
                                                - num_slots : 0);
}

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

        if (cs->pid == 0 || cs->bucket != bucket || cs->exit_requested
            || cs->generation != pc->generation
            || ap_get_scoreboard_worker_from_indexes(slot, 0)->status
               != SERVER_READY
            || idle_units_of(pc, slot) < child_units(pc)) {
            continue;
        }
        conns = connections_of(pc, slot);
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

static int free_slot(const parent_context *pc)
{
    int slot;

    for (slot = 0; slot < pc->limits->max_workers; slot++) {
        if (pc->retained->slots[slot].pid == 0) {
            return slot;
        }
    }
    return -1;
}

static void carry_out(parent_context *pc, int bucket,
                      const bucket_decision *d)
{
    int i, slot;

    if (d->report_busy) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, "bucketed: "
                     "bucket %d seems busy (you may need to increase "
                     "StartServers, or Min/MaxSpareServers), adding %d "
                     "children, there are %d idle, and %d total children",
                     bucket, d->spawn + d->moved_in,
                     pc->census[bucket].idle,
                     pc->census[bucket].idle + pc->census[bucket].busy);
    }
    for (i = 0; i < d->spawn; i++) {
        slot = free_slot(pc);
        if (slot < 0 || spawn_child(pc, slot, bucket) < 0) {
            break;
        }
    }
    if (d->stop && (slot = idle_child_of(pc, bucket, 0)) >= 0) {
        ask_to_leave(pc, slot, NO_REPLACEMENT);
    }
}

/* Buckets whose queued connections nobody accepts (policy_stall.h)
 * count as having no idle child, so that this pass gives them one. */
static void note_stalls(parent_context *pc, apr_time_t now)
{
    int b;

    bucket_queue_sample(pc->s, pc->conf, pc->queued);
    for (b = 0; b < pc->num_buckets; b++) {
        stall_watch *watch = &pc->stall[b];
        stall_verdict v = stall_watch_update(
            watch, pc->queued[b], bucket_stats_accepted(pc->retained, b), now,
            STALL_AFTER);

        if (v == STALL_BEGAN || v == STALL_GOES_ON) {
            bucket_census_stalled(&pc->census[b]);
        }
        if (v == STALL_BEGAN
            && now - pc->stall_logged[b] >= STALL_LOG_INTERVAL) {
            pc->stall_logged[b] = now;
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, "bucketed: "
                         "bucket %d stalled: %u connection(s) wait in its "
                         "accept queue and none was accepted for %"
                         APR_TIME_T_FMT " ms (its children are hung, or at "
                         "their connection limit); giving it another child",
                         b, pc->queued[b],
                         apr_time_as_msec(stall_watch_stalled_for(watch,
                                                                  now)));
        }
        else if (v == STALL_ENDED) {
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, "bucketed: "
                         "bucket %d accepts again after a stall of %"
                         APR_TIME_T_FMT " ms", b,
                         apr_time_as_msec(watch->lasted));
        }
    }
}

/* A full pass (once a second) or a rescue pass (in between): see
 * bucket_maint_decide(). */
static void maintain_buckets(parent_context *pc, int rescue_only)
{
    bucketed_retained *retained = pc->retained;
    bucket_maint_input in;
    apr_time_t now = apr_time_now();
    int b, i, num_moves, starved = 0;

    in.num_buckets = pc->num_buckets;
    in.unit = child_units(pc);
    in.census = pc->census;
    in.grow_limit = pc->grow_limit;
    in.min_spare = pc->limits->min_spare;
    in.max_spare = pc->limits->max_spare;
    in.free_slots = take_census(pc);
    note_stalls(pc, now);
    in.rescue_only = rescue_only;
    for (b = 0; b < pc->num_buckets; b++) {
        pc->grow_limit[b] = bucket_health_grow_limit(
            &retained->health[b], pc->census[b].children, now);
        pc->can_grow[b] = in.free_slots > 0 && pc->grow_limit[b] > 0;
    }
    bucket_stats_publish_census(pc->conf, pc->census, pc->can_grow,
                                pc->num_buckets);
    bucket_listeners_publish_idle(pc->conf, retained, pc->census,
                                  pc->num_buckets);
    num_moves = bucket_maint_decide(&in, retained->spawn_rate, pc->decisions,
                                    pc->moves, pc->max_moves);
    for (b = 0; b < pc->num_buckets; b++) {
        carry_out(pc, b, &pc->decisions[b]);
        starved |= pc->decisions[b].starved;
    }
    for (i = 0; i < num_moves; i++) {
        /* bucket_maint_decide() moves a child that holds connections
         * only to a stalled bucket. */
        const bucket_move *m = &pc->moves[i];
        int slot = idle_child_of(pc, m->from, !pc->census[m->to].stalled);

        if (slot >= 0) {
            ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, pc->s, "bucketed: "
                         "child %" APR_PID_T_FMT " of bucket %d moves to "
                         "bucket %d (%u connection(s) open)",
                         pc->retained->slots[slot].pid, m->from, m->to,
                         (unsigned)connections_of(pc, slot));
            ask_to_leave(pc, slot, m->to);
        }
    }
    if (starved && !retained->maxclients_reported) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, pc->s, "bucketed: server "
                     "reached MaxRequestWorkers setting (%d children over %d "
                     "buckets, none idle to move), consider raising the "
                     "MaxRequestWorkers setting", pc->limits->max_workers,
                     pc->num_buckets);
        retained->maxclients_reported = 1;
    }
}

/* A leave request can land just before a child blocks in accept(), where
 * nothing interrupts it; asking again is harmless and closes that gap. */
static void repeat_leave_requests(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    apr_time_t now = apr_time_now();
    int slot;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        if (cs->pid != 0 && cs->exit_requested != 0
            && now - cs->exit_requested
               > apr_time_from_sec(BUCKETED_EXIT_RESEND_SEC)) {
            ask_again(pc, slot);
        }
    }
}

static int live_children(const bucketed_retained *retained)
{
    int slot, n = 0;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        n += retained->slots[slot].pid != 0;
    }
    return n;
}

static void signal_all(parent_context *pc, int sig)
{
    bucketed_retained *retained = pc->retained;
    int slot;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        pid_t pid = retained->slots[slot].pid;
        if (pid != 0 && kill(pid, sig) < 0 && errno != ESRCH) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, pc->s,
                         "bucketed: kill(%" APR_PID_T_FMT ", %d)", pid, sig);
        }
    }
}

/* Reaps children until none is left or the deadline passes (0 = none).
 * While they are being asked to leave, the request is repeated, and a hard
 * stop requested meanwhile (SIGTERM during a graceful stop) ends the wait. */
static void reap_until(parent_context *pc, apr_time_t deadline, int asking)
{
    while (live_children(pc->retained) > 0
           && (deadline == 0 || apr_time_now() < deadline)
           && !(asking && pc->retained->mpm->is_ungraceful)) {
        apr_exit_why_e why;
        int status;
        apr_proc_t proc;

        wait_for_child(pc, apr_time_from_sec(1), &proc, &why, &status);
        if (proc.pid != -1) {
            reap_one(pc, &proc, why, status);
        }
        else if (asking) {
            repeat_leave_requests(pc);
        }
    }
}

/* Hard stop of every child: SIGTERM, a few seconds, then SIGKILL. */
static void stop_children_now(parent_context *pc)
{
    signal_all(pc, SIGTERM);
    reap_until(pc, apr_time_now()
                   + apr_time_from_sec(BUCKETED_REAP_TIMEOUT_SEC), 0);
    if (live_children(pc->retained) > 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, "bucketed: %d "
                     "child(ren) ignored SIGTERM, sending SIGKILL",
                     live_children(pc->retained));
        signal_all(pc, SIGKILL);
        reap_until(pc, 0, 0);
    }
}

static void graceful_stop(parent_context *pc)
{
    apr_time_t deadline = 0;
    int slot;

    if (ap_graceful_shutdown_timeout > 0) {
        deadline = apr_time_now()
                   + apr_time_from_sec(ap_graceful_shutdown_timeout);
    }
    /* New connections get refused as soon as the last child leaves; the
     * parent holds no socket open past that. */
    ap_close_listeners();
    bucket_listeners_close_all(pc->retained);
    /* Through ask_to_leave, so that repeat_leave_requests() below asks
     * again: a request landing between a child's check of its leaving
     * flag and its accept() is otherwise lost, and that child would keep
     * its socket (and the server) alive until GracefulShutdownTimeout. */
    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        if (pc->retained->slots[slot].pid != 0) {
            ask_to_leave(pc, slot, NO_REPLACEMENT);
        }
    }
    reap_until(pc, deadline, 1);
    if (live_children(pc->retained) > 0) {
        stop_children_now(pc);
    }
}

/* The first pass of a new generation: old children leave (each replaced
 * in its slot as it goes, its replacement in the slot's starting bucket),
 * then the start-up population. */
static void start_generation(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    int slot, wanted;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        if (cs->pid != 0 && cs->generation != pc->generation) {
            ask_to_leave(pc, slot, slot < pc->limits->max_workers
                                   ? bucket_of_slot(slot, pc->num_buckets)
                                   : NO_REPLACEMENT);
        }
    }
    wanted = bucket_start_children(pc->limits->start_servers,
                                   pc->num_buckets, pc->limits->max_workers);
    for (slot = 0; slot < wanted; slot++) {
        if (retained->slots[slot].pid == 0
            && spawn_child(pc, slot, bucket_of_slot(slot, pc->num_buckets))
               < 0) {
            break;
        }
    }
}

static void log_started(parent_context *pc)
{
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, pc->s, "%s configured -- "
                 "resuming normal operations", ap_get_server_description());
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, "Server built: %s",
                 ap_get_server_built());
    ap_log_command_line(pc->pconf, pc->s);
    ap_log_mpm_common(pc->s);
}

int parent_run(apr_pool_t *pconf, apr_pool_t *plog, server_rec *s)
{
    bucketed_config *conf = bucketed_get_config(s);
    bucketed_retained *retained = bucketed_get_retained();
    ap_unixd_mpm_retained_data *mpm = retained->mpm;
    parent_context pc;
    int one_process = bucketed_one_process();
    apr_time_t last_maintenance = 0;

    (void)plog;
    pc.pconf = pconf;
    pc.s = s;
    pc.conf = conf;
    pc.retained = retained;
    pc.limits = &conf->limits;
    pc.num_buckets = conf->plan.num_buckets;
    pc.generation = mpm->my_generation;
    pc.census = apr_pcalloc(pconf, sizeof(bucket_census) * pc.num_buckets);
    pc.decisions = apr_pcalloc(pconf, sizeof(bucket_decision)
                                      * pc.num_buckets);
    pc.grow_limit = apr_pcalloc(pconf, sizeof(int) * pc.num_buckets);
    pc.can_grow = apr_pcalloc(pconf, sizeof(int) * pc.num_buckets);
    pc.queued = apr_pcalloc(pconf, sizeof(apr_uint32_t) * pc.num_buckets);
    pc.stall = apr_pcalloc(pconf, sizeof(stall_watch) * pc.num_buckets);
    pc.stall_logged = apr_pcalloc(pconf, sizeof(apr_time_t)
                                         * pc.num_buckets);
    pc.max_moves = pc.num_buckets * BUCKET_MAX_SPAWN_RATE;
    pc.moves = apr_pcalloc(pconf, sizeof(bucket_move) * pc.max_moves);
    pc.slot_views = apr_pcalloc(pconf, sizeof(slot_view)
                                       * retained->first_server_limit);
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
    allocate_tables(retained, s);
    bucket_stats_reset(retained);
    retained->maxclients_reported = 0;
    ap_unixd_mpm_set_signals(pconf, one_process);

    if (one_process) {
        mpm->mpm_state = AP_MPMQ_RUNNING;
        note_slot_used(retained, 0);
        record_child(&pc, 0, getpid(), 0);
        run_child(&pc, 0, 0, 0);
    }

    log_started(&pc);
    start_generation(&pc);
    mpm->mpm_state = AP_MPMQ_RUNNING;

    while (!mpm->restart_pending && !mpm->shutdown_pending) {
        apr_exit_why_e why;
        int status;
        apr_proc_t proc;

        wait_for_child(&pc, RESCUE_INTERVAL, &proc, &why, &status);
        if (proc.pid != -1) {
            reap_one(&pc, &proc, why, status);
            continue;
        }
        /* Woken early or not, full maintenance keeps its pace of one pass
         * a second: spawn rates double per pass. */
        if (apr_time_now() - last_maintenance >= apr_time_from_sec(1)) {
            maintain_buckets(&pc, 0);
            repeat_leave_requests(&pc);
            last_maintenance = apr_time_now();
        }
        else {
            maintain_buckets(&pc, 1);
        }
    }

    if (mpm->shutdown_pending) {
        mpm->mpm_state = AP_MPMQ_STOPPING;
        if (mpm->is_ungraceful) {
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                         "caught SIGTERM, shutting down");
            stop_children_now(&pc);
        }
        else {
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                         "caught " AP_SIG_GRACEFUL_STOP_STRING
                         ", shutting down gracefully");
            graceful_stop(&pc);
        }
        ap_remove_pid(pconf, ap_pid_fname);
        return DONE;
    }

    /* Restart. */
    mpm->my_generation++;
    mpm->was_graceful = !mpm->is_ungraceful;
    if (mpm->is_ungraceful) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     "SIGHUP received.  Attempting to restart");
        stop_children_now(&pc);
    }
    else {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     AP_SIG_GRACEFUL_STRING " received.  Doing graceful "
                     "restart");
    }
    mpm->restart_pending = 0;
    mpm->is_ungraceful = 0;
    return OK;
}
