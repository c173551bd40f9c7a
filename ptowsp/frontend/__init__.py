"""Frontends: other formats' models as ptowsp Workloads (`pw.frontend.from_onnx`)."""

from ptowsp.frontend.onnx_import import ValueNeeded, from_onnx

__all__ = ["ValueNeeded", "from_onnx"]
