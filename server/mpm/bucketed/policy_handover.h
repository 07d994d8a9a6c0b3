/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_handover: at a graceful restart, which old children that hold no
 * connection keep accepting until the new generation's children of their
 * bucket are ready. Were they all to leave at once, a bucket would accept
 * nothing between their exit and the first new child's set-up; with every
 * slot taken (StartServers = MaxRequestWorkers = ServerLimit, prefork
 * model) a thousand exits and forks on two cores left that gap at 0.4-0.9
 * s under load, and past a client's 2 s timeout in a busy run. Half of
 * them make room at once; the other half serve, with the old
 * configuration, until as many new children of the bucket are ready, or
 * HANDOVER_MAX_WAIT has passed. Pure.
 */
#ifndef POLICY_HANDOVER_H
#define POLICY_HANDOVER_H

#include "apr_time.h"

/* The longest old children serve after a graceful restart while new ones
 * start: new children that cannot start must not keep the old
 * configuration serving. */
#define HANDOVER_MAX_WAIT apr_time_from_sec(5)

/* Whether an old child that holds no connection stays: a prefork-model
 * child that serves bucket `serving` of the old plan, which the new one
 * still has (serving < num_buckets), its bucket's nth such child (from
 * 0); every second one stays. Not in the event model: its new children
 * start in ServerLimit's free slots beside the old ones (Debian's
 * configuration leaves ten), and under load steering a bucket may be
 * left without a child while kept ones wait for it (a plan change's
 * socket then never listened again in test_migration). */
int handover_keeps(int prefork_model, int serving, int num_buckets,
                   int nth_of_bucket);

/* Whether a bucket's kept old children leave now: once `ready` of its new
 * children have finished their set-up, as many as it kept, so that its
 * accepting children never drop below what stayed; or at the deadline. */
int handover_releases(int kept, int ready, apr_time_t now,
                      apr_time_t deadline);

#endif /* POLICY_HANDOVER_H */
