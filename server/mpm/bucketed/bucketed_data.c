/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucketed_data.c: the MPM's configuration and its retained data (which
 * survives the module's unload and reload at every restart), for every
 * file; it calls none of them.
 *
 * The retained data is found through a header whose layout never
 * changes: which layout of bucketed_retained the running server keeps,
 * and what any build needs to go on without it (the scoreboard's size,
 * fixed at the first start). A graceful restart onto a build with another
 * layout (policy_upgrade.h) starts a new bucketed_retained from the header
 * and leaves the old one unread; parent_takeover.c then deals with what
 * the old build left running.
 */
#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_main.h"

#include "apr_strings.h"

#include "bucketed.h"
#include "policy_upgrade.h"

APLOG_USE_MODULE(mpm_bucketed);

#define STATE_HEADER_KEY "mpm_bucketed_state"
/* What builds before the header kept their state under. */
#define UNVERSIONED_KEY "mpm_bucketed_retained"
#define STATE_MAGIC 0x424b5354u      /* "BKST" */

/* Frozen: every build, past and future, reads it as this. */
typedef struct {
    apr_uint32_t magic;
    apr_uint32_t layout;             /* of *state */
    apr_size_t size;                 /* sizeof(*state) */
    int first_server_limit;          /* the scoreboard's size */
    int first_thread_limit;
    void *state;
} state_header;

/* How builds before the header began their state: all that is read of
 * it. */
typedef struct {
    void *mpm;
    int first_server_limit;
    int first_thread_limit;
} unversioned_prefix;

bucketed_config *bucketed_get_config(server_rec *s)
{
    return ap_get_module_config(s->module_config, &mpm_bucketed_module);
}

/* The sizes another build's state leaves to this one. */
static void inherit_limits(bucketed_retained *retained,
                           const state_header *header,
                           const unversioned_prefix *unversioned)
{
    if (header != NULL) {
        retained->first_server_limit = header->first_server_limit;
        retained->first_thread_limit = header->first_thread_limit;
    }
    else if (unversioned != NULL) {
        retained->first_server_limit = unversioned->first_server_limit;
        retained->first_thread_limit = unversioned->first_thread_limit;
    }
}

static bucketed_retained *create_state(state_header *header)
{
    /* Under a key of this layout's own, so that a build of another layout
     * never finds it by its key either. */
    const char *key = apr_psprintf(ap_pglobal, STATE_HEADER_KEY "/%u",
                                   (unsigned)BUCKETED_RETAINED_LAYOUT);
    bucketed_retained *retained = ap_retained_data_create(key,
                                                          sizeof(*retained));

    retained->mpm = ap_unixd_mpm_get_retained_data();
    retained->mpm->baton = retained;
    header->magic = STATE_MAGIC;
    header->layout = BUCKETED_RETAINED_LAYOUT;
    header->size = sizeof(*retained);
    header->state = retained;
    return retained;
}

bucketed_retained *bucketed_get_retained(void)
{
    state_header *header = ap_retained_data_get(STATE_HEADER_KEY);
    unversioned_prefix *unversioned;
    bucketed_retained *retained;
    state_seen seen = { 0 };
    state_verdict_e verdict;
    const char *why;

    if (header != NULL && header->magic == STATE_MAGIC
        && header->layout == BUCKETED_RETAINED_LAYOUT
        && header->size == sizeof(bucketed_retained)) {
        return header->state;
    }
    unversioned = ap_retained_data_get(UNVERSIONED_KEY);
    if (header != NULL) {
        seen.header_found = 1;
        seen.magic = header->magic;
        seen.layout = header->layout;
        seen.size = header->size;
    }
    seen.unversioned_found = unversioned != NULL;
    verdict = state_compare(ap_pglobal, &seen, STATE_MAGIC,
                            BUCKETED_RETAINED_LAYOUT,
                            sizeof(bucketed_retained), &why);
    if (header == NULL) {
        header = ap_retained_data_create(STATE_HEADER_KEY, sizeof(*header));
    }
    retained = create_state(header);
    if (verdict == STATE_FIRST_START) {
        retained->mpm->mpm_state = AP_MPMQ_STARTING;
        return retained;
    }
    /* A graceful restart onto this build, from one whose state it cannot
     * read: start over, keeping the scoreboard's size; the parent takes
     * over what the old build left running. */
    inherit_limits(retained, seen.header_found ? header : NULL,
                   seen.header_found ? NULL : unversioned);
    header->first_server_limit = retained->first_server_limit;
    header->first_thread_limit = retained->first_thread_limit;
    retained->takeover = why;
    return retained;
}

void bucketed_note_limits(bucketed_retained *retained)
{
    state_header *header = ap_retained_data_get(STATE_HEADER_KEY);

    header->first_server_limit = retained->first_server_limit;
    header->first_thread_limit = retained->first_thread_limit;
}

int bucketed_config_warning_flags(const bucketed_retained *retained)
{
    if (retained->mpm->module_loads == 2) {
        return -1;
    }
    return retained->mpm->module_loads == 1 ? APLOG_STARTUP : 0;
}
