# SPDX-License-Identifier: Apache-2.0
"""The no-reuseport LD_PRELOAD shim: the built one, or one compiled now."""

import os
import shutil
import subprocess

SHIM_NAME = "noreuseport.so"
SHIM_SOURCE = "noreuseport.c"


class ShimError(Exception):
    pass


def ensure_shim(build_dir, source_dir, scratch_dir):
    """Path of a private copy of noreuseport.so in scratch_dir: copied from
    <build_dir>/bench/ where `make` leaves it (a copy, so that a rebuild
    cannot change it under running servers), else compiled from
    <source_dir>/bench/noreuseport.c."""
    target = os.path.join(scratch_dir, SHIM_NAME)
    built = os.path.join(build_dir, "bench", SHIM_NAME)
    if os.path.exists(built):
        shutil.copy2(built, target)
        return target
    source = os.path.join(source_dir, "bench", SHIM_SOURCE)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ShimError(f"{built} is not built and no C compiler is on PATH "
                        f"to build it: run make, or install gcc")
    result = subprocess.run(
        [compiler, "-O2", "-fPIC", "-shared", "-o", target, source, "-ldl"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ShimError(f"compiling {source} failed:\n{result.stderr}")
    return target
