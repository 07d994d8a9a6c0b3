/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_takeover.c: unit tests of which children a take-over
 * trusts (from the old build's record, or from the scoreboard with the
 * kernel's word) and which sockets it closes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy_takeover.h"
#include "unit_test.h"

#define PARENT 100
#define USER 33
#define BEGAN 5000

/* A worker child of PARENT, as the kernel describes one. */
static process_facts worker(void)
{
    process_facts f = { 1, 0, PARENT, 4000, USER, USER, 1 };
    return f;
}

static void test_recorded_child_is_taken(void **state)
{
    process_facts f = worker();

    (void)state;
    assert_int_equal(takeover_judge_recorded(&f, PARENT, 4000), TAKE_OVER);
    /* Its user and sockets do not matter: the record is the parent's. */
    f.real_uid = 0;
    f.holds_listener = 0;
    assert_int_equal(takeover_judge_recorded(&f, PARENT, 4000), TAKE_OVER);
}

static void test_recorded_pid_reused_is_refused(void **state)
{
    process_facts f = worker();

    (void)state;
    f.start_ticks = 4100;
    assert_int_equal(takeover_judge_recorded(&f, PARENT, 4000),
                     REFUSE_OTHER_PROCESS);
    f = worker();
    f.parent = 1;
    assert_int_equal(takeover_judge_recorded(&f, PARENT, 4000),
                     REFUSE_NOT_CHILD);
    f = worker();
    f.zombie = 1;
    assert_int_equal(takeover_judge_recorded(&f, PARENT, 4000),
                     REFUSE_GONE);
    f.found = 0;
    f.zombie = 0;
    assert_int_equal(takeover_judge_recorded(&f, PARENT, 4000),
                     REFUSE_GONE);
}

static void test_scoreboard_worker_is_taken(void **state)
{
    process_facts f = worker();

    (void)state;
    assert_int_equal(takeover_judge_unrecorded(&f, PARENT, USER, BEGAN),
                     TAKE_OVER);
    /* Started in the same tick as the restart: still before it. */
    f.start_ticks = BEGAN;
    assert_int_equal(takeover_judge_unrecorded(&f, PARENT, USER, BEGAN),
                     TAKE_OVER);
}

static void test_scoreboard_helpers_are_refused(void **state)
{
    struct {
        const char *what;
        process_facts f;
        takeover_verdict_e verdict;
    } cases[] = {
        { "a process of someone else's", { 1, 0, 1, 4000, USER, USER, 1 },
          REFUSE_NOT_CHILD },
        { "a piped logger (root)", { 1, 0, PARENT, 4000, 0, 0, 0 },
          REFUSE_OTHER_USER },
        { "a child that has only set its effective uid",
          { 1, 0, PARENT, 4000, 0, USER, 1 }, REFUSE_OTHER_USER },
        { "mod_cgid's daemon (User, no listener)",
          { 1, 0, PARENT, 4000, USER, USER, 0 }, REFUSE_NOT_WORKER },
        { "a helper started by the new configuration",
          { 1, 0, PARENT, BEGAN + 1, USER, USER, 1 }, REFUSE_TOO_NEW },
        { "gone", { 0, 0, 0, 0, 0, 0, 0 }, REFUSE_GONE },
        { "a zombie", { 1, 1, PARENT, 4000, USER, USER, 0 }, REFUSE_GONE },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CASE_CHECK(cases[i].what,
                   takeover_judge_unrecorded(&cases[i].f, PARENT, USER, BEGAN)
                   == cases[i].verdict);
        CASE_CHECK(cases[i].what,
                   takeover_verdict_name(cases[i].verdict) != NULL);
    }
}

static void test_sockets_closed(void **state)
{
    struct {
        const char *what;
        socket_facts f;
        int closes;
    } cases[] = {
        { "recorded duplicate", { 1, 0, 1, 1, 1, 0 }, 1 },
        { "recorded, but another socket now", { 1, 0, 1, 0, 1, 0 }, 0 },
        { "a third-party module's, on another port", { 1, 0, 1, 0, 0, 0 },
          0 },
        { "no record: on a Listen address", { 1, 0, 0, 0, 1, 0 }, 1 },
        { "no record: on another address", { 1, 0, 0, 0, 0, 0 }, 0 },
        { "core's", { 1, 1, 1, 1, 1, 0 }, 0 },
        { "core's, no record", { 1, 1, 0, 0, 1, 0 }, 0 },
        { "not a reuseport listener", { 0, 0, 1, 1, 1, 0 }, 0 },
        { "no record: a kept passed socket on a Listen address",
          { 1, 0, 0, 0, 1, 1 }, 0 },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CASE_CHECK(cases[i].what,
                   takeover_closes_socket(&cases[i].f) == cases[i].closes);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_recorded_child_is_taken),
        POOL_TEST(test_recorded_pid_reused_is_refused),
        POOL_TEST(test_scoreboard_worker_is_taken),
        POOL_TEST(test_scoreboard_helpers_are_refused),
        POOL_TEST(test_sockets_closed),
    };

    return RUN_POOL_TESTS(tests);
}
