/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_steering: what bucketed does with a reuseport group beyond the
 * kernel's hash, decided from what the kernel was seen to do. Pure: the trials
 * are run by sys_bpf.c; this file only reads their outcome.
 *
 *  - migration: when a plan change closes a socket of a group, whether its
 *    queued and half-open connections move to the group's other sockets
 *    (Linux 5.14+) or are reset;
 *  - the plan-change diff: per retained duplicate, keep it, close it
 *    (its queue migrates) or close it (its queue is reset);
 *  - steering (BucketSteering): which bucket a new connection goes to.
 */
#ifndef POLICY_STEERING_H
#define POLICY_STEERING_H

#include "apr_pools.h"

/* ---- migration */

typedef enum {
    MIGRATION_NONE = 0,
    MIGRATION_EBPF,       /* our SELECT_OR_MIGRATE program on the group */
    MIGRATION_SYSCTL,     /* net.ipv4.tcp_migrate_req=1, machine-wide */
    MIGRATION_DRAIN       /* no migration, but a program can leave a socket
                           * out: it gets no new connection and is accepted
                           * from until empty, then closed (4.19+) */
} migration_e;

/* What a trial did: two listeners of one reuseport group on loopback,
 * connections queued on them, one listener closed. */
typedef enum {
    TRIAL_NOT_RUN = 0,      /* not tried: no SO_REUSEPORT */
    TRIAL_NO_BUILD,         /* built without linux/bpf.h */
    TRIAL_SETUP_FAILED,     /* the trial sockets: err */
    TRIAL_LOAD_REFUSED,     /* bpf(BPF_PROG_LOAD): err */
    TRIAL_ATTACH_REFUSED,   /* setsockopt(SO_ATTACH_REUSEPORT_EBPF): err */
    TRIAL_INCONCLUSIVE,     /* nothing was queued on the listener closed */
    TRIAL_DONE              /* queued and moved tell what happened */
} migration_trial_e;

typedef struct {
    migration_trial_e outcome;
    int err;                /* errno, for SETUP_FAILED, LOAD/ATTACH_REFUSED */
    int queued;             /* connections queued on the listener closed */
    int moved;              /* of those, how many the other one then held */
} migration_trial;

typedef struct {
    migration_e mechanism;
    const char *reason;     /* the log line after "migration: " */
} migration_choice;

/*
 * with_program: the trial with our program attached; without_program: the
 * same trial with no program (run only when tcp_migrate_req is 1, else
 * TRIAL_NOT_RUN); drain: the trial of a program leaving a socket out
 * (queued = connections made, moved = those the kept socket got), or NULL
 * when not run; sysctl: tcp_migrate_req, -1 when absent. A mechanism is
 * chosen only when a trial saw it work: the kernel version and the sysctl
 * file prove nothing (Debian's 5.10 loads the migration program, has no
 * migration, and migrates nothing). Migration is preferred to draining:
 * it also saves half-open connections and needs no later restart.
 */
migration_choice migration_choose(apr_pool_t *p,
                                  const migration_trial *with_program,
                                  const migration_trial *without_program,
                                  const migration_trial *drain,
                                  int sysctl);

/* migrate, sysctl, drain or none: for the status page. */
const char *migration_name(migration_e mechanism);

/* ---- the plan-change diff */

typedef enum {
    PLAN_SOCKET_KEEP,           /* the new plan uses it */
    PLAN_SOCKET_RETIRE,         /* leaves its group once no old child
                                 * accepts from it, its queue moving to
                                 * the group's other sockets; closed then */
    PLAN_SOCKET_CLOSE_RESET,    /* closed; its queue is reset */
    PLAN_SOCKET_DRAIN,          /* kept open one more generation, out of
                                 * the steering map, accepted from */
    PLAN_SOCKET_CLOSE_DRAINED   /* closed; nothing was steered to it for a
                                 * whole generation and its queue is empty */
} plan_socket_action_e;

/* One retained SO_REUSEPORT duplicate at a restart. */
typedef struct {
    int in_new_plan;        /* some bucket of the new plan owns it */
    int group_stays;        /* its address is still listened on, so the
                             * group keeps a socket to migrate to */
    int group_migrates;     /* the group migrates on close (program
                             * attached, or the sysctl) */
    int group_drains;       /* the group's program selects only from this
                             * generation's sockets (MIGRATION_DRAIN) */
    int drained_generations;/* generations it has already spent out of
                             * the steering map, accepted from */
    int queued;             /* connections in its accept queue now; -1
                             * unknown */
} plan_socket_state;

plan_socket_action_e plan_socket_action(const plan_socket_state *st);

/* The log line for a socket the new plan does not use (what becomes of
 * it and of its queue); no_migration is the migration reason when the
 * group has none. */
const char *plan_socket_describe(apr_pool_t *p, const plan_socket_state *st,
                                 const char *key, const char *no_migration);

/* ---- a socket put in its slot of a steering map
 *
 * A socket can be in one REUSEPORT_SOCKARRAY only: putting it in a second
 * one fails with EBUSY. It may already be in this map's very slot (kept
 * from the last generation), or in a map no one here holds any more: one
 * that a server which died without its stop left behind, kept alive by
 * the program it left on the group; that map goes once this generation's
 * program replaces the old one, and the socket is free a moment later. */

typedef enum {
    STEER_SLOT_PLACED = 0,      /* the slot holds the socket */
    STEER_SLOT_HELD_ELSEWHERE,  /* in another map: put it in again once the
                                 * group's old program is replaced */
    STEER_SLOT_FAILED           /* the update failed for another reason */
} steer_slot_outcome;

/* From the update's errno (0 for success) and whether a lookup of the
 * slot then found this very socket. */
steer_slot_outcome steer_slot_outcome_of(int update_err, int slot_holds_it);

/* ---- steering (BucketSteering) */

typedef enum {
    STEERING_AUTO = 0,
    STEERING_HASH,        /* the kernel's hash of the connection's 4-tuple */
    STEERING_CPU,         /* the bucket of the CPU that received it */
    STEERING_LOAD         /* the hash's bucket while it has an idle child,
                           * else the next bucket that has one */
} steering_e;

/* BucketSteering load scans every bucket in one unrolled program. */
#define STEERING_MAX_LOAD_BUCKETS 64

const char *steering_name(steering_e mode);

/* auto | hash | cpu | load, case-insensitive. */
const char *steering_parse(apr_pool_t *p, const char *directive,
                           const char *arg, steering_e *out);

typedef struct {
    steering_e requested;
    int reuseport_groups;   /* the plan has SO_REUSEPORT duplicates */
    int num_buckets;
    int online_cpus;
    int trial_err;          /* 0: the requested mode's program loaded and
                             * attached in a trial; else the errno of
                             * trial_step */
    const char *trial_step;
} steering_input;

typedef struct {
    steering_e mode;        /* never AUTO */
    const char *reason;     /* for the log */
} steering_choice;

/* NULL and *out, or an error naming the directive and what is missing. */
const char *steering_choose(apr_pool_t *p, const steering_input *in,
                            steering_choice *out);

/* What this generation's steering programs did on the reuseport groups,
 * counted as they are attached (listen_steering.c). Under BucketSteering
 * cpu or load only: under hash the kernel's hash picks in any case. */
typedef struct {
    int steered;            /* groups the chosen program steers */
    int failed;             /* groups where it could not be loaded or
                             * attached: the kernel's hash picks there */
    const char *failure;    /* the first failure, in words */
} steering_outcome;

/* The steering in force, for the status page and the log: the choice's
 * name while no group failed; "hash" and why when none is steered; both,
 * counted, when some groups are. */
const char *steering_in_force(apr_pool_t *p, steering_e mode,
                              const steering_outcome *o);

/* The mode whose consequences hold in the children (CPU affinity under
 * cpu): the chosen one while some group is steered by it, else hash. */
steering_e steering_mode_in_force(steering_e mode,
                                  const steering_outcome *o);

/* ---- a bucket with no child (issue 26)
 *
 * A bucket that has lost every child and cannot get one at once (set-up
 * failures and their back-off, the fork limit) leaves its reuseport
 * groups: the parent shuts its sockets down, the kernel moves what is
 * queued on them to the group's other sockets (through the migration
 * program, or tcp_migrate_req) and steers nothing more to them. A child
 * forked into it listens on them again once its set-up is done
 * (child_life.c), so that a child that fails puts nothing back; the
 * parent then, seeing it ready, puts them back in their steering maps. */

typedef struct {
    int out;                /* its sockets were shut down and are not
                             * known to listen again */
    int handed;             /* out, and a child forked since then is to
                             * listen on them again once set up */
    int spell;              /* out since its last ready child, at least
                             * once: logged when it began, and again when
                             * a child is ready */
} bucket_absence;

typedef struct {
    int processes;          /* processes holding the bucket's sockets:
                             * running, starting, on their way in, of any
                             * generation */
    int ready;              /* its children that got through their set-up */
    int can_migrate;        /* a shut-down socket's queue moves to the
                             * group's other sockets (5.14+), and each of
                             * its sockets is its own (BucketStrategy
                             * reuseport) */
    int others_in;          /* other buckets whose sockets surely listen
                             * (not out) */
    int can_grow;           /* a child can be forked into it this pass (a
                             * free slot, no back-off): it gets one, or a
                             * stall gets it one */
} absence_input;

typedef enum {
    ABSENCE_STAY = 0,       /* nothing to do */
    ABSENCE_TAKE_OUT,       /* shut its sockets down (again: a child
                             * handed them may have listened and died) */
    ABSENCE_BACK_IN,        /* a child handed them is ready, so they
                             * listen: put them back in their maps */
    ABSENCE_SPELL_ENDS      /* a child is ready again: log it */
} absence_step;

/* What this pass does with a bucket. Takes out only a bucket no process
 * holds (a child accepting from a shut-down socket would fail) and that
 * cannot grow (one that can may be childless a while under load steering,
 * and out of its groups it would never stall to get a child), and only
 * where the queue moves (else it would be reset) to a socket that still
 * listens. */
absence_step bucket_absence_decide(const bucket_absence *a,
                                   const absence_input *in);

/* Notes a step carried out (TAKE_OUT, SPELL_ENDS), a child forked into an
 * out bucket (handed), or the bucket's sockets listening again (rejoined:
 * BACK_IN, or the parent's own listen()); took_out returns 1 when the
 * step begins a spell (the first TAKE_OUT since a ready child: the one to
 * log). */
int bucket_absence_took_out(bucket_absence *a);
void bucket_absence_handed(bucket_absence *a);
/* A bucket no old child accepts from at a graceful restart, out of its
 * groups from the start until its first child is ready: out, with no
 * spell (it had no child to lose). */
void bucket_absence_new(bucket_absence *a);
void bucket_absence_rejoined(bucket_absence *a);
void bucket_absence_spell_ended(bucket_absence *a);

#endif /* POLICY_STEERING_H */
