"""The exported forward pass: plain per-window tensors in, scaled quantiles out.

Inside foxhunt a batch carries each distinct bar once and windows as row indices (data/dataset/batch.py); a program in
another language has one window (or a stack of them) and nothing to deduplicate. So the exported graph takes dense
per-window tensors, one per input group, and builds the model's `Batch` from them inside the graph: every window
gets its own rows (`enc_index = arange(B * E)`), which the model computes exactly as it computes shared ones.

Inputs (float32 continuous, int64 categorical codes; a group with no channel is left out of the graph):
  static_cat    (B, Sc)        static categorical codes (the series code, then --static categories)
  static_cont   (B, Sr)        static continuous
  encoder_cat   (B, E, Kc+Oc)  known, then observed categorical codes at the E encoder bars
  encoder_cont  (B, E, Kr+Or)  known continuous (calendar), then observed continuous (scaled) at the encoder bars
  decoder_cat   (B, D, Kc)     known categorical codes at the D forecast steps
  decoder_cont  (B, D, Kr)     known continuous (calendar) at the forecast steps
  anchor        (B, D, Q)      an anchored model's (--anchor) baseline quantiles at the forecast steps, scaled
                               (data/baselines/anchor.py); a model without an anchor has no such input
Positional inputs (the relative time index, the same for every window) are constants of the graph.
Output: quantiles (B, D, Q) in the scaled target space, before unscaling and calibration.

Legend: B batch, E encoder steps, D forecast steps, T = E + D, Q quantiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import FeatureSchema, Kind, Role
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer

POSITIONAL = ("relative_time",)  # known continuous inputs fixed by the position in the window (data/dataset/windows.py)
INPUT_NAMES = ("static_cat", "static_cont", "encoder_cat", "encoder_cont", "decoder_cat", "decoder_cont", "anchor")
OUTPUT_NAME = "quantiles"


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its name, dtype ("int64" / "float32"), shape with "batch" as the dynamic axis, and the
    feature each channel of the last axis carries, in order."""

    name: str
    dtype: str
    shape: tuple[str | int, ...]
    channels: tuple[str, ...]

    @property
    def categorical(self) -> bool:
        return self.dtype == "int64"

    def example(self, batch: int, cardinality: dict[str, int], gen: torch.Generator) -> torch.Tensor:
        """A random input of `batch` windows: N(0, 1) values, or codes uniform over each channel's cardinality."""
        shape = (batch, *self.shape[1:])
        if not self.categorical:
            return torch.randn(shape, generator=gen)  # (B, ..., C)
        cards = torch.tensor([cardinality[c] for c in self.channels], dtype=torch.float64)  # (C,)
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * cards).long()  # (B, ..., C)


def positional_names(schema: FeatureSchema) -> list[str]:
    """The known continuous inputs that are constants of the graph; they must come last (data/dataset/windows.py)."""
    known = schema.names(Role.KNOWN, Kind.CONTINUOUS)
    pos = [n for n in known if n in POSITIONAL]
    if known[len(known) - len(pos):] != pos:
        raise ValueError(f"positional inputs {pos} are not the last known continuous inputs of {known}")
    return pos


def relative_time(encoder_length: int, horizon: int) -> torch.Tensor:
    """(T, 1) the TFT relative time index, -(E-1)/E .. D/E (0 at the origin), as WindowedData builds it."""
    t = torch.arange(encoder_length + horizon, dtype=torch.float32)
    return ((t - (encoder_length - 1)) / encoder_length).view(-1, 1)  # (T, 1)


def anchor_channels(cfg: ModelConfig) -> tuple[str, ...]:
    """The anchor input's channels, one per quantile (`anchor_q0.1`, ...), of an anchored model; none otherwise."""
    return tuple(f"anchor_q{q:g}" for q in cfg.quantiles) if cfg.anchored else ()


def input_specs(schema: FeatureSchema, anchor: tuple[str, ...] = ()) -> list[InputSpec]:
    """All seven input groups in graph order, including empty ones (`ExportedForward.present` drops those);
    `anchor`: the anchor's channels (`anchor_channels`)."""
    cat, cont = Kind.CATEGORICAL, Kind.CONTINUOUS
    e, d = schema.encoder_length, schema.horizon
    pos = positional_names(schema)
    known_cont = [n for n in schema.names(Role.KNOWN, cont) if n not in pos]
    known_cat = schema.names(Role.KNOWN, cat)
    groups = {
        "static_cat": (("batch",), schema.names(Role.STATIC, cat)),
        "static_cont": (("batch",), schema.names(Role.STATIC, cont)),
        "encoder_cat": (("batch", e), known_cat + schema.names(Role.OBSERVED, cat)),
        "encoder_cont": (("batch", e), known_cont + schema.names(Role.OBSERVED, cont)),
        "decoder_cat": (("batch", d), known_cat),
        "decoder_cont": (("batch", d), known_cont),
        "anchor": (("batch", d), list(anchor)),
    }
    return [InputSpec(name, "int64" if name.endswith("_cat") else "float32", (*lead, len(ch)), tuple(ch))
            for name, (lead, ch) in groups.items()]


def dense_inputs(batch: Batch) -> dict[str, torch.Tensor]:
    """The graph inputs of a foxhunt `Batch` (windows as row indices) as dense per-window tensors."""
    e = batch.encoder_length
    kr = batch.dec_cont.shape[1]
    dense = batch.dense()
    known_cont, known_cat = dense["known_cont"][..., :kr], dense["known_cat"]  # (B, T, Kr), (B, T, Kc)
    return {
        "static_cat": batch.static_cat,  # (B, Sc)
        "static_cont": batch.static_cont,  # (B, Sr)
        "encoder_cat": torch.cat([known_cat[:, :e], dense["observed_cat"]], dim=2),  # (B, E, Kc + Oc)
        "encoder_cont": torch.cat([known_cont[:, :e], dense["observed_cont"]], dim=2),  # (B, E, Kr + Or)
        "decoder_cat": known_cat[:, e:],  # (B, D, Kc)
        "decoder_cont": known_cont[:, e:],  # (B, D, Kr)
        # (B, D, Q) an anchored model's; (B, D, 0) otherwise, a group the graph leaves out
        "anchor": batch.anchor if batch.anchor is not None else known_cont.new_zeros(known_cont.shape[0], 0, 0),
    }


class ExportedForward(nn.Module):
    """The model behind dense per-window inputs (the module docstring); `forward(*inputs)` takes the non-empty
    groups in `present` order and returns the quantiles (B, D, Q) in scaled target units."""

    def __init__(self, model: TemporalFusionTransformer, schema: FeatureSchema) -> None:
        super().__init__()
        self.model = model
        self.specs = input_specs(schema, anchor_channels(model.cfg))
        self.present = [s.name for s in self.specs if s.channels]
        self.empty = {s.name: s for s in self.specs if not s.channels}
        self.e, self.d = schema.encoder_length, schema.horizon
        pos = relative_time(self.e, self.d)[:, : len(positional_names(schema))]  # (T, P)
        self.register_buffer("pos_cont", pos, persistent=False)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        x: dict[str, Any] = dict(zip(self.present, inputs, strict=True))
        b = inputs[0].shape[0]
        ref = inputs[0]
        for name, spec in self.empty.items():  # groups without a channel: (B, ..., 0) of the right dtype
            dtype = torch.int64 if spec.categorical else torch.float32
            x[name] = torch.zeros((b, *spec.shape[1:]), dtype=dtype, device=ref.device)
        e, d = self.e, self.d
        enc_cont, dec_cont = x["encoder_cont"], x["decoder_cont"]
        enc_cat, dec_cat = x["encoder_cat"], x["decoder_cat"]
        zeros = torch.zeros(b, dtype=torch.float32, device=ref.device)  # (B,) target fields the forward never reads
        batch = Batch(
            static_cat=x["static_cat"],
            static_cont=x["static_cont"],
            enc_cont=enc_cont.reshape(b * e, enc_cont.shape[2]),  # (B*E, Kr + Or): one row per (window, step)
            enc_cat=enc_cat.reshape(b * e, enc_cat.shape[2]),  # (B*E, Kc + Oc)
            enc_index=torch.arange(b * e, device=ref.device).view(b, e),  # (B, E)
            dec_cont=dec_cont.reshape(b * d, dec_cont.shape[2]),  # (B*D, Kr)
            dec_cat=dec_cat.reshape(b * d, dec_cat.shape[2]),  # (B*D, Kc)
            dec_index=torch.arange(b * d, device=ref.device).view(b, d),  # (B, D)
            pos_cont=self.pos_cont,  # (T, P)
            target=zeros.unsqueeze(1).expand(b, d),
            target_center=zeros,
            target_scale=zeros + 1.0,
            window=torch.zeros(b, dtype=torch.int64, device=ref.device),
            anchor=x["anchor"] if self.model.cfg.anchored else None,  # (B, D, Q)
        )
        return self.model(batch).quantiles  # (B, D, Q)
