/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_kernel: what the running kernel offers bucketed, and the pure
 * rules that read it (release parsing, version-derived features, the
 * start-up log line). sys_probe.c fills it in from the live system.
 */
#ifndef POLICY_KERNEL_H
#define POLICY_KERNEL_H

#include "apr_pools.h"

typedef struct {
    int major, minor, patch;    /* from uname(2) release; 0 if unparsable */
    int reuseport;              /* trial setsockopt(SO_REUSEPORT) worked */
    int reuseport_errno;        /* why it did not */
    int epoll_exclusive;        /* trial epoll_ctl(EPOLLEXCLUSIVE) worked */
    int incoming_cpu;           /* SO_INCOMING_CPU settable: 4.4 */
    int reuseport_bpf;          /* BPF steering of TCP reuseport groups: 4.6 */
    int migrate_req;            /* net.ipv4.tcp_migrate_req: 1 on, 0 off,
                                 * -1 absent (before 5.14) */
} kernel_features;

/* "6.1.0-18-amd64" -> 6, 1, 0. Returns 0 on success, -1 if unparsable. */
int kernel_release_parse(const char *release, int *major, int *minor,
                         int *patch);

int kernel_version_at_least(const kernel_features *kf, int major, int minor);

/* Fills the version-derived fields from kf->major/minor. */
void kernel_features_from_version(kernel_features *kf);

/* One line for the start-up log. */
const char *kernel_features_describe(apr_pool_t *p, const kernel_features *kf);

#endif /* POLICY_KERNEL_H */
