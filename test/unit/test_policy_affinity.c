/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_affinity.c: unit tests of BucketAffinity: the directive's
 * values, when a bucket's children are kept on CPUs of their own, and
 * which CPUs, as many CPUs as buckets or not, with some CPUs not allowed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "policy_affinity.h"
#include "unit_test.h"

static void test_parse(void **state)
{
    affinity_e a = AFFINITY_OFF;
    const char *err;

    assert_null(affinity_parse(*state, "BucketAffinity", "AUTO", &a));
    assert_int_equal(a, AFFINITY_AUTO);
    assert_null(affinity_parse(*state, "BucketAffinity", "on", &a));
    assert_int_equal(a, AFFINITY_ON);
    assert_null(affinity_parse(*state, "BucketAffinity", "Off", &a));
    assert_int_equal(a, AFFINITY_OFF);
    err = affinity_parse(*state, "BucketAffinity", "yes", &a);
    assert_string_equal(err, "BucketAffinity must be one of auto, on, off, "
                             "not 'yes'");
    assert_int_equal(a, AFFINITY_OFF);
}

/* auto: kept under cpu steering in both models and for the event model
 * under load; never under the hash. on and off override it. */
static void test_choose(void **state)
{
    static const steering_e modes[] = { STEERING_HASH, STEERING_CPU,
                                        STEERING_LOAD };
    apr_size_t i;

    (void)state;
    for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        assert_true(affinity_choose(AFFINITY_ON, CHILD_MODEL_PREFORK,
                                    modes[i]).kept);
        assert_false(affinity_choose(AFFINITY_OFF, CHILD_MODEL_EVENT,
                                     modes[i]).kept);
    }
    assert_true(affinity_choose(AFFINITY_AUTO, CHILD_MODEL_PREFORK,
                                STEERING_CPU).kept);
    assert_true(affinity_choose(AFFINITY_AUTO, CHILD_MODEL_EVENT,
                                STEERING_CPU).kept);
    assert_true(affinity_choose(AFFINITY_AUTO, CHILD_MODEL_EVENT,
                                STEERING_LOAD).kept);
    assert_false(affinity_choose(AFFINITY_AUTO, CHILD_MODEL_PREFORK,
                                 STEERING_LOAD).kept);
    assert_false(affinity_choose(AFFINITY_AUTO, CHILD_MODEL_EVENT,
                                 STEERING_HASH).kept);
    assert_non_null(strstr(affinity_choose(AFFINITY_AUTO, CHILD_MODEL_EVENT,
                                           STEERING_LOAD).reason,
                           "event model under load steering"));
}

static const char *cpus_of(apr_pool_t *p, const int *allowed, int n_allowed,
                           steering_e steering, int bucket, int num_buckets)
{
    int cpus[64];
    int n = affinity_bucket_cpus(allowed, n_allowed, steering, bucket,
                                 num_buckets, cpus);

    return affinity_cpu_list(p, cpus, n);
}

/* As many CPUs as buckets: one each, in order. */
static void test_one_cpu_per_bucket(void **state)
{
    static const int allowed[] = { 0, 1, 2, 3 };

    assert_string_equal(cpus_of(*state, allowed, 4, STEERING_LOAD, 0, 4),
                        "0");
    assert_string_equal(cpus_of(*state, allowed, 4, STEERING_LOAD, 3, 4),
                        "3");
    assert_string_equal(cpus_of(*state, allowed, 4, STEERING_CPU, 2, 4),
                        "2");
}

/* More CPUs than buckets: every num_buckets-th; an uneven split gives the
 * first buckets one more. */
static void test_more_cpus_than_buckets(void **state)
{
    static const int allowed[] = { 0, 1, 2, 3, 4, 5, 6 };

    assert_string_equal(cpus_of(*state, allowed, 6, STEERING_LOAD, 0, 2),
                        "0,2,4");
    assert_string_equal(cpus_of(*state, allowed, 6, STEERING_LOAD, 1, 2),
                        "1,3,5");
    assert_string_equal(cpus_of(*state, allowed, 7, STEERING_LOAD, 0, 3),
                        "0,3,6");
    assert_string_equal(cpus_of(*state, allowed, 7, STEERING_LOAD, 2, 3),
                        "2,5");
}

/* Fewer CPUs than buckets (BucketCount above the CPUs): buckets share
 * them round-robin. */
static void test_fewer_cpus_than_buckets(void **state)
{
    static const int allowed[] = { 4, 9 };

    assert_string_equal(cpus_of(*state, allowed, 2, STEERING_LOAD, 0, 3),
                        "4");
    assert_string_equal(cpus_of(*state, allowed, 2, STEERING_LOAD, 1, 3),
                        "9");
    assert_string_equal(cpus_of(*state, allowed, 2, STEERING_LOAD, 2, 3),
                        "4");
}

/* A cpuset or taskset leaves gaps: the allowed CPUs are divided by their
 * order, not their numbers, except under cpu steering, where a bucket
 * keeps the allowed CPUs whose connections it gets. */
static void test_allowed_cpus_with_gaps(void **state)
{
    static const int allowed[] = { 2, 3, 6, 7 };
    static const int odd_only[] = { 1, 3 };

    assert_string_equal(cpus_of(*state, allowed, 4, STEERING_LOAD, 0, 2),
                        "2,6");
    assert_string_equal(cpus_of(*state, allowed, 4, STEERING_LOAD, 1, 2),
                        "3,7");
    assert_string_equal(cpus_of(*state, allowed, 4, STEERING_CPU, 0, 2),
                        "2,6");
    assert_string_equal(cpus_of(*state, odd_only, 2, STEERING_CPU, 1, 2),
                        "1,3");
    /* none of bucket 0's CPUs allowed: the order's share */
    assert_string_equal(cpus_of(*state, odd_only, 2, STEERING_CPU, 0, 2),
                        "1");
}

static void test_nothing_to_divide(void **state)
{
    static const int allowed[] = { 0, 1 };
    int cpus[4];

    (void)state;
    assert_int_equal(affinity_bucket_cpus(allowed, 0, STEERING_LOAD, 0, 2,
                                          cpus), 0);
    assert_int_equal(affinity_bucket_cpus(allowed, 2, STEERING_LOAD, 2, 2,
                                          cpus), 0);
    assert_int_equal(affinity_bucket_cpus(allowed, 2, STEERING_LOAD, 0, 0,
                                          cpus), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_parse),
        POOL_TEST(test_choose),
        POOL_TEST(test_one_cpu_per_bucket),
        POOL_TEST(test_more_cpus_than_buckets),
        POOL_TEST(test_fewer_cpus_than_buckets),
        POOL_TEST(test_allowed_cpus_with_gaps),
        POOL_TEST(test_nothing_to_divide),
    };

    return RUN_POOL_TESTS(tests);
}
