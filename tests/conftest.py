"""Test-wide settings: compiled kernels are cached in a per-session directory, not in ~/.cache;
hypothesis checks properties, not timings (no per-example deadline); the CPU the cpu target
compiles for (PTOWSP_CPU, backends/cpu/isa.py) is in the header, and where this host cannot run
that CPU's code, a test that runs it is skipped saying so (its build and code checks still ran)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from ptowsp.backends.cpu.isa import HostCannotRun, target_cpu

# A 2-core VM stalls for hundreds of ms at times: a 200 ms deadline failed an example that
# took 0.23 ms when hypothesis replayed it.  Speed is measured in benchmarks/, not here.
settings.register_profile("ptowsp", deadline=None)
settings.load_profile("ptowsp")


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    """One cache for the session's pytest-xdist workers (the aicore target's host code is the cpu
    target's, so the two targets' conformance runs share builds); entries are written atomically."""
    previous = os.environ.get("PTOWSP_CACHE_DIR")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp is this session's folder of this worker
        shared = tmp_path_factory.getbasetemp().parent / "ptowsp-cache"
        shared.mkdir(exist_ok=True)
        os.environ["PTOWSP_CACHE_DIR"] = str(shared)
    else:
        os.environ["PTOWSP_CACHE_DIR"] = str(tmp_path_factory.mktemp("ptowsp-cache"))
    yield
    if previous is None:
        os.environ.pop("PTOWSP_CACHE_DIR", None)
    else:
        os.environ["PTOWSP_CACHE_DIR"] = previous


def pytest_report_header(config) -> str:
    cpu = target_cpu()
    runs = cpu.unrunnable_reason()
    return f"ptowsp cpu target: {cpu.level} ({cpu.cpu}, {cpu.vector_bytes}-byte vectors)" + (
        f"; compiled, not run: {runs}" if runs else "")


def pytest_collection_modifyitems(config, items) -> None:
    """The AutoScheduler measures by running: its tests wait for a CPU this host can run."""
    reason = target_cpu().unrunnable_reason()
    if reason:
        for item in items:
            if "autoschedule" in item.path.parts:
                item.add_marker(pytest.mark.skip(reason=f"the AutoScheduler measures by running: {reason}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A program compiled for a CPU this host lacks was built and checked; running it is skipped."""
    try:
        return (yield)
    except HostCannotRun as e:
        pytest.skip(f"compiled, not run: {e}")
