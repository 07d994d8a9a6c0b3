#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The main job: install dependencies, build bucketed, start Debian's httpd with it on
# loopback once per child model (prefork and event, side by side), show each serving and
# its buckets, then a short benchmark against stock prefork, stock event and nginx, and
# its table. One line per step; what the steps print goes to a log, shown if one fails.
# Stops everything it started.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
work=$(mktemp -d /tmp/bucketed-demo.XXXXXX)
chmod 755 "$work"
log="$work/steps.log"
models="prefork event"

stop_servers() {
    for pidfile in "$work"/*/run/httpd.pid; do
        [ -s "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill -TERM "$pid" 2>/dev/null || true
        n=0
        while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}
finish() {
    status=$?
    stop_servers
    if [ $status -eq 0 ]; then rm -rf "$work"; fi
}
trap finish EXIT
trap 'exit 1' INT TERM

step() { printf '== %s\n' "$*"; }
# Runs a step with its output in the log; on failure shows the end of it.
quietly() {
    if ! "$@" >>"$log" 2>&1; then
        echo "failed: $*; the end of $log:"
        tail -n 30 "$log"
        exit 1
    fi
}

step "dependencies (Debian packages)"
quietly scripts/deps.sh
step "build (apxs, warnings as errors)"
quietly scripts/build.sh

ports=$(PYTHONPATH=bench /usr/bin/python3 -c \
    'from bucketbench.net import free_ports; print(*free_ports(2))')
mods=/usr/lib/apache2/modules
httpd_of() { echo "env -i PATH=/usr/sbin:/usr/bin:/bin /usr/sbin/apache2 -f $work/$1/httpd.conf"; }
set -- $ports
for model in $models; do
    port=$1
    shift
    root="$work/$model"
    mkdir -p "$root/htdocs" "$root/logs" "$root/run"
    echo "hello from bucketed, ChildModel $model" > "$root/htdocs/index.html"
    cat > "$root/httpd.conf" <<CONF
ServerRoot $root
ServerName localhost
PidFile $root/run/httpd.pid
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
ChildModel $model
<Location /bucketed-status>
    SetHandler bucketed-status
</Location>
CONF
    echo "$port" > "$root/port"
    step "ChildModel $model on 127.0.0.1:$port: what apache2 -t says of its plan"
    $(httpd_of "$model") -t 2>&1 | grep -v '^Syntax OK' | fold -s -w 92 | sed 's/^/   /'
    quietly $(httpd_of "$model") -k start
done

for model in $models; do
    port=$(cat "$work/$model/port")
    n=0
    until curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -lt 100 ] || { tail "$work/$model/logs/error.log"; exit 1; }
        sleep 0.1
    done
done

step "both serving: GET / on each, and the sockets each bucket listens on"
for model in $models; do
    port=$(cat "$work/$model/port")
    printf '   %-8s %s  %s  (%s listening sockets on port %s)\n' "$model" \
        "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" \
        "$(curl -s "http://127.0.0.1:$port/")" \
        "$(ss -Hltn "sport = :$port" | wc -l)" "$port"
done

step "2 s of load on each (wrk, 50 connections, Connection: close), then its buckets"
printf '   %-8s %10s  %s\n' "model" "req/s" "accepted per bucket (bucketed-status)"
for model in $models; do
    port=$(cat "$work/$model/port")
    rps=$(wrk -t2 -c50 -d2s -H 'Connection: close' "http://127.0.0.1:$port/" \
          | awk '/Requests\/sec/ {print $2}')
    per_bucket=$(curl -s "http://127.0.0.1:$port/bucketed-status" | awk '
        /^bucket=/ { for (i = 1; i <= NF; i++) if ($i ~ /^accepted=/) {
            sub(/^accepted=/, "", $i); printf "%s ", $i } }')
    printf '   %-8s %10s  %s\n' "$model" "$rps" "$per_bucket"
done
stop_servers

step "how it compares: bench/run --quick (about 3 minutes; full run: bench/run)"
quietly bench/run --quick --out "$work/bench"
awk '/^## W[0-9]/ {show = 1} /^Median p99/ {show = 0} show' "$work/bench/report.md"
echo "(the whole report, with p99 and CPU per request: bench/run --quick --out DIR;"
echo " one 2-core machine's quick run says little: see docs/benchmarks.md for the full runs)"
