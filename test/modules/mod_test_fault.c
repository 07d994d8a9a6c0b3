/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mod_test_fault.c: faults on demand, for the tests and the benchmark's
 * faults workload. Test use only.
 *
 *   SetHandler test-crash    the child serving the request dies of
 *                            SIGSEGV, as with a module that crashes on
 *                            some requests
 *   SetHandler test-suspend  the request is suspended (SUSPENDED) and a
 *                            timed callback answers it ?MS milliseconds
 *                            later (200 by default): "resumed after N
 *                            ms"; "not suspended: STATUS" where the MPM
 *                            runs no timed callbacks
 *   ServerRoot/crash-at-exit while this file exists when a child starts,
 *                            that child dies of SIGSEGV as it exits (a
 *                            module whose cleanup crashes, as mod_perl's
 *                            does in httpd's own test suite)
 *   ServerRoot/sick-children while this file exists, a starting child
 *                            exits APEXIT_CHILDSICK (a resource shortage,
 *                            in httpd's contract), so tests can watch how
 *                            the MPM slows its spawning
 *   ServerRoot/slow-start    while this file exists, a starting child
 *                            waits the milliseconds it names before it
 *                            serves, as one whose module opens a database
 *                            pool or loads a cache does
 *   ServerRoot/clog-port     connections to the port this file names get a
 *                            clogging input filter: it pulls whatever the
 *                            socket has into a brigade of its own and
 *                            hands it on as asked, so input waits where
 *                            no poller sees it (c->clogging_input_filters)
 *   ServerRoot/waitio-port   connections to the port this file names speak
 *                            a one-line echo protocol through the async
 *                            API: while nothing has arrived the hook
 *                            returns CONN_STATE_ASYNC_WAITIO (the MPM
 *                            waits for input without a thread and calls
 *                            it again), then answers "waited N: LINE"
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apr_file_io.h"
#include "apr_strings.h"

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_connection.h"
#include "http_core.h"
#include "http_protocol.h"
#include "http_request.h"
#include "mpm_common.h"

static int test_fault_handler(request_rec *r)
{
    if (r->handler == NULL || strcmp(r->handler, "test-crash") != 0) {
        return DECLINED;
    }
    ap_log_rerror(APLOG_MARK, APLOG_NOTICE, 0, r, "test_fault: child %"
                  APR_PID_T_FMT " crashes on purpose", getpid());
    raise(SIGSEGV);
    return HTTP_INTERNAL_SERVER_ERROR;
}

typedef struct {
    request_rec *r;
    apr_time_t since;
} suspended_request;

/* The timed callback: answer, and hand the connection back. */
static void finish_suspended(void *baton)
{
    suspended_request *sr = baton;
    request_rec *r = sr->r;

    apr_thread_mutex_lock(r->invoke_mtx);
    ap_rprintf(r, "resumed after %" APR_TIME_T_FMT " ms\n",
               apr_time_as_msec(apr_time_now() - sr->since));
    apr_thread_mutex_unlock(r->invoke_mtx);
    ap_finalize_request_protocol(r);
    ap_process_request_after_handler(r);
}

static int test_suspend_handler(request_rec *r)
{
    suspended_request *sr;
    apr_int64_t ms = r->args != NULL ? apr_atoi64(r->args) : 200;
    apr_status_t rv;

    if (r->handler == NULL || strcmp(r->handler, "test-suspend") != 0) {
        return DECLINED;
    }
    ap_set_content_type(r, "text/plain");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "test_fault: request "
                  "suspended for %" APR_INT64_T_FMT " ms", ms);
    sr = apr_palloc(r->pool, sizeof(*sr));
    sr->r = r;
    sr->since = apr_time_now();
    rv = ap_mpm_register_timed_callback(apr_time_from_msec(ms),
                                        finish_suspended, sr);
    if (rv != APR_SUCCESS) {
        ap_rprintf(r, "not suspended: %d\n", rv);
        return OK;
    }
    return SUSPENDED;
}

static apr_status_t crash_now(void *data)
{
    (void)data;
    raise(SIGSEGV);
    return APR_SUCCESS;
}

/* The ports of ServerRoot/waitio-port and clog-port, read at child start;
 * 0 = none. */
static apr_port_t waitio_port;
static apr_port_t clog_port;

/* The number a ServerRoot file holds; 0 when there is none. */
static int read_number_file(apr_pool_t *p, const char *name)
{
    const char *path = ap_server_root_relative(p, name);
    char buf[16];
    apr_file_t *f;
    apr_size_t len = sizeof(buf) - 1;
    int number = 0;

    if (path == NULL
        || apr_file_open(&f, path, APR_FOPEN_READ, 0, p) != APR_SUCCESS) {
        return 0;
    }
    if (apr_file_read(f, buf, &len) == APR_SUCCESS) {
        buf[len] = '\0';
        number = atoi(buf);
    }
    apr_file_close(f);
    return number;
}

/* The echo protocol: one line, answered once it has come, the waits for
 * it spent in the MPM (CONN_STATE_ASYNC_WAITIO) rather than a thread. */
static int test_fault_waitio(conn_rec *c)
{
    apr_socket_t *sock = ap_get_conn_socket(c);
    const char *waits_note;
    char line[256], *reply;
    apr_size_t len = sizeof(line) - 1;
    apr_status_t rv;
    int waits;

    if (waitio_port == 0 || c->local_addr->port != waitio_port
        || c->cs == NULL) {
        return DECLINED;
    }
    waits_note = apr_table_get(c->notes, "test-fault-waits");
    waits = waits_note ? atoi(waits_note) : 0;
    apr_socket_timeout_set(sock, 0);
    rv = apr_socket_recv(sock, line, &len);
#ifdef AP_MPMQ_CAN_WAITIO   /* httpd 2.4.63 and later */
    if (APR_STATUS_IS_EAGAIN(rv)) {
        apr_table_setn(c->notes, "test-fault-waits",
                       apr_itoa(c->pool, waits + 1));
        c->cs->state = CONN_STATE_ASYNC_WAITIO;
        c->cs->sense = CONN_SENSE_WANT_READ;
        return OK;
    }
#endif
    if (rv == APR_SUCCESS) {
        line[len] = '\0';
        reply = apr_psprintf(c->pool, "waited %d: %s", waits, line);
        len = strlen(reply);
        apr_socket_timeout_set(sock, apr_time_from_sec(5));
        apr_socket_send(sock, reply, &len);
    }
    c->cs->state = CONN_STATE_LINGER;
    return OK;
}

/* The clogging filter's input, read ahead of what was asked for. */
#define CLOG_READ_AHEAD 65536

static apr_status_t clog_filter(ap_filter_t *f, apr_bucket_brigade *bb,
                                ap_input_mode_t mode, apr_read_type_e block,
                                apr_off_t readbytes)
{
    apr_bucket_brigade *held = f->ctx;
    apr_bucket *e, *end;
    apr_status_t rv;

    if (mode == AP_MODE_INIT) {
        return ap_get_brigade(f->next, bb, mode, block, readbytes);
    }
    /* What splitting lines left of a bucket it read to the end. */
    while (!APR_BRIGADE_EMPTY(held)
           && (e = APR_BRIGADE_FIRST(held))->length == 0
           && !APR_BUCKET_IS_METADATA(e)) {
        apr_bucket_delete(e);
    }
    if (APR_BRIGADE_EMPTY(held)) {
        rv = ap_get_brigade(f->next, held, AP_MODE_READBYTES, block,
                            CLOG_READ_AHEAD);
        if (rv != APR_SUCCESS) {
            return rv;
        }
        /* Nothing yet: say so, as the core's filter would. */
        if (APR_BRIGADE_EMPTY(held) && block == APR_NONBLOCK_READ) {
            return APR_EAGAIN;
        }
    }
    switch (mode) {
    case AP_MODE_GETLINE:
        return apr_brigade_split_line(bb, held, block, HUGE_STRING_LEN);
    case AP_MODE_EXHAUSTIVE:
        APR_BRIGADE_CONCAT(bb, held);
        return APR_SUCCESS;
    case AP_MODE_EATCRLF:
        return APR_SUCCESS;
    default:
        break;
    }
    /* READBYTES moves the first readbytes, SPECULATIVE copies them. */
    rv = apr_brigade_partition(held, readbytes, &end);
    if (rv != APR_SUCCESS && rv != APR_INCOMPLETE) {
        return rv;
    }
    while ((e = APR_BRIGADE_FIRST(held)) != end) {
        if (mode == AP_MODE_SPECULATIVE) {
            apr_bucket *copy;

            for (; e != end; e = APR_BUCKET_NEXT(e)) {
                rv = apr_bucket_copy(e, &copy);
                if (rv != APR_SUCCESS) {
                    return rv;
                }
                APR_BRIGADE_INSERT_TAIL(bb, copy);
            }
            break;
        }
        APR_BUCKET_REMOVE(e);
        APR_BRIGADE_INSERT_TAIL(bb, e);
    }
    return APR_SUCCESS;
}

static int test_fault_pre_connection(conn_rec *c, void *csd)
{
    (void)csd;
    if (clog_port == 0 || c->local_addr->port != clog_port) {
        return DECLINED;
    }
    ap_add_input_filter("TEST_CLOG",
                        apr_brigade_create(c->pool, c->bucket_alloc), NULL,
                        c);
    c->clogging_input_filters = 1;
    return OK;
}

static int flag_exists(apr_pool_t *p, const char *name)
{
    const char *flag = ap_server_root_relative(p, name);

    return flag != NULL && access(flag, F_OK) == 0;
}

static void test_fault_child_init(apr_pool_t *pchild, server_rec *s)
{
    int slow_start_ms;

    if (flag_exists(pchild, "sick-children")) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "test_fault: child %"
                     APR_PID_T_FMT " exits sick on purpose", getpid());
        exit(APEXIT_CHILDSICK);
    }
    slow_start_ms = read_number_file(pchild, "slow-start");
    if (slow_start_ms > 0) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "test_fault: child %"
                     APR_PID_T_FMT " takes %d ms to start", getpid(),
                     slow_start_ms);
        apr_sleep(apr_time_from_msec(slow_start_ms));
    }
    waitio_port = (apr_port_t)read_number_file(pchild, "waitio-port");
    clog_port = (apr_port_t)read_number_file(pchild, "clog-port");
    if (flag_exists(pchild, "crash-at-exit")) {
        apr_pool_cleanup_register(pchild, NULL, crash_now,
                                  apr_pool_cleanup_null);
    }
}

static void test_fault_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_handler(test_fault_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_handler(test_suspend_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(test_fault_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_process_connection(test_fault_waitio, NULL, NULL,
                               APR_HOOK_REALLY_FIRST);
    ap_hook_pre_connection(test_fault_pre_connection, NULL, NULL,
                           APR_HOOK_MIDDLE);
    ap_register_input_filter("TEST_CLOG", clog_filter, NULL,
                             AP_FTYPE_CONNECTION);
}

AP_DECLARE_MODULE(test_fault) = {
    STANDARD20_MODULE_STUFF,
    NULL,                       /* create per-directory config */
    NULL,                       /* merge per-directory config */
    NULL,                       /* create per-server config */
    NULL,                       /* merge per-server config */
    NULL,                       /* commands */
    test_fault_register_hooks,  /* register hooks */
    AP_MODULE_FLAG_NONE         /* flags */
};
