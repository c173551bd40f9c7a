"""Test-wide settings: compiled kernels are cached in a per-session directory, not in ~/.cache;
hypothesis checks properties, not timings (no per-example deadline)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# A 2-core VM stalls for hundreds of ms at times: a 200 ms deadline failed an example that
# took 0.23 ms when hypothesis replayed it.  Speed is measured in benchmarks/, not here.
settings.register_profile("ptowsp", deadline=None)
settings.load_profile("ptowsp")


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    previous = os.environ.get("PTOWSP_CACHE_DIR")
    os.environ["PTOWSP_CACHE_DIR"] = str(tmp_path_factory.mktemp("ptowsp-cache"))
    yield
    if previous is None:
        os.environ.pop("PTOWSP_CACHE_DIR", None)
    else:
        os.environ["PTOWSP_CACHE_DIR"] = previous
