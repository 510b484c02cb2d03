"""Running sums of what the TFT reports about itself: variable-selection weights and attention by horizon and lag.

Fixed memory whatever the number of batches: each update reduces its batch on the tensor's own device and moves only
the small sums (a few hundred floats) to the host, so no device tensor outlives its batch. Legend: B batch, E encoder
steps, D forecast steps, T = E + D, V variables, N heads.

Attention lag: the forecast step d (0-based, sequence position E + d) attends to positions p <= E + d (the mask is
causal); its lag is (E + d) - p, so lag 0 is the step itself, lags 1..d are earlier forecast steps (whose known
inputs the decoder sees) and lags d+1..E+d are encoder bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class InterpretationAccumulator:
    def __init__(
        self,
        static_names: Sequence[str],
        encoder_names: Sequence[str],
        decoder_names: Sequence[str],
        encoder_length: int,
        horizon: int,
    ):
        self.names = {
            "static": list(static_names),
            "encoder": list(encoder_names),
            "decoder": list(decoder_names),
        }
        self.encoder_length, self.horizon = int(encoder_length), int(horizon)
        T = self.encoder_length + self.horizon
        self._w = {k: np.zeros(len(v)) for k, v in self.names.items()}  # summed weights per variable
        self._w_n = {k: 0 for k in self.names}  # how many weight vectors were summed
        self._attn = np.zeros((self.horizon, T))  # (D, T) summed attention
        self._attn_n = 0
        self._samples = 0

    def update(self, static_w: Any, encoder_w: Any, decoder_w: Any, attention: Any) -> None:
        """Add one batch. Shapes: static_w (B, Vs), encoder_w (B, E, Ve), decoder_w (B, D, Vd), attention (B, D, T)
        already averaged over heads, or (B, N, D, T) which is averaged here. torch tensors or numpy arrays; any
        argument may be None (e.g. no static variables). Weights are means over samples and, for temporal
        variables, over time steps.
        """
        groups = [
            (k, w)
            for k, w in (("static", static_w), ("encoder", encoder_w), ("decoder", decoder_w))
            if w is not None
        ]
        for key, w in groups:  # check everything before adding anything: a rejected batch leaves no trace
            if tuple(w.shape)[-1] != len(self.names[key]):
                raise ValueError(
                    f"{key} weights have {w.shape[-1]} variables, expected {len(self.names[key])}"
                )
        if attention is not None and tuple(attention.shape)[-2:] != self._attn.shape:
            raise ValueError(
                f"attention has shape {tuple(attention.shape)}, expected (B, [N,] {self.horizon}, {self._attn.shape[1]})"
            )
        for key, w in groups:
            shape = tuple(w.shape)
            self._w[key] += _sum_to_host(w, dims=tuple(range(len(shape) - 1)))  # (V,)
            self._w_n[key] += int(np.prod(shape[:-1]))
        if attention is not None:
            shape = tuple(attention.shape)
            heads = shape[1] if len(shape) == 4 else 1
            self._attn += _sum_to_host(attention, dims=tuple(range(len(shape) - 2))) / heads  # (D, T)
            self._attn_n += shape[0]
        present = [w for _, w in groups] + ([attention] if attention is not None else [])
        self._samples += int(present[0].shape[0]) if present else 0

    def result(self) -> dict[str, Any]:
        """{"static"|"encoder"|"decoder": {name: mean weight}, "attention_by_lag": [[mean weight at lag 0..E+d] for d],
        "encoder_length", "horizon", "n" (samples seen)}; groups never updated hold an empty dict, attention an empty list."""
        out: dict[str, Any] = {}
        for key, names in self.names.items():
            n = self._w_n[key]
            out[key] = {name: float(v / n) for name, v in zip(names, self._w[key], strict=True)} if n else {}
        E = self.encoder_length
        if self._attn_n:
            mean = self._attn / self._attn_n  # (D, T)
            out["attention_by_lag"] = [
                mean[d, E + d :: -1].tolist() for d in range(self.horizon)
            ]  # lag 0..E+d
        else:
            out["attention_by_lag"] = []
        out.update(encoder_length=E, horizon=self.horizon, n=self._samples)
        return out


def _sum_to_host(x: Any, dims: tuple[int, ...]) -> np.ndarray:
    """Sum over `dims` where the data lives (float32 at least), then bring the small result to the host as float64."""
    if hasattr(x, "detach"):  # torch tensor: reduce on its device, move only the sum
        s = x.detach()
        s = s.float() if s.dtype.is_floating_point and s.element_size() < 4 else s
        return s.sum(dim=dims).cpu().double().numpy()
    return np.asarray(x, dtype=np.float64).sum(axis=dims)
