dnl SPDX-License-Identifier: Apache-2.0
dnl bucketed MPM, in an httpd 2.4 source tree: the module and its objects.
dnl
dnl The object list must name the same sources as MPM_SOURCES in bucketed's
dnl Makefile.am (the apxs build); test/integration/test_intree_layout.py
dnl checks that they match.
bucketed_objects="mod_mpm_bucketed.lo bucketed_data.lo bucket.lo directives.lo listen_sockets.lo listen_steering.lo listen_steer_slots.lo listen_absence.lo listen_activation.lo sys_notify.lo \
stats_counters.lo stats_queue.lo stats_report.lo child_life.lo child_affinity.lo prefork_child.lo prefork_keepalive.lo child_accept.lo child_protocols.lo \
event_epoll.lo event_accept.lo event_waiting.lo event_work.lo event_worker.lo event_keeper.lo event_child.lo sys_probe.lo \
sys_bpf.lo sys_trial.lo parent.lo parent_maint.lo parent_census.lo parent_stalls.lo parent_handover.lo parent_slots.lo parent_takeover.lo parent_record.lo parent_adopted.lo sys_proc.lo policy_plan.lo policy_maint.lo policy_exit.lo \
policy_directives.lo policy_event.lo policy_timeouts.lo policy_kernel.lo \
policy_stall.lo policy_accept_queue.lo policy_steering.lo policy_affinity.lo policy_activation.lo policy_upgrade.lo policy_takeover.lo policy_handover.lo"

dnl APACHE_MPM_MODULE(name, static-or-shared, objects, configure-commands)
dnl writes modules.mk and then runs the commands. They give the MPM's own
dnl directory a make variable for extra compiler flags, so that
dnl   make BUCKETED_CFLAGS='-Wall -Wextra -Werror'
dnl applies them to bucketed's sources and to nothing else in httpd.
APACHE_MPM_MODULE(bucketed, $enable_mpm_bucketed, $bucketed_objects, [
    echo 'MOD_CFLAGS = $(BUCKETED_CFLAGS)' >> $mpmpath/modules.mk
])

dnl User and Group come from mod_unixd, which modules/arch/unix/config5.m4
dnl enables by default only for the MPMs it knows. With bucketed as the only
dnl MPM it stays off unless asked for, and an httpd started as root would
dnl then have nothing to drop its privileges with.
if ap_mpm_is_enabled bucketed; then
    case "$enable_unixd" in
    static|shared|yes)
        ;;
    *)
        if ap_mpm_is_enabled prefork || ap_mpm_is_enabled worker \
           || ap_mpm_is_enabled event; then
            :
        else
            AC_MSG_WARN([mod_unixd (User, Group) is not enabled for the bucketed MPM: add --enable-unixd=static])
        fi
        ;;
    esac
fi
