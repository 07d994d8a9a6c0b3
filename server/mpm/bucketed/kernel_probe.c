/*
 * kernel_probe.c: kernel capability probing. Opens and closes one trial
 * socket and reads one sysctl; changes nothing.
 */
#include "kernel_probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "apr_strings.h"

#define MIGRATE_REQ_SYSCTL "/proc/sys/net/ipv4/tcp_migrate_req"

int kernel_release_parse(const char *release, int *major, int *minor,
                         int *patch)
{
    int parts[3] = { 0, 0, 0 };
    const char *c = release;
    int i;

    for (i = 0; i < 3; i++) {
        char *end;
        long v;

        if (*c < '0' || *c > '9') {
            if (i < 2) {
                return -1;
            }
            break;
        }
        v = strtol(c, &end, 10);
        if (v < 0 || v > 100000) {
            return -1;
        }
        parts[i] = (int)v;
        c = end;
        if (*c != '.') {
            if (i < 1) {
                return -1;
            }
            break;
        }
        c++;
    }
    *major = parts[0];
    *minor = parts[1];
    *patch = parts[2];
    return 0;
}

int kernel_version_at_least(const kernel_features *kf, int major, int minor)
{
    return kf->major > major || (kf->major == major && kf->minor >= minor);
}

void kernel_features_from_version(kernel_features *kf)
{
    kf->incoming_cpu = kernel_version_at_least(kf, 4, 4);
    kf->reuseport_bpf = kernel_version_at_least(kf, 4, 6);
}

int kernel_probe_reuseport(int *err)
{
#ifdef SO_REUSEPORT
    int one = 1, fd, ok;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        fd = socket(AF_INET6, SOCK_STREAM, 0);
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

static int read_migrate_req(void)
{
    FILE *f = fopen(MIGRATE_REQ_SYSCTL, "r");
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

    memset(kf, 0, sizeof(*kf));
    if (uname(&uts) == 0) {
        kernel_release_parse(uts.release, &kf->major, &kf->minor, &kf->patch);
    }
    kernel_features_from_version(kf);
    kf->reuseport = kernel_probe_reuseport(&kf->reuseport_errno);
    kf->migrate_req = read_migrate_req();
}

const char *kernel_features_describe(apr_pool_t *p, const kernel_features *kf)
{
    return apr_psprintf(p, "kernel %d.%d.%d: SO_REUSEPORT %s, "
                        "SO_INCOMING_CPU %s, reuseport BPF %s, "
                        "tcp_migrate_req %s",
                        kf->major, kf->minor, kf->patch,
                        kf->reuseport ? "yes"
                            : apr_psprintf(p, "no (%s)",
                                           strerror(kf->reuseport_errno)),
                        kf->incoming_cpu ? "yes" : "no",
                        kf->reuseport_bpf ? "yes" : "no",
                        kf->migrate_req < 0 ? "absent"
                            : kf->migrate_req ? "on" : "off");
}
