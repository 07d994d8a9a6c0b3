/*
 * bucket_plan: decides how many listener buckets there are and which
 * listening sockets each bucket owns. Pure: no sockets, no processes.
 */
#ifndef BUCKET_PLAN_H
#define BUCKET_PLAN_H

#include "apr_pools.h"

typedef enum {
    BUCKET_STRATEGY_AUTO = 0,
    BUCKET_STRATEGY_REUSEPORT,
    BUCKET_STRATEGY_LISTEN,
    BUCKET_STRATEGY_SINGLE
} bucket_strategy_e;

/* What the operator asked for and what the machine offers. */
typedef struct {
    bucket_strategy_e strategy;   /* BucketStrategy */
    int bucket_count;             /* BucketCount; 0 = auto */
    int cores_buckets_ratio;      /* ListenCoresBucketsRatio; 0 = unset */
    int online_cpus;
    int have_reuseport;           /* kernel probe result */
    int num_listeners;            /* Listen addresses, in ap_listeners order */
    int max_workers;              /* MaxRequestWorkers: one child per bucket at least */
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
    int max_sockets_per_bucket;   /* > 1 means an accept mutex is needed */
} bucket_plan;

/* Returns NULL and fills *plan, or an error message (allocated from p). */
const char *bucket_plan_make(apr_pool_t *p, const bucket_plan_input *in,
                             bucket_plan *plan);

/* Slot-to-bucket mapping: slots are dealt to buckets round robin, so the
 * first max_workers slots give every bucket its fair share. */
int bucket_of_slot(int slot, int num_buckets);

/* Children bucket b may run at most: its share of max_workers. */
int bucket_share(int total, int bucket, int num_buckets);

const char *bucket_strategy_name(bucket_strategy_e strategy);

#endif /* BUCKET_PLAN_H */
