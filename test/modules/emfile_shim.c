/* SPDX-License-Identifier: Apache-2.0 */
/*
 * emfile_shim.c: an LD_PRELOAD library for fault tests. While the file
 * named by BUCKETED_EMFILE_FLAG exists, epoll_create, epoll_create1 and
 * eventfd fail with EMFILE, as they do when a process has run out of
 * descriptors. Only what starts a child calls them once the server runs,
 * so the flag makes new children fail their set-up and leaves running ones
 * alone. Test use only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static int descriptors_run_out(void)
{
    const char *flag = getenv("BUCKETED_EMFILE_FLAG");
    int saved = errno;
    int out = flag != NULL && access(flag, F_OK) == 0;

    errno = saved;
    return out;
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
