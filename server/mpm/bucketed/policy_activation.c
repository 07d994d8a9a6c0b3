/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_activation.c: see policy_activation.h.
 */
#include "policy_activation.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "apr_strings.h"

/* A decimal number, whole string, no sign or space: what sd_listen_fds(3)
 * accepts. -1 when s is anything else. */
static long parse_count(const char *s)
{
    char *end;
    long v;

    if (s == NULL || *s < '0' || *s > '9') {
        return -1;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    return v;
}

static const char **split_names(apr_pool_t *p, const char *fdnames,
                                int count, const char **message)
{
    const char **names = apr_pcalloc(p, sizeof(*names) * count);
    char *copy, *field, *rest;
    int n = 0, i;

    for (i = 0; i < count; i++) {
        names[i] = "";
    }
    if (fdnames == NULL) {
        return names;
    }
    copy = apr_pstrdup(p, fdnames);
    /* Fields may be empty, so strtok, which skips them, will not do. */
    for (field = copy; field != NULL; field = rest) {
        rest = strchr(field, ':');
        if (rest != NULL) {
            *rest++ = '\0';
        }
        if (n < count) {
            names[n] = field;
        }
        n++;
    }
    if (n != count) {
        for (i = 0; i < count; i++) {
            names[i] = "";
        }
        *message = apr_psprintf(p, "LISTEN_FDNAMES has %d name(s) for %d "
                                "descriptor(s); the names are ignored", n,
                                count);
    }
    return names;
}

void activation_env_parse(apr_pool_t *p, const char *listen_pid,
                          const char *listen_fds, const char *fdnames,
                          long my_pid, long open_fd_limit,
                          activation_env *out)
{
    long pid, count, limit;

    memset(out, 0, sizeof(*out));
    if (listen_pid == NULL) {
        out->verdict = ACTIVATION_NONE;
        return;
    }
    pid = parse_count(listen_pid);
    if (pid != my_pid) {
        /* Meant for whoever set them, e.g. a wrapper that forked us. */
        out->verdict = ACTIVATION_OTHER_PID;
        out->message = apr_psprintf(p, "LISTEN_PID=%s is not this process "
                                    "(pid %ld): its sockets are not for this "
                                    "server, which binds its own",
                                    listen_pid, my_pid);
        return;
    }
    count = parse_count(listen_fds);
    limit = ACTIVATION_MAX_FDS;
    if (open_fd_limit > ACTIVATION_FIRST_FD
        && open_fd_limit - ACTIVATION_FIRST_FD < limit) {
        limit = open_fd_limit - ACTIVATION_FIRST_FD;
    }
    if (count < 1 || count > limit) {
        out->verdict = ACTIVATION_INVALID;
        out->message = apr_psprintf(p, "LISTEN_FDS=%s is not a number of "
                                    "descriptors from 1 to %ld: no passed "
                                    "socket is used, this server binds its "
                                    "own", listen_fds ? listen_fds
                                    : "(unset)", limit);
        return;
    }
    out->verdict = ACTIVATION_PASSED;
    out->count = (int)count;
    out->names = split_names(p, fdnames, out->count, &out->message);
}

const char *activation_fd_unusable(const passed_fd_kind *kind)
{
    if (!kind->is_socket) {
        return "not a socket";
    }
    if (kind->domain != AF_INET && kind->domain != AF_INET6) {
        return kind->domain == AF_UNIX ? "a unix socket, not TCP"
                                       : "not an IPv4 or IPv6 socket";
    }
    if (kind->type != SOCK_STREAM) {
        return kind->type == SOCK_DGRAM ? "a UDP socket, not TCP"
                                        : "not a stream socket";
    }
    if (!kind->listening) {
        return "a TCP socket that is not listening";
    }
    return NULL;
}

static apr_size_t address_length(int family)
{
    return family == APR_INET6 ? 16 : 4;
}

int socket_address_is_wildcard(const socket_address *a)
{
    static const unsigned char zeros[16] = { 0 };

    return memcmp(a->addr, zeros, address_length(a->family)) == 0;
}

int activation_address_matches(const socket_address *passed,
                               const socket_address *listen)
{
    return passed->family == listen->family
           && passed->port == listen->port
           && memcmp(passed->addr, listen->addr,
                     address_length(passed->family)) == 0;
}

static const char *address_text(apr_pool_t *p, const socket_address *a)
{
    char buf[INET6_ADDRSTRLEN];

    if (inet_ntop(a->family == APR_INET6 ? AF_INET6 : AF_INET, a->addr, buf,
                  sizeof(buf)) == NULL) {
        return "?";
    }
    return apr_pstrdup(p, buf);
}

const char *socket_address_describe(apr_pool_t *p, const socket_address *a)
{
    const char *text = address_text(p, a);

    return a->family == APR_INET6
           ? apr_psprintf(p, "[%s]:%u", text, (unsigned)a->port)
           : apr_psprintf(p, "%s:%u", text, (unsigned)a->port);
}

const char *activation_listen_stream(apr_pool_t *p, const socket_address *a,
                                     int has_ipv4_wildcard_twin)
{
    if (a->family == APR_INET6 && socket_address_is_wildcard(a)
        && has_ipv4_wildcard_twin) {
        return apr_psprintf(p, "ListenStream=%u", (unsigned)a->port);
    }
    return apr_pstrcat(p, "ListenStream=", socket_address_describe(p, a),
                       NULL);
}
