"""`foxhunt export --format onnx`: the forward pass as an ONNX graph, checked against PyTorch, with its sidecar.

Exporter: `torch.onnx.export(dynamo=True)` (torch.export, then onnxscript). The TorchScript exporter
(`dynamo=False`, deprecated in torch 2.9+) fails on this model: it traces LayerNorm's `normalized_shape`
(`x.shape[-1:]`) as a tensor and stops ("Failed to export ... because it is not constant"). The dynamo exporter
keeps LSTM as the ONNX LSTM operator and the attention's causal mask as constants. One operator needs help: the
variable-selection networks sum weighted per-bar terms with `F.embedding_bag`, which onnxscript translates into an
ONNX `Loop` over bags, over 10x slower than PyTorch (benchmarks/RESULTS.md). The model only calls it with fixed-size
bags (2-D indices), so `fixed_size_bags` translates it into Gather, Mul and a ReduceSum over a reshape, parity
unchanged. onnxscript's graph optimizer is off (`optimize=False`): on this graph it left the same operators and cost a
quarter of the export time; onnxruntime optimizes the graph when it loads it anyway.

`Forecaster.update` exports its own graph (model/inference/traced.py: the folded model on live windows, with the
TorchScript exporter, on its first call). One exporter for both was measured (benchmarks/onnx_exporters.py, figures
in benchmarks/RESULTS.md): the dynamo exporter makes the live graph 19-47% slower per batch-1 forecast and its first
call wait seconds instead of a fraction of one; the TorchScript one cannot take this graph (above).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.atomic import atomic_path, write_json
from foxhunt.data.dataset.batch import Batch
from foxhunt.errors import InputError
from foxhunt.export.graph import OUTPUT_NAME, ExportedForward, anchor_channels, dense_inputs
from foxhunt.export.parity import (
    ParityCase,
    ParityResult,
    cardinalities,
    check_parity,
    iter_inputs,
    random_cases,
)
from foxhunt.export.sidecar import sidecar
from foxhunt.model.saved import LoadedModel

log = logging.getLogger("foxhunt.export")
INSTALL_HINT = "pip install 'foxhunt[onnx]'"
EXAMPLE_BATCH = 2  # the traced example; batch 1 would let torch.export specialise the batch axis to 1


def require_onnx() -> tuple[Any, Any]:
    """(onnx, onnxruntime), or an InputError naming the extra to install."""
    try:
        import onnx
        import onnxruntime
        import onnxscript  # noqa: F401  (the dynamo exporter's translator)
    except ImportError as e:
        raise InputError(f"ONNX export needs onnx, onnxscript and onnxruntime ({e.name} is missing): "
                         f"{INSTALL_HINT}") from None
    return onnx, onnxruntime


def fixed_size_bags(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,  # noqa: ANN001
                    per_sample_weights=None, include_last_offset=False, padding_idx=None):  # noqa: ANN001
    """ONNX for `aten::embedding_bag.padding_idx` in weighted-sum mode with bags of equal size (2-D indices, the
    only way the model calls it): rows (N*K, H) weighted, reshaped (N, K, H), summed over K. The three other
    outputs of the ATen op (bag bookkeeping for its backward) are never read."""
    from onnxscript import opset18 as op

    rows = op.Mul(op.Gather(weight, indices, axis=0), op.Unsqueeze(per_sample_weights, op.Constant(value_ints=[1])))
    shape = op.Concat(op.Shape(offsets), op.Constant(value_ints=[-1]), op.Shape(weight, start=1), axis=0)
    out = op.ReduceSum(op.Reshape(rows, shape), op.Constant(value_ints=[1]), keepdims=0)  # (N, H)
    return out, op.Identity(offsets), op.Identity(offsets), op.Identity(offsets)


def export_graph(lm: LoadedModel, path: Path) -> ExportedForward:
    """Write the ONNX graph of `lm`'s forward to `path` (one file, weights inside); returns the wrapped module."""
    module = ExportedForward(lm.model.cpu().eval(), lm.schema).eval()
    gen = torch.Generator().manual_seed(0)
    cards = cardinalities(lm.schema)
    example = tuple(s.example(EXAMPLE_BATCH, cards, gen) for s in module.specs if s.channels)
    batch = torch.export.Dim("batch", min=1)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    # the exporter's progress lines, its notes on torchvision ops this model does not use, and tracing warnings
    with warnings.catch_warnings(), redirect_stdout(StringIO()):
        warnings.simplefilter("ignore")
        quiet.setLevel(logging.ERROR)
        torch.onnx.export(
            module, example, str(path), dynamo=True, input_names=module.present, output_names=[OUTPUT_NAME],
            dynamic_shapes=(tuple({0: batch} for _ in example),),  # one spec per tensor of `*inputs`
            external_data=False, optimize=False,
            custom_translation_table={torch.ops.aten.embedding_bag.padding_idx: fixed_size_bags},
        )
        quiet.setLevel(level)
    return module


class OnnxModel:
    """An exported model in onnxruntime. Call it with a foxhunt `Batch` (like the PyTorch model's forward) to get
    the quantiles (B, D, Q) as a tensor in scaled target units, or `run(inputs)` with the graph's input tensors
    (name -> tensor or array, extra names ignored) to get them as a numpy array."""

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        _, ort = require_onnx()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: not its notes on constant folding while it loads the graph
        self.path = Path(path)
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own types for a missing or foreign file
            raise InputError(f"{self.path}: not a loadable ONNX model ({str(e).splitlines()[0]}); export it again "
                             "with `foxhunt export`") from None
        self.input_names = [i.name for i in self.session.get_inputs()]

    def run(self, inputs: dict[str, Any]) -> np.ndarray:
        tensors = {n: torch.as_tensor(inputs[n]) for n in self.input_names}
        feeds = dict(zip(self.input_names, iter_inputs(tensors, self.input_names), strict=True))
        return self.session.run(None, feeds)[0]  # (B, D, Q)

    def __call__(self, batch: Batch) -> torch.Tensor:
        return torch.from_numpy(self.run(dense_inputs(batch)))  # (B, D, Q)


def onnx_runtime_model(path: str | Path, threads: int = 1) -> OnnxModel:
    """Load an exported model into onnxruntime (CPU, `threads` intra-op threads); see `OnnxModel`."""
    return OnnxModel(path, threads)


def torch_reference(module: ExportedForward) -> Callable[[dict[str, torch.Tensor]], np.ndarray]:
    def run(inputs: dict[str, torch.Tensor]) -> np.ndarray:
        with torch.inference_mode():
            return module(*(inputs[n] for n in module.present)).numpy()
    return run


@dataclass(frozen=True)
class ExportResult:
    path: Path
    sidecar: Path
    parity: ParityResult


def export_onnx(lm: LoadedModel, run_dir: Path, out: Path, real: list[ParityCase] | None = None) -> ExportResult:
    """Export, compare with PyTorch on random windows (batch 1 and 256) and `real` ones, then write `out` and
    `out`.json. ParityError (and nothing written under `out`) when they disagree beyond the limit."""
    require_onnx()
    if out.suffix != ".onnx":
        named = out.with_suffix(".onnx")
        raise InputError(f"--out {out}: name the file *.onnx, e.g. --out {named} (its sidecar is written next to it "
                         f"as {named.name}.json)")
    side = out.with_name(out.name + ".json")
    with atomic_path(out) as tmp:
        module = export_graph(lm, tmp)
        cases = random_cases(lm.schema, anchor=anchor_channels(lm.model_cfg)) + list(real or [])
        parity = check_parity(OnnxModel(tmp).run, torch_reference(module), cases)
        log.info("parity with PyTorch: %s", ", ".join(f"{label} {err:.2g}" for label, err in parity.cases))
        write_json(side, sidecar(lm, run_dir, out.name, module.specs, parity, _opset(tmp)))
    return ExportResult(out, side, parity)


def _opset(path: Path) -> int:
    onnx, _ = require_onnx()
    model = onnx.load(str(path), load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))

