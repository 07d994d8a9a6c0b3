/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_steer_slots: putting a bucket's socket in its slot of its
 * address's socket map (listen_steer_slots.c), including a socket the
 * kernel says is in another map already (EBUSY): one a server that
 * exited without its stop left on the group, which is freed once this
 * generation's program replaces the one keeping it.
 */
#ifndef LISTEN_STEER_SLOTS_H
#define LISTEN_STEER_SLOTS_H

#include "bucketed.h"

/* A socket found in a socket map no one here holds, to go into its slot
 * of ours once this generation's program has replaced the one keeping
 * that map. */
typedef struct held_elsewhere held_elsewhere;
struct held_elsewhere {
    held_elsewhere *next;
    int slot;
    int fd;
};

/* Puts the socket sock_fd in slot `slot` of rm (policy_steering.h,
 * steer_slot_outcome_of); *err is the errno of a failure. */
steer_slot_outcome steer_slot_place(const retained_map *rm, int slot,
                                    int sock_fd, int *err);

/* The sockets of one group found in another socket map, put in their
 * slots of rm now that this generation's program, attached to their
 * group, has replaced the one that kept the other map alive; each logged
 * as placed or left out. */
void steer_slots_place_when_freed(server_rec *s, const retained_map *rm,
                                  const held_elsewhere *held);

#endif /* LISTEN_STEER_SLOTS_H */
