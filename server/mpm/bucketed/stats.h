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
                               bucketed_retained *retained);
void bucket_stats_reset(bucketed_retained *retained);
void bucket_stats_count_accept(bucketed_retained *retained, int bucket);
void bucket_stats_count_reclaimed(bucketed_retained *retained, int bucket,
                                  int n);
apr_uint32_t bucket_stats_reclaimed(const bucketed_retained *retained,
                                    int bucket);
void bucket_stats_count_lingered(bucketed_retained *retained, int bucket);
apr_uint32_t bucket_stats_lingered(const bucketed_retained *retained,
                                   int bucket);
apr_uint32_t bucket_stats_accepted(const bucketed_retained *retained,
                                   int bucket);
/* Parent: its census of each bucket (maintain_buckets) for display, with
 * what each bucket record says at `now`: whether it could get another
 * child (can_grow), how long it has been stalled (stall) and the
 * connections waiting in its accept queues (queued). */
void bucket_stats_publish_census(bucket_generation *gen,
                                 const bucket_census *census,
                                 apr_time_t now);
/* Children: whether the parent's last pass could have given their bucket
 * another child (0 before the first pass). */
int bucket_stats_can_grow(const bucketed_retained *retained, int bucket);
/* Children: how long the bucket had been stalled at the parent's last
 * pass (0: it was not, or no pass yet). */
apr_interval_time_t bucket_stats_stalled_for(
    const bucketed_retained *retained, int bucket);
/* Children: the connections waiting in the bucket's accept queues and its
 * children, at the parent's last pass (0 before it). */
apr_uint32_t bucket_stats_waiting(const bucketed_retained *retained,
                                  int bucket);
int bucket_stats_children(const bucketed_retained *retained, int bucket);
/* Children: when the parent's last pass was (0: none yet). */
apr_time_t bucket_stats_census_at(const bucketed_retained *retained);
/* Parent: from now on the generation's children answer every response
 * with "Connection: close" while they go on accepting (a stop on sockets
 * a service manager holds, parent.c). Children: whether it is so. */
void bucket_stats_set_closing(bucketed_retained *retained);
int bucket_stats_closing(const bucketed_retained *retained);

/* stats_queue.c: the parent's sampling of every bucket socket. */
apr_status_t bucket_queue_init(apr_pool_t *pconf, server_rec *s,
                               bucket_generation *gen);
/* Every pass: the connections waiting in each bucket's sockets into its
 * record (queued); about once a second also the published sample and the
 * full-queue warning. */
void bucket_queue_sample(server_rec *s, bucket_generation *gen);

/* stats_report.c: the bucketed_get_status optional function. */
void bucket_report_register(void);

#endif /* STATS_H */
