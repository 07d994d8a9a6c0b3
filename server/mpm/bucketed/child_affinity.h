/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_affinity.h: keeping a bucket's children on its CPUs
 * (BucketAffinity); the decisions are policy_affinity.h's.
 */
#ifndef CHILD_AFFINITY_H
#define CHILD_AFFINITY_H

#include "httpd.h"

#include "bucketed.h"

/* In the parent, at start-up and each restart: whether children are kept,
 * why, and each bucket's CPUs. */
void child_affinity_log(server_rec *s, const bucketed_config *conf,
                        const bucket_generation *gen);

/* In a child of bucket `bucket`, before it starts any thread (threads
 * inherit it): keeps the process on the bucket's CPUs, if chosen. A
 * failure is logged; the child then runs on every CPU it may. */
void child_affinity_apply(server_rec *s, const bucketed_config *conf,
                          const bucket_generation *gen, int bucket);

#endif /* CHILD_AFFINITY_H */
