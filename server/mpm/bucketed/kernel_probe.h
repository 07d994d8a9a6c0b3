/*
 * kernel_probe: what the running kernel offers bucketed. The SO_REUSEPORT
 * answer comes from a trial socket (the only trustworthy test: a backported
 * or emulated kernel may differ from its version); the rest is read from
 * the release string and /proc, for the start-up log.
 */
#ifndef KERNEL_PROBE_H
#define KERNEL_PROBE_H

#include "apr_pools.h"

typedef struct {
    int major, minor, patch;    /* from uname(2) release; 0 if unparsable */
    int reuseport;              /* trial setsockopt(SO_REUSEPORT) worked */
    int reuseport_errno;        /* why it did not */
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

/* Tries SO_REUSEPORT on a throwaway TCP socket; 1 if it works, else 0 with
 * *err set to errno. */
int kernel_probe_reuseport(int *err);

/* Everything: uname, the trial socket, /proc/sys/net/ipv4/tcp_migrate_req. */
void kernel_probe(kernel_features *kf);

/* One line for the start-up log. */
const char *kernel_features_describe(apr_pool_t *p, const kernel_features *kf);

#endif /* KERNEL_PROBE_H */
