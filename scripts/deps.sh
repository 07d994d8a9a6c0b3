#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs what building, running, testing and benchmarking bucketed need on Debian 12.
set -eu
packages="apache2 apache2-dev libapr1-dev libaprutil1-dev libcmocka-dev libpcre2-dev
  gcc make autoconf automake libtool pkg-config curl iproute2 procps dpkg-dev
  wrk nginx python3 python3-pytest python3-matplotlib python3-h2 valgrind nghttp2-client git
  qemu-system-x86 busybox-static cpio util-linux libapache2-mod-php8.2 prometheus
  bpftool build-essential debhelper lintian systemd-container debootstrap gdb linux-perf
  php8.2-fpm openssl strace"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing
fi
# test/integration/debian_scratch.py builds its configuration trees from these
# packages' own files (apt-get download PACKAGE=INSTALLED_VERSION): apt must know them.
for p in apache2 libapache2-mod-php8.2; do
    if ! apt-get download --print-uris "$p=$(dpkg-query -W -f='${Version}' "$p")" \
            >/dev/null 2>&1; then
        apt-get update -qq
        break
    fi
done
# Debian starts the stock services on install (and libapache2-mod-php8.2 switches the
# live apache2 to prefork and enables php8.2); bucketed's scripts use private configs
# (the observability tests run their own Prometheus on a loopback port).
for svc in apache2 nginx prometheus php8.2-fpm; do
    if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
done
