/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_timeouts: the pure parts of the event child model. Timeout lists
 * (connections waiting in keep-alive, write completion or lingering close,
 * each with its own deadline) and what a connection does next, from what
 * httpd's process_connection hooks and the output filters left in its
 * conn_state_t. No sockets, no threads: the event child (event_child.c)
 * acts on the answers.
 */
#ifndef POLICY_TIMEOUTS_H
#define POLICY_TIMEOUTS_H

#include "apr_time.h"

/* An entry of a timeout list, embedded in what it times. */
typedef struct event_timer event_timer;
struct event_timer {
    event_timer *prev;
    event_timer *next;
    apr_time_t expiry;
    int listed;
};

/* Entries ordered by expiry, earliest first. Most entries of one list get
 * the same timeout, so insertion searches from the tail. */
typedef struct {
    event_timer *head;
    event_timer *tail;
    int count;
} timeout_list;

void timeout_list_init(timeout_list *q);
/* t must not be queued anywhere. */
void timeout_list_insert(timeout_list *q, event_timer *t, apr_time_t expiry);
/* t must be in q. */
void timeout_list_remove(timeout_list *q, event_timer *t);
/* Removes and returns the earliest entry if it expired at `now`, else
 * NULL. */
event_timer *timeout_list_pop_expired(timeout_list *q, apr_time_t now);
/* The earliest expiry, or 0 when empty. */
apr_time_t timeout_list_next_expiry(const timeout_list *q);

/* Where a connection goes next. */
typedef enum {
    EVENT_NEXT_PROCESS,      /* run the process_connection hooks (again) */
    EVENT_NEXT_FLUSH,        /* write completion: flush pending output */
    EVENT_NEXT_WAIT_WRITE,   /* output pending: wait writable (Timeout) */
    EVENT_NEXT_WAIT_READ,    /* write completion wants to read (Timeout) */
    EVENT_NEXT_KEEPALIVE,    /* wait for the next request (KeepAliveTimeout) */
    EVENT_NEXT_LINGER,       /* lingering close */
    EVENT_NEXT_SUSPENDED,    /* a module owns it until it resumes it */
    EVENT_NEXT_RESUME,       /* a module finished its suspended request: go
                              * on from the state the request left */
    EVENT_NEXT_WAITIO_READ,  /* CONN_STATE_ASYNC_WAITIO: wait readable
                              * (Timeout), then the hooks again */
    EVENT_NEXT_WAITIO_WRITE  /* the same, writable */
} event_next_e;

/* The conn_state_t state the process_connection hooks left (httpd.h's
 * conn_state_e, mapped by the caller so that this file needs no httpd
 * header). */
typedef enum {
    EVENT_STATE_PROCESSING,        /* untouched: the hooks are done with it */
    EVENT_STATE_KEEPALIVE,         /* CONN_STATE_KEEPALIVE (legacy alias) */
    EVENT_STATE_WRITE_COMPLETION,
    EVENT_STATE_SUSPENDED,
    EVENT_STATE_LINGER,
    EVENT_STATE_WAITIO_READ,       /* CONN_STATE_ASYNC_WAITIO, sense read
                                    * (or default) */
    EVENT_STATE_WAITIO_WRITE,      /* CONN_STATE_ASYNC_WAITIO, sense write */
    EVENT_STATE_OTHER              /* anything else */
} event_state_e;

/* After the process_connection hooks: hooks_ok (they returned OK or
 * DONE), the state they left, and whether the connection was aborted.
 * Anything but the states the async contract allows closes the
 * connection, as does an aborted one. */
event_next_e event_after_process(int hooks_ok, event_state_e state,
                                 int aborted);

/* After the hooks ran a connection with clogging input filters
 * (c->clogging_input_filters: a filter holds input the poller cannot see,
 * such as mod_ssl's buffered records): httpd's core served it
 * synchronously, keep-alive requests included, as under worker, so it is
 * done whatever state it was left in, unless a module suspended it (stock
 * event's rule). next: what event_after_process() said. */
event_next_e event_after_clogged(event_next_e next);

/* After write completion called the output filters: flush_ok (they
 * returned success), output_pending (c->data_in_output_filters),
 * want_read (c->cs->sense asks to read instead), keepalive (c->keepalive
 * is AP_CONN_KEEPALIVE), aborted, input_pending (a pipelined request is
 * already buffered). A connection whose response promised keep-alive waits
 * for its next request even in a leaving child. */
typedef struct {
    int flush_ok;
    int output_pending;
    int want_read;
    int keepalive;
    int aborted;
    int input_pending;
} event_flush_result;

event_next_e event_after_flush(const event_flush_result *r);

#endif /* POLICY_TIMEOUTS_H */
