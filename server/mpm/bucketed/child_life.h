/* SPDX-License-Identifier: Apache-2.0 */
/*
 * child_life: the life of a child process, the same for both child models:
 * start (pool, only its bucket's sockets kept, steering), the model's own
 * set-up, privileges dropped, leaving with a parent that is gone, the
 * modules' child_init, serving, and the exit (child_stopping hooks, pool
 * cleanups). A child model supplies only what differs: how it takes
 * signals, what it sets up, and how it serves (prefork_child.c,
 * event_child.c).
 */
#ifndef CHILD_LIFE_H
#define CHILD_LIFE_H

#include <signal.h>

#include "apr_atomic.h"
#include "apr_pools.h"

#include "bucketed.h"

typedef struct child_life {
    server_rec *s;
    bucketed_config *conf;
    bucketed_retained *retained;
    int slot;
    int bucket;
    apr_pool_t *pchild;              /* NULL until created */
    /* Written from signal handlers and threads: apr_atomic only. */
    volatile apr_uint32_t leaving;   /* graceful: finish and go */
    volatile apr_uint32_t dying;     /* SIGTERM or SIGHUP: go now */
    volatile apr_uint32_t exiting;   /* child_life_exit() has begun */
    void *model;                     /* the model's own context */
    /* The prefork model's connection being served, NULL between
     * connections (child_life_mpm_state()); NULL in the event model. */
    conn_rec *serving;
} child_life;

typedef struct {
    /* The size of the model's context (life->model, zeroed). */
    apr_size_t context_size;
    /* First thing in the new process: its signal arrangement. */
    void (*take_signals)(child_life *life);
    /* Once the pool exists and only the bucket's sockets are left, as
     * root still: APR_SUCCESS, or the error whose kind decides the exit
     * (child_setup_exit_code()). */
    apr_status_t (*set_up)(child_life *life);
    /* Serves until the child leaves; returns the exit code. Sets
     * *clean to 0 when the pool must not be destroyed (threads still
     * running in it). */
    int (*serve)(child_life *life, int *clean);
} child_model;

/* Runs a child's whole life in `model`; never returns. parent: the pid
 * of the parent process, 0 when the parent itself serves (-X). */
void child_life_run(const child_model *model, server_rec *s,
                    bucketed_config *conf, bucketed_retained *retained,
                    int slot, int bucket, pid_t parent)
    __attribute__((noreturn));

/* AP_MPMQ_MPM_STATE as this process answers it: STOPPING in a child that
 * is leaving or dying, or that the parent has asked to leave, or while a
 * stop on held sockets lets it serve on (bucket_stats_closing()), so that
 * every response says "Connection: close" (a client then sends nothing
 * more on a connection the child is about to close); the parent's state
 * elsewhere. Except where a response already promised keep-alive: a
 * leaving prefork-model child that http_core asks right after such a
 * response (life->serving, HTTP/1.x, still keep-alive, the worker marked
 * waiting for the next request) answers RUNNING, so that it waits for
 * that request (KeepAliveTimeout at most) and answers it, rather than
 * closing the connection as the client may be sending it. Any thread. */
int child_life_mpm_state(const bucketed_retained *retained);

/* Ends the process: child_stopping hooks, then, when clean, the pool's
 * cleanups (buffered logs written). Sets `exiting` first: a stop signal's
 * handler that lands in the exit sees it and leaves the exit alone. */
void child_life_exit(child_life *life, int code, int clean)
    __attribute__((noreturn));

/* Whether the parent has asked the child to leave: it marks the slot
 * quiescing as it signals, and a child looks after each connection in
 * case the signal came where nothing saw it. Not whether the generation
 * is over: at a graceful restart, old children kept for the handover
 * (policy_handover.h) serve until they are asked. */
int child_life_slot_quiescing(const child_life *life);

#define CHILD_LIFE_SET(life, flag) apr_atomic_set32(&(life)->flag, 1)
#define CHILD_LIFE_IS(life, flag) (apr_atomic_read32(&(life)->flag) != 0)

/* Fills set with the signals that ask a child to leave (AP_SIG_GRACEFUL,
 * AP_SIG_GRACEFUL_STOP, SIGINT) and, with stop, also with those that stop
 * it (SIGTERM, SIGHUP). */
void child_signal_set(sigset_t *set, int stop);

/* Makes set the process's signal mask: its signals blocked, every other
 * one open. A failure is logged. */
void child_signal_mask(const sigset_t *set);

/* handler for sig, with mask blocked while it runs and sa_flags `flags`.
 * A failure is logged. */
void child_signal_handle(int sig, void (*handler)(int), const sigset_t *mask,
                         int flags);

/* The exit code of a child whose set-up failed with rv: APEXIT_CHILDSICK
 * (logged) when the failure can pass (policy_exit: a shortage), else
 * APEXIT_CHILDFATAL. */
int child_setup_exit_code(server_rec *s, int bucket, apr_status_t rv);

/* A pool with an allocator of its own (MaxMemFree applied), for one
 * thread at a time; the allocator goes with the pool. */
apr_status_t child_pool_with_allocator(apr_pool_t **p, apr_pool_t *parent,
                                       const char *tag);

/* The two child models (prefork_child.c, event_child.c). */
extern const child_model prefork_child_model;
extern const child_model event_child_model;

#endif /* CHILD_LIFE_H */
