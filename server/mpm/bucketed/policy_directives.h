/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_directives: parsing and validation of bucketed's directive values.
 * Pure: every function returns NULL or an error message naming the
 * directive and the allowed values, which httpd prints with the file and
 * line, so `apache2 -t` fails with it.
 */
#ifndef POLICY_DIRECTIVES_H
#define POLICY_DIRECTIVES_H

#include "apr_pools.h"
#include "apr_tables.h"
#include "policy_plan.h"

/* A whole decimal number in [min, max]; no sign games, no trailing junk. */
const char *directive_parse_int(apr_pool_t *p, const char *directive,
                                const char *arg, int min, int max, int *out);

/* "auto" (stored as 0) or a number in [1, max]. */
const char *directive_parse_auto_int(apr_pool_t *p, const char *directive,
                                     const char *arg, int max, int *out);

/* auto | reuseport | listen | single, case-insensitive. */
const char *directive_parse_strategy(apr_pool_t *p, const char *directive,
                                     const char *arg, bucket_strategy_e *out);

/* The process limits as configured; 0 = not set in the configuration. */
typedef struct {
    int server_limit;
    int max_workers;
    int start_servers;
    int min_spare;
    int max_spare;
} process_limits;

/*
 * Checks the limits against each other and against the compile-time cap.
 * Fills *out with the values to run with (defaults for unset ones, then
 * prefork's adjustments). Adjustments are appended to warnings as strings;
 * contradictions that prefork would silently paper over and that an
 * operator surely did not mean (MinSpareServers above MaxSpareServers) are
 * returned as an error.
 */
const char *process_limits_check(apr_pool_t *p, const process_limits *in,
                                 const process_limits *defaults,
                                 int hard_server_limit,
                                 process_limits *out,
                                 apr_array_header_t *warnings);

/*
 * A limit above its compile-time cap (ServerLimit, ThreadLimit; `unit`
 * names what it counts): lowers *value to hard and says so in warnings,
 * in the one wording both child models use.
 */
void limit_cap_at_compile_time(apr_pool_t *p, const char *directive,
                               const char *unit, int *value, int hard,
                               apr_array_header_t *warnings);

/*
 * A limit that sized shared memory at the first start (ServerLimit,
 * ThreadLimit) cannot move under a running server: puts *value back to
 * first and says so in warnings. Returns 1 if it had to.
 */
int limit_kept_on_restart(apr_pool_t *p, const char *directive, int *value,
                          int first, apr_array_header_t *warnings);

/*
 * On a restart: ServerLimit sized the scoreboard and the parent's tables at
 * the first start and cannot move under a running server. Keeps
 * first_server_limit, lowering MaxRequestWorkers and StartServers to fit,
 * and says so in warnings.
 */
void process_limits_keep_server_limit(apr_pool_t *p, process_limits *limits,
                                      int first_server_limit,
                                      apr_array_header_t *warnings);

/* Descriptors left for what is not the plan's: logs, the pid file,
 * modules' files, the scoreboard, a child's connection and epoll set. */
#define PLAN_FD_HEADROOM 64

/* RLIMIT_NOFILE without a limit (RLIM_INFINITY, or one beyond this). */
#define PLAN_FD_UNLIMITED ((apr_int64_t)-1)

/*
 * Whether the plan's descriptors fit under the soft RLIMIT_NOFILE
 * (`soft_limit`, or PLAN_FD_UNLIMITED). The parent holds every socket of
 * every bucket (num_listeners originals plus the plan's duplicates) and
 * `per_bucket` more descriptors per bucket (ChildModel event: the bucket's
 * eventfd); a child starts with all of them and closes the other buckets'
 * after fork. Returns NULL, or an error naming the bucket count, the
 * Listen count, what is needed, the limit and the fix.
 */
const char *plan_descriptors_check(apr_pool_t *p, const bucket_plan *plan,
                                   int num_listeners, int per_bucket,
                                   apr_int64_t soft_limit);

#endif /* POLICY_DIRECTIVES_H */
