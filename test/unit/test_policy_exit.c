/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_exit.c: unit tests of what a child's exit means for its
 * bucket: classification, the back-off, its cap, and forgetting old
 * failures.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>

#include "unit_test.h"
#include "policy_exit.h"

#define SEC(n) apr_time_from_sec(n)

/* Whether a bucket that still has children may grow at t. */
static int grows(const bucket_health *h, apr_time_t t)
{
    return bucket_health_grow_limit(h, 3, t) == EXIT_GROW_ANY;
}

static void test_classify(void **state)
{
    (void)state;
    assert_int_equal(child_exit_classify(0, 0, 0, 1), CHILD_EXIT_NORMAL);
    assert_int_equal(child_exit_classify(0, 0, 1, 1), CHILD_EXIT_NORMAL);
    /* A signal the parent sent to a child it asked to leave is normal. */
    assert_int_equal(child_exit_classify(0, 1, 1, 0), CHILD_EXIT_NORMAL);
    assert_int_equal(child_exit_classify(0, 1, 0, 0), CHILD_EXIT_CRASH);
    /* A crash once ready: a request (or the exit) crashed it. */
    assert_int_equal(child_exit_classify(0, 1, 0, 1),
                     CHILD_EXIT_CRASH_SERVING);
    assert_int_equal(child_exit_classify(1, 0, 0, 0), CHILD_EXIT_SICK);
    assert_int_equal(child_exit_classify(1, 0, 1, 1), CHILD_EXIT_SICK);
}

static void test_first_crash_replaced_at_once(void **state)
{
    bucket_health h = { 0, 0, 0 };
    apr_time_t now = SEC(1000);

    (void)state;
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_CRASH, now), 0);
    assert_true(grows(&h, now));
    /* The second in a row waits a second, the third two. */
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_CRASH, now + 1), SEC(1));
    assert_false(grows(&h, now + 2));
    assert_true(grows(&h, now + 1 + SEC(1)));
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_CRASH, now + 2), SEC(2));
}

static void test_sick_backs_off_and_caps(void **state)
{
    bucket_health h = { 0, 0, 0 };
    apr_time_t now = SEC(1000);
    apr_interval_time_t expect[] = { 1, 2, 4, 8, 16, 32, 60, 60, 60 };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        apr_interval_time_t hold = child_exit_note(&h, CHILD_EXIT_SICK, now);

        assert_int_equal(hold, SEC(expect[i]));
        assert_int_equal(h.failures, (int)i + 1);
        assert_false(grows(&h, now + hold - 1));
        assert_true(grows(&h, now + hold));
        /* Each sick child exits as soon as the hold lets it start. */
        now += hold;
    }
}

static void test_normal_exit_resets(void **state)
{
    bucket_health h = { 0, 0, 0 };
    apr_time_t now = SEC(1000);

    (void)state;
    child_exit_note(&h, CHILD_EXIT_SICK, now);
    child_exit_note(&h, CHILD_EXIT_SICK, now);
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_NORMAL, now), 0);
    assert_int_equal(h.failures, 0);
    assert_true(grows(&h, now));
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_SICK, now), SEC(1));
}

static void test_old_failures_forgotten(void **state)
{
    bucket_health h = { 0, 0, 0 };
    apr_time_t now = SEC(1000);

    (void)state;
    child_exit_note(&h, CHILD_EXIT_CRASH, now);
    child_exit_note(&h, CHILD_EXIT_CRASH, now);
    /* A crash an hour later is a first crash again. */
    now += SEC(3600);
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_CRASH, now), 0);
    assert_int_equal(h.failures, 1);
    /* Within the window they add up. */
    now += EXIT_FAILURE_WINDOW;
    assert_int_equal(child_exit_note(&h, CHILD_EXIT_CRASH, now), SEC(1));
}

static void test_crashes_while_serving_cost_no_back_off(void **state)
{
    bucket_health h = { 0, 0, 0 };
    apr_time_t now = SEC(1000);
    int i;

    (void)state;
    /* A module that crashes on some requests: each such child is replaced
     * at once, however many there are, as stock prefork does. */
    for (i = 0; i < 100; i++) {
        assert_int_equal(child_exit_note(&h, CHILD_EXIT_CRASH_SERVING,
                                         now + i), 0);
        assert_true(grows(&h, now + i));
    }
    assert_int_equal(h.failures, 0);
    /* They neither count towards a back-off nor clear one. */
    child_exit_note(&h, CHILD_EXIT_SICK, now + 100);
    child_exit_note(&h, CHILD_EXIT_CRASH_SERVING, now + 101);
    assert_int_equal(h.failures, 1);
    assert_false(grows(&h, now + 102));
}

static void test_back_off_keeps_a_floor_child(void **state)
{
    bucket_health h = { 0, 0, 0 };
    apr_time_t now = SEC(1000);
    int i;

    (void)state;
    for (i = 0; i < 8; i++) {
        child_exit_note(&h, CHILD_EXIT_SICK, now);
    }
    /* Held for a minute: a bucket with children gains none ... */
    assert_int_equal(bucket_health_grow_limit(&h, 1, now + SEC(30)), 0);
    /* ... one left with none gets one child, a second after the failure,
     * and only one at a time. */
    assert_int_equal(bucket_health_grow_limit(&h, 0, now + SEC(1) - 1), 0);
    assert_int_equal(bucket_health_grow_limit(&h, 0, now + EXIT_FLOOR_RETRY),
                     1);
    assert_int_equal(bucket_health_grow_limit(&h, 1, now + EXIT_FLOOR_RETRY),
                     0);
    /* After the hold, anything. */
    assert_int_equal(bucket_health_grow_limit(&h, 0, h.hold_until),
                     EXIT_GROW_ANY);
}

static void test_which_set_up_failures_pass(void **state)
{
    (void)state;
    assert_true(child_setup_failure_passes(EMFILE));
    assert_true(child_setup_failure_passes(ENFILE));
    assert_true(child_setup_failure_passes(ENOMEM));
    assert_true(child_setup_failure_passes(EAGAIN));
    assert_false(child_setup_failure_passes(EINVAL));
    assert_false(child_setup_failure_passes(EPERM));
    assert_false(child_setup_failure_passes(EBADF));
}

static void test_max_connections_lapse_during_a_stop(void **state)
{
    (void)state;
    /* MaxConnectionsPerChild 3: the third connection is the last. */
    assert_true(child_takes_another(2, 3, 0));
    assert_false(child_takes_another(3, 3, 0));
    assert_false(child_takes_another(400, 3, 0));
    /* No limit. */
    assert_true(child_takes_another(400, 0, 0));
    assert_true(child_takes_another(400, -1, 0));
    /* A stop on held sockets: every child serves on, at any count. */
    assert_true(child_takes_another(3, 3, 1));
    assert_true(child_takes_another(400, 3, 1));
    /* Counts past a signed limit's range. */
    assert_false(child_takes_another(0x80000000u, 3, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_classify),
        POOL_TEST(test_first_crash_replaced_at_once),
        POOL_TEST(test_sick_backs_off_and_caps),
        POOL_TEST(test_normal_exit_resets),
        POOL_TEST(test_old_failures_forgotten),
        POOL_TEST(test_crashes_while_serving_cost_no_back_off),
        POOL_TEST(test_back_off_keeps_a_floor_child),
        POOL_TEST(test_which_set_up_failures_pass),
        POOL_TEST(test_max_connections_lapse_during_a_stop),
    };

    return RUN_POOL_TESTS(tests);
}
