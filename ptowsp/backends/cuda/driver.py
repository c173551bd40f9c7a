"""The few CUDA driver calls the cuda target makes, through `cuda.bindings.driver` (cuda-bindings).

Every call returns (CUresult, values...) there; `call` turns a failure into
a ptowsp error naming the call and the driver's own message.  One device
(GPU 0) and its primary context serve the process; a thread makes the
context current before its first call (`Device.enter`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ptowsp.errors import BuildError, PtowspError
from ptowsp.once import once


class CudaError(PtowspError, RuntimeError):
    """A CUDA driver call failed."""


def _driver():
    from cuda.bindings import driver  # optional dependency: `pip install 'ptowsp[cuda]'`

    return driver


def call(name: str, *args):
    """driver.<name>(*args), its values (one or a tuple), or CudaError."""
    driver = _driver()
    result = getattr(driver, name)(*args)
    status, values = result[0], result[1:]
    if status != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(status)
        message = text.decode() if isinstance(text, bytes) else str(text)
        raise CudaError(f"{name} failed: {status.name if hasattr(status, 'name') else status}: {message}")
    return values[0] if len(values) == 1 else values


@once
def unavailable_reason() -> str | None:
    """None when a CUDA driver and a GPU are here, else why not (checked once per process)."""
    try:
        _driver()
    except ImportError:
        return "the cuda-bindings package is not installed (pip install 'ptowsp[cuda]')"
    try:
        call("cuInit", 0)
        count = call("cuDeviceGetCount")
    except Exception as e:  # noqa: BLE001 - no driver library, no device: any failure means no GPU here
        return f"no CUDA driver: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    return None if count > 0 else "the CUDA driver sees no GPU"


@dataclass(frozen=True)
class Device:
    """GPU 0: its primary context and what code generation needs to know about it."""

    handle: object
    context: object
    name: str
    arch: int  # compute capability as 10 * major + minor
    max_shared_bytes: int  # static shared memory per block

    def enter(self) -> None:
        """Make the context current on the calling thread (cheap when it already is)."""
        local = _current
        if getattr(local, "context", None) is not self.context:
            call("cuCtxSetCurrent", self.context)
            local.context = self.context


_current = threading.local()


@once
def device() -> Device:
    reason = unavailable_reason()
    if reason is not None:
        raise BuildError(f"target 'cuda' is unavailable here: {reason}")
    driver = _driver()
    handle = call("cuDeviceGet", 0)
    attribute = driver.CUdevice_attribute
    major = call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)
    minor = call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)
    shared = call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, handle)
    name = call("cuDeviceGetName", 256, handle)
    context = call("cuDevicePrimaryCtxRetain", handle)
    found = Device(handle, context, bytes(name).split(b"\0")[0].decode(), 10 * major + minor, shared)
    found.enter()
    return found


class Memory:
    """One device allocation of `nbytes` (at least 1), freed with the object."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.pointer = int(call("cuMemAlloc", max(1, nbytes)))

    def upload(self, array: np.ndarray) -> None:
        host = np.ascontiguousarray(array)
        call("cuMemcpyHtoD", self.pointer, host.ctypes.data, host.nbytes)

    def download(self, array: np.ndarray) -> None:
        assert array.flags.c_contiguous and array.nbytes <= self.nbytes
        call("cuMemcpyDtoH", array.ctypes.data, self.pointer, array.nbytes)

    def __del__(self) -> None:
        try:
            call("cuMemFree", self.pointer)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone first
            pass


class Module:
    """PTX loaded into the current context; its kernels by name."""

    def __init__(self, ptx: str):
        self.handle = call("cuModuleLoadData", ptx.encode() + b"\0")
        self.functions: dict[str, object] = {}

    def function(self, symbol: str):
        if symbol not in self.functions:
            self.functions[symbol] = call("cuModuleGetFunction", self.handle, symbol.encode())
        return self.functions[symbol]


def kernel_arguments(pointers: tuple[int, ...], coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """cuLaunchKernel's `kernelParams`: an array of addresses, each of one argument's value
    (64-bit pointers, then 64-bit grid coordinates).  Both arrays must outlive the launch call."""
    values = np.array([*pointers, *coords], dtype=np.uint64)  # coordinates are >= 0: the same bits as int64
    addresses = np.array([values.ctypes.data + 8 * n for n in range(len(values))], dtype=np.uint64)
    return values, addresses


class Stream:
    """A stream with a pair of events that time what runs on it."""

    def __init__(self) -> None:
        self.handle = call("cuStreamCreate", 0)
        self.start = call("cuEventCreate", 0)
        self.end = call("cuEventCreate", 0)

    def launch(self, function, blocks: tuple[int, ...], threads: tuple[int, ...], arguments: np.ndarray) -> float:
        """Launch, wait for it, and return the kernel's seconds by the events around it."""
        call("cuEventRecord", self.start, self.handle)
        call("cuLaunchKernel", function, *blocks, *threads, 0, self.handle, arguments.ctypes.data, 0)
        call("cuEventRecord", self.end, self.handle)
        call("cuStreamSynchronize", self.handle)
        return call("cuEventElapsedTime", self.start, self.end) / 1e3
