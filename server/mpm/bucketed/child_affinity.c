/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_affinity.c: see child_affinity.h. The CPUs the server may use are
 * the parent's affinity as the service manager, taskset or a cpuset
 * cgroup left it, which every child inherits; buckets divide those.
 */
#include "child_affinity.h"

#include <errno.h>
#include <sched.h>

#include "apr_strings.h"

#include "http_log.h"

#include "policy_affinity.h"

APLOG_USE_MODULE(mpm_bucketed);

static steering_e steering_of(const bucketed_config *conf,
                              const bucket_generation *gen)
{
    return steering_mode_in_force(conf->steering.mode, &gen->steering);
}

#ifdef __linux__
/* The CPUs this process may run on, ascending, into cpus (CPU_SETSIZE
 * of them); how many, or 0 after logging. */
static int allowed_cpus(server_rec *s, int *cpus)
{
    cpu_set_t set;
    int cpu, n = 0;

    if (sched_getaffinity(0, sizeof(set), &set) < 0) {
        int err = errno;

        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00081)
                     "bucketed: cannot read the CPUs this process may run "
                     "on (sched_getaffinity); its children are not kept on "
                     "their buckets' CPUs");
        return 0;
    }
    for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &set)) {
            cpus[n++] = cpu;
        }
    }
    return n;
}

/* "; bucket 0: CPU 0,2; bucket 1: CPU 1,3", or "" when none is kept. */
static const char *bucket_cpus_described(server_rec *s,
                                         const bucketed_config *conf,
                                         steering_e steering)
{
    apr_pool_t *p = s->process->pconf;
    int allowed[CPU_SETSIZE], mine[CPU_SETSIZE];
    const char *buckets = "";
    int n_allowed = allowed_cpus(s, allowed), b;

    for (b = 0; n_allowed > 0 && b < conf->plan.num_buckets; b++) {
        int n = affinity_bucket_cpus(allowed, n_allowed, steering, b,
                                     conf->plan.num_buckets, mine);

        buckets = apr_psprintf(p, "%s; bucket %d: CPU %s", buckets, b,
                               affinity_cpu_list(p, mine, n));
    }
    return buckets;
}
#endif

void child_affinity_log(server_rec *s, const bucketed_config *conf,
                        const bucket_generation *gen)
{
    steering_e steering = steering_of(conf, gen);
    affinity_choice choice = affinity_choose(conf->affinity_requested,
                                             conf->child_model, steering);
    const char *buckets = "";

#ifdef __linux__
    if (choice.kept) {
        buckets = bucket_cpus_described(s, conf, steering);
    }
#else
    choice.reason = "none (sched_setaffinity is Linux's)";
#endif
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00197)
                 "bucketed: affinity: %s%s", choice.reason, buckets);
}

void child_affinity_apply(server_rec *s, const bucketed_config *conf,
                          const bucket_generation *gen, int bucket)
{
#ifdef __linux__
    steering_e steering = steering_of(conf, gen);
    int allowed[CPU_SETSIZE], mine[CPU_SETSIZE];
    cpu_set_t set;
    int n_allowed, n, i;

    if (!affinity_choose(conf->affinity_requested, conf->child_model,
                         steering).kept
        || (n_allowed = allowed_cpus(s, allowed)) == 0) {
        return;
    }
    n = affinity_bucket_cpus(allowed, n_allowed, steering, bucket,
                             conf->plan.num_buckets, mine);
    CPU_ZERO(&set);
    for (i = 0; i < n; i++) {
        CPU_SET(mine[i], &set);
    }
    if (n > 0 && sched_setaffinity(0, sizeof(set), &set) < 0) {
        int err = errno;

        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00082)
                     "bucketed: cannot keep the child of bucket %d on CPU "
                     "%s (sched_setaffinity); it runs on every CPU it may",
                     bucket, affinity_cpu_list(s->process->pconf, mine, n));
    }
#else
    (void)s;
    (void)conf;
    (void)gen;
    (void)bucket;
#endif
}
