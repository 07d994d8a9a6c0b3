/*
 * parent.c: the bucketed parent process. It starts children into slots
 * (a slot's bucket is fixed by bucket_of_slot, decided in this process's
 * memory), replaces children that die, runs the per-bucket idle
 * maintenance once a second, and carries out stop, graceful stop,
 * restart and graceful restart.
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

/* Why the parent asked a child to leave; decides whether it is replaced. */
#define EXIT_REASON_NONE    0
#define EXIT_REASON_SURPLUS 1   /* idle maintenance: not replaced */
#define EXIT_REASON_RESTART 2   /* new generation: replaced in its slot */

typedef struct {
    apr_pool_t *pconf;
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    const process_limits *limits;
    int num_buckets;
    ap_generation_t generation;
    bucket_census *census;           /* per bucket, reused every pass */
    int *idle_victim;                /* per bucket: idle child to stop */
    sigset_t sigchld;                /* blocked; taken by wait_for_child */
    apr_time_t last_monitor;
} parent_context;

/* The monitor hook (mod_systemd's status, mod_watchdog ...) runs at the
 * pace ap_wait_or_timeout() gives it: every ten one-second turns. */
#define MONITOR_INTERVAL_SEC 10

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
    sigprocmask(SIG_BLOCK, &pc->sigchld, &saved);
    if (!APR_STATUS_IS_CHILD_DONE(apr_proc_wait_all_procs(proc, status, why,
                                                          APR_NOWAIT,
                                                          pc->pconf))) {
        ts.tv_sec = apr_time_sec(timeout);
        ts.tv_nsec = apr_time_usec(timeout) * 1000;
        if (sigtimedwait(&pc->sigchld, NULL, &ts) < 0 && errno != EAGAIN
            && errno != EINTR) {
            ap_log_error(APLOG_MARK, APLOG_ERR, errno, pc->s,
                         "bucketed: sigtimedwait(SIGCHLD)");
            apr_sleep(timeout);
        }
        if (!APR_STATUS_IS_CHILD_DONE(apr_proc_wait_all_procs(
                proc, status, why, APR_NOWAIT, pc->pconf))) {
            proc->pid = -1;
        }
    }
    sigprocmask(SIG_SETMASK, &saved, NULL);
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
        ap_log_error(APLOG_MARK, APLOG_WARNING, errno, s, "bucketed: mmap of "
                     "%" APR_SIZE_T_FMT " bytes for the slot table; using "
                     "inherited memory", size);
        return apr_pcalloc(s->process->pool, size);
    }
#ifdef MADV_DONTFORK
    if (madvise(mem, size, MADV_DONTFORK) < 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, errno, s,
                     "bucketed: madvise(MADV_DONTFORK) on the slot table");
    }
#endif
    return mem;
}

static void allocate_tables(bucketed_retained *retained, server_rec *s)
{
    int n = retained->first_server_limit;

    if (retained->slots == NULL) {
        retained->slots = parent_only_memory(s, sizeof(child_slot) * n);
        retained->spawn_rate = parent_only_memory(s, sizeof(int) * n);
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
    cs->exit_reason = EXIT_REASON_NONE;
    /* Shown by mod_status and bucketed-status; never read back here. */
    ps->pid = pid;
    ps->generation = pc->generation;
    ps->bucket = bucket;
    ps->quiescing = 0;
    ap_run_child_status(pc->s, pid, pc->generation, slot, MPM_CHILD_STARTED);
}

static int spawn_child(parent_context *pc, int slot)
{
    int bucket = bucket_of_slot(slot, pc->num_buckets);
    pid_t parent = getpid(), pid;

    sigset_t block, saved;

    note_slot_used(pc->retained, slot);
    ap_update_child_status_from_indexes(slot, 0, SERVER_STARTING, NULL);
    /* Held until the child has its own handlers: a SIGTERM landing on the
     * parent's inherited handler would be lost, and the child would live
     * on until SIGKILL. */
    sigfillset(&block);
    sigprocmask(SIG_BLOCK, &block, &saved);
    pid = fork();
    if (pid != 0) {
        sigprocmask(SIG_SETMASK, &saved, NULL);
    }
    if (pid < 0) {
        ap_log_error(APLOG_MARK, APLOG_ERR, errno, pc->s, "bucketed: fork: "
                     "unable to start a child for slot %d (bucket %d)",
                     slot, bucket);
        ap_update_child_status_from_indexes(slot, 0, SERVER_DEAD, NULL);
        /* Out of processes or memory: pause rather than spin on fork(). */
        apr_sleep(apr_time_from_sec(1));
        return -1;
    }
    if (pid == 0) {
        child_main(pc->s, pc->conf, pc->retained, slot, bucket, parent);
    }
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

static void ask_to_leave(parent_context *pc, int slot, int reason)
{
    child_slot *cs = &pc->retained->slots[slot];

    if (kill(cs->pid, AP_SIG_GRACEFUL) < 0 && errno != ESRCH) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, errno, pc->s, "bucketed: "
                     "kill(%" APR_PID_T_FMT ", SIGUSR1)", cs->pid);
    }
    cs->exit_requested = apr_time_now();
    if (reason != EXIT_REASON_NONE) {
        cs->exit_reason = reason;
    }
    ap_get_scoreboard_process(slot)->quiescing = 1;
}

/* A child gone: free its slot; replace it unless it was surplus or the
 * server is going down. */
static void child_gone(parent_context *pc, int slot, pid_t pid)
{
    bucketed_retained *retained = pc->retained;
    child_slot *cs = &retained->slots[slot];
    int replace = cs->exit_reason != EXIT_REASON_SURPLUS
                  && !retained->mpm->shutdown_pending
                  && !retained->mpm->restart_pending
                  && slot < pc->limits->max_workers;

    ap_update_child_status_from_indexes(slot, 0, SERVER_DEAD, NULL);
    ap_get_scoreboard_process(slot)->pid = 0;
    ap_run_child_status(pc->s, pid, cs->generation, slot, MPM_CHILD_EXITED);
    cs->pid = 0;
    cs->exit_requested = 0;
    cs->exit_reason = EXIT_REASON_NONE;
    if (replace) {
        spawn_child(pc, slot);
    }
}

static void reap_one(parent_context *pc, apr_proc_t *proc,
                     apr_exit_why_e why, int status)
{
    bucketed_retained *retained = pc->retained;
    int slot = find_slot(retained, proc->pid);
    ap_generation_t old_gen;

    if (ap_process_child_status(proc, why, status) == APEXIT_CHILDFATAL
        && slot >= 0 && retained->slots[slot].generation == pc->generation) {
        /* A child of the current configuration cannot run at all. */
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, pc->s, "bucketed: child "
                     "%" APR_PID_T_FMT " exited with a fatal error, "
                     "shutting down", proc->pid);
        retained->mpm->shutdown_pending = 1;
        retained->mpm->is_ungraceful = 1;
    }
    if (slot >= 0) {
        child_gone(pc, slot, proc->pid);
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

/* Counts idle and busy children of the current generation per bucket, and
 * free slots per bucket, from the parent's own slot table; the scoreboard
 * supplies only each child's idle/busy status. */
static void take_census(parent_context *pc, bucket_census *census,
                        int *idle_victim)
{
    bucketed_retained *retained = pc->retained;
    int b, slot;

    for (b = 0; b < pc->num_buckets; b++) {
        census[b].idle = census[b].busy = census[b].free_slots = 0;
        idle_victim[b] = -1;
    }
    for (slot = 0; slot < pc->limits->max_workers; slot++) {
        if (retained->slots[slot].pid == 0) {
            census[bucket_of_slot(slot, pc->num_buckets)].free_slots++;
        }
    }
    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        int status;

        if (cs->pid == 0) {
            continue;
        }
        if (cs->exit_reason == EXIT_REASON_RESTART) {
            /* Replaced in its slot as soon as it leaves (see child_gone):
             * count the replacement now, or the bucket would look short. */
            if (slot < pc->limits->max_workers) {
                census[bucket_of_slot(slot, pc->num_buckets)].idle++;
            }
            continue;
        }
        if (cs->generation != pc->generation || cs->exit_requested) {
            continue;
        }
        status = ap_get_scoreboard_worker_from_indexes(slot, 0)->status;
        if (status <= SERVER_READY) {
            census[cs->bucket].idle++;
            if (status == SERVER_READY) {
                idle_victim[cs->bucket] = slot;   /* the highest one */
            }
        }
        else {
            census[cs->bucket].busy++;
        }
    }
}

static int free_slot_in_bucket(parent_context *pc, int bucket)
{
    int slot;

    for (slot = bucket; slot < pc->limits->max_workers;
         slot += pc->num_buckets) {
        if (pc->retained->slots[slot].pid == 0) {
            return slot;
        }
    }
    return -1;
}

static void maintain_buckets(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    int b, at_capacity = 0;

    take_census(pc, pc->census, pc->idle_victim);
    bucket_stats_publish_census(pc->conf, pc->census, pc->num_buckets);
    bucket_queue_sample(pc->s, pc->conf);
    for (b = 0; b < pc->num_buckets; b++) {
        bucket_spare_limits limits = bucket_spare_share(
            pc->limits->min_spare, pc->limits->max_spare, b, pc->num_buckets);
        bucket_decision d = bucket_maint_decide(&pc->census[b], &limits,
                                                retained->spawn_rate[b]);
        int i;

        retained->spawn_rate[b] = d.next_spawn_rate;
        if (d.stop && pc->idle_victim[b] >= 0) {
            ask_to_leave(pc, pc->idle_victim[b], EXIT_REASON_SURPLUS);
        }
        if (d.spawn >= 8) {
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, pc->s, "bucketed: "
                         "bucket %d seems busy (you may need to increase "
                         "StartServers, or Min/MaxSpareServers), spawning "
                         "%d children, there are %d idle, and %d total "
                         "children", b, d.spawn, pc->census[b].idle,
                         pc->census[b].idle + pc->census[b].busy);
        }
        for (i = 0; i < d.spawn; i++) {
            int slot = free_slot_in_bucket(pc, b);
            if (slot < 0 || spawn_child(pc, slot) < 0) {
                break;
            }
        }
        at_capacity |= d.at_capacity;
    }
    if (at_capacity && !retained->maxclients_reported) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, pc->s, "bucketed: a bucket "
                     "reached its share of MaxRequestWorkers (%d over %d "
                     "buckets), consider raising the MaxRequestWorkers "
                     "setting", pc->limits->max_workers, pc->num_buckets);
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
            ask_to_leave(pc, slot, EXIT_REASON_NONE);
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
            ap_log_error(APLOG_MARK, APLOG_WARNING, errno, pc->s,
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
            ask_to_leave(pc, slot, EXIT_REASON_NONE);
        }
    }
    reap_until(pc, deadline, 1);
    if (live_children(pc->retained) > 0) {
        stop_children_now(pc);
    }
}

/* The first pass of a new generation: old children leave (and are
 * replaced slot by slot as they go), then the start-up population. */
static void start_generation(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    int slot, wanted;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        if (cs->pid != 0 && cs->generation != pc->generation) {
            ask_to_leave(pc, slot, EXIT_REASON_RESTART);
        }
    }
    /* At least one child per bucket, whatever StartServers says. */
    wanted = pc->limits->start_servers;
    if (wanted < pc->num_buckets) {
        wanted = pc->num_buckets;
    }
    for (slot = 0; slot < pc->limits->max_workers && wanted > 0; slot++) {
        if (retained->slots[slot].pid == 0) {
            if (spawn_child(pc, slot) < 0) {
                break;
            }
        }
        wanted--;
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
    pc.idle_victim = apr_pcalloc(pconf, sizeof(int) * pc.num_buckets);
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
        child_main(s, conf, retained, 0, 0, 0);
    }

    log_started(&pc);
    start_generation(&pc);
    mpm->mpm_state = AP_MPMQ_RUNNING;

    while (!mpm->restart_pending && !mpm->shutdown_pending) {
        apr_exit_why_e why;
        int status;
        apr_proc_t proc;

        wait_for_child(&pc, apr_time_from_sec(1), &proc, &why, &status);
        if (proc.pid != -1) {
            reap_one(&pc, &proc, why, status);
            continue;
        }
        /* Woken early or not, maintenance keeps its pace of one pass a
         * second: spawn rates double per pass. */
        if (apr_time_now() - last_maintenance >= apr_time_from_sec(1)) {
            maintain_buckets(&pc);
            repeat_leave_requests(&pc);
            last_maintenance = apr_time_now();
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
