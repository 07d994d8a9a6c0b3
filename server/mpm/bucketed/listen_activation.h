/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_activation: listening sockets a service manager holds for the
 * server (systemd's socket units; sd_listen_fds(3)) and passes to it at
 * every start, adopted for the Listen addresses they match before core
 * binds its own (listen_activation.c). Connections that arrive while the
 * server restarts wait in their accept queues instead of being refused.
 */
#ifndef LISTEN_ACTIVATION_H
#define LISTEN_ACTIVATION_H

#include "bucketed.h"
#include "policy_activation.h"

/* In the first pre_config, in the process the service manager started
 * and before core starts any program (a piped ErrorLog): reads LISTEN_PID,
 * LISTEN_FDS and LISTEN_FDNAMES and unsets them (children and CGIs must
 * not take them for theirs), sets close-on-exec on every passed
 * descriptor, as sd_listen_fds(3) does, and keeps each listening TCP
 * socket for the server's life. Once: later calls do nothing. What it
 * found is logged by the first listen_activation_adopt() (there is no
 * server_rec yet). */
void listen_activation_read(void);

/* Before ap_setup_listeners(), at every generation: each Listen record not
 * yet open takes a fresh duplicate of the kept socket bound to its
 * address, so core closing its copy when the Listen goes away loses
 * nothing, and the Listen can come back at a later reload. A kept socket
 * that serves no Listen address is logged and stays kept. */
void listen_activation_adopt(server_rec *s, bucketed_retained *retained);

/* Whether the Listen address sa is served by a socket the service manager
 * passed (its original socket, that is; the buckets' duplicates are the
 * server's own). */
int listen_activation_serves(const apr_sockaddr_t *sa);

/* Whether a service manager holds a socket this generation serves: it
 * outlives the stop. */
int listen_activation_held(void);

/* Whether descriptor fd is the parent's kept copy of a passed socket (the
 * same socket, not a reused number). */
int listen_activation_keeps(int fd);

/* In a process forked from the parent (a child, mod_cgid's daemon), which
 * must not keep the sockets past the parent: closes the kept copies;
 * returns how many. */
int listen_activation_close_kept(server_rec *s);

/* What the kernel says descriptor fd is (fstat, SO_DOMAIN, SO_TYPE,
 * SO_ACCEPTCONN, SO_REUSEPORT): APR_SUCCESS, or the errno (EBADF: not
 * open). */
apr_status_t listen_inspect_fd(int fd, passed_fd_kind *kind);

/* The IPv4 or IPv6 address socket fd is bound to, into a: 0, or -1 with
 * errno set (EAFNOSUPPORT for another family). */
int listen_bound_address(int fd, socket_address *a);

/* `apache2 -t -D BUCKETED_LISTEN_STREAMS`: one ListenStream= line per
 * Listen address, on standard output, for a socket unit. */
void listen_activation_print_streams(apr_pool_t *p);

#endif /* LISTEN_ACTIVATION_H */
