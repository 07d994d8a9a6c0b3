/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_maint: per-bucket idle maintenance, the decision half of prefork's
 * once-a-second pass, with capacity that follows load: MaxRequestWorkers
 * bounds the children of all buckets together, not each bucket's share.
 * Pure: the parent counts, this decides, the parent acts.
 */
#ifndef POLICY_MAINT_H
#define POLICY_MAINT_H

/* Largest number of children one bucket gains in one pass (prefork's cap). */
#define BUCKET_MAX_SPAWN_RATE 32

/* A bucket gaining this many children in one pass is reported as busy
 * (prefork's threshold for its "seems busy" message). */
#define BUCKET_BUSY_REPORT 8

/* Counted in units: a unit is a child in ChildModel prefork, a worker
 * thread in ChildModel event (a child brings ThreadsPerChild units). */
typedef struct {
    int idle;         /* units ready to accept or starting, and those of
                       * children on their way into this bucket */
    int busy;         /* units serving a connection (or, in a child that
                       * stopped accepting, unable to take one) */
    int children;     /* children running, starting or on their way in */
    int serving;      /* units serving a request: busy, and neither
                       * waiting for a keep-alive connection's next request
                       * nor idle in a child that stopped accepting */
    int movable;      /* idle children that could leave for another bucket
                       * at no client's cost: every unit idle, no
                       * connection open (an event child's idle keep-alive
                       * ones would be closed) */
    int stalled;      /* nothing accepts its queued connections
                       * (bucket_census_stalled) */
    int arriving;     /* of the idle units, those of children on their
                       * way in or not yet accepting: the ones that will
                       * take what waits in a stalled bucket */
    int queued;       /* connections in its accept queues when the parent
                       * last read them: each will take an idle unit */
    int reclaimable;  /* ChildModel prefork: current children whose
                       * keep-alive connection has waited long enough for
                       * its next request to be closed for a waiting
                       * client (policy_stall.h) */
    int promised;     /* of the idle units, those of replacements whose
                       * slot an old child keeps a while yet (slot_view
                       * replacement_waits): they count as coming, so the
                       * bucket asks for no other child, but no
                       * connection is steered to them */
    int handing_over; /* idle units of old children kept accepting from
                       * its sockets for a graceful restart's handover:
                       * not the bucket's (they leave once its new
                       * children are ready, and their replacements are
                       * counted), but a connection steered here finds
                       * them */
} bucket_census;

/* What the parent's slot table says of one slot. */
typedef enum {
    SLOT_EMPTY,       /* no child */
    SLOT_IDLE,        /* a current child ready to accept, or starting */
    SLOT_BUSY,        /* a current child serving a connection */
    SLOT_LEAVING,     /* asked to leave, slot not refilled (surplus, or an
                       * old generation's child beyond MaxRequestWorkers) */
    SLOT_REPLACING    /* asked to leave; a child of `bucket` takes the slot
                       * as soon as it is gone (restart, moved capacity) */
} slot_state_e;

typedef struct {
    slot_state_e state;
    int bucket;       /* IDLE, BUSY: its bucket; REPLACING: the next one */
    int idle_units;   /* IDLE, BUSY: of the child's units, how many are
                       * ready for a new connection (prefork: IDLE 1, BUSY
                       * 0); the others count as busy */
    int holds_connections; /* IDLE, BUSY: has a connection open */
    int serving_units;     /* IDLE, BUSY: units serving a request */
    int starting_units;    /* IDLE: of the idle units, those not yet
                            * accepting (the child is starting) */
    int reclaimable;       /* BUSY, ChildModel prefork: its keep-alive
                            * connection may be closed for a waiting
                            * client (keepalive_reclaimable), to serve
                            * it */
    int replacement_waits; /* REPLACING: the old child keeps the slot a
                            * while yet (kept accepting for a graceful
                            * restart's handover, up to 5 s, or finishing
                            * its connections, up to KeepAliveTimeout),
                            * so the replacement is not about to start */
    int handover_units;    /* REPLACING, an old child kept accepting for a
                            * graceful restart's handover: its idle units,
                            * which take connections from the sockets of
                            * bucket handover_bucket (its bucket in the old
                            * plan, which the new one has) until it leaves */
    int handover_bucket;
} slot_view;

typedef struct {
    int min_spare;    /* this bucket's share of MinSpareServers, >= 1 */
    int max_spare;    /* this bucket's share of MaxSpareServers, > min_spare */
} bucket_spare_limits;

typedef struct {
    int num_buckets;
    int unit;                     /* units a child brings: 1 (prefork) or
                                   * ThreadsPerChild (event) */
    const bucket_census *census;  /* per bucket */
    const int *grow_limit;        /* per bucket: how many children it may
                                   * gain now; 0 while its new children are
                                   * held back (policy_exit.h) */
    int min_spare;                /* MinSpareServers (Threads), shared out */
    int max_spare;                /* MaxSpareServers (Threads), shared out */
    int free_slots;               /* children that may start now
                                   * (bucket_census_tally) */
    int rescue_only;              /* a quick pass between full ones: only a
                                   * bucket with no idle child gains, one
                                   * child; no stops, spawn rates kept */
    const int *covers;            /* num_buckets x num_buckets, or NULL:
                                   * covers[to * num_buckets + from] when
                                   * bucket to has every address bucket
                                   * from has (bucket_plan_covers) */
    int steered_to_idle;          /* BucketSteering load is in force on
                                   * every group: new connections go to a
                                   * bucket with an idle unit wherever one
                                   * is, so a bucket short of idle units
                                   * but not stalled gets no child moved in
                                   * (a move is an exit and a fork, and at
                                   * MaxRequestWorkers the next request
                                   * elsewhere moved it back) */
} bucket_maint_input;

typedef struct {
    int spawn;        /* children to start in free slots */
    int moved_in;     /* idle children of other buckets to move here */
    int moved_out;    /* idle children to move to other buckets */
    int stop;         /* surplus idle children to stop (0 or 1) */
    int idle_after;   /* idle units once all of the above is done */
    int report_busy;  /* gains at least BUCKET_BUSY_REPORT children */
    int starved;      /* short of idle children, and neither a free slot
                       * nor another bucket's idle child could be had */
} bucket_decision;

/* An idle child of bucket `from` leaves, and its slot gets a new child in
 * bucket `to`. */
typedef struct {
    int from;
    int to;
} bucket_move;

/* Counts idle and busy units per bucket over the first num_slots slots
 * (children on their way into a bucket count as `unit` idle units there;
 * a bucket out of range counts nowhere) and returns how many children may
 * start now: the empty slots below slot_limit (those past num_slots are
 * empty), but no more than max_children less the children counted. A
 * leaving child with no replacement holds its slot and counts against no
 * bucket: with slots to spare (ServerLimit above MaxRequestWorkers), a
 * restart's new children start beside the old ones still finishing. */
int bucket_census_tally(const slot_view *slots, int num_slots,
                        int slot_limit, int max_children, int num_buckets,
                        int unit, bucket_census *census);

/* A stalled bucket (policy_stall.h): nothing takes its connections,
 * whatever the scoreboard says, so its idle units count as busy and
 * maintenance treats it as a bucket with no idle child, one that may take
 * a child from another bucket even at the cost of that child's idle
 * keep-alive connections (their clients reconnect; a queue nobody serves
 * never answers). Units still arriving (a child moved in or starting) stay
 * idle: they will take the queue, so the bucket asks for no other child
 * meanwhile and steering keeps sending it connections rather than spread
 * them over buckets with no child to take them (issue 25: the free child
 * moved back and forth between two buckets every 300 ms). */
void bucket_census_stalled(bucket_census *census);

/* An idle child of `from` (unit units) asked to move to `to`: counted in
 * `to` from now on, arriving there, so that what the parent publishes for
 * steering right after the move sends connections where the child goes,
 * not where it leaves. */
void bucket_census_moved(bucket_census *census, int from, int to, int unit);

/* A bucket's idle units that a connection steered to it now finds
 * soon: all but those promised in slots an old child keeps a while yet,
 * and the old children kept accepting from its sockets for the handover.
 * Counting the promised ones, a restart adding a bucket had its first
 * child steered a share of connections made for the hundreds still to
 * come (at MaxRequestWorkers, 117 queued there for over a second in the
 * restart benchmark); leaving out the kept ones, the bucket they accept
 * for looked no idler than the added one while it had hundreds more. */
int bucket_census_steerable(const bucket_census *census);

/* A bucket's units ready to accept now that no connection in its accept
 * queues will take (what the steering program may hand out, one per
 * connection). Not those of children still on their way or in their
 * set-up: at a graceful restart raising BucketCount with every slot in
 * use, the added bucket's hundreds of children still starting were handed
 * out beside its first ready ones, and 92 connections waited there (the
 * likely cause: the log was at warn). They count where the program looks
 * once every such unit is taken (bucket_census_steerable()). */
int bucket_census_unclaimed(const bucket_census *census);

/* What BucketSteering load is told this pass, into `published` (which
 * holds what it was told last): the census as it is while some bucket has
 * a steerable unit. With none, the steering program falls back to the hash
 * and spreads the next clients over buckets whose children all hold
 * connections, each then waiting for the stall watch to move a child; at
 * MaxRequestWorkers a census often catches the one free child in a short
 * request. So for one such pass the last counts stay, stalled buckets' set
 * to none: the child last seen idle is the likeliest to be free next.
 * `carried`: the last counts were carried over already, or must not be (a
 * move changed them). Returns whether this pass's counts are carried. */
int bucket_census_to_publish(const bucket_census *census,
                             bucket_census *published, int num_buckets,
                             int carried);

/* Share MinSpare/MaxSpareServers (or Threads) out over buckets, keeping
 * every bucket at least one idle unit and max above min. */
bucket_spare_limits bucket_spare_share(int min_spare, int max_spare,
                                       int bucket, int num_buckets);

/*
 * One pass over every bucket. A bucket short of idle children gains up to its
 * spawn rate (which doubles per pass while it stays short, as in prefork):
 * from free slots first, buckets with no idle child served first; once the
 * slots run out, by moving idle children from other buckets, but only from a
 * bucket left with at least as many idle children as the one it gives to, and
 * only a child that holds no connection unless the bucket it goes to is
 * stalled: a move for a mere imbalance never closes a client's connection (an
 * HTTP/2 client that gets GOAWAY loses the requests it had not sent). A
 * stalled bucket also takes the last idle child of a bucket it covers (every
 * address of the giver is one of its own, so the giver's clients can be sent
 * to it): at MaxRequestWorkers the free child goes where a client waits, as
 * with one accept queue. A bucket
 * above its spare maximum stops one idle child, while the idle units of
 * all buckets together are above max_spare (prefork's count). Idle counts are in units; a
 * bucket's spare maximum is kept at least one child's units above its minimum,
 * so that stopping a child never makes a bucket short. spawn_rate (per bucket,
 * in and out) starts at 1. In a rescue pass, a bucket with no idle child gains
 * one the same way, and nothing else happens; with max_moves 0, only from a
 * free slot (a stop that serves on). decisions has num_buckets
 * entries; moves room for max_moves. Returns the number of moves written.
 */
int bucket_maint_decide(const bucket_maint_input *in, int *spawn_rate,
                        bucket_decision *decisions, bucket_move *moves,
                        int max_moves);

/* Children to start with a new generation: StartServers, but at least
 * BUCKET_MIN_CHILDREN per bucket, within MaxRequestWorkers. */
int bucket_start_children(int start_servers, int num_buckets,
                          int max_workers);

#endif /* POLICY_MAINT_H */
