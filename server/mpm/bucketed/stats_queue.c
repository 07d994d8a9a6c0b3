/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_queue.c: the parent reads the accept queue of every bucket's
 * sockets on each of its maintenance passes (ten a second), for the stall
 * check (policy_stall.h), and publishes a sample about once a second.
 * Children cannot: each closes the sockets of the other buckets. Per
 * socket, from the kernel:
 *
 *   TCP_INFO on a listening socket   tcpi_unacked = connections waiting
 *                                    for accept(), tcpi_sacked = backlog
 *                                    (what `ss -lnt` shows as Recv-Q and
 *                                    Send-Q)
 *   SO_MEMINFO (Linux 4.6+)          SK_MEMINFO_DROPS: packets dropped on
 *                                    the socket; an accept-queue overflow
 *                                    drops the SYN or the final ACK and
 *                                    counts here
 *
 * With TCP_DEFER_ACCEPT (httpd's default AcceptFilter on Linux) the kernel
 * also drops, and counts there, the bare ACK that completes every
 * handshake: the count then grows with every connection and says nothing
 * about overflows, so it is not reported for such a socket (checked once
 * per generation; AcceptFilter http none turns the option off).
 *
 * The samples go to the published segment (stats_counters.c) for children to
 * display; the history (highest depth, how long full, when last warned)
 * stays in memory only the parent maps (policy_accept_queue.h decides).
 */
#include "stats.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#ifdef __linux__
#include <linux/sock_diag.h>
#endif

#include "apr_atomic.h"
#include "apr_strings.h"

#include "httpd.h"
#include "http_log.h"

#include "bucketed.h"
#include "policy_accept_queue.h"

APLOG_USE_MODULE(mpm_bucketed);

typedef struct {
    queue_watch watch;
    int checked;                     /* defer_accept was read */
    int defer_accept;                /* TCP_DEFER_ACCEPT is on */
    int error_reported;              /* a failed sample was logged */
    int drops_reported;              /* missing drop counts were logged */
} socket_state;

struct bucket_queue_state {
    apr_size_t size;                 /* of the whole mapping */
    apr_time_t last_sample;          /* 0 = none yet */
    int num_sockets;
    socket_state sockets[1];         /* num_sockets entries */
};

/* The parent's passes come every 100 ms or so (rescue passes between the
 * full ones); the sample is published, and the full-queue warning
 * decided, on the first pass a second after the previous one. */
#define SAMPLE_INTERVAL apr_time_from_sec(1)

static apr_status_t unmap_state(void *data)
{
    struct bucket_queue_state *state = data;

    munmap(state, state->size);
    return APR_SUCCESS;
}

/* The sampling state is written every second, long after the children
 * were forked; in inherited memory each write would leave them holding
 * private copies of the page. Mapped with MADV_DONTFORK, children never
 * have it. Goes with the generation's pool. */
apr_status_t bucket_queue_init(apr_pool_t *pconf, server_rec *s,
                               bucket_generation *gen)
{
    int n = gen->num_sockets;
    apr_size_t size = APR_OFFSETOF(struct bucket_queue_state, sockets)
                      + sizeof(socket_state) * (n > 0 ? n : 1);
    struct bucket_queue_state *state;

    state = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (state == MAP_FAILED) {
        apr_status_t rv = errno;
        ap_log_error(APLOG_MARK, APLOG_CRIT | APLOG_STARTUP, rv, s,
                     BKLOGNO(00124)
                     "bucketed: mmap of %" APR_SIZE_T_FMT " bytes for the "
                     "accept-queue sampling state", size);
        return rv;
    }
#ifdef MADV_DONTFORK
    if (madvise(state, size, MADV_DONTFORK) < 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, errno, s, BKLOGNO(00125)
                                                          "bucketed: "
                     "madvise(MADV_DONTFORK) on the accept-queue sampling "
                     "state");
    }
#endif
    state->size = size;
    state->num_sockets = n;
    apr_pool_cleanup_register(pconf, state, unmap_state,
                              apr_pool_cleanup_null);
    gen->queue = state;
    return APR_SUCCESS;
}

/* Whether the socket defers accept() until data arrives. */
static int defers_accept(int fd)
{
#ifdef TCP_DEFER_ACCEPT
    int seconds = 0;
    socklen_t len = sizeof(seconds);

    return getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &seconds, &len) == 0
           && seconds > 0;
#else
    (void)fd;
    return 0;
#endif
}

/* The kernel's drop count of the socket: 0 and *count set, or an errno. */
static int read_drops(int fd, apr_uint32_t *count)
{
#if defined(__linux__) && defined(SO_MEMINFO)
    apr_uint32_t mem[SK_MEMINFO_VARS];
    socklen_t len = sizeof(mem);

    memset(mem, 0, sizeof(mem));
    if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &len) < 0) {
        return errno;
    }
    if (len <= SK_MEMINFO_DROPS * sizeof(mem[0])) {
        return ENOPROTOOPT;
    }
    *count = mem[SK_MEMINFO_DROPS];
    return 0;
#else
    (void)fd;
    (void)count;
    return ENOTSUP;
#endif
}

/* One socket's queue from the kernel. Returns 0 or the errno of the
 * TCP_INFO query; drop counts that are missing or meaningless only clear
 * has_drops (*drops_errno says why, 0 for TCP_DEFER_ACCEPT). */
static int read_queue(socket_state *st, apr_socket_t *sd, queue_sample *out,
                      int *drops_errno)
{
    apr_os_sock_t fd = -1;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(out, 0, sizeof(*out));
    *drops_errno = 0;
    if (apr_os_sock_get(&fd, sd) != APR_SUCCESS || fd < 0) {
        return EBADF;
    }
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) {
        return errno;
    }
    /* A socket shut down to leave its group while its bucket has no
     * child (listen_absence.c) is closed: nothing waits in it. */
    if (ti.tcpi_state == TCP_CLOSE) {
        return 0;
    }
    /* Only a listening socket reports its queue in these two fields. */
    if (ti.tcpi_state != TCP_LISTEN) {
        return EINVAL;
    }
    out->depth = ti.tcpi_unacked;
    out->backlog = ti.tcpi_sacked;
    if (!st->checked) {
        st->defer_accept = defers_accept(fd);
        st->checked = 1;
    }
    if (!st->defer_accept) {
        *drops_errno = read_drops(fd, &out->drops);
        out->has_drops = *drops_errno == 0;
    }
    return 0;
}

static void publish_sample(published_socket *pub, const queue_sample *qs,
                           const socket_state *st)
{
    const queue_watch *watch = &st->watch;

    apr_atomic_set32(&pub->depth, qs->depth);
    apr_atomic_set32(&pub->backlog, qs->backlog);
    apr_atomic_set32(&pub->max_depth, watch->max_depth);
    apr_atomic_set32(&pub->has_drops, (apr_uint32_t)qs->has_drops);
    apr_atomic_set32(&pub->drops, qs->drops);
    apr_atomic_set32(&pub->defer_accept, (apr_uint32_t)st->defer_accept);
    apr_atomic_set32(&pub->sampled, 1);
}

/* Reads one socket's queue; with publish, also folds it into its history,
 * publishes it and warns when the queue has stayed full. Returns the
 * connections waiting in it (0 when it cannot be read). */
static apr_uint32_t sample_one(server_rec *s, socket_state *st,
                               published_socket *pub, int bucket,
                               const ap_listen_rec *lr, apr_time_t now,
                               int publish)
{
    static const queue_watch_limits limits = {
        QUEUE_WATCH_FULL_FOR, QUEUE_WATCH_INTERVAL
    };
    queue_sample qs;
    queue_verdict v;
    char dropped[64] = "";
    int drops_errno;
    int rv = read_queue(st, lr->sd, &qs, &drops_errno);

    if (rv != 0) {
        if (!st->error_reported) {
            ap_log_error(APLOG_MARK, APLOG_ERR, rv, s, BKLOGNO(00126)
                                                       "bucketed: cannot "
                         "read the accept queue of bucket %d (%pI) with "
                         "getsockopt(TCP_INFO); not sampling it", bucket,
                         lr->bind_addr);
            st->error_reported = 1;
        }
        return 0;
    }
    if (!publish) {
        return qs.depth;
    }
    if (drops_errno != 0 && !st->drops_reported) {
        ap_log_error(APLOG_MARK, APLOG_DEBUG, drops_errno, s, BKLOGNO(00127)
                                                              "bucketed: "
                     "no per-socket drop count for bucket %d (%pI): "
                     "getsockopt(SO_MEMINFO) needs Linux 4.6", bucket,
                     lr->bind_addr);
        st->drops_reported = 1;
    }
    v = queue_watch_update(&st->watch, &qs, now, &limits);
    publish_sample(pub, &qs, st);
    if (v.warn) {
        if (qs.has_drops) {
            apr_snprintf(dropped, sizeof(dropped), ", %u packet(s) dropped "
                         "meanwhile", v.dropped);
        }
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, BKLOGNO(00128)
                                                      "bucketed: the accept "
                     "queue of bucket %d (%pI) has been full for %d s: %u "
                     "connection(s) waiting, backlog %u%s; the bucket's "
                     "children do not keep up (raise MaxRequestWorkers, or "
                     "look for slow requests)", bucket, lr->bind_addr,
                     (int)apr_time_sec(v.full_for), qs.depth, qs.backlog,
                     dropped);
    }
    return qs.depth;
}

void bucket_queue_sample(server_rec *s, bucket_generation *gen)
{
    struct bucket_queue_state *state = gen->queue;
    apr_time_t now = apr_time_now();
    int b, i = 0, publish;

    for (b = 0; b < gen->num_buckets; b++) {
        gen->buckets[b].queued = 0;
    }
    if (state == NULL || gen->sockets == NULL) {
        return;
    }
    publish = state->last_sample == 0
              || now - state->last_sample >= SAMPLE_INTERVAL;
    for (b = 0; b < gen->num_buckets; b++) {
        bucket_rec *bk = &gen->buckets[b];
        const ap_listen_rec *lr;

        for (lr = bk->listeners; lr; lr = lr->next, i++) {
            if (i >= state->num_sockets || i >= gen->num_sockets) {
                break;
            }
            bk->queued += sample_one(s, &state->sockets[i], &gen->sockets[i],
                                     b, lr, now, publish);
        }
    }
    if (publish) {
        state->last_sample = now;
        gen->times->sampled_at = now;
    }
}
