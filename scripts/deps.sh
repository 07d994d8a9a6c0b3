#!/bin/sh
# Installs what building, running, testing and benchmarking bucketed need on Debian 12.
set -eu
packages="apache2 apache2-dev libapr1-dev libaprutil1-dev libcmocka-dev libpcre2-dev
  gcc make autoconf automake libtool pkg-config curl iproute2 procps dpkg-dev
  wrk nginx python3 python3-pytest python3-matplotlib valgrind nghttp2-client"
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
    apt-get install -y -qq --no-install-recommends $missing
fi
# Debian starts the stock services on install; bucketed's scripts use private configs.
for svc in apache2 nginx; do
    if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
done
