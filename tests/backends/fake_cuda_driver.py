"""A stand-in for `cuda.bindings.driver` that runs launches on the host emulator.

Device memory is host memory (a pointer is a numpy buffer's address), and
cuLaunchKernel decodes its `kernelParams` the way the real driver does
(an array of addresses, each of one argument's value), then runs the
kernel's blocks with ptowsp.backends.cuda.emulate.  So the cuda target's
executable (memory, uploads, argument order, launch shapes, host tasks,
event times) is tested on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import enum
import types

import numpy as np

from ptowsp.backends.cuda.emulate import run_block
from ptowsp.backends.cuda.spmd import BLOCK_AXES

SUCCESS = 0
KERNEL_MILLISECONDS = 0.25


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1


class CUdevice_attribute(enum.IntEnum):  # noqa: N801 - the driver's own name
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8


def make(kernels: dict) -> types.ModuleType:
    """A fake driver module; `kernels` maps entry-point names to GpuKernels (filled as programs are built)."""
    memory: dict[int, np.ndarray] = {}
    launches: list[tuple] = []
    ok = CUresult.CUDA_SUCCESS

    def alloc(nbytes):
        block = np.zeros(nbytes, np.uint8)
        memory[block.ctypes.data] = block
        return ok, block.ctypes.data

    def copy(dst, src, nbytes, *stream):
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return (ok,)

    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        kernel = kernels[function]
        assert (gx, gy, gz) == kernel.blocks and (bx, by, bz) == kernel.threads and shared == 0
        buffers = (*kernel.inputs, *kernel.outputs)
        count = len(buffers) + len(kernel.grid)
        addresses = np.frombuffer((ctypes.c_uint64 * count).from_address(params), np.uint64)
        values = [ctypes.c_uint64.from_address(int(a)).value for a in addresses]
        arrays = {}
        for b, pointer in zip(buffers, values, strict=False):
            size = int(np.prod(b.shape)) * np.dtype(b.dtype).itemsize
            raw = np.frombuffer((ctypes.c_char * max(size, 1)).from_address(pointer), np.uint8)[:size]
            arrays[b.name] = raw.view(b.dtype).reshape(b.shape)
        grid = {name: v for (name, _), v in zip(kernel.grid, values[len(buffers):], strict=True)}
        launches.append((function, tuple(grid.values())))
        for block in np.ndindex(*kernel.blocks):
            run_block(kernel, arrays, {**grid, **dict(zip(BLOCK_AXES, block, strict=True))})
        return (ok,)

    attributes = {CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: 48 * 1024}
    fake = types.ModuleType("cuda.bindings.driver")
    fake.__dict__.update(
        CUresult=CUresult, CUdevice_attribute=CUdevice_attribute, memory=memory, launches=launches,
        cuGetErrorString=lambda status: (ok, b"fake error"),
        cuInit=lambda flags: (ok,), cuDeviceGetCount=lambda: (ok, 1), cuDeviceGet=lambda n: (ok, n),
        cuDeviceGetAttribute=lambda attribute, device: (ok, attributes[attribute]),
        cuDeviceGetName=lambda n, device: (ok, b"Fake GPU".ljust(n, b"\0")),
        cuDevicePrimaryCtxRetain=lambda device: (ok, "context"), cuCtxSetCurrent=lambda context: (ok,),
        cuMemAlloc=alloc, cuMemFree=lambda pointer: (memory.pop(int(pointer), None), ok)[1:],
        cuMemcpyHtoD=copy, cuMemcpyDtoH=copy, cuMemcpyDtoDAsync=copy,
        cuModuleLoadData=lambda image: (ok, image), cuModuleGetFunction=lambda module, name: (ok, name.decode()),
        cuStreamCreate=lambda flags: (ok, object()), cuEventCreate=lambda flags: (ok, object()),
        cuEventRecord=lambda event, stream: (ok,), cuStreamSynchronize=lambda stream: (ok,),
        cuEventElapsedTime=lambda start, end: (ok, KERNEL_MILLISECONDS), cuLaunchKernel=launch)
    return fake
