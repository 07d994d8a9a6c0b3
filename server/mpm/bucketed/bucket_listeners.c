/*
 * bucket_listeners.c: the sockets of each bucket. Core opens one socket
 * per Listen address (ap_listeners); a plan that gives an address several
 * buckets needs SO_REUSEPORT duplicates of that socket, opened here with
 * the same options, and kept in retained memory so that the next
 * generation reuses them instead of resetting what waits in their queues.
 *
 * Every socket ends up in exactly one bucket, so its blocking mode can be
 * chosen per bucket: blocking for a bucket's only socket (children sleep
 * in accept()), non-blocking when a bucket waits on several.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "apr_strings.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "util_mutex.h"

#include "bucketed.h"

APLOG_USE_MODULE(mpm_bucketed);

/* Integer options a duplicate copies from its original. SO_REUSEPORT is
 * set separately (it must be on); buffer sizes come from configuration,
 * since reading them back would pin the kernel's auto-tuned values. */
static const struct {
    int level;
    int name;
    const char *label;
    int inet6_only;
} cloned_options[] = {
    { SOL_SOCKET,   SO_REUSEADDR,     "SO_REUSEADDR",     0 },
    { SOL_SOCKET,   SO_KEEPALIVE,     "SO_KEEPALIVE",     0 },
    { IPPROTO_TCP,  TCP_NODELAY,      "TCP_NODELAY",      0 },
    { IPPROTO_TCP,  TCP_DEFER_ACCEPT, "TCP_DEFER_ACCEPT", 0 },
    { IPPROTO_IPV6, IPV6_V6ONLY,      "IPV6_V6ONLY",      1 },
};

static int os_fd(apr_socket_t *sd)
{
    apr_os_sock_t fd = -1;

    apr_os_sock_get(&fd, sd);
    return fd;
}

static apr_status_t set_reuseport(server_rec *s, const ap_listen_rec *lr,
                                  apr_socket_t *sd)
{
    int on = 1;

    if (setsockopt(os_fd(sd), SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) < 0) {
        apr_status_t rv = errno;
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: setsockopt(SO_REUSEPORT) for %pI",
                     lr->bind_addr);
        return rv;
    }
    return APR_SUCCESS;
}

static apr_status_t clone_options(server_rec *s, const ap_listen_rec *orig,
                                  apr_socket_t *dup)
{
    int from = os_fd(orig->sd), to = os_fd(dup);
    apr_size_t i;

    for (i = 0; i < sizeof(cloned_options) / sizeof(cloned_options[0]); i++) {
        int value = 0;
        socklen_t len = sizeof(value);

        if (cloned_options[i].inet6_only
            && orig->bind_addr->family != APR_INET6) {
            continue;
        }
        if (getsockopt(from, cloned_options[i].level, cloned_options[i].name,
                       &value, &len) < 0) {
            apr_status_t rv = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         "bucketed: getsockopt(%s) on %pI",
                         cloned_options[i].label, orig->bind_addr);
            return rv;
        }
        if (setsockopt(to, cloned_options[i].level, cloned_options[i].name,
                       &value, sizeof(value)) < 0) {
            apr_status_t rv = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         "bucketed: setsockopt(%s, %d) on a duplicate of %pI",
                         cloned_options[i].label, value, orig->bind_addr);
            return rv;
        }
    }
    return APR_SUCCESS;
}

/* Not fatal, as for core's own sockets: the kernel default still works. */
static void set_buffer_sizes(server_rec *s, const bucketed_config *conf,
                             const ap_listen_rec *orig, apr_socket_t *dup)
{
    apr_status_t rv;

    if (conf->send_buffer_size) {
        rv = apr_socket_opt_set(dup, APR_SO_SNDBUF, conf->send_buffer_size);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, "bucketed: cannot "
                         "set SendBufferSize on a duplicate of %pI",
                         orig->bind_addr);
        }
    }
    if (conf->receive_buffer_size) {
        rv = apr_socket_opt_set(dup, APR_SO_RCVBUF, conf->receive_buffer_size);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, "bucketed: cannot "
                         "set ReceiveBufferSize on a duplicate of %pI",
                         orig->bind_addr);
        }
    }
}

static apr_socket_t *open_duplicate(apr_pool_t *pool, server_rec *s,
                                    const bucketed_config *conf,
                                    const ap_listen_rec *orig)
{
    apr_socket_t *dup;
    apr_status_t rv;

    rv = apr_socket_create(&dup, orig->bind_addr->family, SOCK_STREAM,
                           APR_PROTO_TCP, pool);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot create a duplicate socket for %pI",
                     orig->bind_addr);
        return NULL;
    }
    set_buffer_sizes(s, conf, orig, dup);
    if (clone_options(s, orig, dup) != APR_SUCCESS
        || set_reuseport(s, orig, dup) != APR_SUCCESS) {
        apr_socket_close(dup);
        return NULL;
    }
    rv = apr_socket_bind(dup, orig->bind_addr);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot bind a duplicate socket to %pI "
                     "with SO_REUSEPORT (is another process bound there?)",
                     orig->bind_addr);
        apr_socket_close(dup);
        return NULL;
    }
    rv = apr_socket_listen(dup, conf->listen_backlog);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: listen() on a duplicate socket for %pI",
                     orig->bind_addr);
        apr_socket_close(dup);
        return NULL;
    }
    return dup;
}

/* The duplicate_th copy of orig: reused from the last generation when it
 * exists, opened otherwise. */
static apr_socket_t *get_duplicate(apr_pool_t *ptemp, server_rec *s,
                                   const bucketed_config *conf,
                                   bucketed_retained *retained,
                                   const ap_listen_rec *orig, int duplicate)
{
    const char *key = apr_psprintf(ptemp, "%pI#%d", orig->bind_addr,
                                   duplicate);
    retained_socket *rs;
    apr_socket_t *sd;

    for (rs = retained->sockets; rs; rs = rs->next) {
        if (strcmp(rs->key, key) == 0) {
            rs->in_use = 1;
            return rs->sd;
        }
    }
    sd = open_duplicate(retained->socket_pool, s, conf, orig);
    if (sd == NULL) {
        return NULL;
    }
    /* Only a socket that opened gets a record: a failure at every restart
     * would otherwise grow the long-lived pool. */
    rs = apr_pcalloc(retained->socket_pool, sizeof(*rs));
    rs->sd = sd;
    rs->key = apr_pstrdup(retained->socket_pool, key);
    rs->in_use = 1;
    rs->next = retained->sockets;
    retained->sockets = rs;
    return rs->sd;
}

/* Duplicates the new plan does not use. Children of the old generation
 * keep their own descriptors until they leave. */
static void close_unused_duplicates(server_rec *s, bucketed_retained *retained)
{
    retained_socket **link = &retained->sockets;

    while (*link) {
        retained_socket *rs = *link;
        if (rs->in_use) {
            link = &rs->next;
            continue;
        }
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "bucketed: closing "
                     "duplicate listener %s, which the new bucket plan no "
                     "longer uses", rs->key);
        apr_socket_close(rs->sd);
        *link = rs->next;
    }
}

void bucket_listeners_close_all(bucketed_retained *retained)
{
    retained_socket *rs;

    for (rs = retained->sockets; rs; rs = rs->next) {
        apr_socket_close(rs->sd);
    }
    retained->sockets = NULL;
}

static apr_status_t create_accept_mutex(apr_pool_t *pconf, server_rec *s,
                                        bucketed_config *conf, int bucket)
{
    apr_status_t rv;

    rv = ap_proc_mutex_create(&conf->accept_mutex[bucket], NULL,
                              AP_ACCEPT_MUTEX_TYPE,
                              apr_itoa(pconf, bucket), s, pconf, 0);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot create the accept mutex of bucket %d",
                     bucket);
        return rv;
    }
    rv = ap_unixd_set_proc_mutex_perms(conf->accept_mutex[bucket]);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     "bucketed: cannot set permissions on the accept mutex "
                     "of bucket %d", bucket);
    }
    return rv;
}

int bucket_listeners_open(apr_pool_t *pconf, server_rec *s,
                          bucketed_config *conf, bucketed_retained *retained)
{
    const bucket_plan *plan = &conf->plan;
    ap_listen_rec **originals, *lr;
    int *duplicated;
    int num_listeners = 0, b, k;
    retained_socket *rs;
    apr_status_t rv;

    for (lr = ap_listeners; lr; lr = lr->next) {
        num_listeners++;
    }
    originals = apr_palloc(pconf, sizeof(*originals) * num_listeners);
    duplicated = apr_pcalloc(pconf, sizeof(*duplicated) * num_listeners);
    num_listeners = 0;
    for (lr = ap_listeners; lr; lr = lr->next) {
        originals[num_listeners++] = lr;
    }
    if (retained->socket_pool == NULL) {
        rv = apr_pool_create(&retained->socket_pool, s->process->pool);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         "bucketed: apr_pool_create for the sockets");
            return !OK;
        }
        apr_pool_tag(retained->socket_pool, "bucketed_sockets");
    }
    for (rs = retained->sockets; rs; rs = rs->next) {
        rs->in_use = 0;
    }

    conf->bucket_listeners = apr_pcalloc(pconf, sizeof(ap_listen_rec *)
                                                * plan->num_buckets);
    conf->accept_mutex = apr_pcalloc(pconf, sizeof(apr_proc_mutex_t *)
                                            * plan->num_buckets);
    for (b = 0; b < plan->num_buckets; b++) {
        const bucket_def *def = &plan->buckets[b];
        ap_listen_rec **tail = &conf->bucket_listeners[b];

        for (k = 0; k < def->num_sockets; k++) {
            const bucket_socket *bs = &def->sockets[k];
            ap_listen_rec *orig = originals[bs->listener];
            ap_listen_rec *mine = apr_pmemdup(pconf, orig, sizeof(*orig));

            mine->next = NULL;
            if (bs->duplicate > 0) {
                if (!duplicated[bs->listener]) {
                    /* The original joins the group: Linux lets an already
                     * listening socket take SO_REUSEPORT, and then accepts
                     * duplicates bound beside it. */
                    if (set_reuseport(s, orig, orig->sd) != APR_SUCCESS) {
                        return !OK;
                    }
                    duplicated[bs->listener] = 1;
                }
                mine->sd = get_duplicate(pconf, s, conf, retained, orig,
                                         bs->duplicate);
                if (mine->sd == NULL) {
                    return !OK;
                }
            }
            /* Non-blocking where a child waits on several sockets, and
             * always in ChildModel event, whose event thread accepts. */
            rv = apr_socket_opt_set(mine->sd, APR_SO_NONBLOCK,
                                    def->num_sockets > 1
                                    || conf->child_model
                                       == CHILD_MODEL_EVENT);
            if (rv != APR_SUCCESS) {
                ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                             "bucketed: cannot set the blocking mode of %pI",
                             orig->bind_addr);
                return !OK;
            }
            *tail = mine;
            tail = &mine->next;
        }
        if (bucket_wait_mode(def->num_sockets, conf->kernel.epoll_exclusive)
                == BUCKET_WAIT_MUTEX
            && create_accept_mutex(pconf, s, conf, b) != APR_SUCCESS) {
            return !OK;
        }
    }
    close_unused_duplicates(s, retained);
    return OK;
}

void bucket_listeners_keep_only(bucketed_config *conf, int bucket)
{
    int b;

    for (b = 0; b < conf->plan.num_buckets; b++) {
        ap_listen_rec *lr;

        if (b == bucket) {
            continue;
        }
        for (lr = conf->bucket_listeners[b]; lr; lr = lr->next) {
            apr_socket_close(lr->sd);
        }
    }
}
