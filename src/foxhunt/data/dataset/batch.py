"""The batch that flows from the data layer into the model: the inputs of each *row* once, and windows as indices.

Consecutive windows share all but one of their bars, so a batch carries the inputs of every distinct bar it touches
once (`enc_cont`, `enc_cat` for bars at encoder positions, `dec_cont`, `dec_cat` for bars at forecast positions) and
each window as a row index per position (`enc_index`, `dec_index`). The model does its per-bar work (embeddings,
the per-variable GRNs of the variable-selection networks) on those rows and gathers the results into windows, so
that work shrinks by up to the encoder length when windows overlap. Inputs that depend only on the position in the
window (the relative time index) are the same for every window and travel once per position (`pos_cont`).

`Batch.from_dense` builds a batch from per-window tensors, one row per (window, position): the layout of a batch
whose windows share nothing, used by tests and the memory probe (the worst case for memory).

Legend: B batch, E encoder steps, D forecast steps, T = E + D, Re / Rd distinct bars at encoder / forecast
positions, Kr / Kc known continuous / categorical inputs that vary per bar, P positional known continuous inputs,
Or / Oc observed continuous / categorical inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where tensors are made: prepare's worker processes (data/prepare) never need it
    import torch

# Fields indexed by window (sliced for micro-batches); the row and position tensors are shared by all windows.
_PER_WINDOW = ("static_cat", "static_cont", "enc_index", "dec_index", "target", "target_center", "target_scale",
               "window", "anchor")


@dataclass
class Batch:
    static_cat: torch.Tensor  # (B, Sc) int64
    static_cont: torch.Tensor  # (B, Sr) float32
    enc_cont: torch.Tensor  # (Re, Kr + Or) float32: known continuous, then observed continuous, per bar
    enc_cat: torch.Tensor  # (Re, Kc + Oc) int64: known categorical, then observed categorical, per bar
    enc_index: torch.Tensor  # (B, E) int64 into the Re encoder rows
    dec_cont: torch.Tensor  # (Rd, Kr) float32: known continuous per bar (observed inputs never reach forecast steps)
    dec_cat: torch.Tensor  # (Rd, Kc) int64
    dec_index: torch.Tensor  # (B, D) int64 into the Rd forecast rows
    pos_cont: torch.Tensor  # (T, P) float32: known continuous inputs fixed by the position (relative time)
    target: torch.Tensor  # (B, D) float32, scaled: (raw - center) / scale
    target_center: torch.Tensor  # (B,) float32
    target_scale: torch.Tensor  # (B,) float32, > 0
    window: torch.Tensor  # (B,) int64, the window ids (to map forecasts back to series / timestamps)
    anchor: torch.Tensor | None = None  # (B, D, Q) float32, scaled: the anchor's quantiles (--anchor); None: none

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(**{f.name: _on(getattr(self, f.name), device, non_blocking) for f in fields(self)})

    def __len__(self) -> int:
        return int(self.target.shape[0])

    @property
    def encoder_length(self) -> int:
        return int(self.enc_index.shape[1])

    def slice(self, start: int, stop: int) -> Batch:
        """Windows start..stop (views, no copy): micro-batches for OOM recovery. The row tensors stay whole."""
        return Batch(**{f.name: (getattr(self, f.name)[start:stop] if f.name in _PER_WINDOW
                                 and getattr(self, f.name) is not None else getattr(self, f.name)) for f in fields(self)})

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (getattr(self, f.name) for f in fields(self))
                   if t is not None)

    def unscale(self, y: torch.Tensor) -> torch.Tensor:
        """Scaled target-space values (B, D, ...) back to the target's own units."""
        shape = (-1,) + (1,) * (y.dim() - 1)
        return y * self.target_scale.view(shape) + self.target_center.view(shape)

    # -- per-window views: for tests, audits and the layout of a batch whose windows share no bar ------------------
    def dense(self) -> dict[str, torch.Tensor]:
        """The inputs as per-window tensors: known_cat (B, T, Kc), known_cont (B, T, Kr + P) with the positional
        inputs last, observed_cat (B, E, Oc), observed_cont (B, E, Or)."""
        import torch

        b, e = self.enc_index.shape
        kr, kc = self.dec_cont.shape[1], self.dec_cat.shape[1]
        enc_cont, enc_cat = self.enc_cont[self.enc_index], self.enc_cat[self.enc_index]  # (B, E, .)
        dec_cont, dec_cat = self.dec_cont[self.dec_index], self.dec_cat[self.dec_index]  # (B, D, .)
        known_rows = torch.cat([enc_cont[..., :kr], dec_cont], dim=1)  # (B, T, Kr)
        pos = self.pos_cont.unsqueeze(0).expand(b, -1, -1)  # (B, T, P)
        return {
            "known_cat": torch.cat([enc_cat[..., :kc], dec_cat], dim=1),
            "known_cont": torch.cat([known_rows, pos], dim=2),
            "observed_cat": enc_cat[..., kc:],
            "observed_cont": enc_cont[..., kr:],
        }

    @staticmethod
    def from_dense(
        static_cat: torch.Tensor,  # (B, Sc)
        static_cont: torch.Tensor,  # (B, Sr)
        known_cat: torch.Tensor,  # (B, T, Kc)
        known_cont: torch.Tensor,  # (B, T, Kr): every known input, positional ones included, varies per window
        observed_cat: torch.Tensor,  # (B, E, Oc)
        observed_cont: torch.Tensor,  # (B, E, Or)
        target: torch.Tensor,  # (B, D)
        target_center: torch.Tensor,
        target_scale: torch.Tensor,
        window: torch.Tensor,
    ) -> Batch:
        """One row per (window, position): no bar shared, no positional inputs (all known inputs are per row). Ten
        tensors, not a record: they are the dense form itself, each one of the Batch's fields or two of them."""
        import torch

        b, e = observed_cont.shape[:2]
        t = known_cont.shape[1]
        d = t - e
        dev = known_cont.device
        return Batch(
            static_cat=static_cat,
            static_cont=static_cont,
            enc_cont=torch.cat([known_cont[:, :e], observed_cont], dim=2).reshape(b * e, -1),  # (B*E, Kr + Or)
            enc_cat=torch.cat([known_cat[:, :e], observed_cat], dim=2).reshape(b * e, -1),  # (B*E, Kc + Oc)
            enc_index=torch.arange(b * e, device=dev).view(b, e),
            dec_cont=known_cont[:, e:].reshape(b * d, -1),  # (B*D, Kr)
            dec_cat=known_cat[:, e:].reshape(b * d, -1),
            dec_index=torch.arange(b * d, device=dev).view(b, d),
            pos_cont=known_cont.new_zeros(t, 0),
            target=target,
            target_center=target_center,
            target_scale=target_scale,
            window=window,
        )


def _on(t: torch.Tensor | None, device: torch.device | str, non_blocking: bool) -> torch.Tensor | None:
    return None if t is None else t.to(device, non_blocking=non_blocking)
