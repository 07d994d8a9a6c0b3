/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sys_bpf.c: BucketSteering load's program (sys_bpf.c) loaded into
 * this machine's kernel and attached to a reuseport group of two listening
 * sockets on loopback; idle counts written as the parent writes them, and
 * connections counted by the socket that queued them. Needs what the
 * program needs at run time: root (CAP_BPF) and Linux 4.19+.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "policy_steering.h"
#include "sys_bpf.h"
#include "unit_test.h"

#define GROUP_SIZE 2
/* Enough connections that a share is told from another by far more than
 * chance: 400 draws of p = 0.1 fall outside 10-100 with a probability of
 * about 1e-9, and draws of p = 0.5 below 100 far less often. */
#define CONNECTIONS 400

typedef struct {
    int socks[GROUP_SIZE];
    int sock_map;
    int idle_map;
    int prog;
    struct sockaddr_in addr;
} steered_group;

static void group_open(steered_group *g)
{
    socklen_t len = sizeof(g->addr);
    int b, one = 1, err = 0;

    memset(&g->addr, 0, sizeof(g->addr));
    g->addr.sin_family = AF_INET;
    g->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (b = 0; b < GROUP_SIZE; b++) {
        g->socks[b] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(g->socks[b] >= 0);
        assert_int_equal(setsockopt(g->socks[b], SOL_SOCKET, SO_REUSEPORT,
                                    &one, sizeof(one)), 0);
        assert_int_equal(bind(g->socks[b], (struct sockaddr *)&g->addr,
                              sizeof(g->addr)), 0);
        if (b == 0) {
            /* the others join the port the first one got */
            assert_int_equal(getsockname(g->socks[0],
                                         (struct sockaddr *)&g->addr, &len),
                             0);
        }
        assert_int_equal(listen(g->socks[b], CONNECTIONS), 0);
    }
    g->sock_map = reuseport_bpf_sockarray_create(GROUP_SIZE, &err);
    if (g->sock_map < 0) {
        fail_msg("a REUSEPORT_SOCKARRAY: %s (needs root, Linux 4.19+)",
                 strerror(err));
    }
    g->idle_map = reuseport_bpf_idle_map_create(GROUP_SIZE, &err);
    if (g->idle_map < 0) {
        fail_msg("the idle count array: %s", strerror(err));
    }
    for (b = 0; b < GROUP_SIZE; b++) {
        assert_int_equal(reuseport_bpf_sockarray_set(g->sock_map, b,
                                                     g->socks[b]), 0);
    }
    g->prog = reuseport_bpf_load_load(g->sock_map, g->idle_map, GROUP_SIZE,
                                      0, &err);
    if (g->prog < 0) {
        fail_msg("the load program: %s", strerror(err));
    }
    assert_int_equal(reuseport_bpf_attach(g->socks[0], g->prog), 0);
}

static void group_close(steered_group *g)
{
    int b;

    for (b = 0; b < GROUP_SIZE; b++) {
        close(g->socks[b]);
    }
    close(g->prog);
    close(g->idle_map);
    close(g->sock_map);
}

/* Waits up to 5 s for a connection queued on any socket of the group:
 * 1 once there is one, 0 if none came. */
static int queued_somewhere(const steered_group *g)
{
    struct pollfd fds[GROUP_SIZE];
    int b, ready;

    for (b = 0; b < GROUP_SIZE; b++) {
        fds[b].fd = g->socks[b];
        fds[b].events = POLLIN;
        fds[b].revents = 0;
    }
    ready = poll(fds, GROUP_SIZE, 5000);
    assert_true(ready >= 0);
    return ready > 0;
}

/* Connects `count` clients one after another, each from a port of its
 * own, and counts, per bucket, the connections its socket queued. */
static void connect_and_count(steered_group *g, int count,
                              int per_bucket[GROUP_SIZE])
{
    int i, b;

    memset(per_bucket, 0, sizeof(int) * GROUP_SIZE);
    for (i = 0; i < count; i++) {
        int client = socket(AF_INET, SOCK_STREAM, 0), accepted = 0;

        assert_true(client >= 0);
        /* the kernel completes the handshake and queues the connection
         * on the socket the program chose; connect() returns at the
         * SYN-ACK, and the queueing, at the last ACK, may come later */
        assert_int_equal(connect(client, (struct sockaddr *)&g->addr,
                                 sizeof(g->addr)), 0);
        assert_int_equal(queued_somewhere(g), 1);
        for (b = 0; b < GROUP_SIZE; b++) {
            int conn = accept(g->socks[b], NULL, NULL);

            if (conn >= 0) {
                per_bucket[b]++;
                accepted++;
                close(conn);
            }
            else {
                assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
            }
        }
        assert_int_equal(accepted, 1);
        close(client);
    }
}

/* A group whose idle map says, per bucket, {units to hand out, units
 * seen}, then `count` clients: the connections each bucket's socket
 * queued, into per_bucket. */
static void steer(const unsigned int idle[GROUP_SIZE][2], int count,
                  int per_bucket[GROUP_SIZE])
{
    steered_group g;
    int b;

    group_open(&g);
    for (b = 0; b < GROUP_SIZE; b++) {
        assert_int_equal(reuseport_bpf_idle_set(g.idle_map, b, idle[b][0],
                                                idle[b][1]), 0);
    }
    connect_and_count(&g, count, per_bucket);
    group_close(&g);
}

/* First pass: a bucket with units to hand out gets one connection per
 * unit, whatever the hash says; once they are taken, the second pass
 * sends the rest to the bucket seen idle. */
static void test_units_are_handed_out_one_per_connection(void **state)
{
    static const unsigned int idle[GROUP_SIZE][2] = { { 0, 1 }, { 5, 0 } };
    int per_bucket[GROUP_SIZE];

    (void)state;
    steer(idle, 10, per_bucket);
    assert_int_equal(per_bucket[1], 5);
    assert_int_equal(per_bucket[0], 5);
}

/* Second pass, every unit taken: the buckets the census saw idle share the
 * connections in proportion to what it saw (9 to 1). Before, the first
 * seen from the hash's bucket took them: half each, and at a graceful
 * restart adding a bucket, its first children got as many connections as
 * the hundreds of the bucket it was added beside. */
static void test_the_second_pass_weighs_the_buckets_seen_idle(void **state)
{
    static const unsigned int idle[GROUP_SIZE][2] = { { 0, 9 }, { 0, 1 } };
    int per_bucket[GROUP_SIZE];

    (void)state;
    steer(idle, CONNECTIONS, per_bucket);
    if (per_bucket[1] < 10 || per_bucket[1] > 100) {
        fail_msg("bucket 1, seen with 1 idle unit of 10, got %d of %d "
                 "connections", per_bucket[1], CONNECTIONS);
    }
}

/* One bucket seen idle (at MaxRequestWorkers, the bucket the free child
 * was seen in, or moved to): it gets every connection. */
static void test_the_only_bucket_seen_idle_gets_every_connection(
    void **state)
{
    static const unsigned int idle[GROUP_SIZE][2] = { { 0, 0 }, { 0, 1 } };
    int per_bucket[GROUP_SIZE];

    (void)state;
    steer(idle, CONNECTIONS / 4, per_bucket);
    assert_int_equal(per_bucket[1], CONNECTIONS / 4);
}

/* Nothing seen idle anywhere: the hash's bucket, about half each. */
static void test_with_no_bucket_seen_idle_the_hash_decides(void **state)
{
    static const unsigned int idle[GROUP_SIZE][2] = { { 0, 0 }, { 0, 0 } };
    int per_bucket[GROUP_SIZE];

    (void)state;
    steer(idle, CONNECTIONS, per_bucket);
    if (per_bucket[0] < 100 || per_bucket[1] < 100) {
        fail_msg("the hash split %d connections %d / %d", CONNECTIONS,
                 per_bucket[0], per_bucket[1]);
    }
}

/* The program for the most buckets a plan may have is within what the
 * kernel takes (instructions, and the verifier's paths through the
 * unrolled passes). */
static void test_the_program_for_the_most_buckets_loads(void **state)
{
    int sock_map, idle_map, prog, err = 0;

    (void)state;
    sock_map = reuseport_bpf_sockarray_create(STEERING_MAX_LOAD_BUCKETS,
                                              &err);
    assert_true(sock_map >= 0);
    idle_map = reuseport_bpf_idle_map_create(STEERING_MAX_LOAD_BUCKETS,
                                             &err);
    assert_true(idle_map >= 0);
    prog = reuseport_bpf_load_load(sock_map, idle_map,
                                   STEERING_MAX_LOAD_BUCKETS, 0, &err);
    if (prog < 0) {
        fail_msg("the load program for %d buckets: %s",
                 STEERING_MAX_LOAD_BUCKETS, strerror(err));
    }
    close(prog);
    close(idle_map);
    close(sock_map);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POOL_TEST(test_units_are_handed_out_one_per_connection),
        POOL_TEST(test_the_second_pass_weighs_the_buckets_seen_idle),
        POOL_TEST(test_the_only_bucket_seen_idle_gets_every_connection),
        POOL_TEST(test_with_no_bucket_seen_idle_the_hash_decides),
        POOL_TEST(test_the_program_for_the_most_buckets_loads),
    };

    return RUN_POOL_TESTS(tests);
}
