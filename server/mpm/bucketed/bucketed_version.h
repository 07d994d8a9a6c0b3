/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The release this build is: AC_INIT in configure.ac is the one place it
 * is written. The apxs build (Makefile.am) passes it as a bare token,
 * -DBUCKETED_RELEASE=0.25.0, which C reads as one preprocessing number:
 * no quotes to carry through make, apxs and the shells it runs.
 * scripts/intree-build.sh passes the same in BUCKETED_CFLAGS; an httpd
 * tree built without it says "unknown" rather than guess.
 */
#ifndef BUCKETED_VERSION_H
#define BUCKETED_VERSION_H

#define BUCKETED_STRING(token) #token
#define BUCKETED_EXPANDED_STRING(token) BUCKETED_STRING(token)

#ifdef BUCKETED_RELEASE
#define BUCKETED_VERSION BUCKETED_EXPANDED_STRING(BUCKETED_RELEASE)
#else
#define BUCKETED_VERSION "unknown"
#endif

#endif /* BUCKETED_VERSION_H */
