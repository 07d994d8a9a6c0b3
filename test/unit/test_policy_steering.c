/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_steering.c: unit tests of the reuseport choices: which migration
 * mechanism a kernel's trials earn, and what a plan change does with each
 * retained duplicate.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "unit_test.h"
#include "policy_steering.h"

static migration_trial trial(migration_trial_e outcome, int err, int queued,
                             int moved)
{
    migration_trial t;

    t.outcome = outcome;
    t.err = err;
    t.queued = queued;
    t.moved = moved;
    return t;
}

static const migration_trial not_run = { TRIAL_NOT_RUN, 0, 0, 0 };

static void test_program_that_migrates_is_chosen(void **state)
{
    migration_trial t = trial(TRIAL_DONE, 0, 8, 8);
    migration_choice c = migration_choose(*state, &t, &not_run, NULL, 0);

    assert_int_equal(c.mechanism, MIGRATION_EBPF);
    assert_contains(c.reason, "per-group eBPF (5.14+)");
    assert_contains(c.reason, "8 queued");
    /* The sysctl being on changes nothing: ours is per group. */
    c = migration_choose(*state, &t, &not_run, NULL, 1);
    assert_int_equal(c.mechanism, MIGRATION_EBPF);
}

/* Debian's 5.10: the program loads and attaches, nothing moves. The
 * version number and the sysctl file must not fool the choice. */
static void test_program_taken_but_nothing_moves_is_none(void **state)
{
    migration_trial t = trial(TRIAL_DONE, 0, 8, 0);
    migration_choice c = migration_choose(*state, &t, &not_run, NULL, 0);

    assert_int_equal(c.mechanism, MIGRATION_NONE);
    assert_contains(c.reason, "none: the kernel took the program");
    assert_contains(c.reason, "handed 0");
    assert_contains(c.reason, "reset when it closes");
    /* Some but not all moved: still no guarantee. */
    t = trial(TRIAL_DONE, 0, 8, 7);
    assert_int_equal(migration_choose(*state, &t, &not_run, NULL, 0).mechanism,
                     MIGRATION_NONE);
}

static void test_refusals_are_none_with_the_reason(void **state)
{
    static const struct {
        migration_trial_e outcome;
        int err;
        const char *says;
    } cases[] = {
        { TRIAL_LOAD_REFUSED, EINVAL, "refused a SELECT_OR_MIGRATE program" },
        { TRIAL_LOAD_REFUSED, EPERM, "CAP_BPF" },
        { TRIAL_ATTACH_REFUSED, ENOPROTOOPT, "refused to attach" },
        { TRIAL_SETUP_FAILED, EADDRNOTAVAIL, "trial sockets failed" },
        { TRIAL_NO_BUILD, 0, "built without linux/bpf.h" },
        { TRIAL_INCONCLUSIVE, 0, "queued nothing" },
        { TRIAL_NOT_RUN, 0, "no SO_REUSEPORT" },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        migration_trial t = trial(cases[i].outcome, cases[i].err, 0, 0);
        migration_choice c = migration_choose(*state, &t, &not_run, NULL, 0);

        CASE_CHECK(cases[i].says, c.mechanism == MIGRATION_NONE);
        assert_contains(c.reason, "none: ");
        assert_contains(c.reason, cases[i].says);
        assert_contains(c.reason, "reset when it closes");
    }
}

static void test_sysctl_counts_only_when_seen_migrating(void **state)
{
    migration_trial refused = trial(TRIAL_LOAD_REFUSED, EINVAL, 0, 0);
    migration_trial moved = trial(TRIAL_DONE, 0, 8, 8);
    migration_trial stuck = trial(TRIAL_DONE, 0, 8, 0);
    migration_choice c;

    c = migration_choose(*state, &refused, &moved, NULL, 1);
    assert_int_equal(c.mechanism, MIGRATION_SYSCTL);
    assert_contains(c.reason, "tcp_migrate_req=1");
    c = migration_choose(*state, &refused, &stuck, NULL, 1);
    assert_int_equal(c.mechanism, MIGRATION_NONE);
    assert_contains(c.reason, "nor did net.ipv4.tcp_migrate_req=1");
    /* A trial without the program means nothing with the sysctl off. */
    c = migration_choose(*state, &refused, &moved, NULL, 0);
    assert_int_equal(c.mechanism, MIGRATION_NONE);
}

/* 4.19 to 5.13 (Debian's 5.10): nothing migrates, but a program can
 * leave a socket out. */
static void test_drain_when_the_kernel_leaves_a_socket_out(void **state)
{
    migration_trial nothing_moved = trial(TRIAL_DONE, 0, 8, 0);
    migration_trial refused = trial(TRIAL_LOAD_REFUSED, EINVAL, 0, 0);
    migration_trial moved = trial(TRIAL_DONE, 0, 8, 8);
    migration_trial drained = trial(TRIAL_DONE, 0, 8, 8);
    migration_trial leaked = trial(TRIAL_DONE, 0, 8, 6);
    migration_trial no_map = trial(TRIAL_LOAD_REFUSED, EINVAL, 0, 0);
    /* with_program, without_program, drain, sysctl -> mechanism, and
     * what the reason says (NULL: nothing to check) */
    const struct {
        const migration_trial *with, *without, *drain;
        int sysctl;
        migration_e mechanism;
        const char *says;
    } cases[] = {
        { &nothing_moved, &not_run, &drained, 0, MIGRATION_DRAIN,
          "drain (no migration: the kernel took" },
        { &nothing_moved, &not_run, &drained, 0, MIGRATION_DRAIN,
          "all 8 connections" },
        { &refused, &not_run, &drained, 0, MIGRATION_DRAIN,
          "refused a SELECT_OR_MIGRATE" },
        /* Migration is preferred where it works. */
        { &moved, &not_run, &drained, 0, MIGRATION_EBPF, NULL },
        { &refused, &moved, &drained, 1, MIGRATION_SYSCTL, NULL },
        /* A program that leaks connections to the left-out socket, or no
         * program at all: none, saying why. */
        { &nothing_moved, &not_run, &leaked, 0, MIGRATION_NONE,
          "cannot drain either: a program leaving a listener out sent it "
          "2 of 8" },
        { &refused, &not_run, &no_map, 0, MIGRATION_NONE,
          "Linux before 4.19?" },
        { &refused, &not_run, &no_map, 0, MIGRATION_NONE,
          "reset when it closes" },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        migration_choice c = migration_choose(*state, cases[i].with,
                                              cases[i].without,
                                              cases[i].drain,
                                              cases[i].sysctl);

        CASE_CHECK(cases[i].says ? cases[i].says : "mechanism",
                   c.mechanism == cases[i].mechanism);
        if (cases[i].says != NULL) {
            assert_contains(c.reason, cases[i].says);
        }
    }
    /* The drain trial not run: not mentioned. */
    assert_not_contains(migration_choose(*state, &refused, &not_run,
                                         &not_run, 0).reason, "drain");
}

static void test_migration_names(void **state)
{
    (void)state;
    assert_string_equal(migration_name(MIGRATION_EBPF), "migrate");
    assert_string_equal(migration_name(MIGRATION_SYSCTL), "sysctl");
    assert_string_equal(migration_name(MIGRATION_DRAIN), "drain");
    assert_string_equal(migration_name(MIGRATION_NONE), "none");
}

static void test_plan_socket_actions(void **state)
{
    static const struct {
        plan_socket_state st;
        plan_socket_action_e action;
        const char *says;
    } cases[] = {
        /* in_new_plan, group_stays, group_migrates, group_drains,
         * drained_generations, queued */
        { { 1, 1, 1, 0, 0, 5 }, PLAN_SOCKET_KEEP, "keeping" },
        { { 1, 1, 0, 0, 0, 5 }, PLAN_SOCKET_KEEP, "keeping" },
        { { 0, 1, 1, 0, 0, 5 }, PLAN_SOCKET_RETIRE,
          "as soon as no old child accepts from it" },
        { { 0, 1, 0, 0, 0, 5 }, PLAN_SOCKET_CLOSE_RESET,
          "reset when the last old" },
        /* The address itself went: nothing left to migrate to. */
        { { 0, 0, 1, 0, 0, 5 }, PLAN_SOCKET_CLOSE_RESET,
          "no longer listened on" },
        { { 0, 0, 0, 1, 1, 0 }, PLAN_SOCKET_CLOSE_RESET,
          "no longer listened on" },
        /* Drain: first left out (even with an empty queue: a connection
         * steered to it just before may still complete its handshake),
         * closed at a later restart once a generation passed and its
         * queue is empty. */
        { { 0, 1, 0, 1, 0, 0 }, PLAN_SOCKET_DRAIN, "draining" },
        { { 0, 1, 0, 1, 0, 3 }, PLAN_SOCKET_DRAIN, "3 now" },
        { { 0, 1, 0, 1, 1, 2 }, PLAN_SOCKET_DRAIN, "gets no new connection" },
        { { 0, 1, 0, 1, 1, -1 }, PLAN_SOCKET_DRAIN, "depth unknown" },
        { { 0, 1, 0, 1, 1, 0 }, PLAN_SOCKET_CLOSE_DRAINED,
          "drained for 1 generation(s), nothing queued" },
        { { 0, 1, 0, 1, 4, 0 }, PLAN_SOCKET_CLOSE_DRAINED, "drained for 4" },
        /* Migration wins where the group has both. */
        { { 0, 1, 1, 1, 0, 3 }, PLAN_SOCKET_RETIRE,
          "move to the other sockets of its group" },
        /* Planned again: kept, whatever it went through. */
        { { 1, 1, 0, 1, 2, 0 }, PLAN_SOCKET_KEEP, "keeping" },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *line = plan_socket_describe(*state, &cases[i].st,
                                                "127.0.0.1:80#2",
                                                "none: WHY");

        CASE_CHECK(cases[i].says,
                   plan_socket_action(&cases[i].st) == cases[i].action);
        assert_contains(line, "127.0.0.1:80#2");
        assert_contains(line, cases[i].says);
    }
    /* The reset names the reason there is no migration. */
    assert_contains(plan_socket_describe(*state, &cases[3].st, "k",
                                         "none: WHY"), "(migration: none: WHY)");
}

/* EBUSY: the socket is in some socket map; only a lookup of the slot
 * tells this one's (a restart's) from one a dead server left behind. */
static void test_steer_slot_outcomes(void **state)
{
    (void)state;
    assert_int_equal(steer_slot_outcome_of(0, 0), STEER_SLOT_PLACED);
    assert_int_equal(steer_slot_outcome_of(EBUSY, 1), STEER_SLOT_PLACED);
    assert_int_equal(steer_slot_outcome_of(EBUSY, 0),
                     STEER_SLOT_HELD_ELSEWHERE);
    assert_int_equal(steer_slot_outcome_of(EINVAL, 0), STEER_SLOT_FAILED);
    assert_int_equal(steer_slot_outcome_of(ENOENT, 1), STEER_SLOT_FAILED);
}

static steering_input steering_in(steering_e requested)
{
    steering_input in;

    in.requested = requested;
    in.reuseport_groups = 1;
    in.num_buckets = 2;
    in.online_cpus = 2;
    in.trial_err = 0;
    in.trial_step = NULL;
    return in;
}

static void test_steering_parse(void **state)
{
    steering_e mode = STEERING_HASH;

    assert_null(steering_parse(*state, "BucketSteering", "auto", &mode));
    assert_int_equal(mode, STEERING_AUTO);
    assert_null(steering_parse(*state, "BucketSteering", "CPU", &mode));
    assert_int_equal(mode, STEERING_CPU);
    assert_null(steering_parse(*state, "BucketSteering", "hash", &mode));
    assert_int_equal(mode, STEERING_HASH);
    assert_null(steering_parse(*state, "BucketSteering", "Load", &mode));
    assert_int_equal(mode, STEERING_LOAD);
    mode = STEERING_HASH;
    assert_contains(steering_parse(*state, "BucketSteering", "weight", &mode),
                    "BucketSteering must be one of auto, hash, cpu, load, not "
                    "'weight'");
    assert_int_equal(mode, STEERING_HASH);
}

static void test_steering_auto_and_hash(void **state)
{
    steering_input in = steering_in(STEERING_AUTO);
    steering_choice c;

    /* auto is load where the kernel runs its program... */
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_LOAD);
    assert_contains(c.reason, "load (BucketSteering auto)");
    /* ...and the hash, never an error, where it does not. */
    in.trial_err = EPERM;
    in.trial_step = "BPF_PROG_LOAD of an SK_REUSEPORT program";
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_HASH);
    assert_contains(c.reason, "hash (BucketSteering auto; load steering "
                              "needs");
    assert_contains(c.reason, "BPF_PROG_LOAD");
    in = steering_in(STEERING_AUTO);
    in.num_buckets = STEERING_MAX_LOAD_BUCKETS + 1;
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_HASH);
    assert_contains(c.reason, "at most");
    in = steering_in(STEERING_AUTO);
    in.reuseport_groups = 0;
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_HASH);
    assert_contains(c.reason, "nothing to steer");
    in = steering_in(STEERING_HASH);
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_HASH);
}

static void test_steering_cpu(void **state)
{
    steering_input in = steering_in(STEERING_CPU);
    steering_choice c;
    const char *err;

    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_CPU);
    assert_contains(c.reason, "mod 2");
    /* Fewer buckets than CPUs: CPUs share buckets. */
    in.online_cpus = 8;
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_CPU);
    /* More buckets than CPUs would leave buckets without connections. */
    in.online_cpus = 2;
    in.num_buckets = 3;
    err = steering_choose(*state, &in, &c);
    assert_contains(err, "at most one bucket per online CPU");
    assert_contains(err, "1 to 2");
    /* The kernel lacks it: an error naming the feature and the step. */
    in = steering_in(STEERING_CPU);
    in.trial_err = EINVAL;
    in.trial_step = "BPF_MAP_CREATE of a REUSEPORT_SOCKARRAY";
    err = steering_choose(*state, &in, &c);
    assert_contains(err, "BucketSteering cpu needs an SK_REUSEPORT eBPF");
    assert_contains(err, "Linux 4.19+");
    assert_contains(err, "BPF_MAP_CREATE");
    /* Nothing to steer (no duplicates, or one bucket): the hash. */
    in = steering_in(STEERING_CPU);
    in.reuseport_groups = 0;
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_HASH);
    assert_contains(c.reason, "nothing to steer");
}

static void test_steering_load(void **state)
{
    steering_input in = steering_in(STEERING_LOAD);
    steering_choice c;
    const char *err;

    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_LOAD);
    assert_contains(c.reason, "idle child");
    /* Not tied to CPUs: more buckets than CPUs is fine. */
    in.num_buckets = 8;
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_LOAD);
    in.num_buckets = STEERING_MAX_LOAD_BUCKETS + 1;
    err = steering_choose(*state, &in, &c);
    assert_contains(err, "BucketSteering load handles at most 64 buckets");
    in = steering_in(STEERING_LOAD);
    in.trial_err = EINVAL;
    in.trial_step = "BPF_MAP_CREATE of an array";
    err = steering_choose(*state, &in, &c);
    assert_contains(err, "BucketSteering load needs an SK_REUSEPORT eBPF");
    assert_contains(err, "array of idle counts");
    assert_contains(err, "BPF_MAP_CREATE of an array");
    in = steering_in(STEERING_LOAD);
    in.num_buckets = 1;
    assert_null(steering_choose(*state, &in, &c));
    assert_int_equal(c.mode, STEERING_HASH);
}

/* What the status page and the log say is in force once the programs
 * are attached: the choice only where it steers; without a group steered
 * by CPU the children are not pinned either. */
static void test_steering_in_force_says_what_the_programs_did(void **state)
{
    static const struct {
        steering_e chosen;
        steering_outcome outcome;
        const char *said;
        steering_e in_force;
    } cases[] = {
        { STEERING_CPU, { 2, 0, NULL }, "cpu", STEERING_CPU },
        { STEERING_LOAD,
          { 0, 2, "127.0.0.1:80: setsockopt(SO_ATTACH_REUSEPORT_EBPF): "
                  "Operation not permitted" },
          "hash (the load program failed: 127.0.0.1:80: "
          "setsockopt(SO_ATTACH_REUSEPORT_EBPF): Operation not permitted)",
          STEERING_HASH },
        { STEERING_CPU,
          { 1, 1, "[::1]:80: BPF_PROG_LOAD: Operation not permitted" },
          "cpu on 1 reuseport group(s), hash on 1 (the cpu program failed: "
          "[::1]:80: BPF_PROG_LOAD: Operation not permitted)",
          STEERING_CPU },
    };
    apr_pool_t *p = *state;
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_string_equal(steering_in_force(p, cases[i].chosen,
                                              &cases[i].outcome),
                            cases[i].said);
        assert_int_equal(steering_mode_in_force(cases[i].chosen,
                                                &cases[i].outcome),
                         cases[i].in_force);
    }
}

/* A bucket leaves its groups only when no process holds its sockets, it
 * cannot get a child now, its queue can move, and another bucket still
 * listens. */
static void test_absence_takes_out_only_a_bucket_nobody_holds(void **state)
{
    static const struct {
        absence_input in;
        absence_step step;
    } cases[] = {
        { { 0, 0, 1, 3, 0 }, ABSENCE_TAKE_OUT },
        { { 1, 0, 1, 3, 0 }, ABSENCE_STAY },    /* a child is starting */
        { { 0, 0, 0, 3, 0 }, ABSENCE_STAY },    /* the queue would be reset */
        { { 0, 0, 1, 0, 0 }, ABSENCE_STAY },    /* nowhere for it to go */
        { { 0, 0, 1, 3, 1 }, ABSENCE_STAY },    /* it can get a child now */
    };
    bucket_absence a = { 0, 0, 0 };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(bucket_absence_decide(&a, &cases[i].in),
                         cases[i].step);
    }
}

/* One spell, retries failing while out, logged once at each end. */
static void test_absence_spell_is_logged_once(void **state)
{
    absence_input none = { 0, 0, 1, 3, 0 }, starting = { 1, 0, 1, 3, 0 },
                  ready = { 1, 1, 1, 3, 0 };
    bucket_absence a = { 0, 0, 0 };

    (void)state;
    assert_int_equal(bucket_absence_decide(&a, &none), ABSENCE_TAKE_OUT);
    assert_true(bucket_absence_took_out(&a));
    /* Out: nothing more to do until a child is forked into it. */
    assert_int_equal(bucket_absence_decide(&a, &none), ABSENCE_STAY);
    bucket_absence_handed(&a);
    assert_int_equal(bucket_absence_decide(&a, &starting), ABSENCE_STAY);
    /* The child failed before listening, or listened and died: out again
     * either way, the same spell. */
    assert_int_equal(bucket_absence_decide(&a, &none), ABSENCE_TAKE_OUT);
    assert_false(bucket_absence_took_out(&a));
    assert_int_equal(bucket_absence_decide(&a, &none), ABSENCE_STAY);
    bucket_absence_handed(&a);
    /* This one is ready, so it listens: back into the maps. */
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_BACK_IN);
    bucket_absence_rejoined(&a);
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_SPELL_ENDS);
    bucket_absence_spell_ended(&a);
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_STAY);
    /* A later loss is a new spell. */
    assert_int_equal(bucket_absence_decide(&a, &none), ABSENCE_TAKE_OUT);
    assert_true(bucket_absence_took_out(&a));
}

/* A bucket a graceful restart adds starts out, with no spell: its first
 * child, once ready, puts it back in, and nothing is logged as ending. */
static void test_absence_of_a_new_bucket_has_no_spell(void **state)
{
    absence_input starting = { 1, 0, 1, 3, 0 }, ready = { 1, 1, 1, 3, 0 };
    bucket_absence a = { 0, 0, 0 };

    (void)state;
    bucket_absence_new(&a);
    assert_int_equal(a.out, 1);
    /* Out, and no child handed it yet: a ready one is another bucket's
     * (or did not listen on these). */
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_STAY);
    bucket_absence_handed(&a);
    assert_int_equal(bucket_absence_decide(&a, &starting), ABSENCE_STAY);
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_BACK_IN);
    bucket_absence_rejoined(&a);
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_STAY);
}

/* A fork into a bucket that is in hands nothing over, and the parent's own
 * listen() (before a generation ends) brings an out bucket back whether a
 * child was handed it or not. */
static void test_absence_hands_over_only_an_out_bucket(void **state)
{
    absence_input none = { 0, 0, 1, 3, 0 }, starting = { 1, 0, 1, 3, 0 },
                  ready = { 1, 1, 1, 3, 0 };
    bucket_absence a = { 0, 0, 0 };

    (void)state;
    bucket_absence_handed(&a);
    assert_int_equal(a.handed, 0);
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_STAY);
    assert_int_equal(bucket_absence_decide(&a, &none), ABSENCE_TAKE_OUT);
    bucket_absence_took_out(&a);
    /* Out and not handed: a ready child cannot have listened on them. */
    assert_int_equal(bucket_absence_decide(&a, &starting), ABSENCE_STAY);
    bucket_absence_handed(&a);
    bucket_absence_rejoined(&a);
    assert_int_equal(a.out, 0);
    assert_int_equal(a.handed, 0);
    assert_int_equal(bucket_absence_decide(&a, &ready), ABSENCE_SPELL_ENDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_program_that_migrates_is_chosen),
        POOL_TEST(test_program_taken_but_nothing_moves_is_none),
        POOL_TEST(test_refusals_are_none_with_the_reason),
        POOL_TEST(test_sysctl_counts_only_when_seen_migrating),
        POOL_TEST(test_drain_when_the_kernel_leaves_a_socket_out),
        POOL_TEST(test_migration_names),
        POOL_TEST(test_plan_socket_actions),
        POOL_TEST(test_steer_slot_outcomes),
        POOL_TEST(test_steering_parse),
        POOL_TEST(test_steering_auto_and_hash),
        POOL_TEST(test_steering_cpu),
        POOL_TEST(test_steering_load),
        POOL_TEST(test_steering_in_force_says_what_the_programs_did),
        POOL_TEST(test_absence_takes_out_only_a_bucket_nobody_holds),
        POOL_TEST(test_absence_spell_is_logged_once),
        POOL_TEST(test_absence_hands_over_only_an_out_bucket),
        POOL_TEST(test_absence_of_a_new_bucket_has_no_spell),
    };

    return RUN_POOL_TESTS(tests);
}
