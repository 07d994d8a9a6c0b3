/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_probe.c: kernel capability probing. Opens and closes a few trial
 * descriptors and reads one sysctl; changes nothing.
 */
#include "sys_probe.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#endif

#ifndef SOCK_CLOEXEC
#define SOCK_CLOEXEC 0
#endif

#define MIGRATE_REQ_SYSCTL "/proc/sys/net/ipv4/tcp_migrate_req"

int kernel_probe_reuseport(int *err)
{
#ifdef SO_REUSEPORT
    int one = 1, fd, ok;

    /* Close-on-exec like every descriptor of the MPM, though it lives
     * only for this call. */
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    if (fd < 0) {
        *err = errno;
        return 0;
    }
    ok = setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0;
    *err = ok ? 0 : errno;
    close(fd);
    return ok;
#else
    *err = ENOPROTOOPT;
    return 0;
#endif
}

int kernel_probe_epoll_exclusive(int *err)
{
#if defined(__linux__) && defined(EPOLLEXCLUSIVE)
    struct epoll_event ev;
    int ep, fd, ok;

    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        *err = errno;
        return 0;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        close(ep);
        return 0;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        *err = errno;
        ok = 0;
    }
    /* Kernels before 4.5 ignore the unknown flag and take the add; only
     * one that knows it refuses to modify an exclusive entry. */
    else if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) == 0) {
        *err = ENOSYS;
        ok = 0;
    }
    else {
        *err = errno;
        ok = *err == EINVAL;
    }
    close(fd);
    close(ep);
    return ok;
#else
    *err = EINVAL;
    return 0;
#endif
}

static int read_migrate_req(void)
{
    FILE *f = fopen(MIGRATE_REQ_SYSCTL, "re");
    int value = -1;

    if (f == NULL) {
        return -1;
    }
    if (fscanf(f, "%d", &value) != 1) {
        value = -1;
    }
    fclose(f);
    return value;
}

void kernel_probe(kernel_features *kf)
{
    struct utsname uts;
    int err;

    memset(kf, 0, sizeof(*kf));
    if (uname(&uts) == 0) {
        kernel_release_parse(uts.release, &kf->major, &kf->minor, &kf->patch);
    }
    kernel_features_from_version(kf);
    kf->reuseport = kernel_probe_reuseport(&kf->reuseport_errno);
    kf->epoll_exclusive = kernel_probe_epoll_exclusive(&err);
    kf->migrate_req = read_migrate_req();
}

