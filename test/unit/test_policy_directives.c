/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_directives.c: unit tests of directive value parsing and of the
 * cross-directive process limit checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <limits.h>
#include <string.h>
#include <cmocka.h>

#include "apr_pools.h"
#include "apr_strings.h"
#include "apr_tables.h"

#include "policy_directives.h"
#include "unit_test.h"

/* Written to *out before a call that must fail, to see it left alone. */
#define UNTOUCHED (-4242)

/* ---- helpers ---- */

static void assert_contains_int(apr_pool_t *p, const char *haystack, int n)
{
    assert_contains(haystack, apr_itoa(p, n));
}

static int parse_int_ok(apr_pool_t *p, const char *arg, int min, int max)
{
    int out = UNTOUCHED;
    const char *err = directive_parse_int(p, "MaxRequestWorkers", arg,
                                          min, max, &out);

    if (err != NULL) {
        fail_msg("'%s' rejected: %s", arg, err);
    }
    return out;
}

/* Rejected, *out untouched, and the message names the directive, the
 * range and the offending value. */
static void parse_int_bad(apr_pool_t *p, const char *directive,
                          const char *arg, int min, int max)
{
    int out = UNTOUCHED;
    const char *err = directive_parse_int(p, directive, arg, min, max, &out);

    if (err == NULL) {
        fail_msg("'%s' accepted as %d for [%d, %d]", arg, out, min, max);
    }
    assert_int_equal(out, UNTOUCHED);
    assert_contains(err, directive);
    assert_contains_int(p, err, min);
    assert_contains_int(p, err, max);
    assert_contains(err, apr_psprintf(p, "'%s'", arg));
}

static int parse_auto_ok(apr_pool_t *p, const char *arg, int max)
{
    int out = UNTOUCHED;
    const char *err = directive_parse_auto_int(p, "BucketCount", arg, max,
                                               &out);

    if (err != NULL) {
        fail_msg("'%s' rejected: %s", arg, err);
    }
    return out;
}

static void parse_auto_bad(apr_pool_t *p, const char *arg, int max)
{
    int out = UNTOUCHED;
    const char *err = directive_parse_auto_int(p, "BucketCount", arg, max,
                                               &out);

    if (err == NULL) {
        fail_msg("'%s' accepted as %d", arg, out);
    }
    assert_int_equal(out, UNTOUCHED);
    assert_contains(err, "BucketCount");
    assert_contains(err, "'auto'");
    assert_contains_int(p, err, max);
}

static bucket_strategy_e parse_strategy_ok(apr_pool_t *p, const char *arg)
{
    bucket_strategy_e out = (bucket_strategy_e)UNTOUCHED;
    const char *err = directive_parse_strategy(p, "BucketStrategy", arg, &out);

    if (err != NULL) {
        fail_msg("'%s' rejected: %s", arg, err);
    }
    return out;
}

/* ---- directive_parse_int ---- */

static void test_parse_int_accepts(void **state)
{
    apr_pool_t *p = *state;

    assert_int_equal(parse_int_ok(p, "1", 1, 200000), 1);
    assert_int_equal(parse_int_ok(p, "200000", 1, 200000), 200000);
    assert_int_equal(parse_int_ok(p, "256", 1, 200000), 256);
    assert_int_equal(parse_int_ok(p, "0", 0, 10), 0);
    assert_int_equal(parse_int_ok(p, "2147483647", 1, INT_MAX), INT_MAX);
}

static void test_parse_int_rejects(void **state)
{
    static const char *const junk[] = {
        "0", "-1", "abc", "1O0", "", " 5", "5 ", "99999999999999999999",
        "200001", "+5", "0x10", "1e3", "5.0", "-", "--5", "5\n", "\t5",
        "2147483648", "-2147483649"
    };
    apr_pool_t *p = *state;
    size_t i;

    for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        parse_int_bad(p, "MaxRequestWorkers", junk[i], 1, 200000);
    }
    /* The directive named is the one given, and so is the range. */
    parse_int_bad(p, "ServerLimit", "17", 20, 30);
    parse_int_bad(p, "StartServers", "31", 20, 30);
    parse_int_bad(p, "MinSpareServers", "2147483648", 1, INT_MAX);
}

/* ---- directive_parse_auto_int ---- */

static void test_parse_auto_int(void **state)
{
    static const char *const junk[] = {
        "0", "65", "-1", "abc", "", "automatic", "auto ", " auto", "4x"
    };
    apr_pool_t *p = *state;
    size_t i;

    assert_int_equal(parse_auto_ok(p, "auto", 64), 0);
    assert_int_equal(parse_auto_ok(p, "AUTO", 64), 0);
    assert_int_equal(parse_auto_ok(p, "Auto", 64), 0);
    assert_int_equal(parse_auto_ok(p, "1", 64), 1);
    assert_int_equal(parse_auto_ok(p, "4", 64), 4);
    assert_int_equal(parse_auto_ok(p, "64", 64), 64);
    for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        parse_auto_bad(p, junk[i], 64);
    }
}

/* ---- directive_parse_strategy ---- */

static void test_parse_strategy(void **state)
{
    apr_pool_t *p = *state;

    assert_int_equal(parse_strategy_ok(p, "auto"), BUCKET_STRATEGY_AUTO);
    assert_int_equal(parse_strategy_ok(p, "reuseport"),
                     BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(parse_strategy_ok(p, "listen"), BUCKET_STRATEGY_LISTEN);
    assert_int_equal(parse_strategy_ok(p, "single"), BUCKET_STRATEGY_SINGLE);
    assert_int_equal(parse_strategy_ok(p, "AUTO"), BUCKET_STRATEGY_AUTO);
    assert_int_equal(parse_strategy_ok(p, "ReusePort"),
                     BUCKET_STRATEGY_REUSEPORT);
    assert_int_equal(parse_strategy_ok(p, "LISTEN"), BUCKET_STRATEGY_LISTEN);
    assert_int_equal(parse_strategy_ok(p, "sInGlE"), BUCKET_STRATEGY_SINGLE);
}

static void test_parse_strategy_rejects(void **state)
{
    static const char *const junk[] = {
        "", "reuse", "listens", "single ", "none", "prefork", "1"
    };
    apr_pool_t *p = *state;
    size_t i;

    for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        bucket_strategy_e out = (bucket_strategy_e)UNTOUCHED;
        const char *err = directive_parse_strategy(p, "BucketStrategy",
                                                   junk[i], &out);

        if (err == NULL) {
            fail_msg("'%s' accepted", junk[i]);
        }
        assert_int_equal((int)out, UNTOUCHED);
        assert_contains(err, "BucketStrategy");
        assert_contains(err, apr_psprintf(p, "'%s'", junk[i]));
        assert_contains(err, "auto");
        assert_contains(err, "reuseport");
        assert_contains(err, "listen");
        assert_contains(err, "single");
    }
}

/* ---- process_limits_check ---- */

/* Test defaults, deliberately not the compile-time ones. */
static const process_limits test_defaults = { 100, 80, 4, 3, 9 };

#define HARD_LIMIT 1000

typedef struct {
    const char *err;
    process_limits out;
    apr_array_header_t *warnings;
} check_result;

static check_result check(apr_pool_t *p, int server_limit, int max_workers,
                          int start_servers, int min_spare, int max_spare)
{
    process_limits in;
    check_result r;

    in.server_limit = server_limit;
    in.max_workers = max_workers;
    in.start_servers = start_servers;
    in.min_spare = min_spare;
    in.max_spare = max_spare;
    memset(&r.out, 0, sizeof(r.out));
    r.warnings = apr_array_make(p, 4, sizeof(const char *));
    r.err = process_limits_check(p, &in, &test_defaults, HARD_LIMIT, &r.out,
                                 r.warnings);
    return r;
}

static check_result check_ok(apr_pool_t *p, int server_limit,
                             int max_workers, int start_servers,
                             int min_spare, int max_spare)
{
    check_result r = check(p, server_limit, max_workers, start_servers,
                           min_spare, max_spare);

    if (r.err != NULL) {
        fail_msg("unexpected error: %s", r.err);
    }
    return r;
}

static void assert_limits(const process_limits *got, int server_limit,
                          int max_workers, int start_servers, int min_spare,
                          int max_spare)
{
    assert_int_equal(got->server_limit, server_limit);
    assert_int_equal(got->max_workers, max_workers);
    assert_int_equal(got->start_servers, start_servers);
    assert_int_equal(got->min_spare, min_spare);
    assert_int_equal(got->max_spare, max_spare);
}

static const char *warning(const check_result *r, int i)
{
    return APR_ARRAY_IDX(r->warnings, i, const char *);
}

static void test_limits_defaults(void **state)
{
    check_result r = check_ok(*state, 0, 0, 0, 0, 0);

    assert_limits(&r.out, 100, 80, 4, 3, 9);
    assert_int_equal(r.warnings->nelts, 0);
}

static void test_limits_configured_kept(void **state)
{
    check_result r = check_ok(*state, 500, 400, 20, 10, 30);

    assert_limits(&r.out, 500, 400, 20, 10, 30);
    assert_int_equal(r.warnings->nelts, 0);
    /* Some set, some not. */
    r = check_ok(*state, 0, 50, 0, 0, 12);
    assert_limits(&r.out, 100, 50, 4, 3, 12);
    assert_int_equal(r.warnings->nelts, 0);
}

static void test_limits_min_above_max(void **state)
{
    check_result r = check(*state, 0, 0, 0, 20, 10);

    assert_non_null(r.err);
    assert_contains(r.err, "MinSpareServers");
    assert_contains(r.err, "MaxSpareServers");
    assert_contains(r.err, "20");
    assert_contains(r.err, "10");
}

static void test_limits_server_limit_capped(void **state)
{
    apr_pool_t *p = *state;
    check_result r = check_ok(p, HARD_LIMIT + 500, 0, 0, 0, 0);

    assert_int_equal(r.out.server_limit, HARD_LIMIT);
    assert_int_equal(r.out.max_workers, 80);
    assert_int_equal(r.warnings->nelts, 1);
    assert_contains(warning(&r, 0), "ServerLimit");
    assert_contains_int(p, warning(&r, 0), HARD_LIMIT + 500);
    assert_contains_int(p, warning(&r, 0), HARD_LIMIT);

    /* The cap itself is allowed. */
    r = check_ok(p, HARD_LIMIT, 0, 0, 0, 0);
    assert_int_equal(r.out.server_limit, HARD_LIMIT);
    assert_int_equal(r.warnings->nelts, 0);
    r = check_ok(p, HARD_LIMIT + 1, 0, 0, 0, 0);
    assert_int_equal(r.out.server_limit, HARD_LIMIT);
    assert_int_equal(r.warnings->nelts, 1);

    /* MaxRequestWorkers is then held to the lowered ServerLimit. */
    r = check_ok(p, HARD_LIMIT + 500, HARD_LIMIT + 200, HARD_LIMIT + 100,
                 0, 0);
    assert_limits(&r.out, HARD_LIMIT, HARD_LIMIT, HARD_LIMIT, 3, 9);
    assert_int_equal(r.warnings->nelts, 2);
    assert_contains(warning(&r, 1), "MaxRequestWorkers");
    assert_contains_int(p, warning(&r, 1), HARD_LIMIT + 200);
}

static void test_limits_real_hard_cap(void **state)
{
    process_limits in = { 300000, 250000, 0, 0, 0 };
    process_limits out;
    apr_array_header_t *warnings = apr_array_make(*state, 2,
                                                  sizeof(const char *));

    APR_ARRAY_PUSH(warnings, const char *) = "earlier warning";
    assert_null(process_limits_check(*state, &in, &test_defaults, 200000,
                                     &out, warnings));
    assert_int_equal(out.server_limit, 200000);
    assert_int_equal(out.max_workers, 200000);
    /* Appended to what was there. */
    assert_int_equal(warnings->nelts, 3);
    assert_string_equal(APR_ARRAY_IDX(warnings, 0, const char *),
                        "earlier warning");
}

static void test_limits_workers_above_server_limit(void **state)
{
    apr_pool_t *p = *state;
    check_result r = check_ok(p, 50, 60, 0, 0, 0);

    assert_int_equal(r.out.server_limit, 50);
    assert_int_equal(r.out.max_workers, 50);
    assert_int_equal(r.warnings->nelts, 1);
    assert_contains(warning(&r, 0), "MaxRequestWorkers");
    assert_contains(warning(&r, 0), "ServerLimit");
    assert_contains(warning(&r, 0), "60");
    assert_contains(warning(&r, 0), "50");

    /* Against the default ServerLimit too. */
    r = check_ok(p, 0, 150, 0, 0, 0);
    assert_int_equal(r.out.max_workers, 100);
    assert_int_equal(r.warnings->nelts, 1);
}

static void test_limits_max_spare_raised(void **state)
{
    apr_pool_t *p = *state;
    check_result r = check_ok(p, 0, 0, 0, 5, 5);

    /* Equal is not enough: raised to one above, with a warning. */
    assert_int_equal(r.out.min_spare, 5);
    assert_int_equal(r.out.max_spare, 6);
    assert_int_equal(r.warnings->nelts, 1);
    assert_contains(warning(&r, 0), "MaxSpareServers");
    assert_contains(warning(&r, 0), "6");

    /* Configured MaxSpare below the default MinSpare: warned too. */
    r = check_ok(p, 0, 0, 0, 0, 2);
    assert_int_equal(r.out.min_spare, 3);
    assert_int_equal(r.out.max_spare, 4);
    assert_int_equal(r.warnings->nelts, 1);

    /* MaxSpare not configured: the default is raised silently. */
    r = check_ok(p, 0, 0, 0, 20, 0);
    assert_int_equal(r.out.min_spare, 20);
    assert_int_equal(r.out.max_spare, 21);
    assert_int_equal(r.warnings->nelts, 0);
}

static void test_limits_start_servers_capped(void **state)
{
    check_result r = check_ok(*state, 0, 10, 50, 0, 0);

    assert_int_equal(r.out.start_servers, 10);
    assert_int_equal(r.out.max_workers, 10);
    /* Default StartServers against a smaller MaxRequestWorkers. */
    r = check_ok(*state, 0, 2, 0, 0, 0);
    assert_int_equal(r.out.start_servers, 2);
}

static void test_restart_keeps_server_limit(void **state)
{
    apr_pool_t *p = *state;
    apr_array_header_t *warnings = apr_array_make(p, 2, sizeof(char *));
    process_limits lim = { 400, 300, 250, 5, 10 };

    /* Unchanged: nothing to say. */
    process_limits_keep_server_limit(p, &lim, 400, warnings);
    assert_int_equal(lim.server_limit, 400);
    assert_int_equal(warnings->nelts, 0);

    /* Lowered on restart: the first value stays; the rest fits in it. */
    lim.server_limit = 100;
    lim.max_workers = 100;
    process_limits_keep_server_limit(p, &lim, 400, warnings);
    assert_int_equal(lim.server_limit, 400);
    assert_int_equal(lim.max_workers, 100);
    assert_int_equal(warnings->nelts, 1);
    assert_contains(APR_ARRAY_IDX(warnings, 0, const char *),
                    "changing ServerLimit to 100 from original value of 400");

    /* Raised on restart: MaxRequestWorkers and StartServers come down to
     * the ServerLimit the scoreboard has. */
    lim.server_limit = 800;
    lim.max_workers = 700;
    lim.start_servers = 600;
    process_limits_keep_server_limit(p, &lim, 400, warnings);
    assert_int_equal(lim.server_limit, 400);
    assert_int_equal(lim.max_workers, 400);
    assert_int_equal(lim.start_servers, 400);
    assert_int_equal(warnings->nelts, 2);
    assert_contains(APR_ARRAY_IDX(warnings, 1, const char *), "keeping 400");
}

/* ---- plan_descriptors_check ---- */

static bucket_plan plan_of(int buckets, int duplicates)
{
    bucket_plan plan;

    memset(&plan, 0, sizeof(plan));
    plan.num_buckets = buckets;
    plan.num_duplicates = duplicates;
    return plan;
}

static void test_descriptors_fit(void **state)
{
    apr_pool_t *p = *state;
    /* 4 buckets x 2 Listens: 2 originals + 6 duplicates. */
    bucket_plan four = plan_of(4, 6);
    /* 512 x 2 would need 1024 sockets + 64. */
    bucket_plan many = plan_of(512, 1022);

    assert_null(plan_descriptors_check(p, &four, 2, 0, 1024));
    /* Exactly at the limit: 8 + 64. */
    assert_null(plan_descriptors_check(p, &four, 2, 0, 72));
    assert_null(plan_descriptors_check(p, &many, 2, 0, 1088));
    assert_null(plan_descriptors_check(p, &many, 2, 1, PLAN_FD_UNLIMITED));
}

static void test_descriptors_do_not_fit(void **state)
{
    apr_pool_t *p = *state;
    bucket_plan four = plan_of(4, 6);
    bucket_plan many = plan_of(512, 1022);
    bucket_plan one = plan_of(1, 0);
    const char *err;

    err = plan_descriptors_check(p, &four, 2, 0, 71);
    assert_non_null(err);
    assert_contains(err, "BucketCount 4 x 2 Listen addresses needs 72 "
                         "descriptors");
    assert_contains(err, "RLIMIT_NOFILE is 71");
    assert_contains(err, "lower BucketCount or raise the limit (ulimit -n)");

    err = plan_descriptors_check(p, &many, 2, 0, 1024);
    assert_non_null(err);
    assert_contains(err, "BucketCount 512 x 2 Listen addresses needs 1088");
    assert_contains(err, "1024 sockets");
    /* ChildModel event: one eventfd per bucket more. */
    assert_null(plan_descriptors_check(p, &many, 2, 0, 1088));
    err = plan_descriptors_check(p, &many, 2, 1, 1088);
    assert_non_null(err);
    assert_contains(err, "needs 1600");
    assert_contains(err, "512 per-bucket eventfds");

    err = plan_descriptors_check(p, &one, 1, 0, 16);
    assert_non_null(err);
    assert_contains(err, "BucketCount 1 x 1 Listen address needs 65");
}

/* Counts near INT_MAX are added in 64 bits, not overflowed. */
static void test_descriptors_huge_counts(void **state)
{
    apr_pool_t *p = *state;
    bucket_plan huge = plan_of(INT_MAX, INT_MAX);
    const char *err;

    err = plan_descriptors_check(p, &huge, INT_MAX, INT_MAX, (apr_int64_t)1 << 40);
    assert_non_null(err);
    assert_contains(err, "RLIMIT_NOFILE is 1099511627776");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_parse_int_accepts),
        POOL_TEST(test_parse_int_rejects),
        POOL_TEST(test_parse_auto_int),
        POOL_TEST(test_parse_strategy),
        POOL_TEST(test_parse_strategy_rejects),
        POOL_TEST(test_limits_defaults),
        POOL_TEST(test_limits_configured_kept),
        POOL_TEST(test_limits_min_above_max),
        POOL_TEST(test_limits_server_limit_capped),
        POOL_TEST(test_limits_real_hard_cap),
        POOL_TEST(test_limits_workers_above_server_limit),
        POOL_TEST(test_limits_max_spare_raised),
        POOL_TEST(test_limits_start_servers_capped),
        POOL_TEST(test_restart_keeps_server_limit),
        POOL_TEST(test_descriptors_fit),
        POOL_TEST(test_descriptors_do_not_fit),
        POOL_TEST(test_descriptors_huge_counts),
    };

    return RUN_POOL_TESTS(tests);
}
