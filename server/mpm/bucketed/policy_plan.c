/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_plan.c: how many listener buckets, and which sockets each owns.
 *
 * reuseport: every bucket owns one socket for every Listen address: bucket
 *   0 the originals, bucket k the k-th SO_REUSEPORT duplicate of each. The
 *   kernel spreads each address's connections over the buckets, and a busy
 *   address can be served by every child, whatever bucket it is in.
 * listen: one bucket per Listen address on the original socket (the
 *   fallback without SO_REUSEPORT); capacity follows load between them
 *   through maintenance (policy_maint.c).
 * single: one bucket holding every original socket (stock prefork).
 *
 * Unless BucketCount says otherwise, there are never more buckets than
 * leave every one BUCKET_MIN_CHILDREN of MaxRequestWorkers; addresses
 * beyond that are dealt round robin.
 */
#include "policy_plan.h"

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

bucket_wait_e bucket_wait_mode(int num_sockets, int epoll_exclusive)
{
    if (num_sockets <= 1) {
        return BUCKET_WAIT_ACCEPT;
    }
    return epoll_exclusive ? BUCKET_WAIT_EPOLL : BUCKET_WAIT_MUTEX;
}

/* Unsigned: the count wraps by definition, and the remainder is never
 * negative. */
int bucket_ready_index(unsigned int turn, int i, int n)
{
    return (int)((turn % (unsigned int)n + (unsigned int)i)
                 % (unsigned int)n);
}

/* Most buckets that still leave each BUCKET_MIN_CHILDREN slots. */
static int bucket_cap(int max_workers)
{
    int cap = max_workers / BUCKET_MIN_CHILDREN;

    return cap > 0 ? cap : 1;
}

/* Buckets requested for reuseport: BucketCount wins, then
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
    if (duplicate > 0) {
        plan->num_duplicates++;
    }
}

/* The original sockets dealt round robin over num_buckets buckets. */
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

/* Bucket b owns the b-th copy (0 = the original) of every address. */
static void replicate_listeners(apr_pool_t *p, bucket_plan *plan,
                                int listeners, int num_buckets)
{
    int b, l;

    alloc_buckets(p, plan, num_buckets, listeners);
    for (b = 0; b < num_buckets; b++) {
        for (l = 0; l < listeners; l++) {
            add_socket(plan, b, l, b);
        }
    }
}

static int capped(bucket_plan *plan, int wanted, int cap)
{
    if (wanted > cap) {
        plan->capped = 1;
        return cap;
    }
    return wanted;
}

/* The strategy to run and why; NULL reason means an error in *err. */
static bucket_strategy_e choose_strategy(apr_pool_t *p,
                                         const bucket_plan_input *in,
                                         const char **reason,
                                         const char **err)
{
    *err = NULL;
    if (in->one_process) {
        *reason = "one-process mode (-X): the parent serves every socket";
        return BUCKET_STRATEGY_SINGLE;
    }
    switch (in->strategy) {
    case BUCKET_STRATEGY_AUTO:
        if (in->cores_buckets_ratio == 0 && in->bucket_count == 0) {
            *reason = "ListenCoresBucketsRatio 0: no SO_REUSEPORT "
                      "duplicates, one bucket per Listen";
            return BUCKET_STRATEGY_LISTEN;
        }
        if (in->have_reuseport) {
            *reason = "BucketStrategy auto: the kernel supports SO_REUSEPORT";
            return BUCKET_STRATEGY_REUSEPORT;
        }
        *reason = "BucketStrategy auto: the kernel lacks SO_REUSEPORT, "
                  "one bucket per Listen";
        return BUCKET_STRATEGY_LISTEN;
    case BUCKET_STRATEGY_REUSEPORT:
        if (!in->have_reuseport) {
            *err = "BucketStrategy reuseport: this kernel does not support "
                   "SO_REUSEPORT (Linux 3.9 or later needed); use "
                   "BucketStrategy auto or listen";
        }
        break;
    default:
        break;
    }
    *reason = apr_psprintf(p, "BucketStrategy %s configured",
                           bucket_strategy_name(in->strategy));
    return in->strategy;
}

/* BucketCount above the children there can be, in the words of the
 * directives that make that number. */
static const char *too_many_buckets(apr_pool_t *p,
                                    const bucket_plan_input *in)
{
    const char *limit, *fix;

    if (in->threads_per_child > 0) {
        limit = apr_psprintf(p, "ChildModel event with MaxRequestWorkers %d "
                             "and ThreadsPerChild %d",
                             in->max_workers * in->threads_per_child,
                             in->threads_per_child);
        fix = "raise MaxRequestWorkers or lower ThreadsPerChild";
    }
    else {
        limit = apr_psprintf(p, "MaxRequestWorkers %d", in->max_workers);
        fix = "or raise MaxRequestWorkers";
    }
    return apr_psprintf(p, "BucketCount %d needs %d children, one per "
                        "bucket; %s runs at most %d children: use "
                        "BucketCount 1 to %d, %s", in->bucket_count,
                        in->bucket_count, limit, in->max_workers,
                        in->max_workers, fix);
}

const char *bucket_plan_make(apr_pool_t *p, const bucket_plan_input *in,
                             bucket_plan *plan)
{
    int listeners = in->num_listeners;
    int cap = bucket_cap(in->max_workers);
    const char *err;

    plan->num_buckets = 0;
    plan->buckets = NULL;
    plan->max_sockets_per_bucket = 0;
    plan->num_duplicates = 0;
    plan->capped = 0;

    if (listeners < 1) {
        return "no listening sockets configured (add a Listen directive)";
    }
    if (in->max_workers < 1) {
        return apr_psprintf(p, "MaxRequestWorkers must be at least 1, not %d",
                            in->max_workers);
    }
    if (in->bucket_count > in->max_workers) {
        return too_many_buckets(p, in);
    }
    plan->strategy = choose_strategy(p, in, &plan->reason, &err);
    if (err != NULL) {
        return err;
    }

    switch (plan->strategy) {
    case BUCKET_STRATEGY_SINGLE:
        deal_listeners(p, plan, listeners, 1);
        break;
    case BUCKET_STRATEGY_LISTEN:
        deal_listeners(p, plan, listeners, capped(plan, listeners, cap));
        break;
    default:
        /* An explicit BucketCount is the operator's to size. */
        replicate_listeners(p, plan, listeners,
                            in->bucket_count > 0
                                ? in->bucket_count
                                : capped(plan, requested_buckets(in), cap));
        break;
    }
    return NULL;
}

static const char *describe_sockets(apr_pool_t *p, const bucket_plan *plan,
                                    int num_listeners)
{
    switch (plan->strategy) {
    case BUCKET_STRATEGY_REUSEPORT:
        return apr_psprintf(p, "each with its own socket for each of the %d "
                            "Listen address(es) (%d sockets, %d of them "
                            "SO_REUSEPORT duplicates)", num_listeners,
                            plan->num_buckets * num_listeners,
                            plan->num_duplicates);
    case BUCKET_STRATEGY_LISTEN:
        if (plan->num_buckets == num_listeners) {
            return "one per Listen address, on that address's socket";
        }
        return apr_psprintf(p, "the %d Listen addresses dealt over them, up "
                            "to %d sockets per bucket", num_listeners,
                            plan->max_sockets_per_bucket);
    default:
        return apr_psprintf(p, "on the sockets of all %d Listen "
                            "address(es)", num_listeners);
    }
}

static const char *describe_wait(const bucket_plan *plan, int epoll_exclusive,
                                 int workers_in_epoll)
{
    if (workers_in_epoll) {
        return epoll_exclusive
               ? "each child's worker threads wait on their bucket's "
                 "sockets in the child's epoll set (EPOLLEXCLUSIVE, no "
                 "accept lock)"
               : "each child's worker threads wait on their bucket's "
                 "sockets in the child's epoll set (the kernel lacks "
                 "EPOLLEXCLUSIVE: every child of the bucket wakes)";
    }
    switch (bucket_wait_mode(plan->max_sockets_per_bucket, epoll_exclusive)) {
    case BUCKET_WAIT_ACCEPT:
        return "children block in accept()";
    case BUCKET_WAIT_EPOLL:
        return "children wait on their bucket's sockets with epoll "
               "(EPOLLEXCLUSIVE, no accept lock)";
    default:
        return "children poll their bucket's sockets under a per-bucket "
               "accept mutex (the kernel lacks EPOLLEXCLUSIVE)";
    }
}

const char *bucket_plan_describe(apr_pool_t *p, const bucket_plan *plan,
                                 int num_listeners, int max_workers,
                                 int epoll_exclusive, int workers_in_epoll)
{
    return apr_psprintf(p, "strategy %s (%s): %d bucket(s)%s, %s; %s; %s",
        bucket_strategy_name(plan->strategy), plan->reason,
        plan->num_buckets,
        plan->capped
            ? apr_psprintf(p, " (no more, so that each can have %d of "
                           "MaxRequestWorkers %d)", BUCKET_MIN_CHILDREN,
                           max_workers)
            : "",
        describe_sockets(p, plan, num_listeners),
        describe_wait(plan, epoll_exclusive, workers_in_epoll),
        plan->num_buckets > 1
            ? apr_psprintf(p, "children move between buckets as load "
                           "shifts, %d in all at most (MaxRequestWorkers)",
                           max_workers)
            : apr_psprintf(p, "up to %d children (MaxRequestWorkers)",
                           max_workers));
}

static int has_listener(const bucket_def *def, int listener)
{
    int k;

    for (k = 0; k < def->num_sockets; k++) {
        if (def->sockets[k].listener == listener) {
            return 1;
        }
    }
    return 0;
}

int bucket_plan_covers(const bucket_plan *plan, int to, int from)
{
    const bucket_def *src = &plan->buckets[from];
    int k;

    for (k = 0; k < src->num_sockets; k++) {
        if (!has_listener(&plan->buckets[to], src->sockets[k].listener)) {
            return 0;
        }
    }
    return 1;
}
