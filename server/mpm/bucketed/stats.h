/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats: the numbers the parent and the children share
 * (stats_counters.c), the parent's accept-queue samples (stats_queue.c)
 * and the report mod_bucketed_status reads (stats_report.c).
 */
#ifndef STATS_H
#define STATS_H

#include "bucketed.h"
#include "policy_maint.h"
#include "policy_stall.h"

/* stats_counters.c: the shared counters and the published segment. */
apr_status_t bucket_stats_init(apr_pool_t *pconf, server_rec *s,
                               bucketed_config *conf,
                               bucketed_retained *retained);
void bucket_stats_reset(bucketed_retained *retained);
void bucket_stats_count_accept(bucketed_retained *retained, int bucket);
void bucket_stats_count_reclaimed(bucketed_retained *retained, int bucket,
                                  int n);
apr_uint32_t bucket_stats_reclaimed(const bucketed_retained *retained,
                                    int bucket);
apr_uint32_t bucket_stats_accepted(const bucketed_retained *retained,
                                   int bucket);
/* Parent: its per-bucket census (maintain_buckets) for display, whether
 * each bucket could get another child (can_grow), how long each has been
 * stalled at `now` (stall) and the connections waiting in its accept
 * queues (queued), per bucket. */
void bucket_stats_publish_census(bucketed_config *conf,
                                 const bucket_census *census,
                                 const int *can_grow,
                                 const stall_watch *stall,
                                 const apr_uint32_t *queued, int num_buckets,
                                 apr_time_t now);
/* Children: whether the parent's last pass could have given their bucket
 * another child (0 before the first pass). */
int bucket_stats_can_grow(const bucketed_config *conf, int bucket);
/* Children: how long the bucket had been stalled at the parent's last
 * pass (0: it was not, or no pass yet). */
apr_interval_time_t bucket_stats_stalled_for(const bucketed_config *conf,
                                             int bucket);
/* Children: the connections waiting in the bucket's accept queues and its
 * children, at the parent's last pass (0 before it). */
apr_uint32_t bucket_stats_waiting(const bucketed_config *conf, int bucket);
int bucket_stats_children(const bucketed_config *conf, int bucket);
/* Children: when the parent's last pass was (0: none yet). */
apr_time_t bucket_stats_census_at(const bucketed_config *conf);

/* stats_queue.c: the parent's sampling of every bucket socket. */
apr_status_t bucket_queue_init(apr_pool_t *pconf, server_rec *s,
                               bucketed_config *conf);
/* Every pass: the connections waiting in each bucket's sockets into
 * queued (plan.num_buckets entries); about once a second also the
 * published sample and the full-queue warning. */
void bucket_queue_sample(server_rec *s, bucketed_config *conf,
                         apr_uint32_t *queued);

/* stats_report.c: the bucketed_get_status optional function. */
void bucket_report_register(void);

#endif /* STATS_H */
