/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_record: what every build, from layout 5 on, leaves at each
 * restart for the next build, in httpd's retained data under a key and a
 * layout that never change (frozen, as bucketed_data.c's header is): the
 * parent's worker children and the listening sockets the MPM opened. It
 * is the parent's own memory (children get copies), so a build that
 * cannot read the old build's state can still trust it
 * (parent_takeover.c).
 */
#ifndef PARENT_RECORD_H
#define PARENT_RECORD_H

#include "bucketed.h"

/* Frozen: every build, past and future, reads these as they are. */
typedef struct {
    apr_int64_t pid;
    apr_uint64_t start_ticks;        /* /proc/<pid>/stat field 22 */
    apr_int32_t slot;
    apr_int32_t reserved;
} recorded_child;

typedef struct {
    apr_int64_t fd;
    apr_uint64_t inode;              /* fstat's st_ino of the socket */
} recorded_socket;

typedef struct {
    apr_uint32_t magic;
    apr_uint32_t version;            /* 1: this layout */
    apr_int64_t generation;          /* the generation it was left for */
    apr_int32_t num_children;
    apr_int32_t children_room;
    apr_int32_t num_sockets;
    apr_int32_t sockets_room;
    recorded_child *children;
    recorded_socket *sockets;
} takeover_record;

/* At a restart, once the children that go have gone: the slot table's
 * children and the kept sockets, for generation (the next one). */
void parent_record_write(server_rec *s, const bucketed_retained *retained,
                           ap_generation_t generation);
/* The record the old build left for generation, or NULL (a build from
 * before the record, or one left for another generation). */
const takeover_record *parent_record_find(ap_generation_t generation);

#endif /* PARENT_RECORD_H */
