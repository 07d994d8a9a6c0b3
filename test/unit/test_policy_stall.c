/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_stall.c: unit tests of the stall verdict: connections that
 * wait in an accept queue that never goes down, for how long, how often a
 * stalled bucket asks for another child, and its end. The verdict takes
 * the queue's length as the parent reads it and nothing children write.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy_stall.h"
#include "unit_test.h"

#define MS(n) apr_time_from_msec(n)
/* An arbitrary start, far from 0 (which means "never" in the watch). */
#define T0 apr_time_from_sec(1000)

static void test_nothing_waiting_is_no_stall(void **state)
{
    stall_watch w = { 0 };
    int i;

    (void)state;
    for (i = 0; i < 50; i++) {
        assert_int_equal(stall_watch_update(&w, 0, 0, T0 + MS(100 * i),
                                            STALL_AFTER), STALL_NONE);
    }
    assert_int_equal(stall_watch_stalled_for(&w, T0 + MS(5000)), 0);
}

static void test_waiting_while_accepting_is_no_stall(void **state)
{
    stall_watch w = { 0 };
    int i;

    (void)state;
    /* A busy bucket: its queue never empties, but goes down between
     * connections coming. */
    for (i = 0; i < 50; i++) {
        assert_int_equal(stall_watch_update(&w, i % 2 ? 40 : 37, 0,
                                            T0 + MS(100 * i), STALL_AFTER),
                         STALL_NONE);
    }
}

static void test_a_queue_that_never_goes_down_stalls(void **state)
{
    stall_watch w = { 0 };
    int i, stalled = 0;

    (void)state;
    /* Growing or steady for longer than STALL_AFTER, with a child that
     * does not serve: nothing left the queue. */
    for (i = 0; i <= 5; i++) {
        stalled |= stall_watch_update(&w, 10 + (apr_uint32_t)i / 2, 0,
                                      T0 + MS(100 * i), STALL_AFTER)
                   == STALL_BEGAN;
    }
    assert_true(stalled);
}

static void test_a_busy_bucket_whose_queue_stays_is_no_stall(void **state)
{
    stall_watch w = { 0 };
    int i;

    (void)state;
    /* Every unit serves a request and clients come back as fast as they
     * are answered: the queue stays as long, the bucket is busy. */
    for (i = 0; i < 50; i++) {
        assert_int_equal(stall_watch_update(&w, 8, 1, T0 + MS(100 * i),
                                            STALL_AFTER), STALL_NONE);
    }
    /* The same queue with a unit that does not serve: stalled. */
    for (i = 50; i < 54; i++) {
        stall_watch_update(&w, 8, 0, T0 + MS(100 * i), STALL_AFTER);
    }
    assert_true(stall_watch_stalled_for(&w, T0 + MS(5300)) > 0);
    /* Serving again ends it. */
    assert_int_equal(stall_watch_update(&w, 8, 1, T0 + MS(5400),
                                        STALL_AFTER), STALL_ENDED);
}

/* Every unit serving makes a bucket busy only while no other bucket has
 * an idle unit: one that has would take the waiting connections in a
 * single accept queue. */
static void test_a_busy_bucket_beside_an_idle_one_is_stalled(void **state)
{
    stall_watch w = { 0 };
    int i, stalled = 0;

    (void)state;
    assert_true(stall_bucket_busy(2, 2, 0));
    assert_false(stall_bucket_busy(2, 2, 1));
    assert_false(stall_bucket_busy(2, 1, 0));
    assert_false(stall_bucket_busy(0, 0, 0));
    /* Two CGIs in hand, one client waiting behind them, an idle child
     * in the other bucket: stalled after STALL_AFTER. */
    for (i = 0; i < 4; i++) {
        stalled |= stall_watch_update(&w, 1, stall_bucket_busy(2, 2, 1),
                                      T0 + MS(100 * i), STALL_AFTER)
                   == STALL_BEGAN;
    }
    assert_true(stalled);
}

static void test_waiting_with_nothing_accepted_stalls_after_the_limit(
    void **state)
{
    stall_watch w = { 0 };

    (void)state;
    assert_int_equal(stall_watch_update(&w, 2, 0, T0, STALL_AFTER),
                     STALL_NONE);
    /* The first observation of the wait starts its clock. */
    assert_int_equal(stall_watch_update(&w, 2, 0, T0 + MS(100), STALL_AFTER),
                     STALL_NONE);
    assert_int_equal(stall_watch_update(&w, 3, 0, T0 + MS(200), STALL_AFTER),
                     STALL_NONE);
    assert_int_equal(stall_watch_update(&w, 3, 0, T0 + MS(300), STALL_AFTER),
                     STALL_BEGAN);
    assert_int_equal(stall_watch_stalled_for(&w, T0 + MS(300)), MS(200));
}

static void test_a_stall_asks_again_once_per_period(void **state)
{
    stall_watch w = { 0 };
    int i, asks = 0;

    (void)state;
    stall_watch_update(&w, 1, 0, T0, STALL_AFTER);
    /* Two seconds of observations every 100 ms, nothing accepted. */
    for (i = 1; i <= 20; i++) {
        stall_verdict v = stall_watch_update(&w, 1, 0, T0 + MS(100 * i),
                                             STALL_AFTER);
        assert_true(v != STALL_ENDED);
        asks += v == STALL_BEGAN || v == STALL_GOES_ON;
        if (v == STALL_BEGAN) {
            assert_int_equal(asks, 1);
        }
    }
    /* One child per STALL_AFTER at most: time for each to start. */
    assert_in_range(asks, 8, 10);
    assert_int_equal(stall_watch_stalled_for(&w, T0 + MS(2000)), MS(1900));
}

static void test_an_accept_ends_the_stall(void **state)
{
    stall_watch w = { 0 };
    int i;

    (void)state;
    for (i = 0; i <= 5; i++) {
        stall_watch_update(&w, 4, 0, T0 + MS(100 * i), STALL_AFTER);
    }
    assert_true(stall_watch_stalled_for(&w, T0 + MS(500)) > 0);
    assert_int_equal(stall_watch_update(&w, 3, 0, T0 + MS(600),
                                        STALL_AFTER), STALL_ENDED);
    assert_int_equal(w.lasted, MS(500));
    assert_int_equal(stall_watch_stalled_for(&w, T0 + MS(600)), 0);
    /* And a new wait needs the whole period again. */
    assert_int_equal(stall_watch_update(&w, 3, 0, T0 + MS(700),
                                        STALL_AFTER), STALL_NONE);
    assert_int_equal(stall_watch_update(&w, 3, 0, T0 + MS(800),
                                        STALL_AFTER), STALL_NONE);
}

static void test_an_emptied_queue_ends_the_stall(void **state)
{
    stall_watch w = { 0 };
    int i;

    (void)state;
    /* The clients gave up (or were moved): nothing waits any more. */
    for (i = 0; i <= 5; i++) {
        stall_watch_update(&w, 4, 0, T0 + MS(100 * i), STALL_AFTER);
    }
    assert_int_equal(stall_watch_update(&w, 0, 0, T0 + MS(600),
                                        STALL_AFTER), STALL_ENDED);
}

static void test_a_keepalive_connection_idle_long_enough_is_reclaimable(
    void **state)
{
    (void)state;
    /* A client between two requests keeps its connection. */
    assert_false(keepalive_reclaimable(0));
    assert_false(keepalive_reclaimable(KEEPALIVE_RECLAIM_MIN_IDLE - 1));
    assert_true(keepalive_reclaimable(KEEPALIVE_RECLAIM_MIN_IDLE));
    assert_true(keepalive_reclaimable(apr_time_from_sec(30)));
}

static void test_an_asked_holder_gives_up_only_if_idle_needed_and_staying(
    void **state)
{
    (void)state;
    assert_true(keepalive_gives_up(KEEPALIVE_RECLAIM_MIN_IDLE, 1, 0));
    /* Asked during a request: the ask lands as the next wait begins. */
    assert_false(keepalive_gives_up(0, 1, 0));
    assert_false(keepalive_gives_up(0, 1, 1));
    /* The queue is empty again: nothing to make room for. */
    assert_false(keepalive_gives_up(apr_time_from_sec(10), 0, 0));
    /* Leaving since the ask was sent: a stopping child keeps its
     * connection, however long idle and whoever waits. */
    assert_false(keepalive_gives_up(apr_time_from_sec(10), 0, 1));
    assert_false(keepalive_gives_up(apr_time_from_sec(10), 1, 1));
}

static void test_no_stall_no_remedy(void **state)
{
    stall_remedy r;

    (void)state;
    r = stall_remedy_decide(STALL_NONE, 0, 3, 0, 5);
    assert_int_equal(r.give_ups, 0);
    assert_int_equal(r.needs_child, 0);
    r = stall_remedy_decide(STALL_ENDED, 0, 3, 0, 5);
    assert_int_equal(r.give_ups, 0);
    assert_int_equal(r.needs_child, 0);
}

static void test_a_bucket_that_can_grow_gets_a_child(void **state)
{
    stall_remedy r;

    (void)state;
    /* Below the limit nobody's keep-alive connection is closed. */
    r = stall_remedy_decide(STALL_BEGAN, MS(200), 2, 1, 5);
    assert_int_equal(r.give_ups, 0);
    assert_int_equal(r.needs_child, 1);
}

static void test_at_the_limit_holders_give_up_one_per_waiting(void **state)
{
    stall_remedy r;

    (void)state;
    /* Enough holders: no move, one give-up per waiting connection. */
    r = stall_remedy_decide(STALL_BEGAN, MS(100), 2, 0, 5);
    assert_int_equal(r.give_ups, 2);
    assert_int_equal(r.needs_child, 0);
    /* Too few: all of them, and a move for the rest. */
    r = stall_remedy_decide(STALL_BEGAN, MS(100), 4, 0, 3);
    assert_int_equal(r.give_ups, 3);
    assert_int_equal(r.needs_child, 1);
    /* None idle long enough (or the event model): a move, as before. */
    r = stall_remedy_decide(STALL_BEGAN, MS(200), 1, 0, 0);
    assert_int_equal(r.give_ups, 0);
    assert_int_equal(r.needs_child, 1);
}

static void test_a_stall_that_goes_on_gets_a_move_too(void **state)
{
    stall_remedy r;

    (void)state;
    /* The holders asked may have refused (a request came): asked again,
     * and once the stall has lasted STALL_RECLAIM_FALLBACK a move as
     * well, so that a holder that never gives up cannot keep the bucket
     * waiting. */
    r = stall_remedy_decide(STALL_GOES_ON, STALL_RECLAIM_FALLBACK - 1, 1, 0,
                            5);
    assert_int_equal(r.give_ups, 1);
    assert_int_equal(r.needs_child, 0);
    r = stall_remedy_decide(STALL_GOES_ON, STALL_RECLAIM_FALLBACK, 1, 0, 5);
    assert_int_equal(r.give_ups, 1);
    assert_int_equal(r.needs_child, 1);
}

static void test_holders_wait_for_idle_units_and_leaving_slots(
    void **state)
{
    stall_remedy r;

    (void)state;
    assert_int_equal(stall_holders_to_ask(3, 0, 0, 0), 3);
    assert_int_equal(stall_holders_to_ask(0, 0, 0, 0), 0);
    /* An idle unit: a child ready but starved of CPU, one starting, or a
     * replacement promised a leaving child's slot: the bucket waits for
     * it, asks nobody, and is watched at the usual period... */
    assert_int_equal(stall_holders_to_ask(3, 1, 0, 0), 0);
    assert_int_equal(stall_watch_after(0, stall_holders_to_ask(3, 1, 0, 0)),
                     STALL_AFTER);
    r = stall_remedy_decide(STALL_BEGAN, MS(200), 2, 0,
                            stall_holders_to_ask(3, 1, 0, 0));
    assert_int_equal(r.give_ups, 0);
    /* ...and gets what a stall with no holders gets: a child (moved in,
     * at the limit). */
    assert_int_equal(r.needs_child, 1);
    assert_int_equal(stall_holders_to_ask(3, 1, 0,
                                          STALL_IDLE_PATIENCE - 1), 0);
    /* ...until it has waited long enough for that child to be hung. */
    assert_int_equal(stall_holders_to_ask(3, 1, 0, STALL_IDLE_PATIENCE), 3);
    /* Old children holding slots (a graceful restart): the limit lasts
     * only as long as their connections, however long the stall. */
    assert_int_equal(stall_holders_to_ask(3, 0, 1, 0), 0);
    assert_int_equal(stall_holders_to_ask(3, 0, 1, apr_time_from_sec(60)),
                     0);
}

static void test_a_bucket_with_holders_to_ask_is_watched_closer(
    void **state)
{
    stall_watch w = { 0 };
    apr_interval_time_t after = stall_watch_after(0, 2);

    (void)state;
    assert_true(after < STALL_AFTER);
    assert_int_equal(stall_watch_after(1, 2), STALL_AFTER);
    assert_int_equal(stall_watch_after(0, 0), STALL_AFTER);
    /* The first look starts the watch; then a queue seen twice, 100 ms
     * apart, without going down has stalled. */
    assert_int_equal(stall_watch_update(&w, 1, 0, T0, after), STALL_NONE);
    assert_int_equal(stall_watch_update(&w, 1, 0, T0 + MS(100), after),
                     STALL_NONE);
    assert_int_equal(stall_watch_update(&w, 1, 0, T0 + MS(200), after),
                     STALL_BEGAN);
}

static void test_a_stall_asks_ready_children_to_look(void **state)
{
    static const struct {
        stall_verdict v;
        apr_uint32_t queued;
        int idle_units;
        look_reach reach;
        int asked;
    } cases[] = {
        /* Prefork model: one child per waiting connection, as many as
         * are idle. */
        { STALL_BEGAN, 2, 5, LOOK_REACHES_CHILD, 2 },
        { STALL_GOES_ON, 9, 3, LOOK_REACHES_CHILD, 3 },
        /* Event model: one child wakes them all. */
        { STALL_BEGAN, 9, 3, LOOK_REACHES_BUCKET, 1 },
        /* Nobody idle, children a look cannot reach, no stall. */
        { STALL_BEGAN, 2, 0, LOOK_REACHES_CHILD, 0 },
        { STALL_BEGAN, 2, 5, LOOK_REACHES_NONE, 0 },
        { STALL_NONE, 2, 5, LOOK_REACHES_CHILD, 0 },
        { STALL_ENDED, 2, 5, LOOK_REACHES_BUCKET, 0 },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(stall_looks_to_ask(cases[i].v, cases[i].queued,
                                            cases[i].idle_units,
                                            cases[i].reach),
                         cases[i].asked);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_waiting_is_no_stall),
        cmocka_unit_test(test_waiting_while_accepting_is_no_stall),
        cmocka_unit_test(
            test_waiting_with_nothing_accepted_stalls_after_the_limit),
        cmocka_unit_test(test_a_stall_asks_again_once_per_period),
        cmocka_unit_test(test_an_accept_ends_the_stall),
        cmocka_unit_test(test_an_emptied_queue_ends_the_stall),
        cmocka_unit_test(test_a_queue_that_never_goes_down_stalls),
        cmocka_unit_test(test_a_busy_bucket_whose_queue_stays_is_no_stall),
        cmocka_unit_test(test_a_busy_bucket_beside_an_idle_one_is_stalled),
        cmocka_unit_test(
            test_a_keepalive_connection_idle_long_enough_is_reclaimable),
        cmocka_unit_test(
            test_an_asked_holder_gives_up_only_if_idle_needed_and_staying),
        cmocka_unit_test(test_no_stall_no_remedy),
        cmocka_unit_test(test_a_bucket_that_can_grow_gets_a_child),
        cmocka_unit_test(test_at_the_limit_holders_give_up_one_per_waiting),
        cmocka_unit_test(test_a_stall_that_goes_on_gets_a_move_too),
        cmocka_unit_test(
            test_a_bucket_with_holders_to_ask_is_watched_closer),
        cmocka_unit_test(test_holders_wait_for_idle_units_and_leaving_slots),
        cmocka_unit_test(test_a_stall_asks_ready_children_to_look),
    };

    return RUN_POOL_TESTS(tests);
}
