/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_plan.c: unit tests of bucket planning and the slot-to-bucket
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

#include "policy_plan.h"
#include "unit_test.h"

#define MAX_LISTENERS 32
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
    if (in->one_process) {
        return BUCKET_STRATEGY_SINGLE;
    }
    if (in->strategy == BUCKET_STRATEGY_AUTO) {
        if (in->cores_buckets_ratio == 0 && in->bucket_count == 0) {
            return BUCKET_STRATEGY_LISTEN;
        }
        return in->have_reuseport ? BUCKET_STRATEGY_REUSEPORT
                                  : BUCKET_STRATEGY_LISTEN;
    }
    return in->strategy;
}

/* Most buckets that leave each two children of MaxRequestWorkers. */
static int expected_cap(const bucket_plan_input *in)
{
    return max_int(1, in->max_workers / 2);
}

/* The buckets asked for before the cap. reuseport: BucketCount if set,
 * else online CPUs / ListenCoresBucketsRatio (at least 1) if the ratio is
 * set, else online CPUs. listen: one per Listen. single: one. */
static int wanted_buckets(const bucket_plan_input *in)
{
    switch (expected_strategy(in)) {
    case BUCKET_STRATEGY_SINGLE:
        return 1;
    case BUCKET_STRATEGY_LISTEN:
        return in->num_listeners;
    default:
        if (in->bucket_count > 0) {
            return in->bucket_count;
        }
        if (in->cores_buckets_ratio > 0) {
            return max_int(1, max_int(in->online_cpus, 1)
                              / in->cores_buckets_ratio);
        }
        return max_int(in->online_cpus, 1);
    }
}

/* The cap applies unless BucketCount set the count for reuseport. */
static int expected_buckets(const bucket_plan_input *in)
{
    if (expected_strategy(in) == BUCKET_STRATEGY_REUSEPORT
        && in->bucket_count > 0) {
        return in->bucket_count;
    }
    return min_int(wanted_buckets(in), expected_cap(in));
}

static void describe_input(char *buf, size_t len, const bucket_plan_input *in)
{
    snprintf(buf, len, "strategy=%s reuseport=%d listeners=%d "
             "BucketCount=%d ratio=%d cpus=%d max_workers=%d -X=%d",
             bucket_strategy_name(in->strategy), in->have_reuseport,
             in->num_listeners, in->bucket_count, in->cores_buckets_ratio,
             in->online_cpus, in->max_workers, in->one_process);
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
    in.cores_buckets_ratio = BUCKET_RATIO_UNSET;
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
    int per_listener[MAX_LISTENERS];
    int b, s, l, real_max = 0, min_sockets = -1, dups = 0;
    int nb = plan->num_buckets;
    bucket_strategy_e chosen = expected_strategy(in);

    CASE_CHECK(desc, plan->strategy == chosen);
    CASE_CHECK(desc, plan->reason != NULL && plan->reason[0] != '\0');
    CASE_CHECK(desc, nb == expected_buckets(in));
    CASE_CHECK(desc, nb >= 1 && nb <= in->max_workers);
    CASE_CHECK(desc, nb <= MAX_BUCKETS);
    CASE_CHECK(desc, plan->buckets != NULL);
    CASE_CHECK(desc, plan->capped == (nb < wanted_buckets(in)));
    /* Room for two children per bucket unless BucketCount said so. */
    if (in->bucket_count == 0 || chosen != BUCKET_STRATEGY_REUSEPORT) {
        CASE_CHECK(desc, nb == 1 || nb * 2 <= in->max_workers);
    }

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
            dups += dup > 0;
            /* No bucket accepts twice on one address. */
            for (t = 0; t < s; t++) {
                CASE_CHECK(desc, def->sockets[t].listener != lis);
            }
            if (chosen == BUCKET_STRATEGY_REUSEPORT) {
                /* Bucket b holds the b-th copy of every address. */
                CASE_CHECK(desc, lis == s && dup == b);
            }
            else {
                CASE_CHECK(desc, dup == 0);
            }
        }
        if (chosen == BUCKET_STRATEGY_REUSEPORT) {
            CASE_CHECK(desc, def->num_sockets == in->num_listeners);
        }
    }
    CASE_CHECK(desc, plan->max_sockets_per_bucket == real_max);
    CASE_CHECK(desc, plan->num_duplicates == dups);
    /* Sockets are spread evenly over the buckets. */
    CASE_CHECK(desc, real_max - min_sockets <= 1);

    count_per_listener(plan, per_listener);
    for (l = 0; l < in->num_listeners; l++) {
        /* Every address is served: by every bucket under reuseport, by
         * exactly one otherwise. */
        CASE_CHECK(desc, per_listener[l]
                         == (chosen == BUCKET_STRATEGY_REUSEPORT ? nb : 1));
    }
}

/* ---- the table ---- */

static void test_plan_table(void **state)
{
    static const int reuseport[] = { 0, 1 };
    static const int listeners[] = { 1, 2, 5, 8 };
    static const int counts[] = { 0, 1, 2, 4, 8 };
    static const int workers[] = { 1, 2, 3, 7, 8, 256 };
    static const int ratios[] = { BUCKET_RATIO_UNSET, 0, 2, 8 };
    static const int one_process[] = { 0, 1 };
    static const bucket_strategy_e strategies[] = {
        BUCKET_STRATEGY_AUTO, BUCKET_STRATEGY_REUSEPORT,
        BUCKET_STRATEGY_LISTEN, BUCKET_STRATEGY_SINGLE
    };
    apr_pool_t *sub;
    size_t r, l, c, w, q, s, x;
    int planned = 0, refused = 0;

    assert_int_equal(apr_pool_create(&sub, *state), APR_SUCCESS);
    for (r = 0; r < sizeof(reuseport) / sizeof(reuseport[0]); r++)
    for (l = 0; l < sizeof(listeners) / sizeof(listeners[0]); l++)
    for (c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
    for (w = 0; w < sizeof(workers) / sizeof(workers[0]); w++)
    for (q = 0; q < sizeof(ratios) / sizeof(ratios[0]); q++)
    for (s = 0; s < sizeof(strategies) / sizeof(strategies[0]); s++)
    for (x = 0; x < sizeof(one_process) / sizeof(one_process[0]); x++) {
        bucket_plan_input in = make_input(strategies[s], reuseport[r],
                                          listeners[l], counts[c],
                                          workers[w]);
        int too_many = in.bucket_count > in.max_workers;
        int no_kernel = in.strategy == BUCKET_STRATEGY_REUSEPORT
                        && !in.have_reuseport && !one_process[x];
        bucket_plan plan;
        const char *err;
        char desc[256];

        in.cores_buckets_ratio = ratios[q];
        in.one_process = one_process[x];
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
    assert_true(planned > 3000);
    assert_true(refused > 300);
}

/* ---- hand-written exact cases ---- */

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
    int b;

    assert_int_equal(plan.strategy, BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(plan.num_buckets, 5);
    assert_int_equal(plan.max_sockets_per_bucket, 2);
    assert_int_equal(plan.num_duplicates, 8);
    for (b = 0; b < 5; b++) {
        /* Both addresses in every bucket: a busy address is served by
         * every child. */
        assert_int_equal(plan.buckets[b].num_sockets, 2);
        assert_int_equal(plan.buckets[b].sockets[0].listener, 0);
        assert_int_equal(plan.buckets[b].sockets[0].duplicate, b);
        assert_int_equal(plan.buckets[b].sockets[1].listener, 1);
        assert_int_equal(plan.buckets[b].sockets[1].duplicate, b);
    }
}

static void test_listen_five_listeners_two_workers(void **state)
{
    static const int all[] = { 0, 1, 2, 3, 4 };
    bucket_plan_input in = make_input(BUCKET_STRATEGY_LISTEN, 1, 5, 0, 2);
    bucket_plan plan = make_ok(*state, &in);

    /* Two children: one bucket of two rather than two buckets of one. */
    assert_int_equal(plan.num_buckets, 1);
    assert_true(plan.capped);
    assert_bucket_holds(&plan, 0, all, 5);
}

static void test_listen_one_bucket_per_address(void **state)
{
    static const int one[] = { 0 }, two[] = { 1 }, three[] = { 2 };
    bucket_plan_input in = make_input(BUCKET_STRATEGY_LISTEN, 1, 3, 0, 256);
    bucket_plan plan = make_ok(*state, &in);

    assert_int_equal(plan.num_buckets, 3);
    assert_false(plan.capped);
    assert_bucket_holds(&plan, 0, one, 1);
    assert_bucket_holds(&plan, 1, two, 1);
    assert_bucket_holds(&plan, 2, three, 1);
}

/* httpd's own test framework: 32 ports, MaxRequestWorkers 7. */
static void test_many_ports_few_workers(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_AUTO, 1, 32, 0, 7);
    bucket_plan plan = make_ok(*state, &in);
    int b;

    /* reuseport: 4 CPUs asked, 3 buckets of at least two children, each
     * on all 32 addresses. */
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(plan.num_buckets, 3);
    assert_true(plan.capped);
    for (b = 0; b < 3; b++) {
        assert_int_equal(plan.buckets[b].num_sockets, 32);
    }
    /* Without SO_REUSEPORT: 3 buckets, the 32 addresses dealt 11/11/10. */
    in.have_reuseport = 0;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_LISTEN);
    assert_int_equal(plan.num_buckets, 3);
    assert_int_equal(plan.buckets[0].num_sockets, 11);
    assert_int_equal(plan.buckets[1].num_sockets, 11);
    assert_int_equal(plan.buckets[2].num_sockets, 10);
    assert_int_equal(plan.buckets[2].sockets[0].listener, 2);
    assert_int_equal(plan.buckets[2].sockets[1].listener, 5);
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

static void test_ratio_zero_means_no_duplicates(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_AUTO, 1, 2, 0, 256);
    bucket_plan plan;

    /* Stock httpd's default, written out: no SO_REUSEPORT duplicates. */
    in.cores_buckets_ratio = 0;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_LISTEN);
    assert_int_equal(plan.num_buckets, 2);
    assert_int_equal(plan.num_duplicates, 0);
    assert_non_null(strstr(plan.reason, "ListenCoresBucketsRatio 0"));
    /* An explicit BucketCount or BucketStrategy still wins. */
    in.bucket_count = 3;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(plan.num_buckets, 3);
    in.bucket_count = 0;
    in.strategy = BUCKET_STRATEGY_SINGLE;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.num_buckets, 1);
}

static void test_one_process(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 0, 3, 4, 256);
    bucket_plan plan;

    /* -X serves everything from the parent, whatever was asked, even a
     * strategy this kernel could not give. */
    in.one_process = 1;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.strategy, BUCKET_STRATEGY_SINGLE);
    assert_int_equal(plan.num_buckets, 1);
    assert_int_equal(plan.buckets[0].num_sockets, 3);
    assert_non_null(strstr(plan.reason, "-X"));
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
    assert_int_equal(buckets_for_ratio(*state, 8, BUCKET_RATIO_UNSET, 0), 8);
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

    /* No CPU count known: still a usable plan. */
    in.online_cpus = 0;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.num_buckets, 1);
    in.num_listeners = 3;
    plan = make_ok(*state, &in);
    assert_int_equal(plan.num_buckets, 1);
    assert_int_equal(plan.buckets[0].num_sockets, 3);
}

static void test_wait_mode(void **state)
{
    (void)state;
    assert_int_equal(bucket_wait_mode(1, 1), BUCKET_WAIT_ACCEPT);
    assert_int_equal(bucket_wait_mode(1, 0), BUCKET_WAIT_ACCEPT);
    assert_int_equal(bucket_wait_mode(2, 1), BUCKET_WAIT_EPOLL);
    assert_int_equal(bucket_wait_mode(32, 1), BUCKET_WAIT_EPOLL);
    assert_int_equal(bucket_wait_mode(2, 0), BUCKET_WAIT_MUTEX);
}

/* Each wake-up starts at the next ready socket, and every ready socket is
 * tried once, however long the child has run: the count of wake-ups
 * passes INT_MAX (about 25 days at 1,000 wake-ups a second) and wraps. */
static void test_ready_index_rotates_and_wraps(void **state)
{
    const unsigned int turns[] = { 0, 1, 7, 0x7ffffffeu, 0x7fffffffu,
                                   0x80000000u, 0x80000001u, 0xfffffffeu,
                                   0xffffffffu };
    size_t t;
    int n, i;

    (void)state;
    for (t = 0; t < sizeof(turns) / sizeof(turns[0]); t++) {
        for (n = 1; n <= 5; n++) {
            int seen[5] = { 0 };

            for (i = 0; i < n; i++) {
                int k = bucket_ready_index(turns[t], i, n);

                assert_in_range(k, 0, n - 1);
                seen[k]++;
                /* Consecutive ones within a wake-up. */
                assert_int_equal(k, (bucket_ready_index(turns[t], 0, n) + i)
                                    % n);
            }
            for (i = 0; i < n; i++) {
                assert_int_equal(seen[i], 1);
            }
        }
    }
    /* The next wake-up starts one further on. */
    assert_int_equal(bucket_ready_index(5, 0, 3), 2);
    assert_int_equal(bucket_ready_index(6, 0, 3), 0);
    assert_int_equal(bucket_ready_index(0x7fffffffu, 0, 4), 3);
    assert_int_equal(bucket_ready_index(0x80000000u, 0, 4), 0);
}

static void test_describe(void **state)
{
    apr_pool_t *p = *state;
    bucket_plan_input in = make_input(BUCKET_STRATEGY_AUTO, 1, 2, 0, 150);
    bucket_plan plan = make_ok(p, &in);
    const char *text = bucket_plan_describe(p, &plan, 2, 150, 1, 0);

    assert_contains(text, "strategy reuseport");
    assert_contains(text, "4 bucket(s)");
    assert_contains(text, "each of the 2 Listen address(es) (8 sockets, 6 of "
                          "them SO_REUSEPORT duplicates)");
    assert_contains(text, "EPOLLEXCLUSIVE");
    assert_contains(text, "children move between buckets");
    assert_contains(text, "MaxRequestWorkers");
    assert_null(strstr(text, "no more"));

    text = bucket_plan_describe(p, &plan, 2, 150, 0, 0);
    assert_contains(text, "accept mutex");

    in = make_input(BUCKET_STRATEGY_LISTEN, 1, 5, 0, 4);
    plan = make_ok(p, &in);
    text = bucket_plan_describe(p, &plan, 5, 4, 1, 0);
    assert_contains(text, "2 bucket(s) (no more, so that each can have 2 of "
                          "MaxRequestWorkers 4)");
    assert_contains(text, "5 Listen addresses dealt over them, up to 3");

    in = make_input(BUCKET_STRATEGY_REUSEPORT, 1, 1, 1, 4);
    plan = make_ok(p, &in);
    text = bucket_plan_describe(p, &plan, 1, 4, 1, 0);
    assert_contains(text, "block in accept()");
    assert_contains(text, "up to 4 children");
    /* ChildModel event: threads in the child's epoll set, one socket or
     * many. */
    text = bucket_plan_describe(p, &plan, 1, 4, 1, 1);
    assert_null(strstr(text, "accept()"));
    assert_contains(text, "worker threads wait on their bucket's sockets in "
                          "the child's epoll set (EPOLLEXCLUSIVE");
}

static void test_errors(void **state)
{
    bucket_plan_input in = make_input(BUCKET_STRATEGY_REUSEPORT, 0, 2, 0, 256);
    const char *err;

    err = make_err(*state, &in);
    assert_non_null(strstr(err, "SO_REUSEPORT"));

    in = make_input(BUCKET_STRATEGY_AUTO, 1, 2, 9, 8);
    err = make_err(*state, &in);
    assert_string_equal(err, "BucketCount 9 needs 9 children, one per "
                        "bucket; MaxRequestWorkers 8 runs at most 8 "
                        "children: use BucketCount 1 to 8, or raise "
                        "MaxRequestWorkers");
    /* The event model: MaxRequestWorkers counts threads, the message names
     * the directives that make the children's number. */
    in.threads_per_child = 25;
    err = make_err(*state, &in);
    assert_string_equal(err, "BucketCount 9 needs 9 children, one per "
                        "bucket; ChildModel event with MaxRequestWorkers 200 "
                        "and ThreadsPerChild 25 runs at most 8 children: use "
                        "BucketCount 1 to 8, raise MaxRequestWorkers or "
                        "lower ThreadsPerChild");

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

static void test_slot_mapping_round_robin(void **state)
{
    (void)state;
    /* Consecutive slots start in consecutive buckets, wrapping around,
     * also past MaxRequestWorkers (ServerLimit may be larger). */
    assert_int_equal(bucket_of_slot(0, 3), 0);
    assert_int_equal(bucket_of_slot(1, 3), 1);
    assert_int_equal(bucket_of_slot(2, 3), 2);
    assert_int_equal(bucket_of_slot(3, 3), 0);
    assert_int_equal(bucket_of_slot(199999, 4), 3);
    /* No buckets yet: everything maps to bucket 0, no division by zero. */
    assert_int_equal(bucket_of_slot(5, 0), 0);
}

static void test_plan_covers(void **state)
{
    /* Bucket 0 on addresses 0 and 1, bucket 1 on address 1, bucket 2 on
     * address 0 (a duplicate). */
    bucket_socket s0[] = { { 0, 0 }, { 1, 0 } }, s1[] = { { 1, 1 } },
                  s2[] = { { 0, 2 } };
    bucket_def defs[] = { { 2, s0 }, { 1, s1 }, { 1, s2 } };
    bucket_plan plan;

    (void)state;
    memset(&plan, 0, sizeof(plan));
    plan.num_buckets = 3;
    plan.buckets = defs;
    assert_true(bucket_plan_covers(&plan, 0, 1));
    assert_true(bucket_plan_covers(&plan, 0, 2));
    assert_false(bucket_plan_covers(&plan, 1, 0));
    assert_false(bucket_plan_covers(&plan, 1, 2));
    assert_false(bucket_plan_covers(&plan, 2, 1));
    assert_true(bucket_plan_covers(&plan, 2, 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_plan_covers),
        POOL_TEST(test_plan_table),
        POOL_TEST(test_reuseport_two_listeners_five_buckets),
        POOL_TEST(test_listen_five_listeners_two_workers),
        POOL_TEST(test_listen_one_bucket_per_address),
        POOL_TEST(test_many_ports_few_workers),
        POOL_TEST(test_single_holds_everything),
        POOL_TEST(test_auto_follows_kernel),
        POOL_TEST(test_ratio_zero_means_no_duplicates),
        POOL_TEST(test_one_process),
        POOL_TEST(test_cores_buckets_ratio),
        POOL_TEST(test_unknown_cpu_count),
        POOL_TEST(test_wait_mode),
        POOL_TEST(test_ready_index_rotates_and_wraps),
        POOL_TEST(test_describe),
        POOL_TEST(test_errors),
        POOL_TEST(test_strategy_names),
        POOL_TEST(test_slot_mapping_round_robin),
    };

    return RUN_POOL_TESTS(tests);
}
