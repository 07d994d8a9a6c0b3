/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefork_keepalive.c: the prefork child's wait for a keep-alive
 * connection's next request (prefork_keepalive.h says why it is the MPM's).
 *
 * A connection input filter above mod_ssl. http_core marks the child
 * SERVER_BUSY_KEEPALIVE after a response and then reads the next request
 * line; that first blocking read is the wait. The filter takes what is
 * already there without blocking (a pipelined request, bytes mod_ssl holds:
 * what httpd's pipeline check found), and otherwise waits in ppoll() on the
 * connection's socket for at most its timeout (KeepAliveTimeout), the
 * give-up signal opened once the connection has been idle long enough to
 * be given up. Readable: httpd's own read follows. Timed out:
 * APR_TIMEUP, as the socket read would have said. Asked to give up, and
 * still allowed to (keepalive_gives_up): EOF, which httpd takes for a
 * client that closed between requests; the child then closes the
 * connection and goes back to its bucket's accept queue.
 */
#include <errno.h>
#include <poll.h>

#include "apr_portable.h"

#include "httpd.h"
#include "http_connection.h"
#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "scoreboard.h"
#include "util_filter.h"

#include "child_life.h"
#include "policy_stall.h"
#include "prefork_keepalive.h"
#include "stats.h"

APLOG_USE_MODULE(mpm_bucketed);

#define KEEPALIVE_FILTER_NAME "BUCKETED_KEEPALIVE_WAIT"

/* Per connection. */
typedef struct {
    keepalive_waiter *kw;
    int keepalives_waited;           /* c->keepalives at the last wait */
} keepalive_conn;

typedef enum {
    WAIT_READABLE,                   /* the client sent something, or the
                                      * socket has an error for httpd to
                                      * meet */
    WAIT_TIMED_OUT,
    WAIT_GAVE_UP
} wait_outcome;

apr_status_t keepalive_waiter_init(keepalive_waiter *kw,
                                   bucketed_retained *retained, int slot,
                                   int bucket)
{
    kw->retained = retained;
    kw->slot = slot;
    kw->bucket = bucket;
    kw->asked = 0;
    kw->gave_up = 0;
    if (sigprocmask(SIG_BLOCK, NULL, &kw->wait_mask) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_EMERG, err, ap_server_conf,
                     BKLOGNO(00187) "bucketed: sigprocmask in a child");
        return err;
    }
    sigdelset(&kw->wait_mask, BUCKETED_SIG_GIVE_UP);
    return APR_SUCCESS;
}

static int readable_now(int fd)
{
    struct pollfd pfd;

    pfd.fd = fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    return poll(&pfd, 1, 0) != 0;
}

/* How long the next ppoll() may last, at most `left` (negative: no
 * limit), and with which signal mask. Until the connection has been idle
 * long enough to be given up (keepalive_reclaimable()) the give-up signal
 * stays blocked and the mask is left alone: a client sending its requests
 * back to back is served by plain polls, without the two signal-mask
 * changes a masked ppoll() makes. */
static const sigset_t *wait_span(const keepalive_waiter *kw,
                                 apr_interval_time_t idle_for,
                                 apr_interval_time_t *left)
{
    apr_interval_time_t closed_for;

    if (keepalive_reclaimable(idle_for)) {
        return &kw->wait_mask;
    }
    closed_for = KEEPALIVE_RECLAIM_MIN_IDLE - idle_for;
    if (*left < 0 || *left > closed_for) {
        *left = closed_for;
    }
    return NULL;
}

static wait_outcome wait_for_request(keepalive_waiter *kw, conn_rec *c,
                                     int fd, apr_interval_time_t timeout)
{
    apr_time_t began = apr_time_now();

    for (;;) {
        struct pollfd pfd;
        struct timespec ts, *tsp = NULL;
        const sigset_t *mask;
        apr_interval_time_t idle_for = apr_time_now() - began;
        apr_interval_time_t left = -1, span;
        int n, err;

        if (timeout > 0) {
            left = timeout - idle_for;
            if (left < 0) {
                left = 0;
            }
        }
        span = left;
        mask = wait_span(kw, idle_for, &span);
        if (span >= 0) {
            ts.tv_sec = apr_time_sec(span);
            ts.tv_nsec = apr_time_usec(span) * 1000;
            tsp = &ts;
        }
        pfd.fd = fd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        n = ppoll(&pfd, 1, tsp, mask);
        if (n > 0) {
            return WAIT_READABLE;
        }
        if (n == 0) {
            if (span == left) {
                return WAIT_TIMED_OUT;
            }
            continue;       /* idle long enough now: open the signal */
        }
        err = errno;
        if (err != EINTR) {
            ap_log_cerror(APLOG_MARK, APLOG_ERR, err, c, BKLOGNO(00188)
                          "bucketed: ppoll() for a keep-alive connection");
            return WAIT_READABLE;
        }
        /* An ask that came, blocked, during a request or the first part
         * of this wait arrives as the signal opens; the bucket's queue
         * says whether it still stands. */
        if (kw->asked) {
            idle_for = apr_time_now() - began;
            kw->asked = 0;
            if (keepalive_gives_up(
                    idle_for,
                    bucket_stats_waiting(kw->retained, kw->bucket),
                    child_life_slot_quiescing(kw->retained->child_life))
                && !readable_now(fd)) {
                ap_log_cerror(APLOG_MARK, APLOG_DEBUG, 0, c, BKLOGNO(00189)
                              "bucketed: keep-alive connection idle for %"
                              APR_TIME_T_FMT " ms closed for a client "
                              "waiting in bucket %d",
                              apr_time_as_msec(idle_for), kw->bucket);
                return WAIT_GAVE_UP;
            }
        }
    }
}

static int waits_for_next_request(const keepalive_conn *kc, conn_rec *c,
                                  ap_input_mode_t mode,
                                  apr_read_type_e block)
{
    return mode == AP_MODE_GETLINE && block == APR_BLOCK_READ
           && c->keepalives != kc->keepalives_waited
           && ap_get_scoreboard_worker_from_indexes(kc->kw->slot, 0)->status
              == SERVER_BUSY_KEEPALIVE;
}

static apr_status_t keepalive_wait_filter(ap_filter_t *f,
                                          apr_bucket_brigade *bb,
                                          ap_input_mode_t mode,
                                          apr_read_type_e block,
                                          apr_off_t readbytes)
{
    keepalive_conn *kc = f->ctx;
    conn_rec *c = f->c;
    apr_socket_t *csd;
    apr_interval_time_t timeout;
    apr_os_sock_t fd;
    apr_status_t rv;

    if (!waits_for_next_request(kc, c, mode, block)) {
        return ap_get_brigade(f->next, bb, mode, block, readbytes);
    }
    kc->keepalives_waited = c->keepalives;
    /* After the response httpd looked for a pipelined request without
     * blocking, through mod_ssl too (data_in_input_filters). Where it found
     * one, take it; where it found none, looking again would only cost a
     * read that fails (stock prefork's wait makes one read fewer): what
     * came since wakes the poll. */
    if (c->data_in_input_filters) {
        rv = ap_get_brigade(f->next, bb, mode, APR_NONBLOCK_READ, readbytes);
        if (!APR_STATUS_IS_EAGAIN(rv)
            && !(rv == APR_SUCCESS && APR_BRIGADE_EMPTY(bb))) {
            return rv;
        }
    }
    csd = ap_get_conn_socket(c);
    if (csd == NULL || apr_socket_timeout_get(csd, &timeout) != APR_SUCCESS
        || timeout == 0 || apr_os_sock_get(&fd, csd) != APR_SUCCESS) {
        return ap_get_brigade(f->next, bb, mode, block, readbytes);
    }
    switch (wait_for_request(kc->kw, c, fd, timeout)) {
    case WAIT_TIMED_OUT:
        return APR_TIMEUP;
    case WAIT_GAVE_UP:
        kc->kw->gave_up = 1;
        bucket_stats_count_reclaimed(kc->kw->retained, kc->kw->bucket, 1);
        return APR_EOF;
    default:
        /* A short read earlier left APR's mark to poll before its next
         * read; the ppoll() just did, so the read goes straight to the
         * socket (one poll() a request fewer, stock prefork's count). */
        apr_socket_opt_set(csd, APR_INCOMPLETE_READ, 0);
        return ap_get_brigade(f->next, bb, mode, block, readbytes);
    }
}

void keepalive_waiter_attach(keepalive_waiter *kw, conn_rec *c)
{
    keepalive_conn *kc = apr_palloc(c->pool, sizeof(*kc));

    kc->kw = kw;
    kc->keepalives_waited = 0;
    kw->gave_up = 0;
    ap_add_input_filter(KEEPALIVE_FILTER_NAME, kc, NULL, c);
}

void keepalive_waiter_close(keepalive_waiter *kw, conn_rec *c)
{
    if (!kw->gave_up) {
        ap_lingering_close(c);
        return;
    }
    ap_start_lingering_close(c);
    apr_socket_close(ap_get_conn_socket(c));
}

void keepalive_waiter_register(void)
{
    /* Above mod_ssl (AP_FTYPE_CONNECTION + 5): the wait must see what it
     * has already decrypted. */
    ap_register_input_filter(KEEPALIVE_FILTER_NAME, keepalive_wait_filter,
                             NULL, AP_FTYPE_CONNECTION);
}
