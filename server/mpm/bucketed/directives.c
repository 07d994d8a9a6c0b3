/* SPDX-License-Identifier: Apache-2.0 */
/*
 * directives.c: bucketed's command table. Each handler checks context,
 * parses strictly (policy_directives.c) and stores into the main server's
 * bucketed_config; limits that depend on each other are checked once the
 * whole configuration is read (check_config in mod_mpm_bucketed.c).
 *
 * The listener directives that shape a socket (ListenBacklog, Send- and
 * ReceiveBufferSize) are wrapped: bucketed records the value, so that the
 * SO_REUSEPORT duplicates it opens match the originals core opens, then
 * hands the value on to core unchanged. ListenCoresBucketsRatio is kept
 * from core altogether (core would bind every original socket with
 * SO_REUSEPORT, letting any process of the same user share the port).
 * httpd runs every handler registered for a directive name, so the table
 * lists the listener directives itself instead of using LISTEN_COMMANDS,
 * which would register core's handlers beside these.
 */
#include <limits.h>

#include "apr_strings.h"

#include "httpd.h"
#include "http_core.h"
#include "http_log.h"
#include "mpm_common.h"

#include "bucketed.h"
#include "mpm_default.h"

APLOG_USE_MODULE(mpm_bucketed);

/* GracefulShutdownTimeout: 30 days is far beyond any sane drain. */
#define MAX_GRACEFUL_SHUTDOWN_SEC (30 * 24 * 3600)
#define MAX_LISTEN_BACKLOG 65535
#define MAX_CORES_BUCKETS_RATIO 4096
#define MIN_SOCKET_BUFFER 512

void *bucketed_create_server_config(apr_pool_t *p, server_rec *s)
{
    bucketed_config *conf = apr_pcalloc(p, sizeof(*conf));

    (void)s;
    conf->strategy = BUCKET_STRATEGY_AUTO;
    conf->cores_buckets_ratio = BUCKET_RATIO_UNSET;
    conf->listen_backlog = DEFAULT_LISTENBACKLOG;
    conf->child_model = CHILD_MODEL_PREFORK;
    conf->async_factor = DEFAULT_ASYNC_FACTOR * ASYNC_FACTOR_SCALE;
    return conf;
}

/* Parses a number into *slot after the context check every directive of
 * ours shares (main server only). */
static const char *parse_global_int(cmd_parms *cmd, const char *arg,
                                    int min, int max, int *slot)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    if (err != NULL) {
        return err;
    }
    return directive_parse_int(cmd->pool, cmd->cmd->name, arg, min, max,
                               slot);
}

static bucketed_config *config_of(cmd_parms *cmd)
{
    return bucketed_get_config(cmd->server);
}

static const char *set_start_servers(cmd_parms *cmd, void *dummy,
                                     const char *arg)
{
    (void)dummy;
    return parse_global_int(cmd, arg, 1, MAX_SERVER_LIMIT,
                            &config_of(cmd)->configured.start_servers);
}

/* Directives of one child model only: the first one seen is remembered
 * and checked against ChildModel once the whole configuration is read
 * (ChildModel may come after it). */
static void note_prefork_only(cmd_parms *cmd)
{
    bucketed_config *conf = config_of(cmd);

    if (conf->prefork_only_seen == NULL) {
        conf->prefork_only_seen = cmd->cmd->name;
    }
}

static void note_event_only(cmd_parms *cmd)
{
    bucketed_config *conf = config_of(cmd);

    if (conf->event_only_seen == NULL) {
        conf->event_only_seen = cmd->cmd->name;
    }
}

static const char *set_min_spare_servers(cmd_parms *cmd, void *dummy,
                                         const char *arg)
{
    (void)dummy;
    note_prefork_only(cmd);
    return parse_global_int(cmd, arg, 1, MAX_SERVER_LIMIT,
                            &config_of(cmd)->configured.min_spare);
}

static const char *set_max_spare_servers(cmd_parms *cmd, void *dummy,
                                         const char *arg)
{
    (void)dummy;
    note_prefork_only(cmd);
    return parse_global_int(cmd, arg, 1, MAX_SERVER_LIMIT,
                            &config_of(cmd)->configured.max_spare);
}

static const char *set_max_request_workers(cmd_parms *cmd, void *dummy,
                                           const char *arg)
{
    (void)dummy;
    if (strcasecmp(cmd->cmd->name, "MaxClients") == 0) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, NULL, BKLOGNO(00018)
                                                      "bucketed: "
                     "MaxClients is deprecated, use MaxRequestWorkers "
                     "instead.");
    }
    return parse_global_int(cmd, arg, 1, MAX_SERVER_LIMIT,
                            &config_of(cmd)->configured.max_workers);
}

static const char *set_server_limit(cmd_parms *cmd, void *dummy,
                                    const char *arg)
{
    (void)dummy;
    /* Above MAX_SERVER_LIMIT is lowered with a warning, as prefork does. */
    return parse_global_int(cmd, arg, 1, INT_MAX,
                            &config_of(cmd)->configured.server_limit);
}

static const char *set_max_connections_per_child(cmd_parms *cmd, void *dummy,
                                                 const char *arg)
{
    (void)dummy;
    if (strcasecmp(cmd->cmd->name, "MaxRequestsPerChild") == 0) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, NULL, BKLOGNO(00019)
                                                      "bucketed: "
                     "MaxRequestsPerChild is deprecated, use "
                     "MaxConnectionsPerChild instead.");
    }
    return parse_global_int(cmd, arg, 0, INT_MAX,
                            &ap_max_requests_per_child);
}

static const char *set_graceful_shutdown_timeout(cmd_parms *cmd, void *dummy,
                                                 const char *arg)
{
    (void)dummy;
    return parse_global_int(cmd, arg, 0, MAX_GRACEFUL_SHUTDOWN_SEC,
                            &ap_graceful_shutdown_timeout);
}

static const char *set_child_model(cmd_parms *cmd, void *dummy,
                                   const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dummy;
    if (err != NULL) {
        return err;
    }
    err = directive_parse_child_model(cmd->pool, cmd->cmd->name, arg,
                                      &config_of(cmd)->child_model);
#if !BUCKETED_HAS_EVENT_MODEL
    if (err == NULL && config_of(cmd)->child_model == CHILD_MODEL_EVENT) {
        return "ChildModel event needs epoll and eventfd (Linux) and an APR "
               "built with threads (APR_HAS_THREADS); this build offers "
               "ChildModel prefork only";
    }
#endif
    return err;
}

static const char *set_thread_limit(cmd_parms *cmd, void *dummy,
                                    const char *arg)
{
    (void)dummy;
    note_event_only(cmd);
    /* Above MAX_THREAD_LIMIT is lowered with a warning, as event does. */
    return parse_global_int(cmd, arg, 1, INT_MAX,
                            &config_of(cmd)->thread_configured.thread_limit);
}

static const char *set_threads_per_child(cmd_parms *cmd, void *dummy,
                                         const char *arg)
{
    (void)dummy;
    note_event_only(cmd);
    return parse_global_int(cmd, arg, 1, INT_MAX,
        &config_of(cmd)->thread_configured.threads_per_child);
}

static const char *set_min_spare_threads(cmd_parms *cmd, void *dummy,
                                         const char *arg)
{
    (void)dummy;
    note_event_only(cmd);
    return parse_global_int(cmd, arg, 1, INT_MAX,
        &config_of(cmd)->thread_configured.min_spare_threads);
}

static const char *set_max_spare_threads(cmd_parms *cmd, void *dummy,
                                         const char *arg)
{
    (void)dummy;
    note_event_only(cmd);
    return parse_global_int(cmd, arg, 1, INT_MAX,
        &config_of(cmd)->thread_configured.max_spare_threads);
}

static const char *set_async_factor(cmd_parms *cmd, void *dummy,
                                    const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dummy;
    if (err != NULL) {
        return err;
    }
    note_event_only(cmd);
    return directive_parse_async_factor(cmd->pool, cmd->cmd->name, arg,
                                        &config_of(cmd)->async_factor);
}

static const char *set_bucket_count(cmd_parms *cmd, void *dummy,
                                    const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dummy;
    if (err != NULL) {
        return err;
    }
    return directive_parse_auto_int(cmd->pool, cmd->cmd->name, arg,
                                    MAX_SERVER_LIMIT,
                                    &config_of(cmd)->bucket_count);
}

static const char *set_bucket_strategy(cmd_parms *cmd, void *dummy,
                                       const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dummy;
    if (err != NULL) {
        return err;
    }
    return directive_parse_strategy(cmd->pool, cmd->cmd->name, arg,
                                    &config_of(cmd)->strategy);
}

static const char *set_bucket_steering(cmd_parms *cmd, void *dummy,
                                       const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dummy;
    if (err != NULL) {
        return err;
    }
    return steering_parse(cmd->pool, cmd->cmd->name, arg,
                          &config_of(cmd)->steering_requested);
}

static const char *set_bucket_affinity(cmd_parms *cmd, void *dummy,
                                       const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dummy;
    if (err != NULL) {
        return err;
    }
    return affinity_parse(cmd->pool, cmd->cmd->name, arg,
                          &config_of(cmd)->affinity_requested);
}

static const char *set_cores_buckets_ratio(cmd_parms *cmd, void *dummy,
                                           const char *arg)
{
    (void)dummy;
    /* Not handed to core: bucketed sets SO_REUSEPORT only where it
     * duplicates a socket. 0 is stock httpd's "no duplicates". */
    return parse_global_int(cmd, arg, 0, MAX_CORES_BUCKETS_RATIO,
                            &config_of(cmd)->cores_buckets_ratio);
}

static const char *set_listen_backlog(cmd_parms *cmd, void *dummy,
                                      const char *arg)
{
    const char *err = parse_global_int(cmd, arg, 1, MAX_LISTEN_BACKLOG,
                                       &config_of(cmd)->listen_backlog);

    return err != NULL ? err : ap_set_listenbacklog(cmd, dummy, arg);
}

/* SendBufferSize / ReceiveBufferSize: 0 (system default) or >= 512. */
static const char *parse_buffer_size(cmd_parms *cmd, const char *arg,
                                     int *slot)
{
    int value = 0;
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    if (err != NULL) {
        return err;
    }
    if (directive_parse_int(cmd->pool, cmd->cmd->name, arg, 0, INT_MAX,
                            &value) != NULL
        || (value != 0 && value < MIN_SOCKET_BUFFER)) {
        return apr_psprintf(cmd->pool, "%s must be 0 (system default) or a "
                            "whole number from %d to %d, not '%s'",
                            cmd->cmd->name, MIN_SOCKET_BUFFER, INT_MAX, arg);
    }
    *slot = value;
    return NULL;
}

static const char *set_send_buffer_size(cmd_parms *cmd, void *dummy,
                                        const char *arg)
{
    const char *err = parse_buffer_size(cmd, arg,
                                        &config_of(cmd)->send_buffer_size);

    return err != NULL ? err : ap_set_send_buffer_size(cmd, dummy, arg);
}

static const char *set_receive_buffer_size(cmd_parms *cmd, void *dummy,
                                           const char *arg)
{
    const char *err = parse_buffer_size(cmd, arg,
                                        &config_of(cmd)->receive_buffer_size);

    return err != NULL ? err : ap_set_receive_buffer_size(cmd, dummy, arg);
}

const command_rec bucketed_cmds[] = {
    AP_INIT_TAKE1("StartServers", set_start_servers, NULL, RSRC_CONF,
        "Number of child processes launched at server startup"),
    AP_INIT_TAKE1("MinSpareServers", set_min_spare_servers, NULL, RSRC_CONF,
        "Minimum number of idle children, shared out over the buckets"),
    AP_INIT_TAKE1("MaxSpareServers", set_max_spare_servers, NULL, RSRC_CONF,
        "Maximum number of idle children, shared out over the buckets"),
    AP_INIT_TAKE1("MaxRequestWorkers", set_max_request_workers, NULL,
        RSRC_CONF, "Maximum number of children alive at the same time "
        "(ChildModel event: of worker threads)"),
    AP_INIT_TAKE1("MaxClients", set_max_request_workers, NULL, RSRC_CONF,
        "Deprecated name of MaxRequestWorkers"),
    AP_INIT_TAKE1("ServerLimit", set_server_limit, NULL, RSRC_CONF,
        "Upper limit on configurable MaxRequestWorkers"),
    AP_INIT_TAKE1("MaxConnectionsPerChild", set_max_connections_per_child,
        NULL, RSRC_CONF, "Connections a child serves before it exits "
        "(0 = no limit)"),
    AP_INIT_TAKE1("MaxRequestsPerChild", set_max_connections_per_child,
        NULL, RSRC_CONF, "Deprecated name of MaxConnectionsPerChild"),
    AP_INIT_TAKE1("GracefulShutdownTimeout", set_graceful_shutdown_timeout,
        NULL, RSRC_CONF, "Seconds a graceful stop waits for children "
        "(0 = as long as they need)"),
    /* Read as the file is read (not with the other directives later), so
     * that ap_mpm_query() answers for the right model from the start,
     * `httpd -V` included. */
    AP_INIT_TAKE1("ChildModel", set_child_model, NULL, RSRC_CONF
        | EXEC_ON_READ,
        "How children serve: prefork (one connection per process) or event "
        "(threads per process, async keep-alive)"),
    AP_INIT_TAKE1("ThreadLimit", set_thread_limit, NULL, RSRC_CONF,
        "ChildModel event: upper limit on ThreadsPerChild"),
    AP_INIT_TAKE1("ThreadsPerChild", set_threads_per_child, NULL, RSRC_CONF,
        "ChildModel event: worker threads in each child process"),
    AP_INIT_TAKE1("MinSpareThreads", set_min_spare_threads, NULL, RSRC_CONF,
        "ChildModel event: minimum idle threads, shared out over the "
        "buckets"),
    AP_INIT_TAKE1("MaxSpareThreads", set_max_spare_threads, NULL, RSRC_CONF,
        "ChildModel event: maximum idle threads, shared out over the "
        "buckets"),
    AP_INIT_TAKE1("AsyncRequestWorkerFactor", set_async_factor, NULL,
        RSRC_CONF, "ChildModel event: connections a child may hold per idle "
        "worker thread, beyond ThreadsPerChild"),
    AP_INIT_TAKE1("BucketCount", set_bucket_count, NULL, RSRC_CONF,
        "Number of listener buckets with SO_REUSEPORT: auto (online CPUs) "
        "or a number"),
    AP_INIT_TAKE1("BucketStrategy", set_bucket_strategy, NULL, RSRC_CONF,
        "How listener buckets are formed: auto, reuseport, listen or "
        "single"),
    AP_INIT_TAKE1("BucketSteering", set_bucket_steering, NULL, RSRC_CONF,
        "Which bucket a new connection goes to: auto, hash, cpu or load"),
    AP_INIT_TAKE1("BucketAffinity", set_bucket_affinity, NULL, RSRC_CONF,
        "Whether a bucket's children are kept on CPUs of their own: auto, "
        "on or off"),
    AP_INIT_TAKE1("ListenCoresBucketsRatio", set_cores_buckets_ratio, NULL,
        RSRC_CONF, "Online CPU cores per listener bucket, when BucketCount "
        "is auto"),
    AP_INIT_TAKE1("ListenBacklog", set_listen_backlog, NULL, RSRC_CONF,
        "Maximum length of the queue of pending connections"),
    AP_INIT_TAKE1("SendBufferSize", set_send_buffer_size, NULL, RSRC_CONF,
        "Send buffer size in bytes"),
    AP_INIT_TAKE1("ReceiveBufferSize", set_receive_buffer_size, NULL,
        RSRC_CONF, "Receive buffer size in bytes"),
    /* The rest of LISTEN_COMMANDS, unwrapped. */
    AP_INIT_TAKE_ARGV("Listen", ap_set_listener, NULL, RSRC_CONF,
        "A port number or a numeric IP address and a port number, and an "
        "optional protocol"),
    /* ListenTCPDeferAccept came with httpd 2.4.66 without a module magic
     * number bump (ap_mmn.h's last entry, 20120211.142, is from 2.4.64 and
     * still current in 2.4.71), so the MMN cannot tell. mpm_common.h's
     * DEFAULT_TCP_DEFER_ACCEPT came with it: where that is missing, so is
     * ap_set_listentcpdeferaccept. */
#ifdef DEFAULT_TCP_DEFER_ACCEPT
    AP_INIT_TAKE1("ListenTCPDeferAccept", ap_set_listentcpdeferaccept, NULL,
        RSRC_CONF, "Value set for the socket option TCP_DEFER_ACCEPT if it "
        "is set"),
#endif
    { NULL }
};
