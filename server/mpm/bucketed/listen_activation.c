/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_activation.c: see listen_activation.h. Core binds a Listen
 * record unless it is already active (open_listeners() counts those and
 * moves on), and a graceful restart carries active records over, so a
 * passed socket adopted here serves its address for the life of the
 * parent; a graceful stop closes the parent's copy, and the service
 * manager's copy keeps the socket, and its queue, alive for the next
 * start.
 */
#include "listen_activation.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apr_portable.h"
#include "apr_strings.h"

#include "http_log.h"

#include "listen_steering.h"
#include "policy_activation.h"

APLOG_USE_MODULE(mpm_bucketed);

struct passed_socket {
    int fd;
    socket_address address;
    const char *name;            /* its LISTEN_FDNAMES entry, or "" */
    int reuseport;               /* SO_REUSEPORT was on when passed */
    int adopted;                 /* serves a Listen address */
    int settled;                 /* adopted, or logged and closed */
};

static void address_from_sockaddr(const struct sockaddr_storage *ss,
                                  socket_address *a)
{
    memset(a, 0, sizeof(*a));
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        a->family = APR_INET6;
        memcpy(a->addr, &in6->sin6_addr, 16);
        a->port = ntohs(in6->sin6_port);
    }
    else {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)ss;
        a->family = APR_INET;
        memcpy(a->addr, &in4->sin_addr, 4);
        a->port = ntohs(in4->sin_port);
    }
}

static void address_from_apr(const apr_sockaddr_t *sa, socket_address *a)
{
    memset(a, 0, sizeof(*a));
    a->family = sa->family;
    memcpy(a->addr, sa->ipaddr_ptr, sa->family == APR_INET6 ? 16 : 4);
    a->port = sa->port;
}

static int int_option(int fd, int level, int name, int *value)
{
    socklen_t len = sizeof(*value);

    *value = 0;
    return getsockopt(fd, level, name, value, &len);
}

apr_status_t listen_inspect_fd(int fd, passed_fd_kind *kind)
{
    struct stat st;

    memset(kind, 0, sizeof(*kind));
    if (fstat(fd, &st) < 0) {
        return errno;
    }
    kind->is_socket = S_ISSOCK(st.st_mode);
    if (!kind->is_socket) {
        return APR_SUCCESS;
    }
    if (int_option(fd, SOL_SOCKET, SO_DOMAIN, &kind->domain) < 0
        || int_option(fd, SOL_SOCKET, SO_TYPE, &kind->type) < 0
        || int_option(fd, SOL_SOCKET, SO_ACCEPTCONN, &kind->listening) < 0
        || int_option(fd, SOL_SOCKET, SO_REUSEPORT, &kind->reuseport) < 0) {
        return errno;
    }
    return APR_SUCCESS;
}

static long open_fd_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY) {
        return 0;   /* unknown: activation_env_parse's own bound */
    }
    return (long)rl.rlim_cur;
}

/* Fills ps from fd, or logs why fd cannot serve and returns 0. A
 * descriptor that is no listening socket is left open: LISTEN_FDS may name
 * more than were passed, and the rest belong to this process. */
static int take_passed(server_rec *s, apr_pool_t *p, int fd,
                       const char *name, struct passed_socket *ps)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    passed_fd_kind kind;
    const char *why;
    apr_status_t rv;

    rv = listen_inspect_fd(fd, &kind);
    why = rv == EBADF ? "not an open descriptor"
          : rv != APR_SUCCESS ? "its kind could not be read"
          : activation_fd_unusable(&kind);
    if (why == NULL && getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        rv = errno;
        why = "getsockname() failed";
    }
    if (why != NULL) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, rv, s,
                     BKLOGNO(00129) "bucketed: passed descriptor %d%s%s%s "
                     "is %s: not used", fd, *name ? " (\"" : "", name,
                     *name ? "\")" : "", why);
        return 0;
    }
    ps->fd = fd;
    ps->name = apr_pstrdup(p, name);
    address_from_sockaddr(&ss, &ps->address);
    ps->reuseport = kind.reuseport;
    return 1;
}

void listen_activation_read(server_rec *s, bucketed_retained *retained)
{
    apr_pool_t *p = s->process->pool;
    activation_env env;
    int i;

    if (retained->activation_read) {
        return;
    }
    retained->activation_read = 1;
    activation_env_parse(p, getenv("LISTEN_PID"), getenv("LISTEN_FDS"),
                         getenv("LISTEN_FDNAMES"), (long)getpid(),
                         open_fd_limit(), &env);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (env.message != NULL) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                     BKLOGNO(00130) "bucketed: socket activation: %s",
                     env.message);
    }
    if (env.verdict != ACTIVATION_PASSED) {
        return;
    }
    retained->passed = apr_pcalloc(p, sizeof(*retained->passed) * env.count);
    for (i = 0; i < env.count; i++) {
        struct passed_socket *ps = &retained->passed[retained->num_passed];

        if (take_passed(s, p, ACTIVATION_FIRST_FD + i, env.names[i], ps)) {
            retained->num_passed++;
        }
    }
}

/* ps as the APR socket of lr, in place of the unbound one core made. */
static apr_status_t adopt_one(server_rec *s, ap_listen_rec *lr,
                              struct passed_socket *ps)
{
    apr_pool_t *p = s->process->pool;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    apr_os_sock_info_t info;
    apr_os_sock_t fd = ps->fd;
    apr_socket_t *sd;
    int flags;
    apr_status_t rv;

    if (getsockname(ps->fd, (struct sockaddr *)&ss, &len) < 0) {
        return errno;
    }
    /* APR takes a made socket for blocking and without close-on-exec: make
     * the descriptor so, or a blocking accept() would return EAGAIN and
     * every CGI would hold the socket. */
    flags = fcntl(ps->fd, F_GETFL);
    if (flags < 0 || fcntl(ps->fd, F_SETFL, flags & ~O_NONBLOCK) < 0
        || fcntl(ps->fd, F_SETFD, FD_CLOEXEC) < 0) {
        return errno;
    }
    memset(&info, 0, sizeof(info));
    info.os_sock = &fd;
    info.local = (struct sockaddr *)&ss;
    info.family = lr->bind_addr->family;
    info.type = SOCK_STREAM;
    info.protocol = APR_PROTO_TCP;
    rv = apr_os_sock_make(&sd, &info, p);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    apr_socket_close(lr->sd);
    lr->sd = sd;
    lr->active = 1;
    ps->adopted = 1;
    ps->settled = 1;
    return APR_SUCCESS;
}

static void adopt_for(server_rec *s, bucketed_retained *retained,
                      ap_listen_rec *lr)
{
    socket_address want;
    int i;

    address_from_apr(lr->bind_addr, &want);
    for (i = 0; i < retained->num_passed; i++) {
        struct passed_socket *ps = &retained->passed[i];
        apr_status_t rv;

        if (ps->settled || !activation_address_matches(&ps->address, &want)) {
            continue;
        }
        rv = adopt_one(s, lr, ps);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, rv, s,
                         BKLOGNO(00131) "bucketed: cannot adopt the passed "
                         "socket (descriptor %d) for %pI; binding one",
                         ps->fd, lr->bind_addr);
            continue;
        }
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00132)
                     "bucketed: Listen %pI uses the socket passed by the "
                     "service manager (descriptor %d%s%s%s)", lr->bind_addr,
                     ps->fd, *ps->name ? ", \"" : "", ps->name,
                     *ps->name ? "\"" : "");
        if (!ps->reuseport) {
            ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                         BKLOGNO(00133) "bucketed: the socket passed for "
                         "%pI has no SO_REUSEPORT (ReusePort=yes in its "
                         "socket unit): bucketed sets it when a bucket "
                         "needs a socket of its own there, so that the "
                         "buckets' sockets join its group", lr->bind_addr);
        }
        return;
    }
}

/* Whether lr is the wildcard address of family. */
static int is_wildcard_of(const ap_listen_rec *lr, int family)
{
    socket_address a;

    address_from_apr(lr->bind_addr, &a);
    return a.family == family && socket_address_is_wildcard(&a);
}

/* Core takes IPv4 on a port from an open [::] socket that is not IPv6-only
 * by skipping the 0.0.0.0 record right after it, and binds [::] before
 * 0.0.0.0 by swapping the two when 0.0.0.0 comes first, then binding
 * whatever is in front: with an adopted [::] socket that would bind it
 * again. So the 0.0.0.0 twin (not passed itself) goes right after it. */
static void order_wildcard_twin(server_rec *s, ap_listen_rec *v6)
{
    ap_listen_rec **link, *twin = NULL;
    int v6only = 0;
    socklen_t len = sizeof(v6only);

    for (link = &ap_listeners; *link; link = &(*link)->next) {
        if (!(*link)->active && is_wildcard_of(*link, APR_INET)
            && (*link)->bind_addr->port == v6->bind_addr->port) {
            twin = *link;
            *link = twin->next;
            break;
        }
    }
    if (twin == NULL) {
        return;
    }
    twin->next = v6->next;
    v6->next = twin;
    if (getsockopt(listen_socket_fd(v6->sd), IPPROTO_IPV6, IPV6_V6ONLY,
                   &v6only, &len) == 0 && v6only) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                     BKLOGNO(00139) "bucketed: the socket passed for %pI "
                     "takes IPv6 only, and core serves IPv4 on that port "
                     "from it: IPv4 clients are not served there; pass "
                     "an IPv4 socket too (ListenStream=0.0.0.0:%u) or "
                     "use BindIPv6Only=both", v6->bind_addr,
                     (unsigned)v6->bind_addr->port);
    }
}

void listen_activation_adopt(server_rec *s, bucketed_retained *retained)
{
    ap_listen_rec *lr;
    int i;

    if (retained->num_passed == 0) {
        return;
    }
    for (lr = ap_listeners; lr; lr = lr->next) {
        if (!lr->active && lr->bind_addr != NULL) {
            adopt_for(s, retained, lr);
        }
    }
    for (lr = ap_listeners; lr; lr = lr->next) {
        if (lr->active && is_wildcard_of(lr, APR_INET6)
            && listen_activation_serves(retained, lr->bind_addr)) {
            order_wildcard_twin(s, lr);
        }
    }
    for (i = 0; i < retained->num_passed; i++) {
        struct passed_socket *ps = &retained->passed[i];

        if (ps->settled) {
            continue;
        }
        ps->settled = 1;
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                     BKLOGNO(00134) "bucketed: the passed socket %s "
                     "(descriptor %d%s%s%s) matches no Listen address: "
                     "closed here (the service manager keeps its own); "
                     "add a Listen for it or remove it from the socket unit",
                     socket_address_describe(s->process->pool, &ps->address),
                     ps->fd, *ps->name ? ", \"" : "", ps->name,
                     *ps->name ? "\"" : "");
        if (close(ps->fd) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00135)
                         "bucketed: close() of passed descriptor %d",
                         ps->fd);
        }
    }
}

int listen_activation_held(const bucketed_retained *retained)
{
    int i;

    for (i = 0; i < retained->num_passed; i++) {
        if (retained->passed[i].adopted) {
            return 1;
        }
    }
    return 0;
}

int listen_activation_serves(const bucketed_retained *retained,
                             const apr_sockaddr_t *sa)
{
    socket_address a;
    int i;

    address_from_apr(sa, &a);
    for (i = 0; i < retained->num_passed; i++) {
        if (retained->passed[i].adopted
            && activation_address_matches(&retained->passed[i].address,
                                          &a)) {
            return 1;
        }
    }
    return 0;
}

/* Whether the wildcard address of family is listened on at port. */
static int has_wildcard(int family, apr_port_t port)
{
    ap_listen_rec *lr;

    for (lr = ap_listeners; lr; lr = lr->next) {
        socket_address a;

        address_from_apr(lr->bind_addr, &a);
        if (a.family == family && a.port == port
            && socket_address_is_wildcard(&a)) {
            return 1;
        }
    }
    return 0;
}

void listen_activation_print_streams(apr_pool_t *p)
{
    ap_listen_rec *lr;

    for (lr = ap_listeners; lr; lr = lr->next) {
        socket_address a;
        int wildcard;

        address_from_apr(lr->bind_addr, &a);
        wildcard = socket_address_is_wildcard(&a);
        /* The IPv4 wildcard beside an IPv6 one is in its bare port. */
        if (a.family == APR_INET && wildcard
            && has_wildcard(APR_INET6, a.port)) {
            continue;
        }
        printf("%s\n", activation_listen_stream(p, &a,
                   a.family == APR_INET6 && wildcard
                   && has_wildcard(APR_INET, a.port)));
    }
    fflush(stdout);
}
