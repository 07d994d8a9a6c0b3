/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sys_bpf.c: loading and attaching bucketed's reuseport programs
 * (sys_trial.c shows what the kernel does with them).
 *
 * The programs are a handful of instructions, assembled below as data and
 * loaded with bpf(2) through syscall(2) (which is also what lets the
 * LD_PRELOAD shim of bench/ emulate older kernels). That keeps the module
 * free of libbpf and of a clang step, so the apxs and in-tree builds stay
 * plain C; where linux/bpf.h is missing the file still compiles and every
 * load fails with ENOSYS (docs/design.md, "Migration").
 *
 * The enum values taken from the kernel ABI (program and attach types)
 * are named here by number: they never change, and naming them keeps
 * headers from before 4.19 / 5.14, which lack the names, building.
 */
#include "sys_bpf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/bpf.h>)
#include <linux/bpf.h>
#include <sys/syscall.h>
#if defined(SYS_bpf) && defined(SO_ATTACH_REUSEPORT_EBPF) \
    && defined(BPF_OBJ_NAME_LEN)
#define HAVE_REUSEPORT_BPF 1
#endif
#endif
#endif

#ifdef HAVE_REUSEPORT_BPF

#ifndef SO_COOKIE
#define SO_COOKIE 57                          /* 4.13, asm-generic */
#endif

/* Kernel ABI numbers (include/uapi/linux/bpf.h). */
#define ABI_PROG_TYPE_SK_REUSEPORT 21                    /* 4.19 */
#define ABI_SK_REUSEPORT_SELECT_OR_MIGRATE 40            /* 5.14 */
#define ABI_MAP_TYPE_ARRAY 2
#define ABI_MAP_TYPE_REUSEPORT_SOCKARRAY 20                 /* 4.19 */
#define ABI_FUNC_MAP_LOOKUP_ELEM 1
#define ABI_SK_REUSEPORT_MD_HASH 32    /* offsetof(sk_reuseport_md, hash) */
#define ABI_FUNC_GET_SMP_PROCESSOR_ID 8
#define ABI_FUNC_SK_SELECT_REUSEPORT 82                      /* 4.19 */
#define ABI_SK_PASS 1

#define MIGRATE_PROGRAM_NAME "bucketed_mig"
#define CPU_PROGRAM_NAME "bucketed_cpu"
#define HASH_PROGRAM_NAME "bucketed_hash"
#define LOAD_PROGRAM_NAME "bucketed_load"
#define IDLE_MAP_NAME "bucketed_idle"
/* The load program: a head, a block per bucket for the first pass, one
 * to weigh it and one to pick it for the second, the second pass's own
 * few (the weights' sum set to 0, tested, and the hash taken mod it), a
 * tail. A first pass block starts with a lookup. */
#define LOAD_HEAD 3
#define LOAD_LOOKUP 10
#define LOAD_TAKE (LOAD_LOOKUP + 7)
#define LOAD_WEIGH 11
#define LOAD_SECOND_PASS 4
#define LOAD_PICK 5
#define LOAD_TAIL 10
/* The second pass keeps each bucket's weight on the stack below the key
 * (at r10 - 4). */
#define WEIGHT_AT(b) (-8 - 4 * (b))
/* An idle map entry: two unsigned ints, the units the program may hand
 * out (it takes one per connection it sends) and the idle units the
 * census saw. */
#define IDLE_UNTAKEN 0
#define IDLE_SEEN 4
#define MAP_NAME "bucketed_socks"
/* No GPL-only helper is called: the license string is informative. */
#define PROGRAM_LICENSE "Apache-2.0"

/* Every descriptor bpf(2) returns (maps, programs) is close-on-exec: the
 * kernel sets O_CLOEXEC itself. A fork without exec still inherits them
 * (see bucket_listeners_close_for_helper). */
static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

int reuseport_bpf_built(void)
{
    return 1;
}

static int load_program(const struct bpf_insn *insns, unsigned int count,
                        unsigned int attach_type, const char *name, int *err)
{
    union bpf_attr attr;
    long fd;

    memset(&attr, 0, sizeof(attr));
    attr.prog_type = ABI_PROG_TYPE_SK_REUSEPORT;
    attr.expected_attach_type = attach_type;
    attr.insn_cnt = count;
    attr.insns = (unsigned long)insns;
    attr.license = (unsigned long)PROGRAM_LICENSE;
    strncpy(attr.prog_name, name, sizeof(attr.prog_name) - 1);
    fd = sys_bpf(BPF_PROG_LOAD, &attr);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    *err = 0;
    return (int)fd;
}

/* A map with 4-byte keys: descriptor, or -1 with *err set. */
static int create_map(unsigned int type, unsigned int value_size,
                      int entries, const char *name, int *err)
{
    union bpf_attr attr;
    long fd;

    memset(&attr, 0, sizeof(attr));
    attr.map_type = type;
    attr.key_size = sizeof(unsigned int);
    attr.value_size = value_size;
    attr.max_entries = entries;
    strncpy(attr.map_name, name, sizeof(attr.map_name) - 1);
    fd = sys_bpf(BPF_MAP_CREATE, &attr);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    *err = 0;
    return (int)fd;
}

/* map[index] = *value. 0, or an errno. */
static int update_elem(int map_fd, int index, const void *value)
{
    unsigned int key = (unsigned int)index;
    union bpf_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.map_fd = map_fd;
    attr.key = (unsigned long)&key;
    attr.value = (unsigned long)value;
    attr.flags = BPF_ANY;
    return sys_bpf(BPF_MAP_UPDATE_ELEM, &attr) < 0 ? errno : 0;
}

static struct bpf_insn insn(unsigned char code, unsigned char dst,
                            unsigned char src, short off, int imm)
{
    struct bpf_insn i;

    memset(&i, 0, sizeof(i));
    i.code = code;
    i.dst_reg = dst;
    i.src_reg = src;
    i.off = off;
    i.imm = imm;
    return i;
}

int reuseport_bpf_migrate_load(int *err)
{
    /* r0 = SK_PASS; exit */
    struct bpf_insn prog[2];

    prog[0] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, ABI_SK_PASS);
    prog[1] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    return load_program(prog, 2, ABI_SK_REUSEPORT_SELECT_OR_MIGRATE,
                        MIGRATE_PROGRAM_NAME, err);
}

/* Emits a 64-bit load of a map's descriptor into reg (two slots). */
static int emit_map(struct bpf_insn *prog, int n, int reg, int map_fd)
{
    prog[n++] = insn(BPF_LD | BPF_DW | BPF_IMM, reg, BPF_PSEUDO_MAP_FD, 0,
                     map_fd);
    prog[n++] = insn(0, 0, 0, 0, 0);
    return n;
}

/* Emits sk_select_reuseport(ctx in r6, map, key at r10 - 4, 0), then
 * `return SK_PASS` (9 slots): the helper's result is ignored, and on
 * failure (an empty slot) the kernel's hash chooses. */
static int emit_select(struct bpf_insn *prog, int n, int map_fd)
{
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0);
    n = emit_map(prog, n, BPF_REG_2, map_fd);
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_3, BPF_REG_10, 0, 0);
    prog[n++] = insn(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_3, 0, 0, -4);
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_4, 0, 0, 0);
    prog[n++] = insn(BPF_JMP | BPF_CALL, 0, 0, 0,
                     ABI_FUNC_SK_SELECT_REUSEPORT);
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0,
                     ABI_SK_PASS);
    prog[n++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    return n;
}

/* Where a select program takes its key from. */
typedef enum {
    KEY_FROM_CPU,       /* bpf_get_smp_processor_id() */
    KEY_FROM_HASH       /* ctx->hash, the kernel's hash of the 4-tuple */
} select_key_e;

/* key = source % buckets; sk_select_reuseport(ctx, map, &key, 0); SK_PASS.
 * The helper's result is ignored: on failure (an empty slot) the kernel's
 * hash chooses among the whole group. */
static int select_program_load(int map_fd, int buckets, int migrate,
                               select_key_e source, const char *name,
                               int *err)
{
    struct bpf_insn prog[13];
    int n = 0;

    if (buckets < 1) {
        *err = EINVAL;
        return -1;
    }
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0);
    if (source == KEY_FROM_CPU) {
        prog[n++] = insn(BPF_JMP | BPF_CALL, 0, 0, 0,
                         ABI_FUNC_GET_SMP_PROCESSOR_ID);
    }
    else {
        prog[n++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_0, BPF_REG_6,
                         ABI_SK_REUSEPORT_MD_HASH, 0);
    }
    prog[n++] = insn(BPF_ALU | BPF_MOD | BPF_K, BPF_REG_0, 0, 0, buckets);
    /* the key on the stack at r10 - 4 */
    prog[n++] = insn(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, BPF_REG_0, -4, 0);
    n = emit_select(prog, n, map_fd);
    return load_program(prog, n, migrate ? ABI_SK_REUSEPORT_SELECT_OR_MIGRATE
                                         : 0, name, err);
}

int reuseport_bpf_cpu_load(int map_fd, int buckets, int migrate, int *err)
{
    return select_program_load(map_fd, buckets, migrate, KEY_FROM_CPU,
                               CPU_PROGRAM_NAME, err);
}

int reuseport_bpf_hash_load(int map_fd, int buckets, int migrate, int *err)
{
    return select_program_load(map_fd, buckets, migrate, KEY_FROM_HASH,
                               HASH_PROGRAM_NAME, err);
}

/* Emits, for the i-th bucket from the hash's (r7), key = (r7 + i) mod
 * buckets on the stack at r10 - 4 and r0 = &idle[key] or NULL
 * (LOAD_LOOKUP slots). */
static int emit_idle_lookup(struct bpf_insn *prog, int n, int i, int buckets,
                            int idle_map)
{
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_8, BPF_REG_7, 0, 0);
    prog[n++] = insn(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_8, 0, 0, i);
    prog[n++] = insn(BPF_JMP | BPF_JLT | BPF_K, BPF_REG_8, 0, 1, buckets);
    prog[n++] = insn(BPF_ALU64 | BPF_SUB | BPF_K, BPF_REG_8, 0, 0, buckets);
    prog[n++] = insn(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, BPF_REG_8, -4, 0);
    n = emit_map(prog, n, BPF_REG_1, idle_map);
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0);
    prog[n++] = insn(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -4);
    prog[n++] = insn(BPF_JMP | BPF_CALL, 0, 0, 0, ABI_FUNC_MAP_LOOKUP_ELEM);
    return n;
}

/* Emits the second pass's weighing of bucket b (LOAD_WEIGH slots): its
 * idle units seen, 0 without an entry, onto the stack at WEIGHT_AT(b) and
 * added to r9 (32-bit, as the hash is taken mod it). */
static int emit_weigh(struct bpf_insn *prog, int n, int b, int idle_map)
{
    prog[n++] = insn(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, -4, b);
    n = emit_map(prog, n, BPF_REG_1, idle_map);
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0);
    prog[n++] = insn(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -4);
    prog[n++] = insn(BPF_JMP | BPF_CALL, 0, 0, 0, ABI_FUNC_MAP_LOOKUP_ELEM);
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 0);
    prog[n++] = insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_0, 0, 1, 0);
    prog[n++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_1, BPF_REG_0,
                     IDLE_SEEN, 0);
    prog[n++] = insn(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, BPF_REG_1,
                     WEIGHT_AT(b), 0);
    prog[n++] = insn(BPF_ALU | BPF_ADD | BPF_X, BPF_REG_9, BPF_REG_1, 0, 0);
    return n;
}

int reuseport_bpf_load_load(int sock_map, int idle_map, int buckets,
                            int migrate, int *err)
{
    struct bpf_insn prog[LOAD_HEAD + (LOAD_TAKE + LOAD_WEIGH + LOAD_PICK)
                                     * STEERING_MAX_LOAD_BUCKETS
                         + LOAD_SECOND_PASS + LOAD_TAIL];
    int n = 0, i, hash_at, select_at;

    if (buckets < 1 || buckets > STEERING_MAX_LOAD_BUCKETS) {
        *err = EINVAL;
        return -1;
    }
    hash_at = LOAD_HEAD + (LOAD_TAKE + LOAD_WEIGH + LOAD_PICK) * buckets
              + LOAD_SECOND_PASS;
    select_at = hash_at + 1;
    /* r7 = ctx->hash % buckets: the hash's own choice comes first */
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0);
    prog[n++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_7, BPF_REG_6,
                     ABI_SK_REUSEPORT_MD_HASH, 0);
    prog[n++] = insn(BPF_ALU | BPF_MOD | BPF_K, BPF_REG_7, 0, 0, buckets);
    /* First pass: a bucket with an idle unit not yet taken; this
     * connection takes one (atomic, so two CPUs may both take the last:
     * a count below 0 reads as none). A burst between two censuses then
     * spreads over the idle children instead of all going to the first
     * bucket that had one. */
    for (i = 0; i < buckets; i++) {
        n = emit_idle_lookup(prog, n, i, buckets, idle_map);
        prog[n++] = insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_0, 0, 6, 0);
        prog[n++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_1, BPF_REG_0,
                         IDLE_UNTAKEN, 0);
        prog[n++] = insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_1, 0, 4, 0);
        prog[n++] = insn(BPF_JMP | BPF_JGT | BPF_K, BPF_REG_1, 0, 3,
                         0x7fffffff);
        prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, -1);
        prog[n++] = insn(BPF_STX | BPF_XADD | BPF_W, BPF_REG_0, BPF_REG_1,
                         IDLE_UNTAKEN, 0);
        prog[n] = insn(BPF_JMP | BPF_JA, 0, 0, select_at - (n + 1), 0);
        n++;
    }
    /* Second pass, every unit taken: a bucket the census saw idle, in
     * proportion to the idle units it saw. Its children are the likeliest
     * to be free again (a unit comes back only with the next census); the
     * hash would send the connection to buckets whose children may all
     * hold connections, and an even split among the buckets seen idle
     * sent a bucket a restart had just added, with its first children,
     * as much as one with hundreds. r9 = the sum of the weights; pick
     * ctx->hash mod r9 along them. */
    prog[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_9, 0, 0, 0);
    for (i = 0; i < buckets; i++) {
        n = emit_weigh(prog, n, i, idle_map);
    }
    prog[n] = insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_9, 0,
                   hash_at - (n + 1), 0);
    n++;
    prog[n++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_1, BPF_REG_6,
                     ABI_SK_REUSEPORT_MD_HASH, 0);
    /* 32-bit: the 32-bit JITs take no 64-bit division, and the counts
     * are far below 2^32 */
    prog[n++] = insn(BPF_ALU | BPF_MOD | BPF_X, BPF_REG_1, BPF_REG_9, 0, 0);
    for (i = 0; i < buckets; i++) {
        prog[n++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_10,
                         WEIGHT_AT(i), 0);
        prog[n++] = insn(BPF_JMP | BPF_JGE | BPF_X, BPF_REG_1, BPF_REG_2, 2,
                         0);
        prog[n++] = insn(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, -4, i);
        prog[n] = insn(BPF_JMP | BPF_JA, 0, 0, select_at - (n + 1), 0);
        n++;
        prog[n++] = insn(BPF_ALU64 | BPF_SUB | BPF_X, BPF_REG_1, BPF_REG_2, 0,
                         0);
    }
    /* no bucket has an idle child: the hash's bucket, from the map (the
     * kernel's own hash would also pick sockets left out of the plan) */
    prog[n++] = insn(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, BPF_REG_7, -4, 0);
    /* select: sk_select_reuseport(ctx, sock_map, &key, 0), then SK_PASS */
    n = emit_select(prog, n, sock_map);
    return load_program(prog, n, migrate ? ABI_SK_REUSEPORT_SELECT_OR_MIGRATE
                                         : 0, LOAD_PROGRAM_NAME, err);
}

int reuseport_bpf_idle_map_create(int entries, int *err)
{
    return create_map(ABI_MAP_TYPE_ARRAY, 2 * sizeof(unsigned int), entries,
                      IDLE_MAP_NAME, err);
}

int reuseport_bpf_idle_set(int map_fd, int index, unsigned int untaken,
                           unsigned int seen)
{
    unsigned int entry[2];

    entry[IDLE_UNTAKEN / sizeof(unsigned int)] = untaken;
    entry[IDLE_SEEN / sizeof(unsigned int)] = seen;
    return update_elem(map_fd, index, entry);
}

int reuseport_bpf_sockarray_create(int entries, int *err)
{
    return create_map(ABI_MAP_TYPE_REUSEPORT_SOCKARRAY,
                      sizeof(unsigned long long), entries, MAP_NAME, err);
}

int reuseport_bpf_sockarray_set(int map_fd, int index, int sock_fd)
{
    unsigned long long value = (unsigned long long)sock_fd;

    return update_elem(map_fd, index, &value);
}

int reuseport_bpf_sockarray_holds(int map_fd, int index, int sock_fd,
                                  int *holds)
{
    unsigned long long in_slot = 0, cookie = 0;
    unsigned int key = (unsigned int)index;
    socklen_t len = sizeof(cookie);
    union bpf_attr attr;

    *holds = 0;
    if (getsockopt(sock_fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) < 0) {
        return errno;
    }
    memset(&attr, 0, sizeof(attr));
    attr.map_fd = map_fd;
    attr.key = (unsigned long)&key;
    attr.value = (unsigned long)&in_slot;
    if (sys_bpf(BPF_MAP_LOOKUP_ELEM, &attr) < 0) {
        return errno == ENOENT ? 0 : errno;
    }
    *holds = in_slot == cookie;
    return 0;
}

void reuseport_bpf_sockarray_clear(int map_fd, int entries)
{
    union bpf_attr attr;
    unsigned int key;

    /* ENOENT for a slot already empty (its socket closed) is fine. */
    for (key = 0; key < (unsigned int)entries; key++) {
        memset(&attr, 0, sizeof(attr));
        attr.map_fd = map_fd;
        attr.key = (unsigned long)&key;
        (void)sys_bpf(BPF_MAP_DELETE_ELEM, &attr);
    }
}

int reuseport_bpf_attach(int sock_fd, int prog_fd)
{
    if (setsockopt(sock_fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, &prog_fd,
                   sizeof(prog_fd)) < 0) {
        return errno;
    }
    return 0;
}

/* What the kernel tells of the program or map fd into info (size bytes
 * of the struct of its kind). 0, or an errno. */
static int object_info(int fd, void *info, unsigned int size)
{
    union bpf_attr attr;

    memset(info, 0, size);
    memset(&attr, 0, sizeof(attr));
    attr.info.bpf_fd = fd;
    attr.info.info_len = size;
    attr.info.info = (unsigned long)info;
    return sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) < 0 ? errno : 0;
}

unsigned int reuseport_bpf_prog_id(int prog_fd)
{
    struct bpf_prog_info info;

    return object_info(prog_fd, &info, sizeof(info)) == 0 ? info.id : 0;
}

int reuseport_bpf_map_is_bucketed(int fd, int *err)
{
    struct bpf_map_info info;
    char path[32], link[32];
    ssize_t len;

    *err = 0;
    /* Only a map's info has the map's layout; any other kind of
     * descriptor is none of bucketed's maps. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    len = readlink(path, link, sizeof(link) - 1);
    if (len < 0) {
        return 0;
    }
    link[len] = '\0';
    if (strcmp(link, "anon_inode:bpf-map") != 0) {
        return 0;
    }
    *err = object_info(fd, &info, sizeof(info));
    return *err == 0 && (strcmp(info.name, MAP_NAME) == 0
                         || strcmp(info.name, IDLE_MAP_NAME) == 0);
}

#else /* !HAVE_REUSEPORT_BPF */

int reuseport_bpf_built(void)
{
    return 0;
}

int reuseport_bpf_migrate_load(int *err)
{
    *err = ENOSYS;
    return -1;
}

int reuseport_bpf_cpu_load(int map_fd, int buckets, int migrate, int *err)
{
    (void)map_fd;
    (void)buckets;
    (void)migrate;
    *err = ENOSYS;
    return -1;
}

int reuseport_bpf_hash_load(int map_fd, int buckets, int migrate, int *err)
{
    return reuseport_bpf_cpu_load(map_fd, buckets, migrate, err);
}

int reuseport_bpf_sockarray_create(int entries, int *err)
{
    (void)entries;
    *err = ENOSYS;
    return -1;
}

int reuseport_bpf_load_load(int sock_map, int idle_map, int buckets,
                            int migrate, int *err)
{
    (void)sock_map;
    (void)idle_map;
    (void)buckets;
    (void)migrate;
    *err = ENOSYS;
    return -1;
}

int reuseport_bpf_idle_map_create(int entries, int *err)
{
    (void)entries;
    *err = ENOSYS;
    return -1;
}

int reuseport_bpf_idle_set(int map_fd, int index, unsigned int untaken,
                           unsigned int seen)
{
    (void)map_fd;
    (void)index;
    (void)untaken;
    (void)seen;
    return ENOSYS;
}

int reuseport_bpf_sockarray_set(int map_fd, int index, int sock_fd)
{
    (void)map_fd;
    (void)index;
    (void)sock_fd;
    return ENOSYS;
}

int reuseport_bpf_sockarray_holds(int map_fd, int index, int sock_fd,
                                  int *holds)
{
    (void)map_fd;
    (void)index;
    (void)sock_fd;
    *holds = 0;
    return ENOSYS;
}

void reuseport_bpf_sockarray_clear(int map_fd, int entries)
{
    (void)map_fd;
    (void)entries;
}

int reuseport_bpf_attach(int sock_fd, int prog_fd)
{
    (void)sock_fd;
    (void)prog_fd;
    return ENOSYS;
}

unsigned int reuseport_bpf_prog_id(int prog_fd)
{
    (void)prog_fd;
    return 0;
}

int reuseport_bpf_map_is_bucketed(int fd, int *err)
{
    (void)fd;
    *err = 0;
    return 0;
}

#endif /* HAVE_REUSEPORT_BPF */
