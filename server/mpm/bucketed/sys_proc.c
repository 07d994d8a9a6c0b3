/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_proc.c: a process's parent, start time and user from /proc, the
 * sockets it holds from /proc/<pid>/fd, the signals waiting for it, a
 * descriptor's socket inode (sys_proc.h).
 */
#include "sys_proc.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

/* The fields of /proc/<pid>/stat after the command name (which may hold
 * spaces and parentheses): state, ppid, then 17 fields up to starttime
 * (field 22). */
static int read_stat(pid_t pid, process_facts *f)
{
    char path[64], buf[1024], state;
    const char *end;
    unsigned long long start;
    long ppid;
    size_t n;
    FILE *fp;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    fp = fopen(path, "re");
    if (fp == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    end = strrchr(buf, ')');
    if (end == NULL
        || sscanf(end + 1, " %c %ld %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                  "%*s %*s %*s %*s %*s %*s %*s %*s %llu", &state, &ppid,
                  &start) != 3) {
        return 0;
    }
    f->zombie = state == 'Z' || state == 'X';
    f->parent = (pid_t)ppid;
    f->start_ticks = start;
    return 1;
}

/* The line of /proc/<pid>/status that starts with `key` (with its colon)
 * into line: whether there is one. */
static int read_status_line(pid_t pid, const char *key, char *line,
                            size_t len)
{
    char path[64];
    size_t key_len = strlen(key);
    int found = 0;
    FILE *fp;

    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    fp = fopen(path, "re");
    if (fp == NULL) {
        return 0;
    }
    while (!found && fgets(line, (int)len, fp) != NULL) {
        found = strncmp(line, key, key_len) == 0;
    }
    fclose(fp);
    return found;
}

/* The real and effective uid, from the Uid line. */
static int read_uids(pid_t pid, process_facts *f)
{
    char line[256];
    unsigned long real, effective;

    if (!read_status_line(pid, "Uid:", line, sizeof(line))
        || sscanf(line, "Uid: %lu %lu", &real, &effective) != 2) {
        return 0;
    }
    f->real_uid = (uid_t)real;
    f->effective_uid = (uid_t)effective;
    return 1;
}

/* The signal mask of the status line `key` (SigPnd:, ShdPnd:); 0 when
 * there is none. */
static apr_uint64_t read_signal_mask(pid_t pid, const char *key)
{
    char line[256];
    const char *hex;
    size_t digits;

    if (!read_status_line(pid, key, line, sizeof(line))) {
        return 0;
    }
    hex = line + strlen(key);
    hex += strspn(hex, " \t");
    digits = strspn(hex, "0123456789abcdefABCDEF");
    /* Kernels with 128 signals print 32 digits; 1-64 are the last 16. */
    if (digits > 16) {
        hex += digits - 16;
    }
    return (apr_uint64_t)strtoull(hex, NULL, 16);
}

int proc_signals_pending(pid_t pid, apr_uint64_t bits)
{
    return ((read_signal_mask(pid, "ShdPnd:")
             | read_signal_mask(pid, "SigPnd:")) & bits) != 0;
}

apr_status_t proc_read_facts(pid_t pid, process_facts *f)
{
    memset(f, 0, sizeof(*f));
    f->found = pid > 0 && read_stat(pid, f) && read_uids(pid, f);
    return APR_SUCCESS;
}

int proc_holds_socket(pid_t pid, const apr_uint64_t *inodes, int n)
{
    char path[64], link[64];
    struct dirent *de;
    int held = 0;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
    dir = opendir(path);
    if (dir == NULL) {
        return 0;
    }
    while (!held && (de = readdir(dir)) != NULL) {
        char fdpath[64 + sizeof(de->d_name)];
        unsigned long long inode;
        ssize_t len;
        int i;

        snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
        len = readlink(fdpath, link, sizeof(link) - 1);
        if (len <= 0) {
            continue;
        }
        link[len] = '\0';
        if (sscanf(link, "socket:[%llu]", &inode) != 1) {
            continue;
        }
        for (i = 0; i < n && !held; i++) {
            held = inodes[i] == inode;
        }
    }
    closedir(dir);
    return held;
}

apr_status_t proc_ticks_now(apr_uint64_t *ticks)
{
    struct timespec ts;
    long hz = sysconf(_SC_CLK_TCK);

    if (hz <= 0) {
        return APR_EINVAL;
    }
    if (clock_gettime(CLOCK_BOOTTIME, &ts) < 0) {
        return errno;
    }
    *ticks = (apr_uint64_t)ts.tv_sec * (apr_uint64_t)hz
             + (apr_uint64_t)ts.tv_nsec / (1000000000u / (apr_uint64_t)hz);
    return APR_SUCCESS;
}

apr_uint64_t proc_socket_inode(int fd)
{
    struct stat st;

    if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        return 0;
    }
    return (apr_uint64_t)st.st_ino;
}
