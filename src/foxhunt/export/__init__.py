"""Export a trained model for other runtimes: the forward pass as ONNX, checked against PyTorch, with a sidecar
that says how to build its inputs (docs/reference/model-format.md). onnx / onnxruntime are the optional extra `onnx`."""

from foxhunt.export.onnx import ExportResult, OnnxModel, export_onnx, onnx_runtime_model
from foxhunt.export.parity import MAX_RELATIVE_ERROR, ParityError

__all__ = ["MAX_RELATIVE_ERROR", "ExportResult", "OnnxModel", "ParityError", "export_onnx", "onnx_runtime_model"]
