/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_steering.c: reuseport decisions from the kernel trials'
 * outcomes. Pure.
 */
#include "policy_steering.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "apr_strings.h"

#define RESET_CONSEQUENCE "connections queued on a removed bucket's socket " \
                          "are reset when it closes"

/* What a trial that did not show migration found, in words. */
static const char *trial_failure(apr_pool_t *p, const migration_trial *t)
{
    switch (t->outcome) {
    case TRIAL_NO_BUILD:
        return "built without linux/bpf.h";
    case TRIAL_SETUP_FAILED:
        return apr_psprintf(p, "the trial sockets failed (%s)",
                            strerror(t->err));
    case TRIAL_LOAD_REFUSED:
        return apr_psprintf(p, "the kernel refused a SELECT_OR_MIGRATE "
                            "program (%s%s)", strerror(t->err),
                            t->err == EPERM
                                ? ": needs CAP_BPF or CAP_SYS_ADMIN"
                                : ": Linux before 5.14?");
    case TRIAL_ATTACH_REFUSED:
        return apr_psprintf(p, "the kernel refused to attach the program to "
                            "a reuseport group (%s)", strerror(t->err));
    case TRIAL_INCONCLUSIVE:
        return "the trial queued nothing on the listener it closed";
    case TRIAL_DONE:
        return apr_psprintf(p, "the kernel took the program, but a trial "
                            "listener closed with %d queued connection(s) "
                            "handed %d to its group (as Linux 5.10 does)",
                            t->queued, t->moved);
    case TRIAL_NOT_RUN:
    default:
        return "no SO_REUSEPORT";
    }
}

/* Why the drain trial (when run) did not show a socket left out. */
static const char *drain_failure(apr_pool_t *p, const migration_trial *t)
{
    if (t == NULL || t->outcome == TRIAL_NOT_RUN
        || t->outcome == TRIAL_NO_BUILD) {
        return "";
    }
    if (t->outcome == TRIAL_DONE) {
        return apr_psprintf(p, "; cannot drain either: a program leaving a "
                            "listener out sent it %d of %d connections",
                            t->queued - t->moved, t->queued);
    }
    if (t->outcome == TRIAL_SETUP_FAILED) {
        return apr_psprintf(p, "; cannot drain either: the trial sockets "
                            "failed (%s)", strerror(t->err));
    }
    return apr_psprintf(p, "; cannot drain either: the kernel refused an "
                        "SK_REUSEPORT program with a socket map (%s%s)",
                        strerror(t->err),
                        t->err == EPERM ? ": needs CAP_BPF or CAP_SYS_ADMIN"
                                        : ": Linux before 4.19?");
}

static int trial_migrated(const migration_trial *t)
{
    return t->outcome == TRIAL_DONE && t->queued > 0 && t->moved == t->queued;
}

/* The drain trial: every connection went to the socket in the map. */
static int trial_drained(const migration_trial *t)
{
    return t != NULL && t->outcome == TRIAL_DONE && t->queued > 0
           && t->moved == t->queued;
}

migration_choice migration_choose(apr_pool_t *p,
                                  const migration_trial *with_program,
                                  const migration_trial *without_program,
                                  const migration_trial *drain,
                                  int sysctl)
{
    migration_choice c;

    if (trial_migrated(with_program)) {
        c.mechanism = MIGRATION_EBPF;
        c.reason = apr_psprintf(p, "per-group eBPF (5.14+): a trial listener "
                                "closed with %d queued connection(s) handed "
                                "them all to its group",
                                with_program->queued);
        return c;
    }
    if (sysctl == 1 && trial_migrated(without_program)) {
        c.mechanism = MIGRATION_SYSCTL;
        c.reason = apr_psprintf(p, "net.ipv4.tcp_migrate_req=1 "
                                "(machine-wide; %s)",
                                trial_failure(p, with_program));
        return c;
    }
    if (trial_drained(drain)) {
        c.mechanism = MIGRATION_DRAIN;
        c.reason = apr_psprintf(p, "drain (no migration: %s; a trial "
                                "program leaving one of two listeners out "
                                "sent all %d connections to the other): a "
                                "removed bucket's socket gets no new "
                                "connection, is accepted from for a "
                                "generation and closed at a later restart "
                                "once its queue is empty",
                                trial_failure(p, with_program),
                                drain->queued);
        return c;
    }
    c.mechanism = MIGRATION_NONE;
    c.reason = apr_psprintf(p, "none: %s%s%s; " RESET_CONSEQUENCE,
                            trial_failure(p, with_program),
                            sysctl == 1
                            ? ", nor did net.ipv4.tcp_migrate_req=1 migrate"
                            : "",
                            drain_failure(p, drain));
    return c;
}

const char *migration_name(migration_e mechanism)
{
    switch (mechanism) {
    case MIGRATION_EBPF:
        return "migrate";
    case MIGRATION_SYSCTL:
        return "sysctl";
    case MIGRATION_DRAIN:
        return "drain";
    case MIGRATION_NONE:
    default:
        return "none";
    }
}

plan_socket_action_e plan_socket_action(const plan_socket_state *st)
{
    if (st->in_new_plan) {
        return PLAN_SOCKET_KEEP;
    }
    if (!st->group_stays) {
        return PLAN_SOCKET_CLOSE_RESET;
    }
    if (st->group_migrates) {
        return PLAN_SOCKET_RETIRE;
    }
    if (!st->group_drains) {
        return PLAN_SOCKET_CLOSE_RESET;
    }
    /* Left out of steering for a whole generation, nothing is steered to
     * it any more; an empty queue then means nothing is lost. */
    return st->drained_generations > 0 && st->queued == 0
        ? PLAN_SOCKET_CLOSE_DRAINED : PLAN_SOCKET_DRAIN;
}

const char *plan_socket_describe(apr_pool_t *p, const plan_socket_state *st,
                                 const char *key, const char *no_migration)
{
    const char *what;

    switch (plan_socket_action(st)) {
    case PLAN_SOCKET_KEEP:
        return apr_psprintf(p, "keeping duplicate listener %s", key);
    case PLAN_SOCKET_DRAIN:
        return apr_psprintf(p, "draining duplicate listener %s, which the "
                            "new bucket plan no longer uses: it gets no new "
                            "connection; children of the new generation "
                            "accept what is queued on it (%s), and a later "
                            "restart closes it once empty", key,
                            st->queued < 0 ? "depth unknown"
                            : apr_psprintf(p, "%d now", st->queued));
    case PLAN_SOCKET_CLOSE_DRAINED:
        what = apr_psprintf(p, "drained for %d generation(s), nothing "
                            "queued on it", st->drained_generations);
        break;
    case PLAN_SOCKET_RETIRE:
        return apr_psprintf(p, "retiring duplicate listener %s, which the "
                            "new bucket plan no longer uses: it leaves its "
                            "reuseport group as soon as no old child "
                            "accepts from it, and connections queued on it "
                            "then move to the other sockets of its group",
                            key);
    case PLAN_SOCKET_CLOSE_RESET:
    default:
        what = !st->group_stays
            ? "its address is no longer listened on, so connections queued "
              "on it are reset"
            : apr_psprintf(p, "connections queued on it are reset when the "
                           "last old child holding it leaves (migration: %s)",
                           no_migration);
        break;
    }
    return apr_psprintf(p, "closing duplicate listener %s, which the new "
                        "bucket plan no longer uses: %s", key, what);
}

steer_slot_outcome steer_slot_outcome_of(int update_err, int slot_holds_it)
{
    if (update_err == 0 || (update_err == EBUSY && slot_holds_it)) {
        return STEER_SLOT_PLACED;
    }
    return update_err == EBUSY ? STEER_SLOT_HELD_ELSEWHERE
                               : STEER_SLOT_FAILED;
}

const char *steering_name(steering_e mode)
{
    switch (mode) {
    case STEERING_HASH:
        return "hash";
    case STEERING_CPU:
        return "cpu";
    case STEERING_LOAD:
        return "load";
    case STEERING_AUTO:
    default:
        return "auto";
    }
}

const char *steering_parse(apr_pool_t *p, const char *directive,
                           const char *arg, steering_e *out)
{
    static const steering_e all[] = {
        STEERING_AUTO, STEERING_HASH, STEERING_CPU, STEERING_LOAD
    };
    apr_size_t i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcasecmp(arg, steering_name(all[i])) == 0) {
            *out = all[i];
            return NULL;
        }
    }
    return apr_psprintf(p, "%s must be one of auto, hash, cpu, load, not "
                        "'%s'",
                        directive, arg);
}

#define LOAD_RULE "a connection takes an idle child of the hash's bucket, " \
                  "else of the next bucket that has one (the parent's " \
                  "census ten times a second, less what connections took " \
                  "since), else goes to a bucket the census saw idle, " \
                  "in proportion to the idle children it saw, else " \
                  "where the hash says"

/* BucketSteering auto: load where the kernel runs its program, as it is
 * the hash while every bucket has an idle child and, when one has none,
 * gives the connection to a bucket that has (at MaxRequestWorkers, the
 * last free child serves whichever bucket the client came to, as one
 * accept queue would); the hash where it cannot. */
static const char *choose_auto(apr_pool_t *p, const steering_input *in,
                               steering_choice *out)
{
    if (!in->reuseport_groups || in->num_buckets < 2) {
        out->reason = "hash (BucketSteering auto; no bucket has an "
                      "SO_REUSEPORT duplicate: nothing to steer)";
    }
    else if (in->trial_err != 0) {
        out->reason = apr_psprintf(p, "hash (BucketSteering auto; load "
                                   "steering needs an SK_REUSEPORT eBPF "
                                   "program, Linux 4.19+ and CAP_BPF or root, "
                                   "and this kernel refused %s: %s)",
                                   in->trial_step ? in->trial_step
                                   : "the trial", strerror(in->trial_err));
    }
    else if (in->num_buckets > STEERING_MAX_LOAD_BUCKETS) {
        out->reason = apr_psprintf(p, "hash (BucketSteering auto; load "
                                   "steering handles at most %d buckets, "
                                   "not %d)", STEERING_MAX_LOAD_BUCKETS,
                                   in->num_buckets);
    }
    else {
        out->mode = STEERING_LOAD;
        out->reason = "load (BucketSteering auto): " LOAD_RULE;
    }
    return NULL;
}

const char *steering_choose(apr_pool_t *p, const steering_input *in,
                            steering_choice *out)
{
    out->mode = STEERING_HASH;
    if (in->requested == STEERING_AUTO) {
        return choose_auto(p, in, out);
    }
    if (in->requested == STEERING_HASH) {
        out->reason = "hash (BucketSteering hash)";
        return NULL;
    }
    if (in->trial_err != 0) {
        return apr_psprintf(p, "BucketSteering %s needs an SK_REUSEPORT "
                            "eBPF program with a REUSEPORT_SOCKARRAY map%s "
                            "(Linux 4.19+), and this kernel refused %s (%s); "
                            "use BucketSteering hash or auto",
                            steering_name(in->requested),
                            in->requested == STEERING_LOAD
                                ? " and an array of idle counts" : "",
                            in->trial_step ? in->trial_step : "the trial",
                            strerror(in->trial_err));
    }
    if (!in->reuseport_groups || in->num_buckets < 2) {
        out->reason = apr_psprintf(p, "hash (BucketSteering %s, but no bucket "
                                   "has an SO_REUSEPORT duplicate: nothing "
                                   "to steer)", steering_name(in->requested));
        return NULL;
    }
    if (in->requested == STEERING_LOAD) {
        if (in->num_buckets > STEERING_MAX_LOAD_BUCKETS) {
            return apr_psprintf(p, "BucketSteering load handles at most %d "
                                "buckets, not %d; use BucketCount 1 to %d",
                                STEERING_MAX_LOAD_BUCKETS, in->num_buckets,
                                STEERING_MAX_LOAD_BUCKETS);
        }
        out->mode = STEERING_LOAD;
        out->reason = "load (BucketSteering load): " LOAD_RULE;
        return NULL;
    }
    if (in->num_buckets > in->online_cpus) {
        return apr_psprintf(p, "BucketSteering cpu needs at most one bucket "
                            "per online CPU (%d buckets, %d CPUs: buckets "
                            "%d and up would receive nothing); use "
                            "BucketCount auto or 1 to %d",
                            in->num_buckets, in->online_cpus,
                            in->online_cpus, in->online_cpus);
    }
    out->mode = STEERING_CPU;
    out->reason = apr_psprintf(p, "cpu (BucketSteering cpu): a connection "
                               "goes to bucket (receiving CPU mod %d)",
                               in->num_buckets);
    return NULL;
}

steering_e steering_mode_in_force(steering_e mode,
                                  const steering_outcome *o)
{
    return o->failed > 0 && o->steered == 0 ? STEERING_HASH : mode;
}

const char *steering_in_force(apr_pool_t *p, steering_e mode,
                              const steering_outcome *o)
{
    const char *why = o->failure ? o->failure : "unknown";

    if (o->failed == 0) {
        return steering_name(mode);
    }
    if (o->steered == 0) {
        return apr_psprintf(p, "hash (the %s program failed: %s)",
                            steering_name(mode), why);
    }
    return apr_psprintf(p, "%s on %d reuseport group(s), hash on %d (the %s "
                        "program failed: %s)", steering_name(mode),
                        o->steered, o->failed, steering_name(mode), why);
}

absence_step bucket_absence_decide(const bucket_absence *a,
                                   const absence_input *in)
{
    if ((!a->out || a->handed) && in->processes == 0 && !in->can_grow
        && in->can_migrate && in->others_in > 0) {
        return ABSENCE_TAKE_OUT;
    }
    if (a->out && a->handed && in->ready > 0) {
        return ABSENCE_BACK_IN;
    }
    if (a->spell && !a->out && in->ready > 0) {
        return ABSENCE_SPELL_ENDS;
    }
    return ABSENCE_STAY;
}

int bucket_absence_took_out(bucket_absence *a)
{
    int began = !a->spell;

    a->out = 1;
    a->handed = 0;
    a->spell = 1;
    return began;
}

void bucket_absence_new(bucket_absence *a)
{
    a->out = 1;
    a->handed = 0;
    a->spell = 0;
}

void bucket_absence_handed(bucket_absence *a)
{
    a->handed = a->out;
}

void bucket_absence_rejoined(bucket_absence *a)
{
    a->out = 0;
    a->handed = 0;
}

void bucket_absence_spell_ended(bucket_absence *a)
{
    a->spell = 0;
}
