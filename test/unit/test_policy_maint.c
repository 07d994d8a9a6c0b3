/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_maint.c: unit tests of the per-bucket idle maintenance
 * decisions: how MinSpare/MaxSpareServers are shared out over buckets, and
 * what one bucket does in one maintenance pass.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "policy_maint.h"
#include "unit_test.h"

#define MAX_B 16

/* One pass over nb buckets: census from idle[]/busy[], every bucket
 * allowed to grow unless held[] says otherwise. */
typedef struct {
    int nb;
    int unit;                 /* 0: one child is one unit (prefork) */
    bucket_census census[MAX_B];
    int grow_limit[MAX_B];
    int rate[MAX_B];
    bucket_decision d[MAX_B];
    bucket_move moves[MAX_B * BUCKET_MAX_SPAWN_RATE];
    int num_moves;
    const int *covers;        /* NULL: no bucket covers another */
    int steered_to_idle;
} pass_t;

static void setup_pass(pass_t *p, int nb, const int *idle, const int *busy)
{
    int b;

    memset(p, 0, sizeof(*p));
    p->nb = nb;
    for (b = 0; b < nb; b++) {
        p->census[b].idle = idle[b];
        p->census[b].busy = busy ? busy[b] : 0;
        /* Unless a test says otherwise, no idle child holds a
         * connection: any of them may move. */
        p->census[b].movable = idle[b];
        p->census[b].children = idle[b] + (busy ? busy[b] : 0);
        p->grow_limit[b] = BUCKET_MAX_SPAWN_RATE;
        p->rate[b] = 1;
    }
}

static void run_pass_moving(pass_t *p, int min_spare, int max_spare,
                            int free_slots, int rescue_only, int max_moves)
{
    bucket_maint_input in;

    in.num_buckets = p->nb;
    in.unit = p->unit ? p->unit : 1;
    in.census = p->census;
    in.grow_limit = p->grow_limit;
    in.min_spare = min_spare;
    in.max_spare = max_spare;
    in.free_slots = free_slots;
    in.rescue_only = rescue_only;
    in.covers = p->covers;
    in.steered_to_idle = p->steered_to_idle;
    p->num_moves = bucket_maint_decide(&in, p->rate, p->d, p->moves,
                                       max_moves);
}

static void run_any_pass(pass_t *p, int min_spare, int max_spare,
                         int free_slots, int rescue_only)
{
    run_pass_moving(p, min_spare, max_spare, free_slots, rescue_only,
                    MAX_B * BUCKET_MAX_SPAWN_RATE);
}

static void run_pass(pass_t *p, int min_spare, int max_spare, int free_slots)
{
    run_any_pass(p, min_spare, max_spare, free_slots, 0);
}

/* One bucket, one pass. */
static bucket_decision decide1(int idle, int free_slots, int min_spare,
                               int max_spare, int *rate)
{
    pass_t p;
    int idle_a[1];

    idle_a[0] = idle;
    setup_pass(&p, 1, idle_a, NULL);
    p.rate[0] = *rate;
    run_pass(&p, min_spare, max_spare, free_slots);
    assert_int_equal(p.num_moves, 0);
    *rate = p.rate[0];
    return p.d[0];
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

/* ---- bucket_maint_decide: one bucket, prefork's rules ---- */

static void test_decide_too_many_idle(void **state)
{
    int rate = 4;
    bucket_decision d = decide1(12, 100, 5, 10, &rate);

    (void)state;
    /* One at a time, as prefork. */
    assert_int_equal(d.stop, 1);
    assert_int_equal(d.spawn, 0);
    assert_int_equal(d.idle_after, 11);
    assert_int_equal(rate, 1);
}

/* MaxSpareServers 3 over two buckets is 2 each (rounded up: a bucket's
 * maximum is above its minimum of 1). A bucket with 3 idle children while
 * the other's are all busy is within MaxSpare for the server, as prefork
 * counts it: nothing stops. With 2 idle more elsewhere it is not. */
static void test_surplus_counted_over_the_server(void **state)
{
    static const int lopsided[] = { 3, 0 }, both[] = { 3, 2 };
    static const int busy[] = { 0, 4 };
    pass_t p;

    (void)state;
    setup_pass(&p, 2, lopsided, busy);
    run_pass(&p, 1, 3, 0);
    assert_int_equal(p.d[0].stop + p.d[1].stop, 0);
    setup_pass(&p, 2, both, busy);
    run_pass(&p, 1, 3, 0);
    assert_int_equal(p.d[0].stop, 1);
    assert_int_equal(p.d[1].stop, 0);
    assert_int_equal(p.d[0].idle_after + p.d[1].idle_after, 4);
}

static void test_decide_within_range(void **state)
{
    int idle, rate;

    (void)state;
    for (idle = 5; idle <= 10; idle++) {
        bucket_decision d;

        rate = 8;
        d = decide1(idle, 100, 5, 10, &rate);
        assert_int_equal(d.spawn + d.stop + d.moved_in + d.moved_out, 0);
        assert_int_equal(rate, 1);
        assert_false(d.starved);
    }
}

static void test_decide_short_of_idle(void **state)
{
    int rate = 4;
    bucket_decision d = decide1(2, 100, 5, 10, &rate);

    (void)state;
    assert_int_equal(d.spawn, 4);
    assert_int_equal(d.idle_after, 6);
    assert_int_equal(rate, 8);
    assert_false(d.report_busy);
    d = decide1(2, 100, 5, 10, &rate);
    assert_int_equal(d.spawn, 8);
    assert_true(d.report_busy);
}

static void test_decide_rate_bounds(void **state)
{
    int rate;
    bucket_decision d;

    (void)state;
    rate = 0;
    d = decide1(0, 100, 5, 10, &rate);
    assert_int_equal(d.spawn, 1);
    assert_int_equal(rate, 2);
    rate = -3;
    d = decide1(0, 100, 5, 10, &rate);
    assert_int_equal(d.spawn, 1);
    rate = 1000;
    d = decide1(0, 100, 5, 10, &rate);
    assert_int_equal(d.spawn, BUCKET_MAX_SPAWN_RATE);
    assert_int_equal(rate, BUCKET_MAX_SPAWN_RATE);
    /* The ramp: 1, 2, 4, ... 32, 32. */
    rate = 1;
    {
        int expect[] = { 1, 2, 4, 8, 16, 32, 32 };
        size_t i;
        for (i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
            d = decide1(0, 1000, 5, 10, &rate);
            assert_int_equal(d.spawn, expect[i]);
        }
    }
}

static void test_decide_free_slots_limit(void **state)
{
    int rate = 8;
    bucket_decision d = decide1(0, 3, 5, 10, &rate);

    (void)state;
    assert_int_equal(d.spawn, 3);
    assert_false(d.starved);
    assert_int_equal(rate, 16);
    /* No slot at all, no other bucket: starved, rate back to 1. */
    rate = 8;
    d = decide1(0, 0, 5, 10, &rate);
    assert_int_equal(d.spawn, 0);
    assert_true(d.starved);
    assert_int_equal(rate, 1);
}

/* ---- several buckets sharing the slots ---- */

static void test_starved_bucket_served_first(void **state)
{
    static const int idle[] = { 1, 0 };
    pass_t p;

    (void)state;
    /* MinSpare 4 over 2 buckets: 2 each. One free slot: it goes to the
     * bucket with no idle child, although bucket 0 comes first. */
    setup_pass(&p, 2, idle, NULL);
    run_pass(&p, 4, 20, 1);
    assert_int_equal(p.d[0].spawn, 0);
    assert_int_equal(p.d[1].spawn, 1);
    assert_int_equal(p.num_moves, 0);
}

static void test_capacity_moves_to_busy_bucket(void **state)
{
    static const int idle[] = { 0, 6 }, busy[] = { 30, 0 };
    pass_t p;
    int i;

    (void)state;
    /* No free slot: bucket 1 gives bucket 0 idle children while it keeps
     * at least as many as bucket 0 gets: 6/0 -> 5/1 -> 4/2 -> 3/3. */
    setup_pass(&p, 2, idle, busy);
    p.rate[0] = 8;
    run_pass(&p, 4, 20, 0);
    assert_int_equal(p.num_moves, 3);
    for (i = 0; i < p.num_moves; i++) {
        assert_int_equal(p.moves[i].from, 1);
        assert_int_equal(p.moves[i].to, 0);
    }
    assert_int_equal(p.d[0].moved_in, 3);
    assert_int_equal(p.d[1].moved_out, 3);
    assert_int_equal(p.d[0].idle_after, 3);
    assert_int_equal(p.d[1].idle_after, 3);
    assert_false(p.d[0].starved);
    assert_int_equal(p.rate[0], 16);
}

static void test_no_move_that_only_swaps(void **state)
{
    static const int idle[] = { 0, 1 };
    pass_t p;

    (void)state;
    /* Bucket 1's only idle child would leave it as short as bucket 0 was:
     * nothing moves, and bucket 0 is starved. */
    setup_pass(&p, 2, idle, NULL);
    run_pass(&p, 2, 10, 0);
    assert_int_equal(p.num_moves, 0);
    assert_true(p.d[0].starved);
    assert_false(p.d[1].starved);
}

static void test_short_bucket_never_donates(void **state)
{
    static const int idle[] = { 0, 3 };
    pass_t p;

    (void)state;
    /* MinSpare 8: both buckets want 4 idle; bucket 1, itself short,
     * gives nothing although it has 3 more than bucket 0. */
    setup_pass(&p, 2, idle, NULL);
    run_pass(&p, 8, 20, 0);
    assert_int_equal(p.num_moves, 0);
    assert_true(p.d[0].starved);
    assert_true(p.d[1].starved);
}

static void test_held_bucket_gets_nothing(void **state)
{
    static const int idle[] = { 0, 10 };
    pass_t p;

    (void)state;
    setup_pass(&p, 2, idle, NULL);
    p.grow_limit[0] = 0;
    run_pass(&p, 4, 20, 50);
    assert_int_equal(p.d[0].spawn + p.d[0].moved_in, 0);
    assert_false(p.d[0].starved);
    assert_int_equal(p.num_moves, 0);
}

static void test_slots_before_moves(void **state)
{
    static const int idle[] = { 0, 10 };
    pass_t p;

    (void)state;
    /* While free slots last, nothing is taken from another bucket. */
    setup_pass(&p, 2, idle, NULL);
    p.rate[0] = 4;
    run_pass(&p, 4, 20, 2);
    assert_int_equal(p.d[0].spawn, 2);
    assert_int_equal(p.num_moves, 2);
    assert_int_equal(p.d[0].moved_in, 2);
    assert_int_equal(p.d[0].idle_after, 4);
}

static void test_rescue_pass(void **state)
{
    static const int idle[] = { 0, 1, 0, 20 }, busy[] = { 9, 9, 9, 0 };
    pass_t p;
    int b;

    (void)state;
    /* Between full passes: buckets with no idle child get one each (0 from
     * a free slot, 2 from bucket 3's idle children once the slot is
     * gone); bucket 1, short but not empty, waits for the full pass; the
     * surplus in bucket 3 is not trimmed; spawn rates stay. */
    setup_pass(&p, 4, idle, busy);
    for (b = 0; b < 4; b++) {
        p.rate[b] = 4;
    }
    run_any_pass(&p, 8, 12, 1, 1);
    assert_int_equal(p.d[0].spawn, 1);
    assert_int_equal(p.d[1].spawn + p.d[1].moved_in, 0);
    assert_int_equal(p.d[2].moved_in, 1);
    assert_int_equal(p.num_moves, 1);
    assert_int_equal(p.moves[0].from, 3);
    assert_int_equal(p.moves[0].to, 2);
    assert_int_equal(p.d[3].stop, 0);
    for (b = 0; b < 4; b++) {
        assert_int_equal(p.rate[b], 4);
    }
    /* A held bucket is not rescued. */
    setup_pass(&p, 4, idle, busy);
    p.grow_limit[0] = 0;
    run_any_pass(&p, 8, 12, 1, 1);
    assert_int_equal(p.d[0].spawn, 0);
    assert_int_equal(p.d[2].spawn, 1);
}

static void test_rescue_pass_without_moves(void **state)
{
    static const int idle[] = { 0, 1, 0, 20 }, busy[] = { 9, 9, 9, 0 };
    pass_t p;
    int b, free_slots;

    (void)state;
    /* A stop that serves on: buckets with no idle child get one from a
     * free slot while there is one (bucket 0 first), and nothing else:
     * bucket 1, short, gets none; bucket 3's surplus is not stopped;
     * nothing is reported. */
    for (free_slots = 0; free_slots <= 3; free_slots++) {
        setup_pass(&p, 4, idle, busy);
        run_pass_moving(&p, 8, 12, free_slots, 1, 0);
        assert_int_equal(p.d[0].spawn, free_slots >= 1);
        assert_int_equal(p.d[2].spawn, free_slots >= 2);
        assert_int_equal(p.d[1].spawn + p.d[3].spawn, 0);
        for (b = 0; b < 4; b++) {
            assert_int_equal(p.d[b].stop + p.d[b].report_busy
                             + p.d[b].starved, 0);
        }
    }
    /* A held bucket gets none, the slot or not. */
    setup_pass(&p, 4, idle, busy);
    p.grow_limit[2] = 0;
    run_pass_moving(&p, 8, 12, 3, 1, 0);
    assert_int_equal(p.d[0].spawn, 1);
    assert_int_equal(p.d[2].spawn, 0);
}

/* Random passes: what every decision must respect. */
static void test_decide_properties(void **state)
{
    unsigned seed = 12345;
    int round;

    (void)state;
    for (round = 0; round < 20000; round++) {
        pass_t p;
        int idle[MAX_B], busy[MAX_B], b, i, spawned = 0;
        int stops = 0, idle_after = 0;
        int nb = 1 + (int)((seed = seed * 1103515245 + 12345) >> 16) % MAX_B;
        int min_spare = 1 + (int)((seed = seed * 1103515245 + 12345) >> 16)
                            % 20;
        int max_spare = min_spare + 1
                        + (int)((seed = seed * 1103515245 + 12345) >> 16) % 20;
        int free_slots = (int)((seed = seed * 1103515245 + 12345) >> 16) % 40;
        char desc[64];

        for (b = 0; b < nb; b++) {
            idle[b] = (int)((seed = seed * 1103515245 + 12345) >> 16) % 12;
            busy[b] = (int)((seed = seed * 1103515245 + 12345) >> 16) % 30;
        }
        setup_pass(&p, nb, idle, busy);
        for (b = 0; b < nb; b++) {
            p.rate[b] = 1 << ((seed = seed * 1103515245 + 12345) >> 16) % 6;
            p.grow_limit[b] = ((seed = seed * 1103515245 + 12345) >> 16) % 5
                              != 0 ? BUCKET_MAX_SPAWN_RATE : 0;
        }
        snprintf(desc, sizeof(desc), "round %d", round);
        run_pass(&p, min_spare, max_spare, free_slots);

        for (b = 0; b < nb; b++) {
            bucket_spare_limits lim = bucket_spare_share(min_spare,
                                                         max_spare, b, nb);
            int short_of = p.grow_limit[b] && idle[b] < lim.min_spare;

            spawned += p.d[b].spawn;
            CASE_CHECK(desc, p.d[b].idle_after == idle[b] + p.d[b].spawn
                             + p.d[b].moved_in - p.d[b].moved_out
                             - p.d[b].stop);
            CASE_CHECK(desc, p.d[b].spawn + p.d[b].moved_in
                             <= BUCKET_MAX_SPAWN_RATE);
            /* Only a short bucket gains; a short one never gives. */
            CASE_CHECK(desc, short_of || p.d[b].spawn + p.d[b].moved_in == 0);
            CASE_CHECK(desc, !short_of || p.d[b].moved_out == 0);
            /* A donor keeps an idle child. */
            CASE_CHECK(desc, p.d[b].moved_out == 0 || p.d[b].idle_after >= 1);
            CASE_CHECK(desc, p.d[b].stop <= 1);
            CASE_CHECK(desc, p.d[b].stop == 0
                             || p.d[b].idle_after >= lim.max_spare);
            stops += p.d[b].stop;
            idle_after += p.d[b].idle_after;
            CASE_CHECK(desc, p.rate[b] >= 1
                             && p.rate[b] <= BUCKET_MAX_SPAWN_RATE);
        }
        CASE_CHECK(desc, spawned <= free_slots);
        /* Stops only while the whole server has more than MaxSpare idle,
         * and never below it. */
        CASE_CHECK(desc, stops == 0 || idle_after >= max_spare);
        /* Moves only once the slots are used up. */
        CASE_CHECK(desc, p.num_moves == 0 || spawned == free_slots);
        for (i = 0; i < p.num_moves; i++) {
            CASE_CHECK(desc, p.moves[i].from != p.moves[i].to);
            CASE_CHECK(desc, p.moves[i].from >= 0 && p.moves[i].from < nb);
            CASE_CHECK(desc, p.moves[i].to >= 0 && p.moves[i].to < nb);
        }
    }
}

/* Many passes of a load that keeps every child of bucket 0 busy: capacity
 * drains into bucket 0 up to MaxRequestWorkers, and bucket 1 keeps an
 * idle child throughout. */
static void test_skewed_load_simulation(void **state)
{
    enum { MAX_WORKERS = 64, PASSES = 40 };
    int idle[2] = { 16, 16 }, busy[2] = { 0, 0 }, pass_no, b;
    pass_t p;

    (void)state;
    setup_pass(&p, 2, idle, busy);
    for (pass_no = 0; pass_no < PASSES; pass_no++) {
        int total = idle[0] + idle[1] + busy[0] + busy[1];

        for (b = 0; b < 2; b++) {
            p.census[b].idle = idle[b];
            p.census[b].busy = busy[b];
        }
        run_pass(&p, 5, 10, MAX_WORKERS - total);
        for (b = 0; b < 2; b++) {
            idle[b] = p.d[b].idle_after;
        }
        /* The load takes every idle child of bucket 0. */
        busy[0] += idle[0];
        idle[0] = 0;
        assert_true(idle[0] + idle[1] + busy[0] + busy[1] <= MAX_WORKERS);
        assert_true(idle[1] >= 1);
    }
    /* Bucket 1 is left with what bucket 0 cannot take from it. */
    assert_true(busy[0] >= MAX_WORKERS - 2);
    assert_true(idle[1] + busy[1] <= 2);
}

/* ---- census and start-up ---- */

static void test_census_tally(void **state)
{
    static const slot_view slots[] = {
        { SLOT_IDLE, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_BUSY, 1, 0, 1, 0, 0, 1, 0, 0, 0 },
        { SLOT_EMPTY, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_LEAVING, 0, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_IDLE, 1, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_BUSY, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_EMPTY, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 7, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_EMPTY, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    bucket_census census[2];
    int free_slots;

    (void)state;
    /* Slot 9 is beyond MaxRequestWorkers 9: not free; bucket 7 does not
     * exist (a plan with fewer buckets): counted nowhere. */
    free_slots = bucket_census_tally(slots, 10, 9, 9, 2, 1, census);
    assert_int_equal(free_slots, 2);
    assert_int_equal(census[0].idle, 1);
    assert_int_equal(census[0].busy, 1);
    assert_int_equal(census[0].children, 2);
    /* A replacement on its way counts as idle in its new bucket. */
    assert_int_equal(census[1].idle, 2);
    assert_int_equal(census[1].busy, 1);
    assert_int_equal(census[1].children, 3);
    /* A keep-alive holder counts as reclaimable; a leaving child's
     * connection is not the bucket's to give. */
    assert_int_equal(census[1].reclaimable, 1);
    assert_int_equal(census[0].reclaimable, 0);
}

/* ---- ChildModel event: units are threads, a child brings 25 ---- */

static void test_census_threads(void **state)
{
    static const slot_view slots[] = {
        { SLOT_IDLE, 0, 20, 0, 4, 0, 0, 0, 0, 0 },
        { SLOT_BUSY, 0, 0, 0, 25, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 1, 3, 0, 10, 0, 0, 0, 0, 0 },
        { SLOT_LEAVING, 1, 25, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_EMPTY, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    bucket_census census[2];
    int free_slots;

    (void)state;
    free_slots = bucket_census_tally(slots, 6, 6, 6, 2, 25, census);
    assert_int_equal(free_slots, 1);
    assert_int_equal(census[0].idle, 20);
    assert_int_equal(census[0].busy, 5 + 25);
    /* The replacement brings a whole child's threads; the leaving child
     * counts nowhere. */
    assert_int_equal(census[1].idle, 25 + 3);
    assert_int_equal(census[1].busy, 22);
    assert_int_equal(census[0].children, 2);
    assert_int_equal(census[1].children, 2);
    /* Units serving a request, for the stall watch: the others are idle,
     * shut out or hold keep-alive connections. */
    assert_int_equal(census[0].serving, 4 + 25);
    assert_int_equal(census[1].serving, 10);
}

/* A graceful restart with ServerLimit above MaxRequestWorkers (in
 * children): the old generation fills the first slots and keeps them while
 * it finishes; the new one may start in the slots above, up to
 * MaxRequestWorkers' children, not up to the number of empty slots. */
static void test_census_room_beside_leaving_children(void **state)
{
    static const slot_view slots[] = {
        { SLOT_LEAVING, 0, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_LEAVING, 1, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_LEAVING, 0, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_LEAVING, 1, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_IDLE, 0, 25, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_EMPTY, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    bucket_census census[2];

    (void)state;
    /* MaxRequestWorkers 4 children, ServerLimit 8: one current child, so
     * three may start, in slot 5 and the two past the table's end. */
    assert_int_equal(bucket_census_tally(slots, 6, 8, 4, 2, 25, census), 3);
    /* ServerLimit 16: still three, MaxRequestWorkers bounds them. */
    assert_int_equal(bucket_census_tally(slots, 6, 16, 4, 2, 25, census), 3);
    /* Slots up to MaxRequestWorkers only (ChildModel prefork): none free
     * beyond slot 5. */
    assert_int_equal(bucket_census_tally(slots, 6, 6, 4, 2, 25, census), 1);
    /* A replacement promised to a leaving child counts as a child. */
    {
        slot_view replacing[6];

        memcpy(replacing, slots, sizeof(slots));
        replacing[0].state = SLOT_REPLACING;
        replacing[1].state = SLOT_REPLACING;
        replacing[2].state = SLOT_REPLACING;
        assert_int_equal(bucket_census_tally(replacing, 6, 8, 4, 2, 25,
                                             census), 0);
    }
}

/* At MaxRequestWorkers after a graceful restart, old children waiting on
 * idle keep-alive connections hold every slot. Each keeps them until
 * their next request or KeepAliveTimeout, as it would without the
 * restart: even one whose replacement waits for its slot (a view that
 * says reclaimable) counts as nobody's to reclaim, else a client sending
 * its next request as the connection closes loses it. */
static void test_census_leaving_keepalive_holders_count_nowhere(
    void **state)
{
    static const slot_view slots[] = {
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_REPLACING, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 1, 0, 0, 0 },
        { SLOT_LEAVING, 0, 0, 0, 0, 0, 1, 0, 0, 0 },
    };
    bucket_census census[2];

    (void)state;
    assert_int_equal(bucket_census_tally(slots, 4, 4, 4, 2, 1, census), 0);
    assert_int_equal(census[0].reclaimable, 0);
    assert_int_equal(census[1].reclaimable, 0);
    assert_int_equal(census[1].children, 2);
}

/* A graceful restart adding a bucket, every slot taken: its first child
 * is ready, and the slots promised to it are kept by old children kept
 * for the handover or finishing a connection (replacement_waits), or
 * left by one about to exit. All count as coming, so the bucket asks for
 * no other child; only the running child and the one about to start are
 * steered a connection (else, in the restart benchmark, 117 waited on
 * the added bucket's one child for over a second), and only the running
 * one is handed out. */
static void test_census_promised_slots_are_not_steered_to(void **state)
{
    static const slot_view slots[] = {
        { SLOT_IDLE, 1, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 1, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 1, 1, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 0, 0, 0, 0, 0, 0, 1, 0, 0 },
    };
    bucket_census census[2];

    (void)state;
    assert_int_equal(bucket_census_tally(slots, 6, 6, 6, 2, 1, census), 0);
    assert_int_equal(census[1].idle, 4);
    assert_int_equal(census[1].arriving, 3);
    assert_int_equal(census[1].promised, 2);
    assert_int_equal(bucket_census_steerable(&census[1]), 2);
    /* of which only the running child is handed out */
    assert_int_equal(bucket_census_unclaimed(&census[1]), 1);
    census[1].queued = 1;
    assert_int_equal(bucket_census_unclaimed(&census[1]), 0);
    assert_int_equal(census[0].idle, 2);
    assert_int_equal(bucket_census_steerable(&census[0]), 1);
}

/* A graceful restart from one bucket to two, every slot taken: bucket 0
 * keeps two idle old children accepting for the handover (their slots
 * promised to buckets 0 and 1) and has one new child; bucket 1 has one.
 * The kept children take connections from bucket 0's sockets, so
 * steering is told of them there (before, both buckets looked alike,
 * one idle unit each, and the load program split what the first pass
 * left over evenly between them), and nowhere else; a kept child in a
 * request has no idle unit to count. Maintenance still counts them as
 * no bucket's children. A stalled bucket's kept children count as
 * nothing accepts there. */
static void test_census_kept_old_children_are_steered_to_where_they_accept(
    void **state)
{
    static const slot_view slots[] = {
        { SLOT_REPLACING, 0, 0, 0, 0, 0, 0, 1, 1, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 1, 1, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 1, 0, 0 },
        { SLOT_IDLE, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 1, 1, 0, 0, 0, 0, 0, 0, 0 },
        /* counted nowhere: a bucket the plan does not have */
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 1, 1, 7 },
    };
    bucket_census census[2];

    (void)state;
    assert_int_equal(bucket_census_tally(slots, 6, 6, 6, 2, 1, census), 0);
    assert_int_equal(census[0].handing_over, 2);
    assert_int_equal(census[1].handing_over, 0);
    assert_int_equal(census[0].idle, 2);
    assert_int_equal(census[0].promised, 1);
    assert_int_equal(census[1].idle, 4);
    assert_int_equal(census[1].promised, 3);
    assert_int_equal(bucket_census_steerable(&census[0]), 3);
    assert_int_equal(bucket_census_steerable(&census[1]), 1);
    census[0].queued = 2;
    assert_int_equal(bucket_census_unclaimed(&census[0]), 1);
    bucket_census_stalled(&census[0]);
    assert_int_equal(bucket_census_steerable(&census[0]), 0);
}

/* Steering is told no bucket has a unit while every idle unit is
 * promised: the last counts are carried for a pass, as with none. */
static void test_census_to_publish_counts_steerable_units(void **state)
{
    bucket_census now[2], published[2];

    (void)state;
    memset(now, 0, sizeof(now));
    memset(published, 0, sizeof(published));
    now[0].idle = 1;
    assert_int_equal(bucket_census_to_publish(now, published, 2, 0), 0);
    now[0].idle = 0;
    now[1].idle = now[1].promised = 3;
    assert_int_equal(bucket_census_to_publish(now, published, 2, 0), 1);
    assert_int_equal(bucket_census_steerable(&published[0]), 1);
    assert_int_equal(bucket_census_steerable(&published[1]), 0);
}

static void test_stalled_bucket_is_rescued(void **state)
{
    static const int idle[] = { 3, 3 }, busy[] = { 1, 1 };
    pass_t p;

    (void)state;
    /* Bucket 0's children look idle but nothing is accepted from its
     * socket: counted as having no idle child, a rescue pass gives it one
     * (from a free slot, or, with none, from bucket 1's idle children). */
    setup_pass(&p, 2, idle, busy);
    bucket_census_stalled(&p.census[0]);
    assert_int_equal(p.census[0].idle, 0);
    assert_int_equal(p.census[0].busy, 4);
    run_any_pass(&p, 2, 8, 1, 1);
    assert_int_equal(p.d[0].spawn, 1);
    assert_int_equal(p.d[1].spawn + p.d[1].moved_in, 0);
    setup_pass(&p, 2, idle, busy);
    bucket_census_stalled(&p.census[0]);
    run_any_pass(&p, 2, 8, 0, 1);
    assert_int_equal(p.num_moves, 1);
    assert_int_equal(p.moves[0].from, 1);
    assert_int_equal(p.moves[0].to, 0);
}

static void test_stalled_bucket_takes_the_last_idle_child(void **state)
{
    /* Two buckets on one address: each covers the other. */
    static const int idle[] = { 0, 1 }, busy[] = { 3, 2 };
    static const int same_address[] = { 1, 1, 1, 1 };
    static const int other_address[] = { 1, 0, 0, 1 };
    pass_t p;
    int rescue;

    (void)state;
    /* MaxRequestWorkers reached (no free slot), one idle child in all, in
     * bucket 1, and a client waiting in bucket 0: the child goes where the
     * client waits, though bucket 1 is then short of its spare minimum. */
    for (rescue = 0; rescue < 2; rescue++) {
        setup_pass(&p, 2, idle, busy);
        p.covers = same_address;
        bucket_census_stalled(&p.census[0]);
        run_any_pass(&p, 4, 8, 0, rescue);
        CASE_CHECK(rescue ? "rescue pass" : "full pass", p.num_moves == 1);
        assert_int_equal(p.moves[0].from, 1);
        assert_int_equal(p.moves[0].to, 0);
        assert_int_equal(p.d[0].starved, 0);
    }
    /* Not for a mere imbalance: nobody waits in bucket 0. */
    setup_pass(&p, 2, idle, busy);
    p.covers = same_address;
    run_any_pass(&p, 4, 8, 0, 0);
    assert_int_equal(p.num_moves, 0);
    /* Nor from a bucket that is stalled itself. */
    setup_pass(&p, 2, idle, busy);
    p.covers = same_address;
    bucket_census_stalled(&p.census[0]);
    bucket_census_stalled(&p.census[1]);
    run_any_pass(&p, 4, 8, 0, 1);
    assert_int_equal(p.num_moves, 0);
    /* Nor from a bucket on another address, whose own clients could not
     * be sent anywhere else: it keeps its last idle child. */
    setup_pass(&p, 2, idle, busy);
    p.covers = other_address;
    bucket_census_stalled(&p.census[0]);
    run_any_pass(&p, 4, 8, 0, 1);
    assert_int_equal(p.num_moves, 0);
}

static void test_floor_limit_gives_one_child(void **state)
{
    static const int idle[] = { 0, 5 };
    pass_t p;

    (void)state;
    /* A bucket held back by failures, with no child left, may gain one
     * (grow_limit 1): even a full pass with a high spawn rate gives it
     * just that one. */
    setup_pass(&p, 2, idle, NULL);
    p.grow_limit[0] = 1;
    p.rate[0] = 16;
    run_pass(&p, 8, 20, 50);
    assert_int_equal(p.d[0].spawn + p.d[0].moved_in, 1);
}

static void test_threads_spawn_and_stop(void **state)
{
    pass_t p;
    int idle[2] = { 10, 250 };

    (void)state;
    /* MinSpareThreads 75 / MaxSpareThreads 250 over 2 buckets: 38 and 37
     * minimum, 125 maximum each; 285 idle threads in all once bucket 0
     * has its child. */
    setup_pass(&p, 2, idle, NULL);
    p.unit = 25;
    run_pass(&p, 75, 250, 4);
    assert_int_equal(p.d[0].spawn, 1);
    assert_int_equal(p.d[0].idle_after, 35);
    assert_int_equal(p.d[0].stop, 0);
    /* 250 idle threads above 125: one child (25 threads) stops. */
    assert_int_equal(p.d[1].stop, 1);
    assert_int_equal(p.d[1].idle_after, 225);
    assert_int_equal(p.d[1].spawn, 0);
}

static void test_threads_no_flip_flop(void **state)
{
    pass_t p;
    int idle[1];
    int i;

    (void)state;
    /* MaxSpareThreads barely above MinSpareThreads: the share is kept a
     * child's threads above the minimum, so a stop never makes the bucket
     * short and a spawn never makes it surplus. */
    for (i = 0; i <= 100; i++) {
        idle[0] = i;
        setup_pass(&p, 1, idle, NULL);
        p.unit = 25;
        run_pass(&p, 30, 31, 10);
        if (p.d[0].stop) {
            CASE_CHECK("stop leaves the minimum", p.d[0].idle_after >= 30);
        }
        if (p.d[0].spawn) {
            CASE_CHECK("spawn stays below the maximum",
                       p.d[0].idle_after <= 30 + 25);
        }
    }
}

static void test_threads_move(void **state)
{
    pass_t p;
    int idle[2] = { 0, 40 };
    int idle_rich[2] = { 0, 60 };

    (void)state;
    /* No free slot: bucket 1 can give a child only if it keeps at least
     * as many idle threads as bucket 0 will have. */
    setup_pass(&p, 2, idle, NULL);
    p.unit = 25;
    run_pass(&p, 10, 100, 0);
    assert_int_equal(p.num_moves, 0);
    setup_pass(&p, 2, idle_rich, NULL);
    p.unit = 25;
    run_pass(&p, 10, 100, 0);
    assert_int_equal(p.num_moves, 1);
    assert_int_equal(p.moves[0].from, 1);
    assert_int_equal(p.moves[0].to, 0);
    assert_int_equal(p.d[0].idle_after, 25);
    assert_int_equal(p.d[1].idle_after, 35);
}

static void test_move_keeps_connections_open(void **state)
{
    pass_t p;
    int idle[2] = { 0, 60 };

    (void)state;
    /* Bucket 1's idle children all hold keep-alive connections: a mere
     * imbalance moves none of them (bucket 0 is starved instead). */
    setup_pass(&p, 2, idle, NULL);
    p.unit = 25;
    p.census[1].movable = 0;
    run_pass(&p, 10, 100, 0);
    assert_int_equal(p.num_moves, 0);
    assert_int_equal(p.d[0].starved, 1);
    /* Nor does a rescue pass. */
    run_any_pass(&p, 10, 100, 0, 1);
    assert_int_equal(p.num_moves, 0);
    /* One child without a connection: that one may move, once. */
    setup_pass(&p, 2, idle, NULL);
    p.unit = 25;
    p.census[1].movable = 1;
    p.rate[0] = 4;
    run_pass(&p, 10, 200, 0);
    assert_int_equal(p.num_moves, 1);
    /* A stalled bucket takes one anyway: a queue nobody serves is worse
     * than closing idle keep-alive connections, whose clients reconnect. */
    setup_pass(&p, 2, idle, NULL);
    p.unit = 25;
    p.census[1].movable = 0;
    bucket_census_stalled(&p.census[0]);
    run_any_pass(&p, 10, 100, 0, 1);
    assert_int_equal(p.num_moves, 1);
    assert_int_equal(p.moves[0].from, 1);
}

/* A child moved into a stalled bucket, or starting there, keeps the bucket's
 * idle count: it will take the queue, so the bucket asks for no other child
 * and steering keeps sending it connections (issue 25's ping-pong: zeroed,
 * the next client was spread to a bucket with no child, which stalled and
 * took the child back). */
static void test_stalled_bucket_keeps_arriving_child(void **state)
{
    static const slot_view slots[] = {
        { SLOT_BUSY, 0, 0, 1, 1, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_BUSY, 1, 0, 1, 1, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 1, 1, 0, 0, 1, 0, 0, 0, 0 },
        { SLOT_IDLE, 1, 1, 0, 0, 0, 0, 0, 0, 0 },
    };
    bucket_census census[2];
    pass_t p;

    (void)state;
    bucket_census_tally(slots, 5, 5, 5, 2, 1, census);
    assert_int_equal(census[0].arriving, 1);
    assert_int_equal(census[1].arriving, 1);
    bucket_census_stalled(&census[0]);
    assert_int_equal(census[0].idle, 1);
    assert_int_equal(census[0].busy, 1);
    bucket_census_stalled(&census[1]);
    assert_int_equal(census[1].idle, 1);
    assert_int_equal(census[1].busy, 2);
    /* Nothing arriving: no idle child, as before. */
    setup_pass(&p, 2, (const int[]){ 1, 1 }, (const int[]){ 3, 3 });
    bucket_census_stalled(&p.census[0]);
    assert_int_equal(p.census[0].idle, 0);
    /* Arriving: no further child asked for, none taken from bucket 1. */
    setup_pass(&p, 2, (const int[]){ 1, 1 }, (const int[]){ 3, 3 });
    p.census[0].arriving = 1;
    bucket_census_stalled(&p.census[0]);
    run_any_pass(&p, 2, 8, 1, 1);
    assert_int_equal(p.d[0].spawn, 0);
    assert_int_equal(p.num_moves, 0);
}

static void test_census_moved(void **state)
{
    bucket_census census[2] = {
        { .idle = 2, .busy = 1, .children = 3 },
        { .idle = 0, .busy = 4, .children = 4, .stalled = 1 },
    };

    (void)state;
    bucket_census_moved(census, 0, 1, 1);
    assert_int_equal(census[0].idle, 1);
    assert_int_equal(census[0].children, 2);
    assert_int_equal(census[1].idle, 1);
    assert_int_equal(census[1].arriving, 1);
    assert_int_equal(census[1].children, 5);
    /* the child on its way is seen where it goes, not handed out */
    assert_int_equal(bucket_census_steerable(&census[1]), 1);
    assert_int_equal(bucket_census_unclaimed(&census[1]), 0);
    assert_int_equal(bucket_census_unclaimed(&census[0]), 1);
    /* stalled: nothing handed out, what arrives still seen */
    bucket_census_stalled(&census[1]);
    assert_int_equal(bucket_census_unclaimed(&census[1]), 0);
    assert_int_equal(bucket_census_steerable(&census[1]), 1);
}

/* Steering's counts: the census while a bucket has an idle unit; with
 * none, the last counts for one pass (a stalled bucket's cleared), then
 * the census again. */
static void test_census_to_publish(void **state)
{
    bucket_census now[3], published[3];
    int carried;

    (void)state;
    memset(now, 0, sizeof(now));
    memset(published, 0, sizeof(published));
    now[1].idle = 1;
    carried = bucket_census_to_publish(now, published, 3, 0);
    assert_int_equal(carried, 0);
    assert_int_equal(published[1].idle, 1);
    /* The free child caught in a request: bucket 1 kept for one pass. */
    now[1].idle = 0;
    carried = bucket_census_to_publish(now, published, 3, carried);
    assert_int_equal(carried, 1);
    assert_int_equal(published[1].idle, 1);
    carried = bucket_census_to_publish(now, published, 3, carried);
    assert_int_equal(carried, 0);
    assert_int_equal(published[1].idle, 0);
    /* A stalled bucket is never carried. */
    now[2].idle = 2;
    carried = bucket_census_to_publish(now, published, 3, carried);
    now[2].idle = 0;
    now[2].stalled = 1;
    carried = bucket_census_to_publish(now, published, 3, carried);
    assert_int_equal(carried, 0);
    assert_int_equal(published[2].idle, 0);
    /* Nor after a move (carried passed as 1). */
    published[0].idle = 1;
    now[2].stalled = 0;
    assert_int_equal(bucket_census_to_publish(now, published, 3, 1), 0);
    assert_int_equal(published[0].idle, 0);
}

/* A connection queued in a bucket will take one of its idle units: the
 * steering program may hand out only the others (a burst of connections
 * between two censuses went to the first bucket that had an idle child). */
static void test_census_unclaimed_leaves_out_queued(void **state)
{
    bucket_census c;

    (void)state;
    memset(&c, 0, sizeof(c));
    c.idle = 4;
    c.queued = 3;
    assert_int_equal(bucket_census_unclaimed(&c), 1);
    c.queued = 4;
    assert_int_equal(bucket_census_unclaimed(&c), 0);
    c.queued = 9;
    assert_int_equal(bucket_census_unclaimed(&c), 0);
    c.queued = 0;
    assert_int_equal(bucket_census_unclaimed(&c), 4);
}

/* Children still on their way or in their set-up are not handed out, only
 * seen: at a graceful restart raising BucketCount, every slot in use, the
 * added bucket's hundreds still starting were handed out beside its first
 * ready ones, and 92 connections waited there. */
static void test_census_unclaimed_leaves_out_children_still_starting(
    void **state)
{
    static const slot_view slots[] = {
        { SLOT_IDLE, 1, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 1, 1, 0, 0, 1, 0, 0, 0, 0 },
        { SLOT_IDLE, 1, 1, 0, 0, 1, 0, 0, 0, 0 },
        { SLOT_REPLACING, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_BUSY, 0, 0, 1, 1, 0, 0, 0, 0, 0 },
    };
    bucket_census census[2];

    (void)state;
    assert_int_equal(bucket_census_tally(slots, 6, 6, 6, 2, 1, census), 0);
    assert_int_equal(bucket_census_steerable(&census[1]), 4);
    assert_int_equal(bucket_census_unclaimed(&census[1]), 1);
    assert_int_equal(bucket_census_steerable(&census[0]), 1);
    assert_int_equal(bucket_census_unclaimed(&census[0]), 1);
}

/* Under load steering, a short bucket that is not stalled gets no child
 * moved in: its clients go where the idle children are (httpd's test
 * suite at MaxClients 7: 14-43 moves a run, most undoing the one before,
 * 23-51 children started where stock prefork started 8). A stalled one
 * still does; with the hash, shortness alone still moves. */
static void test_no_moves_for_shortness_under_load_steering(void **state)
{
    static const int idle[] = { 0, 2 }, busy[] = { 3, 2 };
    pass_t p;

    (void)state;
    setup_pass(&p, 2, idle, busy);
    p.steered_to_idle = 1;
    run_any_pass(&p, 2, 4, 0, 1);
    assert_int_equal(p.num_moves, 0);
    run_pass(&p, 2, 4, 0);
    assert_int_equal(p.num_moves, 0);
    setup_pass(&p, 2, idle, busy);
    p.steered_to_idle = 1;
    bucket_census_stalled(&p.census[0]);
    run_any_pass(&p, 2, 4, 0, 1);
    assert_int_equal(p.num_moves, 1);
    assert_int_equal(p.moves[0].to, 0);
    setup_pass(&p, 2, idle, busy);
    run_any_pass(&p, 2, 4, 0, 1);
    assert_int_equal(p.num_moves, 1);
}

/* At MaxRequestWorkers under load steering, a bucket left with no child
 * (out of its groups, so it never stalls) gets an idle one moved in. */
static void test_a_childless_bucket_gets_a_child_under_load_steering(
    void **state)
{
    static const int idle[] = { 3, 0 }, busy[] = { 1, 0 };
    pass_t p;

    (void)state;
    setup_pass(&p, 2, idle, busy);
    p.steered_to_idle = 1;
    run_any_pass(&p, 1, 4, 0, 1);
    assert_int_equal(p.num_moves, 1);
    assert_int_equal(p.moves[0].from, 0);
    assert_int_equal(p.moves[0].to, 1);
}

static void test_census_movable(void **state)
{
    static const slot_view slots[] = {
        { SLOT_IDLE, 0, 4, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 0, 4, 1, 0, 0, 0, 0, 0, 0 },
        { SLOT_IDLE, 0, 3, 0, 0, 0, 0, 0, 0, 0 },
        { SLOT_BUSY, 0, 0, 1, 0, 0, 0, 0, 0, 0 },
        { SLOT_REPLACING, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    bucket_census census[1];

    (void)state;
    /* Only a child with every thread idle and no connection open. */
    bucket_census_tally(slots, 5, 5, 5, 1, 4, census);
    assert_int_equal(census[0].movable, 1);
    assert_int_equal(census[0].stalled, 0);
    bucket_census_stalled(&census[0]);
    assert_int_equal(census[0].stalled, 1);
}

static void test_start_children(void **state)
{
    (void)state;
    /* StartServers when it covers two children per bucket. */
    assert_int_equal(bucket_start_children(5, 2, 150), 5);
    /* Raised to two per bucket. */
    assert_int_equal(bucket_start_children(2, 3, 150), 6);
    /* Never beyond MaxRequestWorkers. */
    assert_int_equal(bucket_start_children(2, 4, 7), 7);
    assert_int_equal(bucket_start_children(300, 1, 150), 150);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_stalled_bucket_keeps_arriving_child),
        POOL_TEST(test_census_moved),
        POOL_TEST(test_census_to_publish),
        POOL_TEST(test_census_unclaimed_leaves_out_queued),
        POOL_TEST(test_census_unclaimed_leaves_out_children_still_starting),
        POOL_TEST(test_census_promised_slots_are_not_steered_to),
        POOL_TEST(
            test_census_kept_old_children_are_steered_to_where_they_accept),
        POOL_TEST(test_census_to_publish_counts_steerable_units),
        POOL_TEST(test_no_moves_for_shortness_under_load_steering),
        POOL_TEST(test_a_childless_bucket_gets_a_child_under_load_steering),
        POOL_TEST(test_spare_share_defaults),
        POOL_TEST(test_spare_share_more_buckets_than_spares),
        POOL_TEST(test_spare_share_properties),
        POOL_TEST(test_spare_share_no_buckets),
        POOL_TEST(test_decide_too_many_idle),
        POOL_TEST(test_decide_within_range),
        POOL_TEST(test_decide_short_of_idle),
        POOL_TEST(test_decide_rate_bounds),
        POOL_TEST(test_decide_free_slots_limit),
        POOL_TEST(test_starved_bucket_served_first),
        POOL_TEST(test_capacity_moves_to_busy_bucket),
        POOL_TEST(test_no_move_that_only_swaps),
        POOL_TEST(test_short_bucket_never_donates),
        POOL_TEST(test_held_bucket_gets_nothing),
        POOL_TEST(test_slots_before_moves),
        POOL_TEST(test_rescue_pass),
        POOL_TEST(test_rescue_pass_without_moves),
        POOL_TEST(test_decide_properties),
        POOL_TEST(test_skewed_load_simulation),
        POOL_TEST(test_census_tally),
        POOL_TEST(test_census_threads),
        POOL_TEST(test_census_room_beside_leaving_children),
        POOL_TEST(test_census_leaving_keepalive_holders_count_nowhere),
        POOL_TEST(test_stalled_bucket_is_rescued),
        POOL_TEST(test_stalled_bucket_takes_the_last_idle_child),
        POOL_TEST(test_floor_limit_gives_one_child),
        POOL_TEST(test_threads_spawn_and_stop),
        POOL_TEST(test_surplus_counted_over_the_server),
        POOL_TEST(test_threads_no_flip_flop),
        POOL_TEST(test_threads_move),
        POOL_TEST(test_move_keeps_connections_open),
        POOL_TEST(test_census_movable),
        POOL_TEST(test_start_children),
    };

    return RUN_POOL_TESTS(tests);
}
