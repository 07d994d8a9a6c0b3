/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_probe: fills kernel_features from the live system. SO_REUSEPORT
 * and EPOLLEXCLUSIVE are tried on throwaway descriptors (the only
 * trustworthy test: a backported or emulated kernel may differ from its
 * version); the rest comes from uname(2) and /proc.
 */
#ifndef SYS_PROBE_H
#define SYS_PROBE_H

#include "policy_kernel.h"

/* Tries SO_REUSEPORT on a throwaway TCP socket; 1 if it works, else 0 with
 * *err set to errno. */
int kernel_probe_reuseport(int *err);

/* Whether epoll knows EPOLLEXCLUSIVE (Linux 4.5): older kernels accept the
 * flag and ignore it, so the test is that modifying an exclusive entry is
 * refused. 1 if so, else 0 with *err set. */
int kernel_probe_epoll_exclusive(int *err);

/* Everything: uname, the trial descriptors, tcp_migrate_req. */
void kernel_probe(kernel_features *kf);

#endif /* SYS_PROBE_H */
