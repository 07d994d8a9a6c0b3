/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_affinity.c: see policy_affinity.h.
 */
#include "policy_affinity.h"

#include <strings.h>

#include "apr_strings.h"

const char *affinity_name(affinity_e setting)
{
    switch (setting) {
    case AFFINITY_ON:
        return "on";
    case AFFINITY_OFF:
        return "off";
    case AFFINITY_AUTO:
    default:
        return "auto";
    }
}

const char *affinity_parse(apr_pool_t *p, const char *directive,
                           const char *arg, affinity_e *out)
{
    static const affinity_e all[] = { AFFINITY_AUTO, AFFINITY_ON,
                                      AFFINITY_OFF };
    apr_size_t i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcasecmp(arg, affinity_name(all[i])) == 0) {
            *out = all[i];
            return NULL;
        }
    }
    return apr_psprintf(p, "%s must be one of auto, on, off, not '%s'",
                        directive, arg);
}

affinity_choice affinity_choose(affinity_e requested, child_model_e model,
                                steering_e steering)
{
    affinity_choice c = { 0, NULL };

    if (requested == AFFINITY_ON) {
        c.kept = 1;
        c.reason = "each bucket's children kept on its CPUs (BucketAffinity "
                   "on)";
    }
    else if (requested == AFFINITY_OFF) {
        c.reason = "none (BucketAffinity off): children run where the "
                   "scheduler puts them";
    }
    else if (steering == STEERING_CPU) {
        c.kept = 1;
        c.reason = "each bucket's children kept on the CPUs whose "
                   "connections it gets (BucketAffinity auto, BucketSteering "
                   "cpu)";
    }
    else if (steering == STEERING_LOAD && model == CHILD_MODEL_EVENT) {
        c.kept = 1;
        c.reason = "each bucket's children kept on its CPUs (BucketAffinity "
                   "auto: the event model under load steering, which gives "
                   "a busy bucket fewer connections; its threads do not "
                   "move between CPUs)";
    }
    else if (steering == STEERING_LOAD) {
        c.reason = "none (BucketAffinity auto: the prefork model's children "
                   "run where the scheduler puts them)";
    }
    else {
        c.reason = "none (BucketAffinity auto: the kernel's hash gives a "
                   "busy bucket as many connections as the others, so its "
                   "children may use every CPU)";
    }
    return c;
}

int affinity_bucket_cpus(const int *allowed, int n_allowed,
                         steering_e steering, int bucket, int num_buckets,
                         int *cpus)
{
    int i, n = 0;

    if (n_allowed <= 0 || num_buckets <= 0 || bucket < 0
        || bucket >= num_buckets) {
        return 0;
    }
    if (steering == STEERING_CPU) {
        for (i = 0; i < n_allowed; i++) {
            if (allowed[i] % num_buckets == bucket) {
                cpus[n++] = allowed[i];
            }
        }
        if (n > 0) {
            return n;
        }
    }
    if (n_allowed < num_buckets) {
        cpus[0] = allowed[bucket % n_allowed];
        return 1;
    }
    for (i = bucket; i < n_allowed; i += num_buckets) {
        cpus[n++] = allowed[i];
    }
    return n;
}

const char *affinity_cpu_list(apr_pool_t *p, const int *cpus, int n)
{
    const char *list = "";
    int i;

    for (i = 0; i < n; i++) {
        list = apr_psprintf(p, "%s%s%d", list, i ? "," : "", cpus[i]);
    }
    return list;
}
