# SPDX-License-Identifier: Apache-2.0
"""The kernel-matrix tool's plumbing on small fixtures: a stand-in qemu
that hangs is killed at the deadline and fails; one that dies before its
first check is booted once more; apt and ldd output is read right."""
import os
import stat
import sys
import time

import pytest

from bucketbench.procfs import alive

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kernelmatrix import fetch, initramfs, qemu, report  # noqa: E402

GOOD_REPORT = os.path.join(HERE, "fixtures", "report-5.10.txt")

# A stand-in for qemu-system-x86_64: finds the report port's file among
# its arguments (the second -serial file:PATH) and acts as told by
# FAKE_QEMU_MODE: "hang", "die" (no report, exit 1), "good" (the fixture
# report), or "die-then-good" (counted in FAKE_QEMU_COUNT).
FAKE_QEMU = """#!/bin/sh
report=
for arg in "$@"; do
    case "$arg" in file:*) report=${arg#file:} ;; esac
done
echo $$ >"$FAKE_QEMU_PIDFILE"
mode=$FAKE_QEMU_MODE
if [ "$mode" = die-then-good ]; then
    n=$(cat "$FAKE_QEMU_COUNT" 2>/dev/null || echo 0)
    echo $((n + 1)) >"$FAKE_QEMU_COUNT"
    if [ "$n" = 0 ]; then mode=die; else mode=good; fi
fi
case "$mode" in
    hang) exec sleep 600 ;;
    die) echo "[ 1.0] Kernel panic - not syncing: VFS" >&2; exit 1 ;;
    good) cp "$FAKE_QEMU_GOOD" "$report"; exit 0 ;;
esac
"""


@pytest.fixture
def fake_qemu(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "qemu-system-x86_64"
    script.write_text(FAKE_QEMU)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_QEMU_PIDFILE", str(tmp_path / "pid"))
    monkeypatch.setenv("FAKE_QEMU_COUNT", str(tmp_path / "count"))
    monkeypatch.setenv("FAKE_QEMU_GOOD", GOOD_REPORT)

    def set_mode(mode):
        monkeypatch.setenv("FAKE_QEMU_MODE", mode)
        return tmp_path
    return set_mode


def test_a_hanging_guest_is_killed_at_its_deadline_and_fails(fake_qemu):
    tmp = fake_qemu("hang")
    started = time.monotonic()
    run = qemu.boot("vmlinuz", "initrd", str(tmp / "out"), timeout=2)
    assert time.monotonic() - started < 30
    assert run.outcome == "timeout"
    pid = int((tmp / "pid").read_text())
    assert not alive(pid)
    assert report.judge("x", run).verdict == report.FAIL


def test_a_guest_dead_before_its_first_check_is_booted_again(fake_qemu):
    tmp = fake_qemu("die-then-good")
    run = qemu.boot_with_retry("vmlinuz", "initrd", str(tmp / "out"),
                               timeout=30, log=lambda m: None)
    assert run.attempts == 2
    assert (tmp / "count").read_text().strip() == "2"
    assert (tmp / "out" / "qemu-attempt1.txt").exists()
    result = report.judge("x", run)
    assert result.verdict == report.PASS
    assert "attempt 2" in result.cells["guest"].detail


def test_a_guest_that_always_dies_fails_after_one_retry(fake_qemu):
    tmp = fake_qemu("die")
    run = qemu.boot_with_retry("vmlinuz", "initrd", str(tmp / "out"),
                               timeout=30, log=lambda m: None)
    assert run.attempts == 2
    assert run.exit_code == 1
    assert report.judge("x", run).verdict == report.FAIL


def test_a_good_guest_boots_once(fake_qemu):
    tmp = fake_qemu("good")
    run = qemu.boot_with_retry("vmlinuz", "initrd", str(tmp / "out"),
                               timeout=30, log=lambda m: None)
    assert run.attempts == 1 and run.exit_code == 0
    assert report.judge("x", run).verdict == report.PASS


def test_qemu_gets_no_network_and_a_private_report_port():
    cmd = qemu.command("vmlinuz", "initrd", "/o/console", "/o/report")
    assert cmd[cmd.index("-nic") + 1] == "none"
    assert "-netdev" not in cmd
    serials = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-serial"]
    assert serials == ["file:/o/console", "file:/o/report"]
    assert "-no-reboot" in cmd


def test_image_package_is_read_from_apt_cache_depends():
    out = ("linux-image-cloud-amd64\n"
           "  Depends: linux-image-5.10.0-32-cloud-amd64\n")
    assert fetch.image_package(out) == "linux-image-5.10.0-32-cloud-amd64"
    with pytest.raises(fetch.FetchError):
        fetch.image_package("linux-image-cloud-amd64\n")


def test_the_mirror_comes_from_the_machines_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("BUCKETED_DEBIAN_MIRROR", raising=False)
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "other.sources").write_text(
        "Types: deb\nURIs: http://example.invalid/node\nSuites: x\n")
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian/\nSuites: bookworm\n")
    assert fetch.debian_mirror([str(d)], str(tmp_path / "none")) == \
        "http://mirror.invalid/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://old.invalid/debian bookworm main\n")
    assert fetch.debian_mirror([], str(tmp_path / "sources.list")) == \
        "http://old.invalid/debian"
    with pytest.raises(fetch.FetchError):
        fetch.debian_mirror([str(tmp_path / "empty")], str(tmp_path / "x"))
    monkeypatch.setenv("BUCKETED_DEBIAN_MIRROR", "http://set.invalid/debian/")
    assert fetch.debian_mirror([], "") == "http://set.invalid/debian"


def test_shared_libraries_are_read_from_ldd():
    out = ("\tlinux-vdso.so.1 (0x00007ffd)\n"
           "\tlibapr-1.so.0 => /lib/x86_64-linux-gnu/libapr-1.so.0 (0x7f)\n"
           "\t/lib64/ld-linux-x86-64.so.2 (0x00007f28)\n")
    assert initramfs.shared_libraries(out) == [
        "/lib/x86_64-linux-gnu/libapr-1.so.0", "/lib64/ld-linux-x86-64.so.2"]
    with pytest.raises(initramfs.ImageError):
        initramfs.shared_libraries("\tlibgone.so.1 => not found\n")


def test_binary_packages_hold_vmlinuz_on_newer_kernels():
    out = ("linux-image-7.2.13+deb14-cloud-amd64\n"
           "  Depends: linux-base-7.2.13+deb14-cloud-amd64\n"
           "  Depends: linux-binary-7.2.13+deb14-cloud-amd64\n"
           "  Depends: linux-modules-7.2.13+deb14-cloud-amd64\n")
    assert fetch.binary_packages(out) == [
        "linux-binary-7.2.13+deb14-cloud-amd64"]
    assert fetch.binary_packages("linux-image-5.10\n  Depends: kmod\n") == []


def test_vmlinuz_is_found_where_each_package_keeps_it():
    old = ("drwxr-xr-x root/root 0 2024-08-10 ./boot/\n"
           "-rw-r--r-- root/root 12141760 2024-08-10 "
           "./boot/vmlinuz-5.10.0-32-cloud-amd64\n")
    new = ("-rw-r--r-- root/root 14026688 2026-10-28 "
           "./usr/lib/modules/7.2.13+deb14-cloud-amd64/vmlinuz\n")
    assert fetch.vmlinuz_member(old) == "./boot/vmlinuz-5.10.0-32-cloud-amd64"
    assert fetch.vmlinuz_member(new) == \
        "./usr/lib/modules/7.2.13+deb14-cloud-amd64/vmlinuz"
    assert fetch.vmlinuz_member("./usr/share/doc/x/changelog.gz\n") is None
