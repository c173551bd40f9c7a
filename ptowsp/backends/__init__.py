"""Backends: the registry of targets and `build`.  Targets register here, explicitly."""

from ptowsp.backends.base import Backend, Executable, backend, register, targets
from ptowsp.backends.build import Built, build
from ptowsp.backends.aicore import AicoreBackend, DeviceModel
from ptowsp.backends.cpu import CpuBackend
from ptowsp.backends.cuda import CudaBackend
from ptowsp.backends.numpy import NumpyBackend

register(NumpyBackend())
register(CpuBackend())
register(AicoreBackend())
register(CudaBackend())  # usable only where a CUDA driver and a GPU are present

__all__ = ["Backend", "DeviceModel", "Built", "Executable", "backend", "build", "register", "targets"]
