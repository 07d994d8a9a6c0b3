/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_event.c: unit tests of the event child model's directive
 * values: ChildModel, AsyncRequestWorkerFactor, the thread limit checks,
 * ThreadLimit across restarts, directives of the other model, and the
 * accept rule.
 */
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "apr_pools.h"
#include "apr_strings.h"
#include "apr_tables.h"

#include "policy_event.h"
#include "unit_test.h"

#define UNTOUCHED (-4242)

static void test_child_model(void **state)
{
    static const char *const junk[] = {
        "", "worker", "preforkx", " event", "event ", "1"
    };
    apr_pool_t *p = *state;
    child_model_e m = (child_model_e)UNTOUCHED;
    size_t i;

    assert_null(directive_parse_child_model(p, "ChildModel", "event", &m));
    assert_int_equal(m, CHILD_MODEL_EVENT);
    assert_null(directive_parse_child_model(p, "ChildModel", "PREFORK", &m));
    assert_int_equal(m, CHILD_MODEL_PREFORK);
    for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        const char *err;

        m = (child_model_e)UNTOUCHED;
        err = directive_parse_child_model(p, "ChildModel", junk[i], &m);
        CASE_CHECK(junk[i], err != NULL);
        CASE_CHECK(junk[i], m == (child_model_e)UNTOUCHED);
        assert_contains(err, "ChildModel");
        assert_contains(err, "prefork or event");
        assert_contains(err, apr_psprintf(p, "'%s'", junk[i]));
    }
    assert_string_equal(child_model_name(CHILD_MODEL_EVENT), "event");
    assert_string_equal(child_model_name(CHILD_MODEL_PREFORK), "prefork");
}

static void test_protocols_per_model(void **state)
{
    static const char *const http2[] = { "h2", "h2c", "H2" };
    static const char *const others[] = { "http/1.1", "acme-tls/1", "h2x" };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(http2) / sizeof(http2[0]); i++) {
        CASE_CHECK(http2[i],
                   !child_model_serves_protocol(CHILD_MODEL_PREFORK, http2[i]));
        CASE_CHECK(http2[i],
                   child_model_serves_protocol(CHILD_MODEL_EVENT, http2[i]));
    }
    for (i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        CASE_CHECK(others[i],
                   child_model_serves_protocol(CHILD_MODEL_PREFORK, others[i]));
        CASE_CHECK(others[i],
                   child_model_serves_protocol(CHILD_MODEL_EVENT, others[i]));
    }
}

static int factor_ok(apr_pool_t *p, const char *arg)
{
    int scaled = UNTOUCHED;
    const char *err = directive_parse_async_factor(
        p, "AsyncRequestWorkerFactor", arg, &scaled);

    if (err != NULL) {
        fail_msg("'%s' rejected: %s", arg, err);
    }
    return scaled;
}

static void test_async_factor(void **state)
{
    static const char *const junk[] = {
        "", "0", "0.0", "0.01", "-1", "abc", "2x", "1.5.2", ".", "1e3",
        " 2", "2 ", "10000.5", "10001", ".5", "3.", "0.1234567", "99999999999999999999", "+2", "0x2"
    };
    apr_pool_t *p = *state;
    size_t i;

    assert_int_equal(factor_ok(p, "2"), 32);
    assert_int_equal(factor_ok(p, "1.5"), 24);
    assert_int_equal(factor_ok(p, "0.25"), 4);
    assert_int_equal(factor_ok(p, "0.0625"), 1);
    assert_int_equal(factor_ok(p, "10000"), 160000);
    for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        int scaled = UNTOUCHED;
        const char *err = directive_parse_async_factor(
            p, "AsyncRequestWorkerFactor", junk[i], &scaled);

        CASE_CHECK(junk[i], err != NULL);
        CASE_CHECK(junk[i], scaled == UNTOUCHED);
        assert_contains(err, "AsyncRequestWorkerFactor");
        assert_contains(err, "0.0625 to 10000");
        assert_contains(err, apr_psprintf(p, "'%s'", junk[i]));
    }
}

/* ---- thread_limits_check ---- */

/* server_limit, thread_limit, threads_per_child, max_workers (0: all
 * slots), start_servers, min_spare_threads, max_spare_threads */
static const thread_limits defaults = { 16, 64, 25, 0, 3, 75, 250 };

typedef struct {
    const char *err;
    thread_limits out;
    process_limits procs;
    apr_array_header_t *warnings;
} result;

static result check(apr_pool_t *p, thread_limits in)
{
    result r;

    memset(&r.out, 0, sizeof(r.out));
    memset(&r.procs, 0, sizeof(r.procs));
    r.warnings = apr_array_make(p, 4, sizeof(const char *));
    r.err = thread_limits_check(p, &in, &defaults, 20000, 100000, &r.out,
                                &r.procs, r.warnings);
    return r;
}

static const char *warning(const result *r, int i)
{
    assert_true(i < r->warnings->nelts);
    return APR_ARRAY_IDX(r->warnings, i, const char *);
}

static void test_thread_defaults(void **state)
{
    thread_limits none = { 0, 0, 0, 0, 0, 0, 0 };
    result r = check(*state, none);

    assert_null(r.err);
    assert_int_equal(r.warnings->nelts, 0);
    /* Stock event: 16 x 25 = 400 threads. */
    assert_int_equal(r.out.max_workers, 400);
    assert_int_equal(r.out.threads_per_child, 25);
    assert_int_equal(r.procs.max_workers, 16);
    assert_int_equal(r.procs.server_limit, 16);
    assert_int_equal(r.procs.start_servers, 3);
    assert_int_equal(r.procs.min_spare, 75);
    assert_int_equal(r.procs.max_spare, 250);
}

static void test_threads_per_child_above_limit(void **state)
{
    thread_limits in = { 0, 32, 50, 0, 0, 0, 0 };
    result r = check(*state, in);

    assert_null(r.err);
    assert_int_equal(r.out.threads_per_child, 32);
    assert_int_equal(r.out.max_workers, 16 * 32);
    assert_contains(warning(&r, 0), "ThreadsPerChild of 50 exceeds "
                    "ThreadLimit of 32");
}

static void test_max_workers_rounding(void **state)
{
    thread_limits small = { 0, 0, 25, 10, 0, 0, 0 };
    thread_limits odd = { 0, 0, 25, 110, 0, 0, 0 };
    thread_limits big = { 4, 0, 25, 1000, 0, 0, 0 };
    result r;

    r = check(*state, small);
    assert_int_equal(r.out.max_workers, 25);
    assert_int_equal(r.procs.max_workers, 1);
    assert_contains(warning(&r, 0), "MaxRequestWorkers of 10 is less than "
                    "ThreadsPerChild of 25, increasing to 25");
    r = check(*state, odd);
    assert_int_equal(r.out.max_workers, 100);
    assert_int_equal(r.procs.max_workers, 4);
    assert_contains(warning(&r, 0), "not an integer multiple of "
                    "ThreadsPerChild of 25, decreasing to nearest multiple "
                    "100, for a maximum of 4 servers");
    r = check(*state, big);
    assert_int_equal(r.out.max_workers, 100);
    assert_int_equal(r.procs.max_workers, 4);
    assert_contains(warning(&r, 0), "would require 40 servers and would "
                    "exceed ServerLimit of 4, decreasing to 100");
}

static void test_hard_limits(void **state)
{
    thread_limits in = { 30000, 200000, 0, 0, 0, 0, 0 };
    result r = check(*state, in);

    assert_null(r.err);
    assert_int_equal(r.out.server_limit, 20000);
    assert_int_equal(r.out.thread_limit, 100000);
    assert_string_equal(warning(&r, 0), "WARNING: ServerLimit of 30000 "
                        "exceeds the compile-time limit of 20000 servers, "
                        "decreasing to 20000.");
    assert_string_equal(warning(&r, 1), "WARNING: ThreadLimit of 200000 "
                        "exceeds the compile-time limit of 100000 threads, "
                        "decreasing to 100000.");
}

/* The ServerLimit cap is one warning, worded alike in both models. */
static void test_server_limit_cap_as_prefork_says_it(void **state)
{
    static const process_limits none = { 0, 0, 0, 0, 0 };
    process_limits in = { 30000, 0, 0, 0, 0 }, out;
    thread_limits event_in = { 30000, 0, 0, 0, 0, 0, 0 };
    apr_array_header_t *warnings = apr_array_make(*state, 4,
                                                  sizeof(const char *));
    result r = check(*state, event_in);

    assert_null(process_limits_check(*state, &in, &none, 20000, &out,
                                     warnings));
    assert_int_equal(warnings->nelts, 1);
    assert_int_equal(r.warnings->nelts, 1);
    assert_string_equal(warning(&r, 0),
                        APR_ARRAY_IDX(warnings, 0, const char *));
}

static void test_spare_threads(void **state)
{
    thread_limits contradiction = { 0, 0, 0, 0, 0, 100, 50 };
    thread_limits narrow = { 0, 0, 25, 0, 0, 50, 60 };
    thread_limits implied = { 0, 0, 25, 0, 0, 300, 0 };
    result r;

    r = check(*state, contradiction);
    assert_non_null(r.err);
    assert_contains(r.err, "MinSpareThreads 100 is above MaxSpareThreads 50");
    r = check(*state, narrow);
    assert_null(r.err);
    assert_int_equal(r.procs.max_spare, 75);
    assert_contains(warning(&r, 0), "MaxSpareThreads of 60");
    /* Only the default MaxSpareThreads is below: raised without a word. */
    r = check(*state, implied);
    assert_null(r.err);
    assert_int_equal(r.warnings->nelts, 0);
    assert_int_equal(r.procs.max_spare, 325);
}

/* Sums and products of values up to INT_MAX used to overflow int (UBSan:
 * signed integer overflow); they are capped at INT_MAX now. */
static void test_huge_values_do_not_overflow(void **state)
{
    apr_pool_t *p = *state;
    /* MinSpareThreads INT_MAX + ThreadsPerChild 25. */
    thread_limits spare = { 0, 0, 25, 0, 0, INT_MAX, 0 };
    thread_limits both = { 0, 0, 25, 0, 0, INT_MAX, INT_MAX };
    /* ServerLimit x ThreadsPerChild beyond INT_MAX, with hard limits that
     * let them through. */
    thread_limits product = { 100000, 100000, 100000, 0, 0, 0, 0 };
    result r;

    r = check(p, spare);
    assert_null(r.err);
    assert_int_equal(r.out.max_spare_threads, INT_MAX);
    assert_int_equal(r.procs.max_spare, INT_MAX);
    r = check(p, both);
    assert_null(r.err);
    assert_int_equal(r.warnings->nelts, 0);
    assert_int_equal(r.procs.max_spare, INT_MAX);

    memset(&r.out, 0, sizeof(r.out));
    r.warnings = apr_array_make(p, 4, sizeof(const char *));
    r.err = thread_limits_check(p, &product, &defaults, INT_MAX, INT_MAX,
                                &r.out, &r.procs, r.warnings);
    assert_null(r.err);
    assert_true(r.out.max_workers > 0);
    assert_int_equal(r.out.max_workers % 100000, 0);
    assert_int_equal(r.procs.max_workers, INT_MAX / 100000);

    /* A restart that lowers ThreadLimit under MinSpareThreads INT_MAX. */
    r = check(p, (thread_limits){ 0, 100, 80, 160, 0, INT_MAX, 0 });
    thread_limits_keep_thread_limit(p, &r.out, &r.procs, 64, r.warnings);
    assert_int_equal(r.out.max_spare_threads, INT_MAX);
    assert_int_equal(r.procs.max_spare, INT_MAX);
}

static void test_start_servers_capped(void **state)
{
    thread_limits in = { 0, 0, 25, 50, 10, 0, 0 };
    result r = check(*state, in);

    assert_int_equal(r.procs.start_servers, 2);
}

static void test_keep_thread_limit(void **state)
{
    apr_pool_t *p = *state;
    thread_limits in = { 0, 100, 80, 160, 0, 10, 0 };
    result r = check(p, in);

    thread_limits_keep_thread_limit(p, &r.out, &r.procs, 100, r.warnings);
    assert_int_equal(r.warnings->nelts, 0);
    thread_limits_keep_thread_limit(p, &r.out, &r.procs, 64, r.warnings);
    assert_int_equal(r.out.thread_limit, 64);
    assert_int_equal(r.out.threads_per_child, 64);
    assert_int_equal(r.out.max_workers, 2 * 64);
    assert_true(r.procs.max_spare >= r.procs.min_spare + 64);
    assert_contains(warning(&r, 0), "changing ThreadLimit to 100 from "
                    "original value of 64");
}

static void test_model_conflict(void **state)
{
    apr_pool_t *p = *state;
    const char *err;

    assert_null(child_model_conflict(p, CHILD_MODEL_PREFORK,
                                     "MinSpareServers", NULL));
    assert_null(child_model_conflict(p, CHILD_MODEL_EVENT, NULL,
                                     "ThreadsPerChild"));
    assert_null(child_model_conflict(p, CHILD_MODEL_EVENT, NULL, NULL));
    err = child_model_conflict(p, CHILD_MODEL_EVENT, "MaxSpareServers",
                               NULL);
    assert_contains(err, "MaxSpareServers");
    assert_contains(err, "MinSpareThreads/MaxSpareThreads");
    err = child_model_conflict(p, CHILD_MODEL_PREFORK, NULL,
                               "AsyncRequestWorkerFactor");
    assert_contains(err, "AsyncRequestWorkerFactor");
    assert_contains(err, "ChildModel event");
}

static void test_may_accept(void **state)
{
    (void)state;
    /* No idle worker: never. */
    assert_false(event_may_accept(0, 0, 25, 32));
    /* 25 threads, 1 idle, factor 2: up to 27 connections. */
    assert_true(event_may_accept(27, 1, 25, 32));
    assert_false(event_may_accept(28, 1, 25, 32));
    /* Factor 0.5 (8/16) with 4 idle: 25 + 2. */
    assert_true(event_may_accept(27, 4, 25, 8));
    assert_false(event_may_accept(28, 4, 25, 8));
    assert_true(event_may_accept(0, 1, 1, 1));
}

static void test_should_listen(void **state)
{
    (void)state;
    /* No idle worker: listen while the busy ones hold no waiting
     * connection (the kernel wakes nobody here until one is idle). */
    assert_true(event_should_listen(25, 0, 25, 32));
    assert_false(event_should_listen(26, 0, 25, 32));
    /* The same limit as event_may_accept() with idle workers. */
    assert_true(event_should_listen(27, 1, 25, 32));
    assert_false(event_should_listen(28, 1, 25, 32));
    /* A negative idle count (more queued than idle) counts as none. */
    assert_true(event_should_listen(25, -3, 25, 32));
    assert_false(event_should_listen(26, -3, 25, 32));
}

static void test_reclaim_share(void **state)
{
    (void)state;
    /* 77 waiting over 8 children: 10 each, 80 in all, not 8 x 77. */
    assert_int_equal(event_reclaim_share(77, 8, 10, 100), 10);
    assert_int_equal(event_reclaim_share(80, 8, 10, 100), 10);
    assert_int_equal(event_reclaim_share(81, 8, 10, 100), 11);
    /* One waiting: one from each child that sees it, at least one. */
    assert_int_equal(event_reclaim_share(1, 8, 10, 100), 1);
    assert_int_equal(event_reclaim_share(5, 1, 10, 100), 5);
    assert_int_equal(event_reclaim_share(5, 0, 10, 100), 5);
    /* No more than the idle keep-alive connections there are. */
    assert_int_equal(event_reclaim_share(77, 2, 10, 3), 3);
    assert_int_equal(event_reclaim_share(77, 2, 10, 0), 0);
    /* Nothing waits: nothing closed. */
    assert_int_equal(event_reclaim_share(0, 2, 10, 100), 0);
    /* Workers, not connections, are short: closing frees none. */
    assert_int_equal(event_reclaim_share(77, 2, 0, 100), 0);
    assert_int_equal(event_reclaim_share(77, 2, -2, 100), 0);
    /* Huge values do not overflow. */
    assert_int_equal(event_reclaim_share(0xffffffffu, 1, 1, 5), 5);
    assert_int_equal(event_reclaim_share(0xffffffffu, 0x7fffffff, 1,
                                         0x7fffffff), 3);
}

static void test_swapping(void **state)
{
    (void)state;
    assert_false(event_swapping(10, 0));
    assert_true(event_swapping(45, 60));
    assert_true(event_swapping(59, 60));
    assert_false(event_swapping(60, 60));
    assert_false(event_swapping(61, 60));
}

static void test_should_reclaim(void **state)
{
    const apr_interval_time_t never = -1;

    (void)state;
    /* The bucket accepts (a sibling with room takes the connections), or
     * nothing waits: keep them, whether the bucket could grow or not. */
    assert_false(event_should_reclaim(0, 0, never));
    assert_false(event_should_reclaim(0, 1, never));
    /* Stalled, and no child can be added: make room at once. */
    assert_true(event_should_reclaim(apr_time_from_msec(200), 0, never));
    assert_true(event_should_reclaim(1, 0, never));
    /* Stalled, a child on its way: only if it does not come. */
    assert_false(event_should_reclaim(apr_time_from_msec(200), 1, never));
    assert_false(event_should_reclaim(EVENT_RECLAIM_GROWING_AFTER - 1, 1,
                                      never));
    assert_true(event_should_reclaim(EVENT_RECLAIM_GROWING_AFTER, 1, never));
    assert_true(event_should_reclaim(apr_time_from_sec(30), 1, never));
    /* A swap a moment ago: goes on without a new stall, for a while. */
    assert_true(event_should_reclaim(0, 0, 0));
    assert_true(event_should_reclaim(0, 1, EVENT_RECLAIM_GOES_ON - 1));
    assert_false(event_should_reclaim(0, 0, EVENT_RECLAIM_GOES_ON));
    assert_false(event_should_reclaim(0, 1, apr_time_from_sec(30)));
}

static void test_takes_turn(void **state)
{
    apr_uint32_t accepted;
    int turns = 0;

    (void)state;
    /* The first accept, then every EVENT_TURN_EVERY-th. */
    assert_true(event_takes_turn(0, 1));
    for (accepted = 1; accepted <= 10 * EVENT_TURN_EVERY; accepted++) {
        turns += event_takes_turn(accepted, 1);
    }
    assert_int_equal(turns, 10);
    /* Without EPOLLEXCLUSIVE every child is woken: never. */
    for (accepted = 0; accepted <= 10 * EVENT_TURN_EVERY; accepted++) {
        assert_false(event_takes_turn(accepted, 0));
    }
}

static void test_stuck_verdict(void **state)
{
    apr_interval_time_t long_enough = EVENT_STUCK_GRACE;

    (void)state;
    /* Stuck: no idle worker, nothing done, keep-alive connections wait. */
    assert_int_equal(event_stuck_verdict(0, 0, 3, long_enough),
                     EVENT_STUCK_TOO_LONG);
    assert_int_equal(event_stuck_verdict(0, 0, 3, long_enough - 1),
                     EVENT_STUCK_WAIT);
    /* Any of these starts over, however long it has been. */
    assert_int_equal(event_stuck_verdict(1, 0, 3, 10 * long_enough),
                     EVENT_NOT_STUCK);
    assert_int_equal(event_stuck_verdict(0, 1, 3, 10 * long_enough),
                     EVENT_NOT_STUCK);
    assert_int_equal(event_stuck_verdict(0, 0, 0, 10 * long_enough),
                     EVENT_NOT_STUCK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_child_model),
        cmocka_unit_test(test_protocols_per_model),
        POOL_TEST(test_async_factor),
        POOL_TEST(test_thread_defaults),
        POOL_TEST(test_threads_per_child_above_limit),
        POOL_TEST(test_max_workers_rounding),
        POOL_TEST(test_hard_limits),
        POOL_TEST(test_server_limit_cap_as_prefork_says_it),
        POOL_TEST(test_spare_threads),
        POOL_TEST(test_huge_values_do_not_overflow),
        POOL_TEST(test_start_servers_capped),
        POOL_TEST(test_keep_thread_limit),
        POOL_TEST(test_model_conflict),
        POOL_TEST(test_may_accept),
        POOL_TEST(test_should_listen),
        POOL_TEST(test_reclaim_share),
        POOL_TEST(test_swapping),
        POOL_TEST(test_should_reclaim),
        POOL_TEST(test_takes_turn),
        POOL_TEST(test_stuck_verdict),
    };

    return RUN_POOL_TESTS(tests);
}
