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
                                 bucketed_config *conf)
{
    bucket_published *pub = &conf->published;
    apr_size_t times_size, census_size, sockets_size;
    char *base;
    int b;

    pub->num_sockets = 0;
    for (b = 0; b < conf->plan.num_buckets; b++) {
        ap_listen_rec *lr;
        for (lr = conf->bucket_listeners[b]; lr; lr = lr->next) {
            pub->num_sockets++;
        }
    }
    times_size = APR_ALIGN_DEFAULT(sizeof(published_times));
    census_size = APR_ALIGN_DEFAULT(sizeof(published_census)
                                    * conf->plan.num_buckets);
    sockets_size = sizeof(published_socket) * pub->num_sockets;
    base = shared_zeroed(pconf, s, times_size + census_size + sockets_size,
                         "the bucket census and accept-queue samples");
    if (base == NULL) {
        return APR_ENOMEM;
    }
    pub->times = (published_times *)base;
    pub->census = (published_census *)(base + times_size);
    pub->sockets = (published_socket *)(base + times_size + census_size);
    return APR_SUCCESS;
}

apr_status_t bucket_stats_init(apr_pool_t *pconf, server_rec *s,
                               bucketed_config *conf,
                               bucketed_retained *retained)
{
    if (retained->counters == NULL) {
        /* Buckets never outnumber ServerLimit, which is fixed at start. */
        retained->counters = shared_zeroed(
            s->process->pool, s,
            sizeof(bucket_counter) * retained->first_server_limit,
            "bucket counters");
        if (retained->counters == NULL) {
            return APR_ENOMEM;
        }
    }
    return publish_init(pconf, s, conf);
}

void bucket_stats_reset(bucketed_retained *retained)
{
    memset(retained->counters, 0,
           sizeof(bucket_counter) * retained->first_server_limit);
}

void bucket_stats_count_accept(bucketed_retained *retained, int bucket)
{
    apr_atomic_inc32(&retained->counters[bucket].accepted);
}

void bucket_stats_count_reclaimed(bucketed_retained *retained, int bucket,
                                  int n)
{
    apr_atomic_add32(&retained->counters[bucket].reclaimed, (apr_uint32_t)n);
}

apr_uint32_t bucket_stats_reclaimed(const bucketed_retained *retained,
                                    int bucket)
{
    return apr_atomic_read32(&retained->counters[bucket].reclaimed);
}

apr_uint32_t bucket_stats_accepted(const bucketed_retained *retained,
                                   int bucket)
{
    return apr_atomic_read32(&retained->counters[bucket].accepted);
}

static published_census *census_of(const bucketed_config *conf,
                                    int bucket)
{
    const bucket_published *pub = &conf->published;

    if (pub->census == NULL || bucket < 0
        || bucket >= conf->plan.num_buckets) {
        return NULL;
    }
    return &pub->census[bucket];
}

int bucket_stats_can_grow(const bucketed_config *conf, int bucket)
{
    published_census *pc = census_of(conf, bucket);

    return pc != NULL && apr_atomic_read32(&pc->can_grow) != 0;
}

apr_interval_time_t bucket_stats_stalled_for(const bucketed_config *conf,
                                             int bucket)
{
    published_census *pc = census_of(conf, bucket);

    return pc != NULL ? apr_time_from_msec(apr_atomic_read32(&pc->stalled_ms))
                      : 0;
}

apr_uint32_t bucket_stats_waiting(const bucketed_config *conf, int bucket)
{
    published_census *pc = census_of(conf, bucket);

    return pc != NULL ? apr_atomic_read32(&pc->waiting) : 0;
}

int bucket_stats_children(const bucketed_config *conf, int bucket)
{
    published_census *pc = census_of(conf, bucket);

    return pc != NULL ? (int)apr_atomic_read32(&pc->children) : 0;
}

apr_time_t bucket_stats_census_at(const bucketed_config *conf)
{
    const bucket_published *pub = &conf->published;

    return pub->times != NULL ? pub->times->census_at : 0;
}

void bucket_stats_publish_census(bucketed_config *conf,
                                 const bucket_census *census,
                                 const int *can_grow,
                                 const stall_watch *stall,
                                 const apr_uint32_t *queued, int num_buckets,
                                 apr_time_t now)
{
    bucket_published *pub = &conf->published;
    int b;

    if (pub->census == NULL) {
        return;
    }
    for (b = 0; b < num_buckets && b < conf->plan.num_buckets; b++) {
        apr_atomic_set32(&pub->census[b].idle, (apr_uint32_t)census[b].idle);
        apr_atomic_set32(&pub->census[b].busy, (apr_uint32_t)census[b].busy);
        apr_atomic_set32(&pub->census[b].can_grow, can_grow[b] != 0);
        apr_atomic_set32(&pub->census[b].stalled_ms, (apr_uint32_t)
                         apr_time_as_msec(stall_watch_stalled_for(&stall[b],
                                                                  now)));
        apr_atomic_set32(&pub->census[b].waiting, queued[b]);
        apr_atomic_set32(&pub->census[b].children,
                         (apr_uint32_t)census[b].children);
    }
    pub->times->census_at = now;
}
