/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_proc: what the kernel says of a process and of a descriptor
 * (/proc, fstat), for the take-over's checks (policy_takeover.h) and the
 * stall watch's looks (parent_slots.c).
 */
#ifndef SYS_PROC_H
#define SYS_PROC_H

#include "apr.h"
#include "apr_errno.h"

#include "policy_takeover.h"

/* Fills f (all but holds_listener); f->found is 0 when the process is
 * gone (APR_SUCCESS all the same). */
apr_status_t proc_read_facts(pid_t pid, process_facts *f);
/* Whether pid holds a socket of one of the n inodes. */
int proc_holds_socket(pid_t pid, const apr_uint64_t *inodes, int n);
/* Now, in the clock ticks of a process's start time (CLOCK_BOOTTIME). */
apr_status_t proc_ticks_now(apr_uint64_t *ticks);
/* The bit of signal sig (1 to 64) in a pending mask. */
#define PROC_SIGNAL_BIT(sig) ((apr_uint64_t)1 << ((sig) - 1))
/* Whether a signal of `bits` waits for delivery to process pid or to its
 * first thread (ShdPnd, SigPnd in /proc/<pid>/status): one sent with
 * kill() and blocked, or a SIGKILL the process has not run to take yet. 0
 * when unknown (the process gone). */
int proc_signals_pending(pid_t pid, apr_uint64_t bits);
/* The inode of the socket fd is, or 0 when it is none. */
apr_uint64_t proc_socket_inode(int fd);

#endif /* SYS_PROC_H */
