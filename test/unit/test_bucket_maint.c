/*
 * test_bucket_maint.c: unit tests of the per-bucket idle maintenance
 * decisions: how MinSpare/MaxSpareServers are shared out over buckets, and
 * what one bucket does in one maintenance pass.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <cmocka.h>

#include "bucket_maint.h"
#include "unit_test.h"

/* ---- helpers ---- */

static bucket_decision decide(int idle, int busy, int free_slots,
                              int min_spare, int max_spare, int spawn_rate)
{
    bucket_census census;
    bucket_spare_limits limits;

    census.idle = idle;
    census.busy = busy;
    census.free_slots = free_slots;
    limits.min_spare = min_spare;
    limits.max_spare = max_spare;
    return bucket_maint_decide(&census, &limits, spawn_rate);
}

static void assert_decision(bucket_decision d, int spawn, int stop,
                            int next_spawn_rate, int at_capacity)
{
    assert_int_equal(d.spawn, spawn);
    assert_int_equal(d.stop, stop);
    assert_int_equal(d.next_spawn_rate, next_spawn_rate);
    assert_int_equal(d.at_capacity, at_capacity);
}

static void assert_limits(bucket_spare_limits got, int min_spare,
                          int max_spare)
{
    assert_int_equal(got.min_spare, min_spare);
    assert_int_equal(got.max_spare, max_spare);
}

/* ---- bucket_spare_share ---- */

static void test_spare_share_defaults(void **state)
{
    (void)state;
    /* prefork's defaults, MinSpare 5 and MaxSpare 10. One bucket keeps
     * them as they are. */
    assert_limits(bucket_spare_share(5, 10, 0, 1), 5, 10);
    /* Two buckets: 5 = 3 + 2 and 10 = 5 + 5; the first buckets take the
     * remainder, as they do the extra slots in bucket_share. */
    assert_limits(bucket_spare_share(5, 10, 0, 2), 3, 5);
    assert_limits(bucket_spare_share(5, 10, 1, 2), 2, 5);
    /* Three: 5 = 2 + 2 + 1, 10 = 4 + 3 + 3. */
    assert_limits(bucket_spare_share(5, 10, 0, 3), 2, 4);
    assert_limits(bucket_spare_share(5, 10, 1, 3), 2, 3);
    assert_limits(bucket_spare_share(5, 10, 2, 3), 1, 3);
    /* Four: 5 = 2 + 1 + 1 + 1, 10 = 3 + 3 + 2 + 2. */
    assert_limits(bucket_spare_share(5, 10, 0, 4), 2, 3);
    assert_limits(bucket_spare_share(5, 10, 3, 4), 1, 2);
}

static void test_spare_share_more_buckets_than_spares(void **state)
{
    int b;

    (void)state;
    /* Eight buckets, MinSpare 5: three buckets would get no idle child,
     * so every bucket keeps at least one. MaxSpare 10 would give six of
     * them only 1, not above their minimum, so every max becomes 2. */
    for (b = 0; b < 8; b++) {
        assert_limits(bucket_spare_share(5, 10, b, 8), 1, 2);
    }
    /* MinSpare 1, MaxSpare 2 (the smallest sane config) over 4 buckets. */
    for (b = 0; b < 4; b++) {
        assert_limits(bucket_spare_share(1, 2, b, 4), 1, 2);
    }
}

static void test_spare_share_properties(void **state)
{
    static const int mins[] = { 0, 1, 2, 3, 5, 10, 64 };
    static const int extra[] = { 0, 1, 2, 5, 50 };
    static const int buckets[] = { 1, 2, 3, 4, 5, 8, 16, 100 };
    size_t i, j, k;

    (void)state;
    for (i = 0; i < sizeof(mins) / sizeof(mins[0]); i++)
    for (j = 0; j < sizeof(extra) / sizeof(extra[0]); j++)
    for (k = 0; k < sizeof(buckets) / sizeof(buckets[0]); k++) {
        int min_spare = mins[i], max_spare = mins[i] + extra[j];
        int nb = buckets[k];
        int b, sum_min = 0, sum_max = 0, lo = -1, hi = 0;
        int top_min = (min_spare + nb - 1) / nb;
        int room = max_spare / nb > (top_min > 1 ? top_min : 1);
        char desc[96];

        snprintf(desc, sizeof(desc), "MinSpare=%d MaxSpare=%d buckets=%d",
                 min_spare, max_spare, nb);
        for (b = 0; b < nb; b++) {
            bucket_spare_limits l = bucket_spare_share(min_spare, max_spare,
                                                       b, nb);

            CASE_CHECK(desc, l.min_spare >= 1);
            CASE_CHECK(desc, l.max_spare > l.min_spare);
            sum_min += l.min_spare;
            sum_max += l.max_spare;
            lo = lo < 0 || l.min_spare < lo ? l.min_spare : lo;
            hi = l.min_spare > hi ? l.min_spare : hi;
        }
        /* MinSpare is shared out exactly, topped up to one per bucket. */
        CASE_CHECK(desc, sum_min == (min_spare > nb ? min_spare : nb));
        CASE_CHECK(desc, hi - lo <= 1);
        /* MaxSpare never shrinks; it is shared out exactly when every
         * bucket's share of it is already above its minimum. */
        CASE_CHECK(desc, sum_max >= max_spare);
        if (room) {
            CASE_CHECK(desc, sum_max == max_spare);
        }
    }
}

static void test_spare_share_no_buckets(void **state)
{
    (void)state;
    /* Before the plan exists the count may be 0: treated as one bucket. */
    assert_limits(bucket_spare_share(5, 10, 0, 0), 5, 10);
}

/* ---- bucket_maint_decide ---- */

static void test_decide_too_many_idle(void **state)
{
    (void)state;
    /* Above MaxSpare: stop exactly one, spawn nothing, rate back to 1. */
    assert_decision(decide(6, 0, 10, 2, 5, 1), 0, 1, 1, 0);
    assert_decision(decide(50, 3, 0, 2, 5, 16), 0, 1, 1, 0);
}

static void test_decide_within_range(void **state)
{
    int idle;

    (void)state;
    /* MinSpare <= idle <= MaxSpare, both ends included: nothing to do,
     * and the spawn rate starts over. */
    for (idle = 2; idle <= 5; idle++) {
        assert_decision(decide(idle, 7, 10, 2, 5, 8), 0, 0, 1, 0);
    }
    /* Also with no free slot left: not short, so not at capacity. */
    assert_decision(decide(2, 10, 0, 2, 5, 4), 0, 0, 1, 0);
}

static void test_decide_short_of_idle(void **state)
{
    (void)state;
    /* Spawn as many as the rate says and double the rate. */
    assert_decision(decide(1, 5, 10, 2, 5, 1), 1, 0, 2, 0);
    assert_decision(decide(0, 5, 10, 2, 5, 4), 4, 0, 8, 0);
    /* The rate is capped by the free slots; it still doubles. */
    assert_decision(decide(0, 5, 3, 2, 5, 16), 3, 0, 32, 0);
    /* The doubled rate never passes the cap. */
    assert_decision(decide(0, 5, 100, 2, 5, 32), 32, 0,
                    BUCKET_MAX_SPAWN_RATE, 0);
    assert_decision(decide(0, 5, 100, 2, 5, 24), 24, 0,
                    BUCKET_MAX_SPAWN_RATE, 0);
}

static void test_decide_bad_rate(void **state)
{
    bucket_decision d;

    (void)state;
    /* A rate below 1 still spawns one. */
    assert_decision(decide(0, 0, 10, 2, 5, 0), 1, 0, 2, 0);
    assert_decision(decide(0, 0, 10, 2, 5, -3), 1, 0, 2, 0);
    /* A rate above the cap spawns no more than the cap in one pass. */
    d = decide(0, 0, 1000, 2, 5, 1000);
    assert_true(d.spawn >= 1 && d.spawn <= BUCKET_MAX_SPAWN_RATE);
    assert_int_equal(d.next_spawn_rate, BUCKET_MAX_SPAWN_RATE);
}

static void test_decide_at_capacity(void **state)
{
    (void)state;
    /* Short of idle children but every slot of the bucket is taken. */
    assert_decision(decide(0, 10, 0, 2, 5, 8), 0, 0, 1, 1);
    assert_decision(decide(1, 9, 0, 2, 5, 1), 0, 0, 1, 1);
}

static void test_decide_rate_ramp(void **state)
{
    static const int rates[] = { 1, 2, 4, 8, 16, 32, 32, 32 };
    int rate = 1, total = 0;
    size_t pass;

    (void)state;
    /* A bucket that stays short pass after pass (its new children get
     * busy at once) ramps 1, 2, 4, ... 32 and stays at 32. */
    for (pass = 0; pass < sizeof(rates) / sizeof(rates[0]); pass++) {
        bucket_decision d = decide(0, total, 1000, 5, 10, rate);

        assert_int_equal(d.spawn, rates[pass]);
        total += d.spawn;
        rate = d.next_spawn_rate;
    }
    assert_int_equal(total, 1 + 2 + 4 + 8 + 16 + 32 * 3);
    /* Once satisfied, the ramp starts over. */
    rate = decide(5, total, 1000, 5, 10, rate).next_spawn_rate;
    assert_int_equal(rate, 1);
    assert_int_equal(decide(0, total, 1000, 5, 10, rate).spawn, 1);
}

/* One bucket of a simulated server: children and the parent's state. */
typedef struct {
    bucket_census census;
    bucket_spare_limits limits;
    int spawn_rate;
} sim_bucket;

/* One maintenance pass over every bucket; returns the decisions taken.
 * Spawned children come up idle; a stopped child frees its slot. */
static void sim_pass(sim_bucket *buckets, int nb, bucket_decision *out)
{
    int b;

    for (b = 0; b < nb; b++) {
        sim_bucket *s = &buckets[b];
        bucket_decision d = bucket_maint_decide(&s->census, &s->limits,
                                                s->spawn_rate);

        s->census.idle += d.spawn - d.stop;
        s->census.free_slots -= d.spawn - d.stop;
        s->spawn_rate = d.next_spawn_rate;
        out[b] = d;
    }
}

static void test_buckets_are_independent(void **state)
{
    sim_bucket sim[2];
    bucket_decision d[2];
    int b, pass;

    (void)state;
    /* MaxRequestWorkers 20, MinSpare 5, MaxSpare 10, two buckets: each has
     * 10 slots and limits (3, 5) and (2, 5). Bucket 0 has 4 children, all
     * busy; bucket 1 has 8, all idle. Counted globally there are 8 idle
     * children, inside [5, 10], and prefork would do nothing while
     * connections hashed to bucket 0 wait. */
    for (b = 0; b < 2; b++) {
        sim[b].limits = bucket_spare_share(5, 10, b, 2);
        sim[b].spawn_rate = 1;
    }
    sim[0].census.idle = 0;
    sim[0].census.busy = 4;
    sim[0].census.free_slots = 6;
    sim[1].census.idle = 8;
    sim[1].census.busy = 0;
    sim[1].census.free_slots = 2;

    sim_pass(sim, 2, d);
    assert_decision(d[0], 1, 0, 2, 0);
    assert_decision(d[1], 0, 1, 1, 0);

    /* Bucket 0 ramps up to its minimum while bucket 1 sheds one idle
     * child a pass down to its maximum; then both are left alone. */
    sim_pass(sim, 2, d);
    assert_decision(d[0], 2, 0, 4, 0);
    assert_decision(d[1], 0, 1, 1, 0);
    assert_int_equal(sim[0].census.idle, 3);
    for (pass = 0; pass < 5; pass++) {
        sim_pass(sim, 2, d);
    }
    assert_decision(d[0], 0, 0, 1, 0);
    assert_decision(d[1], 0, 0, 1, 0);
    assert_int_equal(sim[0].census.idle, 3);
    assert_int_equal(sim[1].census.idle, 5);
}

static void test_busy_bucket_runs_out_of_slots(void **state)
{
    sim_bucket sim;
    bucket_decision d;
    int pass, spawned = 0;

    (void)state;
    /* A bucket whose new children all get busy at once fills its share
     * of slots and then reports that it is at capacity. */
    sim.limits = bucket_spare_share(5, 10, 0, 1);
    sim.spawn_rate = 1;
    sim.census.idle = 0;
    sim.census.busy = 0;
    sim.census.free_slots = 12;
    for (pass = 0; pass < 10; pass++) {
        sim_pass(&sim, 1, &d);
        spawned += d.spawn;
        sim.census.busy += sim.census.idle;
        sim.census.idle = 0;
    }
    assert_int_equal(spawned, 12);
    assert_int_equal(sim.census.free_slots, 0);
    assert_int_equal(d.at_capacity, 1);
    assert_int_equal(d.spawn, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_spare_share_defaults),
        POOL_TEST(test_spare_share_more_buckets_than_spares),
        POOL_TEST(test_spare_share_properties),
        POOL_TEST(test_spare_share_no_buckets),
        POOL_TEST(test_decide_too_many_idle),
        POOL_TEST(test_decide_within_range),
        POOL_TEST(test_decide_short_of_idle),
        POOL_TEST(test_decide_bad_rate),
        POOL_TEST(test_decide_at_capacity),
        POOL_TEST(test_decide_rate_ramp),
        POOL_TEST(test_buckets_are_independent),
        POOL_TEST(test_busy_bucket_runs_out_of_slots),
    };

    return RUN_POOL_TESTS(tests);
}
