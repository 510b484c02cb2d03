"""The trained TFT's forward pass rearranged for inference: fewer, larger ops, built once from the trained weights.

A batch-1 forecast of the training model (tft.py) is about a thousand small ATen calls: at that size the cost is the
calls, not the arithmetic. `InferenceTFT` computes the same quantiles with a fraction of them, by doing at load time
every piece of work that depends only on the weights (the saved package and parameter names are untouched):

- Static context: the only static input of a model trained on bars is the series code, so the static VSN, the four
  static GRNs and every linear map of their outputs (the VSNs' and the enrichment's context terms, the LSTM initial
  state) become one table row per code: one embedding lookup per forecast.
- Variable selection: every per-variable GRN of the continuous inputs runs as one `baddbmm` over stacked weights
  (layout (V', N, H), so no permutes), with the first layer folded into the input embedding (a continuous input is a
  scalar times a vector) and fc1 folded into the gate (no nonlinearity between them). The selection GRN's first layer
  and residual projection of all inputs are one (V', H + V) matmul. Positional inputs (the relative time index) and
  categorical inputs are precomputed tables, and Σ_v w_v GRN_v(ξ_v) is one weighted embedding bag over them all.
- The rest: GRNs with fc1 folded into the gate; the attention's output projection folded into the following gate; the
  1/sqrt(d) scale folded into the query weights; the head average taken before the shared value product
  (mean_h(A_h V) = (mean_h A_h) V); queries and the quantile head only at the D forecast steps; dropout gone.

Folding two linear maps is done in float64 and rounded once, so outputs match the training model to float rounding
(tests/model/test_inference.py holds them to 1e-6). Eval only: no interpretation weights, no gradients.

Legend: B batch, E encoder steps, D forecast steps, T = E + D, L positions (E or D), R distinct bar rows, V variables of
a VSN (V' those of one group: Vr continuous per bar, P positional, Vc categorical), H hidden, K per-head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from foxhunt.data.dataset.batch import Batch
from foxhunt.model.layers import CategoricalEmbedding, GateAddNorm, GatedResidualNetwork
from foxhunt.model.selection import Terms, VariableSelectionNetwork
from foxhunt.model.tft import TemporalFusionTransformer, required_anchor

# Above this many gathered cells (B * L * V * H) the weighted sum over variables is one embedding bag, which never
# materialises the gathered inputs; below it a gather and a bmm (live batches).
GATHER_CELLS = 1 << 20


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double()


def _folded_gate(fc1: nn.Linear, gate: GateAddNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """gate.glu.fc(fc1(x)) as one map (no nonlinearity between them, dropout is off): weight (2 d_out, d_in), bias."""
    wg, bg = _f64(gate.glu.fc.weight), _f64(gate.glu.fc.bias)
    return wg @ _f64(fc1.weight), wg @ _f64(fc1.bias) + bg


class _Folded(nn.Module):
    """Buffers registered from a dict, cast to the model's dtype (float64 intermediates rounded once)."""

    def put(self, dtype: torch.dtype, **tensors: torch.Tensor) -> None:
        for name, t in tensors.items():
            self.register_buffer(name, t.detach().to(dtype).contiguous(), persistent=False)


class FoldedSelection(_Folded):
    """One encoder or decoder VSN over per-bar rows (Vr continuous, Vc categorical inputs) and P positional inputs.

    Softmax weights come out in the order [continuous rows, positional, categorical] (the selection GRN's output
    units permuted at build; a softmax does not care), which is the column order of the embedding bags.
    """

    def __init__(self, net: VariableSelectionNetwork, cont_var: torch.Tensor, emb_w: torch.Tensor,
                 emb_b: torch.Tensor, pos_var: torch.Tensor, pos_terms: Terms, cat_var: torch.Tensor,
                 cat_emb: list[CategoricalEmbedding]) -> None:
        super().__init__()
        stack, grn = net.var_grns, net.flat_grn
        h, v = net.hidden, net.n_vars
        dt = emb_w.dtype
        self.h, self.v, self.vr, self.p, self.vc = h, v, cont_var.numel(), pos_var.numel(), cat_var.numel()
        self.length = pos_terms.processed.shape[0]  # L positions
        perm = torch.cat([cont_var, pos_var, cat_var])  # (V,) our column order -> the network's variable
        fc2 = _f64(grn.fc2.weight).view(h, v, h)  # (H out, V, H in)
        skip = _f64(grn.skip.weight).view(v, v, h)[perm]  # (V out in our order, V, H in)
        # Continuous rows: per-variable GRNs with the first layer folded into the embedding, fc1 into the gate.
        ew, eb = _f64(emb_w), _f64(emb_b)  # (Vr, H)
        w2 = _f64(stack.w2)[cont_var]  # (Vr, H, H)
        wf = _f64(stack.w1)[cont_var] @ _f64(stack.wg)[cont_var]  # (Vr, H, 2H)
        bf = torch.einsum("vi,vio->vo", _f64(stack.b1)[cont_var], _f64(stack.wg)[cont_var]) + _f64(stack.bg)[cont_var]
        self.put(dt, ew=ew.unsqueeze(1), eb=eb.unsqueeze(1),  # (Vr, 1, H)
                 u=torch.einsum("vi,vio->vo", ew, w2).unsqueeze(1),
                 c=(torch.einsum("vi,vio->vo", eb, w2) + _f64(stack.b2)[cont_var]).unsqueeze(1),
                 wf=wf, bf=bf.unsqueeze(1), lnw=_f64(stack.ln_w)[cont_var].unsqueeze(1),
                 lnb=_f64(stack.ln_b)[cont_var].unsqueeze(1))
        fc2_r, skip_r = fc2[:, cont_var], skip[:, cont_var]  # (H, Vr, H), (V, Vr, H)
        slope = torch.cat([torch.einsum("ovi,vi->vo", fc2_r, ew), torch.einsum("ovi,vi->vo", skip_r, ew)], 1)
        row_const = torch.cat([torch.einsum("ovi,vi->o", fc2_r, eb), torch.einsum("ovi,vi->o", skip_r, eb)])
        self.put(dt, slope=slope)  # (Vr, H + V): the selection GRN's fc2 | skip share of the rows, per unit input
        # Positional inputs: processed GRN outputs and fc2 | skip shares per position (from the model's own code),
        # plus every constant: the rows' embedding biases, fc2's and skip's own biases.
        if pos_terms.pre is not None:
            pos_ps = torch.cat([pos_terms.pre.double(), pos_terms.skip.double()[:, perm]], 1)  # (L, H + V)
        else:  # no positional inputs
            pos_ps = torch.zeros(self.length, h + v, dtype=torch.float64, device=emb_w.device)
        bias = torch.cat([_f64(grn.fc2.bias), _f64(grn.skip.bias)[perm]]) + row_const
        self.put(dt, pos_proc=pos_terms.processed.transpose(0, 1).reshape(-1, h),  # (P * L, H), (P, L) order
                 pos_ps=pos_ps + bias)
        # Categorical inputs: every code's processed GRN output and fc2 | skip share, one table with offsets.
        if self.vc:
            weights, offsets, total = [], [], 0
            for emb in cat_emb:
                if emb.table is not None:
                    weights.append(emb.table.weight)
                    offsets.append(emb.offsets + total)
                    total += emb.table.num_embeddings
            table = torch.cat(weights)  # (C, H) every code of every categorical input
            self.register_buffer("cat_offsets", torch.cat(offsets), persistent=False)  # (Vc,)
            proc, ps = [], []
            for j in range(self.vc):
                lo = int(self.cat_offsets[j])
                hi = int(self.cat_offsets[j + 1]) if j + 1 < self.vc else total
                t = net.categorical_terms(table[lo:hi].unsqueeze(1), cat_var[j:j + 1])  # over the codes of input j
                proc.append(t.processed[:, 0])
                ps.append(torch.cat([t.pre, t.skip[:, perm]], 1))
            self.put(dt, cat_proc=torch.cat(proc), cat_ps=torch.cat(ps))  # (C, H), (C, H + V)
        # Selection GRN after its first layer: fc1 folded into the gate, output units permuted to our order.
        ws, bs = _folded_gate(grn.fc1, grn.gate)  # (2V, H), (2V,)
        halves = torch.cat([perm, perm + v])
        self.put(dt, wsel=ws[halves], bsel=bs[halves], ln_w=_f64(grn.gate.norm.weight)[perm],
                 ln_b=_f64(grn.gate.norm.bias)[perm])
        # Embedding-bag columns: row input j at j*R + row, position p at Vr*R + p*L + l, code c at Vr*R + P*L + ...
        j, pl = torch.arange(self.vr), torch.arange(self.p).unsqueeze(0) * self.length + torch.arange(self.length)[:, None]
        self.register_buffer("bag_mult", torch.cat([torch.ones(self.vr), torch.zeros(self.p),
                                                    torch.full((self.vc,), float(self.vc))]).long(), persistent=False)
        base = torch.cat([torch.zeros(self.length, self.vr), pl.float(),
                          (self.p * self.length + torch.arange(self.vc)).float().expand(self.length, -1)], 1)
        self.register_buffer("bag_base", base.long(), persistent=False)  # (L, V)
        self.register_buffer("bag_rows", torch.cat([j.float(), torch.full((self.p + self.vc,), float(self.vr))]).long(),
                             persistent=False)  # (V,) times R

    def forward(self, x: torch.Tensor, codes: torch.Tensor, index: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """x (R, Vr) continuous inputs per row, codes (R, Vc), index (B, L) into the rows, ctx (B, H + V) the static
        context's share of the selection GRN -> (B, L, H)."""
        r, h, v = x.shape[0], self.h, self.v
        b, length = index.shape
        parts = []
        ps = None
        if self.vr:
            xt = x.t().unsqueeze(-1)  # (Vr, R, 1)
            g = torch.baddbmm(self.bf, F.elu(torch.addcmul(self.c, xt, self.u)), self.wf)  # (Vr, R, 2H)
            y = F.layer_norm(torch.addcmul(self.eb, xt, self.ew) + F.glu(g, -1), (h,))  # (Vr, R, H)
            parts.append(torch.addcmul(self.lnb, y, self.lnw).reshape(-1, h))  # (Vr * R, H)
            ps = x @ self.slope  # (R, H + V)
        parts.append(self.pos_proc)
        if self.vc:
            c = codes + self.cat_offsets  # (R, Vc)
            parts.append(F.embedding(c, self.cat_proc).reshape(-1, h))  # (R * Vc, H)
            cps = F.embedding(c, self.cat_ps).sum(1)  # (R, H + V)
            ps = cps if ps is None else ps + cps
        pre_skip = self.pos_ps + ctx.unsqueeze(1)  # (B, L, H + V)
        if ps is not None:
            pre_skip = F.embedding(index, ps) + pre_skip
        pre, skip = pre_skip.split([h, v], -1)
        s = F.linear(F.elu(pre), self.wsel, self.bsel)  # (B, L, 2V)
        w = torch.softmax(F.layer_norm(skip + F.glu(s, -1), (v,), self.ln_w, self.ln_b), -1)  # (B, L, V)
        bags = index.unsqueeze(-1) * self.bag_mult + (self.bag_base + r * self.bag_rows)  # (B, L, V)
        table = torch.cat(parts) if len(parts) > 1 else parts[0]  # (Vr * R + P * L + R * Vc, H)
        if bags.numel() * h <= GATHER_CELLS:  # small: gather and one bmm (cheaper to call, and exports plainly)
            return torch.bmm(w.view(-1, 1, v), F.embedding(bags.view(-1, v), table)).view(b, length, h)
        return F.embedding_bag(bags.view(-1, v), table, per_sample_weights=w.reshape(-1, v),
                               mode="sum").view(b, length, h)  # no (B * L, V, H) gathered tensor


    def dense(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """`forward` on windows that each own their L rows, in order: x (B * L, Vr), ctx (B, H + V) -> (B * L, H).
        No index: the selection's positional share is a per-position table, and the weighted sum over variables
        is one batched product with the per-row inputs and the positional ones side by side."""
        r, h, v, b = x.shape[0], self.h, self.v, ctx.shape[0]
        xt = x.t().unsqueeze(-1)  # (Vr, R, 1)
        g = torch.baddbmm(self.bf, F.elu(torch.addcmul(self.c, xt, self.u)), self.wf)  # (Vr, R, 2H)
        y = F.layer_norm(torch.addcmul(self.eb, xt, self.ew) + F.glu(g, -1), (h,))  # (Vr, R, H)
        y = torch.addcmul(self.lnb, y, self.lnw)  # (Vr, R, H)
        bias = self.pos_ps + ctx if b == 1 else (self.pos_ps + ctx.unsqueeze(1)).reshape(r, h + v)  # (R, H + V)
        pre, skip = torch.addmm(bias, x, self.slope).split([h, v], -1)  # (R, H), (R, V)
        s = F.linear(F.elu(pre), self.wsel, self.bsel)  # (R, 2V)
        w = torch.softmax(F.layer_norm(skip + F.glu(s, -1), (v,), self.ln_w, self.ln_b), -1)  # (R, V)
        values = y.transpose(0, 1)  # (R, Vr, H)
        if self.p:
            pos = self.pos_proc.view(self.p, self.length, h).transpose(0, 1)  # (L, P, H)
            values = torch.cat([values, pos if b == 1 else pos.repeat(b, 1, 1)], 1)  # (R, V, H)
        return torch.bmm(w.unsqueeze(1), values).view(r, h)  # (R, H)


def _grn(g: GatedResidualNetwork, dt: torch.dtype) -> dict[str, torch.Tensor]:
    """A context-free-width GRN (d_in = d_out = H) with fc1 folded into its gate."""
    w, b = _folded_gate(g.fc1, g.gate)
    return {"w2": g.fc2.weight.detach(), "b2": g.fc2.bias.detach(), "wg": w.to(dt), "bg": b.to(dt),
            "lnw": g.gate.norm.weight.detach(), "lnb": g.gate.norm.bias.detach()}


def supported(model: TemporalFusionTransformer) -> bool:
    """Whether `InferenceTFT` can run this model: both temporal VSNs select among two or more inputs (always, for
    models trained on bars: the decoder has the calendar and the relative time index)."""
    return model.encoder_vsn.n_vars > 1 and model.decoder_vsn.n_vars > 1


class InferenceTFT(nn.Module):
    """`InferenceTFT(model)(batch)` == `model(batch).quantiles` (eval mode) in fewer ops; see the module docstring.

    The positional inputs (`batch.pos_cont`, the relative time index: the same for every batch of a model) are folded
    in on first use and again only if they change. Built under no_grad from a model in eval mode; the model's
    parameters are shared, not copied, except the folded ones.
    """

    def __init__(self, model: TemporalFusionTransformer) -> None:
        super().__init__()
        if not supported(model):
            raise ValueError("InferenceTFT needs encoder and decoder VSNs with two or more inputs; use the model")
        self.model = model.eval()
        self.h = model.cfg.hidden_size
        self.ve, self.vd = model.encoder_vsn.n_vars, model.decoder_vsn.n_vars
        self._pos: torch.Tensor | None = None
        self.enc: FoldedSelection | None = None
        self.dec: FoldedSelection | None = None
        dt = model.output.weight.dtype
        with torch.no_grad():
            self._build_temporal(dt)
            sizes = model.sizes
            self.code_table: torch.Tensor | None = None
            if len(sizes.static_cat) == 1 and sizes.static_cont == 0:  # the series code: one row per code
                codes = torch.arange(max(sizes.static_cat[0], 1), device=model.output.weight.device).unsqueeze(1)
                self.code_table = self._contexts(codes, codes.new_zeros(codes.shape[0], 0, dtype=dt)).contiguous()

    def _build_temporal(self, dt: torch.dtype) -> None:
        m = self.model
        self.f_enr = _grn(m.enrichment, dt)
        self.f_pos = _grn(m.positionwise, dt)
        att = m.attention
        nk, k = att.n_heads * att.d_head, att.d_head
        scale = 1.0 / math.sqrt(k)
        wpa, bpa = _f64(m.post_attention.glu.fc.weight), _f64(m.post_attention.glu.fc.bias)
        self.f_att = {
            "wq": (att.qkv.weight[:nk] * scale).to(dt), "bq": (att.qkv.bias[:nk] * scale).to(dt),
            "wkv": att.qkv.weight[nk:], "bkv": att.qkv.bias[nk:],
            "wo": (wpa @ _f64(att.out.weight)).to(dt), "bo": (wpa @ _f64(att.out.bias) + bpa).to(dt),
            "lnw": m.post_attention.norm.weight, "lnb": m.post_attention.norm.bias,
        }
        self.f_att = {k: v.detach() for k, v in self.f_att.items()}  # plain tensors: a trace keeps them as constants

    def _contexts(self, static_cat: torch.Tensor, static_cont: torch.Tensor) -> torch.Tensor:
        """Everything the static inputs feed (B, 2H + Ve + Vd + 3H): the encoder and decoder selection GRNs'
        context terms (zero-padded to H + V), the enrichment's context term, the LSTM initial h and c."""
        m = self.model
        x = torch.cat([m.static_cat(static_cat), m.static_cont(static_cont)], dim=1)  # (B, Vs, H)
        static, _ = m.static_vsn(x)  # (B, H)
        b, h = static.shape
        c_s, c_e, c_c, c_h = m.static_contexts(static.unsqueeze(1).expand(b, 4, h)).unbind(dim=1)  # 4 x (B, H)
        enc = F.pad(m.encoder_vsn.flat_grn.ctx(c_s), (0, self.ve))  # (B, H + Ve)
        dec = F.pad(m.decoder_vsn.flat_grn.ctx(c_s), (0, self.vd))  # (B, H + Vd)
        return torch.cat([enc, dec, m.enrichment.ctx(c_e), c_h, c_c], dim=1)

    def prepare(self, pos_cont: torch.Tensor) -> None:
        """Fold the positional inputs (T, P) into both selection networks (a no-op when they are unchanged)."""
        if self._pos is not None and self._pos.shape == pos_cont.shape and torch.equal(self._pos, pos_cont):
            return
        m, e = self.model, self.model.cfg.encoder_length
        p = pos_cont.shape[1]
        kr = m.sizes.known_cont - p
        g = m._groups(p, pos_cont.device)
        w_row = torch.cat([m.known_cont.weight[:kr], m.observed_cont.weight])  # (Kr + Or, H)
        b_row = torch.cat([m.known_cont.bias[:kr], m.observed_cont.bias])
        w_pos, b_pos = m.known_cont.weight[kr:], m.known_cont.bias[kr:]  # (P, H)
        with torch.no_grad(), torch.inference_mode(False):
            enc_pos = m.encoder_vsn.continuous_terms(pos_cont[:e].clone(), g["pos"], w_pos, b_pos)
            dec_pos = m.decoder_vsn.continuous_terms(pos_cont[e:].clone(), g["pos"], w_pos, b_pos)
            self.enc = FoldedSelection(m.encoder_vsn, g["cont"], w_row, b_row, g["pos"], enc_pos, g["cat"],
                                       [m.known_cat, m.observed_cat])
            self.dec = FoldedSelection(m.decoder_vsn, g["dec_cont"], w_row[:kr], b_row[:kr], g["pos"], dec_pos,
                                       g["dec_cat"], [m.known_cat])
            self._pos = pos_cont.clone()
            t = pos_cont.shape[0]
            # (D, 1, T) True where forecast step i (at position E + i) would see a later position: made once
            self.future = torch.arange(t, device=pos_cont.device) > torch.arange(e, t, device=pos_cont.device).view(
                -1, 1, 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Scaled quantiles (B, D, Q) of `batch`."""
        self.prepare(batch.pos_cont)
        assert self.enc is not None and self.dec is not None
        m, h = self.model, self.h
        if self.code_table is not None:
            ctx = F.embedding(batch.static_cat[:, 0], self.code_table)  # (B, width)
        else:
            ctx = self._contexts(batch.static_cat, batch.static_cont)
        enc_ctx, dec_ctx, enr_ctx, c_h, c_c = ctx.split([h + self.ve, h + self.vd, h, h, h], dim=1)
        kc = len(m.sizes.known_cat)
        enc = self.enc(batch.enc_cont, batch.enc_cat, batch.enc_index, enc_ctx)  # (B, E, H)
        dec = self.dec(batch.dec_cont, batch.dec_cat[:, :kc], batch.dec_index, dec_ctx)  # (B, D, H)
        if not m.cfg.anchored:
            return self._temporal(enc, dec, enr_ctx, c_h, c_c, flat=False)  # (B, D, Q)
        anchor = m._anchor(batch)  # (B, D, Q): the decoder's input and the forecast's start (tft.py)
        return anchor + self._temporal(enc, dec + m.anchor_input(anchor), enr_ctx, c_h, c_c, flat=False)

    def dense_ready(self) -> bool:
        """Whether `live` can run this model: the series code is its only static input and no time input is
        categorical (a model trained on bars), and the positional inputs are folded (a first `forward` did it)."""
        return (self.code_table is not None and self.enc is not None and self.dec is not None
                and not self.enc.vc and not self.dec.vc)

    def live(self, codes: torch.Tensor, enc: torch.Tensor, dec: torch.Tensor,
             anchor: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled quantiles (B, D, Q) of dense live windows, each with its own rows: series codes (B,), encoder
        rows (B, E, F) (known, then observed inputs), the known inputs of the forecast steps (B, D, Kr) and, for
        an anchored model, its anchor (B, D, Q) (data/baselines/anchor_live.py), the relative time index being the
        one folded by the last `forward`. The numbers of `forward` on the same windows as a Batch, in fewer ops (no
        index arithmetic or gathers): what onnxruntime runs for `update`."""
        assert self.dense_ready() and self.enc is not None and self.dec is not None and self.code_table is not None
        h = self.h
        (b, e, f), d = enc.shape, dec.shape[1]
        ctx = F.embedding(codes, self.code_table)  # (B, width)
        enc_ctx, dec_ctx, enr_ctx, c_h, c_c = ctx.split([h + self.ve, h + self.vd, h, h, h], dim=1)
        x_e = self.enc.dense(enc.reshape(b * e, f), enc_ctx).view(b, e, h)  # (B, E, H)
        x_d = self.dec.dense(dec.reshape(b * d, dec.shape[2]), dec_ctx).view(b, d, h)  # (B, D, H)
        if not self.model.cfg.anchored:
            return self._temporal(x_e, x_d, enr_ctx, c_h, c_c, flat=True)
        anchor = required_anchor(anchor)  # (B, D, Q)
        return anchor + self._temporal(x_e, x_d + self.model.anchor_input(anchor), enr_ctx, c_h, c_c, flat=True)

    def _temporal(self, enc: torch.Tensor, dec: torch.Tensor, enr_ctx: torch.Tensor, c_h: torch.Tensor,
                  c_c: torch.Tensor, flat: bool) -> torch.Tensor:
        """Selected inputs enc (B, E, H), dec (B, D, H) and the static contexts (B, H) each -> quantiles (B, D, Q).
        `flat`: position-wise maps run on rows (B * T, H), which onnxruntime runs as one Gemm each instead of
        Reshape-Gemm-Reshape (the live graph); else on (B, T, H), which PyTorch runs a little faster. Shapes below
        are the flat ones; otherwise (B, T, H) for (B*T, H)."""
        m, h = self.model, self.h
        layers = m.cfg.lstm_layers
        (b, e, _), d = enc.shape, dec.shape[1]
        t = e + d
        state = (c_h.unsqueeze(0).expand(layers, b, h).contiguous(), c_c.unsqueeze(0).expand(layers, b, h).contiguous())
        enc_out, state = m.encoder_lstm(enc, state)  # (B, E, H)
        dec_out, _ = m.decoder_lstm(dec, state)  # (B, D, H)
        rows = (b * t, h) if flat else (b, t, h)
        phi = torch.cat([enc_out, dec_out], dim=1).view(rows)  # (B*T, H)
        xi = torch.cat([enc, dec], dim=1).view(rows)  # (B*T, H)
        pl = m.post_lstm
        phi_t = F.layer_norm(xi + F.glu(pl.glu.fc(phi), -1), (h,), pl.norm.weight, pl.norm.bias)  # (B*T, H)  φ̃
        theta = self._grn(self.f_enr, phi_t, _per_row(enr_ctx, t) if flat else enr_ctx.unsqueeze(1))  # (B*T, H) θ
        theta_d = _last(theta, b, t, d) if flat else theta[:, e:]  # (B*D, H) the forecast steps' rows
        a = self.f_att
        n, k = m.attention.n_heads, m.attention.d_head
        q = F.linear(theta_d, a["wq"], a["bq"]).view(b, d, n, k)  # (B, D, N, K), pre-scaled
        keys, v = F.linear(theta, a["wkv"], a["bkv"]).split([n * k, k], dim=-1)  # (B*T, N*K), (B*T, K)
        scores = torch.einsum("blnk,btnk->blnt", q, keys.view(b, t, n, k))  # (B, D, N, T)
        probs = torch.softmax(scores.masked_fill(self.future, torch.finfo(scores.dtype).min), -1).mean(2)  # (B, D, T)
        mixed = torch.bmm(probs, v.view(b, t, k))  # (B, D, K)
        g = F.linear(mixed.view(b * d, k) if flat else mixed, a["wo"], a["bo"])  # (B*D, 2H): out projection folded
        delta = F.layer_norm(theta_d + F.glu(g, -1), (h,), a["lnw"], a["lnb"])  # (B*D, H)
        psi = self._grn(self.f_pos, delta, None)  # (B*D, H)
        po = m.pre_output
        phi_d = _last(phi_t, b, t, d) if flat else phi_t[:, e:]  # (B*D, H)
        out = F.layer_norm(phi_d + F.glu(po.glu.fc(psi), -1), (h,), po.norm.weight, po.norm.bias)  # (B*D, H)  ψ̃
        return m.output(out).view(b, d, -1)  # (B, D, Q)

    def _grn(self, f: dict[str, torch.Tensor], a: torch.Tensor, ctx: torch.Tensor | None) -> torch.Tensor:
        """GRN(a, c) with fc1 folded into the gate: LayerNorm(a + GLU(W ELU(W2 a + b2 + ctx) + b))."""
        pre = F.linear(a, f["w2"], f["b2"])
        if ctx is not None:
            pre = pre + ctx
        g = F.linear(F.elu(pre), f["wg"], f["bg"])
        return F.layer_norm(a + F.glu(g, -1), (self.h,), f["lnw"], f["lnb"])


def _per_row(ctx: torch.Tensor, length: int) -> torch.Tensor:
    """(B, W) per-window values -> one per row of (B * length) rows (broadcast as it is for one window)."""
    return ctx if ctx.shape[0] == 1 else ctx.repeat_interleave(length, dim=0)


def _last(rows: torch.Tensor, b: int, t: int, d: int) -> torch.Tensor:
    """The last d of each window's t rows (B * t, H) -> (B * d, H)."""
    return rows[t - d:] if b == 1 else rows.view(b, t, -1)[:, t - d:].reshape(b * d, -1)
