"""The inference model's forward pass as a frozen TorchScript trace per input shape, for small live batches.

At batch 1 the cost of a forward is the number of ATen calls and the Python between them, not the arithmetic. The
model is first rearranged for inference (model/inference/folded.py: about 150 ops instead of about a thousand, the same
forecasts to float rounding), then traced, so the calls run without Python, and `torch.jit.freeze` folds the weights
in as constants: several times less CPU than the training model eagerly, measured by benchmarks/latency.py as the
"trace" backend (figures in benchmarks/RESULTS.md). A trace is only valid for the shapes it was made with, so
one is made per distinct set of input shapes, on first use (about a second); a live system asks for the same batch
size on every bar. A model that cannot be traced runs eagerly (said once). `OnnxForward` (onnxruntime, when
installed) serves `update` without a compile per batch size: one graph for batch 1, one with a dynamic batch axis.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.codes_live import LiveCats
from foxhunt.model.inference.folded import InferenceTFT, supported
from foxhunt.model.tft import TemporalFusionTransformer

log = logging.getLogger("foxhunt.api")
FIELDS = tuple(f.name for f in dataclasses.fields(Batch))
LIVE_INPUTS = ("codes", "enc", "dec", "anchor")  # the live graph's inputs; the anchor an anchored model's only


class _BatchArgs(torch.nn.Module):
    """A forward (Batch -> scaled quantiles) taking a Batch's tensors as positional arguments (what a trace records)."""

    def __init__(self, forward: torch.nn.Module, names: tuple[str, ...] = FIELDS):
        super().__init__()
        self.inner, self.names = forward, names  # the Batch's fields that hold a tensor (anchor: only an anchored one)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.inner(Batch(**dict(zip(self.names, tensors, strict=True))))


class _Quantiles(torch.nn.Module):
    """The training model's forward, quantiles only (for a model `InferenceTFT` cannot run)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.model(batch).quantiles


def inference_forward(model: torch.nn.Module) -> torch.nn.Module:
    """Batch -> scaled quantiles (B, D, Q): the model's weights folded for inference (model/inference/folded.py) when it
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
        names = tuple(f for f in FIELDS if getattr(batch, f) is not None)
        tensors = tuple(getattr(batch, f) for f in names)
        if self.failed:
            return self.model(batch)
        key = (names, *((tuple(t.shape), t.dtype, t.device) for t in tensors))
        trace = self.traces.get(key)
        if trace is None:
            trace = self._trace(names, tensors)
            if trace is None:
                return self.model(batch)
            self.traces[key] = trace
        return trace(*tensors)

    def _trace(self, names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule | None:
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # TracerWarnings about shape-dependent Python: shapes are fixed here
                self.model(Batch(**dict(zip(names, tensors, strict=True))))  # folds the weights outside the trace
                return torch.jit.freeze(torch.jit.trace(_BatchArgs(self.model, names).eval(), tensors,
                                                        check_trace=False))
        except Exception as e:  # an op the tracer cannot record: the eager model still forecasts
            self.failed = True
            log.warning("the model cannot be traced (%s); forecasting eagerly", " ".join(str(e).split())[:200])
            return None


# A live forward: series codes (B,) int64, encoder inputs (B, E, F) and decoder known inputs (B, D, Kr) float32 (the
# rows of data/features/bar_features_live.py), a LiveCats for a model with static or categorical inputs and (keyword
# `anchor`) an anchored model's anchor (B, D, Q) float32 (data/baselines/anchor_live.py) -> scaled quantiles (B, D, Q)
# float32, numpy in and out.
LiveForward = Callable[..., np.ndarray]


class BatchForward:
    """A live forward through a Batch-taking one (the eager model, a trace, a benchmark's backend): the dense live
    windows laid out as a Batch (each window its own E encoder rows and D forecast steps), the inputs that do not
    depend on the bars made once per batch size (a live system asks for the same size on every bar)."""

    def __init__(self, forward: Callable[[Batch], torch.Tensor], encoder_length: int, horizon: int,
                 device: torch.device | None = None):
        self.forward, self.e, self.d = forward, encoder_length, horizon
        self.device = device or torch.device("cpu")
        e, d = encoder_length, horizon
        self.pos = ((torch.arange(e + d) - (e - 1)).float() / e).view(e + d, 1).to(self.device)  # (T, 1)
        self.fixed: dict[int, dict[str, torch.Tensor]] = {}

    def batch(self, codes: np.ndarray, enc: np.ndarray, dec: np.ndarray, cats: LiveCats | None = None,
              anchor: np.ndarray | None = None) -> Batch:
        """`anchor` (B, D, Q): an anchored model's (data/baselines/anchor_live.py); None for a model without one."""
        b, dev = len(codes), self.device
        if b not in self.fixed:
            e, d = self.e, self.d
            self.fixed[b] = {
                "static_cont": torch.zeros(b, 0, device=dev),
                "enc_cat": torch.zeros(b * e, 0, dtype=torch.int64, device=dev),
                "enc_index": torch.arange(b * e, device=dev).view(b, e),
                "dec_cat": torch.zeros(b * d, 0, dtype=torch.int64, device=dev),
                "dec_index": torch.arange(b * d, device=dev).view(b, d),
                "pos_cont": self.pos,
                "target": torch.full((b, d), float("nan"), device=dev),
                "target_center": torch.zeros(b, device=dev),  # the forward never reads them: unscaling is the caller's
                "target_scale": torch.ones(b, device=dev),
                "window": torch.arange(b, device=dev),
            }
        batch = Batch(static_cat=torch.from_numpy(np.ascontiguousarray(codes).reshape(b, 1)).to(dev),  # (B, 1)
                      enc_cont=torch.from_numpy(np.ascontiguousarray(enc).reshape(b * self.e, -1)).to(dev),  # (B*E, F)
                      dec_cont=torch.from_numpy(np.ascontiguousarray(dec).reshape(b * self.d, -1)).to(dev),  # (B*D, Kr)
                      anchor=None if anchor is None else torch.from_numpy(np.ascontiguousarray(anchor)).to(dev),
                      **self.fixed[b])
        return batch if cats is None else self._with_cats(batch, cats)

    def _with_cats(self, batch: Batch, cats: LiveCats) -> Batch:
        """`batch` with the static and categorical inputs of `cats` in place of the empty ones."""
        b, dev = len(cats.static_cat), self.device

        def t(a: np.ndarray, *shape: int) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a).reshape(*shape)).to(dev)

        return dataclasses.replace(
            batch, static_cat=torch.cat([batch.static_cat, t(cats.static_cat, b, -1)], dim=1),  # (B, 1 + Sc)
            static_cont=t(cats.static_cont, b, -1),  # (B, Sr)
            enc_cat=t(cats.enc_cat, b * self.e, -1),  # (B*E, Kc + Oc)
            dec_cat=t(cats.dec_cat, b * self.d, -1))  # (B*D, Kc)

    def __call__(self, codes: np.ndarray, enc: np.ndarray, dec: np.ndarray, cats: LiveCats | None = None,
                 anchor: np.ndarray | None = None) -> np.ndarray:
        batch = self.batch(codes, enc, dec, cats, anchor)
        with torch.inference_mode():
            return self.forward(batch).float().cpu().numpy()


class _LiveArgs(torch.nn.Module):
    """The inference model on dense live windows (codes, enc, dec): what onnxruntime runs. `InferenceTFT.live` when
    the model allows it (a model trained on bars), else its forward on a Batch whose indices, positions and empty
    columns are constants of the graph."""

    def __init__(self, model: torch.nn.Module, batch: Batch):
        super().__init__()
        self.model = model
        for name in ("static_cont", "enc_cat", "enc_index", "dec_cat", "dec_index", "pos_cont", "target",
                     "target_center", "target_scale", "window"):
            self.register_buffer(name, getattr(batch, name).clone(), persistent=False)

    def forward(self, codes: torch.Tensor, enc: torch.Tensor, dec: torch.Tensor, *anchor: torch.Tensor) -> torch.Tensor:
        """`anchor`: an anchored model's (B, D, Q), a fourth input of its graph; none for a model without one."""
        a = anchor[0] if anchor else None
        if isinstance(self.model, InferenceTFT) and self.model.dense_ready():
            return self.model.live(codes, enc, dec, a)  # no index at all
        b = codes.shape[0]
        return self.model(Batch(
            static_cat=codes.view(b, 1), static_cont=self.static_cont, enc_cont=enc.reshape(-1, enc.shape[-1]),
            enc_cat=self.enc_cat, enc_index=self.enc_index, dec_cont=dec.reshape(-1, dec.shape[-1]),
            dec_cat=self.dec_cat, dec_index=self.dec_index, pos_cont=self.pos_cont, target=self.target,
            target_center=self.target_center, target_scale=self.target_scale, window=self.window, anchor=a))


class _Bound:
    """One onnxruntime session with its inputs and output bound to preallocated buffers (IOBinding): a call copies
    the inputs in, runs and copies the output out, with no OrtValue or dict made per call."""

    def __init__(self, session: Any, inputs: tuple[np.ndarray, ...], out_shape: tuple):
        self.session = session
        self.inputs = tuple(a.copy() for a in inputs)  # codes, enc, dec (and an anchored model's anchor)
        self.out = np.empty(out_shape, np.float32)
        self.io = session.io_binding()
        for name, buf in zip(LIVE_INPUTS, self.inputs, strict=False):
            self.io.bind_input(name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
        self.io.bind_output(session.get_outputs()[0].name, "cpu", 0, np.float32, list(out_shape), self.out.ctypes.data)

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        for buf, a in zip(self.inputs, inputs, strict=True):
            buf[...] = a
        self.session.run_with_iobinding(self.io)
        return self.out.copy()


class OnnxForward:
    """The live forward (see `LiveForward`) by onnxruntime running the inference model, exported in memory on first
    use (about a second) as two sessions: one for batch 1, whose graph is `InferenceTFT.live` at one window (129
    nodes for the default model, no index inputs), and one for every larger batch, the same forward with a dynamic
    batch axis, so that a change in the number of series per call costs neither an export nor a trace. Each batch
    size has its inputs and output bound to preallocated buffers (IOBinding, made once per size: microseconds), run
    sequentially on one intra-op thread with every graph optimization: at batch 1 it beats the trace
    (benchmarks/RESULTS.md, latency). A model whose live forward needs per-size constants (not `dense_ready`) gets a
    session per batch size. Static or categorical inputs (`cats`), or anything onnxruntime cannot do (not installed,
    an export that fails, said once), go to the trace, with the same forecasts."""

    def __init__(self, model: torch.nn.Module, encoder_length: int, horizon: int):
        self.trace = TracedForward(model)
        self.model = self.trace.model
        self.fallback = BatchForward(self.trace, encoder_length, horizon)
        self.sessions: dict[int | str, Any] = {}  # 1, "batch" (dynamic axis) or a batch size -> InferenceSession
        self.bound: dict[int, _Bound] = {}  # batch size -> its buffers, bound to its session
        self.failed = not isinstance(self.model, InferenceTFT)

    def __call__(self, codes: np.ndarray, enc: np.ndarray, dec: np.ndarray, cats: LiveCats | None = None,
                 anchor: np.ndarray | None = None) -> np.ndarray:
        if cats is not None:  # the exported graph takes codes and real rows only: the trace takes the rest
            return self.fallback(codes, enc, dec, cats, anchor)
        if self.failed:
            return self.fallback(codes, enc, dec, anchor=anchor)
        inputs = (codes, enc, dec) if anchor is None else (codes, enc, dec, anchor)
        bound = self.bound.get(len(codes))
        if bound is None:
            session = self._session(inputs)
            if session is None:
                return self.fallback(codes, enc, dec, anchor=anchor)
            bound = _Bound(session, tuple(np.ascontiguousarray(a) for a in inputs),
                           (len(codes), dec.shape[1], self.model.model.output.out_features))
            self.bound[len(codes)] = bound
        return bound(*inputs)

    def _session(self, inputs: tuple[np.ndarray, ...]) -> Any:
        """The session for this batch size, exported from these inputs (codes, enc, dec and an anchored model's
        anchor) when there is none yet (None: it failed)."""
        b = len(inputs[0])
        known = self.sessions.get(1 if b == 1 else "batch", self.sessions.get(b))
        if known is not None:
            return known
        batch = self.fallback.batch(*inputs[:3], anchor=inputs[3] if len(inputs) > 3 else None)
        with torch.no_grad(), torch.inference_mode(False):
            self.model(batch)  # folds the weights outside the export; dense_ready from then on
        key: int | str = 1 if b == 1 else "batch" if self.model.dense_ready() else b  # type: ignore[operator]
        session = self._export(batch, inputs, dynamic=key == "batch")
        if session is not None:
            self.sessions[key] = session
        return session

    def _export(self, batch: Batch, inputs: tuple[np.ndarray, ...], dynamic: bool) -> Any:
        """An onnxruntime session of `_LiveArgs` traced on these inputs; `dynamic`: with a batch axis of any size
        (traced at two or more windows, so that no batch-1 shortcut of `InferenceTFT.live` is recorded)."""
        try:
            import onnxruntime as ort

            args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs)
            names = [*LIVE_INPUTS[:len(args)], "quantiles"]
            graph = io.BytesIO()
            with warnings.catch_warnings(), torch.no_grad(), torch.inference_mode(False):
                warnings.simplefilter("ignore")  # exporter notices about shape-dependent Python: shapes are fixed
                torch.onnx.export(_LiveArgs(self.model, batch).eval(), args, graph, dynamo=False, opset_version=17,
                                  input_names=names[:-1], output_names=names[-1:],
                                  dynamic_axes={n: {0: "batch"} for n in names} if dynamic else None)
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.intra_op_num_threads = 1  # a hundred tiny ops: threads only wait for each other
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only
            return ort.InferenceSession(graph.getvalue(), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime missing or an op it cannot take: the trace forecasts the same
            self.failed = True
            log.warning("onnxruntime cannot run the model (%s); using the TorchScript trace",
                        " ".join(str(e).split())[:200])
            return None


def live_forward(model: torch.nn.Module, encoder_length: int, horizon: int, device: torch.device) -> LiveForward:
    """What `Forecaster.update` runs: onnxruntime when installed (extra `onnx`) and the model is on the CPU, else the
    frozen trace."""
    if device.type == "cpu":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            pass
        else:
            return OnnxForward(model, encoder_length, horizon)
    return BatchForward(TracedForward(model), encoder_length, horizon, device)
