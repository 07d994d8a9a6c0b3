/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bucketed_log: the tag every log line of bucketed starts with, as httpd's
 * own lines start with AHnnnnn (APLOGNO): "BKnnnnn: ". A tag stays with
 * its message across releases and is never reused, so an operator can
 * grep for it and look it up in docs/log-messages.md, which says what
 * each means and what to do. scripts/check-log-tags.py (run by the tests)
 * fails on a log call without one, a tag used twice, or a tag the list
 * lacks.
 */
#ifndef BUCKETED_LOG_H
#define BUCKETED_LOG_H

#define BKLOGNO(n) "BK" #n ": "

#endif /* BUCKETED_LOG_H */
