# SPDX-License-Identifier: Apache-2.0
"""Debian cloud kernels, fetched with apt through a private sources list,
state and cache directory (the machine's own apt setup is only read, for
its Debian mirror, never changed)."""
import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
META_PACKAGE = "linux-image-cloud-amd64"
APT_TIMEOUT = 300          # seconds, per apt command


@dataclass
class Kernel:
    name: str              # what the matrix calls it: "5.10"
    suite: str             # the Debian suite that has it


# Oldest first; each suite's newest cloud kernel.
KERNELS = [
    Kernel("5.10", "bullseye"),
    Kernel("6.1", "bookworm"),
    Kernel("6.12", "trixie"),
    Kernel("newest", "sid"),
]


class FetchError(Exception):
    pass


def debian_mirror(sources_dirs=("/etc/apt/sources.list.d",),
                  sources_list="/etc/apt/sources.list"):
    """The machine's Debian mirror (a URI ending in /debian), from its apt
    sources; BUCKETED_DEBIAN_MIRROR overrides it."""
    if os.environ.get("BUCKETED_DEBIAN_MIRROR"):
        return os.environ["BUCKETED_DEBIAN_MIRROR"].rstrip("/")
    files = [sources_list]
    for d in sources_dirs:
        files += sorted(glob.glob(os.path.join(d, "*.sources")))
        files += sorted(glob.glob(os.path.join(d, "*.list")))
    for path in files:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        for uri in re.findall(r"(?:^URIs:|^deb(?:\s+\[[^]]*\])?)\s+(\S+)",
                              text, re.M):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    raise FetchError("no Debian mirror (a URI ending in /debian) in the "
                     "machine's apt sources: set BUCKETED_DEBIAN_MIRROR")


class PrivateApt:
    """apt-get/apt-cache for one suite, with every file apt writes under
    `root`."""

    def __init__(self, root, suite, mirror):
        self.root = root
        self.lists = os.path.join(root, "lists")
        self.cache = os.path.join(root, "cache")
        self.sources = os.path.join(root, "sources.list")
        for d in (os.path.join(self.lists, "partial"),
                  os.path.join(self.cache, "archives", "partial")):
            os.makedirs(d, exist_ok=True)
        with open(self.sources, "w") as f:
            f.write(f"deb [signed-by={KEYRING}] {mirror} {suite} main\n")

    def options(self):
        opts = {
            "Dir::Etc::sourcelist": self.sources,
            "Dir::Etc::sourceparts": "-",
            "Dir::State::Lists": self.lists,
            "Dir::Cache": self.cache,
            "Debug::NoLocking": "1",
            "APT::Architectures": "amd64",
            "APT::Sandbox::User": "root",
            "Acquire::Languages": "none",
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled": "false",
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled": "false",
            "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled":
                "false",
            "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled": "false",
            "Acquire::Retries": "2",
            "Acquire::http::Timeout": "30",
        }
        return [arg for k, v in opts.items() for arg in ("-o", f"{k}={v}")]

    def run(self, tool, *args, cwd=None):
        cmd = [tool, *self.options(), *args]
        try:
            done = subprocess.run(cmd, cwd=cwd, capture_output=True,
                                  text=True, timeout=APT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise FetchError(f"{tool} {' '.join(args)}: no answer in "
                             f"{APT_TIMEOUT} s") from None
        if done.returncode != 0:
            raise FetchError(f"{tool} {' '.join(args)} failed: "
                             f"{done.stderr.strip()[-500:]}")
        return done.stdout


def image_package(depends_output):
    """The linux-image-VERSION-cloud-amd64 package the meta package
    depends on, from `apt-cache depends` output."""
    m = re.search(r"Depends:\s+(linux-image-\S+-cloud-amd64)\b",
                  depends_output)
    if m is None:
        raise FetchError(f"{META_PACKAGE} depends on no cloud image: "
                         f"{depends_output.strip()[:300]}")
    return m.group(1)


def binary_packages(depends_output):
    """The linux-binary-* packages an image depends on: newer Debian
    kernels (sid, 2026) keep vmlinuz there rather than in linux-image."""
    return re.findall(r"Depends:\s+(linux-binary-\S+)", depends_output)


def vmlinuz_member(listing):
    """Where a kernel package keeps vmlinuz, from `dpkg-deb -c` output:
    ./boot/vmlinuz-RELEASE, or ./usr/lib/modules/RELEASE/vmlinuz."""
    m = re.search(r"(\./(?:boot/vmlinuz-[^/\s]+|usr/lib/modules/[^/\s]+/"
                  r"vmlinuz))$", listing, re.M)
    return m.group(1) if m else None


def _extract(deb, member, target):
    """Writes one member of a .deb to the file `target`."""
    with open(target + ".part", "wb") as out:
        done = subprocess.run(
            f"dpkg-deb --fsys-tarfile '{deb}' | tar -x -O '{member}'",
            shell=True, stdout=out, stderr=subprocess.PIPE,
            timeout=APT_TIMEOUT)
    if done.returncode != 0:
        raise FetchError(f"extracting {member} from {deb}: "
                         f"{done.stderr.decode(errors='replace')}")
    os.rename(target + ".part", target)


def fetch_kernel(kernel, work_dir, mirror, log=print):
    """Path of the vmlinuz of the suite's newest cloud kernel, downloaded
    into work_dir/<suite>/ (reused when that package was fetched before;
    the cached one when the archive cannot be reached)."""
    root = os.path.join(work_dir, kernel.suite)
    apt = PrivateApt(os.path.join(root, "apt"), kernel.suite, mirror)
    log(f"{kernel.name}: apt-get update ({kernel.suite})")
    try:
        apt.run("apt-get", "update")
    except FetchError as e:
        cached = sorted(glob.glob(os.path.join(root, "vmlinuz-*")))
        if not cached:
            raise
        log(f"{kernel.name}: {e}; using the cached {cached[-1]}")
        return cached[-1]
    package = image_package(apt.run("apt-cache", "depends", META_PACKAGE))
    vmlinuz = os.path.join(root, "vmlinuz-" + package[len("linux-image-"):])
    if os.path.exists(vmlinuz):
        log(f"{kernel.name}: {package} (cached)")
        return vmlinuz
    packages = [package] + binary_packages(
        apt.run("apt-cache", "depends", package))
    log(f"{kernel.name}: downloading {' '.join(packages)}")
    downloads = os.path.join(root, "debs")
    shutil.rmtree(downloads, ignore_errors=True)
    os.makedirs(downloads)
    apt.run("apt-get", "download", *packages, cwd=downloads)
    for deb in sorted(glob.glob(os.path.join(downloads, "*.deb"))):
        listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True,
                                 text=True, timeout=APT_TIMEOUT).stdout
        member = vmlinuz_member(listing)
        if member:
            _extract(deb, member, vmlinuz)
            break
    shutil.rmtree(downloads, ignore_errors=True)
    if not os.path.exists(vmlinuz):
        raise FetchError(f"no vmlinuz in {', '.join(packages)}")
    return vmlinuz
