#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds httpd from Debian's source package with the bucketed MPM added to its
# tree, installs it into a temporary prefix, starts the installed server on a
# loopback port and checks it, then stops it and removes everything.
#
# Usage: scripts/intree-build.sh static|shared|all
#   static  ./configure --with-mpm=bucketed (the MPM is linked into httpd)
#   shared  ./configure --with-mpm=bucketed --enable-mpms-shared='prefork event bucketed'
#   all     both, one after the other, from one download
#
# Environment:
#   BUCKETED_CACHE     where the httpd tarball is kept between runs
#                      (default /var/cache/bucketed)
#   BUCKETED_RUN_USER  unprivileged account the children run as
#                      (default www-data, else nobody)
#   BUCKETED_KEEP=1    keep the work directory (sources, logs, prefix)
#   JOBS               parallel make jobs (default: number of CPUs)
#
# Needs root: it adds deb-src entries to apt when they are missing, and httpd
# must start as root to switch to the unprivileged account.
#
# mod_unixd (User, Group): modules/arch/unix/config5.m4 enables it only for
# the MPMs it knows. This script configures with --enable-unixd=static rather
# than patching that file: httpd's tree stays as released apart from the
# added MPM directory, and users build it the same way (docs/building.md).
#
# Each step runs as a background job with its output in a log: a job keeps
# `set -e` (a function called as `f || ...` would not), and with `set -m` it
# has its own process group, which cleanup stops on an interrupt.
set -eum

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${BUCKETED_CACHE:-/var/cache/bucketed}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
mpm_warnings="-Wall -Wextra -Werror"
# The release (configure.ac's AC_INIT) for bucketed_version.h: configure.ac is
# not run in an httpd tree.
mpm_release="-DBUCKETED_RELEASE=$(sed -n 's/^AC_INIT(\[bucketed\], \[\([^]]*\)\].*/\1/p' "$top/configure.ac")"
sources_list=/etc/apt/sources.list.d/bucketed-deb-src.sources

mode=""
step=""
step_pid=""
work=""
httpd_pid=""

say() { echo "intree-build${mode:+ [$mode]}: $*"; }

fail() {
    echo "intree-build${mode:+ [$mode]}: FAILED${step:+ at step \"$step\"}: $*" >&2
    exit 1
}

# Stops what this script started, by pid, and removes the work directory,
# however the script ends.
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    case $status in
        130|143) echo "intree-build${mode:+ [$mode]}: interrupted${step:+ at step \"$step\"}" >&2 ;;
    esac
    if [ -n "$step_pid" ]; then
        kill -TERM -- "-$step_pid" 2>/dev/null || true
        wait "$step_pid" 2>/dev/null || true
    fi
    stop_httpd >/dev/null 2>&1 || true
    remove_work
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

remove_work() {
    [ -n "$work" ] && [ -d "$work" ] || return 0
    if [ "${BUCKETED_KEEP:-0}" = 1 ]; then
        echo "intree-build: kept $work" >&2
    else
        rm -rf "$work"
    fi
    work=""
}

# run_step NAME LOG FUNCTION [ARGS]: runs FUNCTION with its output in LOG and
# prints how long it took; on failure names the step, shows the end of the
# log and exits.
run_step() {
    local name=$1 log=$2 start rc=0
    shift 2
    step=$name
    start=$(date +%s)
    "$@" >"$log" 2>&1 &
    step_pid=$!
    wait "$step_pid" || rc=$?
    step_pid=""
    if [ "$rc" -ne 0 ]; then
        echo "intree-build [$mode]: step '$name' failed (exit $rc)" >&2
        # With make -j the first error can be far from the end of the log.
        if grep -qE '(error|Error)[: ]' "$log"; then
            echo "first errors in $log:" >&2
            grep -m 10 -E '(error|Error)[: ]' "$log" | sed 's/^/    /' >&2
        fi
        echo "last lines of $log:" >&2
        tail -n 30 "$log" | sed 's/^/    /' >&2
        fail "$name (exit $rc)"
    fi
    say "$name: $(( $(date +%s) - start )) s"
}

check_prerequisites() {
    local missing="" t
    for t in gcc make autoconf autoheader tar gzip curl apt-get apt-cache dpkg flock \
             apr-1-config apu-1-config pcre2-config ps pgrep ss; do
        command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
    done
    [ -z "$missing" ] || fail "missing tools:$missing (scripts/deps.sh installs them)"
    [ "$(id -u)" -eq 0 ] || fail "must run as root (apt sources; httpd's switch to User/Group)"
    [ -f "$top/server/mpm/bucketed/config3.m4" ] || fail "no MPM in $top/server/mpm/bucketed"
}

# ---- httpd's source ----

listed_versions() {
    apt-cache showsrc apache2 2>/dev/null | sed -n 's/^Version: //p' | sort -u
}

ensure_deb_src() {
    if [ -n "$(listed_versions)" ]; then
        echo "apt lists apache2 sources already"
        return 0
    fi
    echo "adding deb-src entries in $sources_list"
    cat >"$sources_list" <<'EOF'
# Added by bucketed's scripts/intree-build.sh: httpd's source for the in-tree build.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
    [ -n "$(listed_versions)" ] || { echo "apt-cache showsrc apache2 lists no version" >&2; return 1; }
}

# The listed versions, newest first by dpkg's ordering (an insertion sort:
# there are two or three).
versions_newest_first() {
    local sorted="" merged v s placed
    for v in $(listed_versions); do
        merged="" placed=0
        for s in $sorted; do
            if [ "$placed" = 0 ] && dpkg --compare-versions "$v" gt "$s"; then
                merged="$merged $v"
                placed=1
            fi
            merged="$merged $s"
        done
        [ "$placed" = 1 ] || merged="$merged $v"
        sorted=$merged
    done
    # shellcheck disable=SC2086 # one version per word
    printf '%s\n' $sorted
}

# 1:2.4.68-1~deb12u1 -> 2.4.68 (no epoch, no Debian revision)
upstream_of() {
    local v=${1#*:}
    echo "${v%-*}"
}

# Writes the path of the orig tarball of the newest version that can be had to
# $work/tarball, from the cache when it is there. The newest listed version may
# answer 404: the security archive keeps only its current upload.
fetch_source() {
    local v up file dl
    for v in $(versions_newest_first); do
        up=$(upstream_of "$v")
        file=$cache/apache2_$up.orig.tar.gz
        if [ -s "$file" ] && gzip -t "$file" 2>/dev/null; then
            echo "httpd $up ($v) from the cache: $file"
            echo "$file" >"$work/tarball"
            return 0
        fi
        echo "downloading apache2=$v"
        dl=$(mktemp -d "$cache/download.XXXXXX")
        # apt checks what it downloads against the signed Sources index.
        if (cd "$dl" && apt-get source --download-only -qq "apache2=$v") \
           && [ -s "$dl/apache2_$up.orig.tar.gz" ]; then
            mv "$dl/apache2_$up.orig.tar.gz" "$file"
            rm -rf "$dl"
            echo "httpd $up ($v) downloaded: $file"
            echo "$file" >"$work/tarball"
            return 0
        fi
        rm -rf "$dl"
        echo "apache2=$v could not be downloaded; trying the next older version"
    done
    echo "none of the listed apache2 source versions could be downloaded" >&2
    return 1
}

# Fetches under a lock, so parallel runs download once.
locked_fetch() {
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    flock 9
    fetch_source
}

# ---- building ----

unpack() {
    tar -xzf "$(cat "$work/tarball")" -C "$work/src"
    ls "$work/src"/httpd-*/configure.in
}

# Copies the MPM's directory whole, as a user would (cp -r). The apxs build
# (scripts/build.sh, run before this in scripts/test.sh) compiles under
# objs/ and leaves the directory as it is in git; anything generated in it
# (httpd's make would take objects as up to date and stops at a .deps
# directory) fails the step instead of being filtered out.
add_mpm() {
    local from=$top/server/mpm/bucketed generated
    if [ -f "$top/mod_mpm_bucketed.so" ]; then
        echo "the apxs build has run in $top: copying after it"
    fi
    generated=$(find "$from" -mindepth 1 \( -name '.*' -o -name '*.o' -o -name '*.lo' \
                  -o -name '*.slo' -o -name '*.la' -o -name '*.so' -o -name '*.a' \) -print)
    if [ -n "$generated" ]; then
        echo "$from holds build products (left by an older build? git clean -fdX there):" >&2
        echo "$generated" >&2
        return 1
    fi
    cp -r "$from" "$srcdir/server/mpm/"
    ls -lA "$srcdir/server/mpm/bucketed"
}

regenerate() {
    cd "$srcdir"
    autoheader
    autoconf
}

configure_httpd() {
    local mpm=(--with-mpm=bucketed)
    [ "$mode" = static ] || mpm+=("--enable-mpms-shared=prefork event bucketed")
    cd "$srcdir"
    # "few" modules keep the build short; the checks need only core ones.
    CFLAGS=-O2 ./configure --prefix="$prefix" \
        --with-apr=/usr/bin/apr-1-config --with-apr-util=/usr/bin/apu-1-config \
        --with-pcre=/usr/bin/pcre2-config \
        --enable-modules=few --enable-unixd=static "${mpm[@]}"
}

check_configure() {
    grep 'bucketed' "$work/logs/configure.log"
    # Both child models: APR has threads here, so the MPM is declared threaded.
    grep -q '^checking whether the bucketed MPM supports this platform... yes (both child models)$' \
        "$work/logs/configure.log"
    if grep 'WARNING' "$work/logs/configure.log"; then
        echo "configure warned" >&2
        return 1
    fi
}

build_httpd() {
    cd "$srcdir"
    make -j"$jobs" BUCKETED_CFLAGS="$mpm_warnings $mpm_release"
}

# The MPM's sources were compiled with the warning flags and nothing else was.
# Compile lines are matched by file name (make -j interleaves directories);
# the names come from the object list in config3.m4.
check_mpm_flags() {
    local objects
    objects=$(sed -n '/^bucketed_objects=/,/"$/p' "$srcdir/server/mpm/bucketed/config3.m4" \
              | tr -d '\\"' | sed 's/^bucketed_objects=//')
    [ -n "$objects" ] || { echo "no object list in config3.m4" >&2; return 1; }
    awk -v flags="$mpm_warnings" -v objects="$objects" '
        BEGIN { n = split(objects, o, /[ \t\n]+/); for (i = 1; i <= n; i++) if (o[i] != "") {
                    sub(/\.lo$/, ".c", o[i]); mpm[o[i]] = 1; want++ } }
        match($0, / -c [^ ]+\.c( |$)/) {
            file = substr($0, RSTART + 4, RLENGTH - 4); sub(/ $/, "", file); sub(/.*\//, "", file)
            if (file in mpm) {
                if (!(file in seen)) { seen[file] = 1; got++ }
                if (!index($0, flags)) { print "compiled without " flags ": " file; bad++ }
            } else if (index($0, "-Werror")) { print "-Werror outside the MPM: " file; bad++ }
            else other++
        }
        END {
            printf "%d of %d MPM sources compiled with %s; %d other sources without\n", got, want, flags, other
            exit (bad > 0 || got != want || other == 0)
        }' "$work/logs/make.log"
}

install_httpd() {
    cd "$srcdir"
    make install
}

# ---- checking the installed server ----

pick_user() {
    run_user=${BUCKETED_RUN_USER:-}
    if [ -z "$run_user" ]; then
        if id www-data >/dev/null 2>&1; then run_user=www-data; else run_user=nobody; fi
    fi
    id "$run_user" >/dev/null 2>&1 || fail "no account $run_user"
    [ "$(id -u "$run_user")" -ne 0 ] || fail "$run_user is root; an unprivileged account is needed"
    run_group=$(id -gn "$run_user")
}

# A port below the kernel's ephemeral range (ip_local_port_range, 32768 up by
# default), where no outgoing connection takes its local port: one nothing
# listens on is then free to bind (the CI's own clients took one above it).
free_port() {
    local p low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
    [ "$low" -gt 21000 ] || low=32768
    for _ in $(seq 1 50); do
        p=$(( 20000 + (RANDOM * 32768 + RANDOM) % (low - 20000) ))
        if [ -z "$(ss -Htln "sport = :$p")" ]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# A private configuration: the LoadModule lines make install wrote (the MPM's
# in the shared build), a loopback port and the unprivileged account.
write_test_conf() {
    {
        echo "ServerRoot \"$prefix\""
        echo "ServerName 127.0.0.1"
        grep '^LoadModule ' "$prefix/conf/httpd.conf" || true
        echo "Listen 127.0.0.1:$port"
        echo "User $run_user"
        echo "Group $run_group"
        echo "PidFile \"$prefix/logs/test.pid\""
        echo "ErrorLog \"$prefix/logs/test-error.log\""
        echo "LogLevel info"
        echo "DocumentRoot \"$prefix/htdocs\""
        echo "StartServers 3"
    } >"$conf"
}

check_info() {
    local v m
    v=$("$prefix/bin/httpd" -f "$conf" -V)
    echo "$v"
    echo "$v" | grep -Eq '^Server MPM: +bucketed$' \
        || { echo "-V does not say 'Server MPM: bucketed'" >&2; return 1; }
    m=$("$prefix/bin/httpd" -f "$conf" -M)
    echo "$m"
    echo "$m" | grep -Fqx " mpm_bucketed_module ($mode)" \
        || { echo "-M does not list 'mpm_bucketed_module ($mode)'" >&2; return 1; }
    echo "$m" | grep -Fqx " unixd_module (static)" \
        || { echo "-M does not list unixd_module" >&2; return 1; }
    if [ "$mode" = shared ]; then
        grep -Eq '^LoadModule mpm_bucketed_module +modules/mod_mpm_bucketed\.so$' \
            "$prefix/conf/httpd.conf" \
            || { echo "make install wrote no LoadModule line for mpm_bucketed" >&2; return 1; }
        ls -l "$prefix"/modules/mod_mpm_*.so
        [ -f "$prefix/modules/mod_mpm_prefork.so" ] && [ -f "$prefix/modules/mod_mpm_event.so" ]
    fi
    "$prefix/bin/httpd" -f "$conf" -t
}

# Starts the installed httpd in the foreground as a job of this shell (so its
# pid is known) and waits until it answers.
start_httpd() {
    "$prefix/bin/httpd" -f "$conf" -DFOREGROUND >"$work/logs/httpd.out" 2>&1 &
    httpd_pid=$!
    for _ in $(seq 1 100); do
        if ! kill -0 "$httpd_pid" 2>/dev/null; then
            wait "$httpd_pid" || true
            httpd_pid=""
            return 1
        fi
        if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/"; then
            return 0
        fi
        sleep 0.1
    done
    echo "httpd did not answer on 127.0.0.1:$port within 10 s" >&2
    return 1
}

check_serving() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/index.html")
    echo "GET /index.html: $code"
    [ "$code" = 200 ] || { echo "GET /index.html did not answer 200" >&2; return 1; }
    echo "children of $httpd_pid by user:"
    ps -o user= --ppid "$httpd_pid" | sort | uniq -c
    [ -n "$(ps -o user= --ppid "$httpd_pid")" ] || { echo "httpd has no children" >&2; return 1; }
    if ps -o user= --ppid "$httpd_pid" | grep -vqx "$run_user"; then
        echo "a child runs as another account than $run_user" >&2
        return 1
    fi
}

stop_httpd() {
    [ -n "$httpd_pid" ] || return 0
    kill -TERM "$httpd_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$httpd_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$httpd_pid" 2>/dev/null; then
        echo "httpd $httpd_pid ignored SIGTERM for 10 s; killing it" >&2
        kill -KILL "$httpd_pid" 2>/dev/null || true
        wait "$httpd_pid" 2>/dev/null || true
        httpd_pid=""
        return 1
    fi
    wait "$httpd_pid" 2>/dev/null || true
    httpd_pid=""
    if pgrep -f "^$prefix/bin/httpd " >/dev/null; then
        echo "processes of $prefix/bin/httpd are left after stopping:" >&2
        pgrep -af "^$prefix/bin/httpd " >&2
        return 1
    fi
    echo "stopped; no process left"
}

show_error_log() {
    echo "last lines of $prefix/logs/test-error.log:" >&2
    tail -n 30 "$prefix/logs/test-error.log" 2>/dev/null | sed 's/^/    /' >&2 || true
}

run_checks() {
    local attempt t0
    pick_user
    conf=$prefix/conf/bucketed-test.conf
    for attempt in 1 2 3; do
        port=$(free_port) || fail "no free loopback port"
        write_test_conf
        [ "$attempt" -gt 1 ] || run_step "check -V, -M, -t" "$work/logs/info.log" check_info
        step="start"
        t0=$(date +%s)
        rm -f "$prefix/logs/test-error.log"
        start_httpd && break
        # Someone may have taken the port in the meantime: try another one.
        if [ "$attempt" = 3 ] || ! grep -q 'Address already in use' "$prefix/logs/test-error.log" 2>/dev/null; then
            sed 's/^/    /' "$work/logs/httpd.out" >&2
            show_error_log
            fail "httpd did not start"
        fi
    done
    say "start: pid $httpd_pid on 127.0.0.1:$port, $(( $(date +%s) - t0 )) s"
    step="serve"
    if ! check_serving >"$work/logs/serve.log" 2>&1; then
        sed 's/^/    /' "$work/logs/serve.log" >&2
        show_error_log
        fail "serving check"
    fi
    sed "s/^/intree-build [$mode]:   /" "$work/logs/serve.log"
    step="stop"
    if ! stop_httpd >"$work/logs/stop.log" 2>&1; then
        sed 's/^/    /' "$work/logs/stop.log" >&2
        show_error_log
        fail "stopping httpd"
    fi
    say "stop: $(cat "$work/logs/stop.log")"
    # A clean run logs nothing at warn or above (a slow stop logs that
    # children ignored SIGTERM).
    step="error log"
    if grep -E '^\[[^]]*\] \[[a-z_0-9]+:(warn|error|crit|alert|emerg)\]' \
            "$prefix/logs/test-error.log" >"$work/logs/errors.log"; then
        sed 's/^/    /' "$work/logs/errors.log" >&2
        fail "httpd logged warnings or errors in $prefix/logs/test-error.log"
    fi
    say "error log: nothing at warn or above"
}

build_mode() {
    local t0
    mode=$1
    t0=$(date +%s)
    work=$(mktemp -d "${TMPDIR:-/tmp}/bucketed-intree-$mode.XXXXXX")
    # The children, under another account, read the installed htdocs.
    chmod 755 "$work"
    mkdir "$work/logs" "$work/src"
    prefix=$work/prefix
    run_step "deb-src entries" "$work/logs/apt.log" ensure_deb_src
    run_step "fetch" "$work/logs/fetch.log" locked_fetch
    say "$(tail -n 1 "$work/logs/fetch.log")"
    run_step "unpack" "$work/logs/unpack.log" unpack
    srcdir=$(dirname "$(tail -n 1 "$work/logs/unpack.log")")
    run_step "add MPM" "$work/logs/add.log" add_mpm
    run_step "regenerate configure" "$work/logs/regen.log" regenerate
    run_step "configure" "$work/logs/configure.log" configure_httpd
    run_step "check configure" "$work/logs/configure-check.log" check_configure
    run_step "make -j$jobs" "$work/logs/make.log" build_httpd
    run_step "check MPM flags" "$work/logs/flags.log" check_mpm_flags
    run_step "make install" "$work/logs/install.log" install_httpd
    run_checks
    step=""
    say "passed in $(( $(date +%s) - t0 )) s"
    remove_work
}

case "${1:-}" in
    static|shared) modes=$1 ;;
    all) modes="static shared" ;;
    *) echo "usage: $0 static|shared|all" >&2; exit 2 ;;
esac
check_prerequisites
for m in $modes; do
    build_mode "$m"
done
