#!/bin/sh
# Runs every test: cmocka unit tests, integration tests against the real httpd with
# the module loaded, the bench harness smoke test, and the in-tree httpd builds.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
make check
scripts/intree-build.sh static
scripts/intree-build.sh shared
