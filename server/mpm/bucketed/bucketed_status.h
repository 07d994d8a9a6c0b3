/*
 * bucketed_status.h: the bucketed MPM's view of its buckets, offered to
 * other modules (mod_bucketed_status) as an optional function, so that
 * they need no link-time tie to the MPM.
 */
#ifndef BUCKETED_STATUS_H
#define BUCKETED_STATUS_H

#include "apr_optional.h"
#include "apr_pools.h"

typedef struct {
    int sockets;                 /* listening sockets the bucket owns */
    const char *listen;          /* their addresses, space separated */
    int children;                /* live children of the current generation */
    int idle;
    int busy;
    apr_uint32_t accepted;       /* connections accepted since the last
                                  * (re)start */
} bucketed_bucket_status;

typedef struct {
    const char *strategy;        /* reuseport, listen or single */
    const char *reason;
    const char *kernel;          /* kernel_features_describe() */
    int generation;
    int num_buckets;
    bucketed_bucket_status *buckets;
} bucketed_status;

APR_DECLARE_OPTIONAL_FN(const bucketed_status *, bucketed_get_status,
                        (apr_pool_t *p));

#endif /* BUCKETED_STATUS_H */
