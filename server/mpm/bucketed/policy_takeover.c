/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_takeover.c: which children and sockets a take-over trusts
 * (policy_takeover.h). Pure.
 */
#include "policy_takeover.h"

static takeover_verdict_e judge_child(const process_facts *f, pid_t parent)
{
    if (!f->found || f->zombie) {
        return REFUSE_GONE;
    }
    return f->parent == parent ? TAKE_OVER : REFUSE_NOT_CHILD;
}

takeover_verdict_e takeover_judge_recorded(const process_facts *f,
                                           pid_t parent,
                                           apr_uint64_t recorded_start)
{
    takeover_verdict_e v = judge_child(f, parent);

    if (v != TAKE_OVER) {
        return v;
    }
    return f->start_ticks == recorded_start ? TAKE_OVER
                                            : REFUSE_OTHER_PROCESS;
}

takeover_verdict_e takeover_judge_unrecorded(const process_facts *f,
                                             pid_t parent, uid_t user,
                                             apr_uint64_t restart_ticks)
{
    takeover_verdict_e v = judge_child(f, parent);

    if (v != TAKE_OVER) {
        return v;
    }
    if (f->real_uid != user || f->effective_uid != user) {
        return REFUSE_OTHER_USER;
    }
    if (f->start_ticks > restart_ticks) {
        return REFUSE_TOO_NEW;
    }
    return f->holds_listener ? TAKE_OVER : REFUSE_NOT_WORKER;
}

const char *takeover_verdict_name(takeover_verdict_e v)
{
    switch (v) {
    case TAKE_OVER:
        return "taken over";
    case REFUSE_GONE:
        return "no such process";
    case REFUSE_NOT_CHILD:
        return "not this parent's child";
    case REFUSE_OTHER_PROCESS:
        return "another process under the same pid";
    case REFUSE_OTHER_USER:
        return "not running as User";
    case REFUSE_TOO_NEW:
        return "started after the restart began";
    case REFUSE_NOT_WORKER:
        return "holds none of the listening sockets: not a worker child";
    }
    return "unknown";
}

int takeover_closes_socket(const socket_facts *f)
{
    if (!f->reuseport_listener || f->core_owned || f->kept_passed) {
        return 0;
    }
    return f->recorded ? f->in_record : f->on_listen_address;
}
