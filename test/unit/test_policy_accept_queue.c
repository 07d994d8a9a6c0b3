/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_accept_queue.c: unit tests of the accept-queue history the parent
 * keeps per listening socket: highest depth, when a queue counts as full,
 * and when a full queue earns a warning.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <cmocka.h>

#include "policy_accept_queue.h"
#include "unit_test.h"

#define SEC(n) apr_time_from_sec(n)
/* An arbitrary start, far from 0 (which means "never" in the watch). */
#define T0 SEC(1000)

static const queue_watch_limits limits = { SEC(3), SEC(60) };

static queue_sample sample(apr_uint32_t depth, apr_uint32_t backlog,
                           apr_uint32_t drops)
{
    queue_sample s;

    s.depth = depth;
    s.backlog = backlog;
    s.has_drops = 1;
    s.drops = drops;
    return s;
}

static queue_verdict feed(queue_watch *w, apr_uint32_t depth,
                          apr_uint32_t backlog, apr_uint32_t drops,
                          apr_time_t when)
{
    queue_sample s = sample(depth, backlog, drops);

    return queue_watch_update(w, &s, when, &limits);
}

/* ---- queue_sample_full ---- */

static void test_full_by_depth(void **state)
{
    static const struct {
        const char *desc;
        apr_uint32_t depth, backlog;
        int full;
    } cases[] = {
        { "empty queue",                      0, 511, 0 },
        { "one below the backlog",          510, 511, 0 },
        { "at the backlog",                 511, 511, 1 },
        /* Linux admits one connection past the backlog. */
        { "one past the backlog",           512, 511, 1 },
        { "backlog 1, one waiting",           1,   1, 1 },
        /* listen(fd, 0) still queues one connection. */
        { "backlog 0, empty",                 0,   0, 0 },
        { "backlog 0, one waiting",           1,   0, 1 },
    };
    queue_watch w = { 0 };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        queue_sample s = sample(cases[i].depth, cases[i].backlog, 0);
        CASE_CHECK(cases[i].desc, queue_sample_full(&s, &w) == cases[i].full);
    }
}

static void test_full_by_drops_since_previous_sample(void **state)
{
    queue_watch w = { 0 };
    queue_sample s = sample(0, 511, 7);

    (void)state;
    /* The first sample has nothing to compare its drop count with: drops
     * from before (an earlier generation, a socket kept across restarts)
     * do not make it full. */
    assert_false(queue_sample_full(&s, &w));
    feed(&w, 0, 511, 7, T0);
    assert_false(queue_sample_full(&s, &w));
    /* Drops since the previous sample: it overflowed in between, even
     * though it has drained by now. */
    s.drops = 9;
    assert_true(queue_sample_full(&s, &w));
    /* Across the 32-bit wrap. */
    w.last_drops = 0xfffffffeu;
    s.drops = 1;
    assert_true(queue_sample_full(&s, &w));
    /* A kernel without per-socket drops: depth alone decides. */
    s.has_drops = 0;
    s.drops = 0;
    assert_false(queue_sample_full(&s, &w));
}

/* ---- queue_watch_update ---- */

static void test_max_depth_is_the_highest_sampled(void **state)
{
    queue_watch w = { 0 };

    (void)state;
    feed(&w, 3, 511, 0, T0);
    feed(&w, 9, 511, 0, T0 + SEC(1));
    feed(&w, 2, 511, 0, T0 + SEC(2));
    assert_int_equal(w.max_depth, 9);
    feed(&w, 0, 511, 0, T0 + SEC(3));
    assert_int_equal(w.max_depth, 9);
}

static void test_warns_after_full_for_three_seconds(void **state)
{
    queue_watch w = { 0 };
    queue_verdict v;

    (void)state;
    v = feed(&w, 511, 511, 100, T0);
    assert_true(v.full);
    assert_false(v.warn);
    assert_int_equal(v.full_for, 0);
    v = feed(&w, 511, 511, 104, T0 + SEC(1));
    assert_false(v.warn);
    v = feed(&w, 511, 511, 110, T0 + SEC(2));
    assert_false(v.warn);
    assert_int_equal(v.full_for, SEC(2));
    v = feed(&w, 511, 511, 130, T0 + SEC(3));
    assert_true(v.warn);
    assert_int_equal(v.full_for, SEC(3));
    /* Drops since it filled; the 100 from before do not count. */
    assert_int_equal(v.dropped, 30);
}

static void test_a_gap_restarts_the_clock(void **state)
{
    queue_watch w = { 0 };
    queue_verdict v;

    (void)state;
    feed(&w, 511, 511, 0, T0);
    feed(&w, 511, 511, 0, T0 + SEC(1));
    feed(&w, 511, 511, 0, T0 + SEC(2));
    /* Drained, no drops: not full. */
    v = feed(&w, 10, 511, 0, T0 + SEC(3));
    assert_false(v.full);
    assert_false(v.warn);
    v = feed(&w, 511, 511, 0, T0 + SEC(4));
    assert_int_equal(v.full_for, 0);
    v = feed(&w, 511, 511, 0, T0 + SEC(6));
    assert_false(v.warn);
    v = feed(&w, 511, 511, 0, T0 + SEC(7));
    assert_true(v.warn);
}

static void test_drops_alone_keep_it_full(void **state)
{
    queue_watch w = { 0 };
    queue_verdict v;
    apr_uint32_t drops = 50;
    int i;

    (void)state;
    feed(&w, 0, 511, drops, T0);
    /* Bursts that overflow and drain between samples: never caught at the
     * limit, dropping all the same. */
    for (i = 1; i <= 3; i++) {
        drops += 5;
        v = feed(&w, 20, 511, drops, T0 + SEC(i));
        assert_true(v.full);
    }
    assert_false(v.warn);
    drops += 5;
    v = feed(&w, 20, 511, drops, T0 + SEC(4));
    assert_true(v.warn);
    assert_int_equal(v.dropped, 20);
}

static void test_at_most_one_warning_a_minute(void **state)
{
    queue_watch w = { 0 };
    queue_verdict v;
    int warnings = 0, s;

    (void)state;
    /* Full for five minutes: a warning at 3 s, then one a minute. */
    for (s = 0; s <= 300; s++) {
        v = feed(&w, 1, 1, 0, T0 + SEC(s));
        warnings += v.warn;
        if (s == 3 || s == 63 || s == 123) {
            CASE_CHECK(s == 3 ? "3 s" : s == 63 ? "63 s" : "123 s", v.warn);
        }
        if (s == 62 || s == 64) {
            CASE_CHECK("between", !v.warn);
        }
    }
    assert_int_equal(warnings, 5);
}

static void test_refilling_within_the_minute_stays_quiet(void **state)
{
    queue_watch w = { 0 };
    queue_verdict v;
    int s;

    (void)state;
    for (s = 0; s <= 3; s++) {
        v = feed(&w, 1, 1, 0, T0 + SEC(s));
    }
    assert_true(v.warn);
    /* Drains, then fills again for longer than three seconds: still within
     * the minute of the last warning, so nothing new until 63 s. */
    feed(&w, 0, 1, 0, T0 + SEC(4));
    for (s = 5; s < 63; s++) {
        v = feed(&w, 1, 1, 0, T0 + SEC(s));
        assert_false(v.warn);
    }
    v = feed(&w, 1, 1, 0, T0 + SEC(63));
    assert_true(v.warn);
    assert_int_equal(v.full_for, SEC(58));
}

static void test_no_drop_counts_without_kernel_support(void **state)
{
    queue_watch w = { 0 };
    queue_sample s = sample(1, 1, 0);
    queue_verdict v = { 0, 0, 0, 0 };
    int i;

    (void)state;
    s.has_drops = 0;
    for (i = 0; i <= 3; i++) {
        v = queue_watch_update(&w, &s, T0 + SEC(i), &limits);
    }
    assert_true(v.warn);
    assert_int_equal(v.dropped, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_by_depth),
        cmocka_unit_test(test_full_by_drops_since_previous_sample),
        cmocka_unit_test(test_max_depth_is_the_highest_sampled),
        cmocka_unit_test(test_warns_after_full_for_three_seconds),
        cmocka_unit_test(test_a_gap_restarts_the_clock),
        cmocka_unit_test(test_drops_alone_keep_it_full),
        cmocka_unit_test(test_at_most_one_warning_a_minute),
        cmocka_unit_test(test_refilling_within_the_minute_stays_quiet),
        cmocka_unit_test(test_no_drop_counts_without_kernel_support),
    };

    return RUN_POOL_TESTS(tests);
}
