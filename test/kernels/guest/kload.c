/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kload: the HTTP client of the kernel-matrix guest, built static on the
 * host (the guest has no curl or python). Talks only to 127.0.0.1.
 *
 *   kload get PORT PATH
 *       one GET; prints the body; exit 0 on status 200, else 1.
 *   kload run PORT PATH EXPECT THREADS MAX SECONDS [STOPFILE]
 *       THREADS threads doing GETs with Connection: close until MAX
 *       requests were made, SECONDS passed, or STOPFILE exists. A request
 *       succeeds when it answers 200 with a body containing EXPECT.
 *       Prints "ok=N failed=M" and the first error; exit 0 if it ran.
 *   kload hold PORT FD PROGRAM [ARGS...]
 *       a listening socket on 127.0.0.1:PORT with SO_REUSEPORT (as
 *       systemd's ReusePort=yes) at descriptor FD, then becomes PROGRAM,
 *       which keeps it open: the socket a service manager holds across a
 *       server's full restarts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define HOLD_BACKLOG 4096

#define IO_TIMEOUT_S 10
#define MAX_THREADS 64
#define RESPONSE_MAX 65536

static struct {
    unsigned short port;
    const char *path;
    const char *expect;
    long max;
    double deadline;
    const char *stopfile;
    pthread_mutex_t lock;
    long started, ok, failed;
    char first_error[256];
} load = { .lock = PTHREAD_MUTEX_INITIALIZER };

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One GET into buf (NUL-terminated). Returns the HTTP status, or -1 with
 * a reason in err. */
static int http_get(const char *path, char *buf, size_t size, char *err,
                    size_t errsize)
{
    struct sockaddr_in sin;
    struct timeval tv = { IO_TIMEOUT_S, 0 };
    char request[512];
    size_t have = 0;
    int status = -1, fd, len;
    ssize_t n = 0;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errsize, "socket: %s", strerror(errno));
        return -1;
    }
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(load.port);
    len = snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\n"
                   "Host: localhost\r\nConnection: close\r\n\r\n", path);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0
        || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
        snprintf(err, errsize, "setsockopt: %s", strerror(errno));
    }
    else if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        snprintf(err, errsize, "connect: %s", strerror(errno));
    }
    else if (send(fd, request, len, MSG_NOSIGNAL) != len) {
        snprintf(err, errsize, "send: %s", strerror(errno));
    }
    else {
        while (have + 1 < size
               && (n = recv(fd, buf + have, size - 1 - have, 0)) > 0) {
            have += n;
        }
        buf[have] = '\0';
        if (n < 0 && have + 1 < size) {
            snprintf(err, errsize, "recv after %zu bytes: %s", have,
                     strerror(errno));
        }
        else if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) {
            snprintf(err, errsize, "no status line in %zu bytes", have);
            status = -1;
        }
    }
    close(fd);
    return status;
}

static const char *body_of(const char *response)
{
    const char *body = strstr(response, "\r\n\r\n");

    return body ? body + 4 : "";
}

static int stop_requested(void)
{
    struct stat st;

    return (load.stopfile && stat(load.stopfile, &st) == 0)
           || now() >= load.deadline;
}

static void *worker(void *unused)
{
    char buf[RESPONSE_MAX];
    char err[200];
    int status;

    (void)unused;
    for (;;) {
        pthread_mutex_lock(&load.lock);
        if (load.started >= load.max || stop_requested()) {
            pthread_mutex_unlock(&load.lock);
            return NULL;
        }
        load.started++;
        pthread_mutex_unlock(&load.lock);

        err[0] = '\0';
        status = http_get(load.path, buf, sizeof(buf), err, sizeof(err));
        if (status > 0 && status != 200) {
            snprintf(err, sizeof(err), "status %d", status);
        }
        else if (status == 200 && !strstr(body_of(buf), load.expect)) {
            snprintf(err, sizeof(err), "body lacks \"%s\"", load.expect);
        }
        pthread_mutex_lock(&load.lock);
        if (err[0] == '\0') {
            load.ok++;
        }
        else {
            load.failed++;
            if (load.first_error[0] == '\0') {
                snprintf(load.first_error, sizeof(load.first_error), "%s",
                         err);
            }
        }
        pthread_mutex_unlock(&load.lock);
    }
}

static int parse_long(const char *text, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || end == text || v < lo || v > hi) {
        fprintf(stderr, "kload: \"%s\" is not a number in %ld..%ld\n", text,
                lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: kload get PORT PATH\n"
            "       kload run PORT PATH EXPECT THREADS MAX SECONDS "
            "[STOPFILE]\n"
            "       kload hold PORT FD PROGRAM [ARGS...]\n");
    return 2;
}

static int cmd_hold(int fd, char **program)
{
    struct sockaddr_in sin;
    int one = 1, s, err;

    s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) {
        err = errno;
        fprintf(stderr, "kload: socket: %s\n", strerror(err));
        return 1;
    }
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(load.port);
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0
        || setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0
        || bind(s, (struct sockaddr *)&sin, sizeof(sin)) != 0
        || listen(s, HOLD_BACKLOG) != 0) {
        err = errno;
        fprintf(stderr, "kload: a socket to hold on port %u: %s\n",
                load.port, strerror(err));
        return 1;
    }
    if (s != fd && (dup2(s, fd) < 0 || close(s) != 0)) {
        err = errno;
        fprintf(stderr, "kload: dup2 to %d: %s\n", fd, strerror(err));
        return 1;
    }
    execv(program[0], program);
    err = errno;
    fprintf(stderr, "kload: exec %s: %s\n", program[0], strerror(err));
    return 1;
}

static int cmd_get(void)
{
    static char buf[RESPONSE_MAX];
    char err[200] = "";
    int status = http_get(load.path, buf, sizeof(buf), err, sizeof(err));

    if (status < 0) {
        fprintf(stderr, "kload: %s\n", err);
        return 1;
    }
    fputs(body_of(buf), stdout);
    return status == 200 ? 0 : 1;
}

static int cmd_run(long threads)
{
    pthread_t tids[MAX_THREADS];
    long i, started = 0;
    int rc;

    for (i = 0; i < threads; i++) {
        rc = pthread_create(&tids[i], NULL, worker, NULL);
        if (rc != 0) {
            fprintf(stderr, "kload: pthread_create: %s\n", strerror(rc));
            break;
        }
        started++;
    }
    for (i = 0; i < started; i++) {
        pthread_join(tids[i], NULL);
    }
    printf("ok=%ld failed=%ld first_error=%s\n", load.ok, load.failed,
           load.first_error[0] ? load.first_error : "none");
    return started == threads ? 0 : 1;
}

int main(int argc, char **argv)
{
    long port, threads, seconds, fd;

    if (argc < 4 || parse_long(argv[2], 1, 65535, &port) != 0) {
        return usage();
    }
    load.port = (unsigned short)port;
    if (strcmp(argv[1], "hold") == 0) {
        if (argc < 5 || parse_long(argv[3], 3, 1023, &fd) != 0) {
            return usage();
        }
        return cmd_hold((int)fd, argv + 4);
    }
    load.path = argv[3];
    if (strcmp(argv[1], "get") == 0 && argc == 4) {
        return cmd_get();
    }
    if (strcmp(argv[1], "run") != 0 || argc < 8 || argc > 9
        || parse_long(argv[5], 1, MAX_THREADS, &threads) != 0
        || parse_long(argv[6], 1, 100000000, &load.max) != 0
        || parse_long(argv[7], 1, 3600, &seconds) != 0) {
        return usage();
    }
    load.expect = argv[4];
    load.deadline = now() + seconds;
    load.stopfile = argc == 9 ? argv[8] : NULL;
    return cmd_run(threads);
}
