/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_kernel.c: reading kernel versions and describing what the probe
 * found. Pure: no system calls.
 */
#include "policy_kernel.h"

#include <stdlib.h>
#include <string.h>

#include "apr_strings.h"

int kernel_release_parse(const char *release, int *major, int *minor,
                         int *patch)
{
    int parts[3] = { 0, 0, 0 };
    const char *c = release;
    int i;

    for (i = 0; i < 3; i++) {
        char *end;
        long v;

        if (*c < '0' || *c > '9') {
            if (i < 2) {
                return -1;
            }
            break;
        }
        v = strtol(c, &end, 10);
        if (v < 0 || v > 100000) {
            return -1;
        }
        parts[i] = (int)v;
        c = end;
        if (*c != '.') {
            if (i < 1) {
                return -1;
            }
            break;
        }
        c++;
    }
    *major = parts[0];
    *minor = parts[1];
    *patch = parts[2];
    return 0;
}

int kernel_version_at_least(const kernel_features *kf, int major, int minor)
{
    return kf->major > major || (kf->major == major && kf->minor >= minor);
}

void kernel_features_from_version(kernel_features *kf)
{
    kf->incoming_cpu = kernel_version_at_least(kf, 4, 4);
    kf->reuseport_bpf = kernel_version_at_least(kf, 4, 6);
}

const char *kernel_features_describe(apr_pool_t *p, const kernel_features *kf)
{
    return apr_psprintf(p, "kernel %d.%d.%d: SO_REUSEPORT %s, "
                        "EPOLLEXCLUSIVE %s, SO_INCOMING_CPU %s, "
                        "reuseport BPF %s, tcp_migrate_req %s",
                        kf->major, kf->minor, kf->patch,
                        kf->reuseport ? "yes"
                            : apr_psprintf(p, "no (%s)",
                                           strerror(kf->reuseport_errno)),
                        kf->epoll_exclusive ? "yes" : "no",
                        kf->incoming_cpu ? "yes" : "no",
                        kf->reuseport_bpf ? "yes" : "no",
                        kf->migrate_req < 0 ? "absent"
                            : kf->migrate_req ? "on" : "off");
}
