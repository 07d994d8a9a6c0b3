/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_protocols.c: the protocols a child model negotiates (HTTP/2 under
 * the prefork model: docs/design.md, "HTTP/2 under the prefork model").
 */
#include "httpd.h"
#include "apr_strings.h"

#include "http_config.h"
#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "http_protocol.h"

#include "bucketed_log.h"
#include "child_protocols.h"

/* HTTP/2 under the prefork model: what mod_http2 does under stock prefork,
 * where it proposes neither h2 (TLS ALPN) nor h2c (Upgrade) and says so
 * once at start-up; see child_model_serves_protocol. The check runs after
 * the virtual hosts' Protocols are merged, so `-t` shows the warning. */
void child_protocols_check(apr_pool_t *ptemp, server_rec *main_s,
                           bucketed_retained *retained, child_model_e model)
{
    apr_array_header_t *unserved = apr_array_make(ptemp, 2,
                                                  sizeof(const char *));
    server_rec *s;
    int i, flags;

    if (ap_find_linked_module("mod_http2.c") == NULL) {
        return;
    }
    for (s = main_s; s != NULL; s = s->next) {
        core_server_config *core = ap_get_core_module_config(s->module_config);

        for (i = 0; core->protocols != NULL && i < core->protocols->nelts;
             i++) {
            const char *name = APR_ARRAY_IDX(core->protocols, i,
                                             const char *);

            if (!child_model_serves_protocol(model, name)
                && !ap_array_str_contains(unserved, name)) {
                APR_ARRAY_PUSH(unserved, const char *) = name;
            }
        }
    }
    flags = bucketed_config_warning_flags(retained);
    if (unserved->nelts > 0 && flags >= 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | flags, 0, main_s,
                     BKLOGNO(00205)
                     "bucketed: ChildModel %s does not offer HTTP/2 (%s in "
                     "Protocols): clients that negotiate get HTTP/1.1, as "
                     "with stock prefork, where mod_http2 declines because "
                     "it runs streams on threads and this model hosts "
                     "modules that are not thread-safe, such as mod_php; "
                     "ChildModel event serves HTTP/2",
                     child_model_name(model),
                     apr_array_pstrcat(ptemp, unserved, ' '));
    }
}

/* Takes back what this child model does not serve from what other modules
 * proposed (mod_http2's h2 and h2c): the last to run. */
static int propose_served(conn_rec *c, request_rec *r, server_rec *s,
                          const apr_array_header_t *offers,
                          apr_array_header_t *proposals)
{
    child_model_e model = bucketed_get_config(ap_server_conf)->child_model;
    int i, kept = 0;

    (void)c;
    (void)r;
    (void)s;
    (void)offers;
    for (i = 0; i < proposals->nelts; i++) {
        const char *name = APR_ARRAY_IDX(proposals, i, const char *);

        if (child_model_serves_protocol(model, name)) {
            APR_ARRAY_IDX(proposals, kept++, const char *) = name;
        }
    }
    proposals->nelts = kept;
    return DECLINED;
}

void child_protocols_register_hooks(void)
{
    ap_hook_protocol_propose(propose_served, NULL, NULL, APR_HOOK_REALLY_LAST);
}
