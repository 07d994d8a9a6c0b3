/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_protocols: the protocols a child model negotiates. The prefork
 * model offers no HTTP/2, as mod_http2 does under stock prefork
 * (child_model_serves_protocol in policy_event.h says which).
 */
#ifndef CHILD_PROTOCOLS_H
#define CHILD_PROTOCOLS_H

#include "httpd.h"

#include "bucketed.h"

/* check_config: warns once (BK00205) when mod_http2 is loaded and a
 * Protocols directive names a protocol the model does not serve. */
void child_protocols_check(apr_pool_t *ptemp, server_rec *main_s,
                           bucketed_retained *retained, child_model_e model);

/* Registers the protocol_propose hook that takes back what the child
 * model does not serve. */
void child_protocols_register_hooks(void);

#endif
