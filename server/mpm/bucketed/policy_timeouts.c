/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_timeouts.c: timeout lists and the connection state machine of the
 * event child model, as pure functions.
 */
#include "policy_timeouts.h"

void timeout_list_init(timeout_list *q)
{
    q->head = q->tail = NULL;
    q->count = 0;
}

void timeout_list_insert(timeout_list *q, event_timer *t, apr_time_t expiry)
{
    event_timer *after = q->tail;

    while (after != NULL && after->expiry > expiry) {
        after = after->prev;
    }
    t->expiry = expiry;
    t->prev = after;
    t->next = after != NULL ? after->next : q->head;
    if (t->next != NULL) {
        t->next->prev = t;
    }
    else {
        q->tail = t;
    }
    if (after != NULL) {
        after->next = t;
    }
    else {
        q->head = t;
    }
    t->listed = 1;
    q->count++;
}

void timeout_list_remove(timeout_list *q, event_timer *t)
{
    if (t->prev != NULL) {
        t->prev->next = t->next;
    }
    else {
        q->head = t->next;
    }
    if (t->next != NULL) {
        t->next->prev = t->prev;
    }
    else {
        q->tail = t->prev;
    }
    t->prev = t->next = NULL;
    t->listed = 0;
    q->count--;
}

event_timer *timeout_list_pop_expired(timeout_list *q, apr_time_t now)
{
    event_timer *t = q->head;

    if (t == NULL || t->expiry > now) {
        return NULL;
    }
    timeout_list_remove(q, t);
    return t;
}

apr_time_t timeout_list_next_expiry(const timeout_list *q)
{
    return q->head != NULL ? q->head->expiry : 0;
}

event_next_e event_after_process(int hooks_ok, event_state_e state,
                                 int aborted)
{
    if (!hooks_ok) {
        return EVENT_NEXT_LINGER;
    }
    /* A hook that left the connection being processed means it is done
     * with it (modules written for prefork and worker). */
    switch (state) {
    case EVENT_STATE_KEEPALIVE:
    case EVENT_STATE_WRITE_COMPLETION:
        return aborted ? EVENT_NEXT_LINGER : EVENT_NEXT_FLUSH;
    case EVENT_STATE_SUSPENDED:
        return EVENT_NEXT_SUSPENDED;
    case EVENT_STATE_WAITIO_READ:
        return aborted ? EVENT_NEXT_LINGER : EVENT_NEXT_WAITIO_READ;
    case EVENT_STATE_WAITIO_WRITE:
        return aborted ? EVENT_NEXT_LINGER : EVENT_NEXT_WAITIO_WRITE;
    default:
        return EVENT_NEXT_LINGER;
    }
}

event_next_e event_after_clogged(event_next_e next)
{
    return next == EVENT_NEXT_SUSPENDED ? next : EVENT_NEXT_LINGER;
}

event_next_e event_after_flush(const event_flush_result *r)
{
    if (!r->flush_ok) {
        return EVENT_NEXT_LINGER;
    }
    if (r->output_pending) {
        return EVENT_NEXT_WAIT_WRITE;
    }
    if (r->want_read) {
        return EVENT_NEXT_WAIT_READ;
    }
    if (!r->keepalive || r->aborted) {
        return EVENT_NEXT_LINGER;
    }
    if (r->input_pending) {
        return EVENT_NEXT_PROCESS;
    }
    /* A leaving child too: the response promised keep-alive, and the
     * client may send its next request before it reads a close. */
    return EVENT_NEXT_KEEPALIVE;
}
