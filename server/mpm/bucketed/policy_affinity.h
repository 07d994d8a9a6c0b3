/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_affinity: which CPUs a bucket's children are kept on
 * (BucketAffinity). Pure: child_affinity.c reads the CPUs the server may
 * use and applies the answer.
 *
 * A bucket's children kept on CPUs of their own stop its threads from
 * moving between CPUs: under BucketSteering load the event model's threads
 * migrated twice as often as stock event's, and its p99 on 1 MB files was
 * 1.3-1.5x stock's; kept on their bucket's CPU, 0 migrations
 * (docs/benchmarks.md). The kernel's hash gives no bucket less work when its
 * CPUs are busy, so it is left free there unless asked.
 */
#ifndef POLICY_AFFINITY_H
#define POLICY_AFFINITY_H

#include "apr_pools.h"

#include "policy_event.h"
#include "policy_steering.h"

typedef enum {
    AFFINITY_AUTO = 0,   /* kept where it helps: see affinity_choose */
    AFFINITY_ON,         /* every bucket's children kept on its CPUs */
    AFFINITY_OFF         /* no child kept anywhere */
} affinity_e;

/* auto | on | off, case-insensitive. */
const char *affinity_parse(apr_pool_t *p, const char *directive,
                           const char *arg, affinity_e *out);
const char *affinity_name(affinity_e setting);

typedef struct {
    int kept;               /* each bucket's children kept on its CPUs */
    const char *reason;     /* for the log */
} affinity_choice;

/* BucketAffinity auto keeps them under BucketSteering cpu (a CPU's
 * connections all go to one bucket) and the event model's under load
 * steering (which gives a busy bucket fewer connections); steering is the
 * mode in force (steering_mode_in_force). */
affinity_choice affinity_choose(affinity_e requested, child_model_e model,
                                steering_e steering);

/* The CPUs bucket `bucket` of num_buckets is kept on, out of the
 * n_allowed CPUs the server may use (allowed, ascending), into cpus;
 * returns how many. Under BucketSteering cpu, the allowed CPUs whose
 * connections the program sends to the bucket (CPU mod num_buckets);
 * otherwise, and where none of those is allowed, every num_buckets-th
 * allowed CPU from the bucket's index, or, with fewer CPUs than buckets,
 * allowed CPU (bucket mod n_allowed), which buckets then share. */
int affinity_bucket_cpus(const int *allowed, int n_allowed,
                         steering_e steering, int bucket, int num_buckets,
                         int *cpus);

/* "0,2,4" for the log. */
const char *affinity_cpu_list(apr_pool_t *p, const int *cpus, int n);

#endif /* POLICY_AFFINITY_H */
