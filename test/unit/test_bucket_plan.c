/*
 * test_bucket_plan.c: unit tests of bucket planning and the slot-to-bucket
 * mapping. The expected bucket counts are computed here from the rule the
 * project documents, not read back from the implementation.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "apr_pools.h"
#include "apr_strings.h"

#include "bucket_plan.h"
#include "unit_test.h"

#define MAX_LISTENERS 8
#define MAX_BUCKETS 256

/* ---- independent model of the documented rules ---- */

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

static bucket_strategy_e expected_strategy(const bucket_plan_input *in)
{
    if (in->strategy == BUCKET_STRATEGY_AUTO) {
        return in->have_reuseport ? BUCKET_STRATEGY_REUSEPORT
                                  : BUCKET_STRATEGY_LISTEN;
    }
    return in->strategy;
}

/* reuseport: BucketCount if set, else online CPUs / ListenCoresBucketsRatio
 * (at least 1) if the ratio is set, else online CPUs; never fewer buckets
 * than Listen addresses; never more than MaxRequestWorkers. listen: one
 * per Listen, capped at MaxRequestWorkers. single: one. */
static int expected_buckets(const bucket_plan_input *in)
{
    int requested;

    switch (expected_strategy(in)) {
    case BUCKET_STRATEGY_SINGLE:
        return 1;
    case BUCKET_STRATEGY_LISTEN:
        return min_int(in->num_listeners, in->max_workers);
    default:
        if (in->bucket_count > 0) {
            requested = in->bucket_count;
        }
        else if (in->cores_buckets_ratio > 0) {
            requested = max_int(1, in->online_cpus / in->cores_buckets_ratio);
        }
        else {
            requested = in->online_cpus;
        }
        return min_int(max_int(requested, in->num_listeners),
                       in->max_workers);
    }
}

static void describe_input(char *buf, size_t len, const bucket_plan_input *in)
{
    snprintf(buf, len, "strategy=%s reuseport=%d listeners=%d "
             "BucketCount=%d ratio=%d cpus=%d max_workers=%d",
             bucket_strategy_name(in->strategy), in->have_reuseport,
             in->num_listeners, in->bucket_count, in->cores_buckets_ratio,
             in->online_cpus, in->max_workers);
}

static bucket_plan_input make_input(bucket_strategy_e strategy,
                                    int have_reuseport, int listeners,
                                    int bucket_count, int max_workers)
{
    bucket_plan_input in;

    memset(&in, 0, sizeof(in));
    in.strategy = strategy;
    in.have_reuseport = have_reuseport;
    in.num_listeners = listeners;
    in.bucket_count = bucket_count;
    in.online_cpus = 4;
    in.max_workers = max_workers;
    return in;
}

static bucket_plan make_ok(apr_pool_t *p, const bucket_plan_input *in)
{
    bucket_plan plan;
    const char *err = bucket_plan_make(p, in, &plan);

    if (err != NULL) {
        fail_msg("unexpected error: %s", err);
    }
    return plan;
}

static const char *make_err(apr_pool_t *p, const bucket_plan_input *in)
{
    bucket_plan plan;
    const char *err = bucket_plan_make(p, in, &plan);

    assert_non_null(err);
    return err;
}

/* How many buckets each listener appears in. */
static void count_per_listener(const bucket_plan *plan,
                               int counts[MAX_LISTENERS])
{
    int b, s;

    memset(counts, 0, sizeof(int) * MAX_LISTENERS);
    for (b = 0; b < plan->num_buckets; b++) {
        for (s = 0; s < plan->buckets[b].num_sockets; s++) {
            counts[plan->buckets[b].sockets[s].listener]++;
        }
    }
}

/* Checks every structural invariant of a plan made from in. */
static void check_invariants(const char *desc, const bucket_plan_input *in,
                             const bucket_plan *plan)
{
    int seen[MAX_LISTENERS][MAX_BUCKETS];
    int per_listener[MAX_LISTENERS];
    int b, s, l, d, real_max = 0, min_sockets = -1;
    int nb = plan->num_buckets;
    bucket_strategy_e chosen = expected_strategy(in);

    memset(seen, 0, sizeof(seen));
    CASE_CHECK(desc, plan->strategy == chosen);
    CASE_CHECK(desc, plan->reason != NULL && plan->reason[0] != '\0');
    CASE_CHECK(desc, nb == expected_buckets(in));
    CASE_CHECK(desc, nb >= 1 && nb <= in->max_workers);
    CASE_CHECK(desc, nb <= MAX_BUCKETS);
    CASE_CHECK(desc, plan->buckets != NULL);

    for (b = 0; b < nb; b++) {
        const bucket_def *def = &plan->buckets[b];

        CASE_CHECK(desc, def->num_sockets >= 1);
        real_max = max_int(real_max, def->num_sockets);
        min_sockets = min_sockets < 0 ? def->num_sockets
                                      : min_int(min_sockets, def->num_sockets);
        for (s = 0; s < def->num_sockets; s++) {
            int lis = def->sockets[s].listener;
            int dup = def->sockets[s].duplicate;
            int t;

            CASE_CHECK(desc, lis >= 0 && lis < in->num_listeners);
            CASE_CHECK(desc, dup >= 0 && dup < nb);
            seen[lis][dup]++;
            /* No bucket accepts twice on one address. */
            for (t = 0; t < s; t++) {
                CASE_CHECK(desc, def->sockets[t].listener != lis);
            }
            if (chosen != BUCKET_STRATEGY_REUSEPORT || !in->have_reuseport) {
                CASE_CHECK(desc, dup == 0);
            }
        }
        /* Every bucket gets at least one child of MaxRequestWorkers. */
        CASE_CHECK(desc, bucket_share(in->max_workers, b, nb) >= 1);
    }
    CASE_CHECK(desc, plan->max_sockets_per_bucket == real_max);
    /* Sockets are spread evenly over the buckets. */
    CASE_CHECK(desc, real_max - min_sockets <= 1);

    count_per_listener(plan, per_listener);
    for (l = 0; l < in->num_listeners; l++) {
        /* Present, with ordinals 0..k-1 each exactly once. */
        CASE_CHECK(desc, per_listener[l] >= 1);
        for (d = 0; d < nb; d++) {
            CASE_CHECK(desc, seen[l][d] == (d < per_listener[l] ? 1 : 0));
        }
        /* Buckets are spread evenly over the listeners. */
        for (d = 0; d < in->num_listeners; d++) {
            CASE_CHECK(desc, per_listener[l] - per_listener[d] <= 1);
        }
    }

    if (chosen == BUCKET_STRATEGY_REUSEPORT && nb >= in->num_listeners) {
        CASE_CHECK(desc, real_max == 1);
    }
    if (chosen == BUCKET_STRATEGY_SINGLE) {
        CASE_CHECK(desc, plan->buckets[0].num_sockets == in->num_listeners);
    }
}

/* ---- the table ---- */

static void test_plan_table(void **state)
{
    static const int reuseport[] = { 0, 1 };
    static const int listeners[] = { 1, 2, 5 };
    static const int counts[] = { 0, 1, 2, 4, 8 };
    static const int workers[] = { 1, 2, 3, 8, 256 };
    static const int ratios[] = { 0, 2, 8 };
    static const bucket_strategy_e strategies[] = {
        BUCKET_STRATEGY_AUTO, BUCKET_STRATEGY_REUSEPORT,
        BUCKET_STRATEGY_LISTEN, BUCKET_STRATEGY_SINGLE
    };
    apr_pool_t *sub;
    size_t r, l, c, w, q, s;
    int planned = 0, refused = 0;

    assert_int_equal(apr_pool_create(&sub, *state), APR_SUCCESS);
    for (r = 0; r < sizeof(reuseport) / sizeof(reuseport[0]); r++)
    for (l = 0; l < sizeof(listeners) / sizeof(listeners[0]); l++)
    for (c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
    for (w = 0; w < sizeof(workers) / sizeof(workers[0]); w++)
    for (q = 0; q < sizeof(ratios) / sizeof(ratios[0]); q++)
    for (s = 0; s < sizeof(strategies) / sizeof(strategies[0]); s++) {
        bucket_plan_input in = make_input(strategies[s], reuseport[r],
                                          listeners[l], counts[c],
                                          workers[w]);
        int too_many = in.bucket_count > in.max_workers;
        int no_kernel = in.strategy == BUCKET_STRATEGY_REUSEPORT
                        && !in.have_reuseport;
        bucket_plan plan;
        const char *err;
        char desc[256];

        in.cores_buckets_ratio = ratios[q];
        describe_input(desc, sizeof(desc), &in);
        apr_pool_clear(sub);
        err = bucket_plan_make(sub, &in, &plan);

        if (!too_many && !no_kernel) {
            if (err != NULL) {
                fail_msg("%s: unexpected error: %s", desc, err);
            }
            check_invariants(desc, &in, &plan);
            planned++;
            continue;
        }
        /* Either refusal is right when both apply. */
        CASE_CHECK(desc, err != NULL);
        if (too_many && (!no_kernel || strstr(err, "BucketCount"))) {
            CASE_CHECK(desc, strstr(err, "BucketCount") != NULL);
            CASE_CHECK(desc, strstr(err, apr_itoa(sub, in.bucket_count)));
            CASE_CHECK(desc, strstr(err, apr_itoa(sub, in.max_workers)));
        }
        else {
            CASE_CHECK(desc, strstr(err, "SO_REUSEPORT") != NULL);
        }
        refused++;
    }
    /* The table really exercised both outcomes. */
    assert_true(planned > 1000);
    assert_true(refused > 100);
}

/* ---- hand-written exact cases ---- */

/* The duplicate ordinals of listener lis, in bucket order. */
static int duplicates_of(const bucket_plan *plan, int lis, int *dups)
{
    int b, s, n = 0;

    for (b = 0; b < plan->num_buckets; b++) {
        for (s = 0; s < plan->buckets[b].num_sockets; s++) {
            if (plan->buckets[b].sockets[s].listener == lis) {
                dups[n++] = plan->buckets[b].sockets[s].duplicate;
            }
        }
    }
    return n;
}

static void assert_bucket_holds(const bucket_plan *plan, int b,
                                const int *listeners, int n)
{
    int s;

    assert_int_equal(plan->buckets[b].num_sockets, n);
    for (s = 0; s < n; s++) {
        assert_int_equal(plan->buckets[b].sockets[s].listener, listeners[s]);
        assert_int_equal(plan->buckets[b].sockets[s].duplicate, 0);
    }
}

static void test_reuseport_two_listeners_five_buckets(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 1, 2, 5, 256);
    bucket_plan plan = make_ok(*state, &in);
    int dups[8], b;

    assert_int_equal(plan.strategy, BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(plan.num_buckets, 5);
    assert_int_equal(plan.max_sockets_per_bucket, 1);
    for (b = 0; b < 5; b++) {
        assert_int_equal(plan.buckets[b].num_sockets, 1);
    }
    /* 5 buckets over 2 addresses: 3 and 2, duplicates numbered in order. */
    assert_int_equal(duplicates_of(&plan, 0, dups), 3);
    assert_int_equal(dups[0], 0);
    assert_int_equal(dups[1], 1);
    assert_int_equal(dups[2], 2);
    assert_int_equal(duplicates_of(&plan, 1, dups), 2);
    assert_int_equal(dups[0], 0);
    assert_int_equal(dups[1], 1);
}

static void test_listen_five_listeners_two_workers(void **state)
{
    static const int even[] = { 0, 2, 4 };
    static const int odd[] = { 1, 3 };
    bucket_plan_input in = make_input(BUCKET_STRATEGY_LISTEN, 1, 5, 0, 2);
    bucket_plan plan = make_ok(*state, &in);

    assert_int_equal(plan.strategy, BUCKET_STRATEGY_LISTEN);
    assert_int_equal(plan.num_buckets, 2);
    assert_bucket_holds(&plan, 0, even, 3);
    assert_bucket_holds(&plan, 1, odd, 2);
    /* Several sockets in one bucket: an accept mutex is needed. */
    assert_int_equal(plan.max_sockets_per_bucket, 3);
}

static void test_listen_one_bucket_per_address(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_LISTEN, 1, 5, 8, 256);
    bucket_plan plan = make_ok(*state, &in);
    int b;

    /* BucketCount has no say under listen. */
    assert_int_equal(plan.num_buckets, 5);
    assert_int_equal(plan.max_sockets_per_bucket, 1);
    for (b = 0; b < 5; b++) {
        assert_bucket_holds(&plan, b, &b, 1);
    }
}

static void test_reuseport_fewer_workers_than_listeners(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 1, 5, 0, 2);
    bucket_plan plan = make_ok(*state, &in);
    int dups[8], l;

    assert_int_equal(plan.num_buckets, 2);
    assert_int_equal(plan.max_sockets_per_bucket, 3);
    assert_int_equal(plan.buckets[0].num_sockets
                     + plan.buckets[1].num_sockets, 5);
    /* Each address is in exactly one bucket, on its original socket. */
    for (l = 0; l < 5; l++) {
        assert_int_equal(duplicates_of(&plan, l, dups), 1);
        assert_int_equal(dups[0], 0);
    }
}

static void test_single_holds_everything(void **state)
{
    static const int all[] = { 0, 1, 2 };
    bucket_plan_input in = make_input(BUCKET_STRATEGY_SINGLE, 1, 3, 0, 256);
    bucket_plan plan = make_ok(*state, &in);

    assert_int_equal(plan.strategy, BUCKET_STRATEGY_SINGLE);
    assert_int_equal(plan.num_buckets, 1);
    assert_bucket_holds(&plan, 0, all, 3);
    assert_int_equal(plan.max_sockets_per_bucket, 3);

    in.num_listeners = 1;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.num_buckets, 1);
    assert_int_equal(plan.max_sockets_per_bucket, 1);
}

static void test_auto_follows_kernel(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_AUTO, 1, 2, 0, 256);
    bucket_plan plan = make_ok(*state, &in);

    /* 4 CPUs, BucketCount auto: one bucket per CPU. */
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(plan.num_buckets, 4);
    assert_non_null(strstr(plan.reason, "auto"));

    in.have_reuseport = 0;
    in.bucket_count = 4;
    plan = make_ok(*state, &in);
    /* Falls back to one bucket per Listen, BucketCount notwithstanding. */
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_LISTEN);
    assert_int_equal(plan.num_buckets, 2);
    assert_non_null(strstr(plan.reason, "SO_REUSEPORT"));
}

static int buckets_for_ratio(apr_pool_t *p, int cpus, int ratio,
                             int bucket_count)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 1, 1,
                                      bucket_count, 256);
    bucket_plan plan;

    in.online_cpus = cpus;
    in.cores_buckets_ratio = ratio;
    plan = make_ok(p, &in);
    return plan.num_buckets;
}

static void test_cores_buckets_ratio(void **state)
{
    /* Honoured while BucketCount is auto: 8 CPUs / ratio. */
    assert_int_equal(buckets_for_ratio(*state, 8, 0, 0), 8);
    assert_int_equal(buckets_for_ratio(*state, 8, 2, 0), 4);
    assert_int_equal(buckets_for_ratio(*state, 8, 3, 0), 2);
    assert_int_equal(buckets_for_ratio(*state, 8, 1, 0), 8);
    /* A ratio above the CPU count still leaves one bucket. */
    assert_int_equal(buckets_for_ratio(*state, 8, 16, 0), 1);
    /* Ignored once BucketCount is set. */
    assert_int_equal(buckets_for_ratio(*state, 8, 2, 6), 6);
    assert_int_equal(buckets_for_ratio(*state, 8, 16, 3), 3);
}

static void test_unknown_cpu_count(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 1, 1, 0, 256);
    bucket_plan plan;

    /* No CPU count known: still a usable plan with at least one bucket
     * per address. */
    in.online_cpus = 0;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.num_buckets, 1);
    in.num_listeners = 3;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.num_buckets, 3);
}

static void test_errors(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 0, 2, 0, 256);
    const char *err;

    err = make_err(*state, &in);
    assert_non_null(strstr(err, "SO_REUSEPORT"));

    in = make_input(BUCKET_STRATEGY_AUTO, 1, 2, 9, 8);
    err = make_err(*state, &in);
    assert_non_null(strstr(err, "BucketCount"));
    assert_non_null(strstr(err, "9"));
    assert_non_null(strstr(err, "1 to 8"));

    in = make_input(BUCKET_STRATEGY_AUTO, 1, 0, 0, 256);
    err = make_err(*state, &in);
    assert_non_null(strstr(err, "Listen"));

    in = make_input(BUCKET_STRATEGY_AUTO, 1, 1, 0, 0);
    err = make_err(*state, &in);
    assert_non_null(strstr(err, "MaxRequestWorkers"));
}

static void test_strategy_names(void **state)
{
    (void)state;
    assert_string_equal(bucket_strategy_name(BUCKET_STRATEGY_AUTO), "auto");
    assert_string_equal(bucket_strategy_name(BUCKET_STRATEGY_REUSEPORT),
                        "reuseport");
    assert_string_equal(bucket_strategy_name(BUCKET_STRATEGY_LISTEN),
                        "listen");
    assert_string_equal(bucket_strategy_name(BUCKET_STRATEGY_SINGLE),
                        "single");
}

/* ---- slot-to-bucket mapping ---- */

static void test_slot_mapping(void **state)
{
    static const int totals[] = { 0, 1, 2, 3, 7, 8, 255, 256, 1000 };
    static const int buckets[] = { 1, 2, 3, 4, 5, 8, 16 };
    size_t t, n;

    (void)state;
    for (t = 0; t < sizeof(totals) / sizeof(totals[0]); t++)
    for (n = 0; n < sizeof(buckets) / sizeof(buckets[0]); n++) {
        int total = totals[t], nb = buckets[n];
        int by_slot[16] = { 0 };
        int b, slot, sum = 0, lo = total, hi = 0;
        char desc[64];

        snprintf(desc, sizeof(desc), "total=%d buckets=%d", total, nb);
        for (slot = 0; slot < total; slot++) {
            b = bucket_of_slot(slot, nb);
            CASE_CHECK(desc, b >= 0 && b < nb);
            by_slot[b]++;
        }
        for (b = 0; b < nb; b++) {
            int share = bucket_share(total, b, nb);

            CASE_CHECK(desc, share == by_slot[b]);
            sum += share;
            lo = min_int(lo, share);
            hi = max_int(hi, share);
        }
        CASE_CHECK(desc, sum == total);
        CASE_CHECK(desc, hi - lo <= 1);
    }
}

static void test_slot_mapping_round_robin(void **state)
{
    (void)state;
    /* Consecutive slots land in consecutive buckets, wrapping around,
     * also past MaxRequestWorkers (ServerLimit may be larger). */
    assert_int_equal(bucket_of_slot(0, 3), 0);
    assert_int_equal(bucket_of_slot(1, 3), 1);
    assert_int_equal(bucket_of_slot(2, 3), 2);
    assert_int_equal(bucket_of_slot(3, 3), 0);
    assert_int_equal(bucket_of_slot(199999, 4), 3);
    /* 10 children over 4 buckets: 3, 3, 2, 2. */
    assert_int_equal(bucket_share(10, 0, 4), 3);
    assert_int_equal(bucket_share(10, 1, 4), 3);
    assert_int_equal(bucket_share(10, 2, 4), 2);
    assert_int_equal(bucket_share(10, 3, 4), 2);
    /* No buckets yet: everything maps to bucket 0, no division by zero. */
    assert_int_equal(bucket_of_slot(5, 0), 0);
    assert_int_equal(bucket_share(7, 0, 0), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_plan_table),
        POOL_TEST(test_reuseport_two_listeners_five_buckets),
        POOL_TEST(test_listen_five_listeners_two_workers),
        POOL_TEST(test_listen_one_bucket_per_address),
        POOL_TEST(test_reuseport_fewer_workers_than_listeners),
        POOL_TEST(test_single_holds_everything),
        POOL_TEST(test_auto_follows_kernel),
        POOL_TEST(test_cores_buckets_ratio),
        POOL_TEST(test_unknown_cpu_count),
        POOL_TEST(test_errors),
        POOL_TEST(test_strategy_names),
        POOL_TEST(test_slot_mapping),
        POOL_TEST(test_slot_mapping_round_robin),
    };

    return RUN_POOL_TESTS(tests);
}
