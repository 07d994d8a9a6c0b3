/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_notify: telling a service manager how the server is doing, as
 * sd_notify(3) describes (sys_notify.c), without linking libsystemd: a
 * datagram to the unix socket NOTIFY_SOCKET names. systemd's Type=notify
 * units learn from it when the server serves (READY=1), when a graceful
 * restart runs (RELOADING=1, then READY=1) and when it stops (STOPPING=1).
 * Without NOTIFY_SOCKET nothing is sent.
 */
#ifndef SYS_NOTIFY_H
#define SYS_NOTIFY_H

#include "bucketed.h"

/* In the first pre_config, in the process the service manager started
 * and before core starts any program (a piped ErrorLog): takes
 * NOTIFY_SOCKET out of the environment (children and CGIs are not the
 * service) and keeps it for the server's life. Once: later calls do
 * nothing. */
void notify_read(void);

/* At open_logs: logs, once, a NOTIFY_SOCKET that names no socket (there
 * is no server_rec at notify_read()). */
void notify_log_reading(server_rec *s);

/* Sends state ("READY=1\nSTATUS=...") if a service manager listens;
 * a failure is logged, never fatal. */
void notify_send(server_rec *s, const char *state);

#endif /* SYS_NOTIFY_H */
