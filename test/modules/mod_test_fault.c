/*
 * mod_test_fault.c: faults on demand, for the tests and the benchmark's
 * faults workload. Test use only.
 *
 *   SetHandler test-crash    the child serving the request dies of
 *                            SIGSEGV, as with a module that crashes on
 *                            some requests
 *   ServerRoot/crash-at-exit while this file exists when a child starts,
 *                            that child dies of SIGSEGV as it exits (a
 *                            module whose cleanup crashes, as mod_perl's
 *                            does in httpd's own test suite)
 *   ServerRoot/sick-children while this file exists, a starting child
 *                            exits APEXIT_CHILDSICK (a resource shortage,
 *                            in httpd's contract), so tests can watch how
 *                            the MPM slows its spawning
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_protocol.h"
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

static apr_status_t crash_now(void *data)
{
    (void)data;
    raise(SIGSEGV);
    return APR_SUCCESS;
}

static int flag_exists(apr_pool_t *p, const char *name)
{
    const char *flag = ap_server_root_relative(p, name);

    return flag != NULL && access(flag, F_OK) == 0;
}

static void test_fault_child_init(apr_pool_t *pchild, server_rec *s)
{
    if (flag_exists(pchild, "sick-children")) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "test_fault: child %"
                     APR_PID_T_FMT " exits sick on purpose", getpid());
        exit(APEXIT_CHILDSICK);
    }
    if (flag_exists(pchild, "crash-at-exit")) {
        apr_pool_cleanup_register(pchild, NULL, crash_now,
                                  apr_pool_cleanup_null);
    }
}

static void test_fault_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_handler(test_fault_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(test_fault_child_init, NULL, NULL, APR_HOOK_MIDDLE);
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
