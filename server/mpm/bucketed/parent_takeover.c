/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_takeover.c: what a graceful restart onto an incompatible build
 * (policy_upgrade.h) leaves for the new build's parent to deal with, since
 * the old build's state cannot be read: its buckets' listening sockets,
 * still open in the parent, and its children, still serving. Found
 * without that state: the sockets by what the kernel says of the
 * parent's descriptors, the children from the scoreboard, each checked
 * with the kernel to be this process's child before it is trusted (the
 * scoreboard is shared memory any child can write).
 */
#include "parent_context.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_log.h"
#include "scoreboard.h"

#include "listen_activation.h"
#include "listen_steering.h"

APLOG_USE_MODULE(mpm_bucketed);

/* A listening TCP socket with SO_REUSEPORT on: what bucketed's
 * duplicates are, and core's sockets are not unless duplicated. */
static int is_reuseport_listener(int fd)
{
    passed_fd_kind kind;

    return listen_inspect_fd(fd, &kind) == APR_SUCCESS
           && activation_fd_unusable(&kind) == NULL && kind.reuseport;
}

static int is_core_listener(int fd)
{
    ap_listen_rec *lr;

    for (lr = ap_listeners; lr; lr = lr->next) {
        if (listen_socket_fd(lr->sd) == fd) {
            return 1;
        }
    }
    return 0;
}

void takeover_close_sockets(server_rec *s, bucketed_retained *retained)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *de;
    int closed = 0;

    if (dir == NULL) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00140)
                     "bucketed: cannot list /proc/self/fd: the previous "
                     "build's bucket sockets stay open in the parent, and "
                     "the connections the kernel gives them wait until a "
                     "full restart");
        return;
    }
    while ((de = readdir(dir)) != NULL) {
        int fd = atoi(de->d_name);

        if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(dir)
            || !is_reuseport_listener(fd) || is_core_listener(fd)) {
            continue;
        }
        if (close(fd) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00141)
                         "bucketed: close() of the previous build's "
                         "listening socket (descriptor %d)", fd);
            continue;
        }
        closed++;
    }
    closedir(dir);
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, BKLOGNO(00142)
                 "bucketed: %s: this build cannot read it and starts over; "
                 "closed %d listening socket(s) of the old build's buckets "
                 "(what waits in them migrates to the group, or is reset on "
                 "kernels without migration, when its last child leaves)",
                 retained->takeover, closed);
}

/* The parent of pid, from /proc/<pid>/stat; 0 when it cannot be read. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512];
    const char *close_paren;
    FILE *f;
    size_t n;
    char state;
    long ppid;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses. */
    close_paren = strrchr(buf, ')');
    if (close_paren == NULL
        || sscanf(close_paren + 1, " %c %ld", &state, &ppid) != 2
        || state == 'Z') {
        return 0;
    }
    return (pid_t)ppid;
}

static int already_recorded(const bucketed_retained *retained, pid_t pid)
{
    int slot;

    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        if (retained->slots[slot].pid == pid) {
            return 1;
        }
    }
    return 0;
}

void takeover_adopt_children(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    pid_t me = getpid();
    int slot, adopted = 0;

    for (slot = 0; slot < retained->first_server_limit; slot++) {
        pid_t pid = ap_scoreboard_image->parent[slot].pid;
        child_slot *cs = &retained->slots[slot];

        if (pid <= 0 || parent_of(pid) != me
            || already_recorded(retained, pid)) {
            continue;
        }
        cs->pid = pid;
        cs->bucket = bucket_of_slot(slot, pc->num_buckets);
        cs->generation = pc->generation - 1;
        cs->exit_requested = 0;
        cs->replace_into = NO_REPLACEMENT;
        parent_note_slot_used(retained, slot);
        adopted++;
    }
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, pc->s, BKLOGNO(00143)
                 "bucketed: took %d child(ren) of the previous build into "
                 "the slot table as an old generation: each is asked to "
                 "leave gracefully and replaced in its slot", adopted);
    retained->takeover = NULL;
}
