/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mpm_default.h: bucketed's compile-time defaults. httpd does not install
 * its own mpm_default.h, so every MPM ships one; the values match prefork
 * so that a prefork configuration means the same thing here.
 */
#ifndef APACHE_MPM_DEFAULT_H
#define APACHE_MPM_DEFAULT_H

/* Children to start at launch (at least BUCKET_MIN_CHILDREN, 2, per bucket
 * are started). */
#ifndef DEFAULT_START_DAEMON
#define DEFAULT_START_DAEMON 5
#endif

/* Idle children kept ready, shared out over the buckets. */
#ifndef DEFAULT_MIN_FREE_DAEMON
#define DEFAULT_MIN_FREE_DAEMON 5
#endif
#ifndef DEFAULT_MAX_FREE_DAEMON
#define DEFAULT_MAX_FREE_DAEMON 10
#endif

/* Default ServerLimit and MaxRequestWorkers. */
#ifndef DEFAULT_SERVER_LIMIT
#define DEFAULT_SERVER_LIMIT 256
#endif

/* Largest ServerLimit accepted without a warning; it sizes the scoreboard
 * and the parent's slot tables. */
#ifndef MAX_SERVER_LIMIT
#define MAX_SERVER_LIMIT 200000
#endif

/* ChildModel event: stock event's defaults, so that an event configuration
 * means the same thing here. */
#ifndef DEFAULT_EVENT_SERVER_LIMIT
#define DEFAULT_EVENT_SERVER_LIMIT 16
#endif
#ifndef MAX_EVENT_SERVER_LIMIT
#define MAX_EVENT_SERVER_LIMIT 20000
#endif
#ifndef DEFAULT_THREAD_LIMIT
#define DEFAULT_THREAD_LIMIT 64
#endif
#ifndef MAX_THREAD_LIMIT
#define MAX_THREAD_LIMIT 100000
#endif
#ifndef DEFAULT_THREADS_PER_CHILD
#define DEFAULT_THREADS_PER_CHILD 25
#endif
#ifndef DEFAULT_EVENT_START_DAEMON
#define DEFAULT_EVENT_START_DAEMON 3
#endif
#ifndef DEFAULT_MIN_SPARE_THREADS
#define DEFAULT_MIN_SPARE_THREADS (3 * DEFAULT_THREADS_PER_CHILD)
#endif
#ifndef DEFAULT_MAX_SPARE_THREADS
#define DEFAULT_MAX_SPARE_THREADS (10 * DEFAULT_THREADS_PER_CHILD)
#endif
#ifndef DEFAULT_ASYNC_FACTOR
#define DEFAULT_ASYNC_FACTOR 2
#endif

#endif /* APACHE_MPM_DEFAULT_H */
