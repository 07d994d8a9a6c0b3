/*
 * bucket_plan.c: how many listener buckets, and which sockets each owns.
 *
 * reuseport: every bucket owns exactly one socket while there are at least
 *   as many buckets as Listen addresses; the buckets are shared out over the
 *   addresses, and all but the first bucket of an address get an
 *   SO_REUSEPORT duplicate of its socket. Only when fewer children may run
 *   than there are addresses does a bucket hold several sockets.
 * listen: one bucket per Listen address, each on the original socket.
 * single: one bucket holding every original socket (stock prefork).
 */
#include "bucket_plan.h"

#include "apr_strings.h"

const char *bucket_strategy_name(bucket_strategy_e strategy)
{
    switch (strategy) {
    case BUCKET_STRATEGY_REUSEPORT: return "reuseport";
    case BUCKET_STRATEGY_LISTEN:    return "listen";
    case BUCKET_STRATEGY_SINGLE:    return "single";
    default:                        return "auto";
    }
}

int bucket_of_slot(int slot, int num_buckets)
{
    return num_buckets > 0 ? slot % num_buckets : 0;
}

int bucket_share(int total, int bucket, int num_buckets)
{
    if (num_buckets <= 0) {
        return total;
    }
    return total / num_buckets + (bucket < total % num_buckets ? 1 : 0);
}

/* Buckets requested for reuseport before capping: BucketCount wins, then
 * ListenCoresBucketsRatio as stock httpd reads it, then one per CPU. */
static int requested_buckets(const bucket_plan_input *in)
{
    int cpus = in->online_cpus > 0 ? in->online_cpus : 1;

    if (in->bucket_count > 0) {
        return in->bucket_count;
    }
    if (in->cores_buckets_ratio > 0) {
        int n = cpus / in->cores_buckets_ratio;
        return n > 0 ? n : 1;
    }
    return cpus;
}

static void alloc_buckets(apr_pool_t *p, bucket_plan *plan, int num_buckets,
                          int sockets_each)
{
    int b;

    plan->num_buckets = num_buckets;
    plan->buckets = apr_pcalloc(p, sizeof(bucket_def) * num_buckets);
    for (b = 0; b < num_buckets; b++) {
        plan->buckets[b].sockets = apr_pcalloc(p, sizeof(bucket_socket)
                                                  * sockets_each);
    }
}

static void add_socket(bucket_plan *plan, int bucket, int listener,
                       int duplicate)
{
    bucket_def *def = &plan->buckets[bucket];

    def->sockets[def->num_sockets].listener = listener;
    def->sockets[def->num_sockets].duplicate = duplicate;
    def->num_sockets++;
    if (def->num_sockets > plan->max_sockets_per_bucket) {
        plan->max_sockets_per_bucket = def->num_sockets;
    }
}

/* More listeners than buckets: deal the original sockets round robin. */
static void deal_listeners(apr_pool_t *p, bucket_plan *plan, int listeners,
                           int num_buckets)
{
    int l;

    alloc_buckets(p, plan, num_buckets,
                  (listeners + num_buckets - 1) / num_buckets);
    for (l = 0; l < listeners; l++) {
        add_socket(plan, l % num_buckets, l, 0);
    }
}

/* At least as many buckets as listeners: one socket per bucket. Listener l
 * gets bucket_share(num_buckets, l, listeners) buckets, laid out in order so
 * that its buckets are contiguous. */
static void spread_listeners(apr_pool_t *p, bucket_plan *plan, int listeners,
                             int num_buckets)
{
    int l, k, bucket = 0;

    alloc_buckets(p, plan, num_buckets, 1);
    for (l = 0; l < listeners; l++) {
        int share = bucket_share(num_buckets, l, listeners);
        for (k = 0; k < share; k++) {
            add_socket(plan, bucket++, l, k);
        }
    }
}

const char *bucket_plan_make(apr_pool_t *p, const bucket_plan_input *in,
                             bucket_plan *plan)
{
    bucket_strategy_e strategy = in->strategy;
    int listeners = in->num_listeners;
    int max_buckets = in->max_workers;
    int wanted;

    plan->num_buckets = 0;
    plan->buckets = NULL;
    plan->max_sockets_per_bucket = 0;

    if (listeners < 1) {
        return "no listening sockets configured (add a Listen directive)";
    }
    if (max_buckets < 1) {
        return apr_psprintf(p, "MaxRequestWorkers must be at least 1, not %d",
                            max_buckets);
    }
    if (in->bucket_count > max_buckets) {
        return apr_psprintf(p, "BucketCount %d exceeds MaxRequestWorkers %d: "
                            "every bucket needs a child; use 1 to %d",
                            in->bucket_count, max_buckets, max_buckets);
    }

    if (strategy == BUCKET_STRATEGY_AUTO) {
        strategy = in->have_reuseport ? BUCKET_STRATEGY_REUSEPORT
                                      : BUCKET_STRATEGY_LISTEN;
        plan->reason = in->have_reuseport
            ? "BucketStrategy auto: the kernel supports SO_REUSEPORT"
            : "BucketStrategy auto: the kernel lacks SO_REUSEPORT, "
              "one bucket per Listen";
    }
    else if (strategy == BUCKET_STRATEGY_REUSEPORT && !in->have_reuseport) {
        return "BucketStrategy reuseport: this kernel does not support "
               "SO_REUSEPORT (Linux 3.9 or later needed); use "
               "BucketStrategy auto or listen";
    }
    else {
        plan->reason = apr_psprintf(p, "BucketStrategy %s configured",
                                    bucket_strategy_name(strategy));
    }
    plan->strategy = strategy;

    switch (strategy) {
    case BUCKET_STRATEGY_SINGLE:
        deal_listeners(p, plan, listeners, 1);
        break;
    case BUCKET_STRATEGY_LISTEN:
        if (listeners > max_buckets) {
            deal_listeners(p, plan, listeners, max_buckets);
        }
        else {
            spread_listeners(p, plan, listeners, listeners);
        }
        break;
    default:
        wanted = requested_buckets(in);
        if (wanted < listeners) {
            wanted = listeners;
        }
        if (wanted > max_buckets) {
            wanted = max_buckets;
        }
        if (wanted < listeners) {
            deal_listeners(p, plan, listeners, wanted);
        }
        else {
            spread_listeners(p, plan, listeners, wanted);
        }
        break;
    }
    return NULL;
}
