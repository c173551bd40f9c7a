"""Frontends: other formats' models as ptowsp Workloads (`pw.frontend.from_onnx`)."""

from ptowsp.frontend.onnx_import import from_onnx
from ptowsp.frontend.onnx_importer import ValueNeeded

__all__ = ["ValueNeeded", "from_onnx"]
