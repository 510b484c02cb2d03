"""The batch that flows from the data layer into the model: a handful of tensors with fixed shapes.

Legend: B batch, E encoder steps, D forecast steps (horizon), T = E + D.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class Batch:
    static_cat: torch.Tensor  # (B, Sc) int64
    static_cont: torch.Tensor  # (B, Sr) float32
    known_cat: torch.Tensor  # (B, T, Kc) int64, encoder and forecast steps
    known_cont: torch.Tensor  # (B, T, Kr) float32
    observed_cat: torch.Tensor  # (B, E, Oc) int64, encoder steps only
    observed_cont: torch.Tensor  # (B, E, Or) float32
    target: torch.Tensor  # (B, D) float32, scaled: (raw - center) / scale
    target_center: torch.Tensor  # (B,) float32
    target_scale: torch.Tensor  # (B,) float32, > 0
    window: torch.Tensor  # (B,) int64, the window ids (to map forecasts back to series / timestamps)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def __len__(self) -> int:
        return int(self.target.shape[0])

    def slice(self, start: int, stop: int) -> Batch:
        """Rows start..stop of every tensor (views, no copy): micro-batches for OOM recovery."""
        return Batch(**{f.name: getattr(self, f.name)[start:stop] for f in fields(self)})

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (getattr(self, f.name) for f in fields(self)))

    def unscale(self, y: torch.Tensor) -> torch.Tensor:
        """Scaled target-space values (B, D, ...) back to the target's own units."""
        shape = (-1,) + (1,) * (y.dim() - 1)
        return y * self.target_scale.view(shape) + self.target_center.view(shape)
