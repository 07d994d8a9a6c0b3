/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_sockets.c: the sockets of each bucket. Core opens one socket
 * per Listen address (ap_listeners); a plan that gives an address several
 * buckets needs SO_REUSEPORT duplicates of that socket, opened here with
 * the same options, and kept in retained memory so that the next
 * generation reuses them instead of resetting what waits in their queues.
 *
 * Every socket ends up in exactly one bucket, so its blocking mode can be
 * chosen per bucket: blocking for a bucket's only socket (children sleep
 * in accept()), non-blocking when a bucket waits on several. A socket
 * being drained (policy_steering.h, MIGRATION_DRAIN) is appended to one
 * bucket's list after its planned ones.
 */
#include "listen_sockets.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apr_strings.h"

#include "httpd.h"
#include "http_log.h"
#include "mpm_common.h"
#include "util_mutex.h"

#include "bucketed.h"
#include "listen_steering.h"
#include "sys_bpf.h"
#include "sys_trial.h"

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

static apr_status_t set_reuseport(server_rec *s, const ap_listen_rec *lr,
                                  apr_socket_t *sd)
{
    int on = 1;

    if (setsockopt(listen_socket_fd(sd), SOL_SOCKET, SO_REUSEPORT, &on,
                   sizeof(on)) < 0) {
        apr_status_t rv = errno;
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     BKLOGNO(00057)
                     "bucketed: setsockopt(SO_REUSEPORT) for %pI",
                     lr->bind_addr);
        return rv;
    }
    return APR_SUCCESS;
}

static apr_status_t clone_options(server_rec *s, const ap_listen_rec *orig,
                                  apr_socket_t *dup)
{
    int from = listen_socket_fd(orig->sd), to = listen_socket_fd(dup);
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
                         BKLOGNO(00058) "bucketed: getsockopt(%s) on %pI",
                         cloned_options[i].label, orig->bind_addr);
            return rv;
        }
        if (setsockopt(to, cloned_options[i].level, cloned_options[i].name,
                       &value, sizeof(value)) < 0) {
            apr_status_t rv = errno;
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         BKLOGNO(00059)
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
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, BKLOGNO(00060)
                                                           "bucketed: cannot "
                         "set SendBufferSize on a duplicate of %pI",
                         orig->bind_addr);
        }
    }
    if (conf->receive_buffer_size) {
        rv = apr_socket_opt_set(dup, APR_SO_RCVBUF, conf->receive_buffer_size);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, BKLOGNO(00061)
                                                           "bucketed: cannot "
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
                     BKLOGNO(00062)
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
                     BKLOGNO(00063)
                     "bucketed: cannot bind a duplicate socket to %pI "
                     "with SO_REUSEPORT (is another process bound there?)",
                     orig->bind_addr);
        apr_socket_close(dup);
        return NULL;
    }
    rv = apr_socket_listen(dup, conf->listen_backlog);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     BKLOGNO(00064)
                     "bucketed: listen() on a duplicate socket for %pI",
                     orig->bind_addr);
        apr_socket_close(dup);
        return NULL;
    }
    return dup;
}

/* The duplicate_th copy of orig: reused from the last generation when it
 * exists, opened otherwise (counted in *opened). */
static apr_socket_t *get_duplicate(apr_pool_t *ptemp, server_rec *s,
                                   const bucketed_config *conf,
                                   bucketed_retained *retained,
                                   const ap_listen_rec *orig, int duplicate,
                                   int *opened)
{
    const char *key = apr_psprintf(ptemp, "%pI#%d", orig->bind_addr,
                                   duplicate);
    retained_socket *rs;
    apr_socket_t *sd;

    for (rs = retained->sockets; rs; rs = rs->next) {
        if (strcmp(rs->key, key) == 0) {
            rs->in_use = 1;
            rs->drained_generations = 0;
            rs->retiring = 0;
            return rs->sd;
        }
    }
    sd = open_duplicate(retained->socket_pool, s, conf, orig);
    if (sd == NULL) {
        return NULL;
    }
    (*opened)++;
    /* Only a socket that opened gets a record: a failure at every restart
     * would otherwise grow the long-lived pool. */
    rs = apr_pcalloc(retained->socket_pool, sizeof(*rs));
    rs->sd = sd;
    rs->key = apr_pstrdup(retained->socket_pool, key);
    rs->duplicate = duplicate;
    rs->in_use = 1;
    rs->next = retained->sockets;
    retained->sockets = rs;
    return rs->sd;
}

/* The listener (index into originals) whose duplicate rs is, or -1 when
 * its address is no longer listened on. */
static int listener_of(apr_pool_t *ptemp, const retained_socket *rs,
                       ap_listen_rec **originals, int num_listeners)
{
    int i;

    for (i = 0; i < num_listeners; i++) {
        const char *prefix = apr_psprintf(ptemp, "%pI#",
                                          originals[i]->bind_addr);
        if (strncmp(rs->key, prefix, strlen(prefix)) == 0) {
            return i;
        }
    }
    return -1;
}

/* Appends a socket being drained to bucket b's list: it is accepted from
 * like the bucket's own, and no steering map holds it. */
static void adopt_draining(apr_pool_t *pconf, bucket_rec *bk,
                           const ap_listen_rec *orig, apr_socket_t *sd)
{
    ap_listen_rec **tail = &bk->listeners;
    ap_listen_rec *mine = apr_pmemdup(pconf, orig, sizeof(*orig));

    while (*tail) {
        tail = &(*tail)->next;
    }
    mine->sd = sd;
    mine->next = NULL;
    *tail = mine;
}

/* Duplicates the new plan does not use: policy_steering.c decides whether each
 * is drained (kept one more generation, out of the steering maps),
 * retired (bucket_listeners_retire) or closed; this says so and does it.
 * Children of the old generation keep their own descriptors until they
 * leave: a closed socket really closes, and its queue migrates or is
 * reset, with the last one. */
static void settle_unused_duplicates(apr_pool_t *pconf, server_rec *s,
                                     bucketed_config *conf,
                                     bucketed_retained *retained,
                                     ap_listen_rec **originals,
                                     int num_listeners,
                                     const int *group_migrates,
                                     const int *group_drains)
{
    retained_socket **link = &retained->sockets;

    while (*link) {
        retained_socket *rs = *link;
        plan_socket_state st;
        plan_socket_action_e action;
        int listener;

        if (rs->in_use) {
            link = &rs->next;
            continue;
        }
        listener = listener_of(pconf, rs, originals, num_listeners);
        st.in_new_plan = 0;
        st.group_stays = listener >= 0;
        st.group_migrates = listener >= 0 && group_migrates[listener];
        st.group_drains = listener >= 0 && group_drains[listener];
        st.drained_generations = rs->drained_generations;
        st.queued = reuseport_bpf_queued(listen_socket_fd(rs->sd));
        action = plan_socket_action(&st);
        /* Said at the restart that left it out, not at every one since. */
        if (!(rs->retiring && action == PLAN_SOCKET_RETIRE)) {
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00065)
                                                       "bucketed: %s",
                         plan_socket_describe(pconf, &st, rs->key,
                                              conf->migration.reason));
        }
        if (action == PLAN_SOCKET_RETIRE) {
            rs->retiring = 1;
            link = &rs->next;
            continue;
        }
        if (action == PLAN_SOCKET_DRAIN) {
            adopt_draining(pconf, &retained->generation->buckets[
                               rs->duplicate % conf->plan.num_buckets],
                           originals[listener], rs->sd);
            rs->in_use = 1;
            rs->drained_generations++;
            /* Retiring since a restart that could migrate: a bucket of
             * this plan accepts from it now, and its children keep it. */
            rs->retiring = 0;
            link = &rs->next;
            continue;
        }
        apr_socket_close(rs->sd);
        *link = rs->next;
    }
}

int bucket_listeners_queued(const bucketed_retained *retained)
{
    const retained_socket *rs;
    int queued = 0, n;

    for (rs = retained->sockets; rs; rs = rs->next) {
        n = reuseport_bpf_queued(listen_socket_fd(rs->sd));
        queued += n > 0 ? n : 0;
    }
    return queued;
}

/* Closed only here: while old children accept from it, they serve what
 * is queued on it. Once none does, SHUT_RD takes it out of its group and
 * moves its queue to the group's other sockets at once (Linux 5.14+,
 * which retires only where migration was seen working). A close alone
 * would leave it listening, its queue waiting, for as long as any old
 * child holds a copy (through a request, or a keep-alive connection up to
 * KeepAliveTimeout), and under the machine-wide sysctl, with no program
 * to pass it over, taking its share of new connections too. */
static void retire(server_rec *s, retained_socket *rs)
{
    int queued = reuseport_bpf_queued(listen_socket_fd(rs->sd));
    char moved[32] = "what was";
    int err = listen_socket_leave_group(rs->sd);

    if (err != 0) {
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00266)
                     "bucketed: cannot shut retired duplicate listener %s "
                     "down; it is closed, and connections queued on it move "
                     "when the last old child holding it leaves", rs->key);
    }
    else {
        if (queued >= 0) {
            apr_snprintf(moved, sizeof(moved), "%d connection(s)", queued);
        }
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00267)
                     "bucketed: duplicate listener %s left its reuseport "
                     "group, no old child accepting from it any more (%s "
                     "queued on it moved to the group's other sockets)",
                     rs->key, moved);
    }
    apr_socket_close(rs->sd);
}

void bucket_listeners_retire(server_rec *s, bucketed_retained *retained,
                             bucket_accepted_fn accepted, void *baton)
{
    retained_socket **link = &retained->sockets;

    while (*link) {
        retained_socket *rs = *link;

        if (!rs->retiring || accepted(baton, rs->duplicate)) {
            link = &rs->next;
            continue;
        }
        retire(s, rs);
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

/* close() of a retained descriptor in a helper process; 1 when it was
 * open. */
static int close_inherited(server_rec *s, int *fd, const char *what)
{
    if (*fd < 0) {
        return 0;
    }
    if (close(*fd) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00066)
                                                        "bucketed: close() "
                     "of the inherited %s in pid %" APR_PID_T_FMT, what,
                     getpid());
    }
    *fd = -1;
    return 1;
}

int bucket_listeners_close_for_helper(server_rec *s,
                                      bucketed_retained *retained)
{
    retained_socket *rs;
    retained_map *rm;
    int b, n = 0;

    for (rs = retained->sockets; rs; rs = rs->next) {
        n++;
    }
    /* Through APR, which also drops each socket's pool cleanups: the
     * helper's exit must not close the numbers again. */
    bucket_listeners_close_all(retained);
    for (rm = retained->steer_maps; rm; rm = rm->next) {
        n += close_inherited(s, &rm->fd, "socket map");
        rm->entries = 0;
    }
    if (retained->idle_map_open) {
        n += close_inherited(s, &retained->idle_map_fd, "idle count map");
        retained->idle_map_open = 0;
    }
    if (retained->buckets != NULL) {
        for (b = 0; b < retained->first_server_limit; b++) {
            n += close_inherited(s, &retained->buckets[b].nudge,
                                 "bucket eventfd");
        }
    }
    return n;
}

static apr_status_t create_accept_mutex(apr_pool_t *pconf, server_rec *s,
                                        bucket_rec *bk)
{
    int bucket = bk->index;
    apr_status_t rv;

    rv = ap_proc_mutex_create(&bk->accept_mutex, NULL,
                              AP_ACCEPT_MUTEX_TYPE,
                              apr_itoa(pconf, bucket), s, pconf, 0);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     BKLOGNO(00067)
                     "bucketed: cannot create the accept mutex of bucket %d",
                     bucket);
        return rv;
    }
    rv = ap_unixd_set_proc_mutex_perms(bk->accept_mutex);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     BKLOGNO(00068)
                     "bucketed: cannot set permissions on the accept mutex "
                     "of bucket %d", bucket);
    }
    return rv;
}

int bucket_listeners_open(apr_pool_t *pconf, server_rec *s,
                          bucketed_config *conf, bucketed_retained *retained)
{
    const bucket_plan *plan = &conf->plan;
    bucket_generation *gen = bucket_generation_get(pconf,
                                                   &retained->generation);
    ap_listen_rec **originals, *lr;
    int *duplicated, *group_migrates, *group_drains;
    int num_listeners = 0, b, k;
    retained_socket *rs;
    apr_status_t rv;

    for (lr = ap_listeners; lr; lr = lr->next) {
        num_listeners++;
    }
    originals = apr_palloc(pconf, sizeof(*originals) * num_listeners);
    duplicated = apr_pcalloc(pconf, sizeof(*duplicated) * num_listeners);
    group_migrates = apr_pcalloc(pconf,
                                 sizeof(*group_migrates) * num_listeners);
    group_drains = apr_pcalloc(pconf, sizeof(*group_drains) * num_listeners);
    num_listeners = 0;
    for (lr = ap_listeners; lr; lr = lr->next) {
        originals[num_listeners++] = lr;
    }
    if (retained->socket_pool == NULL) {
        rv = apr_pool_create(&retained->socket_pool, s->process->pool);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                         BKLOGNO(00069)
                         "bucketed: apr_pool_create for the sockets");
            return !OK;
        }
        apr_pool_tag(retained->socket_pool, "bucketed_sockets");
    }
    for (rs = retained->sockets; rs; rs = rs->next) {
        rs->in_use = 0;
    }

    bucket_generation_build(pconf, gen, retained->buckets, plan->num_buckets);
    for (b = 0; b < plan->num_buckets; b++) {
        const bucket_def *def = &plan->buckets[b];
        ap_listen_rec **tail = &gen->buckets[b].listeners;
        int opened = 0;

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
                                         bs->duplicate, &opened);
                if (mine->sd == NULL) {
                    return !OK;
                }
            }
            *tail = mine;
            tail = &mine->next;
        }
        gen->buckets[b].sockets_new = def->num_sockets > 0
                                      && opened == def->num_sockets;
    }
    listen_steering_attach(pconf, s, conf, retained, originals,
                           num_listeners, group_migrates, group_drains);
    settle_unused_duplicates(pconf, s, conf, retained, originals,
                             num_listeners, group_migrates, group_drains);
    for (b = 0; b < plan->num_buckets; b++) {
        bucket_rec *bk = &gen->buckets[b];
        int count = bucket_listeners_count(bk);

        for (lr = bk->listeners; lr; lr = lr->next) {
            /* Non-blocking where a child waits on several sockets, and
             * always in ChildModel event, whose workers accept after
             * epoll. */
            rv = apr_socket_opt_set(lr->sd, APR_SO_NONBLOCK,
                                    count > 1 || conf->child_model
                                                 == CHILD_MODEL_EVENT);
            if (rv != APR_SUCCESS) {
                ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                             BKLOGNO(00070)
                             "bucketed: cannot set the blocking mode of %pI",
                             lr->bind_addr);
                return !OK;
            }
        }
        if (bucket_wait_mode(count, conf->kernel.epoll_exclusive)
                == BUCKET_WAIT_MUTEX
            && create_accept_mutex(pconf, s, bk) != APR_SUCCESS) {
            return !OK;
        }
    }
    return OK;
}

int bucket_listeners_count(const bucket_rec *bk)
{
    const ap_listen_rec *lr;
    int n = 0;

    for (lr = bk->listeners; lr; lr = lr->next) {
        n++;
    }
    return n;
}

void bucket_listeners_keep_only(bucketed_retained *retained, int bucket)
{
    bucket_generation *gen = retained->generation;
    retained_socket *rs;
    int b;

    for (b = 0; b < gen->num_buckets; b++) {
        ap_listen_rec *lr;

        if (b == bucket) {
            continue;
        }
        for (lr = gen->buckets[b].listeners; lr; lr = lr->next) {
            apr_socket_close(lr->sd);
        }
    }
    /* No bucket's: held here, it would stay open past its retirement. */
    for (rs = retained->sockets; rs; rs = rs->next) {
        if (rs->retiring) {
            apr_socket_close(rs->sd);
        }
    }
}
