/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_notify.c: see sys_notify.h. The socket's name is kept in retained
 * data of its own, whose layout never changes (notify_record), so that a
 * build with another layout of bucketed_retained, loaded by a graceful
 * restart, still tells the service manager.
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
#include "http_main.h"

APLOG_USE_MODULE(mpm_bucketed);

#define NOTIFY_KEY "mpm_bucketed_notify"
#define NOTIFY_MAGIC 0x424b4e54u         /* "BKNT" */
/* Later versions only append fields to notify_record, so that a build
 * reads the record of any version from its own up. */
#define NOTIFY_VERSION 1u

/* Frozen, as bucketed_data.c's state header; in the process pool. */
typedef struct {
    apr_uint32_t magic;
    apr_uint32_t version;
    const char *socket;              /* NOTIFY_SOCKET, or NULL */
    const char *unusable;            /* a NOTIFY_SOCKET that names no
                                      * socket, until logged */
} notify_record;

static notify_record *notify_get(void)
{
    notify_record *rec = ap_retained_data_get(NOTIFY_KEY);

    return rec != NULL && rec->magic == NOTIFY_MAGIC
           && rec->version >= NOTIFY_VERSION ? rec : NULL;
}

void notify_read(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    notify_record *rec;

    if (ap_retained_data_get(NOTIFY_KEY) != NULL) {
        return;
    }
    rec = ap_retained_data_create(NOTIFY_KEY, sizeof(*rec));
    rec->magic = NOTIFY_MAGIC;
    rec->version = NOTIFY_VERSION;
    if (path == NULL) {
        return;
    }
    /* A path ("/run/...") or an abstract name ("@..."). */
    if ((path[0] != '/' && path[0] != '@') || strlen(path) < 2
        || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        rec->unusable = apr_pstrdup(ap_pglobal, path);
    }
    else {
        rec->socket = apr_pstrdup(ap_pglobal, path);
    }
    unsetenv("NOTIFY_SOCKET");
}

void notify_log_reading(server_rec *s)
{
    notify_record *rec = notify_get();

    if (rec == NULL || rec->unusable == NULL) {
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_WARNING | APLOG_STARTUP, 0, s,
                 BKLOGNO(00136) "bucketed: NOTIFY_SOCKET=%s is not a "
                 "socket path or abstract name: the service manager is "
                 "not told when the server is ready", rec->unusable);
    rec->unusable = NULL;
}

void notify_send(server_rec *s, const char *state)
{
    const notify_record *rec = notify_get();
    struct sockaddr_un addr;
    socklen_t len;
    apr_size_t n;
    int fd;

    if (rec == NULL || rec->socket == NULL) {
        return;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    n = strlen(rec->socket);
    memcpy(addr.sun_path, rec->socket, n);
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
                     rec->socket, state);
    }
    if (fd >= 0 && close(fd) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00138)
                     "bucketed: close() of the notification socket");
    }
}
