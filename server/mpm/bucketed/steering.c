/*
 * steering.c: reuseport decisions from the kernel trials' outcomes. Pure.
 */
#include "steering.h"

#include <errno.h>
#include <string.h>

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

static int trial_migrated(const migration_trial *t)
{
    return t->outcome == TRIAL_DONE && t->queued > 0 && t->moved == t->queued;
}

migration_choice migration_choose(apr_pool_t *p,
                                  const migration_trial *with_program,
                                  const migration_trial *without_program,
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
    c.mechanism = MIGRATION_NONE;
    c.reason = apr_psprintf(p, "none: %s%s; " RESET_CONSEQUENCE,
                            trial_failure(p, with_program),
                            sysctl == 1 ? ", nor did net.ipv4.tcp_migrate_req=1"
                                          " migrate" : "");
    return c;
}

plan_socket_action_e plan_socket_action(const plan_socket_state *st)
{
    if (st->in_new_plan) {
        return PLAN_SOCKET_KEEP;
    }
    return st->group_stays && st->group_migrates ? PLAN_SOCKET_CLOSE_MIGRATE
                                                 : PLAN_SOCKET_CLOSE_RESET;
}

const char *plan_socket_describe(apr_pool_t *p, const plan_socket_state *st,
                                 const char *key, const char *no_migration)
{
    const char *what;

    switch (plan_socket_action(st)) {
    case PLAN_SOCKET_KEEP:
        return apr_psprintf(p, "keeping duplicate listener %s", key);
    case PLAN_SOCKET_CLOSE_MIGRATE:
        what = "connections queued on it move to the other sockets of its "
               "reuseport group when the last old child holding it leaves";
        break;
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
