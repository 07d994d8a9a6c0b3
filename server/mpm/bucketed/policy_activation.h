/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_activation: listening sockets passed in by a service manager
 * (systemd's socket units, sd_listen_fds(3)): whether the environment
 * passes any to this process and how many, whether a passed descriptor is
 * a listening TCP socket, which Listen address it serves, and the
 * ListenStream= line a socket unit needs for a Listen address. Pure:
 * strings and numbers in, verdicts and messages out; listen_activation.c
 * reads the environment and the descriptors and acts.
 */
#ifndef POLICY_ACTIVATION_H
#define POLICY_ACTIVATION_H

#include "apr_network_io.h"
#include "apr_pools.h"

/* Passed descriptors start here (sd_listen_fds(3)). */
#define ACTIVATION_FIRST_FD 3

/* More than this many is taken for a corrupt LISTEN_FDS: a server has a
 * few Listen addresses, never thousands. */
#define ACTIVATION_MAX_FDS 1024

typedef enum {
    ACTIVATION_NONE,      /* nothing passed (no LISTEN_PID) */
    ACTIVATION_OTHER_PID, /* passed to another process: ignored */
    ACTIVATION_INVALID,   /* passed to us, but unusable: none adopted */
    ACTIVATION_PASSED     /* count descriptors from ACTIVATION_FIRST_FD */
} activation_verdict_e;

typedef struct {
    activation_verdict_e verdict;
    int count;                /* ACTIVATION_PASSED: descriptors passed */
    const char **names;       /* count entries (LISTEN_FDNAMES), "" when
                               * none were given or they do not fit */
    const char *message;      /* what an operator should read, or NULL */
} activation_env;

/* The three variables as read (NULL = unset); my_pid: this process;
 * open_fd_limit: descriptors the process may have (RLIMIT_NOFILE), which
 * passed ones cannot exceed. */
void activation_env_parse(apr_pool_t *p, const char *listen_pid,
                          const char *listen_fds, const char *fdnames,
                          long my_pid, long open_fd_limit,
                          activation_env *out);

/* What the parent found out about one passed descriptor. */
typedef struct {
    int is_socket;            /* fstat: S_ISSOCK */
    int domain;               /* SO_DOMAIN: AF_INET, AF_INET6, AF_UNIX... */
    int type;                 /* SO_TYPE: SOCK_STREAM, SOCK_DGRAM... */
    int listening;            /* SO_ACCEPTCONN */
    int reuseport;            /* SO_REUSEPORT */
} passed_fd_kind;

/* NULL when the descriptor is a listening TCP socket over IPv4 or IPv6,
 * else why it cannot serve a Listen address, in words. */
const char *activation_fd_unusable(const passed_fd_kind *kind);

/* An address as the kernel reports a socket bound to it: family, the
 * address bytes in network order (4 or 16), the port. Part of a retained
 * record whose layout never changes (listen_activation.c): frozen. */
typedef struct {
    int family;               /* APR_INET or APR_INET6 */
    unsigned char addr[16];
    apr_port_t port;
} socket_address;

/* A passed socket serves a Listen address when both name the same family,
 * address and port: Listen 80 is core's [::]:80 (with 0.0.0.0:80 folded
 * into it when the socket takes IPv4 too), so ListenStream=80 serves it. */
int activation_address_matches(const socket_address *passed,
                               const socket_address *listen);

/* "ListenStream=..." for a Listen address (systemd.socket(5)): a wildcard
 * IPv6 address whose IPv4 twin (same port) is also listened on becomes
 * the bare port, which systemd binds as [::] taking IPv4 too; others get
 * their address. */
const char *activation_listen_stream(apr_pool_t *p, const socket_address *a,
                                     int has_ipv4_wildcard_twin);

/* "127.0.0.1:80", "[::1]:80" for log lines and the status page. */
const char *socket_address_describe(apr_pool_t *p, const socket_address *a);

/* The wildcard address of its family. */
int socket_address_is_wildcard(const socket_address *a);

#endif /* POLICY_ACTIVATION_H */
