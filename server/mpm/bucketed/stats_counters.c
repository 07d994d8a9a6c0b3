/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_counters.c: the numbers behind every bucket report, in anonymous
 * shared memory.
 *
 * - Accept counters, one per bucket, that children increment (one atomic
 *   add per connection, the only cost on the accept path). They live as
 *   long as the server, sized by ServerLimit, which bounds the buckets.
 * - The published segment, one per generation: what the parent counts at
 *   every maintenance pass (bucket census) and samples about once a second
 *   (accept queues, stats_queue.c), for children to display.
 *
 * Nothing here feeds a decision of the parent. stats_report.c reads it.
 */
#include "stats.h"

#include <string.h>

#include "apr_atomic.h"

#include "httpd.h"
#include "http_log.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

static void *shared_zeroed(apr_pool_t *pool, server_rec *s, apr_size_t size,
                           const char *what)
{
    apr_shm_t *shm;
    apr_status_t rv = apr_shm_create(&shm, size, NULL, pool);
    void *base;

    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     BKLOGNO(00123)
                     "bucketed: cannot create %" APR_SIZE_T_FMT " bytes of "
                     "anonymous shared memory for %s", size, what);
        return NULL;
    }
    base = apr_shm_baseaddr_get(shm);
    memset(base, 0, size);
    return base;
}

/* The generation's published segment: times, then the census of each
 * bucket, then each socket of each bucket. In pconf, so that it goes with
 * the generation; its children keep their own mapping until they leave. */
static apr_status_t publish_init(apr_pool_t *pconf, server_rec *s,
                                 bucket_generation *gen)
{
    apr_size_t times_size, census_size, sockets_size;
    published_census *census;
    char *base;
    int b;

    gen->num_sockets = 0;
    for (b = 0; b < gen->num_buckets; b++) {
        ap_listen_rec *lr;
        for (lr = gen->buckets[b].listeners; lr; lr = lr->next) {
            gen->num_sockets++;
        }
    }
    times_size = APR_ALIGN_DEFAULT(sizeof(published_times));
    census_size = APR_ALIGN_DEFAULT(sizeof(published_census)
                                    * gen->num_buckets);
    sockets_size = sizeof(published_socket) * gen->num_sockets;
    base = shared_zeroed(pconf, s, times_size + census_size + sockets_size,
                         "the bucket census and accept-queue samples");
    if (base == NULL) {
        return APR_ENOMEM;
    }
    gen->times = (published_times *)base;
    census = (published_census *)(base + times_size);
    for (b = 0; b < gen->num_buckets; b++) {
        gen->buckets[b].published = &census[b];
    }
    gen->sockets = (published_socket *)(base + times_size + census_size);
    return APR_SUCCESS;
}

apr_status_t bucket_stats_init(apr_pool_t *pconf, server_rec *s,
                               bucketed_retained *retained)
{
    bucket_kept *kept = retained->buckets;

    if (kept[0].counter == NULL) {
        /* Buckets never outnumber ServerLimit, which is fixed at start. */
        bucket_counter *counters = shared_zeroed(
            s->process->pool, s,
            sizeof(bucket_counter) * retained->first_server_limit,
            "bucket counters");
        int b;

        if (counters == NULL) {
            return APR_ENOMEM;
        }
        for (b = 0; b < retained->first_server_limit; b++) {
            kept[b].counter = &counters[b];
        }
    }
    return publish_init(pconf, s, retained->generation);
}

void bucket_stats_reset(bucketed_retained *retained)
{
    int b;

    for (b = 0; b < retained->first_server_limit; b++) {
        memset(retained->buckets[b].counter, 0, sizeof(bucket_counter));
    }
}

void bucket_stats_count_accept(bucketed_retained *retained, int bucket)
{
    apr_atomic_inc32(&retained->buckets[bucket].counter->accepted);
}

void bucket_stats_count_reclaimed(bucketed_retained *retained, int bucket,
                                  int n)
{
    apr_atomic_add32(&retained->buckets[bucket].counter->reclaimed,
                     (apr_uint32_t)n);
}

apr_uint32_t bucket_stats_reclaimed(const bucketed_retained *retained,
                                    int bucket)
{
    return apr_atomic_read32(&retained->buckets[bucket].counter->reclaimed);
}

void bucket_stats_count_lingered(bucketed_retained *retained, int bucket)
{
    apr_atomic_inc32(&retained->buckets[bucket].counter->lingered);
}

apr_uint32_t bucket_stats_lingered(const bucketed_retained *retained,
                                   int bucket)
{
    return apr_atomic_read32(&retained->buckets[bucket].counter->lingered);
}

apr_uint32_t bucket_stats_accepted(const bucketed_retained *retained,
                                   int bucket)
{
    return apr_atomic_read32(&retained->buckets[bucket].counter->accepted);
}

static published_census *census_of(const bucketed_retained *retained,
                                   int bucket)
{
    const bucket_generation *gen = retained->generation;

    if (gen == NULL || gen->buckets == NULL || bucket < 0
        || bucket >= gen->num_buckets) {
        return NULL;
    }
    return gen->buckets[bucket].published;
}

int bucket_stats_can_grow(const bucketed_retained *retained, int bucket)
{
    published_census *pc = census_of(retained, bucket);

    return pc != NULL && apr_atomic_read32(&pc->can_grow) != 0;
}

apr_interval_time_t bucket_stats_stalled_for(
    const bucketed_retained *retained, int bucket)
{
    published_census *pc = census_of(retained, bucket);

    return pc != NULL ? apr_time_from_msec(apr_atomic_read32(&pc->stalled_ms))
                      : 0;
}

apr_uint32_t bucket_stats_waiting(const bucketed_retained *retained,
                                  int bucket)
{
    published_census *pc = census_of(retained, bucket);

    return pc != NULL ? apr_atomic_read32(&pc->waiting) : 0;
}

int bucket_stats_children(const bucketed_retained *retained, int bucket)
{
    published_census *pc = census_of(retained, bucket);

    return pc != NULL ? (int)apr_atomic_read32(&pc->children) : 0;
}

apr_time_t bucket_stats_census_at(const bucketed_retained *retained)
{
    const bucket_generation *gen = retained->generation;

    return gen != NULL && gen->times != NULL ? gen->times->census_at : 0;
}

void bucket_stats_set_closing(bucketed_retained *retained)
{
    bucket_generation *gen = retained->generation;

    if (gen != NULL && gen->times != NULL) {
        apr_atomic_set32(&gen->times->closing, 1);
    }
}

int bucket_stats_closing(const bucketed_retained *retained)
{
    const bucket_generation *gen = retained->generation;

    return gen != NULL && gen->times != NULL
           && apr_atomic_read32(&gen->times->closing) != 0;
}

void bucket_stats_publish_census(bucket_generation *gen,
                                 const bucket_census *census,
                                 apr_time_t now)
{
    int b;

    if (gen->times == NULL) {
        return;
    }
    for (b = 0; b < gen->num_buckets; b++) {
        const bucket_rec *bk = &gen->buckets[b];
        published_census *pub = bk->published;

        apr_atomic_set32(&pub->idle, (apr_uint32_t)census[b].idle);
        apr_atomic_set32(&pub->busy, (apr_uint32_t)census[b].busy);
        apr_atomic_set32(&pub->can_grow, bk->can_grow != 0);
        apr_atomic_set32(&pub->stalled_ms, (apr_uint32_t)
                         apr_time_as_msec(stall_watch_stalled_for(&bk->stall,
                                                                  now)));
        apr_atomic_set32(&pub->waiting, bk->queued);
        apr_atomic_set32(&pub->children, (apr_uint32_t)census[b].children);
    }
    gen->times->census_at = now;
}
