/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_slots.c: the parent's slot table: children started into slots
 * and buckets (recorded in the parent's own memory, never read back from
 * shared memory), asked to leave, reaped, and their exits weighed
 * (policy_exit.c decides whether a bucket's next child waits).
 */
#include "parent_context.h"

#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"

#include "child_life.h"
#include "listen_absence.h"
#include "sys_proc.h"

APLOG_USE_MODULE(mpm_bucketed);

/* The monitor hook (mod_systemd's status, mod_watchdog ...) runs at the
 * pace ap_wait_or_timeout() gives it: every ten one-second turns. */
#define MONITOR_INTERVAL_SEC 10

void parent_sigprocmask(parent_context *pc, int how,
                                const sigset_t *set, sigset_t *old)
{
    if (sigprocmask(how, set, old) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, pc->s,
                     BKLOGNO(00112) "bucketed: sigprocmask in the parent");
    }
}

/* ap_wait_or_timeout()'s job without its race: a child that exits just
 * before that function's one-second sleep is noticed only after it, and
 * during a graceful restart its bucket would stay empty that long. Here
 * SIGCHLD is blocked while waiting and taken with sigtimedwait(), which
 * returns at once when one is pending. proc->pid is -1 when no
 * child exited within the timeout (or another signal came first). */
void parent_wait_for_child(parent_context *pc, apr_interval_time_t timeout,
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
    parent_sigprocmask(pc, SIG_BLOCK, &pc->sigchld, &saved);
    if (!APR_STATUS_IS_CHILD_DONE(apr_proc_wait_all_procs(proc, status, why,
                                                          APR_NOWAIT,
                                                          pc->pconf))) {
        ts.tv_sec = apr_time_sec(timeout);
        ts.tv_nsec = apr_time_usec(timeout) * 1000;
        if (sigtimedwait(&pc->sigchld, NULL, &ts) < 0 && errno != EAGAIN
            && errno != EINTR) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_ERR, err, pc->s,
                         BKLOGNO(00113) "bucketed: sigtimedwait(SIGCHLD)");
            apr_sleep(timeout);
        }
        if (!APR_STATUS_IS_CHILD_DONE(apr_proc_wait_all_procs(
                proc, status, why, APR_NOWAIT, pc->pconf))) {
            proc->pid = -1;
        }
    }
    parent_sigprocmask(pc, SIG_SETMASK, &saved, NULL);
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
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00114)
                                                        "bucketed: mmap of "
                     "%" APR_SIZE_T_FMT " bytes for the slot table; using "
                     "inherited memory", size);
        return apr_pcalloc(s->process->pool, size);
    }
#ifdef MADV_DONTFORK
    if (madvise(mem, size, MADV_DONTFORK) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s,
                     BKLOGNO(00115)
                     "bucketed: madvise(MADV_DONTFORK) on the slot table");
    }
#endif
    return mem;
}

void parent_allocate_tables(bucketed_retained *retained, server_rec *s)
{
    int n = retained->first_server_limit;

    /* Buckets never outnumber MaxRequestWorkers, hence ServerLimit. */
    if (retained->slots == NULL) {
        bucket_spawning *spawning = parent_only_memory(
            s, sizeof(bucket_spawning) * n);
        int b;

        retained->slots = parent_only_memory(s, sizeof(child_slot) * n);
        for (b = 0; b < n; b++) {
            retained->buckets[b].spawning = &spawning[b];
        }
    }
}

void parent_note_slot_used(bucketed_retained *retained, int slot)
{
    if (slot + 1 > retained->max_daemons_limit) {
        retained->max_daemons_limit = slot + 1;
    }
}

void parent_record_child(parent_context *pc, int slot, pid_t pid,
                         int bucket)
{
    child_slot *cs = &pc->retained->slots[slot];
    process_score *ps = ap_get_scoreboard_process(slot);

    cs->pid = pid;
    cs->taken_over_start = 0;
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

void parent_run_child(parent_context *pc, int slot, int bucket,
                      pid_t parent)
{
    /* Keeps the drop_privileges hook from closing this child's sockets. */
    pc->retained->server_child = 1;
    child_life_run(pc->conf->child_model == CHILD_MODEL_EVENT
                   ? &event_child_model : &prefork_child_model,
                   pc->s, pc->conf, pc->retained, slot, bucket, parent);
}

int parent_bucket_rejoin(parent_context *pc, int bucket)
{
    int rc;

    if (!pc->absence[bucket].out) {
        return 0;
    }
    rc = bucket_listeners_rejoin(pc->s, pc->conf, pc->retained, bucket);
    /* Either way: a failure is logged once, not at every pass. A map
     * slot left empty leaves the socket to the kernel's hash; a socket
     * left shut down listens again with the next child forked into it
     * (bucket_listeners_listen_again). */
    bucket_absence_rejoined(&pc->absence[bucket]);
    return rc;
}

void parent_buckets_rejoin(parent_context *pc)
{
    int b;

    for (b = 0; b < pc->num_buckets; b++) {
        parent_bucket_rejoin(pc, b);
    }
}

int parent_slot_limit(const parent_context *pc)
{
    int limit = pc->conf->child_model == CHILD_MODEL_EVENT
                ? pc->limits->server_limit : pc->limits->max_workers;

    return limit < pc->retained->first_server_limit
           ? limit : pc->retained->first_server_limit;
}

int parent_child_outgoing(const parent_context *pc, const child_slot *cs)
{
    return cs->exit_requested || cs->generation != pc->generation;
}

int parent_counted_bucket(const parent_context *pc, const child_slot *cs)
{
    if (cs->pid == 0) {
        return NO_REPLACEMENT;
    }
    return parent_child_outgoing(pc, cs) ? cs->replace_into : cs->bucket;
}

int parent_children_counted(const parent_context *pc)
{
    int slot, n = 0;

    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        n += parent_counted_bucket(pc, &pc->retained->slots[slot])
             != NO_REPLACEMENT;
    }
    return n;
}

int parent_free_slot(const parent_context *pc)
{
    int slot, limit = parent_slot_limit(pc);

    for (slot = 0; slot < limit; slot++) {
        if (pc->retained->slots[slot].pid == 0) {
            return slot;
        }
    }
    return -1;
}

int parent_spawn_child(parent_context *pc, int slot, int bucket)
{
    pid_t parent = getpid(), pid;
    sigset_t block, saved;

    parent_note_slot_used(pc->retained, slot);
    ap_update_child_status_from_indexes(slot, 0, SERVER_STARTING, NULL);
    /* Held until the child has its own handlers: a SIGTERM landing on the
     * parent's inherited handler would be lost, and the child would live
     * on until SIGKILL. */
    sigfillset(&block);
    parent_sigprocmask(pc, SIG_BLOCK, &block, &saved);
    pid = fork();
    if (pid < 0) {
        int err = errno;
        apr_interval_time_t hold;

        parent_sigprocmask(pc, SIG_SETMASK, &saved, NULL);
        ap_update_child_status_from_indexes(slot, 0, SERVER_DEAD, NULL);
        /* Out of processes or memory, as a sick exit says: the bucket
         * backs off (and keeps its floor child's retries), instead of the
         * parent sleeping through every other bucket's needs. */
        hold = child_exit_note(
            &pc->retained->buckets[bucket].spawning->health, CHILD_EXIT_SICK,
            apr_time_now());
        ap_log_error(APLOG_MARK, APLOG_ERR, err, pc->s, BKLOGNO(00116)
                                                        "bucketed: fork: "
                     "unable to start a child for slot %d (bucket %d); the "
                     "bucket's next child in %" APR_TIME_T_FMT " s", slot,
                     bucket, apr_time_sec(hold));
        return -1;
    }
    if (pid == 0) {
        parent_run_child(pc, slot, bucket, parent);
    }
    parent_sigprocmask(pc, SIG_SETMASK, &saved, NULL);
    parent_record_child(pc, slot, pid, bucket);
    /* Out of its groups: the child listens on its sockets once set up. */
    bucket_absence_handed(&pc->absence[bucket]);
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
void parent_ask_to_leave(parent_context *pc, int slot, int replace_into)
{
    child_slot *cs = &pc->retained->slots[slot];

    if (!adopted_slot_still_ours(pc, slot)) {
        return;
    }
    if (kill(cs->pid, AP_SIG_GRACEFUL) < 0 && errno != ESRCH) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, pc->s, BKLOGNO(00117)
                                                            "bucketed: "
                     "kill(%" APR_PID_T_FMT ", SIGUSR1)", cs->pid);
    }
    cs->exit_requested = apr_time_now();
    cs->replace_into = replace_into;
    ap_get_scoreboard_process(slot)->quiescing = 1;
}

void parent_ask_to_give_up(parent_context *pc, int slot)
{
    child_slot *cs = &pc->retained->slots[slot];

    /* Only a current prefork-model child takes the signal; any other
     * would die of its default action (event children do not block it),
     * and a leaving one keeps its connections. */
    if (pc->conf->child_model != CHILD_MODEL_PREFORK
        || parent_child_outgoing(pc, cs)
        || !adopted_slot_still_ours(pc, slot)) {
        return;
    }
    if (kill(cs->pid, BUCKETED_SIG_GIVE_UP) < 0 && errno != ESRCH) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, pc->s, BKLOGNO(00185)
                                                            "bucketed: "
                     "kill(%" APR_PID_T_FMT ", SIGRTMIN+2)", cs->pid);
    }
}

int parent_ask_to_look(parent_context *pc, int slot)
{
    child_slot *cs = &pc->retained->slots[slot];

    /* Only a current child takes the signal: one that is not ours, or of
     * another build, might die of it. A leaving one takes no more. One
     * that has not taken the last yet (stopped, or a prefork-model child
     * serving) gets no more: realtime signals queue, charged to its
     * user's RLIMIT_SIGPENDING. One SIGKILLed and not yet run would take
     * the ask to its grave, as it did the connection's wake-up. */
    if (parent_child_outgoing(pc, cs) || !adopted_slot_still_ours(pc, slot)
        || proc_signals_pending(cs->pid, PROC_SIGNAL_BIT(BUCKETED_SIG_LOOK)
                                         | PROC_SIGNAL_BIT(SIGKILL))) {
        return 0;
    }
    if (kill(cs->pid, BUCKETED_SIG_LOOK) < 0) {
        int err = errno;
        if (err != ESRCH) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, pc->s,
                         BKLOGNO(00262)
                         "bucketed: kill(%" APR_PID_T_FMT ", SIGRTMIN+3)",
                         cs->pid);
        }
        return 0;
    }
    return 1;
}

/* The asked child exits; asking again (see repeat_leave_requests) keeps
 * its replacement. */
void parent_ask_again(parent_context *pc, int slot)
{
    parent_ask_to_leave(pc, slot, pc->retained->slots[slot].replace_into);
}

/* Records an exit in its bucket's health (any unasked exit, and a failed
 * one even when asked); returns whether the bucket may get its
 * replacement now. */
static int note_exit(parent_context *pc, const child_slot *cs,
                             pid_t pid, child_exit_kind kind)
{
    bucket_spawning *spawning = pc->retained->buckets[cs->bucket].spawning;
    bucket_health *health = &spawning->health;
    apr_interval_time_t hold = child_exit_note(health, kind, apr_time_now());

    if (kind == CHILD_EXIT_SICK) {
        /* prefork's answer to a resource shortage: start slowly again. */
        spawning->spawn_rate = 1;
    }
    if (kind == CHILD_EXIT_CRASH_SERVING) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, BKLOGNO(00118)
                                                       "bucketed: child "
                     "%" APR_PID_T_FMT " of bucket %d crashed while serving; "
                     "replaced at once", pid, cs->bucket);
    }
    if (hold > 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, pc->s, BKLOGNO(00119)
                                                          "bucketed: child "
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
    /* Nor its connection counts: a stop that serves on reads keep_alive
     * (parent_keepalive_held()) before the slot's next child writes it. */
    ap_get_scoreboard_process(slot)->keep_alive = 0;
    ap_get_scoreboard_process(slot)->write_completion = 0;
    ap_get_scoreboard_process(slot)->lingering_close = 0;
    ap_get_scoreboard_process(slot)->suspended = 0;
#ifdef AP_MPMQ_CAN_WAITIO   /* httpd 2.4.63 and later */
    ap_get_scoreboard_process(slot)->wait_io = 0;
#endif
}

/* Children the bucket has (running, starting or on their way in), from
 * the parent's own table. */
static int children_in(parent_context *pc, int bucket)
{
    int slot, n = 0;

    adopted_slots_check(pc);
    for (slot = 0; slot < pc->retained->max_daemons_limit; slot++) {
        n += parent_counted_bucket(pc, &pc->retained->slots[slot]) == bucket;
    }
    return n;
}

/* Whether any unit of the slot's child had reported itself ready (or
 * busy): it got through its set-up. A hint read from the scoreboard, used
 * only to pace replacements (policy_exit.h) and to say when a bucket's
 * spell without a child is over (a log line, parent_maint.c). */
int parent_slot_was_ready(const parent_context *pc, int slot)
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
 * the bucket it counted for (the one it was asked to leave for, or its
 * own when it left unasked: crashed, or reached MaxConnectionsPerChild),
 * unless that bucket's children keep failing. */
static void child_gone(parent_context *pc, int slot, pid_t pid,
                       child_exit_kind kind)
{
    bucketed_retained *retained = pc->retained;
    child_slot *cs = &retained->slots[slot];
    int asked = cs->exit_requested != 0;
    int next_bucket = parent_counted_bucket(pc, cs);
    int replace = next_bucket >= 0 && next_bucket < pc->num_buckets
                  && !retained->mpm->shutdown_pending
                  && !retained->mpm->restart_pending;

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
    cs->taken_over_start = 0;
    cs->exit_requested = 0;
    cs->replace_into = NO_REPLACEMENT;
    if (!replace
        || parent_children_counted(pc) >= pc->limits->max_workers
        || bucket_health_grow_limit(
               &retained->buckets[next_bucket].spawning->health,
               children_in(pc, next_bucket), apr_time_now()) <= 0) {
        return;
    }
    /* In its own slot, unless a reload lowered the slot limit below it. */
    if (slot >= parent_slot_limit(pc)) {
        slot = parent_free_slot(pc);
    }
    if (slot >= 0) {
        parent_spawn_child(pc, slot, next_bucket);
    }
}

void parent_reap_one(parent_context *pc, apr_proc_t *proc,
                     apr_exit_why_e why, int status)
{
    bucketed_retained *retained = pc->retained;
    int slot = find_slot(retained, proc->pid);
    int processed = ap_process_child_status(proc, why, status);
    ap_generation_t old_gen;

    if (processed == APEXIT_CHILDFATAL
        && slot >= 0 && retained->slots[slot].generation == pc->generation) {
        /* A child of the current configuration cannot run at all. */
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, pc->s, BKLOGNO(00120)
                                                        "bucketed: child "
                     "%" APR_PID_T_FMT " exited with a fatal error, "
                     "shutting down", proc->pid);
        retained->mpm->shutdown_pending = 1;
        retained->mpm->is_ungraceful = 1;
    }
    if (slot >= 0) {
        child_gone(pc, slot, proc->pid, child_exit_classify(
            processed == APEXIT_CHILDSICK, APR_PROC_CHECK_SIGNALED(why),
            retained->slots[slot].exit_requested != 0,
            parent_slot_was_ready(pc, slot)));
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

