#!/bin/sh
# bench/httpd-suite.sh: run httpd's own test suite (Apache::Test, apache/httpd-tests) against
# stock prefork and against bucketed's prefork model, interleaved, and count per run: failed
# subtests, wall time, the MPM's stall lines (BK00108 stalled, BK00109 accepts again, BK00111
# MaxRequestWorkers reached, BK00110 moves) and children started.
#
# Needs: Debian's apache2 + apache2-dev (apxs), perl with libwww-perl, libio-socket-ssl-perl,
# libnet-ssleay-perl, libhttp-dav-perl, libprotocol-http2-perl; Apache::Test (Debian ships it
# only in libapache2-mod-perl2: `apt-get download libapache2-mod-perl2 && dpkg -x *.deb DIR`,
# then PERL5LIB=DIR/usr/lib/x86_64-linux-gnu/perl5/5.36; installing the package would enable
# mod_perl); a checkout of https://github.com/apache/httpd-tests (HTTPD_TESTS); perf (children
# counted as the parent's forks, `sched:sched_process_fork` on the parent pid, plus the
# children alive when counting began); a built mod_mpm_bucketed.so (BUCKETED_SO). Run as root.
# Ports 8529.. (Apache::Test's defaults) must be free.
#
# Usage: bench/httpd-suite.sh [RUNS [TEST-FILES...]]   e.g.  bench/httpd-suite.sh 3 t/ssl/proxy.t
#        (no test files: the whole suite). Results: $OUT/summary.tsv, one line per run.
#        BUCKETED_BASE_SO=other/mod_mpm_bucketed.so adds a third server, bucketed-base, to
#        every round (an A/B of two builds beside stock prefork).
set -eu
RUNS=${1:-3}; [ $# -gt 0 ] && shift
HTTPD_TESTS=${HTTPD_TESTS:-/tmp/httpd-tests}
BUCKETED_SO=${BUCKETED_SO:-$(cd "$(dirname "$0")/.." && pwd)/mod_mpm_bucketed.so}
BUCKETED_BASE_SO=${BUCKETED_BASE_SO:-}
PERL5LIB=${PERL5LIB:-/tmp/modperl/usr/lib/x86_64-linux-gnu/perl5/5.36}; export PERL5LIB
OUT=${OUT:-/tmp/httpd-suite.$$}
BUCKETED_EXTRA=${BUCKETED_EXTRA:-}   # more directives for bucketed, e.g. "BucketSteering hash"
                                     # (read when its tree is set up: use a new OUT)
MODS=/usr/lib/apache2/modules
BENCH=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"

# The base configuration Apache::Test inherits its LoadModule lines from: every module Debian
# ships (mod_cgi rather than mod_cgid, no mod_php), modules others need first, then the MPM.
base_conf() {
    echo "$1"
    first="proxy cache dav session ldap dbd xml2enc slotmem_shm proxy_balancer heartmonitor socache_shmcb authn_core authz_core watchdog"
    for m in $first; do
        [ -f "$MODS/mod_$m.so" ] && echo "LoadModule ${m}_module $MODS/mod_$m.so"
    done
    for f in "$MODS"/mod_*.so; do
        m=$(basename "$f" .so); m=${m#mod_}
        case " $first " in *" $m "*) continue;; esac
        case $m in mpm_*|cgid) continue;; esac
        echo "LoadModule ${m}_module $f"
    done
}

# One configured copy of the test tree per server. Apache::Test writes its prefork limits
# (StartServers 2, MaxClients 7 with the self-proxying tests, ...) in an <IfModule prefork.c>
# block; bucketed gets a copy of that block with BucketCount 2 added.
setup() { # name mpm-loadmodule-line
    tree=$OUT/ht-$1
    [ -f "$tree/t/conf/httpd.conf" ] && return 0
    mkdir -p "$tree"
    (cd "$HTTPD_TESTS" && tar cf - --exclude=./t/logs .) | (cd "$tree" && tar xf -)
    base_conf "$2" > "$OUT/base-$1.conf"
    (cd "$tree" && perl Makefile.PL -apxs /usr/bin/apxs -httpd /usr/sbin/apache2 \
        -httpd_conf "$OUT/base-$1.conf" && t/TEST -conf) > "$OUT/conf-$1.log" 2>&1
    # Apache::Test refuses to start httpd as root; bucketed must start as root (as in
    # production, with Apache::Test's User nobody) so that what it does only as root (BPF
    # steering, BucketSteering auto) is what is measured. Lift that check in this t/TEST.
    sed -i 's/^use Apache::TestRun ();/&no warnings "redefine"; *Apache::TestRun::check_runtime_user = sub { 1 };/' \
        "$tree/t/TEST"
    grep -q 'check_runtime_user = sub' "$tree/t/TEST"
    if [ "${1%-base}" = bucketed ]; then
        block=$(sed -n '/^<IfModule prefork.c>/,/MaxRequestsPerChild/p' "$tree/t/conf/httpd.conf" |
                grep -E '^ +(StartServers|MinSpareServers|MaxSpareServers|MaxClients|MaxRequestsPerChild) ')
        printf '\n<IfModule mod_mpm_bucketed.c>\n    BucketCount 2\n%s\n%s\n</IfModule>\n' \
            "$block" "$BUCKETED_EXTRA" >> "$tree/t/conf/httpd.conf"
    fi
    chmod -R a+rwX "$tree"; chmod a+rx "$OUT"
}

# t/modules/proxy.t forks a Unix-socket server that outlives the test when its two UDS
# subtests fail (they do here, for both servers): the harness then waits on its output pipe
# forever. End such a helper (a perl t/... whose parent is gone, running in this tree) after
# 15 s, so that both servers' times stay comparable.
reap_orphans() { # tree
    dir=$(cd "$1" && pwd -P)
    while :; do
        for p in $(ps -eo pid=,ppid=,etimes=,args= |
                   awk '$2 == 1 && $3 > 15 && $4 ~ /perl$/ && $5 == "-w" && $6 ~ /^t\// {print $1}'); do
            [ "$(readlink "/proc/$p/cwd")" = "$dir" ] && kill "$p" && echo "ended orphan test helper $p" >&2
        done
        sleep 5
    done
}

run() { # name run-number test-files...
    name=$1 n=$2; shift 2
    tree=$OUT/ht-$name log=$OUT/$name-$n
    if [ "${name%-base}" = bucketed ] && ! grep -q '^<IfModule mod_mpm_bucketed.c>' "$tree/t/conf/httpd.conf"; then
        echo "$tree/t/conf/httpd.conf lost bucketed's block (regenerated?)" >&2; exit 1
    fi
    rm -f "$tree/t/logs/error_log" "$tree/t/logs/access_log"
    (cd "$tree" && t/TEST -start-httpd) > "$log.start" 2>&1
    ppid=$(cat "$tree/t/logs/httpd.pid")
    perf stat --no-inherit -x, -e sched:sched_process_fork -p "$ppid" -o "$log.forks" &
    perfpid=$!
    "$BENCH/accept-queue-watch.py" 8529 8700 > "$log.queues" &
    qpid=$!
    sleep 1   # perf attaches
    at_start=$(grep -l "^PPid:[[:space:]]*$ppid\$" /proc/[0-9]*/status 2>/dev/null | wc -l)
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    reap_orphans "$tree" 2>> "$log.start" &
    rpid=$!
    t0=$(date +%s.%N)
    (cd "$tree" && t/TEST -run-tests "$@") > "$log.out" 2>&1 || true
    t1=$(date +%s.%N)
    kill "$rpid"
    kill -INT "$perfpid" "$qpid"; wait "$perfpid" || true; wait "$qpid" || true
    (cd "$tree" && t/TEST -stop-httpd) >> "$log.start" 2>&1
    cp "$tree/t/logs/error_log" "$log.error_log"
    forks=$(grep sched_process_fork "$log.forks" | cut -d, -f1)
    failed=$(sed -n 's/^Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$log.out")
    [ -n "$failed" ] || failed=0
    files=$(grep -c '^t/.* Failed: \|^t/.*Wstat\|Dubious' "$log.out" || true)
    result=$(grep -E '^Result: ' "$log.out" || echo "Result: ?")
    secs=$(echo "$t1 - $t0" | bc)
    prove=$(sed -n 's/^Files=.*, \([0-9]*\) wallclock secs.*/\1/p' "$log.out")
    queues=$(cat "$log.queues")
    c() { grep -c "$1" "$log.error_log" || true; }
    printf '%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$n" "$secs" \
        "$prove" "$failed" "$files" "$queues" "$(c BK00109)" "$(c BK00108)" "$(c BK00111)" \
        "$(c BK00110)" "$((at_start + forks))" "$load" "$result" | tee -a "$OUT/summary.tsv"
}

setup stock "LoadModule mpm_prefork_module $MODS/mod_mpm_prefork.so"
setup bucketed "LoadModule mpm_bucketed_module $BUCKETED_SO"
[ -z "$BUCKETED_BASE_SO" ] || setup bucketed-base "LoadModule mpm_bucketed_module $BUCKETED_BASE_SO"
printf 'server\trun\tseconds\tprove_s\tfailed_subtests\tfailed_files\tqueue_stalls\tBK00109\tBK00108\tBK00111\tBK00110\tchildren\tload\tresult\n' \
    | tee -a "$OUT/summary.tsv"
i=1
while [ "$i" -le "$RUNS" ]; do
    run stock "$i" "$@"
    run bucketed "$i" "$@"
    [ -z "$BUCKETED_BASE_SO" ] || run bucketed-base "$i" "$@"
    i=$((i + 1))
done
