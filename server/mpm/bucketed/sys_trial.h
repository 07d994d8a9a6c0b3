/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_trial.h: the trials that show, at start-up, what this kernel does
 * with a reuseport group (sys_trial.c), and the choice made from them.
 */
#ifndef SYS_TRIAL_H
#define SYS_TRIAL_H

#include "apr_pools.h"

#include "policy_steering.h"

/* Connections waiting in a listener's accept queue (TCP_INFO reports them
 * as tcpi_unacked for a listening socket); -1 on error. */
int reuseport_bpf_queued(int listener);

/* Two listeners of one group on 127.0.0.1, connections queued on the
 * first, the second added, the first closed: how many the second then
 * holds. With use_program, the migration program is attached first. */
void reuseport_bpf_migration_trial(migration_trial *t, int use_program);

/* Whether a group can drain a socket: two listeners of one group, a
 * socket map holding only the second, the hash program attached,
 * connections made. queued = connections made, moved = how many the
 * second then held (all of them, with none on the first, when the kernel
 * steers by the map). */
void reuseport_bpf_drain_trial(migration_trial *t);

/* Whether a steering mode (STEERING_CPU or STEERING_LOAD) works: a trial
 * group of two listeners, a socket map holding both, the program loaded
 * and attached. 0, or the errno of the step named in *step. */
int reuseport_bpf_steering_trial(steering_e mode, const char **step);

/* Runs the trials the choice needs and chooses. reuseport: SO_REUSEPORT
 * works; sysctl: net.ipv4.tcp_migrate_req (-1 absent). */
migration_choice reuseport_bpf_choose_migration(apr_pool_t *p, int reuseport,
                                                int sysctl);

#endif /* SYS_TRIAL_H */
