/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_handover.c: see policy_handover.h.
 */
#include "policy_handover.h"

int handover_keeps(int prefork_model, int serving, int num_buckets,
                   int nth_of_bucket)
{
    return prefork_model && serving >= 0 && serving < num_buckets
           && nth_of_bucket % 2 == 1;
}

int handover_releases(int kept, int ready, apr_time_t now,
                      apr_time_t deadline)
{
    return kept > 0 && (ready >= kept || now >= deadline);
}
