/* SPDX-License-Identifier: Apache-2.0 */
/*
 * emfile_shim.c: an LD_PRELOAD library for fault tests. While the file
 * named by BUCKETED_EMFILE_FLAG exists, epoll_create, epoll_create1 and
 * eventfd fail with EMFILE, as they do when a process has run out of
 * descriptors. Only what starts a child calls them once the server runs,
 * so the flag makes new children fail their set-up and leaves running ones
 * alone. And while the file named by BUCKETED_EPOLL_CTL_FLAG exists,
 * epoll_ctl(EPOLL_CTL_ADD) of a listening socket fails with ENOMEM, as
 * the kernel's does when it cannot allocate the entry: a child then
 * fails to put its listening sockets (back) into its epoll set. Test use
 * only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

static int flag_exists(const char *variable)
{
    const char *flag = getenv(variable);
    int saved = errno;
    int out = flag != NULL && access(flag, F_OK) == 0;

    errno = saved;
    return out;
}

static int descriptors_run_out(void)
{
    return flag_exists("BUCKETED_EMFILE_FLAG");
}

static int is_listening_socket(int fd)
{
    int saved = errno;
    int listening = 0;
    socklen_t len = sizeof(listening);

    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0) {
        listening = 0;
    }
    errno = saved;
    return listening;
}

static void *next_symbol(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

int epoll_create(int size)
{
    int (*real)(int) = (int (*)(int))next_symbol("epoll_create");

    if (descriptors_run_out() || real == NULL) {
        errno = EMFILE;
        return -1;
    }
    return real(size);
}

int epoll_create1(int flags)
{
    int (*real)(int) = (int (*)(int))next_symbol("epoll_create1");

    if (descriptors_run_out() || real == NULL) {
        errno = EMFILE;
        return -1;
    }
    return real(flags);
}

int eventfd(unsigned int initval, int flags)
{
    int (*real)(unsigned int, int) =
        (int (*)(unsigned int, int))next_symbol("eventfd");

    if (descriptors_run_out() || real == NULL) {
        errno = EMFILE;
        return -1;
    }
    return real(initval, flags);
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    int (*real)(int, int, int, struct epoll_event *) =
        (int (*)(int, int, int, struct epoll_event *))next_symbol(
            "epoll_ctl");

    if (real == NULL || (op == EPOLL_CTL_ADD
                         && flag_exists("BUCKETED_EPOLL_CTL_FLAG")
                         && is_listening_socket(fd))) {
        errno = ENOMEM;
        return -1;
    }
    return real(epfd, op, fd, event);
}
