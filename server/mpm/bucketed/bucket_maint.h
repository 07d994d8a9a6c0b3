/*
 * bucket_maint: per-bucket idle maintenance, the decision half of prefork's
 * once-a-second pass. Pure: the parent counts, this decides, the parent acts.
 */
#ifndef BUCKET_MAINT_H
#define BUCKET_MAINT_H

/* Largest number of children one bucket spawns in one pass (prefork's cap). */
#define BUCKET_MAX_SPAWN_RATE 32

typedef struct {
    int idle;         /* children ready to accept (or starting) */
    int busy;         /* children serving a connection */
    int free_slots;   /* slots of this bucket with no live child */
} bucket_census;

typedef struct {
    int min_spare;    /* this bucket's share of MinSpareServers, >= 1 */
    int max_spare;    /* this bucket's share of MaxSpareServers, > min_spare */
} bucket_spare_limits;

typedef struct {
    int spawn;        /* children to start now */
    int stop;         /* idle children to ask to exit now (0 or 1) */
    int next_spawn_rate;
    int at_capacity;  /* wanted more children but had no free slot */
} bucket_decision;

/* Share MinSpare/MaxSpareServers out over buckets, keeping every bucket at
 * least one idle child and max above min. */
bucket_spare_limits bucket_spare_share(int min_spare, int max_spare,
                                       int bucket, int num_buckets);

/* One bucket's decision for this pass. spawn_rate starts at 1 and doubles
 * while the bucket stays short of idle children, up to
 * BUCKET_MAX_SPAWN_RATE. */
bucket_decision bucket_maint_decide(const bucket_census *census,
                                    const bucket_spare_limits *limits,
                                    int spawn_rate);

#endif /* BUCKET_MAINT_H */
