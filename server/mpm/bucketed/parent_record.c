/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parent_record.c: the record of the parent's worker children and of
 * the MPM's own listening sockets, left at every restart for a build that
 * cannot read this one's state (parent_record.h).
 */
#include "parent_record.h"

#include "http_log.h"
#include "http_main.h"

#include "listen_steering.h"
#include "sys_proc.h"

APLOG_USE_MODULE(mpm_bucketed);

#define RECORD_KEY "mpm_bucketed_takeover_record"
#define RECORD_MAGIC 0x424b5452u     /* "BKTR" */
#define RECORD_VERSION 1

static takeover_record *record_get(void)
{
    takeover_record *record = ap_retained_data_get(RECORD_KEY);

    if (record == NULL) {
        record = ap_retained_data_create(RECORD_KEY, sizeof(*record));
    }
    record->magic = RECORD_MAGIC;
    record->version = RECORD_VERSION;
    return record;
}

static int count_sockets(const bucketed_retained *retained)
{
    const retained_socket *rs;
    int n = 0;

    for (rs = retained->sockets; rs; rs = rs->next) {
        n++;
    }
    return n;
}

static void record_children(server_rec *s, takeover_record *record,
                            const bucketed_retained *retained)
{
    int slot;

    if (record->children_room < retained->first_server_limit) {
        record->children = apr_pcalloc(s->process->pool,
                                        sizeof(recorded_child)
                                        * retained->first_server_limit);
        record->children_room = retained->first_server_limit;
    }
    record->num_children = 0;
    for (slot = 0; slot < retained->max_daemons_limit; slot++) {
        const child_slot *cs = &retained->slots[slot];
        recorded_child *rc = &record->children[record->num_children];
        process_facts f;

        if (cs->pid == 0) {
            continue;
        }
        proc_read_facts(cs->pid, &f);
        if (!f.found || f.zombie) {
            /* Gone already: reaped by the next build as no child of its. */
            continue;
        }
        rc->pid = cs->pid;
        rc->start_ticks = f.start_ticks;
        rc->slot = slot;
        record->num_children++;
    }
}

static void record_sockets(server_rec *s, takeover_record *record,
                           const bucketed_retained *retained)
{
    const retained_socket *rs;
    int n = count_sockets(retained);

    if (record->sockets_room < n) {
        record->sockets = apr_pcalloc(s->process->pool,
                                      sizeof(recorded_socket) * n);
        record->sockets_room = n;
    }
    record->num_sockets = 0;
    for (rs = retained->sockets; rs; rs = rs->next) {
        recorded_socket *sock = &record->sockets[record->num_sockets];
        int fd = listen_socket_fd(rs->sd);

        sock->inode = fd >= 0 ? proc_socket_inode(fd) : 0;
        if (sock->inode == 0) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, BKLOGNO(00212)
                         "bucketed: cannot identify the kept socket %s "
                         "(descriptor %d) for the take-over record: a build "
                         "of another layout leaves it open", rs->key, fd);
            continue;
        }
        sock->fd = fd;
        record->num_sockets++;
    }
}

void parent_record_write(server_rec *s, const bucketed_retained *retained,
                           ap_generation_t generation)
{
    takeover_record *record = record_get();

    /* Invalid while it is written: the next build runs in this process,
     * only after this returns; nothing else reads it. */
    record->generation = -1;
    if (retained->slots != NULL) {
        record_children(s, record, retained);
    }
    else {
        record->num_children = 0;
    }
    record_sockets(s, record, retained);
    record->generation = generation;
}

const takeover_record *parent_record_find(ap_generation_t generation)
{
    const takeover_record *record = ap_retained_data_get(RECORD_KEY);

    if (record == NULL || record->magic != RECORD_MAGIC
        || record->version != RECORD_VERSION
        || record->generation != generation) {
        return NULL;
    }
    return record;
}
