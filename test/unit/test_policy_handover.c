/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_handover.c: unit tests of the graceful restart's handover:
 * which idle old children keep accepting, and when they leave.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy_handover.h"
#include "unit_test.h"

#define T0 apr_time_from_sec(1000)

static void test_every_second_idle_child_of_a_bucket_stays(void **state)
{
    int nth, kept = 0;

    (void)state;
    for (nth = 0; nth < 10; nth++) {
        kept += handover_keeps(1, 0, 2, nth);
    }
    assert_int_equal(kept, 5);
    /* The first one always makes room: a bucket with one idle old child
     * and no free slot gets its new child at once. */
    assert_false(handover_keeps(1, 0, 2, 0));
    assert_true(handover_keeps(1, 1, 2, 1));
}

static void test_a_bucket_the_new_plan_dropped_keeps_none(void **state)
{
    int nth;

    (void)state;
    for (nth = 0; nth < 10; nth++) {
        CASE_CHECK("bucket 2 of a 2-bucket plan",
                   !handover_keeps(1, 2, 2, nth));
        CASE_CHECK("no bucket", !handover_keeps(1, -1, 2, nth));
    }
}

static void test_the_event_model_keeps_none(void **state)
{
    int nth;

    (void)state;
    for (nth = 0; nth < 10; nth++) {
        CASE_CHECK("event model", !handover_keeps(0, 0, 2, nth));
    }
}

static void test_kept_children_leave_once_as_many_new_are_ready(void **state)
{
    apr_time_t deadline = T0 + HANDOVER_MAX_WAIT;

    (void)state;
    assert_false(handover_releases(4, 0, T0, deadline));
    assert_false(handover_releases(4, 3, T0, deadline));
    assert_true(handover_releases(4, 4, T0, deadline));
    assert_true(handover_releases(4, 9, T0, deadline));
}

static void test_kept_children_leave_at_the_deadline(void **state)
{
    apr_time_t deadline = T0 + HANDOVER_MAX_WAIT;

    (void)state;
    assert_false(handover_releases(4, 0, deadline - 1, deadline));
    assert_true(handover_releases(4, 0, deadline, deadline));
}

static void test_nothing_kept_nothing_to_release(void **state)
{
    (void)state;
    assert_false(handover_releases(0, 0, T0 + HANDOVER_MAX_WAIT, T0));
    assert_false(handover_releases(0, 5, T0, T0 + HANDOVER_MAX_WAIT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_second_idle_child_of_a_bucket_stays),
        cmocka_unit_test(test_a_bucket_the_new_plan_dropped_keeps_none),
        cmocka_unit_test(test_the_event_model_keeps_none),
        cmocka_unit_test(
            test_kept_children_leave_once_as_many_new_are_ready),
        cmocka_unit_test(test_kept_children_leave_at_the_deadline),
        cmocka_unit_test(test_nothing_kept_nothing_to_release),
    };

    return RUN_POOL_TESTS(tests);
}
