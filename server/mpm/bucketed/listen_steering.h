/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_steering.h: the eBPF programs and socket maps of the buckets'
 * sockets (listen_steering.c), and the steering entry points the rest of
 * the MPM calls (BucketSteering's choice, the idle counts, a child's
 * part).
 */
#ifndef LISTEN_STEERING_H
#define LISTEN_STEERING_H

#include "apr_network_io.h"
#include "ap_listen.h"

#include "bucketed.h"
#include "policy_maint.h"

/* The descriptor under an APR socket. */
int listen_socket_fd(apr_socket_t *sd);

/* Takes a listening socket out of its reuseport group: SHUT_RD is what
 * stops a listener on Linux, moving its queue to the group's other
 * sockets (5.14+, migration). 0 if it is out (already out: ENOTCONN),
 * else the errno of shutdown(). */
int listen_socket_leave_group(apr_socket_t *sd);

/* Attaches to every reuseport group of this generation's sockets its
 * program: the steering program where BucketSteering asks for one and it
 * loads, else the migration program where the kernel migrates;
 * group_migrates[i] and group_drains[i] say what each group then does
 * with a socket that goes. */
void listen_steering_attach(apr_pool_t *ptemp, server_rec *s,
                            bucketed_config *conf,
                            bucketed_retained *retained,
                            ap_listen_rec **originals, int num_listeners,
                            int *group_migrates, int *group_drains);

/* At a stop, before any socket is closed: every reuseport group whose
 * program migrates gets one that sends everything (new connections, and
 * the queues of the duplicates as they close) to its original socket, the
 * one a socket unit holds across the restart; where groups drain instead
 * (MIGRATION_DRAIN), new connections only. Returns how many groups got
 * it. */
int listen_steering_stop(server_rec *s, const bucketed_config *conf,
                         bucketed_retained *retained);

/* At the end of a stop, every socket gone but those a socket unit holds:
 * empties the socket maps, so that the held sockets can go into the next
 * server's maps (a socket can be in one map only; while it is in this
 * one, the next server's slot for it stays empty). */
void listen_steering_release(bucketed_retained *retained);

/* BucketSteering for this plan (runs the CPU trial once per generation
 * when cpu is asked for); NULL or the error. */
const char *bucket_listeners_choose_steering(apr_pool_t *p,
                                             bucketed_config *conf,
                                             int online_cpus);
/* Whether BucketSteering load is in force on every reuseport group, its
 * map of idle counts open: new connections then go where an idle unit
 * is (bucket_maint_input.steered_to_idle). */
int bucket_listeners_steer_to_idle(const bucketed_config *conf,
                                   const bucketed_retained *retained);
/* In the parent, after each census: BucketSteering load's idle counts. */
void bucket_listeners_publish_idle(bucketed_config *conf,
                                   bucketed_retained *retained,
                                   const bucket_census *census,
                                   int num_buckets);
/* In a child: the steering maps' descriptors closed (the parent alone
 * writes them). */
void bucket_listeners_child_close_maps(bucketed_retained *retained);

/* Bucket b's socket lr, listening again after its bucket left its
 * groups (listen_absence.c), back in slot `slot` of its steering map, if
 * its group has one. 0, or -1 after logging. */
int listen_steering_put_back(server_rec *s, bucketed_retained *retained,
                             int b, int slot, const ap_listen_rec *lr);

#endif /* LISTEN_STEERING_H */
