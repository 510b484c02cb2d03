"""The whole TFT: shapes, missing input groups, no look-ahead, determinism, checkpointing, pinned losses, learning."""

from __future__ import annotations

import pytest
import torch

import foxhunt.model.tft as tft_module
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import Feature, FeatureSchema, InputSizes, Kind, Role
from foxhunt.model.config import ModelConfig
from foxhunt.model.loss import quantile_loss
from foxhunt.model.tft import TemporalFusionTransformer, count_parameters, variable_names

E, D = 6, 3

# Every group present: two static inputs, known calendar-like inputs, observed inputs.
FULL_SIZES = InputSizes(
    static_cat=(3,), static_cont=1, known_cat=(5, 7), known_cont=2, observed_cat=(4,), observed_cont=2
)


def tiny_config(**overrides: object) -> ModelConfig:
    base: dict[str, object] = dict(
        hidden_size=8, attention_heads=2, dropout=0.1, encoder_length=E, horizon=D, quantiles=(0.1, 0.5, 0.9)
    )
    base.update(overrides)
    return ModelConfig(**base)  # type: ignore[arg-type]


def synthetic_batch(sizes: InputSizes, b: int, e: int, d: int, seed: int = 0) -> Batch:
    """A reproducible random batch with valid categorical codes (0 included) for every group of `sizes`."""
    g = torch.Generator().manual_seed(seed)
    t = e + d

    def codes(cards: tuple[int, ...], *lead: int) -> torch.Tensor:
        if not cards:
            return torch.zeros(*lead, 0, dtype=torch.long)
        u = torch.rand(*lead, len(cards), generator=g)  # (..., V) in [0, 1)
        return (u * torch.tensor(cards, dtype=torch.float32)).long()  # (..., V) in [0, card)

    return Batch.from_dense(
        static_cat=codes(sizes.static_cat, b),
        static_cont=torch.randn(b, sizes.static_cont, generator=g),
        known_cat=codes(sizes.known_cat, b, t),
        known_cont=torch.randn(b, t, sizes.known_cont, generator=g),
        observed_cat=codes(sizes.observed_cat, b, e),
        observed_cont=torch.randn(b, e, sizes.observed_cont, generator=g),
        target=torch.randn(b, d, generator=g),
        target_center=torch.zeros(b),
        target_scale=torch.ones(b),
        window=torch.arange(b),
    )


def tiny_model(sizes: InputSizes = FULL_SIZES, seed: int = 0, **cfg: object) -> TemporalFusionTransformer:
    torch.manual_seed(seed)
    return TemporalFusionTransformer(sizes, tiny_config(**cfg))


def test_output_and_interpretation_shapes() -> None:
    model = tiny_model().eval()
    batch = synthetic_batch(FULL_SIZES, 5, E, D)
    out = model(batch, return_interpretation=True)
    assert out.quantiles.shape == (5, D, 3)
    assert out.static_weights.shape == (5, FULL_SIZES.n_static)
    assert out.encoder_weights.shape == (5, E, FULL_SIZES.n_encoder)
    assert out.decoder_weights.shape == (5, D, FULL_SIZES.n_decoder)
    assert out.attention.shape == (5, D, E + D)
    for w in (out.static_weights, out.encoder_weights, out.decoder_weights, out.attention):
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5)
    for i in range(D):  # forecast step i sits at position E + i and sees nothing after it
        assert (out.attention[:, i, E + i + 1 :] == 0).all()
    plain = model(batch)
    assert plain.static_weights is None and plain.attention is None
    assert torch.equal(plain.quantiles, out.quantiles)


@pytest.mark.parametrize(
    "sizes",
    [
        InputSizes((), 0, (4,), 1, (), 1),  # no static inputs: learned constant static embedding
        InputSizes((3,), 0, (), 0, (), 2),  # no known inputs: decoder runs on a learned constant
        InputSizes((), 2, (), 1, (5,), 0),  # only continuous static, only categorical observed
    ],
)
def test_missing_input_groups(sizes: InputSizes) -> None:
    model = tiny_model(sizes)
    batch = synthetic_batch(sizes, 4, E, D)
    out = model(batch, return_interpretation=True)
    assert out.quantiles.shape == (4, D, 3)
    assert out.static_weights.shape == (4, sizes.n_static)
    assert out.decoder_weights.shape == (4, D, sizes.n_decoder)
    quantile_loss(out.quantiles, batch.target, torch.tensor([0.1, 0.5, 0.9])).backward()
    assert all(p.grad is not None for p in model.parameters() if p.numel())  # empty groups own 0-size tensors


def test_variable_names_follow_weight_order() -> None:
    f = Feature
    schema = FeatureSchema(
        features=(
            f("ret", Role.OBSERVED, Kind.CONTINUOUS),
            f("dow", Role.KNOWN, Kind.CATEGORICAL, 6),
            f("series", Role.STATIC, Kind.CATEGORICAL, 3),
            f("t", Role.KNOWN, Kind.CONTINUOUS),
            f("vol", Role.OBSERVED, Kind.CONTINUOUS),
        ),
        target="log_return",
        encoder_length=E,
        horizon=D,
    )
    static, encoder, decoder = variable_names(schema)
    assert (static, encoder, decoder) == (["series"], ["dow", "t", "ret", "vol"], ["dow", "t"])
    assert len(encoder) == schema.sizes.n_encoder and len(decoder) == schema.sizes.n_decoder


DENSE = ("known_cat", "known_cont", "observed_cat", "observed_cont")


def _dense(batch: Batch) -> dict[str, torch.Tensor]:
    """Every input of the batch as per-window tensors (the keyword arguments of `Batch.from_dense`)."""
    fields = ("static_cat", "static_cont", "target", "target_center", "target_scale", "window")
    return {**batch.dense(), **{f: getattr(batch, f) for f in fields}}


def _with(batch: Batch, **tensors: torch.Tensor) -> Batch:
    """The batch with some per-window tensors replaced (dense inputs such as known_cont included)."""
    return Batch.from_dense(**{**_dense(batch), **tensors})


def test_no_look_ahead_from_future_known_inputs() -> None:
    """(a) Changing known inputs at forecast step k never changes forecasts at steps < k (and does change step k)."""
    model = tiny_model().eval()
    batch = synthetic_batch(FULL_SIZES, 3, E, D)
    base = model(batch).quantiles
    for k in range(D):
        known_cont, known_cat = batch.dense()["known_cont"].clone(), batch.dense()["known_cat"].clone()
        known_cont[:, E + k] += 3.0
        known_cat[:, E + k] = (known_cat[:, E + k] + 1) % torch.tensor([5, 7])
        out = model(_with(batch, known_cont=known_cont, known_cat=known_cat)).quantiles
        assert torch.equal(out[:, :k], base[:, :k])
        assert not torch.allclose(out[:, k], base[:, k])


def test_no_look_ahead_from_encoder_inputs_at_every_position() -> None:
    """(b) With queries at all T positions, changing any input at step t leaves positions < t bit-identical."""
    model = tiny_model().eval()
    batch = synthetic_batch(FULL_SIZES, 3, E, D)
    base = model.temporal_features(batch)  # (B, T, H)
    assert base.shape == (3, E + D, 8)
    # The forecast positions of the audit path equal the normal forward's features.
    assert torch.allclose(model.temporal_features(batch, query_start=E), base[:, E:], atol=1e-6)
    assert torch.allclose(model.output(base[:, E:]), model(batch).quantiles, atol=1e-6)
    for t in range(E):
        observed_cont, known_cont = batch.dense()["observed_cont"].clone(), batch.dense()["known_cont"].clone()
        observed_cont[:, t] -= 2.0
        known_cont[:, t] += 2.0
        out = model.temporal_features(_with(batch, observed_cont=observed_cont, known_cont=known_cont))
        assert torch.equal(out[:, :t], base[:, :t])
        assert not torch.allclose(out[:, t], base[:, t])


def test_eval_is_deterministic_and_depends_only_on_own_sample() -> None:
    """(c) Eval outputs are a function of the batch alone: repeatable, independent of the other rows and the target."""
    model = tiny_model().eval()
    batch = synthetic_batch(FULL_SIZES, 6, E, D)
    first = model(batch).quantiles
    torch.manual_seed(123)  # global RNG state must not matter in eval mode
    assert torch.equal(model(batch).quantiles, first)
    assert torch.equal(model(_with(batch, target=torch.randn(6, D))).quantiles, first)
    alone = model(batch.slice(2, 3)).quantiles
    assert torch.allclose(alone, first[2:3], atol=1e-6)
    shuffled = model(Batch.from_dense(**{k: v.flip(0) for k, v in _dense(batch).items()})).quantiles
    assert torch.allclose(shuffled, first.flip(0), atol=1e-6)


def test_activation_checkpointing_same_outputs_and_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = tft_module.checkpoint
    monkeypatch.setattr(tft_module, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    plain = tiny_model(lstm_layers=2)
    ckpt = TemporalFusionTransformer(FULL_SIZES, tiny_config(lstm_layers=2, activation_checkpointing=True))
    ckpt.load_state_dict(plain.state_dict())
    batch = synthetic_batch(FULL_SIZES, 4, E, D)
    q = torch.tensor([0.1, 0.5, 0.9])
    results = []
    for model in (plain, ckpt):
        model.train()
        torch.manual_seed(7)  # same dropout masks; checkpoint replays the RNG state in its recomputation
        out = model(batch).quantiles
        quantile_loss(out, batch.target, q).backward()
        results.append((out.detach(), {n: p.grad for n, p in model.named_parameters()}))
    # static VSN, static contexts, encoder and decoder VSNs (per-bar terms, then selection), enrichment, position-wise
    assert len(calls) == 8
    assert torch.equal(results[0][0], results[1][0])
    for name, grad in results[0][1].items():
        assert torch.allclose(grad, results[1][1][name], rtol=1e-5, atol=1e-7), name


def test_parameter_count_and_config_sizes() -> None:
    model = tiny_model()
    n = count_parameters(model)
    assert n == sum(p.numel() for p in model.parameters())
    assert count_parameters(tiny_model(hidden_size=16)) > n
    assert count_parameters(tiny_model(lstm_layers=2)) - n == 2 * 8 * (
        4 * 8 + 4 * 8 + 8
    )  # 2 LSTMs, one more layer


def train_losses(steps: int) -> list[float]:
    """The pinned run: hidden 8, 2 heads, E=6, D=3, seed 0, dropout 0.1 in train mode, AdamW lr 1e-2."""
    model = tiny_model(seed=0).train()
    batch = synthetic_batch(FULL_SIZES, 8, E, D, seed=0)
    q = torch.tensor(model.cfg.quantiles)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(0)  # dropout masks
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = quantile_loss(model(batch).quantiles, batch.target, q)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# To regenerate after a deliberate change to the math (or to initialisation order), run
#   PYTHONPATH=src:tests/model python -c "from test_tft_model import train_losses; print(train_losses(5))"
# and paste the five numbers here, saying in the change why they moved.
# Moved when the variable selection became per bar (dropout masks are now drawn per distinct bar, in another
# order) and again when dropout masks came from torch.rand instead of bernoulli_ (another random stream); with
# dropout 0 the outputs equal the per-window computation (test_rows_shared_by_windows_...).
PINNED_LOSSES = [
    0.4243077039718628,
    0.33901602029800415,
    0.29529285430908203,
    0.2645684480667114,
    0.2438686192035675,
]


def test_pinned_losses() -> None:
    assert train_losses(5) == pytest.approx(PINNED_LOSSES, rel=1e-4)


def test_learns_a_deterministic_function_of_known_inputs() -> None:
    """200 steps on a target that is a function of the known-future inputs beat the best constant quantiles easily."""
    sizes = InputSizes(
        static_cat=(2,), static_cont=0, known_cat=(4,), known_cont=1, observed_cat=(), observed_cont=1
    )
    batch = synthetic_batch(sizes, 32, E, D, seed=3)
    dense = batch.dense()
    fut_cont, fut_cat = dense["known_cont"][:, E:, 0], dense["known_cat"][:, E:, 0]  # (B, D)
    target = torch.sin(2.0 * fut_cont) + 0.5 * (fut_cat == 2).float()  # (B, D)
    batch = _with(batch, target=target)
    q = torch.tensor([0.1, 0.5, 0.9])
    constant = torch.quantile(target.flatten(), q).expand(32, D, 3)  # best unconditional quantiles
    baseline = quantile_loss(constant, target, q).item()

    model = tiny_model(sizes, seed=0, hidden_size=16, dropout=0.0).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
    for _ in range(200):
        opt.zero_grad(set_to_none=True)
        loss = quantile_loss(model(batch).quantiles, target, q)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        final = quantile_loss(model(batch).quantiles, target, q).item()
    assert final < 0.2 * baseline


def overlapping_batches(sizes: InputSizes, starts: list[int], n_rows: int, seed: int = 0) -> tuple[Batch, Batch]:
    """The same windows (consecutive bars of one series, starting at `starts`) two ways: as the data layer builds
    them (each bar once, the relative time index as the one positional input) and one row per (window, position)."""
    g = torch.Generator().manual_seed(seed)
    kc, oc = len(sizes.known_cat), len(sizes.observed_cat)
    kr, orr = sizes.known_cont - 1, sizes.observed_cont
    cards = torch.tensor(sizes.known_cat + sizes.observed_cat, dtype=torch.float32)
    cont = torch.randn(n_rows, kr + orr, generator=g)  # (N, Kr + Or)
    cat = (torch.rand(n_rows, kc + oc, generator=g) * cards).long()  # (N, Kc + Oc)
    rows = torch.tensor(starts)[:, None] + torch.arange(E + D)  # (B, T)
    b = len(starts)
    pos = ((torch.arange(E + D) - (E - 1)).float() / E)[:, None]  # (T, 1)
    common = dict(
        static_cat=(torch.rand(b, len(sizes.static_cat), generator=g) * torch.tensor(sizes.static_cat)).long(),
        static_cont=torch.randn(b, sizes.static_cont, generator=g),
        target=torch.randn(b, D, generator=g),
        target_center=torch.zeros(b),
        target_scale=torch.ones(b),
        window=torch.arange(b),
    )
    enc_rows, enc_index = torch.unique(rows[:, :E], return_inverse=True)
    dec_rows, dec_index = torch.unique(rows[:, E:], return_inverse=True)
    shared = Batch(
        enc_cont=cont[enc_rows], enc_cat=cat[enc_rows], enc_index=enc_index,
        dec_cont=cont[dec_rows, :kr], dec_cat=cat[dec_rows, :kc], dec_index=dec_index, pos_cont=pos, **common,
    )  # fmt: skip
    dense = Batch.from_dense(
        known_cat=cat[rows][..., :kc],
        known_cont=torch.cat([cont[rows][..., :kr], pos.expand(b, -1, -1)], dim=2),
        observed_cat=cat[rows[:, :E]][..., kc:],
        observed_cont=cont[rows[:, :E]][..., kr:],
        **common,
    )
    assert shared.enc_cont.shape[0] < dense.enc_cont.shape[0]  # the windows do share bars
    return shared, dense


@pytest.mark.parametrize("sizes", [FULL_SIZES, InputSizes((3,), 0, (), 1, (), 2), InputSizes((), 0, (4,), 2, (), 0)])
def test_rows_shared_by_windows_give_the_per_window_result(sizes: InputSizes) -> None:
    """Per-bar variable selection (each bar once, gathered into windows) equals the per-window computation:
    outputs, interpretation and gradients (dropout 0, so both runs are deterministic)."""
    shared, dense = overlapping_batches(sizes, [0, 1, 2, 5, 3, 11, 12], n_rows=30)
    model = tiny_model(sizes, dropout=0.0)
    q = torch.tensor([0.1, 0.5, 0.9])
    results = []
    for batch in (shared, dense):
        model.zero_grad(set_to_none=True)
        out = model(batch, return_interpretation=True)
        quantile_loss(out.quantiles, batch.target, q).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out, grads))
    (a, ga), (b, gb) = results
    for name in ("quantiles", "static_weights", "encoder_weights", "decoder_weights", "attention"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-6)
    assert ga.keys() == gb.keys()
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], rtol=1e-4, atol=1e-6, msg=name)
