/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_event.c: values of the event child model's directives, checked
 * the way stock event checks them, plus the two places where bucketed is
 * stricter: a contradiction the operator surely did not mean is refused,
 * and a directive of the other child model is an error naming the fix.
 */
#include "policy_event.h"

#include <limits.h>
#include <strings.h>

#include "apr_lib.h"
#include "apr_strings.h"

/* AsyncRequestWorkerFactor above this is surely a typo. */
#define MAX_ASYNC_FACTOR 10000

const char *child_model_name(child_model_e model)
{
    return model == CHILD_MODEL_EVENT ? "event" : "prefork";
}

int child_model_serves_protocol(child_model_e model, const char *protocol)
{
    if (model == CHILD_MODEL_EVENT) {
        return 1;
    }
    return strcasecmp(protocol, "h2") != 0 && strcasecmp(protocol, "h2c") != 0;
}

const char *directive_parse_child_model(apr_pool_t *p, const char *directive,
                                        const char *arg, child_model_e *out)
{
    if (strcasecmp(arg, "prefork") == 0) {
        *out = CHILD_MODEL_PREFORK;
        return NULL;
    }
    if (strcasecmp(arg, "event") == 0) {
        *out = CHILD_MODEL_EVENT;
        return NULL;
    }
    return apr_psprintf(p, "%s must be prefork or event, not '%s'",
                        directive, arg);
}

const char *directive_parse_async_factor(apr_pool_t *p, const char *directive,
                                         const char *arg, int *scaled)
{
    const char *c = arg;
    long whole = 0, frac_num = 0, frac_den = 1;
    int digits = 0, frac_digits = 0;

    for (; apr_isdigit(*c) && whole <= MAX_ASYNC_FACTOR; c++, digits++) {
        whole = whole * 10 + (*c - '0');
    }
    if (*c == '.') {
        for (c++; apr_isdigit(*c) && frac_digits < 6; c++, frac_digits++) {
            frac_num = frac_num * 10 + (*c - '0');
            frac_den *= 10;
        }
        if (frac_digits == 0) {
            digits = 0;
        }
    }
    if (digits == 0 || *c != '\0' || whole > MAX_ASYNC_FACTOR
        || (whole == MAX_ASYNC_FACTOR && frac_num > 0)
        || whole * ASYNC_FACTOR_SCALE
           + frac_num * ASYNC_FACTOR_SCALE / frac_den == 0) {
        return apr_psprintf(p, "%s must be a positive number from 0.0625 "
                            "to %d (such as 2 or 1.5), not '%s'",
                            directive, MAX_ASYNC_FACTOR, arg);
    }
    *scaled = (int)(whole * ASYNC_FACTOR_SCALE
                    + frac_num * ASYNC_FACTOR_SCALE / frac_den);
    return NULL;
}

/* Directive values go up to INT_MAX each (MinSpareThreads, and the hard
 * limits are the caller's), so their sums and products are taken in 64
 * bits and capped, not left to overflow int (undefined behaviour). */
static int capped_sum(int a, int b)
{
    long long v = (long long)a + b;

    return v > INT_MAX ? INT_MAX : (int)v;
}

static int capped_product(int a, int b)
{
    long long v = (long long)a * b;

    return v > INT_MAX ? INT_MAX : (int)v;
}

static void warn(apr_array_header_t *warnings, const char *msg)
{
    APR_ARRAY_PUSH(warnings, const char *) = msg;
}

#define TAKE(field) do { if (in->field) out->field = in->field; } while (0)

const char *thread_limits_check(apr_pool_t *p, const thread_limits *in,
                                const thread_limits *defaults,
                                int hard_server_limit, int hard_thread_limit,
                                thread_limits *out, process_limits *procs,
                                apr_array_header_t *warnings)
{
    int children, spare_floor;

    *out = *defaults;
    TAKE(server_limit);
    TAKE(thread_limit);
    TAKE(threads_per_child);
    TAKE(start_servers);
    TAKE(min_spare_threads);
    TAKE(max_spare_threads);
    TAKE(max_workers);
    if (in->min_spare_threads && in->max_spare_threads
        && in->min_spare_threads > in->max_spare_threads) {
        return apr_psprintf(p, "MinSpareThreads %d is above MaxSpareThreads "
                            "%d: MinSpareThreads must be from 1 to "
                            "MaxSpareThreads", in->min_spare_threads,
                            in->max_spare_threads);
    }
    limit_cap_at_compile_time(p, "ServerLimit", "servers",
                              &out->server_limit, hard_server_limit,
                              warnings);
    limit_cap_at_compile_time(p, "ThreadLimit", "threads",
                              &out->thread_limit, hard_thread_limit,
                              warnings);
    if (out->threads_per_child > out->thread_limit) {
        warn(warnings, apr_psprintf(p, "WARNING: ThreadsPerChild of %d "
             "exceeds ThreadLimit of %d threads, decreasing to %d. To "
             "increase, please see the ThreadLimit directive.",
             out->threads_per_child, out->thread_limit, out->thread_limit));
        out->threads_per_child = out->thread_limit;
    }
    if (out->max_workers == 0) {
        /* Stock event's default: every process slot full. */
        out->max_workers = capped_product(out->server_limit,
                                          out->threads_per_child);
    }
    if (out->max_workers < out->threads_per_child) {
        warn(warnings, apr_psprintf(p, "WARNING: MaxRequestWorkers of %d is "
             "less than ThreadsPerChild of %d, increasing to %d. "
             "MaxRequestWorkers must be at least as large as the number of "
             "threads in a single server.", out->max_workers,
             out->threads_per_child, out->threads_per_child));
        out->max_workers = out->threads_per_child;
    }
    children = out->max_workers / out->threads_per_child;
    if (out->max_workers % out->threads_per_child) {
        warn(warnings, apr_psprintf(p, "WARNING: MaxRequestWorkers of %d is "
             "not an integer multiple of ThreadsPerChild of %d, decreasing "
             "to nearest multiple %d, for a maximum of %d servers.",
             out->max_workers, out->threads_per_child,
             children * out->threads_per_child, children));
        out->max_workers = children * out->threads_per_child;
    }
    if (children > out->server_limit) {
        warn(warnings, apr_psprintf(p, "WARNING: MaxRequestWorkers of %d "
             "would require %d servers and would exceed ServerLimit of %d, "
             "decreasing to %d. To increase, please see the ServerLimit "
             "directive.", out->max_workers, children, out->server_limit,
             capped_product(out->server_limit, out->threads_per_child)));
        children = out->server_limit;
        out->max_workers = children * out->threads_per_child;
    }
    spare_floor = capped_sum(out->min_spare_threads, out->threads_per_child);
    if (out->max_spare_threads < spare_floor) {
        if (in->max_spare_threads) {
            warn(warnings, apr_psprintf(p, "WARNING: MaxSpareThreads of %d "
                 "is below MinSpareThreads %d + ThreadsPerChild %d, "
                 "increasing it to %d.", out->max_spare_threads,
                 out->min_spare_threads, out->threads_per_child,
                 spare_floor));
        }
        out->max_spare_threads = spare_floor;
    }
    if (out->start_servers > children) {
        out->start_servers = children;
    }
    procs->server_limit = out->server_limit;
    procs->max_workers = children;
    procs->start_servers = out->start_servers;
    procs->min_spare = out->min_spare_threads;
    procs->max_spare = out->max_spare_threads;
    return NULL;
}

void thread_limits_keep_thread_limit(apr_pool_t *p, thread_limits *limits,
                                     process_limits *procs,
                                     int first_thread_limit,
                                     apr_array_header_t *warnings)
{
    if (!limit_kept_on_restart(p, "ThreadLimit", &limits->thread_limit,
                               first_thread_limit, warnings)) {
        return;
    }
    if (limits->threads_per_child > first_thread_limit) {
        warn(warnings, apr_psprintf(p, "ThreadsPerChild of %d exceeds "
             "ThreadLimit of %d, decreasing to match",
             limits->threads_per_child, first_thread_limit));
        limits->threads_per_child = first_thread_limit;
        int spare_floor = capped_sum(limits->min_spare_threads,
                                     first_thread_limit);

        limits->max_workers = capped_product(procs->max_workers,
                                             first_thread_limit);
        if (limits->max_spare_threads < spare_floor) {
            limits->max_spare_threads = spare_floor;
        }
        procs->max_spare = limits->max_spare_threads;
    }
}

const char *child_model_conflict(apr_pool_t *p, child_model_e model,
                                 const char *prefork_only_seen,
                                 const char *event_only_seen)
{
    if (model == CHILD_MODEL_EVENT && prefork_only_seen != NULL) {
        return apr_psprintf(p, "%s belongs to ChildModel prefork; with "
                            "ChildModel event idle capacity is counted in "
                            "threads: use MinSpareThreads/MaxSpareThreads "
                            "instead, or remove it", prefork_only_seen);
    }
    if (model == CHILD_MODEL_PREFORK && event_only_seen != NULL) {
        return apr_psprintf(p, "%s needs ChildModel event (threads per "
                            "child); add 'ChildModel event' or remove it "
                            "(the default ChildModel prefork serves one "
                            "connection per child)", event_only_seen);
    }
    return NULL;
}

int event_should_listen(int connections, int idle_workers,
                        int threads_per_child, int async_factor_scaled)
{
    long idle = idle_workers > 0 ? idle_workers : 0;

    return connections <= threads_per_child
                          + idle * async_factor_scaled / ASYNC_FACTOR_SCALE;
}

int event_reclaim_share(apr_uint32_t waiting, int children, int idle_workers,
                        int keepalive_idle)
{
    apr_uint32_t share;

    if (waiting == 0 || idle_workers <= 0 || keepalive_idle <= 0) {
        return 0;
    }
    share = children > 1 ? (waiting - 1) / (apr_uint32_t)children + 1
                         : waiting;
    return share < (apr_uint32_t)keepalive_idle ? (int)share : keepalive_idle;
}

int event_swapping(int connections, int swap_until)
{
    return connections < swap_until;
}

int event_should_reclaim(apr_interval_time_t bucket_stalled_for,
                         int bucket_can_grow, apr_interval_time_t since_last)
{
    if (since_last >= 0 && since_last < EVENT_RECLAIM_GOES_ON) {
        return 1;
    }
    if (bucket_stalled_for <= 0) {
        return 0;
    }
    return !bucket_can_grow
           || bucket_stalled_for >= EVENT_RECLAIM_GROWING_AFTER;
}

int event_may_accept(int connections, int idle_workers, int threads_per_child,
                     int async_factor_scaled)
{
    return idle_workers > 0
           && event_should_listen(connections, idle_workers,
                                  threads_per_child, async_factor_scaled);
}

int event_takes_turn(apr_uint32_t accepted, int epoll_exclusive)
{
    return epoll_exclusive && accepted % EVENT_TURN_EVERY == 0;
}

event_stuck_e event_stuck_verdict(int idle_workers, int progressed,
                                  int keepalive_waiting,
                                  apr_interval_time_t stuck_for)
{
    if (idle_workers > 0 || progressed || keepalive_waiting == 0) {
        return EVENT_NOT_STUCK;
    }
    return stuck_for < EVENT_STUCK_GRACE ? EVENT_STUCK_WAIT
                                         : EVENT_STUCK_TOO_LONG;
}
