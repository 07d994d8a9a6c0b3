/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_report.c: the bucket report behind mod_bucketed_status (its
 * mod_status section, its Prometheus metrics and its text page), offered
 * as the optional function bucketed_get_status. It runs in the child that
 * serves the request and only reads: the plan and socket addresses from
 * this generation's configuration, accept counts from the shared counters,
 * children and accept queues from what the parent published
 * (stats_counters.c). It never counts anything itself.
 */
#include "stats.h"

#include "apr_atomic.h"
#include "apr_strings.h"

#include "httpd.h"
#include "http_main.h"

#include "bucketed.h"
#include "bucketed_status.h"
#include "listen_activation.h"

/* How a new connection reaches one bucket rather than another. */
static const char *steering_of(apr_pool_t *p, const bucketed_config *conf,
                               const bucket_generation *gen)
{
    switch (conf->plan.strategy) {
    case BUCKET_STRATEGY_REUSEPORT:
        /* the 4-tuple's hash over the group, the receiving CPU, or the
         * bucket's idle children (BucketSteering), as far as the
         * programs took */
        return gen != NULL ? steering_in_force(p, conf->steering.mode,
                                               &gen->steering)
                           : steering_name(conf->steering.mode);
    case BUCKET_STRATEGY_LISTEN:
        return "address";   /* the address the client connected to */
    default:
        return "none";      /* one bucket */
    }
}

static void read_socket(bucketed_socket_status *ss, published_socket *pub)
{
    ss->sampled = apr_atomic_read32(&pub->sampled) != 0;
    ss->queue_depth = apr_atomic_read32(&pub->depth);
    ss->backlog = apr_atomic_read32(&pub->backlog);
    ss->max_queue_depth = apr_atomic_read32(&pub->max_depth);
    ss->has_drops = apr_atomic_read32(&pub->has_drops) != 0;
    ss->drops = apr_atomic_read32(&pub->drops);
    ss->defer_accept = apr_atomic_read32(&pub->defer_accept) != 0;
}

static void read_bucket(apr_pool_t *p, const bucketed_config *conf,
                        const bucketed_retained *retained, int b,
                        int *next_socket, bucketed_bucket_status *bs)
{
    const bucket_generation *gen = retained->generation;
    const bucket_rec *bk = &gen->buckets[b];
    const ap_listen_rec *lr;
    const char *addrs = NULL;
    int k = 0;

    for (lr = bk->listeners; lr; lr = lr->next) {
        bs->sockets++;
    }
    /* Sockets being drained follow the planned ones in the list. */
    bs->draining = bs->sockets - conf->plan.buckets[b].num_sockets;
    bs->socket = apr_pcalloc(p, sizeof(*bs->socket) * (bs->sockets + 1));
    for (lr = bk->listeners; lr; lr = lr->next, k++) {
        bucketed_socket_status *ss = &bs->socket[k];
        int i = (*next_socket)++;

        ss->bucket = b;
        ss->listen = apr_psprintf(p, "%pI", lr->bind_addr);
        /* Sockets being drained are duplicates, never passed in. */
        ss->inherited = k < conf->plan.buckets[b].num_sockets
                        && conf->plan.buckets[b].sockets[k].duplicate == 0
                        && listen_activation_serves(lr->bind_addr);
        addrs = addrs ? apr_pstrcat(p, addrs, " ", ss->listen, NULL)
                      : ss->listen;
        if (gen->sockets != NULL && i < gen->num_sockets) {
            read_socket(ss, &gen->sockets[i]);
        }
    }
    bs->listen = addrs ? addrs : "";
    bs->accepted = bucket_stats_accepted(retained, b);
    bs->reclaimed = bucket_stats_reclaimed(retained, b);
    bs->lingered = bucket_stats_lingered(retained, b);
    if (bk->published != NULL) {
        bs->idle = (int)apr_atomic_read32(&bk->published->idle);
        bs->busy = (int)apr_atomic_read32(&bk->published->busy);
        /* The census counts units: children, or under ChildModel event
         * worker threads, ThreadsPerChild to a child. */
        bs->children = (bs->idle + bs->busy)
                       / (conf->threads.threads_per_child > 0
                          ? conf->threads.threads_per_child : 1);
    }
}

static const bucketed_status *bucketed_get_status(apr_pool_t *p)
{
    const bucketed_config *conf = bucketed_get_config(ap_server_conf);
    const bucketed_retained *retained = bucketed_get_retained();
    const bucket_generation *gen = retained->generation;
    bucketed_status *st = apr_pcalloc(p, sizeof(*st));
    int b, next_socket = 0;

    st->strategy = bucket_strategy_name(conf->plan.strategy);
    st->reason = conf->plan.reason;
    st->steering = steering_of(p, conf, gen);
    st->migration = migration_name(conf->migration.mechanism);
    st->kernel = kernel_features_describe(p, &conf->kernel);
    st->generation = retained->mpm->my_generation;
    st->num_buckets = gen != NULL && gen->buckets != NULL ? gen->num_buckets
                                                          : 0;
    st->buckets = apr_pcalloc(p, sizeof(*st->buckets) * st->num_buckets);
    for (b = 0; b < st->num_buckets; b++) {
        read_bucket(p, conf, retained, b, &next_socket, &st->buckets[b]);
    }
    if (gen != NULL && gen->times != NULL) {
        st->census_at = gen->times->census_at;
        st->sampled_at = gen->times->sampled_at;
    }
    return st;
}

void bucket_report_register(void)
{
    APR_REGISTER_OPTIONAL_FN(bucketed_get_status);
}
