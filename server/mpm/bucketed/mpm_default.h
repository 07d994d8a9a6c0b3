/*
 * mpm_default.h: bucketed's compile-time defaults. httpd does not install
 * its own mpm_default.h, so every MPM ships one; the values match prefork
 * so that a prefork configuration means the same thing here.
 */
#ifndef APACHE_MPM_DEFAULT_H
#define APACHE_MPM_DEFAULT_H

/* Children to start at launch (at least one per bucket is started). */
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

#endif /* APACHE_MPM_DEFAULT_H */
