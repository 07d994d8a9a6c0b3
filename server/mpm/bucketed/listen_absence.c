/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_absence.c: the socket side of a bucket with no child (issue 26).
 * The parent shuts its sockets down, taking them out of their reuseport
 * groups; the first child forked into it that gets through its set-up
 * listens on them again, so that a child that fails puts nothing back
 * for the kernel to send connections to; the parent, seeing that child
 * ready, puts them back in their steering maps.
 */
#include "listen_absence.h"

#include <errno.h>
#include <sys/socket.h>

#include "http_log.h"

#include "listen_steering.h"

APLOG_USE_MODULE(mpm_bucketed);

int bucket_listeners_leave(server_rec *s, const bucketed_config *conf,
                           bucketed_retained *retained, int b)
{
    const bucket_def *def = &conf->plan.buckets[b];
    const ap_listen_rec *lr = retained->generation->buckets[b].listeners;
    int k;

    for (k = 0; k < def->num_sockets && lr; k++, lr = lr->next) {
        /* Out already where a child handed it died before listening. */
        int err = listen_socket_leave_group(lr->sd);

        if (err != 0) {
            ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00182)
                                                        "bucketed: cannot "
                         "shut bucket %d's socket for %pI down; it stays "
                         "in its reuseport group", b, lr->bind_addr);
            bucket_listeners_rejoin(s, conf, retained, b);
            return -1;
        }
    }
    return 0;
}

/* listen() again puts a shut-down socket back into its group (Linux
 * 5.14+, which buckets leave only where migration was seen working); on
 * one still listening it changes nothing. */
static int listen_again(server_rec *s, const bucketed_config *conf, int b,
                        const ap_listen_rec *lr)
{
    if (listen(listen_socket_fd(lr->sd), conf->listen_backlog) < 0) {
        int err = errno;

        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00183)
                                                    "bucketed: cannot "
                     "listen on bucket %d's socket for %pI again",
                     b, lr->bind_addr);
        return -1;
    }
    return 0;
}

int bucket_listeners_rejoin(server_rec *s, const bucketed_config *conf,
                            bucketed_retained *retained, int b)
{
    const bucket_def *def = &conf->plan.buckets[b];
    const ap_listen_rec *lr = retained->generation->buckets[b].listeners;
    int k, rc = 0;

    for (k = 0; k < def->num_sockets && lr; k++, lr = lr->next) {
        if (listen_again(s, conf, b, lr) != 0
            || listen_steering_put_back(s, retained, b,
                                        def->sockets[k].duplicate,
                                        lr) != 0) {
            rc = -1;
        }
    }
    return rc;
}

int bucket_listeners_listen_again(server_rec *s,
                                  const bucketed_config *conf,
                                  bucketed_retained *retained, int b)
{
    const bucket_def *def = &conf->plan.buckets[b];
    const ap_listen_rec *lr = retained->generation->buckets[b].listeners;
    int k;

    for (k = 0; k < def->num_sockets && lr; k++, lr = lr->next) {
        int listening = 0;
        socklen_t len = sizeof(listening);

        if (getsockopt(listen_socket_fd(lr->sd), SOL_SOCKET, SO_ACCEPTCONN,
                       &listening, &len) < 0) {
            int err = errno;

            ap_log_error(APLOG_MARK, APLOG_ERR, err, s, BKLOGNO(00196)
                                                        "bucketed: cannot "
                         "tell whether bucket %d's socket for %pI listens",
                         b, lr->bind_addr);
            return -1;
        }
        if (!listening && listen_again(s, conf, b, lr) != 0) {
            return -1;
        }
    }
    return 0;
}
