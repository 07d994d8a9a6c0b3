/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noreuseport.so: an LD_PRELOAD shim that emulates an older kernel by
 * refusing, with the errno such a kernel gives, what it lacked.
 * Unset, BUCKETED_SHIM_KERNEL refuses only SO_REUSEPORT (a kernel before
 * 3.9, as this shim always did). Set to MAJOR.MINOR, it refuses whatever
 * that kernel lacked:
 *   < 3.9   setsockopt(SO_REUSEPORT)                         ENOPROTOOPT
 *   < 4.5   setsockopt(SO_ATTACH_REUSEPORT_CBPF / _EBPF)     ENOPROTOOPT
 *   < 4.19  bpf(BPF_PROG_LOAD) of BPF_PROG_TYPE_SK_REUSEPORT,
 *           bpf(BPF_MAP_CREATE) of REUSEPORT_SOCKARRAY       EINVAL
 *   < 5.14  opening /proc/sys/net/ipv4/tcp_migrate_req       ENOENT
 *           an SK_REUSEPORT program for
 *           BPF_SK_REUSEPORT_SELECT_OR_MIGRATE               EINVAL
 * (Debian's 5.10 accepts, and ignores, that attach type: see
 * docs/kernels.md.) BUCKETED_SHIM_REFUSE_ATTACH_PORT=N also makes
 * setsockopt(SO_ATTACH_REUSEPORT_EBPF) fail with EPERM on a socket bound
 * to local port N, as a security policy might: the kernel has everything,
 * the trials (on sockets of their own) pass, and the program still cannot
 * go where it is meant to (set BUCKETED_SHIM_KERNEL to a recent version
 * then, or SO_REUSEPORT is refused too). Only calls through libc are seen: bpf() goes through
 * syscall(2); uname(2) still tells the real kernel. Everything else goes
 * to the real functions unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#define SO_ATTACH_REUSEPORT_EBPF 52
#endif
#define MIGRATE_SYSCTL "/proc/sys/net/ipv4/tcp_migrate_req"
#define VERSION(major, minor) ((major) * 1000 + (minor))

#define UNSET 0

/* The emulated kernel, read once: UNSET, or its version (3.8 when the
 * value is not MAJOR.MINOR). */
static int emulated(void)
{
    static int version = -1;
    const char *text;
    int major, minor, used = 0;

    if (version < 0) {
        text = getenv("BUCKETED_SHIM_KERNEL");
        if (text == NULL || *text == '\0') {
            version = UNSET;
        }
        else if (sscanf(text, "%d.%d%n", &major, &minor, &used) == 2
                 && text[used] == '\0' && major >= 0 && minor >= 0) {
            version = VERSION(major, minor);
        }
        else {
            fprintf(stderr, "noreuseport.so: BUCKETED_SHIM_KERNEL=%s is not "
                    "MAJOR.MINOR (e.g. 4.18); emulating 3.8\n", text);
            version = VERSION(3, 8);
        }
    }
    return version;
}

/* True when the emulated kernel lacks what major.minor brought; unset,
 * only SO_REUSEPORT (3.9) is missing. */
static int older_than(int major, int minor)
{
    if (emulated() == UNSET) {
        return VERSION(major, minor) == VERSION(3, 9);
    }
    return emulated() < VERSION(major, minor);
}

static void *real(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);

    if (fn == NULL) {
        errno = ENOSYS;
    }
    return fn;
}

/* Whether fd is bound to BUCKETED_SHIM_REFUSE_ATTACH_PORT. */
static int attach_refused_on(int fd)
{
    const char *text = getenv("BUCKETED_SHIM_REFUSE_ATTACH_PORT");
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int saved = errno, port;

    if (text == NULL || (port = atoi(text)) <= 0
        || getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        errno = saved;
        return 0;
    }
    errno = saved;
    if (ss.ss_family == AF_INET) {
        return ntohs(((struct sockaddr_in *)&ss)->sin_port) == port;
    }
    return ss.ss_family == AF_INET6
           && ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == port;
}

int setsockopt(int fd, int level, int optname, const void *optval,
               socklen_t optlen)
{
    static int (*real_setsockopt)(int, int, int, const void *, socklen_t);

    if (level == SOL_SOCKET && optname == SO_ATTACH_REUSEPORT_EBPF
        && attach_refused_on(fd)) {
        errno = EPERM;
        return -1;
    }

    if (level == SOL_SOCKET
        && ((optname == SO_REUSEPORT && older_than(3, 9))
            || ((optname == SO_ATTACH_REUSEPORT_CBPF
                 || optname == SO_ATTACH_REUSEPORT_EBPF)
                && older_than(4, 5)))) {
        errno = ENOPROTOOPT;
        return -1;
    }
    if (real_setsockopt == NULL
        && (real_setsockopt = real("setsockopt")) == NULL) {
        return -1;
    }
    return real_setsockopt(fd, level, optname, optval, optlen);
}

/* Reads only the `size` bytes of attr that the caller passed. */
static int bpf_refused(long cmd, const union bpf_attr *attr,
                       unsigned long size)
{
    const unsigned long attach_end =
        offsetof(union bpf_attr, expected_attach_type)
        + sizeof(attr->expected_attach_type);

    if (attr == NULL || size < sizeof(attr->prog_type)) {
        return 0;
    }
    if (cmd == BPF_PROG_LOAD && attr->prog_type == BPF_PROG_TYPE_SK_REUSEPORT) {
        return older_than(4, 19)
               || (size >= attach_end
                   && attr->expected_attach_type
                          == BPF_SK_REUSEPORT_SELECT_OR_MIGRATE
                   && older_than(5, 14));
    }
    return cmd == BPF_MAP_CREATE
           && attr->map_type == BPF_MAP_TYPE_REUSEPORT_SOCKARRAY
           && older_than(4, 19);
}

long syscall(long number, ...)
{
    static long (*real_syscall)(long, ...);
    long a[6];
    va_list ap;
    int i;

    va_start(ap, number);
    for (i = 0; i < 6; i++) {
        a[i] = va_arg(ap, long);
    }
    va_end(ap);
    if (number == SYS_bpf
        && bpf_refused(a[0], (const union bpf_attr *)a[1], a[2])) {
        errno = EINVAL;
        return -1;
    }
    if (real_syscall == NULL && (real_syscall = real("syscall")) == NULL) {
        return -1;
    }
    return real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* The opening functions below hide the sysctl, then call the real function
 * of their name, looked up once. */
static int migrate_sysctl_hidden(const char *path)
{
    if (path != NULL && strcmp(path, MIGRATE_SYSCTL) == 0
        && older_than(5, 14)) {
        errno = ENOENT;
        return 1;
    }
    return 0;
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

/* The mode argument is there only with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags, mode)                                             \
    do {                                                                  \
        va_list ap;                                                       \
        va_start(ap, flags);                                              \
        mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;  \
        va_end(ap);                                                       \
    } while (0)

static int open_as(const char *name, open_fn *fn, const char *path, int flags,
                   mode_t mode)
{
    if (migrate_sysctl_hidden(path)
        || (*fn == NULL && (*fn = (open_fn)real(name)) == NULL)) {
        return -1;
    }
    return (*fn)(path, flags, mode);
}

static int openat_as(const char *name, openat_fn *fn, int dirfd,
                     const char *path, int flags, mode_t mode)
{
    if (migrate_sysctl_hidden(path)
        || (*fn == NULL && (*fn = (openat_fn)real(name)) == NULL)) {
        return -1;
    }
    return (*fn)(dirfd, path, flags, mode);
}

static FILE *fopen_as(const char *name, fopen_fn *fn, const char *path,
                      const char *how)
{
    if (migrate_sysctl_hidden(path)
        || (*fn == NULL && (*fn = (fopen_fn)real(name)) == NULL)) {
        return NULL;
    }
    return (*fn)(path, how);
}

int open(const char *path, int flags, ...)
{
    static open_fn fn;
    mode_t mode;

    MODE_ARG(flags, mode);
    return open_as("open", &fn, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    static open_fn fn;
    mode_t mode;

    MODE_ARG(flags, mode);
    return open_as("open64", &fn, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    static openat_fn fn;
    mode_t mode;

    MODE_ARG(flags, mode);
    return openat_as("openat", &fn, dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    static openat_fn fn;
    mode_t mode;

    MODE_ARG(flags, mode);
    return openat_as("openat64", &fn, dirfd, path, flags, mode);
}

FILE *fopen(const char *path, const char *how)
{
    static fopen_fn fn;

    return fopen_as("fopen", &fn, path, how);
}

FILE *fopen64(const char *path, const char *how)
{
    static fopen_fn fn;

    return fopen_as("fopen64", &fn, path, how);
}
