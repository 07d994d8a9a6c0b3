/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_absence.h: a bucket with no child leaving its reuseport groups
 * and coming back (listen_absence.c); the decisions are
 * policy_steering.h's bucket_absence.
 */
#ifndef LISTEN_ABSENCE_H
#define LISTEN_ABSENCE_H

#include "httpd.h"

#include "bucketed.h"

/* Bucket b's planned sockets leave their reuseport groups (shutdown:
 * what is queued on them moves to the group's other sockets, where the
 * kernel migrates) and their steering maps: a bucket with no child. 0, or
 * -1 after logging, every socket then listening again. */
int bucket_listeners_leave(server_rec *s, const bucketed_config *conf,
                           bucketed_retained *retained, int b);

/* In the parent, puts them back: listening, in their groups and their
 * slots of the steering maps; once a child of the bucket is ready (it
 * listened on them), and before a generation ends. 0, or -1 after
 * logging. */
int bucket_listeners_rejoin(server_rec *s, const bucketed_config *conf,
                            bucketed_retained *retained, int b);

/* In a child of bucket b, its set-up done: listens again on those of its
 * sockets that were shut down, putting them back into their groups; their
 * map slots wait for the parent (it holds the maps). 0, or -1 after
 * logging. */
int bucket_listeners_listen_again(server_rec *s,
                                  const bucketed_config *conf,
                                  bucketed_retained *retained, int b);

#endif /* LISTEN_ABSENCE_H */
