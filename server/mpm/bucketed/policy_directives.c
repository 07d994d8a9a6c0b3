/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_directives.c: value parsing for bucketed's directives. atoi() is
 * what lets stock httpd take "MaxRequestWorkers 1O0" as 1; every value
 * here is parsed strictly instead.
 */
#include "policy_directives.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <strings.h>

#include "apr_lib.h"
#include "apr_strings.h"

const char *directive_parse_int(apr_pool_t *p, const char *directive,
                                const char *arg, int min, int max, int *out)
{
    const char *c;
    char *end;
    long value;

    for (c = arg; *c; c++) {
        if (!apr_isdigit(*c) && !(c == arg && *c == '-')) {
            break;
        }
    }
    errno = 0;
    value = strtol(arg, &end, 10);
    if (*arg == '\0' || *c != '\0' || *end != '\0' || errno == ERANGE
        || value < min || value > max) {
        return apr_psprintf(p, "%s must be a whole number from %d to %d, "
                            "not '%s'", directive, min, max, arg);
    }
    *out = (int)value;
    return NULL;
}

const char *directive_parse_auto_int(apr_pool_t *p, const char *directive,
                                     const char *arg, int max, int *out)
{
    if (strcasecmp(arg, "auto") == 0) {
        *out = 0;
        return NULL;
    }
    if (directive_parse_int(p, directive, arg, 1, max, out) != NULL) {
        return apr_psprintf(p, "%s must be 'auto' or a whole number from "
                            "1 to %d, not '%s'", directive, max, arg);
    }
    return NULL;
}

const char *directive_parse_strategy(apr_pool_t *p, const char *directive,
                                     const char *arg, bucket_strategy_e *out)
{
    static const bucket_strategy_e all[] = {
        BUCKET_STRATEGY_AUTO, BUCKET_STRATEGY_REUSEPORT,
        BUCKET_STRATEGY_LISTEN, BUCKET_STRATEGY_SINGLE
    };
    apr_size_t i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcasecmp(arg, bucket_strategy_name(all[i])) == 0) {
            *out = all[i];
            return NULL;
        }
    }
    return apr_psprintf(p, "%s must be one of auto, reuseport, listen, "
                        "single, not '%s'", directive, arg);
}

static void warn(apr_array_header_t *warnings, const char *msg)
{
    APR_ARRAY_PUSH(warnings, const char *) = msg;
}

void limit_cap_at_compile_time(apr_pool_t *p, const char *directive,
                               const char *unit, int *value, int hard,
                               apr_array_header_t *warnings)
{
    if (*value <= hard) {
        return;
    }
    warn(warnings, apr_psprintf(p, "WARNING: %s of %d exceeds the "
         "compile-time limit of %d %s, decreasing to %d.", directive,
         *value, hard, unit, hard));
    *value = hard;
}

const char *process_limits_check(apr_pool_t *p, const process_limits *in,
                                 const process_limits *defaults,
                                 int hard_server_limit,
                                 process_limits *out,
                                 apr_array_header_t *warnings)
{
    *out = *defaults;
    if (in->server_limit) out->server_limit = in->server_limit;
    if (in->max_workers)  out->max_workers = in->max_workers;
    if (in->start_servers) out->start_servers = in->start_servers;
    if (in->min_spare)    out->min_spare = in->min_spare;
    if (in->max_spare)    out->max_spare = in->max_spare;

    if (in->min_spare && in->max_spare && in->min_spare > in->max_spare) {
        return apr_psprintf(p, "MinSpareServers %d is above MaxSpareServers "
                            "%d: MinSpareServers must be from 1 to "
                            "MaxSpareServers", in->min_spare, in->max_spare);
    }
    limit_cap_at_compile_time(p, "ServerLimit", "servers",
                              &out->server_limit, hard_server_limit,
                              warnings);
    if (out->max_workers > out->server_limit) {
        warn(warnings, apr_psprintf(p, "WARNING: MaxRequestWorkers of %d "
             "exceeds ServerLimit value of %d servers, decreasing "
             "MaxRequestWorkers to %d. To increase, please see the "
             "ServerLimit directive.", out->max_workers, out->server_limit,
             out->server_limit));
        out->max_workers = out->server_limit;
    }
    if (out->max_spare <= out->min_spare) {
        if (in->max_spare) {
            warn(warnings, apr_psprintf(p, "WARNING: MaxSpareServers of %d "
                 "is not above MinSpareServers %d, increasing it to %d.",
                 out->max_spare, out->min_spare, out->min_spare + 1));
        }
        out->max_spare = out->min_spare + 1;
    }
    if (out->start_servers > out->max_workers) {
        out->start_servers = out->max_workers;
    }
    return NULL;
}

int limit_kept_on_restart(apr_pool_t *p, const char *directive, int *value,
                          int first, apr_array_header_t *warnings)
{
    if (*value == first) {
        return 0;
    }
    warn(warnings, apr_psprintf(p, "changing %s to %d from original value of "
         "%d not allowed during restart; keeping %d (a full stop and start "
         "applies it)", directive, *value, first, first));
    *value = first;
    return 1;
}

void process_limits_keep_server_limit(apr_pool_t *p, process_limits *limits,
                                      int first_server_limit,
                                      apr_array_header_t *warnings)
{
    if (!limit_kept_on_restart(p, "ServerLimit", &limits->server_limit,
                               first_server_limit, warnings)) {
        return;
    }
    if (limits->max_workers > limits->server_limit) {
        limits->max_workers = limits->server_limit;
    }
    if (limits->start_servers > limits->max_workers) {
        limits->start_servers = limits->max_workers;
    }
}

const char *plan_descriptors_check(apr_pool_t *p, const bucket_plan *plan,
                                   int num_listeners, int per_bucket,
                                   apr_int64_t soft_limit)
{
    /* In 64 bits: each term is an int. */
    apr_int64_t sockets = (apr_int64_t)num_listeners + plan->num_duplicates;
    apr_int64_t eventfds = (apr_int64_t)plan->num_buckets * per_bucket;
    apr_int64_t needed = sockets + eventfds + PLAN_FD_HEADROOM;
    const char *what = "";

    if (soft_limit == PLAN_FD_UNLIMITED || needed <= soft_limit) {
        return NULL;
    }
    if (eventfds > 0) {
        what = apr_psprintf(p, ", %" APR_INT64_T_FMT " per-bucket eventfds",
                            eventfds);
    }
    return apr_psprintf(p, "BucketCount %d x %d Listen address%s needs %"
                        APR_INT64_T_FMT " descriptors (%" APR_INT64_T_FMT
                        " sockets%s, %d for logs and modules), RLIMIT_NOFILE "
                        "is %" APR_INT64_T_FMT ": lower BucketCount or raise "
                        "the limit (ulimit -n)", plan->num_buckets,
                        num_listeners, num_listeners == 1 ? "" : "es",
                        needed, sockets, what, PLAN_FD_HEADROOM, soft_limit);
}
