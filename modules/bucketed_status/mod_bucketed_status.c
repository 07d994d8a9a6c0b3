/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mod_bucketed_status: the bucketed MPM's listener buckets where operators
 * look for them.
 *
 * - mod_status: a "Listener buckets" section on /server-status (HTML) and
 *   BucketedBucket[N]... keys in its ?auto form, through mod_status's
 *   optional status_hook. Nothing to configure beyond mod_status itself.
 * - Prometheus: the text exposition format (0.0.4),
 *     <Location /metrics>
 *         SetHandler bucketed-metrics
 *     </Location>
 * - A plain-text page, one line per bucket, for scripts, tests and the
 *   benchmark harness:
 *     <Location /bucketed-status>
 *         SetHandler bucketed-status
 *     </Location>
 *
 * All three are views of one bucketed_get_status() call (bucketed_status.h),
 * an optional function of the MPM: no link-time tie to it, nor to
 * mod_status. Under another MPM the mod_status section is absent and the
 * two handlers answer 404.
 */
#include "apr_optional.h"
#include "apr_optional_hooks.h"
#include "apr_strings.h"

#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "ap_mpm.h"
#include "mod_status.h"

#include "bucketed_status.h"
#include "bucketed_version.h"

#define STATUS_HANDLER "bucketed-status"
#define METRICS_HANDLER "bucketed-metrics"
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

static APR_OPTIONAL_FN_TYPE(bucketed_get_status) *get_status;

/* Sums over a bucket's sockets, for the one-line-per-bucket views. */
typedef struct {
    apr_uint64_t depth, backlog, max_depth, drops;
    int has_drops;               /* some socket reports drops */
} queue_totals;

static queue_totals bucket_totals(const bucketed_bucket_status *bs)
{
    queue_totals t = { 0, 0, 0, 0, 0 };
    int k;

    for (k = 0; k < bs->sockets; k++) {
        const bucketed_socket_status *ss = &bs->socket[k];

        t.depth += ss->queue_depth;
        t.backlog += ss->backlog;
        t.max_depth += ss->max_queue_depth;
        if (ss->has_drops) {
            t.drops += ss->drops;
            t.has_drops = 1;
        }
    }
    return t;
}

/* Seconds since a time the parent published; -1 when it never did. */
static double age_seconds(apr_time_t when, apr_time_t now)
{
    if (when == 0) {
        return -1.0;
    }
    return when > now ? 0.0 : (double)(now - when) / APR_USEC_PER_SEC;
}

/* The fields that head the text page and mod_status's ?auto section,
 * under each view's key: the build's version (this module is built with
 * the MPM), then the plan. */
#define PLAN_FIELDS 8
typedef struct {
    const char *text_key, *auto_key, *value;
} plan_field;

static void plan_fields(apr_pool_t *p, const bucketed_status *st,
                        plan_field fields[PLAN_FIELDS])
{
    const plan_field all[PLAN_FIELDS] = {
        { "version", "BucketedVersion", BUCKETED_VERSION },
        { "strategy", "BucketedStrategy", st->strategy },
        { "reason", "BucketedReason", st->reason },
        { "kernel", "BucketedKernel", st->kernel },
        { "generation", "BucketedGeneration",
          apr_itoa(p, st->generation) },
        { "buckets", "BucketedBuckets", apr_itoa(p, st->num_buckets) },
        { "steering", "BucketedSteering", st->steering },
        { "migration", "BucketedMigration", st->migration },
    };

    memcpy(fields, all, sizeof(all));
}

/* ---------------------------------------------------------------- text */

/* Sockets of the bucket passed in by the service manager. */
static int inherited_sockets(const bucketed_bucket_status *bs)
{
    int k, n = 0;

    for (k = 0; k < bs->sockets; k++) {
        n += bs->socket[k].inherited;
    }
    return n;
}

static void text_report(request_rec *r, const bucketed_status *st)
{
    plan_field fields[PLAN_FIELDS];
    int b;

    ap_rprintf(r, "mpm=%s\n", ap_show_mpm());
    plan_fields(r->pool, st, fields);
    for (b = 0; b < PLAN_FIELDS; b++) {
        ap_rprintf(r, "%s=%s\n", fields[b].text_key, fields[b].value);
    }
    for (b = 0; b < st->num_buckets; b++) {
        const bucketed_bucket_status *bs = &st->buckets[b];
        queue_totals t = bucket_totals(bs);

        ap_rprintf(r, "bucket=%d sockets=%d listen=%s children=%d idle=%d "
                   "busy=%d accepted=%u reclaimed=%u queue=%"
                   APR_UINT64_T_FMT " max_queue=%" APR_UINT64_T_FMT
                   " backlog=%" APR_UINT64_T_FMT, b, bs->sockets, bs->listen,
                   bs->children, bs->idle, bs->busy, bs->accepted,
                   bs->reclaimed, t.depth, t.max_depth, t.backlog);
        if (t.has_drops) {
            ap_rprintf(r, " drops=%" APR_UINT64_T_FMT, t.drops);
        }
        if (bs->draining > 0) {
            ap_rprintf(r, " draining=%d", bs->draining);
        }
        if (inherited_sockets(bs) > 0) {
            ap_rprintf(r, " inherited=%d", inherited_sockets(bs));
        }
        ap_rprintf(r, " lingered=%u\n", bs->lingered);
    }
}

/* ----------------------------------------------------------- Prometheus */

/* A label value in the exposition format: backslash, double quote and
 * line feed escaped. */
static const char *label_value(apr_pool_t *p, const char *s)
{
    char *out = apr_palloc(p, 2 * strlen(s) + 1), *o = out;

    for (; *s; s++) {
        if (*s == '\\' || *s == '"') {
            *o++ = '\\';
            *o++ = *s;
        }
        else if (*s == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        }
        else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return out;
}

static void family(request_rec *r, const char *name, const char *type,
                   const char *help)
{
    ap_rprintf(r, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One value per bucket. */
typedef apr_uint64_t (*bucket_value_fn)(const bucketed_bucket_status *bs);

static apr_uint64_t bucket_children(const bucketed_bucket_status *bs)
{
    return (apr_uint64_t)bs->children;
}

static apr_uint64_t bucket_idle(const bucketed_bucket_status *bs)
{
    return (apr_uint64_t)bs->idle;
}

static apr_uint64_t bucket_busy(const bucketed_bucket_status *bs)
{
    return (apr_uint64_t)bs->busy;
}

static apr_uint64_t bucket_accepted(const bucketed_bucket_status *bs)
{
    return bs->accepted;
}

static apr_uint64_t bucket_reclaimed(const bucketed_bucket_status *bs)
{
    return bs->reclaimed;
}

static apr_uint64_t bucket_lingered(const bucketed_bucket_status *bs)
{
    return bs->lingered;
}

/* One value per sampled socket; has_value says whether it has one. */
typedef apr_uint64_t (*socket_value_fn)(const bucketed_socket_status *ss,
                                        int *has_value);

static apr_uint64_t socket_depth(const bucketed_socket_status *ss, int *has)
{
    *has = ss->sampled;
    return ss->queue_depth;
}

static apr_uint64_t socket_backlog(const bucketed_socket_status *ss, int *has)
{
    *has = ss->sampled;
    return ss->backlog;
}

static apr_uint64_t socket_max_depth(const bucketed_socket_status *ss,
                                     int *has)
{
    *has = ss->sampled;
    return ss->max_queue_depth;
}

static apr_uint64_t socket_drops(const bucketed_socket_status *ss, int *has)
{
    *has = ss->sampled && ss->has_drops;
    return ss->drops;
}

/* A metric family: one sample per bucket, or one per sampled socket. */
static const struct {
    const char *name, *type, *help;
    bucket_value_fn per_bucket;
    socket_value_fn per_socket;
} families[] = {
    { "bucketed_bucket_children", "gauge",
      "Child processes of the bucket (the parent's census, as its last "
      "maintenance pass saw it).", bucket_children, NULL },
    { "bucketed_bucket_idle_children", "gauge",
      "Children of the bucket waiting for a connection.", bucket_idle,
      NULL },
    { "bucketed_bucket_busy_children", "gauge",
      "Children of the bucket serving a connection.", bucket_busy, NULL },
    { "bucketed_bucket_accepted_connections_total", "counter",
      "Connections the bucket's children accepted since the server was "
      "last (re)started.", bucket_accepted, NULL },
    { "bucketed_bucket_reclaimed_keepalive_total", "counter",
      "Idle keep-alive connections the bucket's children closed so that "
      "new connections got in (ChildModel event: at a child's connection "
      "limit; prefork: at MaxRequestWorkers), since the server was last "
      "(re)started.", bucket_reclaimed, NULL },
    { "bucketed_bucket_lingering_waits_total", "counter",
      "Connections whose lingering close waited in a keeper thread "
      "(ChildModel event) for the client to close its side, since the "
      "server was last (re)started; the others were closed at once.",
      bucket_lingered, NULL },
    { "bucketed_listener_queued_connections", "gauge",
      "Connections waiting in the listening socket's accept queue (sampled "
      "by the parent about once a second).", NULL, socket_depth },
    { "bucketed_listener_backlog_connections", "gauge",
      "Limit of the listening socket's accept queue (its listen backlog).",
      NULL, socket_backlog },
    { "bucketed_listener_queued_connections_max", "gauge",
      "Highest accept-queue depth sampled since the last (re)start.",
      NULL, socket_max_depth },
    { "bucketed_listener_drops_total", "counter",
      "Packets the kernel dropped on the listening socket since it was "
      "opened: SYNs and handshake ACKs refused by a full accept queue, "
      "retransmissions included.", NULL, socket_drops },
};

static void metrics_report(request_rec *r, const bucketed_status *st)
{
    apr_time_t now = apr_time_now();
    apr_size_t f;
    int b, k;

    family(r, "bucketed_info", "gauge", "The bucketed build's version and "
           "its bucket plan: strategy, how connections are steered to "
           "buckets, and what a restart that drops a socket does with its "
           "queue (value always 1).");
    ap_rprintf(r, "bucketed_info{version=\"%s\",strategy=\"%s\","
               "steering=\"%s\",migration=\"%s\"} 1\n",
               label_value(r->pool, BUCKETED_VERSION),
               label_value(r->pool, st->strategy),
               label_value(r->pool, st->steering),
               label_value(r->pool, st->migration));
    family(r, "bucketed_generation", "gauge",
           "Configuration generation: restarts since the server started.");
    ap_rprintf(r, "bucketed_generation %d\n", st->generation);
    family(r, "bucketed_buckets", "gauge", "Listener buckets in the plan.");
    ap_rprintf(r, "bucketed_buckets %d\n", st->num_buckets);
    if (st->sampled_at != 0) {
        family(r, "bucketed_sample_age_seconds", "gauge", "Time since the "
               "parent last sampled the accept queues.");
        ap_rprintf(r, "bucketed_sample_age_seconds %.3f\n",
                   age_seconds(st->sampled_at, now));
    }
    for (f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        family(r, families[f].name, families[f].type, families[f].help);
        for (b = 0; b < st->num_buckets; b++) {
            const bucketed_bucket_status *bs = &st->buckets[b];

            if (families[f].per_bucket != NULL) {
                ap_rprintf(r, "%s{bucket=\"%d\"} %" APR_UINT64_T_FMT "\n",
                           families[f].name, b, families[f].per_bucket(bs));
                continue;
            }
            for (k = 0; k < bs->sockets; k++) {
                int has = 0;
                apr_uint64_t v = families[f].per_socket(&bs->socket[k], &has);

                if (has) {
                    ap_rprintf(r, "%s{bucket=\"%d\",listen=\"%s\"} %"
                               APR_UINT64_T_FMT "\n", families[f].name, b,
                               label_value(r->pool, bs->socket[k].listen),
                               v);
                }
            }
        }
    }
}

/* ---------------------------------------------------------- mod_status */

static void status_auto(request_rec *r, const bucketed_status *st)
{
    apr_time_t now = apr_time_now();
    plan_field fields[PLAN_FIELDS];
    int b, k;

    plan_fields(r->pool, st, fields);
    for (b = 0; b < PLAN_FIELDS; b++) {
        ap_rprintf(r, "%s: %s\n", fields[b].auto_key, fields[b].value);
    }
    if (st->sampled_at != 0) {
        ap_rprintf(r, "BucketedSampleAge: %.3f\n",
                   age_seconds(st->sampled_at, now));
    }
    for (b = 0; b < st->num_buckets; b++) {
        const bucketed_bucket_status *bs = &st->buckets[b];

        ap_rprintf(r, "BucketedBucket[%d]Sockets: %d\n", b, bs->sockets);
        ap_rprintf(r, "BucketedBucket[%d]Children: %d\n", b, bs->children);
        ap_rprintf(r, "BucketedBucket[%d]IdleWorkers: %d\n", b, bs->idle);
        ap_rprintf(r, "BucketedBucket[%d]BusyWorkers: %d\n", b, bs->busy);
        ap_rprintf(r, "BucketedBucket[%d]Accepted: %u\n", b, bs->accepted);
        ap_rprintf(r, "BucketedBucket[%d]ReclaimedKeepAlive: %u\n", b,
                   bs->reclaimed);
        ap_rprintf(r, "BucketedBucket[%d]LingeringWaits: %u\n", b,
                   bs->lingered);
        for (k = 0; k < bs->sockets; k++) {
            const bucketed_socket_status *ss = &bs->socket[k];

            ap_rprintf(r, "BucketedBucket[%d]Socket[%d]Listen: %s\n", b, k,
                       ss->listen);
            ap_rprintf(r, "BucketedBucket[%d]Socket[%d]Inherited: %d\n", b,
                       k, ss->inherited);
            if (!ss->sampled) {
                continue;
            }
            ap_rprintf(r, "BucketedBucket[%d]Socket[%d]QueueDepth: %u\n",
                       b, k, ss->queue_depth);
            ap_rprintf(r, "BucketedBucket[%d]Socket[%d]Backlog: %u\n",
                       b, k, ss->backlog);
            ap_rprintf(r, "BucketedBucket[%d]Socket[%d]MaxQueueDepth: %u\n",
                       b, k, ss->max_queue_depth);
            ap_rprintf(r, "BucketedBucket[%d]Socket[%d]DeferAccept: %d\n",
                       b, k, ss->defer_accept);
            if (ss->has_drops) {
                ap_rprintf(r, "BucketedBucket[%d]Socket[%d]Drops: %u\n",
                           b, k, ss->drops);
            }
        }
    }
}

/* A number cell, or "-" before the parent's first sample. */
static const char *cell(apr_pool_t *p, int known, apr_uint32_t value)
{
    return known ? apr_psprintf(p, "%u", value) : "-";
}

/* The drops cell: "n/a" where TCP_DEFER_ACCEPT makes the count useless. */
static const char *drops_cell(apr_pool_t *p, const bucketed_socket_status *ss)
{
    if (ss->sampled && ss->defer_accept) {
        return "n/a (AcceptFilter)";
    }
    return cell(p, ss->sampled && ss->has_drops, ss->drops);
}

static void status_html(request_rec *r, const bucketed_status *st, int flags)
{
    apr_time_t now = apr_time_now();
    int b, k;

    ap_rputs("<hr /><h2>Listener buckets (bucketed MPM)</h2>\n<dl>", r);
    ap_rprintf(r, "<dt>bucketed version %s</dt>\n",
               ap_escape_html(r->pool, BUCKETED_VERSION));
    ap_rprintf(r, "<dt>Strategy: %s (%s), steering: %s, sockets a restart "
               "drops: %s</dt>\n",
               ap_escape_html(r->pool, st->strategy),
               ap_escape_html(r->pool, st->reason),
               ap_escape_html(r->pool, st->steering),
               ap_escape_html(r->pool, st->migration));
    ap_rprintf(r, "<dt>%s</dt>\n", ap_escape_html(r->pool, st->kernel));
    ap_rprintf(r, "<dt>Generation %d, %d bucket(s); ", st->generation,
               st->num_buckets);
    if (st->sampled_at != 0) {
        ap_rprintf(r, "accept queues sampled %.1f s ago</dt>\n",
                   age_seconds(st->sampled_at, now));
    }
    else {
        ap_rputs("accept queues not sampled yet</dt>\n", r);
    }
    ap_rputs("</dl>\n", r);
    if (flags & AP_STATUS_NOTABLE) {
        for (b = 0; b < st->num_buckets; b++) {
            const bucketed_bucket_status *bs = &st->buckets[b];

            ap_rprintf(r, "<p>Bucket %d: %d children (%d idle, %d busy), "
                       "%u connections accepted</p>\n", b, bs->children,
                       bs->idle, bs->busy, bs->accepted);
            for (k = 0; k < bs->sockets; k++) {
                const bucketed_socket_status *ss = &bs->socket[k];
                ap_rprintf(r, "<p>Bucket %d socket %s: queue %s of %s, "
                           "highest %s, drops %s</p>\n", b,
                           ap_escape_html(r->pool, ss->listen),
                           cell(r->pool, ss->sampled, ss->queue_depth),
                           cell(r->pool, ss->sampled, ss->backlog),
                           cell(r->pool, ss->sampled, ss->max_queue_depth),
                           drops_cell(r->pool, ss));
            }
        }
        return;
    }
    ap_rputs("<table border=\"0\"><tr><th>Bucket</th><th>Children</th>"
             "<th>Idle</th><th>Busy</th><th>Accepted</th><th>Listen</th>"
             "<th>Queue</th><th>Backlog</th><th>Max queue</th>"
             "<th>Drops</th></tr>\n", r);
    for (b = 0; b < st->num_buckets; b++) {
        const bucketed_bucket_status *bs = &st->buckets[b];
        int rows = bs->sockets > 0 ? bs->sockets : 1;

        ap_rprintf(r, "<tr><td rowspan=\"%d\">%d</td><td rowspan=\"%d\">%d"
                   "</td><td rowspan=\"%d\">%d</td><td rowspan=\"%d\">%d"
                   "</td><td rowspan=\"%d\">%u</td>", rows, b, rows,
                   bs->children, rows, bs->idle, rows, bs->busy, rows,
                   bs->accepted);
        for (k = 0; k < rows; k++) {
            const bucketed_socket_status *ss = &bs->socket[k];

            if (k > 0) {
                ap_rputs("<tr>", r);
            }
            ap_rprintf(r, "<td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                       "<td>%s</td></tr>\n",
                       ss->listen ? ap_escape_html(r->pool, ss->listen) : "",
                       cell(r->pool, ss->sampled, ss->queue_depth),
                       cell(r->pool, ss->sampled, ss->backlog),
                       cell(r->pool, ss->sampled, ss->max_queue_depth),
                       drops_cell(r->pool, ss));
        }
    }
    ap_rputs("</table>\n", r);
}

static int bucketed_status_hook(request_rec *r, int flags)
{
    const bucketed_status *st;

    if (get_status == NULL) {
        return OK;
    }
    st = get_status(r->pool);
    if (flags & AP_STATUS_SHORT) {
        status_auto(r, st);
    }
    else {
        status_html(r, st, flags);
    }
    return OK;
}

/* ------------------------------------------------------------ handlers */

static int bucketed_handler(request_rec *r)
{
    int metrics;

    if (strcmp(r->handler, STATUS_HANDLER) == 0) {
        metrics = 0;
    }
    else if (strcmp(r->handler, METRICS_HANDLER) == 0) {
        metrics = 1;
    }
    else {
        return DECLINED;
    }
    if (r->method_number != M_GET) {
        return HTTP_METHOD_NOT_ALLOWED;
    }
    if (get_status == NULL) {
        return HTTP_NOT_FOUND;
    }
    ap_set_content_type(r, metrics ? METRICS_CONTENT_TYPE
                                   : "text/plain; charset=ISO-8859-1");
    if (r->header_only) {
        return OK;
    }
    if (metrics) {
        metrics_report(r, get_status(r->pool));
    }
    else {
        text_report(r, get_status(r->pool));
    }
    return OK;
}

static int bucketed_status_post_config(apr_pool_t *pconf, apr_pool_t *plog,
                                       apr_pool_t *ptemp, server_rec *s)
{
    (void)pconf;
    (void)plog;
    (void)ptemp;
    (void)s;
    get_status = APR_RETRIEVE_OPTIONAL_FN(bucketed_get_status);
    return OK;
}

static void bucketed_status_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_handler(bucketed_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(bucketed_status_post_config, NULL, NULL,
                        APR_HOOK_MIDDLE);
    APR_OPTIONAL_HOOK(ap, status_hook, bucketed_status_hook, NULL, NULL,
                      APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(bucketed_status) = {
    STANDARD20_MODULE_STUFF,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    bucketed_status_register_hooks,
    AP_MODULE_FLAG_NONE
};
