/*
 * mod_test_sick.c: a test module whose children exit APEXIT_CHILDSICK
 * (a resource shortage, in httpd's contract) while the file
 * "sick-children" exists in the ServerRoot, so tests can watch how the
 * MPM slows its spawning. Test use only.
 */
#include <stdlib.h>
#include <unistd.h>

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "mpm_common.h"

static void test_sick_child_init(apr_pool_t *p, server_rec *s)
{
    const char *flag = ap_server_root_relative(p, "sick-children");

    if (flag != NULL && access(flag, F_OK) == 0) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "test_sick: child %"
                     APR_PID_T_FMT " exits sick on purpose", getpid());
        exit(APEXIT_CHILDSICK);
    }
}

static void test_sick_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_child_init(test_sick_child_init, NULL, NULL, APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(test_sick) = {
    STANDARD20_MODULE_STUFF,
    NULL,                       /* create per-directory config */
    NULL,                       /* merge per-directory config */
    NULL,                       /* create per-server config */
    NULL,                       /* merge per-server config */
    NULL,                       /* commands */
    test_sick_register_hooks,   /* register hooks */
    AP_MODULE_FLAG_NONE         /* flags */
};
