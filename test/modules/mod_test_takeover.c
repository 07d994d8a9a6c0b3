/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mod_test_takeover.c: what a compromised child, and a third-party module,
 * could leave for an MPM's parent to trip over at a restart onto another
 * build. Test use only.
 *
 *   SetHandler test-plant-pid   ?N: the child serving the request writes N
 *                               into its own scoreboard slot's pid (shared
 *                               memory any child can write), as a
 *                               compromised child would; answers "child
 *                               PID: ..." 
 *   TestTakeoverPlantHelpers on the parent writes the pid of every child
 *                               of its own that no scoreboard slot names
 *                               (piped loggers, mod_cgid's daemon) into
 *                               free slots from the top, what a
 *                               compromised child could write at that
 *                               moment: at open_logs, before the MPM's
 *                               (the old configuration's helpers), and
 *                               once the configuration is read (the new
 *                               one's)
 *   TestTakeoverForgetRecord on the record a build of the MPM leaves at
 *                               each restart (takeover_record.h) is
 *                               spoiled before the MPM reads it, as if the
 *                               old build were one from before the record
 *   TestTakeoverListen PORT     a listening socket with SO_REUSEPORT on
 *                               127.0.0.1:PORT, opened once in the parent
 *                               and held for its life, as a third-party
 *                               module may hold one
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "apr_strings.h"

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_protocol.h"
#include "ap_mpm.h"
#include "scoreboard.h"

module AP_MODULE_DECLARE_DATA test_takeover_module;

#define HELD_SOCKET_KEY "test_takeover_held_socket"
/* The MPM's record: its first field is its magic number. */
#define MPM_RECORD_KEY "mpm_bucketed_takeover_record"

typedef struct {
    int plant_helpers;
    int forget_record;
    int listen_port;
} takeover_test_config;

static int server_limit(void)
{
    int limit = 0;

    ap_mpm_query(AP_MPMQ_HARD_LIMIT_DAEMONS, &limit);
    return limit;
}

static int slot_naming(pid_t pid)
{
    int slot, limit = server_limit();

    for (slot = 0; slot < limit; slot++) {
        if (ap_scoreboard_image->parent[slot].pid == pid) {
            return slot;
        }
    }
    return -1;
}

static int plant_pid_handler(request_rec *r)
{
    int slot;
    long pid;

    if (r->handler == NULL || strcmp(r->handler, "test-plant-pid") != 0) {
        return DECLINED;
    }
    slot = slot_naming(getpid());
    pid = r->args ? atol(r->args) : 0;
    if (slot < 0 || pid <= 0) {
        return HTTP_BAD_REQUEST;
    }
    ap_scoreboard_image->parent[slot].pid = (pid_t)pid;
    ap_set_content_type(r, "text/plain");
    ap_rprintf(r, "child %" APR_PID_T_FMT ": slot %d names %ld\n", getpid(),
               slot, pid);
    return OK;
}

/* The parent of pid, from /proc/<pid>/stat; 0 if unknown or a zombie. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512], state;
    const char *end;
    long ppid;
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    end = strrchr(buf, ')');
    if (end == NULL || sscanf(end + 1, " %c %ld", &state, &ppid) != 2
        || state == 'Z') {
        return 0;
    }
    return (pid_t)ppid;
}

static void plant_helpers(server_rec *s, const char *when)
{
    DIR *dir = opendir("/proc");
    struct dirent *de;
    int top = server_limit() - 1;

    if (dir == NULL) {
        return;
    }
    while ((de = readdir(dir)) != NULL) {
        pid_t pid = (pid_t)atol(de->d_name);

        if (pid <= 0 || parent_of(pid) != getpid() || slot_naming(pid) >= 0) {
            continue;
        }
        while (top >= 0 && ap_scoreboard_image->parent[top].pid != 0) {
            top--;
        }
        if (top < 0) {
            break;
        }
        ap_scoreboard_image->parent[top].pid = pid;
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "test_takeover: slot %d "
                     "names helper %" APR_PID_T_FMT " (%s)", top, pid, when);
    }
    closedir(dir);
}

static int open_held_socket(server_rec *s, int port)
{
    struct sockaddr_in sin;
    int fd, one = 1;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((unsigned short)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0
        || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0
        || listen(fd, 16) < 0) {
        int err = errno;
        ap_log_error(APLOG_MARK, APLOG_ERR, err, s, "test_takeover: "
                     "cannot listen on 127.0.0.1:%d", port);
        close(fd);
        return -1;
    }
    return fd;
}

static int takeover_test_post_config(apr_pool_t *pconf, apr_pool_t *plog,
                                     apr_pool_t *ptemp, server_rec *s)
{
    takeover_test_config *conf = ap_get_module_config(s->module_config,
                                                      &test_takeover_module);
    int *held;

    (void)pconf;
    (void)plog;
    (void)ptemp;
    if (conf->listen_port > 0) {
        held = ap_retained_data_get(HELD_SOCKET_KEY);
        if (held == NULL) {
            held = ap_retained_data_create(HELD_SOCKET_KEY, sizeof(*held));
            *held = open_held_socket(s, conf->listen_port);
        }
    }
    if (conf->plant_helpers && ap_scoreboard_image != NULL) {
        plant_helpers(s, "post_config");
    }
    return OK;
}

static int takeover_test_open_logs(apr_pool_t *pconf, apr_pool_t *plog,
                                   apr_pool_t *ptemp, server_rec *s)
{
    takeover_test_config *conf = ap_get_module_config(s->module_config,
                                                      &test_takeover_module);
    apr_uint32_t *record = ap_retained_data_get(MPM_RECORD_KEY);

    (void)pconf;
    (void)plog;
    (void)ptemp;
    if (conf->forget_record && record != NULL) {
        *record = 0;
    }
    if (conf->plant_helpers && ap_scoreboard_image != NULL) {
        plant_helpers(s, "open_logs");
    }
    return OK;
}

static void *create_takeover_test_config(apr_pool_t *p, server_rec *s)
{
    (void)s;
    return apr_pcalloc(p, sizeof(takeover_test_config));
}

static const char *set_plant_helpers(cmd_parms *cmd, void *dummy, int on)
{
    takeover_test_config *conf = ap_get_module_config(
        cmd->server->module_config, &test_takeover_module);

    (void)dummy;
    conf->plant_helpers = on;
    return NULL;
}

static const char *set_forget_record(cmd_parms *cmd, void *dummy, int on)
{
    takeover_test_config *conf = ap_get_module_config(
        cmd->server->module_config, &test_takeover_module);

    (void)dummy;
    conf->forget_record = on;
    return NULL;
}

static const char *set_listen_port(cmd_parms *cmd, void *dummy,
                                   const char *arg)
{
    takeover_test_config *conf = ap_get_module_config(
        cmd->server->module_config, &test_takeover_module);

    (void)dummy;
    conf->listen_port = atoi(arg);
    if (conf->listen_port <= 0 || conf->listen_port > 65535) {
        return "TestTakeoverListen takes a port number";
    }
    return NULL;
}

static const command_rec takeover_test_cmds[] = {
    AP_INIT_FLAG("TestTakeoverPlantHelpers", set_plant_helpers, NULL,
                 RSRC_CONF, "write helpers' pids into free scoreboard slots"),
    AP_INIT_FLAG("TestTakeoverForgetRecord", set_forget_record, NULL,
                 RSRC_CONF, "spoil the MPM's take-over record"),
    AP_INIT_TAKE1("TestTakeoverListen", set_listen_port, NULL, RSRC_CONF,
                  "a port to hold a reuseport listening socket on"),
    { NULL }
};

static void takeover_test_register_hooks(apr_pool_t *p)
{
    static const char *const before_mpm[] = { "mod_mpm_bucketed.c", NULL };

    (void)p;
    ap_hook_open_logs(takeover_test_open_logs, NULL, before_mpm,
                      APR_HOOK_REALLY_FIRST);
    ap_hook_handler(plant_pid_handler, NULL, NULL, APR_HOOK_MIDDLE);
    /* After mod_cgid's post_config has started its daemon. */
    ap_hook_post_config(takeover_test_post_config, NULL, NULL,
                        APR_HOOK_REALLY_LAST);
}

AP_DECLARE_MODULE(test_takeover) = {
    STANDARD20_MODULE_STUFF,
    NULL,
    NULL,
    create_takeover_test_config,
    NULL,
    takeover_test_cmds,
    takeover_test_register_hooks,
    AP_MODULE_FLAG_NONE
};
