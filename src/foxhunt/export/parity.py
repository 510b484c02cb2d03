"""Does the exported graph compute what PyTorch computes? Windows to compare on, and the error measure.

Relative error per output element: |onnx - torch| / max(|torch|, 1). The outputs are quantiles in the scaled
target space, where 1 is one target scale (a standard deviation or a trailing volatility) and typical values are of
that order. A quantile near zero (a median return, say) is the sum of terms of order 1 whose float32 rounding
(about 1e-7 each) does not shrink with the sum: divided by the tiny value itself that rounding reads as a large
"relative" error (measured: 5e-7 absolute on a value of 7e-4, "relative" 7e-4, on a correct export) although it is a
ten-millionth of the unit the forecast is expressed in. So below one scaled unit the error is measured in scaled
units, above it relative to the value. The limit, MAX_RELATIVE_ERROR = 1e-5, is about 100 float32 roundings.

Legend: B batch, D forecast steps, Q quantiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.schema import FeatureSchema
from foxhunt.export.graph import dense_inputs, input_specs

MAX_RELATIVE_ERROR = 1e-5
ERROR_DEFINITION = "max over outputs of |onnx - torch| / max(|torch|, 1), in scaled target units"
PARITY_BATCHES = (1, 256)


class ParityError(Exception):
    """The exported graph disagrees with PyTorch beyond MAX_RELATIVE_ERROR: a runtime failure (exit status 1)."""

    exit_code = 1


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """Max |got - want| / max(|want|, 1) (see the module docstring); inf when shapes differ or got is not finite."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.isfinite(got).all():
        return float("inf")
    return float((np.abs(got - want) / np.maximum(np.abs(want), 1.0)).max(initial=0.0))


@dataclass(frozen=True)
class ParityCase:
    """A set of windows to compare on: `inputs` (graph input name -> tensor) and a label for messages."""

    label: str
    inputs: dict[str, torch.Tensor]

    @property
    def batch(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


@dataclass(frozen=True)
class ParityResult:
    max_relative_error: float
    cases: tuple[tuple[str, float], ...]  # (label, error) per case

    def to_dict(self) -> dict:
        return {"definition": ERROR_DEFINITION, "limit": MAX_RELATIVE_ERROR,
                "max_relative_error": self.max_relative_error,
                "cases": [{"windows": label, "max_relative_error": err} for label, err in self.cases]}


def cardinalities(schema: FeatureSchema) -> dict[str, int]:
    return {f.name: f.cardinality for f in schema.features if f.cardinality}


def random_cases(schema: FeatureSchema, seed: int = 0, batches: tuple[int, ...] = PARITY_BATCHES,
                 anchor: tuple[str, ...] = ()) -> list[ParityCase]:
    """Random windows at each batch size: N(0, 1) continuous inputs (scaled inputs are of that order; the anchor's
    quantiles too), codes uniform over each categorical's cardinality. `anchor`: graph.anchor_channels."""
    gen = torch.Generator().manual_seed(seed)
    cards = cardinalities(schema)
    return [ParityCase(f"{b} random", {s.name: s.example(b, cards, gen) for s in input_specs(schema, anchor)})
            for b in batches]


def real_cases(data: PreparedData, batches: tuple[int, ...] = PARITY_BATCHES) -> list[ParityCase]:
    """Real windows of `data` (prepared for the model): the last one alone, then up to 256 spread evenly over all."""
    ids = data.splits["test"]
    out = []
    for b in batches:
        pick = ids[-1:] if b == 1 else ids[torch.linspace(0, len(ids) - 1, min(b, len(ids))).round().long()]
        out.append(ParityCase(f"{len(pick)} real", dense_inputs(data.windows.batch(pick))))
    return out


def check_parity(run: Callable[[dict[str, torch.Tensor]], np.ndarray],
                 reference: Callable[[dict[str, torch.Tensor]], np.ndarray], cases: list[ParityCase]) -> ParityResult:
    """Compare `run` (the exported graph) with `reference` (PyTorch) on every case; ParityError names the first case
    over the limit and its error."""
    errors = tuple((c.label, relative_error(run(c.inputs), reference(c.inputs))) for c in cases)
    worst = max(err for _, err in errors)
    for label, err in errors:
        if not err <= MAX_RELATIVE_ERROR:
            raise ParityError(f"the exported model disagrees with PyTorch on {label} windows: max relative error "
                              f"{err:.3g} > {MAX_RELATIVE_ERROR:g} ({ERROR_DEFINITION})")
    return ParityResult(worst, errors)


def iter_inputs(inputs: dict[str, torch.Tensor], names: list[str]) -> Iterator[np.ndarray]:
    """The named inputs as contiguous numpy arrays, in `names` order."""
    for n in names:
        yield np.ascontiguousarray(inputs[n].detach().cpu().numpy())
