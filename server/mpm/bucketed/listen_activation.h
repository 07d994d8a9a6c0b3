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

/* In the process the service manager started, once, before anything else
 * opens a descriptor: reads LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES,
 * unsets them (children and CGIs must not take them for theirs), and
 * notes every passed descriptor that is a listening TCP socket. */
void listen_activation_read(server_rec *s, bucketed_retained *retained);

/* Before ap_setup_listeners(): each Listen record not yet open takes the
 * passed socket bound to its address. The first time, a passed socket
 * that serves no Listen address is logged and closed (the service manager
 * keeps its own). */
void listen_activation_adopt(server_rec *s, bucketed_retained *retained);

/* Whether the Listen address sa is served by a socket the service manager
 * passed (its original socket, that is; the buckets' duplicates are the
 * server's own). */
int listen_activation_serves(const bucketed_retained *retained,
                             const apr_sockaddr_t *sa);

/* Whether a service manager holds a socket this server serves (one was
 * passed in and adopted): it outlives the stop. */
int listen_activation_held(const bucketed_retained *retained);

/* What the kernel says descriptor fd is (fstat, SO_DOMAIN, SO_TYPE,
 * SO_ACCEPTCONN, SO_REUSEPORT): APR_SUCCESS, or the errno (EBADF: not
 * open). */
apr_status_t listen_inspect_fd(int fd, passed_fd_kind *kind);

/* `apache2 -t -D BUCKETED_LISTEN_STREAMS`: one ListenStream= line per
 * Listen address, on standard output, for a socket unit. */
void listen_activation_print_streams(apr_pool_t *p);

#endif /* LISTEN_ACTIVATION_H */
