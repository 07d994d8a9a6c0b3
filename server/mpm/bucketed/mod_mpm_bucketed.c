/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mod_mpm_bucketed.c: the bucketed MPM's table of contents. Prefork's
 * process model (one connection per child process), or event's
 * (ChildModel event), with the children split into listener buckets that
 * each own their own listening sockets.
 *
 *   bucketed_data.c       the configuration and the retained data
 *   bucket.c              the bucket: what it keeps, what one generation has
 *   policy_upgrade.c      whether this build can read the kept state (pure)
 *   directives.c          the command table
 *   policy_plan.c         the buckets and the sockets each owns    (pure)
 *   policy_maint.c        per-bucket idle maintenance decisions    (pure)
 *   policy_exit.c         what a child's exit means for its bucket (pure)
 *   policy_stall.c        whether a bucket has stalled             (pure)
 *   policy_directives.c   value parsing and limit checks           (pure)
 *   policy_kernel.c       kernel versions, the features log line   (pure)
 *   policy_steering.c     reuseport migration, plan-change choices (pure)
 *   policy_accept_queue.c accept-queue history and warnings        (pure)
 *   policy_event.c        the event model's limits and accept rule (pure)
 *   sys_probe.c           trying what the kernel offers
 *   sys_bpf.c             BPF programs on reuseport groups
 *   sys_trial.c           what the kernel does with them, at start-up
 *   listen_sockets.c      opening and keeping the per-bucket sockets
 *   listen_steering.c     their reuseport programs and socket maps
 *   listen_steer_slots.c  a socket into its slot of its map (EBUSY)
 *   listen_activation.c   sockets a service manager passes in
 *   policy_activation.c   what was passed, which Listen it serves (pure)
 *   sys_notify.c          telling the service manager the state
 *   stats_counters.c      shared counters, the parent's published census
 *   stats_queue.c         the parent's accept-queue samples
 *   stats_report.c        the report for mod_bucketed_status
 *   parent.c              the parent: generations, stop, restarts
 *   parent_slots.c        its slot table: spawning, leaving, reaping
 *   parent_maint.c        its maintenance passes
 *   parent_stalls.c       their watch of the accept queues
 *   parent_takeover.c     after a restart onto an incompatible build
 *   parent_record.c       what every build leaves for such a restart
 *   parent_adopted.c      the children it took: checked before each use
 *   policy_takeover.c     which children and sockets it trusts   (pure)
 *   sys_proc.c            what the kernel says of a process
 *   child_life.c          a child's life, the same in both models
 *   policy_affinity.c     which CPUs a bucket's children keep to (pure)
 *   child_affinity.c      keeping them there
 *   prefork_child.c       ChildModel prefork: one connection at a time
 *   prefork_keepalive.c   its wait for a keep-alive connection's next
 *                         request, which it gives up for a waiting client
 *   child_accept.c        waiting for a connection, accepting one
 *   child_protocols.c     the protocols a child model negotiates
 *   event_child.c         ChildModel event: its threads and signals
 *   event_keeper.c        its keeper thread: timeouts, leaving, reclaiming
 *   event_worker.c        its worker threads: serving connections
 *   event_work.c          its timed callbacks, suspended connections
 *   event_waiting.c       its connections waiting without a thread
 *   event_accept.c        taking connections: listening, accepting, pools
 *   event_epoll.c         its epoll sets and eventfds
 *   policy_timeouts.c     its timeout lists and connection states  (pure)
 *
 * This file wires hooks: configuration checks, listener set-up and the
 * answers to ap_mpm_query().
 */
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "httpd.h"
#include "apr_strings.h"

#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "mpm_common.h"
#include "util_mutex.h"

#include "bucketed.h"
#include "child_affinity.h"
#include "child_life.h"
#include "child_protocols.h"
#include "mpm_default.h"
#include "sys_bpf.h"
#include "sys_trial.h"
#include "sys_probe.h"
#include "listen_activation.h"
#include "listen_sockets.h"
#include "listen_steering.h"
#include "parent_context.h"
#include "prefork_keepalive.h"
#include "sys_notify.h"
#include "stats.h"
#include "bucketed_version.h"

/* -X and -DONE_PROCESS serve from the parent itself; -DDEBUG implies it.
 * Recorded in the configuration at check_config (conf->one_process) for
 * the plan and the parent. */
static int bucketed_one_process(void)
{
    return ap_exists_config_define("ONE_PROCESS")
           || ap_exists_config_define("DEBUG");
}

static int bucketed_pre_config(apr_pool_t *pconf, apr_pool_t *plog,
                               apr_pool_t *ptemp)
{
    bucketed_retained *retained = bucketed_get_retained();
    int foreground = ap_exists_config_define("FOREGROUND");
    int no_detach = ap_exists_config_define("NO_DETACH");
    apr_status_t rv;

    (void)plog;
    (void)ptemp;
    /* The first pass runs in the process the service manager started
     * (the second may run in a detached copy), before core starts a piped
     * ErrorLog: read what it passed now, so that no program the server
     * starts inherits it. */
    listen_activation_read();
    notify_read();
    retained->mpm->module_loads++;
    /* httpd reads the configuration twice at start-up; detach on the
     * second, real pass, never on a -t run (which has only the first). */
    if (retained->mpm->module_loads == 2 && !bucketed_one_process()
        && !foreground) {
        rv = apr_proc_detach(no_detach ? APR_PROC_DETACH_FOREGROUND
                                       : APR_PROC_DETACH_DAEMONIZE);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_CRIT, rv, NULL,
                         BKLOGNO(00083) "bucketed: apr_proc_detach failed");
            return HTTP_INTERNAL_SERVER_ERROR;
        }
    }
    ap_listen_pre_config();
    rv = ap_mutex_register(pconf, AP_ACCEPT_MUTEX_TYPE, NULL,
                           APR_LOCK_DEFAULT, 0);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, NULL,
                     BKLOGNO(00084) "bucketed: cannot register the %s mutex",
                     AP_ACCEPT_MUTEX_TYPE);
        return !OK;
    }
    return OK;
}

static int count_listeners(void)
{
    ap_listen_rec *lr;
    int n = 0;

    for (lr = ap_listeners; lr; lr = lr->next) {
        n++;
    }
    return n;
}

/* The plan for this generation. Made at check_config (so `-t` reports a
 * bad one) and again at open_logs, once core has merged wildcard IPv4 and
 * IPv6 listeners and the real socket count is known. */
static const char *make_plan(apr_pool_t *p, bucketed_config *conf,
                             int num_listeners)
{
    bucket_plan_input in;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *err;

    in.strategy = conf->strategy;
    in.bucket_count = conf->bucket_count;
    in.cores_buckets_ratio = conf->cores_buckets_ratio;
    in.online_cpus = cpus > 0 ? (int)cpus : 1;
    in.have_reuseport = conf->kernel.reuseport;
    in.num_listeners = num_listeners;
    in.max_workers = conf->limits.max_workers;
    in.threads_per_child = conf->child_model == CHILD_MODEL_EVENT
                           ? conf->threads.threads_per_child : 0;
    in.one_process = conf->one_process;
    err = bucket_plan_make(p, &in, &conf->plan);
    return err != NULL ? err
           : bucket_listeners_choose_steering(p, conf, in.online_cpus);
}

static void log_limit_warnings(server_rec *s, bucketed_retained *retained,
                               apr_array_header_t *warnings)
{
    int flags = bucketed_config_warning_flags(retained);
    int i;

    for (i = 0; flags >= 0 && i < warnings->nelts; i++) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | flags, 0, s,
                     BKLOGNO(00085) "bucketed: %s",
                     APR_ARRAY_IDX(warnings, i, const char *));
    }
}

/* ChildModel event: stock event's limits, and the process view of them
 * that the shared parent runs on (children, spare threads). */
static const char *check_thread_limits(apr_pool_t *ptemp,
                                       bucketed_config *conf,
                                       apr_array_header_t *warnings)
{
    static const thread_limits defaults = {
        DEFAULT_EVENT_SERVER_LIMIT, DEFAULT_THREAD_LIMIT,
        DEFAULT_THREADS_PER_CHILD, 0, DEFAULT_EVENT_START_DAEMON,
        DEFAULT_MIN_SPARE_THREADS, DEFAULT_MAX_SPARE_THREADS
    };
    thread_limits in = conf->thread_configured;

    in.server_limit = conf->configured.server_limit;
    in.max_workers = conf->configured.max_workers;
    in.start_servers = conf->configured.start_servers;
    return thread_limits_check(ptemp, &in, &defaults, MAX_EVENT_SERVER_LIMIT,
                               MAX_THREAD_LIMIT, &conf->threads,
                               &conf->limits, warnings);
}

/* The soft RLIMIT_NOFILE, which the plan's sockets must fit under. */
static apr_int64_t soft_nofile_limit(server_rec *s)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, err, s,
                     BKLOGNO(00086)
                     "bucketed: getrlimit(RLIMIT_NOFILE); the plan's "
                     "descriptors are not checked against it");
        return PLAN_FD_UNLIMITED;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)APR_INT64_MAX) {
        return PLAN_FD_UNLIMITED;
    }
    return (apr_int64_t)rl.rlim_cur;
}

static int bucketed_check_config(apr_pool_t *pconf, apr_pool_t *plog,
                                 apr_pool_t *ptemp, server_rec *s)
{
    static const process_limits defaults = {
        DEFAULT_SERVER_LIMIT, DEFAULT_SERVER_LIMIT, DEFAULT_START_DAEMON,
        DEFAULT_MIN_FREE_DAEMON, DEFAULT_MAX_FREE_DAEMON
    };
    bucketed_config *conf = bucketed_get_config(s);
    bucketed_retained *retained = bucketed_get_retained();
    apr_array_header_t *warnings = apr_array_make(ptemp, 4,
                                                  sizeof(const char *));
    int event = conf->child_model == CHILD_MODEL_EVENT;
    const char *err;

    (void)plog;
    err = child_model_conflict(ptemp, conf->child_model,
                               conf->prefork_only_seen,
                               conf->event_only_seen);
    if (err == NULL) {
        err = event ? check_thread_limits(ptemp, conf, warnings)
                    : process_limits_check(ptemp, &conf->configured,
                                           &defaults, MAX_SERVER_LIMIT,
                                           &conf->limits, warnings);
    }
    if (err != NULL) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, 0, s,
                     BKLOGNO(00087) "bucketed: %s", err);
        return !OK;
    }
    if (!event) {
        conf->threads.threads_per_child = 1;
        conf->threads.thread_limit = 1;
    }
    /* The scoreboard and the parent's slot table are sized at the first
     * start; ServerLimit and ThreadLimit cannot move under a running
     * server. */
    if (retained->first_server_limit == 0) {
        retained->first_server_limit = conf->limits.server_limit;
        retained->first_thread_limit = conf->threads.thread_limit;
        bucketed_note_limits(retained);
    }
    else {
        process_limits_keep_server_limit(ptemp, &conf->limits,
                                         retained->first_server_limit,
                                         warnings);
        if (event) {
            thread_limits_keep_thread_limit(ptemp, &conf->threads,
                                            &conf->limits,
                                            retained->first_thread_limit,
                                            warnings);
        }
    }
    log_limit_warnings(s, retained, warnings);
    child_protocols_check(ptemp, s, retained, conf->child_model);

    conf->one_process = bucketed_one_process();
    kernel_probe(&conf->kernel);
    conf->migration = reuseport_bpf_choose_migration(pconf,
                                                     conf->kernel.reuseport,
                                                     conf->kernel.migrate_req);
    err = make_plan(pconf, conf, count_listeners());
    /* Here, so that `-t` (and `apachectl graceful`, which runs it first)
     * refuses a plan whose sockets do not fit, rather than the parent
     * failing to open them at a restart. With ChildModel event each bucket
     * also has an eventfd. */
    if (err == NULL) {
        err = plan_descriptors_check(ptemp, &conf->plan, count_listeners(),
                                     event ? 1 : 0, soft_nofile_limit(s));
    }
    if (err != NULL) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, 0, s,
                     BKLOGNO(00088) "bucketed: %s", err);
        return !OK;
    }
    return OK;
}

static const char *describe_plan(apr_pool_t *p, const bucketed_config *conf,
                                 int num_listeners)
{
    const char *plan = bucket_plan_describe(p, &conf->plan, num_listeners,
                                            conf->limits.max_workers,
                                            conf->kernel.epoll_exclusive,
                                            conf->child_model
                                                == CHILD_MODEL_EVENT);

    if (conf->child_model != CHILD_MODEL_EVENT) {
        return plan;
    }
    /* The plan counts children; say what they are made of. */
    return apr_psprintf(p, "%s; ChildModel event: each child has %d worker "
                        "threads, which accept and serve, and a keeper "
                        "thread (MaxRequestWorkers %d is %d children)", plan,
                        conf->threads.threads_per_child,
                        conf->threads.max_workers, conf->limits.max_workers);
}

static void log_plan(server_rec *s, const bucketed_config *conf,
                     const bucket_generation *gen, int num_listeners)
{
    apr_pool_t *p = s->process->pconf;
    int b;

    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00089) "bucketed: %s",
                 kernel_features_describe(p, &conf->kernel));
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00090) "bucketed: %s",
                 describe_plan(p, conf, num_listeners));
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00091)
                                               "bucketed: steering: %s",
                 conf->steering.reason);
    if (gen->steering.failed > 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, BKLOGNO(00160)
                     "bucketed: steering in force: %s",
                     steering_in_force(p, conf->steering.mode,
                                       &gen->steering));
    }
    child_affinity_log(s, conf, gen);
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00092)
                                               "bucketed: migration: %s%s",
                 conf->migration.reason, gen->migration_prog_id
                 ? apr_psprintf(p, "; per-group eBPF program id %u on %d "
                                "reuseport group(s)", gen->migration_prog_id,
                                gen->migration_groups) : "");
    for (b = 0; b < gen->num_buckets; b++) {
        ap_listen_rec *lr;
        const char *addrs = "";

        for (lr = gen->buckets[b].listeners; lr; lr = lr->next) {
            addrs = apr_psprintf(p, "%s %pI", addrs, lr->bind_addr);
        }
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s,
                     BKLOGNO(00093) "bucketed: bucket %d:%s", b, addrs);
    }
}

/* `apache2 -t`: the plan this configuration would run, in words. */
static void bucketed_test_config(apr_pool_t *pconf, server_rec *s)
{
    /* For a socket unit's generator (dist/systemd/bucketed-socket-units):
     * the Listen addresses as systemd spells them. */
    if (ap_exists_config_define("BUCKETED_LISTEN_STREAMS")) {
        listen_activation_print_streams(pconf);
    }
    ap_log_error(APLOG_MARK, APLOG_NOTICE | APLOG_STARTUP, 0, s,
                 BKLOGNO(00094) "bucketed: version %s: %s",
                 BUCKETED_VERSION,
                 describe_plan(pconf, bucketed_get_config(s),
                               count_listeners()));
}

/* A child cleanup of pconf: it runs, with the others, in the child that
 * apr_proc_create() forks, just before exec (CGIs of mod_cgi and of
 * mod_cgid's daemon, piped loggers), and in nothing the MPM forks with
 * fork() itself. The program then starts with no signal blocked, not with
 * what the forking thread blocks: a child's leave signals while it serves,
 * the stop signals in every thread of ChildModel event. pthread_atfork()
 * could not tell those forks apart from the MPM's own, whose children
 * must start with every signal blocked. */
static apr_status_t unblock_signals_for_exec(void *data)
{
    sigset_t none;

    (void)data;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, ap_server_conf,
                     BKLOGNO(00095)
                     "bucketed: sigprocmask before exec in pid %"
                     APR_PID_T_FMT, getpid());
        return err;
    }
    return APR_SUCCESS;
}

/* mod_cgid forks its daemon from the parent (post_config, and again from
 * the parent's loop when it dies) without exec, so close-on-exec does not
 * help there: it inherits every descriptor the parent holds. The daemon
 * closes core's listeners with ap_close_listeners(), which knows nothing
 * of the MPM's, and then runs this hook, as other helper daemons do before
 * they work. Here it closes what the MPM keeps in retained data. The
 * MPM's own children run the hook as well and keep their sockets. */
static int bucketed_drop_privileges(apr_pool_t *pool, server_rec *s)
{
    bucketed_retained *retained = bucketed_get_retained();
    int closed;

    (void)pool;
    /* Passed sockets are the parent's (with -X it serves itself). */
    closed = bucketed_get_config(s)->one_process ? 0
             : listen_activation_close_kept(s);
    if (retained->server_child) {
        return DECLINED;
    }
    closed += bucket_listeners_close_for_helper(s, retained);
    ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, BKLOGNO(00096)
                                                "bucketed: closed %d "
                 "descriptor(s) of the MPM in pid %" APR_PID_T_FMT ", "
                 "a process forked for another purpose", closed, getpid());
    return DECLINED;
}

static int bucketed_open_logs(apr_pool_t *pconf, apr_pool_t *plog,
                              apr_pool_t *ptemp, server_rec *s)
{
    bucketed_config *conf = bucketed_get_config(s);
    bucketed_retained *retained = bucketed_get_retained();
    const char *err;
    int num_listeners;
    apr_status_t rv;

    (void)plog;
    (void)ptemp;
    /* Before core binds: the sockets the service manager passed. */
    notify_log_reading(s);
    listen_activation_adopt(s, retained);
    num_listeners = ap_setup_listeners(s);
    if (num_listeners < 1) {
        ap_log_error(APLOG_MARK, APLOG_ALERT | APLOG_STARTUP, 0, NULL,
                     BKLOGNO(00097)
                     "bucketed: no listening sockets available, "
                     "shutting down");
        return !OK;
    }
    err = make_plan(pconf, conf, num_listeners);
    if (err != NULL) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, 0, s,
                     BKLOGNO(00098) "bucketed: %s", err);
        return !OK;
    }
    if (retained->takeover != NULL) {
        takeover_prepare(pconf, s, retained);
    }
    if (retained->buckets == NULL) {
        retained->buckets = bucket_kept_create(s->process->pool,
                                               retained->first_server_limit);
    }
    if (bucket_listeners_open(pconf, s, conf, retained) != OK) {
        return !OK;
    }
    if (conf->child_model == CHILD_MODEL_EVENT
        && event_nudges_create(s, conf, retained) != APR_SUCCESS) {
        return !OK;
    }
    /* On pconf, not a longer-lived pool: the function lives in this DSO,
     * which a restart unloads after pconf's cleanups have run. */
    apr_pool_cleanup_register(pconf, NULL, apr_pool_cleanup_null,
                              unblock_signals_for_exec);
    rv = bucket_stats_init(pconf, s, retained);
    if (rv == APR_SUCCESS) {
        rv = bucket_queue_init(pconf, s, retained->generation);
    }
    if (rv != APR_SUCCESS) {
        return !OK;
    }
    /* The first start-up pass only checks; log what will really run. */
    if (retained->mpm->module_loads > 1) {
        log_plan(s, conf, retained->generation, num_listeners);
    }
    return OK;
}

static int bucketed_query(int query_code, int *result, apr_status_t *rv)
{
    bucketed_retained *retained = bucketed_get_retained();
    const bucketed_config *conf = ap_server_conf
        ? bucketed_get_config(ap_server_conf) : NULL;
    const process_limits *lim = conf ? &conf->limits : NULL;
    int event = conf != NULL && conf->child_model == CHILD_MODEL_EVENT;

    *rv = APR_SUCCESS;
    switch (query_code) {
    case AP_MPMQ_MAX_DAEMON_USED:
        *result = retained->max_daemons_limit;
        break;
    case AP_MPMQ_IS_THREADED:
        *result = event ? AP_MPMQ_STATIC : AP_MPMQ_NOT_SUPPORTED;
        break;
    case AP_MPMQ_IS_FORKED:
        *result = AP_MPMQ_DYNAMIC;
        break;
    case AP_MPMQ_HARD_LIMIT_DAEMONS:
        *result = retained->first_server_limit ? retained->first_server_limit
                  : lim ? lim->server_limit : DEFAULT_SERVER_LIMIT;
        break;
    case AP_MPMQ_HARD_LIMIT_THREADS:
        /* The scoreboard's threads per slot: fixed at the first start. */
        *result = retained->first_thread_limit ? retained->first_thread_limit
                  : conf ? conf->threads.thread_limit : 1;
        break;
    case AP_MPMQ_MAX_THREADS:
        *result = event ? conf->threads.threads_per_child : 1;
        break;
    case AP_MPMQ_MIN_SPARE_DAEMONS:
        *result = event ? 0 : lim ? lim->min_spare : DEFAULT_MIN_FREE_DAEMON;
        break;
    case AP_MPMQ_MAX_SPARE_DAEMONS:
        *result = event ? 0 : lim ? lim->max_spare : DEFAULT_MAX_FREE_DAEMON;
        break;
    case AP_MPMQ_MIN_SPARE_THREADS:
        *result = event ? conf->threads.min_spare_threads : 0;
        break;
    case AP_MPMQ_MAX_SPARE_THREADS:
        *result = event ? conf->threads.max_spare_threads : 0;
        break;
    case AP_MPMQ_IS_ASYNC:
        *result = event;
        break;
#ifdef AP_MPMQ_CAN_WAITIO   /* httpd 2.4.63 and later */
    case AP_MPMQ_CAN_WAITIO:
        /* CONN_STATE_ASYNC_WAITIO: event_worker.c waits without a worker */
        *result = event;
        break;
#endif
    case AP_MPMQ_HAS_SERF:
        *result = 0;
        break;
    case AP_MPMQ_MAX_REQUESTS_DAEMON:
        *result = ap_max_requests_per_child;
        break;
    case AP_MPMQ_MAX_DAEMONS:
        *result = lim ? lim->max_workers : DEFAULT_SERVER_LIMIT;
        break;
    case AP_MPMQ_MPM_STATE:
        *result = child_life_mpm_state(retained);
        break;
    case AP_MPMQ_GENERATION:
        *result = retained->mpm->my_generation;
        break;
    default:
        *rv = APR_ENOTIMPL;
        break;
    }
    return OK;
}

static apr_status_t bucketed_timed_callback(apr_time_t t,
                                            ap_mpm_callback_fn_t *fn,
                                            void *baton)
{
    return event_register_timed_callback(bucketed_get_retained(), t, fn,
                                         baton);
}

static const char *bucketed_get_name(void)
{
    return BUCKETED_MPM_NAME;
}

static void bucketed_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_pre_config(bucketed_pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_check_config(bucketed_check_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_test_config(bucketed_test_config, NULL, NULL, APR_HOOK_MIDDLE);
    /* Listeners must exist before any other module's open_logs runs. */
    ap_hook_open_logs(bucketed_open_logs, NULL, NULL, APR_HOOK_REALLY_FIRST);
    ap_hook_mpm(parent_run, NULL, NULL, APR_HOOK_MIDDLE);
    /* First: what it closes needs no privilege, and a later hook may end
     * the process. */
    ap_hook_drop_privileges(bucketed_drop_privileges, NULL, NULL,
                            APR_HOOK_REALLY_FIRST);
    ap_hook_mpm_query(bucketed_query, NULL, NULL, APR_HOOK_MIDDLE);
    child_protocols_register_hooks();
    keepalive_waiter_register();
    ap_hook_mpm_get_name(bucketed_get_name, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_mpm_register_timed_callback(bucketed_timed_callback, NULL, NULL,
                                        APR_HOOK_MIDDLE);
    bucket_report_register();
}

AP_DECLARE_MODULE(mpm_bucketed) = {
    MPM20_MODULE_STUFF,
    NULL,                           /* hook to run before apache parses args */
    NULL,                           /* create per-directory config structure */
    NULL,                           /* merge per-directory config structures */
    bucketed_create_server_config,  /* create per-server config structure */
    NULL,                           /* merge per-server config structures */
    bucketed_cmds,                  /* command apr_table_t */
    bucketed_register_hooks,        /* register hooks */
    AP_MODULE_FLAG_NONE             /* flags */
};
