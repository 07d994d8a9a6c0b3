/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucketed_status.h: the bucketed MPM's view of its buckets, offered to
 * other modules (mod_bucketed_status) as an optional function, so that
 * they need no link-time tie to the MPM. Every report (mod_status's
 * section, the Prometheus metrics, the bucketed-status text) is drawn
 * from one call of it.
 */
#ifndef BUCKETED_STATUS_H
#define BUCKETED_STATUS_H

#include "apr_optional.h"
#include "apr_pools.h"
#include "apr_time.h"

/* One listening socket of a bucket, as the parent last sampled it. */
typedef struct {
    int bucket;
    const char *listen;          /* its address, e.g. 127.0.0.1:80 */
    int sampled;                 /* 0 until the parent's first sample */
    apr_uint32_t queue_depth;    /* connections waiting for accept() */
    apr_uint32_t backlog;        /* the accept queue's limit */
    apr_uint32_t max_queue_depth;  /* highest depth sampled in this
                                    * generation (once a second: peaks
                                    * between samples go unseen) */
    int has_drops;               /* drops is known: the kernel counts
                                  * them (4.6+) and the socket does not
                                  * defer accept */
    apr_uint32_t drops;          /* packets the kernel dropped on this
                                  * socket since it was opened (SYNs and
                                  * handshake ACKs an overflowing queue
                                  * refused, retransmissions included) */
    int defer_accept;            /* TCP_DEFER_ACCEPT (AcceptFilter data):
                                  * the kernel counts every connection's
                                  * handshake ACK as a drop, so drops are
                                  * not reported */
    int inherited;               /* passed in by the service manager
                                  * (socket activation), not bound by
                                  * the server */
} bucketed_socket_status;

typedef struct {
    int sockets;                 /* listening sockets the bucket owns */
    int draining;                /* of those, sockets a restart dropped
                                  * from the plan, drained into it */
    const char *listen;          /* their addresses, space separated */
    int children;                /* live children of the current
                                  * generation, from the parent's census */
    int idle;                    /* idle / busy children; under ChildModel
                                  * event, worker threads */
    int busy;
    apr_uint32_t accepted;       /* connections accepted since the last
                                  * (re)start */
    apr_uint32_t reclaimed;      /* idle keep-alive connections its
                                  * children closed to admit new ones (at
                                  * an event child's connection limit, at
                                  * MaxRequestWorkers under the prefork
                                  * model), since the last (re)start */
    apr_uint32_t lingered;       /* ChildModel event: connections whose
                                  * lingering close waited in the
                                  * keeper thread for the client to
                                  * close, since the last (re)start */
    bucketed_socket_status *socket;  /* `sockets` entries */
} bucketed_bucket_status;

typedef struct {
    const char *strategy;        /* reuseport, listen or single */
    const char *reason;
    const char *steering;        /* how connections reach a bucket */
    const char *migration;       /* what a restart that drops a socket
                                  * does with its queue: migrate, sysctl,
                                  * drain or none */
    const char *kernel;          /* kernel_features_describe() */
    int generation;
    int num_buckets;
    bucketed_bucket_status *buckets;
    apr_time_t census_at;        /* the parent's last census; 0 = none yet
                                  * (or -X, where there is no parent) */
    apr_time_t sampled_at;       /* its last accept-queue sample; 0 = none */
} bucketed_status;

APR_DECLARE_OPTIONAL_FN(const bucketed_status *, bucketed_get_status,
                        (apr_pool_t *p));

#endif /* BUCKETED_STATUS_H */
