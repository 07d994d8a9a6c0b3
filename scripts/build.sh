#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds bucketed out of tree against the installed httpd (apxs), warnings as errors.
set -eu
cd "$(dirname "$0")/.."
mkdir -p build-aux
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi >/dev/null
fi
if [ ! -f Makefile ] || [ configure -nt Makefile ]; then
    ./configure --enable-werror >/dev/null
fi
make -j2
