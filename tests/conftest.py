"""Test-wide settings: compiled kernels are cached in a per-session directory, not in ~/.cache."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    previous = os.environ.get("PTOWSP_CACHE_DIR")
    os.environ["PTOWSP_CACHE_DIR"] = str(tmp_path_factory.mktemp("ptowsp-cache"))
    yield
    if previous is None:
        os.environ.pop("PTOWSP_CACHE_DIR", None)
    else:
        os.environ["PTOWSP_CACHE_DIR"] = previous
