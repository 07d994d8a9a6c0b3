/*
 * noreuseport.so: an LD_PRELOAD shim that emulates a kernel older than 3.9,
 * where setsockopt(SOL_SOCKET, SO_REUSEPORT) fails with ENOPROTOOPT.
 * Every other socket option goes to the real setsockopt unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>

typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);

int setsockopt(int fd, int level, int optname, const void *optval,
               socklen_t optlen)
{
    static setsockopt_fn real_setsockopt;

    if (level == SOL_SOCKET && optname == SO_REUSEPORT) {
        errno = ENOPROTOOPT;
        return -1;
    }
    if (real_setsockopt == NULL) {
        real_setsockopt = (setsockopt_fn)dlsym(RTLD_NEXT, "setsockopt");
        if (real_setsockopt == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    return real_setsockopt(fd, level, optname, optval, optlen);
}
