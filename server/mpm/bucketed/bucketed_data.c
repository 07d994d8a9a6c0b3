/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucketed_data.c: the MPM's configuration and its retained data (which
 * survives the module's unload and reload at every restart), for every
 * file; it calls none of them.
 */
#include "httpd.h"
#include "http_config.h"

#include "bucketed.h"

#define RETAINED_KEY "mpm_bucketed_retained"

bucketed_config *bucketed_get_config(server_rec *s)
{
    return ap_get_module_config(s->module_config, &mpm_bucketed_module);
}

bucketed_retained *bucketed_get_retained(void)
{
    bucketed_retained *retained = ap_retained_data_get(RETAINED_KEY);

    if (retained == NULL) {
        retained = ap_retained_data_create(RETAINED_KEY, sizeof(*retained));
        retained->mpm = ap_unixd_mpm_get_retained_data();
        retained->mpm->baton = retained;
        retained->mpm->mpm_state = AP_MPMQ_STARTING;
    }
    return retained;
}
