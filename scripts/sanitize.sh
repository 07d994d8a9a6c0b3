#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the MPM, mod_bucketed_status, the test module and the cmocka unit tests
# with AddressSanitizer and UndefinedBehaviorSanitizer, runs the unit tests, then
# the integration tests against Debian's /usr/sbin/apache2 with the sanitized
# modules; fails if a sanitizer wrote a report (the reports are printed).
#
#   scripts/sanitize.sh [PYTEST ARGS]   e.g. test/integration/test_event_lifecycle.py -k stop
#   BUCKETED_SANITIZE=thread scripts/sanitize.sh [PYTEST ARGS]
#
# BUCKETED_SANITIZE=thread builds with ThreadSanitizer instead (it cannot be
# combined with ASan) and runs test/integration/test_event_*.py by default: the
# event child model is the threaded one. Only bucketed's code is instrumented;
# httpd and APR are not, so races inside them go unseen, while their locking
# (pthread mutexes and condition variables) is seen through TSan's interceptors.
#
# The build is a copy of the source tree (git's tracked and untracked,
# non-ignored files) in $BUCKETED_SANITIZE_DIR (default sanitize-build/),
# configured there: the normal build is untouched, and a second run rebuilds only
# what changed. apache2 is not built with ASan, so the runtimes are preloaded into
# every httpd the tests start (BUCKETED_TEST_PRELOAD, honoured by
# test/integration/httpd_fixture.py, goes before a test's own preload shim).
#
# Runtime options, and why:
# - detect_leaks=0 for httpd: httpd does not free its pools before exit (the
#   parent's and a child's process pools go with the process), so LeakSanitizer
#   would report every configuration allocation; and children have switched to
#   www-data, which leaves them non-dumpable, so LeakSanitizer could not ptrace
#   them anyway. The unit tests keep leak detection.
# - log_path: children's reports go to files in the reports directory (mode 1777:
#   children write them as www-data), not to a stderr nobody reads.
# - quarantine_size_mb=32: the default 256 MB per process, times dozens of
#   children, is too much for a shared machine; 32 MB still catches
#   use-after-free of recently freed blocks.
# - UBSan recovers (no -fno-sanitize-recover): one run reports every kind of UB.
# - suppressions=scripts/asan.supp: one false report of ASan's thread teardown
#   after apr_thread_exit(), explained there; scripts/tsan.supp: one by design.
# ASan sees malloc'd memory only: APR pools carve their blocks out of large
# malloc'd chunks, so a use-after-free or overflow inside a pool is invisible
# unless APR itself is built with pool debugging.
set -eu
TOP=$(cd "$(dirname "$0")/.." && pwd)
MODE=${BUCKETED_SANITIZE:-address}
OUT=${BUCKETED_SANITIZE_DIR:-$TOP/sanitize-build}/$MODE
SRC=$OUT/tree
REPORTS=$OUT/reports
HTTPD_BIN=${HTTPD_BIN:-/usr/sbin/apache2}
case $MODE in
address)
    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
    LINK_SAN="-fsanitize=address,undefined"
    RUNTIMES="libasan.so libubsan.so"
    OPTION_VARS="ASAN_OPTIONS UBSAN_OPTIONS"
    ;;
thread)
    SAN="-fsanitize=thread -fno-omit-frame-pointer"
    LINK_SAN="-fsanitize=thread"
    RUNTIMES="libtsan.so"
    OPTION_VARS="TSAN_OPTIONS"
    ;;
*)
    echo "sanitize.sh: BUCKETED_SANITIZE must be address or thread, not $MODE" >&2
    exit 2
    ;;
esac
preload=""
for name in $RUNTIMES; do
    lib=$(gcc -print-file-name=$name)
    [ -e "$lib" ] || { echo "sanitize.sh: $name not found (gcc's runtime)" >&2; exit 1; }
    preload="${preload:+$preload:}$lib"
done

# ---- build: a copy of the tree (mtimes kept, so make rebuilds what changed)
mkdir -p "$SRC"
(cd "$TOP" && git ls-files -z -co --exclude-standard) \
    | (cd "$TOP" && tar --null -T - --ignore-failed-read -cf - 2>/dev/null) \
    | tar -xf - -C "$SRC"
cd "$SRC"
mkdir -p build-aux
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
    autoreconf -fi >/dev/null
fi
if [ ! -f Makefile ]; then
    ./configure --enable-werror CFLAGS="-g -O1 $SAN" LDFLAGS="$SAN" >/dev/null
fi
# Brought up to date first (automake reruns when Makefile.am changed since
# the last copy): its messages would otherwise end up in the flags below.
make -s Makefile >/dev/null
# The apxs builds get the sanitizer flags on top of the Makefile's own.
apxs_cflags=$(printf 'print-apxs-cflags:\n\t@echo $(APXS_CFLAGS)\n' \
              | make -s -f Makefile -f - print-apxs-cflags)
apxs_san=""
for f in $SAN; do apxs_san="$apxs_san -Wc,$f"; done
apxs_san="$apxs_san -Wl,$LINK_SAN"
make -j2 all APXS_CFLAGS="$apxs_cflags$apxs_san"

rm -rf "$REPORTS"
mkdir -p "$REPORTS"
chmod 1777 "$REPORTS"

# ---- unit tests (linked with the runtimes; leaks checked)
status=0
ASAN_OPTIONS="log_path=$REPORTS/unit-asan" \
UBSAN_OPTIONS="print_stacktrace=1:log_path=$REPORTS/unit-ubsan" \
TSAN_OPTIONS="log_path=$REPORTS/unit-tsan" \
    make -j2 check-TESTS || status=1

# ---- integration tests, every httpd with the runtimes preloaded
ASAN_OPTIONS="detect_leaks=0:quarantine_size_mb=32:suppressions=$TOP/scripts/asan.supp"
ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$REPORTS/httpd-asan"
UBSAN_OPTIONS="print_stacktrace=1:log_path=$REPORTS/httpd-ubsan"
TSAN_OPTIONS="second_deadlock_stack=1:suppressions=$TOP/scripts/tsan.supp"
TSAN_OPTIONS="$TSAN_OPTIONS:log_path=$REPORTS/httpd-tsan"
export ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS
# Left out of the default run: the Debian path tests install into a scratch
# /etc/apache2 and start apache2 through apache2ctl and its envvars, which this
# preload does not reach; test_intree_layout checks that a build directory holds
# no sources, and this one is a copy of the tree (make check runs all three).
# TSan's runtime adds a thread to every process: the two tests that count a
# child's threads cannot hold under it.
if [ $# = 0 ] && [ $MODE = thread ]; then
    set -- test/integration/test_event_serving.py \
        test/integration/test_event_lifecycle.py \
        test/integration/test_event_modules.py \
        --deselect=test/integration/test_event_serving.py::test_serves_and_says_threaded \
        --deselect=test/integration/test_event_lifecycle.py::test_graceful_restart_switches_child_model
elif [ $# = 0 ]; then
    set -- test/integration \
        --ignore=test/integration/test_debian_install.py \
        --ignore=test/integration/test_debian_php.py \
        --ignore=test/integration/test_intree_layout.py
fi
# BUCKETED_TOP stays the real tree: test_intree_layout checks its source
# directories (and the copy lies in an ignored directory of it).
BUCKETED_TOP=$TOP BUCKETED_BUILD=$SRC HTTPD_BIN=$HTTPD_BIN \
BUCKETED_TEST_PRELOAD="$preload" BUCKETED_TEST_ENV="$OPTION_VARS" \
    /usr/bin/python3 -m pytest -v -ra "$@" || status=1

# ---- any report fails the run
found=0
for f in "$REPORTS"/*; do
    [ -e "$f" ] || continue
    found=1
    echo "==== sanitizer report $f"
    cat "$f"
done
if [ $found = 1 ]; then
    echo "sanitize.sh: sanitizer reports in $REPORTS" >&2
    exit 1
fi
[ $status = 0 ] || { echo "sanitize.sh: tests failed" >&2; exit 1; }
echo "sanitize.sh: no sanitizer reports, all tests passed"
