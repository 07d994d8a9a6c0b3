/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_upgrade.c: see policy_upgrade.h.
 */
#include "policy_upgrade.h"

#include "apr_strings.h"

state_verdict_e state_compare(apr_pool_t *p, const state_seen *seen,
                              apr_uint32_t magic, apr_uint32_t my_layout,
                              apr_size_t my_size, const char **why)
{
    *why = NULL;
    if (seen->header_found && seen->magic == magic
        && seen->layout == my_layout && seen->size == my_size) {
        return STATE_SAME_LAYOUT;
    }
    if (seen->header_found && seen->magic == magic) {
        *why = apr_psprintf(p, "the running server's state has layout %u "
                            "(%" APR_SIZE_T_FMT " bytes), this build's "
                            "layout %u (%" APR_SIZE_T_FMT " bytes)",
                            seen->layout, seen->size, my_layout, my_size);
        return STATE_OTHER_LAYOUT;
    }
    if (seen->header_found) {
        /* Nothing but bucketed writes under its key; say so if it did. */
        *why = apr_psprintf(p, "the running server's state header is not "
                            "bucketed's (magic %08x)", seen->magic);
        return STATE_OTHER_LAYOUT;
    }
    if (seen->unversioned_found) {
        *why = "the running server's state was written by a build from "
               "before state layouts were named";
        return STATE_UNVERSIONED;
    }
    return STATE_FIRST_START;
}
