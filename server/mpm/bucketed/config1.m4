dnl SPDX-License-Identifier: Apache-2.0
dnl bucketed MPM, in an httpd 2.4 source tree: the platform check.
dnl
dnl The name must be config1.m4. build/config-stubs includes every config*.m4
dnl sorted by its number, unnumbered ones first and then by path, so a
dnl config.m4 here would come before server/mpm/config.m4 ("bucketed" sorts
dnl before "config") and use APACHE_MPM_SUPPORTED before it is defined.
dnl config1.m4 comes after every unnumbered file and before
dnl server/mpm/config2.m4, which handles --with-mpm.
dnl
dnl bucketed forks processes, like prefork. Its ChildModel event runs threads,
dnl so it is declared threaded where APR has them (as event and worker check
dnl it, with server/mpm/config.m4's result); without threads it builds with
dnl ChildModel prefork only and refuses ChildModel event at start-up. Whether
dnl the kernel has SO_REUSEPORT is probed when httpd starts, not here: without
dnl it the MPM runs one bucket per Listen address.

AC_MSG_CHECKING([whether the bucketed MPM supports this platform])
if test "$forking_mpms_supported" = yes; then
    if test "$ac_cv_define_APR_HAS_THREADS" = yes; then
        AC_MSG_RESULT([yes (both child models)])
        bucketed_threaded=yes
    else
        AC_MSG_RESULT([yes (ChildModel prefork only: APR has no threads)])
        bucketed_threaded=no
    fi
    dnl name, can be built shared, is threaded
    APACHE_MPM_SUPPORTED(bucketed, yes, $bucketed_threaded)
else
    AC_MSG_RESULT([no - it needs fork()])
fi
