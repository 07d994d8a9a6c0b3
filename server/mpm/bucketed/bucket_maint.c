/*
 * bucket_maint.c: prefork's idle-server maintenance, one bucket at a time.
 * Counting idle children per bucket (not globally) is the point: a bucket
 * whose children are all busy gets new ones even while another bucket
 * idles, because the kernel keeps hashing connections to its socket.
 */
#include "bucket_maint.h"

bucket_spare_limits bucket_spare_share(int min_spare, int max_spare,
                                       int bucket, int num_buckets)
{
    bucket_spare_limits limits;

    if (num_buckets < 1) {
        num_buckets = 1;
    }
    limits.min_spare = min_spare / num_buckets
                       + (bucket < min_spare % num_buckets ? 1 : 0);
    limits.max_spare = max_spare / num_buckets
                       + (bucket < max_spare % num_buckets ? 1 : 0);
    if (limits.min_spare < 1) {
        limits.min_spare = 1;
    }
    if (limits.max_spare <= limits.min_spare) {
        limits.max_spare = limits.min_spare + 1;
    }
    return limits;
}

bucket_decision bucket_maint_decide(const bucket_census *census,
                                    const bucket_spare_limits *limits,
                                    int spawn_rate)
{
    bucket_decision d = { 0, 0, 1, 0 };

    if (spawn_rate < 1) {
        spawn_rate = 1;
    }
    if (spawn_rate > BUCKET_MAX_SPAWN_RATE) {
        spawn_rate = BUCKET_MAX_SPAWN_RATE;
    }
    if (census->idle > limits->max_spare) {
        /* One at a time, as prefork: a burst may be about to need them. */
        d.stop = 1;
        return d;
    }
    if (census->idle >= limits->min_spare) {
        return d;
    }
    if (census->free_slots == 0) {
        d.at_capacity = 1;
        return d;
    }
    d.spawn = spawn_rate;
    if (d.spawn > census->free_slots) {
        d.spawn = census->free_slots;
    }
    d.next_spawn_rate = spawn_rate * 2;
    if (d.next_spawn_rate > BUCKET_MAX_SPAWN_RATE) {
        d.next_spawn_rate = BUCKET_MAX_SPAWN_RATE;
    }
    return d;
}
