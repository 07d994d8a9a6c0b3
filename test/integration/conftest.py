# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the integration tests: make_httpd, servers in ServerRoots of
their own; child_model, each child model in turn, for the behaviour both
models share."""
import shutil
import tempfile
from pathlib import Path

import pytest

from httpd_fixture import CHILD_MODELS, Httpd


@pytest.fixture
def make_httpd():
    """Factory of Httpd servers, each in a ServerRoot of its own; every
    server it made is stopped, its processes killed and its directory
    removed when the test ends. The roots live outside pytest's base
    temporary directory, which pytest keeps 0700 (and may reset at any
    time from another session): the children run as www-data and must
    reach their htdocs."""
    base = Path(tempfile.mkdtemp(prefix="bucketed-it-"))
    base.chmod(0o755)
    made = []

    def make(**kwargs):
        server = Httpd(base / f"server{len(made)}", **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.cleanup()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=sorted(CHILD_MODELS))
def child_model(request):
    """Each child model in turn ("event", "prefork"): a test of behaviour
    both models share takes this and configures with
    CHILD_MODELS[child_model]."""
    return request.param
