/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_timeouts.c: unit tests of the event child model's timeout lists
 * and of its connection state machine (what a connection does after the
 * process_connection hooks and after write completion).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "policy_timeouts.h"

#define N 64

/* Walks the list both ways: ordered by expiry, links consistent, count
 * right. */
static void assert_well_formed(const timeout_list *q)
{
    const event_timer *t, *prev = NULL;
    int n = 0;

    for (t = q->head; t != NULL; prev = t, t = t->next) {
        assert_ptr_equal(t->prev, prev);
        assert_true(t->listed);
        if (prev != NULL) {
            assert_true(prev->expiry <= t->expiry);
        }
        n++;
    }
    assert_ptr_equal(q->tail, prev);
    assert_int_equal(n, q->count);
}

static void test_queue_order(void **state)
{
    /* Mostly rising, as equal timeouts give, with some out of order. */
    static const apr_time_t expiries[] = {
        10, 20, 20, 30, 5, 40, 25, 50, 50, 1, 60, 45
    };
    event_timer t[sizeof(expiries) / sizeof(expiries[0])];
    timeout_list q;
    event_timer *e;
    apr_time_t last = 0;
    size_t i;
    int popped = 0;

    (void)state;
    timeout_list_init(&q);
    assert_int_equal(timeout_list_next_expiry(&q), 0);
    assert_null(timeout_list_pop_expired(&q, 1000));
    for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        memset(&t[i], 0, sizeof(t[i]));
        timeout_list_insert(&q, &t[i], expiries[i]);
        assert_well_formed(&q);
    }
    assert_int_equal(timeout_list_next_expiry(&q), 1);
    /* Nothing expired before the earliest expiry. */
    assert_null(timeout_list_pop_expired(&q, 0));
    while ((e = timeout_list_pop_expired(&q, 30)) != NULL) {
        assert_true(e->expiry <= 30);
        assert_true(e->expiry >= last);
        assert_false(e->listed);
        last = e->expiry;
        popped++;
        assert_well_formed(&q);
    }
    assert_int_equal(popped, 7);
    assert_int_equal(q.count, 5);
    assert_int_equal(timeout_list_next_expiry(&q), 40);
}

static void test_queue_remove_anywhere(void **state)
{
    event_timer t[N];
    timeout_list q;
    int i, removed = 0;

    (void)state;
    timeout_list_init(&q);
    for (i = 0; i < N; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        timeout_list_insert(&q, &t[i], (i * 37) % 11);
    }
    /* Head, tail and middle, in an order unrelated to expiry. */
    for (i = 0; i < N; i += 3) {
        timeout_list_remove(&q, &t[i]);
        assert_false(t[i].listed);
        removed++;
        assert_well_formed(&q);
    }
    timeout_list_remove(&q, q.head);
    timeout_list_remove(&q, q.tail);
    removed += 2;
    assert_well_formed(&q);
    assert_int_equal(q.count, N - removed);
    /* A removed entry can be queued again. */
    timeout_list_insert(&q, &t[0], 3);
    assert_well_formed(&q);
    assert_int_equal(q.count, N - removed + 1);
    while (q.head != NULL) {
        timeout_list_remove(&q, q.head);
    }
    assert_int_equal(q.count, 0);
    assert_null(q.tail);
}

static void test_after_process(void **state)
{
    (void)state;
    /* The async contract's states. */
    assert_int_equal(event_after_process(1, EVENT_STATE_WRITE_COMPLETION, 0),
                     EVENT_NEXT_FLUSH);
    assert_int_equal(event_after_process(1, EVENT_STATE_WRITE_COMPLETION,
                                         0), EVENT_NEXT_FLUSH);
    /* Keep-alive is reached through write completion (flush first). */
    assert_int_equal(event_after_process(1, EVENT_STATE_KEEPALIVE, 0),
                     EVENT_NEXT_FLUSH);
    assert_int_equal(event_after_process(1, EVENT_STATE_SUSPENDED, 0),
                     EVENT_NEXT_SUSPENDED);
    assert_int_equal(event_after_process(1, EVENT_STATE_LINGER, 0),
                     EVENT_NEXT_LINGER);
    /* Clogging input filters: served synchronously, so done, unless a
     * module suspended it. */
    assert_int_equal(event_after_clogged(EVENT_NEXT_FLUSH), EVENT_NEXT_LINGER);
    assert_int_equal(event_after_clogged(EVENT_NEXT_WAITIO_READ),
                     EVENT_NEXT_LINGER);
    assert_int_equal(event_after_clogged(EVENT_NEXT_SUSPENDED),
                     EVENT_NEXT_SUSPENDED);
    /* ASYNC_WAITIO (CAN_WAITIO is 1): waits for the sense it asked for,
     * unless aborted. */
    assert_int_equal(event_after_process(1, EVENT_STATE_WAITIO_READ, 0),
                     EVENT_NEXT_WAITIO_READ);
    assert_int_equal(event_after_process(1, EVENT_STATE_WAITIO_WRITE, 0),
                     EVENT_NEXT_WAITIO_WRITE);
    assert_int_equal(event_after_process(1, EVENT_STATE_WAITIO_READ, 1),
                     EVENT_NEXT_LINGER);
    assert_int_equal(event_after_process(0, EVENT_STATE_WAITIO_WRITE, 0),
                     EVENT_NEXT_LINGER);
    /* A hook that did not set a state, hooks that failed (DECLINED, an
     * error), an aborted connection, a state this MPM does not offer:
     * closed. */
    assert_int_equal(event_after_process(1, EVENT_STATE_PROCESSING, 0),
                     EVENT_NEXT_LINGER);
    assert_int_equal(event_after_process(0,
                                         EVENT_STATE_WRITE_COMPLETION, 0),
                     EVENT_NEXT_LINGER);
    assert_int_equal(event_after_process(0,
                                         EVENT_STATE_WRITE_COMPLETION, 0),
                     EVENT_NEXT_LINGER);
    assert_int_equal(event_after_process(1, EVENT_STATE_WRITE_COMPLETION, 1),
                     EVENT_NEXT_LINGER);
    assert_int_equal(event_after_process(1, EVENT_STATE_OTHER, 0),
                     EVENT_NEXT_LINGER);
}

static void test_after_flush(void **state)
{
    event_flush_result r;

    (void)state;
    memset(&r, 0, sizeof(r));
    r.flush_ok = 1;
    r.keepalive = 1;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_KEEPALIVE);
    r.input_pending = 1;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_PROCESS);
    r.input_pending = 0;
    r.want_read = 1;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_WAIT_READ);
    r.want_read = 0;
    /* Pending output wins over everything but a failed write. */
    r.output_pending = 1;
    r.aborted = 1;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_WAIT_WRITE);
    r.output_pending = 0;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_LINGER);
    r.aborted = 0;
    r.keepalive = 0;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_LINGER);
    r.keepalive = 1;
    r.flush_ok = 0;
    r.output_pending = 1;
    assert_int_equal(event_after_flush(&r), EVENT_NEXT_LINGER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_order),
        cmocka_unit_test(test_queue_remove_anywhere),
        cmocka_unit_test(test_after_process),
        cmocka_unit_test(test_after_flush),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
