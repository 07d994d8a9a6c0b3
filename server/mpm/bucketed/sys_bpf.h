/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_bpf: the BPF programs bucketed puts on its reuseport groups,
 * loaded with the raw bpf(2) syscall from a few instructions assembled
 * here (no libbpf, no clang), and the trials that show what the running
 * kernel does with them. Linux only; elsewhere, or built without
 * linux/bpf.h, every load is refused with ENOSYS and the trials say so.
 */
#ifndef SYS_BPF_H
#define SYS_BPF_H

#include "apr_pools.h"

#include "policy_steering.h"

/* 1 when this build can load programs (linux/bpf.h and SYS_bpf were
 * there); 0 otherwise. */
int reuseport_bpf_built(void);

/* Loads the migration program: BPF_PROG_TYPE_SK_REUSEPORT, expected
 * attach type BPF_SK_REUSEPORT_SELECT_OR_MIGRATE, returning SK_PASS, so
 * that the kernel keeps selecting by its hash and, when a listener of the
 * group closes, moves its requests to another one. Returns the program's
 * descriptor (close-on-exec), or -1 with *err set. */
int reuseport_bpf_migrate_load(int *err);

/* Loads the CPU steering program for a group of `buckets` sockets: it
 * selects the socket at index smp_processor_id() % buckets of the
 * REUSEPORT_SOCKARRAY map_fd, and leaves the choice to the kernel's hash
 * when that slot is empty. With migrate, it is loaded as
 * SELECT_OR_MIGRATE, so the group migrates on close as with the migration
 * program. Returns the descriptor or -1 with *err set. */
int reuseport_bpf_cpu_load(int map_fd, int buckets, int migrate, int *err);

/* Loads the hash steering program: as the CPU one, but the slot is
 * ctx->hash % buckets, the kernel's hash of the connection. The same
 * choice as the kernel's own, except that a socket of the group that is
 * not in the map (one being drained) gets nothing. */
int reuseport_bpf_hash_load(int map_fd, int buckets, int migrate, int *err);

/* Loads the load-aware steering program for a group of `buckets` (1 to
 * STEERING_MAX_LOAD_BUCKETS) sockets: starting at the hash's bucket
 * (ctx->hash mod buckets), it selects from the REUSEPORT_SOCKARRAY
 * sock_map the first bucket b with a unit left to hand out in idle_map,
 * and takes it; with none, a bucket with idle units seen, in proportion
 * to them (picked by the hash); with none, the hash's bucket. migrate as
 * for reuseport_bpf_cpu_load. */
int reuseport_bpf_load_load(int sock_map, int idle_map, int buckets,
                            int migrate, int *err);

/* An array of `entries` pairs of idle counts, one pair per bucket. */
int reuseport_bpf_idle_map_create(int entries, int *err);

/* idle_map[index] = the units the program may hand out, one per
 * connection (untaken), and the idle units seen. 0, or an errno. */
int reuseport_bpf_idle_set(int map_fd, int index, unsigned int untaken,
                           unsigned int seen);

/* A REUSEPORT_SOCKARRAY of `entries` slots: descriptor or -1, *err set. */
int reuseport_bpf_sockarray_create(int entries, int *err);

/* Puts the listening socket sock_fd (in a reuseport group) in slot index.
 * A socket can be in one such map only. 0, or an errno. */
int reuseport_bpf_sockarray_set(int map_fd, int index, int sock_fd);

/* *holds = whether slot index holds the socket sock_fd (a lookup of a
 * REUSEPORT_SOCKARRAY gives the socket's cookie, compared with its
 * SO_COOKIE; an empty slot holds nothing). 0, or an errno. */
int reuseport_bpf_sockarray_holds(int map_fd, int index, int sock_fd,
                                  int *holds);

/* Empties slots 0 .. entries-1, so that their sockets may join another
 * map. */
void reuseport_bpf_sockarray_clear(int map_fd, int entries);

/* Attaches prog_fd to the reuseport group of the listening socket
 * sock_fd, replacing whatever program the group had. 0, or an errno. */
int reuseport_bpf_attach(int sock_fd, int prog_fd);

/* The kernel's id of a loaded program (what bpftool shows), 0 if unknown. */
unsigned int reuseport_bpf_prog_id(int prog_fd);

/* Whether fd is one of bucketed's maps (a socket map or an idle-count
 * array, by the names every build gives them): 1 or 0; *err is an errno
 * when a BPF map's name could not be read (0 otherwise). */
int reuseport_bpf_map_is_bucketed(int fd, int *err);

#endif /* SYS_BPF_H */
