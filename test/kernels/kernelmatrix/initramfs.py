# SPDX-License-Identifier: Apache-2.0
"""The guest's initramfs: a newc cpio holding busybox (static), this
machine's apache2 with the libraries ldd names, the built bucketed modules
and shim, kprobe and kload (built static here), and guest/init.sh as /init."""
import os
import re
import shutil
import subprocess

GUEST_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "guest")
APACHE_MODULES = "/usr/lib/apache2/modules"
CFLAGS = ["-std=gnu99", "-Wall", "-Wextra", "-Werror", "-O2"]
ETC = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\n"
              "www-data:x:33:33:www-data:/var/www:/bin/false\n",
    "group": "root:x:0:\nwww-data:x:33:\n",
    "hosts": "127.0.0.1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


class ImageError(Exception):
    pass


def _run(cmd, **kwargs):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          **kwargs)
    if done.returncode != 0:
        raise ImageError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    return done.stdout


def compile_static(source, output, extra=()):
    """A static binary of one C file of guest/."""
    _run([shutil.which("cc") or "gcc", *CFLAGS, "-static", *extra, "-o",
          output, os.path.join(GUEST_DIR, source)])
    return output


def shared_libraries(ldd_output):
    """The files ldd says a binary loads (the vdso, which is no file,
    left out)."""
    libs = []
    for line in ldd_output.splitlines():
        m = re.search(r"=>\s+(/\S+)|^\s*(/\S+)\s+\(0x", line)
        if m:
            libs.append(m.group(1) or m.group(2))
        elif "=> not found" in line:
            raise ImageError(f"ldd: {line.strip()}")
    return libs


def is_static(path):
    done = subprocess.run(["ldd", path], capture_output=True, text=True,
                          timeout=60)
    return done.returncode != 0 or "statically linked" in done.stdout


class Staging:
    """A directory tree that becomes the initramfs."""

    def __init__(self, root):
        shutil.rmtree(root, ignore_errors=True)
        self.root = root
        for d in ("proc", "sys", "dev", "tmp", "root", "srv", "etc"):
            os.makedirs(os.path.join(root, d))

    def add(self, source, guest_path, mode=None):
        target = os.path.join(self.root, guest_path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)    # follows symlinks: the real file
        os.chmod(target, mode if mode is not None
                 else os.stat(source).st_mode & 0o777)

    def add_dynamic(self, source, guest_path):
        """A binary or module with every library ldd names for it."""
        self.add(source, guest_path)
        if not is_static(source):
            for lib in shared_libraries(_run(["ldd", source])):
                if not os.path.exists(os.path.join(self.root,
                                                   lib.lstrip("/"))):
                    self.add(lib, lib)

    def write(self, guest_path, text, mode=0o644):
        target = os.path.join(self.root, guest_path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write(text)
        os.chmod(target, mode)

    def cpio(self, output):
        files = _run(["find", ".", "-mindepth", "1"], cwd=self.root)
        listing = "\n".join(sorted(files.split())) + "\n"
        with open(output, "wb") as out:
            done = subprocess.run(["cpio", "-o", "-H", "newc", "-R", "0:0",
                                   "--quiet"], input=listing.encode(),
                                  stdout=out, stderr=subprocess.PIPE,
                                  cwd=self.root, timeout=300)
        if done.returncode != 0:
            raise ImageError(f"cpio failed: {done.stderr.decode()}")
        return output


def build_initramfs(output, scratch, build_dir, httpd_bin):
    """Writes the initramfs to `output`; `scratch` holds the staging tree
    and the static helpers."""
    needed = {
        "/opt/bucketed/mod_mpm_bucketed.so": "mod_mpm_bucketed.so",
        "/opt/bucketed/mod_bucketed_status.so": "mod_bucketed_status.so",
        "/opt/bucketed/noreuseport.so": "bench/noreuseport.so",
    }
    for rel in needed.values():
        if not os.path.exists(os.path.join(build_dir, rel)):
            raise ImageError(f"{os.path.join(build_dir, rel)} is not built: "
                             f"run scripts/build.sh (or make) first")
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(busybox) or not is_static(busybox):
        raise ImageError(f"{busybox} is missing or not static: install "
                         f"busybox-static")
    os.makedirs(scratch, exist_ok=True)
    kprobe = compile_static("kprobe.c", os.path.join(scratch, "kprobe"))
    kload = compile_static("kload.c", os.path.join(scratch, "kload"),
                           ["-pthread"])
    stage = Staging(os.path.join(scratch, "root"))
    stage.add(os.path.join(GUEST_DIR, "init.sh"), "/init", 0o755)
    stage.add(busybox, "/bin/busybox", 0o755)
    stage.add(kprobe, "/opt/ktest/kprobe", 0o755)
    stage.add(kload, "/usr/bin/kload", 0o755)
    stage.add_dynamic(httpd_bin, "/usr/sbin/apache2")
    stage.add_dynamic(os.path.join(APACHE_MODULES, "mod_authz_core.so"),
                      APACHE_MODULES + "/mod_authz_core.so")
    for guest_path, rel in needed.items():
        stage.add_dynamic(os.path.join(build_dir, rel), guest_path)
    for name, text in ETC.items():
        stage.write(f"/etc/{name}", text)
    return stage.cpio(output)
