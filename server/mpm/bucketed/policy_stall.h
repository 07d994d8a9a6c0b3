/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_stall: whether a bucket has stalled, from what the parent sees
 * of it itself on every pass: the connections waiting in its sockets'
 * accept queues, which it reads from the kernel, and its census. No
 * counter children keep goes in: a child could hide a stall or fake one
 * by writing it (the lesson of CVE-2019-0211: the parent decides from its
 * own observations). A connection leaves an accept queue only when it is
 * accepted (one whose client gave up stays queued until accept() finds it
 * closed), so a queue shorter than at the last pass has been accepted
 * from. Connections that wait while the queue never goes down for a while
 * mean that nobody accepts from that socket: children hung (a debugger,
 * SIGSTOP), event children at their connection limit, children that look
 * idle and are not, children holding idle keep-alive connections,
 * children asleep beside a connection whose wake-up the kernel gave a
 * killed sibling (stall_looks_to_ask). Unless
 * every unit of the bucket serves a request: a queue can stay as long as
 * it was because connections come as fast as busy children take them (a
 * client reconnects as soon as it is answered), and such a bucket is
 * busy, not stalled; maintenance gives a busy bucket children as ever. A
 * module stuck in requests looks the same, and is treated the same.
 * The kernel's hash keeps sending the bucket its share of new connections,
 * so such a bucket is counted as having no idle child, and maintenance
 * gives it one. Pure: numbers in, verdict out.
 */
#ifndef POLICY_STALL_H
#define POLICY_STALL_H

#include "apr_time.h"

/* How long connections may wait, the queue never going down, before the bucket
 * counts as stalled, and then how long a stalled bucket's new child gets
 * to start accepting before it counts as stalled again (and gets another):
 * far longer than an idle child takes to accept, short beside what a
 * client notices. */
#define STALL_AFTER apr_time_from_msec(200)

typedef struct {
    int seen;                  /* an observation came before */
    apr_uint32_t queued;       /* the queue's length last seen */
    apr_time_t waiting_since;  /* start of the current wait with the queue
                                * never shorter; 0 = nothing waits */
    apr_time_t stalled_since;  /* 0 = not stalled */
    apr_interval_time_t lasted;    /* after STALL_ENDED: how long the
                                    * stall lasted */
} stall_watch;

typedef enum {
    STALL_NONE,                /* serving, nothing waits, or a stalled
                                * bucket between two verdicts */
    STALL_BEGAN,               /* stalled now, and was not */
    STALL_GOES_ON,             /* still stalled, another `after` passed */
    STALL_ENDED                /* accepting again after a stall */
} stall_verdict;

/* Folds in one observation at `now`: `queued` connections waiting in the
 * bucket's accept queues, as the parent read them, and whether its census
 * found every unit of the bucket serving a request (`all_serving`; a
 * bucket without a child has none serving). BEGAN
 * and GOES_ON come at most once per `after`: each asks for one more
 * child. */
stall_verdict stall_watch_update(stall_watch *watch, apr_uint32_t queued,
                                 int all_serving, apr_time_t now,
                                 apr_interval_time_t after);

/* Whether a bucket whose queue stays as long is busy rather than stalled
 * (stall_watch_update's all_serving): every one of its `units` serves a
 * request and no other bucket has an idle unit (the caller counts them in
 * ChildModel prefork only). Where another has one, the connections
 * waiting here would be taken at once in a single accept queue, and here
 * wait for as long as the requests in hand last (a CGI, a slow backend),
 * however the kernel or the steering program put them here: such a
 * bucket counts as stalled, and maintenance moves it a child. */
int stall_bucket_busy(int units, int serving, int idle_elsewhere);

/* How long the bucket has been stalled at `now`; 0 when it is not. */
apr_interval_time_t stall_watch_stalled_for(const stall_watch *watch,
                                            apr_time_t now);

/* How long a keep-alive connection must have waited for its client's next
 * request before it may be closed to admit a connection waiting in an
 * accept queue (both child models): one idle for less is likely a busy
 * client between two requests, which would see its next request fail; one
 * idle for longer is a client that reconnects, if ever, without its user
 * noticing. A connection waiting for a client's next request is worth
 * less than one a client is waiting to have accepted. */
#define KEEPALIVE_RECLAIM_MIN_IDLE apr_time_from_msec(500)

/* Whether a keep-alive connection idle for idle_for may be closed to admit
 * a new one. */
int keepalive_reclaimable(apr_interval_time_t idle_for);

/* Whether a prefork child asked to close its keep-alive connection, idle
 * for idle_for, does, with `waiting` connections in its bucket's accept
 * queues at the parent's last pass: an ask that waited, blocked, through
 * a request arrives at the start of the next wait, too soon, and one that
 * comes when the queue is empty again is stale. A `leaving` child (asked
 * to leave since the ask was sent) never does: a stopping child keeps its
 * idle keep-alive connections until their next request or
 * KeepAliveTimeout, as it would without the stop, since a client sending
 * its next request as the connection closes loses it. */
int keepalive_gives_up(apr_interval_time_t idle_for, apr_uint32_t waiting,
                       int leaving);

/* How long a stalled bucket with idle units waits for them before its
 * keep-alive holders are asked all the same: a child ready that has not
 * accepted for that long is hung rather than starved of CPU. */
#define STALL_IDLE_PATIENCE apr_time_from_sec(2)

/* Of a bucket's `reclaimable` keep-alive holders, how many may be asked
 * to give up a connection, stalled for stalled_for with `idle` units in
 * it (children ready, starting, or promised the slot of a leaving one)
 * and `leaving_slots` slots of the server held by children asked to
 * leave. None while a slot is held so: a slot freed is most often a
 * child for the bucket, and at a graceful restart it is the old
 * generation's slots that make the limit, for as long as its
 * connections last (a cost: one leaving child serving a long request
 * holds every bucket's asks back that long). None, for
 * STALL_IDLE_PATIENCE, while the bucket has idle units: a ready child
 * that has not accepted yet is most often starved of CPU (after a
 * graceful restart on two cores the new generation's forks starve the
 * children for seconds), which a closed connection does not mend. A
 * connection closed then would cost its client what the limit does not
 * make necessary (one that sends its next request as it closes loses
 * it). */
int stall_holders_to_ask(int reclaimable, int idle, int leaving_slots,
                         apr_interval_time_t stalled_for);

/* Where a look (BUCKETED_SIG_LOOK) sent to one ready child of a bucket
 * gets to. The kernel gives a connection's wake-up to the first child
 * waiting on the socket, and a child SIGKILLed there stays first until it
 * runs again to die: a connection that comes meanwhile wakes it alone and
 * waits while its siblings sleep on (with epoll), or is taken to its
 * grave (from a blocked accept(), where nothing can give it back). */
typedef enum {
    LOOK_REACHES_NONE,     /* its children block in accept(), or take
                            * turns under the accept mutex */
    LOOK_REACHES_CHILD,    /* that child (prefork model, epoll): it tries
                            * the sockets once */
    LOOK_REACHES_BUCKET    /* every child of the bucket (event model: the
                            * child wakes them with the bucket's eventfd) */
} look_reach;

/* How many children of a bucket verdict v asks to look, beside the
 * remedy below, with `queued` connections waiting and `idle_units` idle
 * units (an upper bound: the parent asks only children ready to accept,
 * and each once per stall): a new child would find the connections, but
 * one cannot always start (no descriptors, a back-off), and a look costs
 * a wake-up per child. A stall that goes on asks the next ones: an asked
 * child may be the killed one. */
int stall_looks_to_ask(stall_verdict v, apr_uint32_t queued, int idle_units,
                       look_reach reach);

/* The watch's period for a bucket that cannot get a new child now
 * (can_grow 0) and has `reclaimable` keep-alive holders to ask: a stall
 * there costs no fork, only idle clients' connections, which a client
 * reconnects on without its user noticing, so it is called after
 * STALL_AFTER_RECLAIMING (two looks of the parent's 100 ms passes); else
 * STALL_AFTER. */
#define STALL_AFTER_RECLAIMING apr_time_from_msec(100)
apr_interval_time_t stall_watch_after(int can_grow, int reclaimable);

/* How long a stall its keep-alive holders were asked to cover may go on
 * before the bucket gets a child moved in all the same. */
#define STALL_RECLAIM_FALLBACK apr_time_from_msec(400)

/* What a stalled bucket gets. */
typedef struct {
    int give_ups;     /* current children holding idle keep-alive
                       * connections to ask to close them and take a
                       * waiting connection instead (ChildModel
                       * prefork) */
    int needs_child;  /* counted as having no idle child, so maintenance
                       * gives it one (a new child, or at the limit one
                       * moved from another bucket: an exit and a fork) */
} stall_remedy;

/*
 * What verdict v brings to a bucket stalled for stalled_for, with `queued`
 * connections waiting, that could get a new child now (can_grow) or not,
 * with `reclaimable` children holding keep-alive connections idle long
 * enough (keepalive_reclaimable; current prefork-model children only:
 * event children reclaim by themselves, and leaving ones keep theirs). A
 * bucket that can grow gets a child, as ever. At the limit, its own
 * keep-alive holders give up one connection per waiting one: a client
 * served at once, where a move makes it wait for an exit and a fork, and
 * a child started that stock prefork, whose one queue the next free child
 * serves, would not start. A move still comes for what they cannot
 * cover, and once the stall has gone on for STALL_RECLAIM_FALLBACK (a
 * holder may have served a request meanwhile, and not be idle enough).
 */
stall_remedy stall_remedy_decide(stall_verdict v,
                                 apr_interval_time_t stalled_for,
                                 apr_uint32_t queued, int can_grow,
                                 int reclaimable);

#endif /* POLICY_STALL_H */
