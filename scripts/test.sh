#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs every test: cmocka unit tests, integration tests against the real httpd with
# the module loaded, the bench harness smoke test, bucketed on real 5.10 and 6.1
# kernels in qemu guests, and the in-tree httpd builds.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/check-httpd-api.py  # httpd API newer than 2.4.52 only under a guard
scripts/build.sh
make check
test/kernels/run --short    # bucketed on Debian's 5.10 and 6.1 kernels in qemu guests
scripts/intree-build.sh static
scripts/intree-build.sh shared
