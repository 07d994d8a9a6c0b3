"""The no-reuseport LD_PRELOAD shim: the built one, or one compiled now."""

import os
import shutil
import subprocess

SHIM_NAME = "noreuseport.so"
SHIM_SOURCE = "noreuseport.c"


class ShimError(Exception):
    pass


def ensure_shim(build_dir, source_dir, scratch_dir):
    """Path of noreuseport.so: <build_dir>/bench/ as `make` leaves it, else
    compiled from <source_dir>/bench/noreuseport.c into scratch_dir."""
    built = os.path.join(build_dir, "bench", SHIM_NAME)
    if os.path.exists(built):
        return built
    source = os.path.join(source_dir, "bench", SHIM_SOURCE)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ShimError(f"{built} is not built and no C compiler is on PATH "
                        f"to build it: run make, or install gcc")
    target = os.path.join(scratch_dir, SHIM_NAME)
    result = subprocess.run(
        [compiler, "-O2", "-fPIC", "-shared", "-o", target, source, "-ldl"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ShimError(f"compiling {source} failed:\n{result.stderr}")
    return target
