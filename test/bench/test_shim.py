# SPDX-License-Identifier: Apache-2.0
"""The no-reuseport shim: SO_REUSEPORT fails as on kernels before 3.9,
every other socket option still works."""
import errno
import json
import subprocess
import sys

import pytest

from bucketbench.shim import ensure_shim

# Runs in a fresh interpreter so that LD_PRELOAD applies from its start.
PROBE = r"""
import json, socket
probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
result = {}
try:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    result["reuseport_errno"] = 0
except OSError as error:
    result["reuseport_errno"] = error.errno
for name in ("SO_REUSEADDR", "SO_KEEPALIVE"):
    option = getattr(socket, name)
    probe.setsockopt(socket.SOL_SOCKET, option, 1)
    result[name] = probe.getsockopt(socket.SOL_SOCKET, option)
probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
result["TCP_NODELAY"] = probe.getsockopt(socket.IPPROTO_TCP,
                                         socket.TCP_NODELAY)
print(json.dumps(result))
"""


def run_probe(preload):
    env = {"PATH": "/usr/bin:/bin"}
    if preload:
        env["LD_PRELOAD"] = preload
    done = subprocess.run([sys.executable, "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(done.stdout)


@pytest.fixture
def shim(build, top, tmp_path):
    return ensure_shim(build, top, str(tmp_path))


def test_shim_refuses_reuseport_with_enoprotoopt(shim):
    assert run_probe(shim)["reuseport_errno"] == errno.ENOPROTOOPT


def test_shim_passes_other_options_through(shim):
    result = run_probe(shim)
    assert result["SO_REUSEADDR"] == 1
    assert result["SO_KEEPALIVE"] == 1
    assert result["TCP_NODELAY"] == 1


def test_without_shim_reuseport_works():
    # The control: the refusal above comes from the shim, not the kernel.
    assert run_probe(None)["reuseport_errno"] == 0


# ---- emulated kernel floors (BUCKETED_SHIM_KERNEL)

# Each call the floors refuse, made through libc as programs make it; prints
# {call: errno} with 0 for success. Opens the sysctl read-only and attaches
# to a socket that is never bound: it changes nothing on the machine.
FLOOR_PROBE = r"""
import ctypes, json, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_BPF, BPF_MAP_CREATE, BPF_PROG_LOAD = 321, 0, 5
SK_REUSEPORT, REUSEPORT_SOCKARRAY = 21, 20
SELECT, SELECT_OR_MIGRATE = 39, 40
SO_ATTACH_REUSEPORT_CBPF, SO_ATTACH_REUSEPORT_EBPF = 51, 52
result = {}

def call(name, fn):
    try:
        fn()
        result[name] = 0
    except OSError as error:
        result[name] = error.errno

def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr.ljust(128, b"\0"), 128)
    fd = libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_long(cmd), buf,
                      ctypes.c_long(128))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "bpf")
    return fd

insns = ctypes.create_string_buffer(
    struct.pack("<BBhi", 0xb7, 0, 0, 1) + struct.pack("<BBhi", 0x95, 0, 0, 0))
license = ctypes.create_string_buffer(b"GPL")

def prog_load(attach_type):
    attr = struct.pack("<IIQQIIQII16sII", SK_REUSEPORT, 2,
                       ctypes.addressof(insns), ctypes.addressof(license),
                       0, 0, 0, 0, 0, b"", 0, attach_type)
    return bpf(BPF_PROG_LOAD, attr)

progs = []
call("ebpf_load", lambda: progs.append(prog_load(SELECT)))
call("migrate_load", lambda: progs.append(prog_load(SELECT_OR_MIGRATE)))
call("map_create", lambda: progs.append(bpf(
    BPF_MAP_CREATE, struct.pack("<IIII", REUSEPORT_SOCKARRAY, 4, 8, 1))))

sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
call("reuseport",
     lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1))
ret_zero = ctypes.create_string_buffer(struct.pack("<HBBI", 0x06, 0, 0, 0))
call("cbpf", lambda: sock.setsockopt(
    socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF,
    struct.pack("<H6xQ", 1, ctypes.addressof(ret_zero))))
call("ebpf_attach", lambda: sock.setsockopt(
    socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, progs[0] if progs else -1))
call("migrate_sysctl",
     lambda: open("/proc/sys/net/ipv4/tcp_migrate_req").close())
print(json.dumps(result))
"""

OK, NOPROTO, INVAL, NOENT, BADF = (0, errno.ENOPROTOOPT, errno.EINVAL,
                                   errno.ENOENT, errno.EBADF)
# floor: reuseport, cbpf, ebpf_attach, ebpf_load, map_create, migrate_load,
# migrate_sysctl. ebpf_attach below 4.19 has no program (fd -1): the
# kernel's EBADF shows the shim let it through.
FLOORS = {
    "3.8": (NOPROTO, NOPROTO, NOPROTO, INVAL, INVAL, INVAL, NOENT),
    "4.4": (OK, NOPROTO, NOPROTO, INVAL, INVAL, INVAL, NOENT),
    "4.18": (OK, OK, BADF, INVAL, INVAL, INVAL, NOENT),
    "5.13": (OK, OK, OK, OK, OK, INVAL, NOENT),
    "5.14": (OK, OK, OK, OK, OK, OK, OK),
}
FLOOR_CALLS = ("reuseport", "cbpf", "ebpf_attach", "ebpf_load", "map_create",
               "migrate_load", "migrate_sysctl")


def run_floor_probe(preload, floor):
    env = {"PATH": "/usr/bin:/bin"}
    if preload:
        env["LD_PRELOAD"] = preload
    if floor is not None:
        env["BUCKETED_SHIM_KERNEL"] = floor
    done = subprocess.run([sys.executable, "-c", FLOOR_PROBE], env=env,
                          capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(done.stdout), done.stderr


@pytest.fixture(scope="module")
def native_floor():
    """The control: what this machine's kernel does without the shim. The
    floors below are emulated only where the kernel itself allows it."""
    result, _ = run_floor_probe(None, None)
    if any(result[call] != 0 for call in FLOOR_CALLS if call != "ebpf_attach"):
        pytest.skip(f"this kernel or user cannot do every call: {result}")
    return result


@pytest.mark.parametrize("floor", sorted(FLOORS))
def test_shim_floor_refuses_what_that_kernel_lacked(shim, native_floor, floor):
    result, _ = run_floor_probe(shim, floor)
    assert {c: result[c] for c in FLOOR_CALLS} == dict(zip(FLOOR_CALLS,
                                                           FLOORS[floor]))


def test_shim_without_a_floor_refuses_only_reuseport(shim, native_floor):
    # As the shim always did: everything but SO_REUSEPORT goes through. The
    # attaches reach the kernel, which refuses them (EINVAL) for a socket
    # without SO_REUSEPORT.
    result, _ = run_floor_probe(shim, None)
    assert [result[c] for c in FLOOR_CALLS] == [NOPROTO, INVAL, INVAL, OK, OK,
                                                OK, OK]


def test_shim_says_when_the_floor_is_unreadable(shim, native_floor):
    result, stderr = run_floor_probe(shim, "4.x")
    assert "BUCKETED_SHIM_KERNEL=4.x is not MAJOR.MINOR" in stderr
    assert [result[c] for c in FLOOR_CALLS] == list(FLOORS["3.8"])
