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
