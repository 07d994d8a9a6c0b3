/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_context.h: the family header of the parent's files (parent.c
 * runs the parent, parent_slots.c starts and reaps children,
 * parent_maint.c keeps every bucket supplied with idle children,
 * parent_stalls.c watches their accept queues for stalls,
 * parent_handover.c hands a graceful restart's buckets over,
 * parent_takeover.c takes over what an incompatible build left): the
 * parent's context and the functions one of them calls in another. It
 * belongs to no file, so that each can include it and still call only
 * those below it. The parent's alone: nothing else includes it.
 */
#ifndef PARENT_CONTEXT_H
#define PARENT_CONTEXT_H

#include <signal.h>

#include "apr_pools.h"
#include "httpd.h"

#include "policy_maint.h"
#include "bucketed.h"
#include "policy_stall.h"
#include "policy_steering.h"

/* replace_into for a child asked to leave whose slot stays free. */
#define NO_REPLACEMENT (-1)

typedef struct {
    apr_pool_t *pconf;
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    const process_limits *limits;
    bucket_generation *gen;          /* the buckets (bucket.h) */
    int num_buckets;
    ap_generation_t generation;
    /* The arrays bucket_maint_decide() takes, filled from the bucket
     * records every pass: */
    bucket_census *census;
    bucket_decision *decisions;
    int *grow_limit;
    int *spawn_rate;                 /* in and out: kept->spawning's */
    /* Kept from pass to pass: what steering was told last
     * (bucket_census_to_publish). */
    bucket_census *published;
    int published_carried;
    const int *covers;               /* per pair of buckets: see
                                      * bucket_maint_input */
    bucket_move *moves;              /* room for every move of a pass */
    int max_moves;
    slot_view *slot_views;           /* per slot, reused every pass */
    apr_time_t *keepalive_since;     /* per slot, ChildModel prefork: since
                                      * when the parent has seen its child
                                      * wait for a keep-alive connection's
                                      * next request; 0 = not waiting */
    struct keepalive_holder *holders; /* room for every slot: a stalled
                                       * bucket's holders, to be sorted */
    apr_time_t *looked_in;           /* per slot: the start of the stall
                                      * its child was last asked to look
                                      * in (parent_stalls.c); 0 = never */
    bucket_absence *absence;         /* per bucket: out of its reuseport
                                      * groups while it has no child */
    apr_time_t handover_deadline;    /* when old children kept accepting
                                      * at a graceful restart leave at the
                                      * latest; 0 = none kept */
    int *handover_kept;              /* per bucket, reused every pass */
    sigset_t sigchld;                /* blocked; taken by wait_for_child */
    apr_time_t last_monitor;
} parent_context;

/* parent_slots.c: the signal mask, checked (logged on failure); a wait of
 * at most timeout for a child's exit (proc->pid -1 if none). */
void parent_sigprocmask(parent_context *pc, int how, const sigset_t *set,
                        sigset_t *old);
void parent_wait_for_child(parent_context *pc, apr_interval_time_t timeout,
                           apr_proc_t *proc, apr_exit_why_e *why,
                           int *status);
/* The slot table and the parent-only tables, allocated once. */
void parent_allocate_tables(bucketed_retained *retained, server_rec *s);
void parent_note_slot_used(bucketed_retained *retained, int slot);
/* A child forked into slot for bucket: recorded, or the slot's bucket
 * backed off (returns -1). parent_record_child() records one the parent
 * did not fork itself (one-process mode); parent_run_child() is the
 * child's side, and never returns. */
int parent_spawn_child(parent_context *pc, int slot, int bucket);
/* The slots children may use: ServerLimit's in ChildModel event, so that
 * a graceful restart's new children start beside the old ones finishing
 * their connections (as stock event); MaxRequestWorkers' in ChildModel
 * prefork (as stock prefork). */
int parent_slot_limit(const parent_context *pc);
/* Children that count against MaxRequestWorkers: the current
 * generation's not asked to leave, and the replacements promised to
 * those asked. */
int parent_children_counted(const parent_context *pc);
/* A child on its way out: asked to leave, or its generation is over (an
 * old child kept for the handover, policy_handover.h). */
int parent_child_outgoing(const parent_context *pc, const child_slot *cs);
/* The bucket a slot's child counts for: its own; once outgoing, its
 * replacement's. NO_REPLACEMENT: none. */
int parent_counted_bucket(const parent_context *pc, const child_slot *cs);
/* The lowest slot below parent_slot_limit() with no child, or -1. */
int parent_free_slot(const parent_context *pc);
void parent_record_child(parent_context *pc, int slot, pid_t pid,
                         int bucket);
void parent_run_child(parent_context *pc, int slot, int bucket,
                      pid_t parent) __attribute__((noreturn));
/* A child asked to leave gracefully; replace_into: the bucket whose child
 * takes the slot once it is gone, or NO_REPLACEMENT. Asking again keeps
 * that replacement. */
void parent_ask_to_leave(parent_context *pc, int slot, int replace_into);
void parent_ask_again(parent_context *pc, int slot);
/* A prefork-model child asked to close its idle keep-alive connection and
 * take a waiting one (BUCKETED_SIG_GIVE_UP); it decides whether it still
 * may (prefork_keepalive.c). */
void parent_ask_to_give_up(parent_context *pc, int slot);
/* A ready child of a stalled bucket asked to look at the bucket's
 * sockets (BUCKETED_SIG_LOOK): whether the signal went. */
int parent_ask_to_look(parent_context *pc, int slot);
/* An exit reaped: its slot freed (or refilled), its bucket's health noted. */
int parent_slot_was_ready(const parent_context *pc, int slot);
void parent_reap_one(parent_context *pc, apr_proc_t *proc,
                     apr_exit_why_e why, int status);

/* parent_maint.c: a full maintenance pass (once a second) or a rescue pass
 * (in between): see bucket_maint_decide(). Leave requests repeated for
 * children that have not gone yet. */
void parent_maintain_buckets(parent_context *pc, int rescue_only);
/* During a stop that lets the children serve on (parent.c): a child for
 * each bucket with no idle unit, as a rescue pass would start. */
void parent_start_in_starved_buckets(parent_context *pc);
void parent_repeat_leave_requests(parent_context *pc);
/* At a graceful restart (prefork model), before the generation's
 * children are forked: the buckets no old child accepts from stay out of
 * their reuseport groups until their first child is ready. */
void parent_keep_new_buckets_out(parent_context *pc);
/* The bucket's children of this generation that got through their
 * set-up. */
int parent_ready_children(const parent_context *pc, int bucket);

/* parent_stalls.c: at each pass, after the census: buckets whose queued
 * connections nobody accepts get stall_remedy_decide()'s remedy (their
 * census marked stalled when they need a child). */
void parent_note_stalls(parent_context *pc, apr_time_t now);
struct keepalive_holder *parent_holders_create(apr_pool_t *p, int slots);

/* parent_handover.c: a graceful restart's handover (policy_handover.h).
 * Whether an idle old child in slot keeps accepting, its replacement for
 * `bucket` reserved; `seen` counts such children per bucket. */
int parent_keep_for_handover(parent_context *pc, int slot, int bucket,
                             int *seen);
/* Between passes: kept children leave once their bucket is ready. */
void parent_end_handover(parent_context *pc, apr_time_t now);
/* parent_census.c: the scoreboard's and the slot table's word on each
 * child, for counting only. The units a child brings (1, or
 * ThreadsPerChild in ChildModel event); of a live child's units, those
 * that can take a connection now (ready or starting; none in an event
 * child that stopped accepting), and of those the ones still starting. */
int parent_child_units(const parent_context *pc);
int parent_idle_units_of(const parent_context *pc, int slot);
int parent_starting_units_of(const parent_context *pc, int slot);
/* Of a live child's idle units, those accepting now: not starting. */
int parent_ready_units_of(const parent_context *pc, int slot);
/* Connections a live child holds open: an event child's own count (its
 * idle keep-alive ones too); a prefork child's is its busy worker's,
 * none once it is past its serve loop and exiting. */
apr_uint32_t parent_connections_of(const parent_context *pc, int slot);
/* Whether the child in a slot is an old one kept accepting by
 * parent_keep_for_handover() and not yet asked to leave. */
int parent_kept_for_handover(const parent_context *pc, const child_slot *cs);
/* Fills pc->census (and pc->slot_views) from every slot as of `now`;
 * returns the free slots. */
int parent_take_census(parent_context *pc, apr_time_t now);
/* Whether a child holds a keep-alive connection waiting for its next
 * request (the scoreboard: a prefork-model child's status, an event
 * child's count). */
int parent_keepalive_held(const parent_context *pc);
/* An out bucket's sockets listening and in their steering maps again:
 * once a child handed them is ready, and before a generation ends. The
 * bucket counts as in afterwards even if that failed (-1, logged). */
int parent_bucket_rejoin(parent_context *pc, int bucket);
void parent_buckets_rejoin(parent_context *pc);

/* parent_takeover.c: after a graceful restart onto this build from one
 * whose state it could not read (retained->takeover set). Before the
 * buckets' sockets are opened: finds the old build's children (from the
 * record it left, else from the scoreboard with the kernel's word that
 * each is a worker child: policy_takeover.h), and closes the listening
 * sockets the old build opened (its buckets' duplicates; their queues
 * migrate or reset as on a plan change). Once the slot table exists:
 * takes those children into it as an old generation, to be asked to
 * leave and replaced as on any graceful restart. */
void takeover_prepare(apr_pool_t *pconf, server_rec *s,
                      bucketed_retained *retained);
void takeover_adopt_children(parent_context *pc);
/* parent_adopted.c: whether the slot holds a child, checked with the
 * kernel if it was taken over (dropped, logged once, if it is no longer
 * that child): called before every signal. adopted_slots_check() checks
 * every slot taken over, before the slot table is counted. */
int adopted_slot_still_ours(parent_context *pc, int slot);
void adopted_slots_check(parent_context *pc);

/* The MPM's run in the parent (the mpm hook). */
int parent_run(apr_pool_t *pconf, apr_pool_t *plog, server_rec *s);

#endif /* PARENT_CONTEXT_H */
