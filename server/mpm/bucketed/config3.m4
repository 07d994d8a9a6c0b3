dnl SPDX-License-Identifier: Apache-2.0
dnl bucketed MPM, in an httpd 2.4 source tree: the module and its objects.
dnl
dnl The object list must name the same sources as MPM_SOURCES in bucketed's
dnl Makefile.am (the apxs build); test/integration/test_intree_layout.py
dnl checks that they match.
bucketed_objects="mod_mpm_bucketed.lo bucketed_data.lo directives.lo bucket_listeners.lo listen_steering.lo \
bucket_stats.lo bucket_queue.lo bucket_report.lo child_life.lo prefork_child.lo child_accept.lo \
event_accept.lo event_base.lo event_work.lo event_child.lo event_keeper.lo event_poll.lo event_worker.lo kernel_probe.lo \
reuseport_bpf.lo reuseport_trial.lo parent.lo parent_maint.lo parent_slots.lo bucket_plan.lo bucket_maint.lo exit_policy.lo \
directive_check.lo event_limits.lo event_timeouts.lo kernel_features.lo \
policy_stall.lo queue_watch.lo steering.lo"

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
