#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The main job: install dependencies, build bucketed, start Debian's httpd with it on a
# loopback port, show it serving and its buckets, then a short side-by-side benchmark
# against stock prefork, stock event and nginx. Stops everything it started.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
scripts/deps.sh
scripts/build.sh >/dev/null

root=$(mktemp -d /tmp/bucketed-demo.XXXXXX)
chmod 755 "$root"
pidfile="$root/run/httpd.pid"
stop_httpd() {
    if [ -s "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill -TERM "$pid" 2>/dev/null || true
        n=0
        while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$root"
}
trap stop_httpd EXIT INT TERM

port=$(PYTHONPATH=bench /usr/bin/python3 -c 'from bucketbench.net import free_ports; print(free_ports(1)[0])')
mkdir -p "$root/htdocs" "$root/logs" "$root/run"
echo "hello from bucketed" > "$root/htdocs/index.html"
mods=/usr/lib/apache2/modules
cat > "$root/httpd.conf" <<CONF
ServerRoot $root
ServerName localhost
PidFile $pidfile
DefaultRuntimeDir $root/run
ErrorLog $root/logs/error.log
LogLevel info
User www-data
Group www-data
LoadModule mpm_bucketed_module $top/mod_mpm_bucketed.so
LoadModule bucketed_status_module $top/mod_bucketed_status.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule mime_module $mods/mod_mime.so
LoadModule dir_module $mods/mod_dir.so
TypesConfig /etc/mime.types
Listen 127.0.0.1:$port
DocumentRoot $root/htdocs
BucketCount 4
<Location /bucketed-status>
    SetHandler bucketed-status
</Location>
CONF

httpd="env -i PATH=/usr/sbin:/usr/bin:/bin /usr/sbin/apache2 -f $root/httpd.conf"
echo "== $($httpd -V | grep 'Server MPM')"
$httpd -k start
n=0
until curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1; do
    n=$((n + 1)); [ $n -lt 50 ] || { tail "$root/logs/error.log"; exit 1; }; sleep 0.1
done
echo "== GET http://127.0.0.1:$port/"
curl -s -i "http://127.0.0.1:$port/"
echo "== start-up log"
grep -E 'bucketed: (kernel|strategy)' "$root/logs/error.log" | tail -2
echo "== listening sockets on port $port (one per bucket)"
ss -ltn "sport = :$port"
echo "== 2 s of load with Connection: close (wrk, 50 connections), then the buckets"
wrk -t2 -c50 -d2s -H 'Connection: close' "http://127.0.0.1:$port/" | grep -E 'Requests/sec|requests in'
curl -s "http://127.0.0.1:$port/bucketed-status"
stop_httpd
trap - EXIT INT TERM

echo "== how it compares (bench/run --quick; full run: bench/run)"
exec bench/run --quick
