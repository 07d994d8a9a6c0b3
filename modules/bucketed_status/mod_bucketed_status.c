/*
 * mod_bucketed_status: a plain-text page of the bucketed MPM's listener
 * buckets, one line per bucket, for operators, tests and the benchmark
 * harness:
 *
 *   <Location /bucketed-status>
 *       SetHandler bucketed-status
 *   </Location>
 *
 * Under any other MPM the page says the MPM is not bucketed (404).
 */
#include "apr_optional.h"

#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "ap_mpm.h"

#include "bucketed_status.h"

#define HANDLER_NAME "bucketed-status"

static APR_OPTIONAL_FN_TYPE(bucketed_get_status) *get_status;

static int bucketed_status_handler(request_rec *r)
{
    const bucketed_status *st;
    int b;

    if (strcmp(r->handler, HANDLER_NAME) != 0) {
        return DECLINED;
    }
    if (r->method_number != M_GET) {
        return HTTP_METHOD_NOT_ALLOWED;
    }
    if (get_status == NULL) {
        return HTTP_NOT_FOUND;
    }
    st = get_status(r->pool);
    ap_set_content_type(r, "text/plain; charset=ISO-8859-1");
    if (r->header_only) {
        return OK;
    }
    ap_rprintf(r, "mpm=%s\n", ap_show_mpm());
    ap_rprintf(r, "strategy=%s\n", st->strategy);
    ap_rprintf(r, "reason=%s\n", st->reason);
    ap_rprintf(r, "kernel=%s\n", st->kernel);
    ap_rprintf(r, "generation=%d\n", st->generation);
    ap_rprintf(r, "buckets=%d\n", st->num_buckets);
    for (b = 0; b < st->num_buckets; b++) {
        const bucketed_bucket_status *bs = &st->buckets[b];
        ap_rprintf(r, "bucket=%d sockets=%d listen=%s children=%d idle=%d "
                   "busy=%d accepted=%u\n", b, bs->sockets, bs->listen,
                   bs->children, bs->idle, bs->busy, bs->accepted);
    }
    return OK;
}

static int bucketed_status_post_config(apr_pool_t *pconf, apr_pool_t *plog,
                                       apr_pool_t *ptemp, server_rec *s)
{
    (void)pconf;
    (void)plog;
    (void)ptemp;
    (void)s;
    get_status = APR_RETRIEVE_OPTIONAL_FN(bucketed_get_status);
    return OK;
}

static void bucketed_status_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_handler(bucketed_status_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(bucketed_status_post_config, NULL, NULL,
                        APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(bucketed_status) = {
    STANDARD20_MODULE_STUFF,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    bucketed_status_register_hooks,
    AP_MODULE_FLAG_NONE
};
