/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_sockets: each bucket's listening sockets (listen_sockets.c): the
 * per-bucket lists and SO_REUSEPORT duplicates the parent opens from the
 * plan and keeps across generations, what a child keeps of them, what a
 * process forked for another purpose closes, and the steering that
 * listen_steering.c applies to them.
 */
#ifndef LISTEN_SOCKETS_H
#define LISTEN_SOCKETS_H

#include "bucketed.h"

/* listen_sockets.c: one socket list per bucket from the plan. */
int bucket_listeners_open(apr_pool_t *pconf, server_rec *s,
                          bucketed_config *conf, bucketed_retained *retained);
/* In a child of bucket: closes the other buckets' sockets. */
void bucket_listeners_keep_only(bucketed_retained *retained, int bucket);
/* Sockets the bucket's children accept on: its planned ones, and any
 * being drained into it. */
int bucket_listeners_count(const bucket *bk);
void bucket_listeners_close_all(bucketed_retained *retained);
/* In a process forked for another purpose: closes every descriptor the
 * retained data holds (duplicates, socket and idle maps, the event
 * model's per-bucket eventfds) and forgets them. Returns how many. */
int bucket_listeners_close_for_helper(server_rec *s,
                                      bucketed_retained *retained);
/* BucketSteering for this plan (runs the CPU trial once per generation
 * when cpu is asked for); NULL or the error. */
const char *bucket_listeners_choose_steering(apr_pool_t *p,
                                             bucketed_config *conf,
                                             int online_cpus);
/* In the parent, after each census: BucketSteering load's idle counts. */
void bucket_listeners_publish_idle(bucketed_config *conf,
                                   bucketed_retained *retained,
                                   const bucket_census *census,
                                   int num_buckets);
/* In a child: what steering needs of it (CPU affinity; no map
 * descriptors). */
void bucket_listeners_child_steering(server_rec *s,
                                     const bucketed_config *conf,
                                     bucketed_retained *retained, int bucket);

#endif /* LISTEN_SOCKETS_H */
