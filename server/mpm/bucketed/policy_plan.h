/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_plan: decides how many listener buckets there are, which
 * listening sockets each owns and how its children wait on them. Pure: no
 * sockets, no processes.
 */
#ifndef POLICY_PLAN_H
#define POLICY_PLAN_H

#include "apr_pools.h"

typedef enum {
    BUCKET_STRATEGY_AUTO = 0,
    BUCKET_STRATEGY_REUSEPORT,
    BUCKET_STRATEGY_LISTEN,
    BUCKET_STRATEGY_SINGLE
} bucket_strategy_e;

/* ListenCoresBucketsRatio not in the configuration. */
#define BUCKET_RATIO_UNSET (-1)

/* Children every bucket can have when the slots allow: with fewer, a
 * child that waits on a request to its own server (a proxy to itself, a
 * health check) could find its bucket's only other child busy, or none. */
#define BUCKET_MIN_CHILDREN 2

/* What the operator asked for and what the machine offers. */
typedef struct {
    bucket_strategy_e strategy;   /* BucketStrategy */
    int bucket_count;             /* BucketCount; 0 = auto */
    int cores_buckets_ratio;      /* ListenCoresBucketsRatio, or
                                   * BUCKET_RATIO_UNSET; 0 = no duplicates */
    int online_cpus;
    int have_reuseport;           /* kernel probe result */
    int num_listeners;            /* Listen addresses, in ap_listeners order */
    int max_workers;              /* most children: MaxRequestWorkers, or
                                   * ChildModel event's MaxRequestWorkers /
                                   * ThreadsPerChild */
    int threads_per_child;        /* ChildModel event's ThreadsPerChild;
                                   * 0: ChildModel prefork */
    int one_process;              /* -X: the parent serves everything */
} bucket_plan_input;

/* One socket a bucket accepts on: listener index into ap_listeners order, and
 * whether it is the listener's own socket or an SO_REUSEPORT duplicate. */
typedef struct {
    int listener;
    int duplicate;   /* 0 = the original socket, k>0 = k-th duplicate */
} bucket_socket;

typedef struct {
    int num_sockets;
    bucket_socket *sockets;
} bucket_def;

typedef struct {
    bucket_strategy_e strategy;   /* the one chosen (never AUTO) */
    const char *reason;           /* why, for the start-up log */
    int num_buckets;
    bucket_def *buckets;
    int max_sockets_per_bucket;
    int num_duplicates;           /* SO_REUSEPORT sockets beyond the
                                   * originals */
    int capped;                   /* fewer buckets than asked, to leave every
                                   * bucket BUCKET_MIN_CHILDREN slots */
} bucket_plan;

/* How a bucket's children wait for connections. */
typedef enum {
    BUCKET_WAIT_ACCEPT,   /* one socket: block in accept() */
    BUCKET_WAIT_EPOLL,    /* several: epoll with EPOLLEXCLUSIVE, no lock */
    BUCKET_WAIT_MUTEX     /* several, kernel before 4.5: poll under the
                           * bucket's accept mutex */
} bucket_wait_e;

/* Returns NULL and fills *plan, or an error message (allocated from p). */
const char *bucket_plan_make(apr_pool_t *p, const bucket_plan_input *in,
                             bucket_plan *plan);

bucket_wait_e bucket_wait_mode(int num_sockets, int epoll_exclusive);

/* A child waiting on several sockets tries the ready ones starting at a
 * different one each time, so that a busy address cannot starve a quiet
 * one: which of n ready sockets it tries i-th (0 <= i < n) on its
 * wake-up number `turn`, a count that grows with every wake-up and wraps
 * at UINT_MAX. Always 0 .. n-1. */
int bucket_ready_index(unsigned int turn, int i, int n);

/* The plan in an operator's words, for `-t` and the start-up log;
 * workers_in_epoll: ChildModel event, whose worker threads wait in their
 * child's epoll set whatever the bucket's socket count. */
const char *bucket_plan_describe(apr_pool_t *p, const bucket_plan *plan,
                                 int num_listeners, int max_workers,
                                 int epoll_exclusive, int workers_in_epoll);

/* The bucket a slot's child starts in when the parent fills slots in
 * order (start-up, restart): round robin, so every bucket gets its share.
 * Maintenance may later move capacity from bucket to bucket. */
int bucket_of_slot(int slot, int num_buckets);

/* Whether bucket `to` has a socket on every address bucket `from` has: a
 * client of `from` could as well have been sent to `to`. */
int bucket_plan_covers(const bucket_plan *plan, int to, int from);

const char *bucket_strategy_name(bucket_strategy_e strategy);

#endif /* POLICY_PLAN_H */
