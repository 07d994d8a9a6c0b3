/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_upgrade.c: unit tests of whether a build takes over the
 * state a running server kept: the same layout, another, none named.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy_upgrade.h"
#include "unit_test.h"

#define MAGIC 0x424b5354u

static void test_first_start(void **state)
{
    state_seen seen = { 0 };
    const char *why;

    assert_int_equal(state_compare(*state, &seen, MAGIC, 3, 400, &why),
                     STATE_FIRST_START);
    assert_null(why);
}

static void test_same_layout_is_taken(void **state)
{
    state_seen seen = { 1, MAGIC, 3, 400, 0 };
    const char *why;

    assert_int_equal(state_compare(*state, &seen, MAGIC, 3, 400, &why),
                     STATE_SAME_LAYOUT);
    assert_null(why);
    /* A build from before layouts had left its key too: the header wins. */
    seen.unversioned_found = 1;
    assert_int_equal(state_compare(*state, &seen, MAGIC, 3, 400, &why),
                     STATE_SAME_LAYOUT);
}

static void test_other_layout_or_size_is_not_read(void **state)
{
    static const state_seen cases[] = {
        { 1, MAGIC, 2, 400, 0 },      /* another number */
        { 1, MAGIC, 3, 408, 0 },      /* same number, another size */
        { 1, 0x1234u, 3, 400, 0 },    /* not bucketed's header */
    };
    apr_size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *why;
        assert_int_equal(state_compare(*state, &cases[i], MAGIC, 3, 400,
                                       &why), STATE_OTHER_LAYOUT);
        assert_non_null(why);
    }
}

static void test_message_names_both_layouts(void **state)
{
    state_seen seen = { 1, MAGIC, 2, 392, 0 };
    const char *why;

    state_compare(*state, &seen, MAGIC, 3, 400, &why);
    assert_non_null(strstr(why, "layout 2 (392 bytes)"));
    assert_non_null(strstr(why, "layout 3 (400 bytes)"));
}

static void test_unversioned_build(void **state)
{
    state_seen seen = { 0, 0, 0, 0, 1 };
    const char *why;

    assert_int_equal(state_compare(*state, &seen, MAGIC, 3, 400, &why),
                     STATE_UNVERSIONED);
    assert_non_null(strstr(why, "before state layouts were named"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_first_start),
        POOL_TEST(test_same_layout_is_taken),
        POOL_TEST(test_other_layout_or_size_is_not_read),
        POOL_TEST(test_message_names_both_layouts),
        POOL_TEST(test_unversioned_build),
    };

    return RUN_POOL_TESTS(tests);
}
