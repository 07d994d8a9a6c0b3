#!/bin/busybox sh
# /init of a kernel-matrix guest (PID 1 in an initramfs built by
# test/kernels/run). Runs Debian's apache2 with the bucketed MPM on the
# guest's own loopback and reports to the second serial port (/dev/ttyS1),
# one line each:
#   KTEST BEGIN|END ...              start and normal end of the report
#   FEATURE name yes|no detail       kprobe's behavioural findings
#   PROBE <text>                     bucketed's start-up probe log line
#   CHECK name PASS|FAIL|SKIP detail one check of bucketed
# The host judges the report; a guest that stops early has no END line.
# Every wait below is bounded; the host also bounds the whole guest.

/bin/busybox mkdir -p /proc /sys /dev /tmp /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
exec 3>/dev/ttyS1

MODULES=/opt/bucketed
APACHE_MODULES=/usr/lib/apache2/modules
ROOT=/srv/httpd
PORT1=8080
PORT2=8081
MARKER="bucketed kernel matrix"
REQUESTS=200
THREADS=4

report() { echo "$*" >&3; }
check() { name=$1 status=$2; shift 2; report "CHECK $name $status $*"; }
finish() {
    report "KTEST END"
    sync
    reboot -f
}

# wait_until SECONDS COMMAND...: polls COMMAND every 0.1 s.
wait_until() {
    tries=$(($1 * 10)); shift
    while [ "$tries" -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    return 1
}

report "KTEST BEGIN kernel=$(uname -r) cpus=$(nproc)"
ip link set lo up

/opt/ktest/kprobe >/tmp/features 2>/tmp/kprobe.err
rc=$?
while read -r line; do report "$line"; done </tmp/features
[ "$rc" -eq 0 ] || check kprobe FAIL "exit $rc: $(head -c 200 /tmp/kprobe.err)"
feature_yes() { grep -q "^FEATURE $1 yes" /tmp/features; }

mkdir -p $ROOT/htdocs $ROOT/logs $ROOT/run
chmod 755 $ROOT $ROOT/htdocs
echo "$MARKER" >$ROOT/htdocs/index.html

# write_config NAME DIRECTIVES...: a private config for one server.
write_config() {
    conf=$ROOT/$1.conf; shift
    {
        echo "ServerRoot $ROOT"
        echo "ServerName localhost"
        echo "PidFile $ROOT/run/httpd.pid"
        echo "DefaultRuntimeDir $ROOT/run"
        echo "ErrorLog $ROOT/logs/error.log"
        echo "LogLevel info"
        echo "User www-data"
        echo "Group www-data"
        echo "LoadModule mpm_bucketed_module $MODULES/mod_mpm_bucketed.so"
        echo "LoadModule bucketed_status_module $MODULES/mod_bucketed_status.so"
        echo "LoadModule authz_core_module $APACHE_MODULES/mod_authz_core.so"
        echo "DocumentRoot $ROOT/htdocs"
        echo "<Location /bucketed-status>"
        echo "    SetHandler bucketed-status"
        echo "</Location>"
        echo "StartServers 4"
        echo "MinSpareServers 2"
        echo "MaxSpareServers 8"
        for line in "$@"; do echo "$line"; done
    } >"$conf"
}

status() { kload get $PORT1 /bucketed-status >/tmp/status 2>/dev/null; }
status_value() { sed -n "s/^$1=//p" /tmp/status; }
# The accepted counts of the buckets, space separated.
accepted() { sed -n 's/^bucket=.* accepted=\([0-9]*\).*$/\1/p' /tmp/status | tr '\n' ' '; }
accepted_sum() {
    sum=0
    for n in $(accepted); do sum=$((sum + n)); done
    echo $sum
}
every_bucket_served() {
    [ -n "$(accepted)" ] || return 1
    for n in $(accepted); do [ "$n" -gt 0 ] || return 1; done
}
generation_is() { status && [ "$(status_value generation)" = "$1" ]; }
served_at_least() { status && [ "$(accepted_sum)" -ge "$1" ]; }

# start_httpd CONF [PRELOAD]: starts the server, waits for its status page.
start_httpd() {
    rm -f $ROOT/run/httpd.pid
    : >$ROOT/logs/error.log
    env -i PATH=$PATH ${2:+LD_PRELOAD=$2} /usr/sbin/apache2 -f "$1" -k start \
        >/tmp/httpd.out 2>&1
    wait_until 60 status && HTTPD_PID=$(cat $ROOT/run/httpd.pid 2>/dev/null)
}

stop_httpd() {
    [ -n "$HTTPD_PID" ] || return 0
    kill -TERM "$HTTPD_PID"
    wait_until 60 sh -c "! kill -0 $HTTPD_PID 2>/dev/null" \
        || check stop FAIL "httpd $HTTPD_PID still runs 60 s after SIGTERM"
    HTTPD_PID=
}

listening_sockets() {
    hex=$(printf '%04X' "$1")
    awk -v port=":$hex" '$2 ~ port"$" && $4 == "0A"' /proc/net/tcp | wc -l
}

log_tail() { tail -n 3 $ROOT/logs/error.log /tmp/httpd.out 2>/dev/null | tr '\n' ' ' | head -c 300; }

# ---- bucketed with SO_REUSEPORT as the kernel has it
write_config reuseport "Listen 127.0.0.1:$PORT1" "BucketCount 2"
if ! start_httpd $ROOT/reuseport.conf; then
    check start FAIL "no status page within 60 s: $(log_tail)"
    finish
fi
check start PASS "httpd $HTTPD_PID serves its status page"

report "PROBE $(grep -o 'bucketed: kernel .*' $ROOT/logs/error.log | head -n 1)"

# bucketed's migration choice (its own trial) against kprobe's finding:
# both are Linux 5.14's migration, so they must agree.
migration=$(grep -o 'bucketed: migration: .*' $ROOT/logs/error.log | head -n 1 | head -c 200)
case "$migration" in
    *"migration: per-group eBPF"*) says=yes ;;
    *"migration: none"*|*"migration: drain"*) says=no ;;
    *) says= ;;
esac
if feature_yes migrate_req; then works=yes; else works=no; fi
if [ "$says" = "$works" ]; then
    check migration PASS "$migration; kprobe migrate_req: $works"
else
    check migration FAIL "${migration:-no migration line}; kprobe migrate_req: $works"
fi

strategy=$(status_value strategy)
if feature_yes reuseport; then want=reuseport; else want=listen; fi
if [ "$strategy" = "$want" ]; then
    check strategy PASS "$strategy ($(status_value reason))"
else
    check strategy FAIL "$strategy, expected $want ($(status_value reason))"
fi

buckets=$(status_value buckets)
sockets=$(listening_sockets $PORT1)
if [ "$sockets" = "$buckets" ] && [ "$buckets" -ge 1 ]; then
    check sockets PASS "$sockets listening sockets on :$PORT1 for $buckets buckets"
else
    check sockets FAIL "$sockets listening sockets on :$PORT1 for ${buckets:-?} buckets"
fi

result=$(kload run $PORT1 /index.html "$MARKER" $THREADS $REQUESTS 120)
status
if [ "$result" = "ok=$REQUESTS failed=0 first_error=none" ] && every_bucket_served; then
    check serving PASS "$REQUESTS requests, accepted per bucket: $(accepted)"
else
    check serving FAIL "$result; accepted per bucket: $(accepted)"
fi

# ---- graceful restart (SIGUSR1) under load: no request may fail
rm -f /tmp/stop
kload run $PORT1 /index.html "$MARKER" $THREADS 1000000 120 /tmp/stop \
    >/tmp/graceful.out 2>&1 &
load_pid=$!
generation=$(status_value generation)
next=$((generation + 1))
if ! wait_until 60 served_at_least 20; then
    detail="load did not start"
elif ! kill -USR1 "$HTTPD_PID"; then
    detail="kill -USR1 $HTTPD_PID failed"
elif ! wait_until 60 generation_is $next; then
    detail="generation $next never came"
elif ! wait_until 60 served_at_least 20; then
    detail="generation $next served $(accepted_sum) requests"
else
    detail=ok
fi
touch /tmp/stop
wait $load_pid
result=$(cat /tmp/graceful.out)
case "$detail $result" in
    "ok ok="*" failed=0 "*)
        check graceful PASS "generation $generation->$next under load: $result" ;;
    *)
        check graceful FAIL "$detail: $result" ;;
esac
stop_httpd

# ---- fallback: the shim refuses SO_REUSEPORT; two Listens, two buckets
write_config fallback "Listen 127.0.0.1:$PORT1" "Listen 127.0.0.1:$PORT2"
if ! start_httpd $ROOT/fallback.conf $MODULES/noreuseport.so; then
    check fallback FAIL "no status page within 60 s: $(log_tail)"
else
    result=$(kload run $PORT2 /index.html "$MARKER" $THREADS 50 120)
    status
    strategy=$(status_value strategy)
    buckets=$(status_value buckets)
    sockets="$(listening_sockets $PORT1)+$(listening_sockets $PORT2)"
    if [ "$strategy" = listen ] && [ "$buckets" = 2 ] && [ "$sockets" = "1+1" ] \
        && [ "$result" = "ok=50 failed=0 first_error=none" ] && every_bucket_served; then
        check fallback PASS "strategy listen, 2 buckets, sockets $sockets, accepted: $(accepted)"
    else
        check fallback FAIL "strategy ${strategy:-?}, ${buckets:-?} buckets, sockets $sockets, $result, accepted: $(accepted)"
    fi
    stop_httpd
fi

check event_model SKIP "the event child model does not exist yet"
finish
