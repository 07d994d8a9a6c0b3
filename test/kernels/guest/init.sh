#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
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

PORT3=8082
if [ -z "$HELD_FD" ]; then
    /bin/busybox mkdir -p /proc /sys /dev /tmp /bin /sbin /usr/bin /usr/sbin
    /bin/busybox --install -s
    export PATH=/bin:/sbin:/usr/bin:/usr/sbin
    mount -t proc proc /proc
    mount -t sysfs sys /sys
    mount -t devtmpfs dev /dev
    ip link set lo up
    # The full-stop check's socket on :$PORT3, held from here to the end
    # as a service manager holds it across full restarts: this script
    # again, with the socket at descriptor 4.
    export HELD_FD=4
    exec /usr/bin/kload hold $PORT3 $HELD_FD /bin/sh /init
fi
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

/opt/ktest/kprobe >/tmp/features 2>/tmp/kprobe.err
rc=$?
while read -r line; do report "$line"; done </tmp/features
[ "$rc" -eq 0 ] || check kprobe FAIL "exit $rc: $(head -c 200 /tmp/kprobe.err)"
feature_yes() { grep -q "^FEATURE $1 yes" /tmp/features; }

mkdir -p $ROOT/htdocs $ROOT/logs $ROOT/run
chmod 755 $ROOT $ROOT/htdocs
echo "$MARKER" >$ROOT/htdocs/index.html

# write_config NAME DIRECTIVES...: a private config for one server; the
# prefork model's child counts unless DIRECTIVES say "ChildModel event".
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
        case "$*" in
            *"ChildModel event"*) ;;
            *)
                echo "StartServers 4"
                echo "MinSpareServers 2"
                echo "MaxSpareServers 8"
                ;;
        esac
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
# Sockets the status page says are draining, over all buckets.
draining_sum() {
    sum=0
    for n in $(sed -n 's/^bucket=.* draining=\([0-9]*\).*$/\1/p' /tmp/status); do
        sum=$((sum + n))
    done
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
        >/tmp/httpd.out 2>&1 4<&-
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
sockets_are() { [ "$(listening_sockets "$1")" = "$2" ]; }

# start_load: kload in the background, until /tmp/stop exists (or 120 s);
# stop_load ends it and leaves its "ok=N failed=M first_error=..." line in
# load_result; load_clean says whether nothing failed.
start_load() {
    rm -f /tmp/stop
    kload run $PORT1 /index.html "$MARKER" $THREADS 1000000 120 /tmp/stop \
        >/tmp/load.out 2>&1 &
    load_pid=$!
}
stop_load() {
    touch /tmp/stop
    wait "$load_pid"
    load_result=$(cat /tmp/load.out)
}
load_clean() {
    case "$load_result" in "ok="*" failed=0 "*) return 0 ;; esac
    return 1
}

# graceful_restart: once the current generation serves (under the load),
# SIGUSR1 to httpd; then waits for the next generation on the status page
# and 20 requests it served. Sets generation, next and restart_detail
# ("ok", or what did not happen).
graceful_restart() {
    status
    generation=$(status_value generation)
    next=$((generation + 1))
    if ! wait_until 60 served_at_least 20; then
        restart_detail="generation $generation served $(accepted_sum) requests, the load did not reach it"
    elif ! kill -USR1 "$HTTPD_PID"; then
        restart_detail="kill -USR1 $HTTPD_PID failed"
    elif ! wait_until 60 generation_is $next; then
        restart_detail="generation $next never came"
    elif ! wait_until 60 served_at_least 20; then
        restart_detail="generation $next served $(accepted_sum) requests"
    else
        restart_detail=ok
    fi
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
    *"migration: per-group eBPF"*|*"migration: net.ipv4.tcp_migrate_req=1"*)
        says=yes mechanism=migrate ;;
    # 4.19-5.13: no migration; removed sockets are drained instead.
    *"migration: drain"*) says=no mechanism=drain ;;
    *"migration: none"*) says=no mechanism=none ;;
    *) says= mechanism= ;;
esac
if feature_yes migrate_req; then works=yes; else works=no; fi
if [ "$says" = "$works" ]; then
    check migration PASS "$migration; kprobe migrate_req: $works"
else
    check migration FAIL "${migration:-no migration line}; kprobe migrate_req: $works"
fi

# bucketed's steering (BucketSteering auto, 2 buckets) against kprobe's: its
# start-up trial loads its own load program, so where kprobe attaches an
# SK_REUSEPORT program a verifier that refused bucketed's would show here
# as the hash, a fallback every other check would pass with.
steering=$(grep -o 'bucketed: steering: .*' $ROOT/logs/error.log | head -n 1 | head -c 200)
in_force=$(grep -o 'bucketed: steering in force: .*' $ROOT/logs/error.log | head -n 1 | head -c 200)
if feature_yes ebpf_attach; then attach=yes want=load; else attach=no want=hash; fi
case "$steering" in
    "bucketed: steering: $want (BucketSteering auto"*) says=yes ;;
    *) says=no ;;
esac
if [ "$says" = yes ] && [ -z "$in_force" ]; then
    check steering PASS "$steering; kprobe ebpf_attach: $attach"
else
    check steering FAIL "${steering:-no steering line}${in_force:+; $in_force}; kprobe ebpf_attach: $attach, so $want expected"
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
start_load
graceful_restart
stop_load
if [ "$restart_detail" = ok ] && load_clean; then
    check graceful PASS "generation $generation->$next under load: $load_result"
else
    check graceful FAIL "$restart_detail: $load_result"
fi

# ---- plan changes under load: graceful restarts through BucketCount
# 2 -> 4 -> 2 -> 2 -> 4 -> 2 -> 2, the config file rewritten each time.
# A socket a lower count drops is migrated (5.14+: retired at the
# restart, out of its group, its queue moved, once no old child accepts
# from it, then closed), or drained (4.19-5.13: listening one more
# generation, then closed once empty), or closed and its queue reset
# (before 4.19). Every step waits for its listening sockets: 4 after 4->2
# under drain and 2 after the next restart; otherwise the new count.

# What the error log got since plan_step's restart, in /tmp/step.log.
step_log() { tail -n +$((log_lines + 1)) $ROOT/logs/error.log >/tmp/step.log; }
# Retired duplicates that have left their group, by /tmp/step.log.
step_left() { grep -c 'duplicate listener .* left its reuseport group' /tmp/step.log; }
step_left_at_least() { step_log; [ "$(step_left)" -ge "$1" ]; }

# plan_step FROM TO: sets step_detail and fails on the first thing that
# did not happen.
plan_step() {
    from=$1 to=$2
    write_config reuseport "Listen 127.0.0.1:$PORT1" "BucketCount $to"
    log_lines=$(wc -l <$ROOT/logs/error.log)
    graceful_restart
    if [ "$restart_detail" != ok ]; then
        step_detail="$from->$to: $restart_detail"
        return 1
    fi
    want=$to
    [ "$mechanism" = drain ] && [ "$from" -gt "$to" ] && want=$from
    if ! wait_until 30 sockets_are $PORT1 $want; then
        step_detail="$from->$to: $(listening_sockets $PORT1) listening sockets 30 s after generation $next served, expected $want"
        return 1
    fi
    dropped=0
    [ "$from" -gt "$to" ] && dropped=$((from - to))
    # 5.14+: a dropped duplicate retires at the restart and leaves its
    # group once no old child accepts from it; it stops listening just
    # before the parent logs that, so wait a moment for the lines too.
    [ "$mechanism" = migrate ] && wait_until 5 step_left_at_least $dropped
    step_log
    draining_now=$(grep -c 'draining duplicate listener' /tmp/step.log)
    closed_drained=$(grep -c 'closing duplicate listener .*drained for 1 generation(s), nothing queued on it' /tmp/step.log)
    retiring=$(grep -c 'retiring duplicate listener .*move to the other sockets' /tmp/step.log)
    left=$(step_left)
    status
    case "$mechanism" in
        drain) seen="$draining_now draining (status page: $(draining_sum)), $closed_drained closed drained"
               expect="$dropped draining (status page: $dropped), $draining closed drained" ;;
        migrate) seen="$retiring retiring, $left left their group"
                 expect="$dropped retiring, $dropped left their group" ;;
        *) seen= expect= ;;
    esac
    if [ "$seen" != "$expect" ]; then
        step_detail="$from->$to: log says $seen, expected $expect"
        return 1
    fi
    draining=$draining_now
    steps="$steps $from->$to:$want"
    if [ "$draining" -gt 0 ]; then steps="$steps($draining draining)"; fi
    return 0
}

uptime_s() { cut -d. -f1 /proc/uptime; }
status
began=$(uptime_s)
start_load
steps= step_detail= draining=0 from=2
for to in 4 2 2 4 2 2; do
    if ! plan_step $from $to; then
        step_detail=${step_detail:-"$from->$to failed"}
        break
    fi
    from=$to
done
stop_load
case "$mechanism" in
    migrate) how="migrated by the kernel" ;;
    drain) how="drained" ;;
    none) how="reset" ;;
    *) how="?" ;;
esac
summary="dropped sockets $how, BucketCount 2->4->2->2->4->2->2 in $(($(uptime_s) - began)) s, listening sockets after each step:$steps; $load_result"
if [ -n "$step_detail" ]; then
    check plan_change FAIL "$step_detail; $summary"
elif [ "$mechanism" = none ]; then
    check plan_change SKIP "no migration or drain before 4.19: resets expected; $summary"
elif [ "$mechanism" != "" ] && load_clean; then
    check plan_change PASS "$summary"
else
    check plan_change FAIL "$summary"
fi
stop_httpd

# ---- full restarts on the held socket (fd 4): graceful stop (SIGWINCH),
# then a new server on the same socket, as systemd's socket unit does it,
# under load. What arrives while no server runs waits on the held socket.
# A duplicate's queue at its close migrates to it (5.14+), or is emptied
# first: new connections steered to the held socket only, the children
# accepting until the duplicates are empty (4.19-5.13); or is reset
# (before 4.19).
FULL_STOPS=4
held_status() { kload get $PORT3 /bucketed-status >/tmp/status 2>/dev/null; }
held_served_at_least() { held_status && [ "$(accepted_sum)" -ge "$1" ]; }
# A child of this shell that has exited is a zombie until waited for.
exited() { ! grep -q '^[0-9]* ([^)]*) [^Z]' /proc/$1/stat 2>/dev/null; }
start_held_httpd() {
    rm -f $ROOT/run/httpd.pid
    env -i PATH=$PATH LISTEN_FDS=1 /bin/sh -c \
        'exec 3<&4 4<&-; export LISTEN_PID=$$; exec /usr/sbin/apache2 -f "$1" -DFOREGROUND' \
        sh "$1" >>/tmp/httpd.out 2>&1 &
    HTTPD_PID=$!
    wait_until 60 held_status
}
full_stops() {
    for i in $(seq $FULL_STOPS); do
        if ! wait_until 60 held_served_at_least 50; then
            full_detail="stop $i: the load did not reach the server"
            return 1
        fi
        kill -WINCH "$HTTPD_PID"
        if ! wait_until 60 exited "$HTTPD_PID"; then
            full_detail="stop $i: httpd $HTTPD_PID still runs 60 s after SIGWINCH"
            return 1
        fi
        wait "$HTTPD_PID"
        if ! start_held_httpd $ROOT/held.conf; then
            full_detail="start $i: no status page within 60 s: $(log_tail)"
            return 1
        fi
    done
    full_detail=ok
}
write_config held "Listen 127.0.0.1:$PORT3" "BucketCount 4" "StartServers 8" \
    "MaxSpareServers 16" "LogLevel info mpm_bucketed:debug"
: >$ROOT/logs/error.log
if ! start_held_httpd $ROOT/held.conf; then
    check full_stop FAIL "no status page within 60 s: $(log_tail)"
else
    sockets=$(listening_sockets $PORT3)
    rm -f /tmp/stop
    kload run $PORT3 /index.html "$MARKER" 16 1000000 600 /tmp/stop \
        >/tmp/load.out 2>&1 &
    load_pid=$!
    full_stops
    stop_load
    summary="$FULL_STOPS full restarts on the held socket ($sockets listening sockets on :$PORT3 for 4 buckets), mechanism ${mechanism:-?}; $load_result; stop lines: $(grep -o 'stopping: [0-9]* connection(s) left queued' $ROOT/logs/error.log | sed 's/stopping: //; s/ connection(s) left queued//' | tr '\n' ' ')"
    if [ "$full_detail" != ok ]; then
        check full_stop FAIL "$full_detail; $summary"
    elif [ "$mechanism" = none ]; then
        check full_stop SKIP "no migration or drain before 4.19: resets expected; $summary"
    elif load_clean; then
        check full_stop PASS "$summary"
    else
        check full_stop FAIL "$summary"
    fi
    [ -z "$HTTPD_PID" ] || kill -TERM "$HTTPD_PID"
    wait_until 60 exited "$HTTPD_PID" && wait "$HTTPD_PID"
    HTTPD_PID=
fi

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

# ---- ChildModel event: worker threads and a keeper thread per child
write_config event "Listen 127.0.0.1:$PORT1" "ChildModel event" "BucketCount 2" \
    "ThreadsPerChild 8" "StartServers 2" "MinSpareThreads 8" "MaxSpareThreads 32"
if ! start_httpd $ROOT/event.conf; then
    check event_model FAIL "no status page within 60 s: $(log_tail)"
elif ! grep -q 'bucketed: .*ChildModel event: each child has 8 worker threads' \
        $ROOT/logs/error.log; then
    check event_model FAIL "the log does not say ChildModel event: $(log_tail)"
else
    result=$(kload run $PORT1 /index.html "$MARKER" $THREADS $REQUESTS 120)
    status
    served=$(accepted)
    if [ "$result" != "ok=$REQUESTS failed=0 first_error=none" ] \
        || ! every_bucket_served; then
        check event_model FAIL "$result; accepted per bucket: $served"
    else
        start_load
        graceful_restart
        stop_load
        if [ "$restart_detail" = ok ] && load_clean; then
            check event_model PASS "$REQUESTS requests, accepted per bucket: $served; generation $generation->$next under load: $load_result"
        else
            check event_model FAIL "$REQUESTS requests, accepted per bucket: $served; graceful: $restart_detail: $load_result"
        fi
    fi
fi
stop_httpd
finish
