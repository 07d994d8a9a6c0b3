/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_sockets: each bucket's listening sockets (listen_sockets.c): the
 * per-bucket lists and SO_REUSEPORT duplicates the parent opens from the
 * plan and keeps across generations, what a child keeps of them, what a
 * process forked for another purpose closes (the steering applied to
 * them: listen_steering.h).
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
int bucket_listeners_count(const bucket_rec *bk);
/* Connections queued and not yet accepted on this generation's
 * duplicates, all of them together. */
int bucket_listeners_queued(const bucketed_retained *retained);

/* Whether an old child may still accept from bucket's sockets. */
typedef int (*bucket_accepted_fn)(void *baton, int bucket);
/* Each duplicate the plan retired whose bucket (of the plan it was in:
 * bucket k owns the k-th duplicates) no old child accepts from any more
 * leaves its group and is closed. */
void bucket_listeners_retire(server_rec *s, bucketed_retained *retained,
                             bucket_accepted_fn accepted, void *baton);
void bucket_listeners_close_all(bucketed_retained *retained);
/* In a process forked for another purpose: closes every descriptor the
 * retained data holds (duplicates, socket and idle maps, the event
 * model's per-bucket eventfds) and forgets them. Returns how many. */
int bucket_listeners_close_for_helper(server_rec *s,
                                      bucketed_retained *retained);

#endif /* LISTEN_SOCKETS_H */
