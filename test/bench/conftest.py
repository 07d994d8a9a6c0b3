"""Shared setup of the bench tests: where the repository and the build are.

BUCKETED_TOP: the source tree (default: two levels above this file).
BUCKETED_BUILD: where `make` left its artifacts (default: BUCKETED_TOP)."""
import os

import pytest

TOP = os.path.abspath(os.environ.get(
    "BUCKETED_TOP", os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.path.abspath(os.environ.get("BUCKETED_BUILD", TOP))


@pytest.fixture
def top():
    return TOP


@pytest.fixture
def build():
    return BUILD
