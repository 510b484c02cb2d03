"""The Temporal Fusion Transformer (Lim, Arik, Loeff, Pfister, IJF 2021), batched; see docs/tft.md for the checklist.

Data flow for one batch (B samples, E encoder steps, D forecast steps, T = E + D, H hidden, Q quantiles):

  static inputs -> static VSN -> 4 static GRNs -> c_s (VSN context), c_e (enrichment), c_c, c_h (LSTM init)
  observed + known[:E] -> encoder VSN(c_s) -> encoder LSTM from (c_h, c_c) ─┐
  known[E:]            -> decoder VSN(c_s) -> decoder LSTM from encoder state ┴-> gated skip (φ̃, B,T,H)
  φ̃ -> static enrichment GRN(c_e) -> θ (B,T,H) -> causal interpretable attention with queries at the D forecast steps
    -> gated skip -> position-wise GRN -> gated skip over the whole temporal block -> quantile head -> (B, D, Q)

The encoder and decoder VSNs do their per-variable work once per distinct bar of the batch and gather it into windows
(model/selection.py, data/dataset/batch.py); the result is the same as per (window, position).

Variable order of the interpretation weights (what `variable_names` returns):
  static  = static categorical, static continuous
  encoder = known categorical, known continuous, observed categorical, observed continuous
  decoder = known categorical, known continuous (the first Vd encoder variables are the same inputs)

Deliberate choices where the paper is silent: with `lstm_layers > 1` the LSTMs apply dropout between layers (as
pytorch-forecasting does), and the initial state (c_h, c_c) is repeated for every layer. A group with no inputs (no
static inputs, no known inputs) is replaced by a learned constant embedding, so every shape stays the same. The
quantile head is the paper's linear map per quantile, or (`--quantile-head tied`) the median plus softplus gaps, which
cannot cross (model/quantile_head.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import FeatureSchema, InputSizes, Kind, Role
from foxhunt.model.attention import InterpretableMultiHeadAttention
from foxhunt.model.config import ModelConfig
from foxhunt.model.layers import (
    CategoricalEmbedding,
    ContinuousEmbedding,
    GateAddNorm,
    GatedResidualNetwork,
    StackedGRN,
)
from foxhunt.model.quantile_head import quantile_head
from foxhunt.model.selection import Terms, VariableSelectionNetwork, merge


@dataclass
class TFTOutput:
    """Quantile forecasts and, when asked for, the model's own interpretation (per sample; small, see shapes)."""

    quantiles: torch.Tensor  # (B, D, Q) in the scaled target space; `Batch.unscale` maps back
    static_weights: torch.Tensor | None = None  # (B, Vs) static variable-selection weights
    encoder_weights: torch.Tensor | None = None  # (B, E, Ve)
    decoder_weights: torch.Tensor | None = None  # (B, D, Vd)
    attention: torch.Tensor | None = (
        None  # (B, D, T) head-averaged attention of each forecast step over all positions
    )


def variable_names(schema: FeatureSchema) -> tuple[list[str], list[str], list[str]]:
    """Names in the order of the static, encoder and decoder weight columns of `TFTOutput`."""
    cat, cont = Kind.CATEGORICAL, Kind.CONTINUOUS
    static = schema.names(Role.STATIC, cat) + schema.names(Role.STATIC, cont)
    known = schema.names(Role.KNOWN, cat) + schema.names(Role.KNOWN, cont)
    observed = schema.names(Role.OBSERVED, cat) + schema.names(Role.OBSERVED, cont)
    return static, known + observed, known


def required_anchor(anchor: torch.Tensor | None) -> torch.Tensor:
    """An anchored model's anchor (B, D, Q), from a batch or a live call; an error where none was given, which would
    otherwise forecast the correction alone."""
    if anchor is None:
        raise ValueError("an anchored model (--anchor) forecasts from its anchor; none was given")
    return anchor


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars (shared tensors counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class TemporalFusionTransformer(nn.Module):
    """Multi-horizon quantile forecaster. `forward(batch)` -> `TFTOutput` with quantiles (B, D, Q).

    Shapes are fixed by `sizes` (from the feature schema) and `cfg` (E = cfg.encoder_length, D = cfg.horizon).
    With `cfg.activation_checkpointing` the variable-selection networks and GRN blocks are recomputed in backward
    during training (same outputs and gradients, less activation memory).
    """

    def __init__(self, sizes: InputSizes, cfg: ModelConfig) -> None:
        super().__init__()
        self.sizes, self.cfg = sizes, cfg
        # A switch, not only the config: the out-of-memory ladder turns it on mid-run (train/step.py).
        self.activation_checkpointing = cfg.activation_checkpointing
        h, p = cfg.hidden_size, cfg.dropout
        # Input transformations: one embedding table per group (offsets inside), one broadcast linear per group.
        self.static_cat = CategoricalEmbedding(sizes.static_cat, h)
        self.static_cont = ContinuousEmbedding(sizes.static_cont, h)
        self.known_cat = CategoricalEmbedding(sizes.known_cat, h)
        self.known_cont = ContinuousEmbedding(sizes.known_cont, h)
        self.observed_cat = CategoricalEmbedding(sizes.observed_cat, h)
        self.observed_cont = ContinuousEmbedding(sizes.observed_cont, h)
        # Variable selection (static without context; temporal ones with c_s).
        self.static_vsn = VariableSelectionNetwork(sizes.n_static, h, p, context=False)
        self.encoder_vsn = VariableSelectionNetwork(sizes.n_encoder, h, p, context=True)
        self.decoder_vsn = VariableSelectionNetwork(sizes.n_decoder, h, p, context=True)
        # Static covariate encoders: four GRNs (c_s, c_e, c_c, c_h) as one stacked GRN.
        self.static_contexts = StackedGRN(4, h, p)
        # Sequence-to-sequence LSTM.
        lstm_dropout = p if cfg.lstm_layers > 1 else 0.0
        self.encoder_lstm = nn.LSTM(h, h, cfg.lstm_layers, batch_first=True, dropout=lstm_dropout)
        self.decoder_lstm = nn.LSTM(h, h, cfg.lstm_layers, batch_first=True, dropout=lstm_dropout)
        self.post_lstm = GateAddNorm(h, h, p)
        # Temporal fusion decoder.
        self.enrichment = GatedResidualNetwork(h, h, h, p, d_context=h)
        self.attention = InterpretableMultiHeadAttention(h, cfg.attention_heads, p)
        self.post_attention = GateAddNorm(h, h, p)
        self.positionwise = GatedResidualNetwork(h, h, h, p)
        self.pre_output = GateAddNorm(h, h, 0.0)  # the paper's final skip has no dropout
        self.output = quantile_head(h, cfg.quantiles, cfg.quantile_head)  # (..., H) -> (..., Q)
        if cfg.anchored:  # a correction to the anchor, zero until trained: an untrained model forecasts the anchor
            nn.init.zeros_(self.output.weight)
            nn.init.zeros_(self.output.bias)
            # the anchor's quantiles at each forecast step are also an input of the decoder (added to its selected
            # inputs), so that the correction can depend on what the anchor says: (..., Q) -> (..., H)
            self.anchor_input = nn.Linear(len(cfg.quantiles), h)
        self._group_cache: dict[tuple[int, str], dict[str, torch.Tensor]] = {}

    # -- helpers -----------------------------------------------------------------------------------------------------
    def _ckpt(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(*args), recomputed in backward when activation checkpointing is on and we are training."""
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def _anchor(self, batch: Batch) -> torch.Tensor:
        """(B, D, Q) the batch's anchor (an anchored model's); an error for a batch without one."""
        return required_anchor(batch.anchor)

    def _static(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Static VSN output (B, H) and weights (B, Vs)."""
        x = torch.cat(
            [self.static_cat(batch.static_cat), self.static_cont(batch.static_cont)], dim=1
        )  # (B, Vs, H)
        return self._ckpt(self.static_vsn, x)

    def _groups(self, p: int, device: torch.device) -> dict[str, torch.Tensor]:
        """Variable indices of each input group in the encoder / decoder VSNs, with P positional known inputs.

        Weight order (see `variable_names`): known categorical, known continuous (per-bar ones, then the P
        positional ones), observed categorical, observed continuous.
        """
        key = (p, str(device))
        if key not in self._group_cache:
            s = self.sizes
            kc, kr, oc = len(s.known_cat), s.known_cont - p, len(s.observed_cat)
            r = lambda a, b: torch.arange(a, b, device=device)  # noqa: E731
            obs = kc + kr + p
            with torch.inference_mode(False):  # cached: must stay usable in training after an inference call
                self._group_cache[key] = {
                    "cat": torch.cat([r(0, kc), r(obs, obs + oc)]),
                    "cont": torch.cat([r(kc, kc + kr), r(obs + oc, s.n_encoder)]),
                    "pos": r(kc + kr, obs),
                    "dec_cat": r(0, kc),
                    "dec_cont": r(kc, kc + kr),
                }
        return self._group_cache[key]

    def _temporal_selection(
        self, batch: Batch, c_s: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encoder and decoder variable selection, per distinct bar and per position, gathered into windows.

        Returns enc (B, E, H), encoder weights (B, E, Ve), dec (B, D, H), decoder weights (B, D, Vd).
        """
        e = batch.encoder_length
        p = batch.pos_cont.shape[1]
        kc, kr = len(self.sizes.known_cat), self.sizes.known_cont - p
        g = self._groups(p, batch.enc_cont.device)
        w_row = torch.cat([self.known_cont.weight[:kr], self.observed_cont.weight])  # (Kr + Or, H)
        b_row = torch.cat([self.known_cont.bias[:kr], self.observed_cont.bias])
        w_pos, b_pos = self.known_cont.weight[kr:], self.known_cont.bias[kr:]  # (P, H)
        enc_cat = torch.cat(
            [self.known_cat(batch.enc_cat[:, :kc]), self.observed_cat(batch.enc_cat[:, kc:])], dim=1
        )  # (Re, Kc + Oc, H)
        vsn, dsn = self.encoder_vsn, self.decoder_vsn

        def encoder_rows() -> Terms | None:
            return merge([vsn.categorical_terms(enc_cat, g["cat"]),
                          vsn.continuous_terms(batch.enc_cont, g["cont"], w_row, b_row)])

        def decoder_rows() -> Terms | None:
            return merge([dsn.categorical_terms(self.known_cat(batch.dec_cat), g["dec_cat"]),
                          dsn.continuous_terms(batch.dec_cont, g["dec_cont"], w_row[:kr], b_row[:kr])])

        def positional(net: VariableSelectionNetwork, pos: torch.Tensor) -> Terms | None:
            return merge([net.continuous_terms(pos, g["pos"], w_pos, b_pos)])  # (L, P) inputs

        enc, enc_w = self._ckpt(vsn.select, self._ckpt(encoder_rows), batch.enc_index,
                                positional(vsn, batch.pos_cont[:e]), c_s)  # (B, E, H), (B, E, Ve)
        dec, dec_w = self._ckpt(dsn.select, self._ckpt(decoder_rows), batch.dec_index,
                                positional(dsn, batch.pos_cont[e:]), c_s)  # (B, D, H), (B, D, Vd)
        return enc, enc_w, dec, dec_w

    def _run(
        self, batch: Batch, query_start: int | None, interpret: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Steps 1-8 of docs/tft.md; returns ψ̃ at positions query_start..T-1 (B, L, H) and interpretation tensors."""
        static, static_w = self._static(batch)  # (B, H), (B, Vs)
        b, h = static.shape
        contexts = self._ckpt(self.static_contexts, static.unsqueeze(1).expand(b, 4, h))  # (B, 4, H)
        c_s, c_e, c_c, c_h = contexts.unbind(dim=1)  # 4 x (B, H)

        enc, enc_w, dec, dec_w = self._temporal_selection(batch, c_s)
        if self.cfg.anchored:
            dec = dec + self.anchor_input(self._anchor(batch))  # (B, D, H)
        e = enc.shape[1]

        layers = self.cfg.lstm_layers
        state = (
            c_h.unsqueeze(0).expand(layers, b, h).contiguous(),
            c_c.unsqueeze(0).expand(layers, b, h).contiguous(),
        )
        enc_out, state = self.encoder_lstm(enc, state)  # (B, E, H)
        dec_out, _ = self.decoder_lstm(dec, state)  # (B, D, H)
        phi = torch.cat([enc_out, dec_out], dim=1)  # (B, T, H)
        xi = torch.cat([enc, dec], dim=1)  # (B, T, H)
        del enc_out, dec_out, enc, dec
        phi_t = self.post_lstm(phi, xi)  # (B, T, H)  φ̃
        del phi, xi

        theta = self._ckpt(self.enrichment, phi_t, c_e)  # (B, T, H)  θ
        qs = e if query_start is None else query_start
        beta, attention = self.attention(theta, qs, return_attention=interpret)  # (B, L, H), (B, L, T)
        delta = self.post_attention(beta, theta[:, qs:])  # (B, L, H)
        psi = self._ckpt(self.positionwise, delta)  # (B, L, H)
        out = self.pre_output(psi, phi_t[:, qs:])  # (B, L, H)  ψ̃
        interp: dict[str, torch.Tensor] = {}
        if interpret:
            interp = {"static": static_w, "encoder": enc_w, "decoder": dec_w, "attention": attention}
        return out, interp

    # -- public ------------------------------------------------------------------------------------------------------
    def forward(self, batch: Batch, return_interpretation: bool = False) -> TFTOutput:
        """Quantile forecasts (B, D, Q) in scaled target space; interpretation tensors only when asked for."""
        features, interp = self._run(batch, None, return_interpretation)  # (B, D, H)
        with torch.autocast(features.device.type, enabled=False):  # the quantile head stays fp32 under autocast
            quantiles = self.output(features.float())  # (B, D, Q)
            if self.cfg.anchored:
                quantiles = self._anchor(batch) + quantiles  # (B, D, Q) the anchor's quantiles, corrected
        if not return_interpretation:
            return TFTOutput(quantiles)
        return TFTOutput(
            quantiles,
            static_weights=interp["static"],
            encoder_weights=interp["encoder"],
            decoder_weights=interp["decoder"],
            attention=interp["attention"],
        )

    def temporal_features(self, batch: Batch, query_start: int = 0) -> torch.Tensor:
        """ψ̃ (the temporal block's output) at positions query_start..T-1: (B, T - query_start, H).

        `forward` computes this only at the D forecast positions (query_start = E). With query_start = 0 every position
        queries the attention, which is what the no-look-ahead tests audit: the output at position n must not depend on
        any input after n. Not used in training.
        """
        return self._run(batch, query_start, interpret=False)[0]
