/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unit_test.h: what every cmocka test of the pure policy files shares: APR
 * set up once per binary, a fresh pool per test (passed as *state), and a
 * few assertions. Include after <cmocka.h>.
 */
#ifndef UNIT_TEST_H
#define UNIT_TEST_H

#include <string.h>

#include "apr_general.h"
#include "apr_pools.h"

/* Fails with a case description, so a table row that breaks says which. */
#define CASE_CHECK(desc, cond) \
    do { \
        if (!(cond)) { \
            fail_msg("%s: expected %s", (desc), #cond); \
        } \
    } while (0)

/* A test that gets its own pool in *state. */
#define POOL_TEST(f) \
    cmocka_unit_test_setup_teardown(f, unit_pool_setup, unit_pool_teardown)

/* Runs tests[] with APR initialised around the whole group. */
#define RUN_POOL_TESTS(tests) \
    cmocka_run_group_tests(tests, unit_group_setup, unit_group_teardown)

static inline int unit_group_setup(void **state)
{
    (void)state;
    return apr_initialize() == APR_SUCCESS ? 0 : -1;
}

static inline int unit_group_teardown(void **state)
{
    (void)state;
    apr_terminate();
    return 0;
}

static inline int unit_pool_setup(void **state)
{
    apr_pool_t *pool;

    if (apr_pool_create(&pool, NULL) != APR_SUCCESS) {
        return -1;
    }
    *state = pool;
    return 0;
}

static inline int unit_pool_teardown(void **state)
{
    apr_pool_destroy(*state);
    return 0;
}

static inline void assert_contains(const char *haystack, const char *needle)
{
    if (haystack == NULL || strstr(haystack, needle) == NULL) {
        fail_msg("'%s' does not contain '%s'",
                 haystack ? haystack : "(null)", needle);
    }
}

static inline void assert_not_contains(const char *haystack,
                                       const char *needle)
{
    if (haystack == NULL || strstr(haystack, needle) != NULL) {
        fail_msg("'%s' contains '%s'", haystack ? haystack : "(null)",
                 needle);
    }
}

#endif /* UNIT_TEST_H */
