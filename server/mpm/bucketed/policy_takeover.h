/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_takeover: after a graceful restart onto a build that cannot read
 * the old build's state (policy_upgrade.h), which of the parent's children
 * the new build takes over as its old generation, whether one it took is
 * still that child, and which of the parent's listening sockets it
 * closes. The facts come from the kernel (sys_proc.c), and from records
 * in the parent's own memory that the old build left (parent_record.c);
 * never from the scoreboard alone, which any child can write. Pure.
 */
#ifndef POLICY_TAKEOVER_H
#define POLICY_TAKEOVER_H

#include <sys/types.h>

#include "apr.h"

/* What the kernel says of a process. */
typedef struct {
    int found;                  /* /proc/<pid>/stat was read */
    int zombie;
    pid_t parent;
    apr_uint64_t start_ticks;   /* its start, in clock ticks after boot */
    uid_t real_uid;
    uid_t effective_uid;
    int holds_listener;         /* it holds one of the parent's listening
                                 * sockets (asked only without a record) */
} process_facts;

typedef enum {
    TAKE_OVER,
    REFUSE_GONE,                /* no such process, or a zombie */
    REFUSE_NOT_CHILD,           /* not the parent's child */
    REFUSE_OTHER_PROCESS,       /* another start time: the pid was reused */
    REFUSE_OTHER_USER,          /* not running as User */
    REFUSE_TOO_NEW,             /* started after the restart began */
    REFUSE_NOT_WORKER           /* holds none of the listening sockets */
} takeover_verdict_e;

/* A child the old build recorded as its own (pid and start time, in the
 * parent's memory): still that process, and still the parent's child.
 * Also the check, before every signal and count, that a child taken over
 * is still the one it was. */
takeover_verdict_e takeover_judge_recorded(const process_facts *f,
                                           pid_t parent,
                                           apr_uint64_t recorded_start);

/* A pid found only in the scoreboard (an old build that kept no record):
 * the parent's child, running as User (real and effective), started
 * before the restart began (restart_ticks), and holding one of the
 * parent's listening sockets, which a worker child has and mod_cgid's
 * daemon, piped loggers and other helpers do not. */
takeover_verdict_e takeover_judge_unrecorded(const process_facts *f,
                                             pid_t parent, uid_t user,
                                             apr_uint64_t restart_ticks);

/* A few words for the log. */
const char *takeover_verdict_name(takeover_verdict_e v);

/* What the parent knows of one of its descriptors. */
typedef struct {
    int reuseport_listener;     /* a listening TCP socket, SO_REUSEPORT */
    int core_owned;             /* one of core's listeners */
    int recorded;               /* the old build left a record of the
                                 * sockets it opened */
    int in_record;              /* recorded: this descriptor is one of
                                 * them, the same socket (inode) */
    int on_listen_address;      /* bound to an address a Listen names */
    int kept_passed;            /* the parent's kept copy of a socket a
                                 * service manager passed in */
} socket_facts;

/* Whether the take-over closes the descriptor: with a record, only a
 * socket the old build opened; without, only a reuseport listener on an
 * address this configuration listens on (where the old build's
 * duplicates were), never core's nor a passed socket the parent keeps
 * (the service manager holds it; a reload may bring its Listen back). */
int takeover_closes_socket(const socket_facts *f);

#endif /* POLICY_TAKEOVER_H */
