/*
 * bucket_stats.c: per-bucket accept counters in anonymous shared memory,
 * and the bucket report offered to mod_bucketed_status. Children write the
 * counters; nothing here feeds a decision of the parent.
 */
#include <string.h>

#include "apr_atomic.h"
#include "apr_strings.h"

#include "httpd.h"
#include "http_log.h"
#include "http_main.h"

#include "bucketed.h"
#include "bucketed_status.h"

APLOG_USE_MODULE(mpm_bucketed);

apr_status_t bucket_stats_init(bucketed_retained *retained, server_rec *s)
{
    apr_size_t size;
    apr_status_t rv;

    if (retained->counters != NULL) {
        return APR_SUCCESS;
    }
    /* Buckets never outnumber ServerLimit, which is fixed at start. */
    size = sizeof(bucket_counter) * retained->first_server_limit;
    rv = apr_shm_create(&retained->counters_shm, size, NULL,
                        s->process->pool);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot create %" APR_SIZE_T_FMT " bytes of "
                     "anonymous shared memory for bucket counters", size);
        return rv;
    }
    retained->counters = apr_shm_baseaddr_get(retained->counters_shm);
    memset(retained->counters, 0, size);
    return APR_SUCCESS;
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

static const bucketed_status *bucketed_get_status(apr_pool_t *p)
{
    bucketed_config *conf = bucketed_get_config(ap_server_conf);
    bucketed_retained *retained = bucketed_get_retained();
    bucketed_status *st = apr_pcalloc(p, sizeof(*st));
    int b, slot;

    st->strategy = bucket_strategy_name(conf->plan.strategy);
    st->reason = conf->plan.reason;
    st->kernel = kernel_features_describe(p, &conf->kernel);
    st->generation = retained->mpm->my_generation;
    st->num_buckets = conf->plan.num_buckets;
    st->buckets = apr_pcalloc(p, sizeof(*st->buckets) * st->num_buckets);
    for (b = 0; b < st->num_buckets; b++) {
        ap_listen_rec *lr;
        const char *addrs = NULL;

        st->buckets[b].sockets = conf->plan.buckets[b].num_sockets;
        for (lr = conf->bucket_listeners[b]; lr; lr = lr->next) {
            const char *a = apr_psprintf(p, "%pI", lr->bind_addr);
            addrs = addrs ? apr_pstrcat(p, addrs, " ", a, NULL) : a;
        }
        st->buckets[b].listen = addrs ? addrs : "";
        st->buckets[b].accepted = apr_atomic_read32(
            &retained->counters[b].accepted);
    }
    /* The scoreboard's bucket field is written by the parent from its own
     * table; here it is only displayed, and checked for range. */
    for (slot = 0; slot < retained->first_server_limit; slot++) {
        process_score *ps = ap_get_scoreboard_process(slot);
        worker_score *ws = ap_get_scoreboard_worker_from_indexes(slot, 0);
        bucketed_bucket_status *bs;

        if (ps->pid == 0 || ps->generation != retained->mpm->my_generation
            || ps->bucket < 0 || ps->bucket >= st->num_buckets
            || ws->status == SERVER_DEAD) {
            continue;
        }
        bs = &st->buckets[ps->bucket];
        bs->children++;
        if (ws->status <= SERVER_READY) {
            bs->idle++;
        }
        else {
            bs->busy++;
        }
    }
    return st;
}

void bucket_stats_register(void)
{
    APR_REGISTER_OPTIONAL_FN(bucketed_get_status);
}
