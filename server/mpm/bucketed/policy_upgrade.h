/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_upgrade: whether this build of the MPM can take over the state a
 * running server kept across a graceful restart (bucketed_data.c). A
 * graceful restart unloads the module and loads the file at the same
 * path, which may be another build (a package upgrade): the state it finds
 * was written by the old one. Each build names its layout of that state;
 * a build that finds another layout, or the state of a build from before
 * layouts were named, does not read it, and starts over from what a
 * frozen header and httpd itself keep (parent_takeover.c). Pure.
 */
#ifndef POLICY_UPGRADE_H
#define POLICY_UPGRADE_H

#include "apr.h"
#include "apr_pools.h"

typedef enum {
    STATE_FIRST_START,   /* nothing kept: the server starts */
    STATE_SAME_LAYOUT,   /* kept by a build with this layout: take it */
    STATE_OTHER_LAYOUT,  /* kept by a build with another layout */
    STATE_UNVERSIONED    /* kept by a build from before layouts were named */
} state_verdict_e;

/* What a build finds in httpd's retained data. */
typedef struct {
    int header_found;        /* the frozen header's key exists */
    apr_uint32_t magic;      /* its fields, when found */
    apr_uint32_t layout;
    apr_size_t size;
    int unversioned_found;   /* the key builds before layouts used */
} state_seen;

/* The verdict for a build of layout my_layout whose state is my_size
 * bytes; *why: a sentence for the log when it is not a plain start or a
 * plain take-over, else NULL. */
state_verdict_e state_compare(apr_pool_t *p, const state_seen *seen,
                              apr_uint32_t magic, apr_uint32_t my_layout,
                              apr_size_t my_size, const char **why);

#endif /* POLICY_UPGRADE_H */
