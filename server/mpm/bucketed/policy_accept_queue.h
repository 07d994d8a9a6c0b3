/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_accept_queue: what the parent's once-a-second samples of one
 * listening socket's accept queue add up to: the highest depth seen, whether
 * the queue has stayed full, and when that deserves a (rate-limited) warning.
 * Pure: the samples come in, the verdict goes out; no sockets, no logs.
 */
#ifndef POLICY_ACCEPT_QUEUE_H
#define POLICY_ACCEPT_QUEUE_H

#include "apr_time.h"

/* One sample of a listening socket, as the kernel reports it. */
typedef struct {
    apr_uint32_t depth;       /* connections waiting for accept() */
    apr_uint32_t backlog;     /* the queue's limit (listen backlog) */
    int has_drops;            /* the kernel reports drops per socket */
    apr_uint32_t drops;       /* packets dropped, since the socket opened;
                               * wraps at 2^32 */
} queue_sample;

typedef struct {
    apr_interval_time_t full_for;   /* warn once full for this long */
    apr_interval_time_t interval;   /* and at most once per this */
} queue_watch_limits;

/* Warn after three seconds of a full queue (four samples in a row, or
 * drops in each of them), at most once a minute per socket. */
#define QUEUE_WATCH_FULL_FOR  apr_time_from_sec(3)
#define QUEUE_WATCH_INTERVAL  apr_time_from_sec(60)

/* One socket's history; all zero before the first sample. */
typedef struct {
    int sampled;                 /* a previous sample exists */
    apr_uint32_t max_depth;      /* highest depth sampled */
    apr_uint32_t last_drops;     /* drops at the previous sample */
    apr_time_t full_since;       /* 0: not full at the previous sample */
    apr_uint32_t drops_at_full;  /* drops when it filled */
    apr_time_t last_warning;     /* 0: never warned */
} queue_watch;

typedef struct {
    int full;                    /* this sample counts as full */
    int warn;                    /* log a warning now */
    apr_interval_time_t full_for;    /* how long it has been full */
    apr_uint32_t dropped;        /* drops since it filled */
} queue_verdict;

/* A sample is full when the queue holds as many connections as its backlog
 * allows (at least one), or when the kernel dropped packets on the socket
 * since the previous sample: a queue that overflowed and drained between
 * two samples was full too. */
int queue_sample_full(const queue_sample *sample, const queue_watch *watch);

/* Folds a sample taken at `now` into the watch and says what to report. */
queue_verdict queue_watch_update(queue_watch *watch,
                                 const queue_sample *sample, apr_time_t now,
                                 const queue_watch_limits *limits);

#endif /* POLICY_ACCEPT_QUEUE_H */
