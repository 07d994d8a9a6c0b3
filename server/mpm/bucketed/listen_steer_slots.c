/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_steer_slots.c: see listen_steer_slots.h.
 */
#include "listen_steer_slots.h"

#include <errno.h>

#include "apr_time.h"

#include "http_log.h"

#include "sys_bpf.h"

APLOG_USE_MODULE(mpm_bucketed);

/* How long a socket found in a socket map another program keeps is tried
 * again, once that program is replaced, and how often: the kernel frees
 * the old map an RCU grace period or two later (13-16 ms measured on
 * 6.18). */
#define STEER_OLD_MAP_WAIT apr_time_from_sec(2)
#define STEER_OLD_MAP_POLL apr_time_from_msec(5)

steer_slot_outcome steer_slot_place(const retained_map *rm, int slot,
                                    int sock_fd, int *err)
{
    int holds = 0;

    *err = reuseport_bpf_sockarray_set(rm->fd, slot, sock_fd);
    if (*err == EBUSY) {
        int looked = reuseport_bpf_sockarray_holds(rm->fd, slot, sock_fd,
                                                   &holds);
        if (looked != 0) {
            *err = looked;
            return STEER_SLOT_FAILED;
        }
    }
    return steer_slot_outcome_of(*err, holds);
}

/* The sockets of one group found in another socket map, put in their
 * slots of rm now that this generation's program, attached to their
 * group, has replaced the one that kept the other map alive. Each is
 * tried until the kernel has freed that map, for at most
 * STEER_OLD_MAP_WAIT in all. */
void steer_slots_place_when_freed(server_rec *s, const retained_map *rm,
                                  const held_elsewhere *held)
{
    apr_time_t deadline = apr_time_now() + STEER_OLD_MAP_WAIT;
    steer_slot_outcome outcome;
    int err;

    for (; held; held = held->next) {
        while ((outcome = steer_slot_place(rm, held->slot, held->fd, &err))
                   == STEER_SLOT_HELD_ELSEWHERE
               && apr_time_now() < deadline) {
            apr_sleep(STEER_OLD_MAP_POLL);
        }
        if (outcome == STEER_SLOT_PLACED) {
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00250)
                         "bucketed: the socket for %s in slot %d was in "
                         "another socket map (one a server that exited "
                         "without its stop left on its reuseport group); "
                         "it is in this generation's now", rm->key,
                         held->slot);
        }
        else {
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00251)
                         "bucketed: the socket for %s stays out of slot %d "
                         "of its socket map, having been in another (with "
                         "EBUSY: another process still keeps that one, a "
                         "server still stopping?); the kernel's hash picks "
                         "for that slot", rm->key,
                         held->slot);
        }
    }
}
