/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_life.c: what every child does, in both child models, in the order
 * httpd's modules expect it (child_life.h). The model's set-up runs as
 * root, before the identity change, so that what it opens (epoll, eventfds,
 * locks) fails the same way as the rest of the set-up: a shortage exits
 * sick and the parent backs off; anything else is fatal.
 */
#include "child_life.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_main.h"
#include "http_protocol.h"
#include "mpm_common.h"
#include "scoreboard.h"

#include "policy_exit.h"
#include "child_affinity.h"
#include "listen_sockets.h"
#include "listen_absence.h"
#include "listen_steering.h"
#include "stats.h"

APLOG_USE_MODULE(mpm_bucketed);

void child_signal_set(sigset_t *set, int stop)
{
    sigemptyset(set);
    sigaddset(set, AP_SIG_GRACEFUL);
    sigaddset(set, AP_SIG_GRACEFUL_STOP);
    sigaddset(set, SIGINT);
    if (stop) {
        sigaddset(set, SIGTERM);
        sigaddset(set, SIGHUP);
    }
}

void child_signal_mask(const sigset_t *set)
{
    if (sigprocmask(SIG_SETMASK, set, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ap_server_conf,
                     BKLOGNO(00014) "bucketed: sigprocmask in child");
    }
}

void child_signal_handle(int sig, void (*handler)(int), const sigset_t *mask,
                         int flags)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sa.sa_mask = *mask;
    sa.sa_flags = flags;
    if (sigaction(sig, &sa, NULL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, ap_server_conf,
                     BKLOGNO(00121) "bucketed: sigaction(%d) in child", sig);
    }
}

int child_setup_exit_code(server_rec *s, int bucket, apr_status_t rv)
{
    if (child_setup_failure_passes(rv)) {
        ap_log_error(APLOG_MARK, APLOG_ERR, rv, s, BKLOGNO(00015)
                                                   "bucketed: a new child of "
                     "bucket %d could not set up (the error above); it exits "
                     "sick, and the parent starts the bucket's next child "
                     "when the shortage may have passed", bucket);
        return APEXIT_CHILDSICK;
    }
    return APEXIT_CHILDFATAL;
}

apr_status_t child_pool_with_allocator(apr_pool_t **p, apr_pool_t *parent,
                                       const char *tag)
{
    apr_allocator_t *allocator;
    apr_status_t rv;

    rv = apr_allocator_create(&allocator);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    apr_allocator_max_free_set(allocator, ap_max_mem_free);
    rv = apr_pool_create_ex(p, parent, NULL, allocator);
    if (rv != APR_SUCCESS) {
        apr_allocator_destroy(allocator);
        return rv;
    }
    apr_allocator_owner_set(allocator, *p);
    apr_pool_tag(*p, tag);
    return APR_SUCCESS;
}

/* Whether http_core is asking right after a response on life->serving
 * that promised keep-alive (it marks the worker SERVER_BUSY_KEEPALIVE
 * only then, and asks before it waits for the next request). HTTP/2
 * marks idle sessions so too, but a stopping child's GOAWAY lets its
 * client retry what was not processed: it is told at once. */
static int keepalive_promised(const child_life *life)
{
    conn_rec *c = life->serving;

    return c != NULL && c->keepalive == AP_CONN_KEEPALIVE && !c->aborted
           && ap_get_scoreboard_worker_from_indexes(life->slot, 0)->status
              == SERVER_BUSY_KEEPALIVE
           && strcmp(ap_get_protocol(c), AP_PROTOCOL_HTTP1) == 0;
}

/* Whether the child has been asked to leave. A prefork-model child keeps
 * the leave signal blocked while it serves a connection, so its flag is
 * not set then; the parent marks the slot quiescing when it asks (read,
 * never trusted: a child can only make itself close its own connections
 * early). An event child's main thread sets the flag at once, and its
 * keeper writes the mark: its workers go by the flag. */
static int asked_to_leave(child_life *life)
{
    return CHILD_LIFE_IS(life, leaving)
           || (life->serving != NULL
               && ap_get_scoreboard_process(life->slot)->quiescing);
}

int child_life_mpm_state(const bucketed_retained *retained)
{
    child_life *life = retained->child_life;

    if (life != NULL
        && (CHILD_LIFE_IS(life, dying)
            || ((asked_to_leave(life) || bucket_stats_closing(retained))
                && !keepalive_promised(life)))) {
        return AP_MPMQ_STOPPING;
    }
    return retained->mpm->mpm_state;
}

void child_life_exit(child_life *life, int code, int clean)
{
    CHILD_LIFE_SET(life, exiting);
    life->retained->mpm->mpm_state = AP_MPMQ_STOPPING;
    if (life->pchild != NULL) {
        ap_run_child_stopping(life->pchild, !CHILD_LIFE_IS(life, dying));
        if (!clean) {
            _exit(code);
        }
        apr_pool_destroy(life->pchild);
    }
    exit(code);
}

int child_life_slot_quiescing(const child_life *life)
{
    return ap_get_scoreboard_process(life->slot)->quiescing;
}

/* A parent that dies without stopping its children (killed, crashed)
 * must not leave them serving an orphaned configuration: on Linux they
 * are asked to leave when it goes. After the identity change, which
 * clears the parent-death signal. */
static void leave_with_parent(child_life *life, pid_t parent)
{
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, AP_SIG_GRACEFUL) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, life->s,
                     BKLOGNO(00016) "bucketed: prctl(PR_SET_PDEATHSIG)");
    }
#endif
    if (getppid() != parent) {
        CHILD_LIFE_SET(life, leaving);
    }
}

void child_life_run(const child_model *model, server_rec *s,
                    bucketed_config *conf, bucketed_retained *retained,
                    int slot, int bucket, pid_t parent)
{
    child_life life;
    apr_status_t rv;
    int code, clean = 1;

    memset(&life, 0, sizeof(life));
    life.s = s;
    life.conf = conf;
    life.retained = retained;
    life.slot = slot;
    life.bucket = bucket;
    /* Signals come before the child's pool: the process pool, which this
     * process alone uses from now on, holds the model's context. */
    life.model = apr_pcalloc(s->process->pool, model->context_size);
    model->take_signals(&life);
    retained->mpm->mpm_state = AP_MPMQ_STARTING;
    retained->child_life = &life;

    rv = child_pool_with_allocator(&life.pchild, s->process->pconf, "pchild");
    if (rv != APR_SUCCESS) {
        life.pchild = NULL;
        ap_log_error(APLOG_MARK, APLOG_EMERG, rv, s,
                     BKLOGNO(00017)
                     "bucketed: cannot create the child's pool");
        child_life_exit(&life, APEXIT_CHILDSICK, 1);
    }
    ap_fatal_signal_child_setup(s);
    bucket_listeners_keep_only(retained, bucket);
    bucket_listeners_child_close_maps(retained);
    child_affinity_apply(s, conf, retained->generation, bucket);
    rv = model->set_up(&life);
    if (rv != APR_SUCCESS) {
        child_life_exit(&life, child_setup_exit_code(s, bucket, rv), 1);
    }
    if (ap_run_drop_privileges(life.pchild, s)) {
        child_life_exit(&life, APEXIT_CHILDFATAL, 1);
    }
    if (parent != 0) {
        leave_with_parent(&life, parent);
    }
    ap_run_child_init(life.pchild, s);
    /* Last: a child that fails before this puts no socket of a bucket
     * out of its groups back for connections to wait on. */
    if (bucket_listeners_listen_again(s, conf, retained, bucket) != 0) {
        child_life_exit(&life, APEXIT_CHILDSICK, 1);
    }
    /* Before the model serves: modules ask for the state (ap_mpm_query)
     * while serving. */
    retained->mpm->mpm_state = AP_MPMQ_RUNNING;
    code = model->serve(&life, &clean);
    child_life_exit(&life, code, clean);
}
