/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_activation.c: unit tests of what socket activation decides:
 * whether LISTEN_* pass sockets to this process and how many, which passed
 * descriptors can serve, which Listen address a socket serves, and the
 * ListenStream= lines for a socket unit.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sys/socket.h>

#include "policy_activation.h"
#include "unit_test.h"

#define ME 4242L

static void test_nothing_passed(void **state)
{
    activation_env env;

    activation_env_parse(*state, NULL, NULL, NULL, ME, 1024, &env);
    assert_int_equal(env.verdict, ACTIVATION_NONE);
    assert_null(env.message);
    /* LISTEN_FDS alone names nobody. */
    activation_env_parse(*state, NULL, "2", NULL, ME, 1024, &env);
    assert_int_equal(env.verdict, ACTIVATION_NONE);
}

static void test_passed_to_another_process(void **state)
{
    static const char *const pids[] = { "4243", "1", "0", "x", "", "-4242",
                                        " 4242", "4242 " };
    activation_env env;
    apr_size_t i;

    for (i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
        activation_env_parse(*state, pids[i], "1", NULL, ME, 1024, &env);
        CASE_CHECK(pids[i], env.verdict == ACTIVATION_OTHER_PID);
        CASE_CHECK(pids[i], strstr(env.message, "not this process") != NULL);
    }
}

static void test_bad_counts_adopt_nothing(void **state)
{
    static const char *const counts[] = { NULL, "", "0", "-1", "two", "2x",
                                          "+2", " 2", "99999999999999999999",
                                          "1025" };
    activation_env env;
    apr_size_t i;

    for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        const char *desc = counts[i] ? counts[i] : "(unset)";
        activation_env_parse(*state, "4242", counts[i], NULL, ME, 0, &env);
        CASE_CHECK(desc, env.verdict == ACTIVATION_INVALID);
        CASE_CHECK(desc, env.count == 0);
        CASE_CHECK(desc, strstr(env.message, "LISTEN_FDS=") != NULL);
        CASE_CHECK(desc, strstr(env.message, "from 1 to 1024") != NULL);
    }
}

static void test_count_bounded_by_descriptor_limit(void **state)
{
    activation_env env;

    /* With 16 descriptors allowed, at most 13 can start at 3. */
    activation_env_parse(*state, "4242", "13", NULL, ME, 16, &env);
    assert_int_equal(env.verdict, ACTIVATION_PASSED);
    assert_int_equal(env.count, 13);
    activation_env_parse(*state, "4242", "14", NULL, ME, 16, &env);
    assert_int_equal(env.verdict, ACTIVATION_INVALID);
    assert_non_null(strstr(env.message, "from 1 to 13"));
}

static void test_names(void **state)
{
    activation_env env;

    activation_env_parse(*state, "4242", "3", "http:https:", ME, 1024, &env);
    assert_int_equal(env.verdict, ACTIVATION_PASSED);
    assert_int_equal(env.count, 3);
    assert_string_equal(env.names[0], "http");
    assert_string_equal(env.names[1], "https");
    assert_string_equal(env.names[2], "");
    assert_null(env.message);

    /* Without names, every name is empty. */
    activation_env_parse(*state, "4242", "2", NULL, ME, 1024, &env);
    assert_string_equal(env.names[0], "");
    assert_string_equal(env.names[1], "");

    /* Names that do not fit are dropped, with a word, but the sockets
     * still serve. */
    activation_env_parse(*state, "4242", "2", "a:b:c", ME, 1024, &env);
    assert_int_equal(env.verdict, ACTIVATION_PASSED);
    assert_string_equal(env.names[0], "");
    assert_string_equal(env.names[1], "");
    assert_non_null(strstr(env.message, "3 name(s) for 2"));
}

static void test_fd_kinds(void **state)
{
    static const struct {
        passed_fd_kind kind;
        const char *why;     /* NULL: usable */
    } cases[] = {
        { { 1, AF_INET,  SOCK_STREAM, 1, 0 }, NULL },
        { { 1, AF_INET6, SOCK_STREAM, 1, 1 }, NULL },
        { { 0, 0, 0, 0, 0 },                  "not a socket" },
        { { 1, AF_UNIX,  SOCK_STREAM, 1, 0 }, "a unix socket, not TCP" },
        { { 1, AF_INET,  SOCK_DGRAM,  0, 1 }, "a UDP socket, not TCP" },
        { { 1, AF_INET6, SOCK_SEQPACKET, 1, 0 }, "not a stream socket" },
        { { 1, AF_INET,  SOCK_STREAM, 0, 1 }, "a TCP socket that is not "
                                              "listening" },
        { { 1, AF_PACKET, SOCK_RAW, 0, 0 },   "not an IPv4 or IPv6 socket" },
    };
    apr_size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *why = activation_fd_unusable(&cases[i].kind);
        if (cases[i].why == NULL) {
            assert_null(why);
        }
        else {
            assert_non_null(why);
            assert_string_equal(why, cases[i].why);
        }
    }
}

static socket_address v4(unsigned char a, unsigned char b, unsigned char c,
                         unsigned char d, apr_port_t port)
{
    socket_address s;

    memset(&s, 0, sizeof(s));
    s.family = APR_INET;
    s.addr[0] = a;
    s.addr[1] = b;
    s.addr[2] = c;
    s.addr[3] = d;
    s.port = port;
    return s;
}

static socket_address v6(unsigned char last, apr_port_t port)
{
    socket_address s;

    memset(&s, 0, sizeof(s));
    s.family = APR_INET6;
    s.addr[15] = last;
    s.port = port;
    return s;
}

static void test_address_matching(void **state)
{
    socket_address lo80 = v4(127, 0, 0, 1, 80);
    socket_address lo81 = v4(127, 0, 0, 1, 81);
    socket_address lo2 = v4(127, 0, 0, 2, 80);
    socket_address any4 = v4(0, 0, 0, 0, 80);
    socket_address any6 = v6(0, 80);
    socket_address loop6 = v6(1, 80);

    (void)state;
    assert_true(activation_address_matches(&lo80, &lo80));
    assert_false(activation_address_matches(&lo80, &lo81));
    assert_false(activation_address_matches(&lo80, &lo2));
    assert_false(activation_address_matches(&any4, &lo80));
    assert_false(activation_address_matches(&any6, &any4));
    assert_true(activation_address_matches(&any6, &any6));
    assert_false(activation_address_matches(&any6, &loop6));
    assert_true(activation_address_matches(&loop6, &loop6));
    /* Bytes past an IPv4 address's four do not count. */
    lo2 = lo80;
    lo2.addr[10] = 9;
    assert_true(activation_address_matches(&lo80, &lo2));

    assert_true(socket_address_is_wildcard(&any4));
    assert_true(socket_address_is_wildcard(&any6));
    assert_false(socket_address_is_wildcard(&loop6));
    assert_false(socket_address_is_wildcard(&lo80));
}

static void test_listen_streams(void **state)
{
    apr_pool_t *p = *state;
    socket_address a;

    a = v6(0, 80);
    assert_string_equal(activation_listen_stream(p, &a, 1), "ListenStream=80");
    assert_string_equal(activation_listen_stream(p, &a, 0),
                        "ListenStream=[::]:80");
    a = v4(0, 0, 0, 0, 8080);
    assert_string_equal(activation_listen_stream(p, &a, 0),
                        "ListenStream=0.0.0.0:8080");
    a = v4(127, 0, 0, 1, 443);
    assert_string_equal(activation_listen_stream(p, &a, 1),
                        "ListenStream=127.0.0.1:443");
    a = v6(1, 8443);
    assert_string_equal(activation_listen_stream(p, &a, 1),
                        "ListenStream=[::1]:8443");
    assert_string_equal(socket_address_describe(p, &a), "[::1]:8443");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_nothing_passed),
        POOL_TEST(test_passed_to_another_process),
        POOL_TEST(test_bad_counts_adopt_nothing),
        POOL_TEST(test_count_bounded_by_descriptor_limit),
        POOL_TEST(test_names),
        POOL_TEST(test_fd_kinds),
        POOL_TEST(test_address_matching),
        POOL_TEST(test_listen_streams),
    };

    return RUN_POOL_TESTS(tests);
}
