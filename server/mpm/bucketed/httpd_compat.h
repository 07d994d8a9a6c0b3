/* SPDX-License-Identifier: Apache-2.0 */
/*
 * httpd_compat.h: httpd's names that bucketed uses in their newest
 * spelling, for the httpd releases before that spelling (back to 2.4.52,
 * the oldest bucketed builds against; docs/building.md, "httpd versions").
 * Include after httpd.h. scripts/check-httpd-api.py fails the tests when
 * a name newer than 2.4.52 (scripts/httpd-api-since.txt) is used without
 * a guard or a fallback here.
 */
#ifndef HTTPD_COMPAT_H
#define HTTPD_COMPAT_H

#include "ap_mmn.h"

/* httpd 2.4.63 (MMN 20120211.135) renamed two connection states and kept
 * their values; the older names stay as aliases there. */
#if !AP_MODULE_MAGIC_AT_LEAST(20120211, 135)
#define CONN_STATE_PROCESSING CONN_STATE_READ_REQUEST_LINE
#define CONN_STATE_KEEPALIVE CONN_STATE_CHECK_REQUEST_LINE_READABLE
#endif

#endif /* HTTPD_COMPAT_H */
