/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_notify.c: see sys_notify.h.
 */
#include "sys_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "apr_strings.h"

#include "http_log.h"

APLOG_USE_MODULE(mpm_bucketed);

void notify_read(server_rec *s, bucketed_retained *retained)
{
    const char *path = getenv("NOTIFY_SOCKET");

    if (retained->notify_socket != NULL || path == NULL) {
        return;
    }
    /* A path ("/run/...") or an abstract name ("@..."). */
    if ((path[0] != '/' && path[0] != '@') || strlen(path) < 2
        || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                     BKLOGNO(00136) "bucketed: NOTIFY_SOCKET=%s is not a "
                     "socket path or abstract name: the service manager is "
                     "not told when the server is ready", path);
    }
    else {
        retained->notify_socket = apr_pstrdup(s->process->pool, path);
    }
    unsetenv("NOTIFY_SOCKET");
}

void notify_send(server_rec *s, const bucketed_retained *retained,
                 const char *state)
{
    struct sockaddr_un addr;
    socklen_t len;
    apr_size_t n;
    int fd;

    if (retained->notify_socket == NULL) {
        return;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    n = strlen(retained->notify_socket);
    memcpy(addr.sun_path, retained->notify_socket, n);
    if (addr.sun_path[0] == '@') {
        addr.sun_path[0] = '\0';   /* abstract: no terminating NUL counts */
    }
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0
        || sendto(fd, state, strlen(state), MSG_NOSIGNAL,
                  (struct sockaddr *)&addr, len) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00137)
                     "bucketed: cannot tell the service manager (%s) \"%s\"",
                     retained->notify_socket, state);
    }
    if (fd >= 0 && close(fd) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00138)
                     "bucketed: close() of the notification socket");
    }
}
