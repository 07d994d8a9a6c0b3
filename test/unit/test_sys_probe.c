/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sys_probe.c: unit tests of kernel release parsing, the
 * version-derived features, and the SO_REUSEPORT trial on this machine.
 *
 * With BUCKETED_EXPECT_NO_REUSEPORT=1 in the environment (the integration
 * suite runs this binary so, under LD_PRELOAD=bench/noreuseport.so), the
 * trial must fail with ENOPROTOOPT instead of succeeding.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <cmocka.h>

#include "apr_pools.h"

#include "sys_probe.h"
#include "policy_kernel.h"
#include "unit_test.h"

/* ---- helpers ---- */

static int expect_no_reuseport(void)
{
    const char *v = getenv("BUCKETED_EXPECT_NO_REUSEPORT");

    return v != NULL && strcmp(v, "1") == 0;
}

static kernel_features version(int major, int minor)
{
    kernel_features kf;

    memset(&kf, 0, sizeof(kf));
    kf.major = major;
    kf.minor = minor;
    return kf;
}

/* ---- kernel_release_parse ---- */

static void test_release_parse(void **state)
{
    static const struct {
        const char *release;
        int major, minor, patch;
    } good[] = {
        { "6.1.0-18-amd64", 6, 1, 0 },
        { "3.8.13", 3, 8, 13 },
        { "4.19", 4, 19, 0 },
        { "5.14.0-rc1", 5, 14, 0 },
        { "2.6.32-754.el6.x86_64", 2, 6, 32 },
        { "6.18.44-fc-v657", 6, 18, 44 },
        { "4.4.0+", 4, 4, 0 },
        { "5.4.0.1.2", 5, 4, 0 },
        { "10.0.100", 10, 0, 100 },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int major = -1, minor = -1, patch = -1;
        const char *desc = good[i].release;

        CASE_CHECK(desc, kernel_release_parse(desc, &major, &minor,
                                              &patch) == 0);
        CASE_CHECK(desc, major == good[i].major);
        CASE_CHECK(desc, minor == good[i].minor);
        CASE_CHECK(desc, patch == good[i].patch);
    }
}

static void test_release_parse_garbage(void **state)
{
    static const char *const bad[] = {
        "", "abc", "v6.1", "-6.1", ".6.1", " 6.1", "6", "6-rc1", "6.x",
        "6.", "99999999999999999999.1"
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int major, minor, patch;

        CASE_CHECK(bad[i], kernel_release_parse(bad[i], &major, &minor,
                                                &patch) == -1);
    }
}

/* ---- version thresholds ---- */

static void test_version_at_least(void **state)
{
    kernel_features kf = version(4, 19);

    (void)state;
    /* Compared as numbers: 4.19 is after 4.4, not before it. */
    assert_true(kernel_version_at_least(&kf, 4, 4));
    assert_true(kernel_version_at_least(&kf, 4, 19));
    assert_false(kernel_version_at_least(&kf, 4, 20));
    assert_true(kernel_version_at_least(&kf, 3, 99));
    assert_false(kernel_version_at_least(&kf, 5, 0));
}

static void test_features_from_version(void **state)
{
    static const struct {
        int major, minor;
        int incoming_cpu, reuseport_bpf;
    } table[] = {
        { 0, 0, 0, 0 },     /* release string unparsable */
        { 3, 9, 0, 0 },
        { 3, 19, 0, 0 },
        { 4, 3, 0, 0 },
        { 4, 4, 1, 0 },
        { 4, 5, 1, 0 },
        { 4, 6, 1, 1 },
        { 4, 19, 1, 1 },
        { 5, 0, 1, 1 },
        { 6, 1, 1, 1 },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        kernel_features kf = version(table[i].major, table[i].minor);
        char desc[32];

        snprintf(desc, sizeof(desc), "%d.%d", table[i].major,
                 table[i].minor);
        kernel_features_from_version(&kf);
        CASE_CHECK(desc, kf.incoming_cpu == table[i].incoming_cpu);
        CASE_CHECK(desc, kf.reuseport_bpf == table[i].reuseport_bpf);
    }
}

/* ---- the trial socket on this machine ---- */

static void test_probe_reuseport_works(void **state)
{
    int err = -1;

    (void)state;
    if (expect_no_reuseport()) {
        skip();
    }
    /* This machine runs Linux 6.x: SO_REUSEPORT is there. */
    assert_int_equal(kernel_probe_reuseport(&err), 1);
    assert_int_equal(err, 0);
}

static void test_probe_reuseport_refused(void **state)
{
    int err = 0;

    (void)state;
    if (!expect_no_reuseport()) {
        skip();
    }
    assert_int_equal(kernel_probe_reuseport(&err), 0);
    assert_int_equal(err, ENOPROTOOPT);
}

static void test_probe_everything(void **state)
{
    struct utsname uts;
    kernel_features kf;
    int major = -1, minor = -1, patch = -1;

    (void)state;
    memset(&kf, 0x5a, sizeof(kf));
    kernel_probe(&kf);

    /* The version is the one uname(2) reports, read here on its own. */
    assert_int_equal(uname(&uts), 0);
    assert_int_equal(sscanf(uts.release, "%d.%d.%d", &major, &minor, &patch)
                     >= 2, 1);
    assert_int_equal(kf.major, major);
    assert_int_equal(kf.minor, minor);
    assert_true(kf.major >= 3);

    if (expect_no_reuseport()) {
        assert_int_equal(kf.reuseport, 0);
        assert_int_equal(kf.reuseport_errno, ENOPROTOOPT);
    }
    else {
        assert_int_equal(kf.reuseport, 1);
        assert_int_equal(kf.reuseport_errno, 0);
    }
    assert_int_equal(kf.incoming_cpu, kernel_version_at_least(&kf, 4, 4));
    assert_int_equal(kf.reuseport_bpf, kernel_version_at_least(&kf, 4, 6));
    assert_true(kf.migrate_req >= -1 && kf.migrate_req <= 1);
    assert_int_equal(kf.epoll_exclusive, kernel_version_at_least(&kf, 4, 5));
    if (kernel_version_at_least(&kf, 5, 14)) {
        assert_true(kf.migrate_req >= 0);
    }
}

static void test_probe_epoll_exclusive(void **state)
{
    int err = -1;

    (void)state;
    /* This machine runs Linux 6.x: epoll knows EPOLLEXCLUSIVE. */
    assert_int_equal(kernel_probe_epoll_exclusive(&err), 1);
    assert_int_equal(err, EINVAL);
}

/* ---- the start-up log line ---- */

static void test_describe(void **state)
{
    apr_pool_t *p = *state;
    kernel_features kf = version(6, 1);
    const char *line;

    kf.patch = 7;
    kf.reuseport = 1;
    kf.migrate_req = 1;
    kernel_features_from_version(&kf);
    line = kernel_features_describe(p, &kf);
    assert_contains(line, "6.1.7");
    assert_contains(line, "SO_REUSEPORT");
    assert_contains(line, "EPOLLEXCLUSIVE no");
    assert_null(strstr(line, strerror(ENOPROTOOPT)));

    /* An old kernel: says no and why. */
    kf = version(3, 8);
    kf.reuseport_errno = ENOPROTOOPT;
    kf.migrate_req = -1;
    kernel_features_from_version(&kf);
    line = kernel_features_describe(p, &kf);
    assert_contains(line, "3.8.0");
    assert_contains(line, "SO_REUSEPORT");
    assert_contains(line, strerror(ENOPROTOOPT));
    assert_contains(line, "tcp_migrate_req");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_release_parse),
        POOL_TEST(test_release_parse_garbage),
        POOL_TEST(test_version_at_least),
        POOL_TEST(test_features_from_version),
        POOL_TEST(test_probe_reuseport_works),
        POOL_TEST(test_probe_reuseport_refused),
        POOL_TEST(test_probe_everything),
        POOL_TEST(test_probe_epoll_exclusive),
        POOL_TEST(test_describe),
    };

    return RUN_POOL_TESTS(tests);
}
