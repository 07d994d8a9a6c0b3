/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucket.c: the bucket's records (bucket.h): what a bucket keeps across
 * restarts, and one generation's buckets over them. The files that own
 * each part fill it in: listen_sockets.c its sockets and accept mutex,
 * event_child.c its eventfd, stats_counters.c its counters and published
 * census, parent_slots.c its spawning state, parent_maint.c its census,
 * parent_stalls.c its stall watch. This file calls none of them.
 */
#include "bucket.h"

#include "apr_pools.h"

/* pconf is being cleared: the generation is over. */
static apr_status_t forget_generation(void *data)
{
    bucket_generation **slot = data;

    *slot = NULL;
    return APR_SUCCESS;
}

bucket_generation *bucket_generation_get(apr_pool_t *pconf,
                                         bucket_generation **slot)
{
    if (*slot == NULL) {
        *slot = apr_pcalloc(pconf, sizeof(**slot));
        /* On pconf, not a longer-lived pool: the function lives in this
         * DSO, which a restart unloads after pconf's cleanups have run. */
        apr_pool_cleanup_register(pconf, slot, forget_generation,
                                  apr_pool_cleanup_null);
    }
    return *slot;
}

bucket_kept *bucket_kept_create(apr_pool_t *process_pool,
                                int first_server_limit)
{
    bucket_kept *kept = apr_pcalloc(process_pool,
                                    sizeof(*kept) * first_server_limit);
    int b;

    for (b = 0; b < first_server_limit; b++) {
        kept[b].nudge = -1;
    }
    return kept;
}

void bucket_generation_build(apr_pool_t *pconf, bucket_generation *gen,
                             bucket_kept *kept, int num_buckets)
{
    int b;

    gen->num_buckets = num_buckets;
    gen->buckets = apr_pcalloc(pconf, sizeof(*gen->buckets) * num_buckets);
    for (b = 0; b < num_buckets; b++) {
        bucket_rec *bk = &gen->buckets[b];

        bk->index = b;
        bk->kept = &kept[b];
    }
}
