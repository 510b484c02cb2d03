"""The inference model's forward pass as a frozen TorchScript trace per input shape, for small live batches.

At batch 1 the cost of a forward is the number of ATen calls and the Python between them, not the arithmetic. The
model is first rearranged for inference (model/inference.py: about 150 ops instead of about a thousand, the same
forecasts to float rounding), then traced, so the calls run without Python, and `torch.jit.freeze` folds the weights
in as constants. On the shared 2-core benchmark machine (hidden 16, encoder 32, one thread) one batch-1 forward takes
2.8 ms of CPU against the training model's 12.6 ms eagerly (and 5.9 ms for a trace of the training model);
benchmarks/latency.py measures it as the "trace" backend. A trace is only valid for the shapes it was made with, so
one is made per distinct set of input shapes, on first use (about a second); a live system asks for the same batch
size on every bar. A model that cannot be traced runs eagerly (said once).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import warnings
from typing import Any

import torch

from foxhunt.data.batch import Batch
from foxhunt.model.inference import InferenceTFT, supported
from foxhunt.model.tft import TemporalFusionTransformer

log = logging.getLogger("foxhunt.api")
FIELDS = tuple(f.name for f in dataclasses.fields(Batch))


class _BatchArgs(torch.nn.Module):
    """A forward (Batch -> scaled quantiles) taking a Batch's tensors as positional arguments (what a trace records)."""

    def __init__(self, forward: torch.nn.Module):
        super().__init__()
        self.inner = forward

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.inner(Batch(**dict(zip(FIELDS, tensors, strict=True))))


class _Quantiles(torch.nn.Module):
    """The training model's forward, quantiles only (for a model `InferenceTFT` cannot run)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.model(batch).quantiles


def inference_forward(model: torch.nn.Module) -> torch.nn.Module:
    """Batch -> scaled quantiles (B, D, Q): the model's weights folded for inference (model/inference.py) when it
    can, else the model itself."""
    if isinstance(model, TemporalFusionTransformer) and supported(model):
        return InferenceTFT(model.eval())
    return _Quantiles(model.eval())


class TracedForward:
    """Scaled quantiles (B, D, Q) of a Batch, by a frozen trace of `model` per input shape (eval mode, no grad)."""

    def __init__(self, model: torch.nn.Module):
        self.model = inference_forward(model)
        self.traces: dict[tuple, torch.jit.ScriptModule] = {}
        self.failed = False

    def __call__(self, batch: Batch) -> torch.Tensor:
        tensors = tuple(getattr(batch, f) for f in FIELDS)
        if self.failed:
            return self.model(batch)
        key = tuple((tuple(t.shape), t.dtype, t.device) for t in tensors)
        trace = self.traces.get(key)
        if trace is None:
            trace = self._trace(tensors)
            if trace is None:
                return self.model(batch)
            self.traces[key] = trace
        return trace(*tensors)

    def _trace(self, tensors: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule | None:
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # TracerWarnings about shape-dependent Python: shapes are fixed here
                self.model(Batch(**dict(zip(FIELDS, tensors, strict=True))))  # folds the weights outside the trace
                return torch.jit.freeze(torch.jit.trace(_BatchArgs(self.model).eval(), tensors, check_trace=False))
        except Exception as e:  # an op the tracer cannot record: the eager model still forecasts
            self.failed = True
            log.warning("the model cannot be traced (%s); forecasting eagerly", " ".join(str(e).split())[:200])
            return None


class OnnxForward:
    """Scaled quantiles (B, D, Q) of a CPU Batch by onnxruntime running the inference model, exported in memory once
    per input shape (about a second). onnxruntime's calls are cheaper than TorchScript's interpreter: on the shared
    benchmark machine (hidden 16, batch 1, one thread) 1.3 ms of CPU per forward against the trace's 2.8. It runs
    live batches (up to LIVE_BATCH windows) on one intra-op thread; larger batches (where the trace is faster: the
    export of the embedding bag is a loop), a device tensor, or anything it cannot do (no onnxruntime, an export
    that fails, said once) go to the trace."""

    LIVE_BATCH = 16

    def __init__(self, model: torch.nn.Module):
        self.fallback = TracedForward(model)
        self.model = self.fallback.model
        self.sessions: dict[tuple, tuple[Any, list[str]]] = {}
        self.failed = not isinstance(self.model, InferenceTFT)

    def __call__(self, batch: Batch) -> torch.Tensor:
        tensors = tuple(getattr(batch, f) for f in FIELDS)
        if self.failed or len(batch) > self.LIVE_BATCH or any(t.device.type != "cpu" for t in tensors):
            return self.fallback(batch)
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        entry = self.sessions.get(key)
        if entry is None:
            entry = self._export(tensors)
            if entry is None:
                return self.fallback(batch)
            self.sessions[key] = entry
        session, names = entry
        return torch.from_numpy(session.run(None, {n: getattr(batch, n).numpy() for n in names})[0])

    def _export(self, tensors: tuple[torch.Tensor, ...]) -> tuple[Any, list[str]] | None:
        try:
            import onnxruntime as ort

            graph = io.BytesIO()
            with warnings.catch_warnings(), torch.no_grad(), torch.inference_mode(False):
                warnings.simplefilter("ignore")  # exporter notices about shape-dependent Python: shapes are fixed
                self.model(Batch(**dict(zip(FIELDS, tensors, strict=True))))  # folds the weights outside the export
                torch.onnx.export(_BatchArgs(self.model).eval(), tensors, graph, dynamo=False, opset_version=17,
                                  input_names=list(FIELDS))
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # a few hundred tiny ops: threads only wait for each other
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only
            session = ort.InferenceSession(graph.getvalue(), options, providers=["CPUExecutionProvider"])
            return session, [i.name for i in session.get_inputs()]
        except Exception as e:  # onnxruntime missing or an op it cannot take: the trace forecasts the same
            self.failed = True
            log.warning("onnxruntime cannot run the model (%s); using the TorchScript trace",
                        " ".join(str(e).split())[:200])
            return None


def live_forward(model: torch.nn.Module) -> OnnxForward | TracedForward:
    """What `Forecaster.update` runs: onnxruntime when installed (extra `onnx`), else the frozen trace."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return TracedForward(model)
    return OnnxForward(model)
