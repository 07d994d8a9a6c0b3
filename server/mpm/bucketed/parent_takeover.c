/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_takeover.c: what a graceful restart onto an incompatible build
 * (policy_upgrade.h) leaves for the new build's parent to deal with, since
 * the old build's state cannot be read: its buckets' listening sockets,
 * still open in the parent, and its children, still serving.
 *
 * Root trusts nothing a child can write. The old build left a record of
 * its children (pid and start time) and of the sockets it opened in the
 * parent's own memory (parent_record.c); only those are taken over and
 * closed, each checked with the kernel to be the same process or socket.
 * A build from before the record left only the scoreboard, which any
 * child can write: a pid found there is taken over only if the kernel
 * says it is a worker child (policy_takeover.h), and only reuseport
 * listeners on the addresses this configuration listens on are closed.
 * A child taken over is checked again before every signal and count
 * (parent_adopted.c).
 */
#include "parent_context.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "http_log.h"
#include "scoreboard.h"

#include "listen_activation.h"
#include "listen_steering.h"
#include "policy_takeover.h"
#include "sys_bpf.h"
#include "sys_proc.h"
#include "parent_record.h"

APLOG_USE_MODULE(mpm_bucketed);

/* A child found at open_logs, taken into the slot table by parent_run. */
struct takeover_candidate {
    pid_t pid;
    apr_uint64_t start_ticks;
    int slot;
};

/* A listening TCP socket; *reuseport: with SO_REUSEPORT on, as
 * bucketed's duplicates are, and core's sockets are not unless
 * duplicated. */
static int is_listener(int fd, int *reuseport)
{
    passed_fd_kind kind;

    if (listen_inspect_fd(fd, &kind) != APR_SUCCESS
        || activation_fd_unusable(&kind) != NULL) {
        return 0;
    }
    *reuseport = kind.reuseport;
    return 1;
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

/* Bound to the address of one of core's listeners (a Listen). */
static int on_listen_address(int fd)
{
    socket_address mine, theirs;
    ap_listen_rec *lr;

    if (listen_bound_address(fd, &mine) < 0) {
        return 0;
    }
    for (lr = ap_listeners; lr; lr = lr->next) {
        if (listen_bound_address(listen_socket_fd(lr->sd), &theirs) == 0
            && activation_address_matches(&mine, &theirs)) {
            return 1;
        }
    }
    return 0;
}

static int in_record(const takeover_record *record, int fd)
{
    int i;

    for (i = 0; i < record->num_sockets; i++) {
        if (record->sockets[i].fd == fd) {
            return record->sockets[i].inode == proc_socket_inode(fd);
        }
    }
    return 0;
}

/* The descriptors of the parent, as numbers; -1 ends the list. NULL when
 * /proc/self/fd cannot be listed (logged). */
static int *parent_descriptors(apr_pool_t *p, server_rec *s)
{
    DIR *dir = opendir("/proc/self/fd");
    apr_array_header_t *fds = apr_array_make(p, 64, sizeof(int));
    struct dirent *de;

    if (dir == NULL) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00140)
                     "bucketed: cannot list /proc/self/fd: the previous "
                     "build's bucket sockets stay open in the parent (the "
                     "connections the kernel gives them wait until a full "
                     "restart), and none of its children is taken over");
        return NULL;
    }
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9'
            && atoi(de->d_name) != dirfd(dir)) {
            APR_ARRAY_PUSH(fds, int) = atoi(de->d_name);
        }
    }
    closedir(dir);
    APR_ARRAY_PUSH(fds, int) = -1;
    return (int *)fds->elts;
}

static void close_sockets(server_rec *s, const int *fds,
                          const takeover_record *record,
                          const char *takeover)
{
    int i, closed = 0;

    for (i = 0; fds[i] >= 0; i++) {
        socket_facts f;
        int reuseport;

        f.reuseport_listener = is_listener(fds[i], &reuseport) && reuseport;
        f.core_owned = is_core_listener(fds[i]);
        f.recorded = record != NULL;
        f.in_record = record != NULL && in_record(record, fds[i]);
        f.on_listen_address = record == NULL && on_listen_address(fds[i]);
        f.kept_passed = listen_activation_keeps(fds[i]);
        if (!takeover_closes_socket(&f)) {
            continue;
        }
        if (close(fds[i]) < 0) {
            int err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00141)
                         "bucketed: close() of the previous build's "
                         "listening socket (descriptor %d)", fds[i]);
            continue;
        }
        closed++;
    }
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, BKLOGNO(00142)
                 "bucketed: %s: this build cannot read it and starts over; "
                 "closed %d listening socket(s) of the old build's buckets, "
                 "%s (what waits in them migrates to the group, or is reset "
                 "on kernels without migration, when its last child leaves)",
                 takeover, closed, record != NULL
                 ? "those it recorded as its own"
                 : "reuseport listeners on Listen addresses (it kept no "
                   "record of its sockets)");
}

/* The old build's socket and idle-count maps, which the parent keeps
 * (its children close theirs; the programs were closed once attached).
 * While the parent keeps its socket map, the Listen sockets in it cannot
 * join this build's map (EBUSY): each later restart would wait for it in
 * vain (BK00251) and steer their slots by the kernel's hash until a full
 * stop. Only maps bucketed names are closed. */
static void close_steering_maps(server_rec *s, const int *fds)
{
    int i, closed = 0;

    for (i = 0; fds[i] >= 0; i++) {
        int err;

        if (!reuseport_bpf_map_is_bucketed(fds[i], &err)) {
            if (err != 0) {
                ap_log_error(APLOG_MARK, APLOG_WARNING, err, s,
                             BKLOGNO(00258) "bucketed: descriptor %d is a "
                             "BPF map whose name cannot be read: left open "
                             "(if it is the previous build's socket map, "
                             "its sockets stay out of this build's until a "
                             "full stop)", fds[i]);
            }
            continue;
        }
        if (close(fds[i]) < 0) {
            err = errno;
            ap_log_error(APLOG_MARK, APLOG_WARNING, err, s, BKLOGNO(00259)
                         "bucketed: close() of the previous build's BPF map "
                         "(descriptor %d)", fds[i]);
            continue;
        }
        closed++;
    }
    if (closed > 0) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00260)
                     "bucketed: closed %d BPF map(s) of the previous "
                     "build's steering, so that its sockets can join this "
                     "build's maps", closed);
    }
}

static void note_refusal(server_rec *s, int slot, pid_t pid,
                         takeover_verdict_e v)
{
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, BKLOGNO(00210)
                 "bucketed: slot %d names pid %" APR_PID_T_FMT ", not taken "
                 "over: %s", slot, pid, takeover_verdict_name(v));
}

static int find_recorded(server_rec *s, const takeover_record *record,
                         int server_limit,
                         struct takeover_candidate *found)
{
    pid_t me = getpid();
    int i, n = 0;

    for (i = 0; i < record->num_children && n < server_limit; i++) {
        const recorded_child *rc = &record->children[i];
        process_facts f;
        takeover_verdict_e v;

        if (rc->slot < 0 || rc->slot >= server_limit) {
            continue;
        }
        proc_read_facts((pid_t)rc->pid, &f);
        v = takeover_judge_recorded(&f, me, rc->start_ticks);
        if (v != TAKE_OVER) {
            note_refusal(s, rc->slot, (pid_t)rc->pid, v);
            continue;
        }
        found[n].pid = (pid_t)rc->pid;
        found[n].start_ticks = rc->start_ticks;
        found[n].slot = rc->slot;
        n++;
    }
    return n;
}

/* The inodes of the parent's listening sockets, every one of them (core's,
 * the old build's duplicates, passed ones): a worker child holds some. */
static apr_uint64_t *listener_inodes(apr_pool_t *p, const int *fds, int *n)
{
    apr_uint64_t *inodes;
    int i;

    i = 0;
    while (fds[i] >= 0) {
        i++;
    }
    inodes = apr_palloc(p, sizeof(*inodes) * (i + 1));
    *n = 0;
    for (i = 0; fds[i] >= 0; i++) {
        int reuseport;

        if (is_listener(fds[i], &reuseport)) {
            inodes[(*n)++] = proc_socket_inode(fds[i]);
        }
    }
    return inodes;
}

static int find_in_scoreboard(server_rec *s, apr_pool_t *p, const int *fds,
                              int server_limit,
                              struct takeover_candidate *found)
{
    apr_uint64_t began;
    apr_status_t rv = proc_ticks_now(&began);
    pid_t me = getpid();
    /* Started as root, workers switch to User; otherwise they keep the
     * parent's user. */
    uid_t worker_user = geteuid() == 0 ? ap_unixd_config.user_id
                                       : geteuid();
    int num_inodes, slot, n = 0;
    apr_uint64_t *inodes;

    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, BKLOGNO(00213)
                     "bucketed: cannot read the clock the kernel dates "
                     "processes by: none of the previous build's children "
                     "is taken over (they finish and leave on their own, "
                     "or stay until the server stops)");
        return 0;
    }
    inodes = listener_inodes(p, fds, &num_inodes);
    for (slot = 0; slot < server_limit; slot++) {
        pid_t pid = ap_scoreboard_image->parent[slot].pid;
        process_facts f;
        takeover_verdict_e v;
        int i, duplicate = 0;

        if (pid <= 0) {
            continue;
        }
        for (i = 0; i < n; i++) {
            duplicate |= found[i].pid == pid;
        }
        if (duplicate) {
            continue;
        }
        proc_read_facts(pid, &f);
        f.holds_listener = f.found && proc_holds_socket(pid, inodes,
                                                        num_inodes);
        v = takeover_judge_unrecorded(&f, me, worker_user, began);
        if (v != TAKE_OVER) {
            note_refusal(s, slot, pid, v);
            continue;
        }
        found[n].pid = pid;
        found[n].start_ticks = f.start_ticks;
        found[n].slot = slot;
        n++;
    }
    return n;
}

void takeover_prepare(apr_pool_t *pconf, server_rec *s,
                      bucketed_retained *retained)
{
    ap_unixd_mpm_retained_data *mpm = retained->mpm;
    const takeover_record *record =
        parent_record_find(mpm->my_generation);
    int server_limit = retained->first_server_limit;
    int *fds = parent_descriptors(pconf, s);

    retained->takeover_candidates = apr_pcalloc(
        pconf, sizeof(struct takeover_candidate) * server_limit);
    retained->num_takeover_candidates = 0;
    retained->takeover_recorded = record != NULL;
    if (fds == NULL) {
        return;
    }
    /* Children first: without a record, a worker is known by the
     * listening sockets it holds, the old duplicates among them. */
    if (record != NULL) {
        retained->num_takeover_candidates = find_recorded(
            s, record, server_limit, retained->takeover_candidates);
    }
    else if (ap_scoreboard_image != NULL) {
        retained->num_takeover_candidates = find_in_scoreboard(
            s, pconf, fds, server_limit, retained->takeover_candidates);
    }
    close_sockets(s, fds, record, retained->takeover);
    close_steering_maps(s, fds);
}

void takeover_adopt_children(parent_context *pc)
{
    bucketed_retained *retained = pc->retained;
    int i, adopted = 0;

    for (i = 0; i < retained->num_takeover_candidates; i++) {
        const struct takeover_candidate *tc =
            &retained->takeover_candidates[i];
        child_slot *cs = &retained->slots[tc->slot];

        if (cs->pid != 0) {
            continue;
        }
        cs->pid = tc->pid;
        cs->taken_over_start = tc->start_ticks;
        cs->bucket = bucket_of_slot(tc->slot, pc->num_buckets);
        cs->generation = pc->generation - 1;
        cs->exit_requested = 0;
        cs->replace_into = NO_REPLACEMENT;
        /* Checked again now that the configuration is read. */
        if (adopted_slot_still_ours(pc, tc->slot)) {
            parent_note_slot_used(retained, tc->slot);
            adopted++;
        }
    }
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, pc->s, BKLOGNO(00143)
                 "bucketed: took %d child(ren) of the previous build into "
                 "the slot table as an old generation (%s): each is asked "
                 "to leave gracefully and replaced in its slot", adopted,
                 retained->takeover_recorded
                 ? "from the record it left of its children"
                 : "it left no record: from the scoreboard, each the "
                   "parent's child, running as User, started before the "
                   "restart and holding a listening socket");
    retained->takeover = NULL;
}
