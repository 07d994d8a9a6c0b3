dnl bucketed MPM, in an httpd 2.4 source tree: the platform check.
dnl
dnl The name must be config1.m4. build/config-stubs includes every config*.m4
dnl sorted by its number, unnumbered ones first and then by path, so a
dnl config.m4 here would come before server/mpm/config.m4 ("bucketed" sorts
dnl before "config") and use APACHE_MPM_SUPPORTED before it is defined.
dnl config1.m4 comes after every unnumbered file and before
dnl server/mpm/config2.m4, which handles --with-mpm.
dnl
dnl bucketed forks processes, like prefork; it does not need threads. Whether
dnl the kernel has SO_REUSEPORT is probed when httpd starts, not here: without
dnl it the MPM runs one bucket per Listen address.

AC_MSG_CHECKING([whether the bucketed MPM supports this platform])
if test "$forking_mpms_supported" = yes; then
    AC_MSG_RESULT([yes])
    dnl name, can be built shared, is threaded
    APACHE_MPM_SUPPORTED(bucketed, yes, no)
else
    AC_MSG_RESULT([no - it needs fork()])
fi
