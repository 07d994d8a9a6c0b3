/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_activation.c: see listen_activation.h. Core binds a Listen
 * record unless it is already active (open_listeners() counts those and
 * moves on), and a graceful restart carries active records over. Core
 * closes a record's socket when its Listen goes away, so a Listen record
 * never gets the passed socket itself: the parent keeps that (its own
 * descriptor, close-on-exec) for its whole life, and each record takes a
 * duplicate of it. A graceful stop closes the parent's copies; the
 * service manager's copy keeps the socket, and its queue, alive for the
 * next start.
 *
 * What was passed is kept in retained data of its own, whose layout never
 * changes (activation_record), so that a build with another layout of
 * bucketed_retained, loaded by a graceful restart, still finds it.
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
#include "http_main.h"

#include "listen_steering.h"
#include "policy_activation.h"

APLOG_USE_MODULE(mpm_bucketed);

#define ACTIVATION_KEY "mpm_bucketed_activation"
#define ACTIVATION_MAGIC 0x424b4c41u     /* "BKLA" */
/* Later versions only append fields to activation_record, so that a build
 * reads the record of any version from its own up. */
#define ACTIVATION_VERSION 1u

/* One passed descriptor. Frozen: a record of any version holds an array of
 * these, so a later version that needs more about each descriptor adds
 * an array of its own. */
typedef struct {
    int fd;                      /* the kept socket (close-on-exec), or -1:
                                  * not a listening TCP socket, or lost */
    apr_uint64_t dev;            /* what fstat() said of it when passed, */
    apr_uint64_t ino;            /* to tell it from a reused number */
    socket_address address;
    const char *name;            /* its LISTEN_FDNAMES entry, or "" */
    const char *unusable;        /* why it serves no Listen, or NULL */
    apr_status_t status;         /* the error behind unusable, or 0 */
    int reuseport;               /* SO_REUSEPORT was on when passed */
    int serving;                 /* a Listen of this generation uses it */
} passed_fd;

/* Frozen, as bucketed_data.c's state header; in the process pool. */
typedef struct {
    apr_uint32_t magic;
    apr_uint32_t version;
    const char *message;         /* what the environment said, for the
                                  * log, or NULL */
    int logged;                  /* message and unusable ones logged */
    int count;                   /* descriptors passed (LISTEN_FDS) */
    passed_fd *fds;
} activation_record;

static activation_record *activation_get(void)
{
    activation_record *rec = ap_retained_data_get(ACTIVATION_KEY);

    return rec != NULL && rec->magic == ACTIVATION_MAGIC
           && rec->version >= ACTIVATION_VERSION ? rec : NULL;
}

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

int listen_bound_address(int fd, socket_address *a)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    memset(&ss, 0, sizeof(ss));
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        return -1;
    }
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    address_from_sockaddr(&ss, a);
    return 0;
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

/* Whether descriptor fd is the socket pf was passed as: a number closed
 * elsewhere may name another file since. */
static int is_passed_socket(int fd, const passed_fd *pf)
{
    struct stat st;

    return fd >= 0 && fstat(fd, &st) == 0 && (apr_uint64_t)st.st_dev == pf->dev
           && (apr_uint64_t)st.st_ino == pf->ino;
}

/* Fills pf from descriptor fd, just passed: close-on-exec, whatever it is
 * (sd_listen_fds(3) does the same), and kept if it is a listening TCP
 * socket. Anything else is left open (LISTEN_FDS may name more than were
 * passed, and the rest belong to this process) with why it cannot serve. */
static void take_passed(apr_pool_t *p, int fd, const char *name,
                        passed_fd *pf)
{
    passed_fd_kind kind;
    struct stat st;
    int flags;

    pf->fd = -1;
    pf->name = apr_pstrdup(p, name);
    flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
        pf->status = errno;
        pf->unusable = "not an open descriptor";
        return;
    }
    pf->status = listen_inspect_fd(fd, &kind);
    pf->unusable = pf->status != APR_SUCCESS ? "its kind could not be read"
                   : activation_fd_unusable(&kind);
    if (pf->unusable == NULL
        && (listen_bound_address(fd, &pf->address) < 0
            || fstat(fd, &st) < 0)) {
        pf->status = errno;
        pf->unusable = "unreadable (getsockname() or fstat() failed)";
    }
    if (pf->unusable != NULL) {
        return;
    }
    pf->fd = fd;
    pf->dev = (apr_uint64_t)st.st_dev;
    pf->ino = (apr_uint64_t)st.st_ino;
    pf->reuseport = kind.reuseport;
}

void listen_activation_read(void)
{
    activation_record *rec;
    activation_env env;
    int i;

    if (ap_retained_data_get(ACTIVATION_KEY) != NULL) {
        return;
    }
    rec = ap_retained_data_create(ACTIVATION_KEY, sizeof(*rec));
    rec->magic = ACTIVATION_MAGIC;
    rec->version = ACTIVATION_VERSION;
    activation_env_parse(ap_pglobal, getenv("LISTEN_PID"),
                         getenv("LISTEN_FDS"), getenv("LISTEN_FDNAMES"),
                         (long)getpid(), open_fd_limit(), &env);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    rec->message = env.message;
    if (env.verdict != ACTIVATION_PASSED) {
        return;
    }
    rec->fds = apr_pcalloc(ap_pglobal, sizeof(*rec->fds) * env.count);
    rec->count = env.count;
    for (i = 0; i < env.count; i++) {
        take_passed(ap_pglobal, ACTIVATION_FIRST_FD + i, env.names[i],
                    &rec->fds[i]);
    }
}

/* What listen_activation_read() found, once: it ran before the log was
 * open. */
static void log_reading(server_rec *s, activation_record *rec)
{
    int i;

    if (rec->logged) {
        return;
    }
    rec->logged = 1;
    if (rec->message != NULL) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                     BKLOGNO(00130) "bucketed: socket activation: %s",
                     rec->message);
    }
    for (i = 0; i < rec->count; i++) {
        const passed_fd *pf = &rec->fds[i];

        if (pf->unusable == NULL) {
            continue;
        }
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, pf->status,
                     s, BKLOGNO(00129) "bucketed: passed descriptor %d%s%s%s "
                     "is %s: not used", ACTIVATION_FIRST_FD + i,
                     *pf->name ? " (\"" : "", pf->name, *pf->name ? "\")" : "",
                     pf->unusable);
    }
}

static const char *describe_passed(apr_pool_t *p, const passed_fd *pf)
{
    return apr_psprintf(p, "%s (descriptor %d%s%s%s)",
                        socket_address_describe(p, &pf->address), pf->fd,
                        *pf->name ? ", \"" : "", pf->name,
                        *pf->name ? "\"" : "");
}

/* The kept copy of pf, checked: something else in the parent may have
 * closed its number. Then it is kept again from a Listen record that
 * still uses the socket, if one does. */
static void check_kept(server_rec *s, passed_fd *pf)
{
    apr_pool_t *p = s->process->pool;
    ap_listen_rec *lr;

    if (pf->unusable != NULL || is_passed_socket(pf->fd, pf)) {
        return;
    }
    if (pf->fd >= 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, BKLOGNO(00230)
                     "bucketed: the parent's copy of the passed socket %s "
                     "was closed by something else", describe_passed(p, pf));
        pf->fd = -1;
    }
    for (lr = ap_listeners; lr; lr = lr->next) {
        int fd;

        if (!lr->active || !is_passed_socket(listen_socket_fd(lr->sd), pf)) {
            continue;
        }
        fd = fcntl(listen_socket_fd(lr->sd), F_DUPFD_CLOEXEC,
                   ACTIVATION_FIRST_FD);
        if (fd < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00231)
                         "bucketed: cannot keep the passed socket for %pI "
                         "again: if its Listen goes away, it cannot come "
                         "back before a full restart", lr->bind_addr);
            return;
        }
        pf->fd = fd;
        return;
    }
}

/* A fresh duplicate of pf's kept socket as the APR socket of lr, in place
 * of the unbound one core made. */
static apr_status_t adopt_one(server_rec *s, ap_listen_rec *lr,
                              const passed_fd *pf)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    apr_os_sock_info_t info;
    apr_os_sock_t fd;
    apr_socket_t *sd;
    int flags;
    apr_status_t rv;

    fd = fcntl(pf->fd, F_DUPFD_CLOEXEC, ACTIVATION_FIRST_FD);
    if (fd < 0) {
        return errno;
    }
    /* APR takes a made socket for blocking: make it so (the kept copy
     * too: they are one open file), or a blocking accept() would return
     * EAGAIN. */
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0
        || getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        rv = errno;
        close(fd);
        return rv;
    }
    memset(&info, 0, sizeof(info));
    info.os_sock = &fd;
    info.local = (struct sockaddr *)&ss;
    info.family = lr->bind_addr->family;
    info.type = SOCK_STREAM;
    info.protocol = APR_PROTO_TCP;
    rv = apr_os_sock_make(&sd, &info, s->process->pool);
    if (rv != APR_SUCCESS) {
        close(fd);
        return rv;
    }
    apr_socket_close(lr->sd);
    lr->sd = sd;
    lr->active = 1;
    return APR_SUCCESS;
}

static void adopt_for(server_rec *s, activation_record *rec,
                      ap_listen_rec *lr)
{
    socket_address want;
    int i;

    address_from_apr(lr->bind_addr, &want);
    for (i = 0; i < rec->count; i++) {
        const passed_fd *pf = &rec->fds[i];
        apr_status_t rv;

        if (pf->fd < 0 || !activation_address_matches(&pf->address, &want)) {
            continue;
        }
        rv = adopt_one(s, lr, pf);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, rv, s,
                         BKLOGNO(00131) "bucketed: cannot adopt the passed "
                         "socket (descriptor %d) for %pI; binding one",
                         pf->fd, lr->bind_addr);
            continue;
        }
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00132)
                     "bucketed: Listen %pI uses the socket passed by the "
                     "service manager (descriptor %d%s%s%s)", lr->bind_addr,
                     pf->fd, *pf->name ? ", \"" : "", pf->name,
                     *pf->name ? "\"" : "");
        if (!pf->reuseport) {
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

/* Which kept sockets this generation's Listen records use. */
static void mark_serving(activation_record *rec)
{
    ap_listen_rec *lr;
    int i;

    for (i = 0; i < rec->count; i++) {
        passed_fd *pf = &rec->fds[i];

        pf->serving = 0;
        for (lr = ap_listeners; lr && pf->fd >= 0 && !pf->serving;
             lr = lr->next) {
            pf->serving = lr->active
                          && is_passed_socket(listen_socket_fd(lr->sd), pf);
        }
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
    activation_record *rec = activation_get();
    int flags = bucketed_config_warning_flags(retained);
    ap_listen_rec *lr;
    int i;

    if (rec == NULL) {
        return;
    }
    log_reading(s, rec);
    for (i = 0; i < rec->count; i++) {
        check_kept(s, &rec->fds[i]);
    }
    for (lr = ap_listeners; lr; lr = lr->next) {
        if (!lr->active && lr->bind_addr != NULL) {
            adopt_for(s, rec, lr);
        }
    }
    mark_serving(rec);
    for (lr = ap_listeners; lr; lr = lr->next) {
        if (lr->active && is_wildcard_of(lr, APR_INET6)
            && listen_activation_serves(lr->bind_addr)) {
            order_wildcard_twin(s, lr);
        }
    }
    for (i = 0; i < rec->count && flags >= 0; i++) {
        const passed_fd *pf = &rec->fds[i];

        if (pf->fd < 0 || pf->serving) {
            continue;
        }
        ap_log_error(APLOG_MARK, APLOG_WARNING | flags, 0, s, BKLOGNO(00134)
                     "bucketed: the passed socket %s matches no Listen "
                     "address: kept unused, for a reload that brings its "
                     "Listen back (connections to it wait unanswered); add "
                     "a Listen for it or remove it from the socket unit",
                     describe_passed(s->process->pool, pf));
    }
}

int listen_activation_held(void)
{
    const activation_record *rec = activation_get();
    int i;

    for (i = 0; rec != NULL && i < rec->count; i++) {
        if (rec->fds[i].serving) {
            return 1;
        }
    }
    return 0;
}

int listen_activation_serves(const apr_sockaddr_t *sa)
{
    const activation_record *rec = activation_get();
    socket_address a;
    int i;

    address_from_apr(sa, &a);
    for (i = 0; rec != NULL && i < rec->count; i++) {
        if (rec->fds[i].serving
            && activation_address_matches(&rec->fds[i].address, &a)) {
            return 1;
        }
    }
    return 0;
}

int listen_activation_keeps(int fd)
{
    activation_record *rec = activation_get();
    int i;

    for (i = 0; rec != NULL && i < rec->count; i++) {
        if (rec->fds[i].fd == fd && is_passed_socket(fd, &rec->fds[i])) {
            return 1;
        }
    }
    return 0;
}

int listen_activation_close_kept(server_rec *s)
{
    activation_record *rec = activation_get();
    int i, n = 0;

    for (i = 0; rec != NULL && i < rec->count; i++) {
        passed_fd *pf = &rec->fds[i];

        /* Not a number that something else closed and reused since. */
        if (!is_passed_socket(pf->fd, pf)) {
            continue;
        }
        if (close(pf->fd) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00135)
                         "bucketed: close() of passed descriptor %d in pid %"
                         APR_PID_T_FMT, pf->fd, getpid());
        }
        else {
            n++;
        }
        pf->fd = -1;
    }
    return n;
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
