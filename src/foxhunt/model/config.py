"""Model options, validated once; together with the feature schema's `InputSizes` they fix every shape."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from foxhunt.errors import InputError
from foxhunt.flags import MEMORY, MODEL, option

# Which calibration forecasts get (`--calibration`): the adaptive shifts of model/adaptive.py, the fixed ones of
# model/calibration.py, or none. Fixed by measurement (benchmarks/quality.py's calibration table and
# benchmarks/calibration_modes.py; docs/benchmarks.md): adaptive wins where validation misleads (45 futures: q-risk
# p10 and p90 1.4% lower, p < 0.003 in 3 seeds; S&P 500 walk-forward p10 2.7% lower, p < 0.05; the S&P's 2018 after a calm 2017:
# p10-p90 coverage 0.71 -> 0.76) but loses beyond noise where the fixed shifts were right (S&P 2016-2018: p90 +1.1%,
# p < 0.01), so by the rule that chooses a default (win, and lose nowhere beyond noise) it is asked for, not assumed.
# `auto` (the default) is `fixed` for a model without an anchor (the measurements above) and for an anchored one
# the adaptive shifts where they beat its own quantiles on validation, none where they did not. Its raw quantiles are
# GARCH-t's corrected and near their levels (p10-p90 coverage 0.78-0.84 raw); the fixed shifts fitted on one validation
# year cost the S&P walk-forward's p10 5.9% (p < 0.05 in every seed), so an anchored model's trackers start from its
# own quantiles (train/calibrate.py) and their validation run, where each shift uses earlier outcomes only, says
# whether they pay: on the futures panel they do (q-risk p10 / p90 1.5% / 2.6% lower than none, p < 0.001 in every
# seed), on KO/PEP and the sample they never did on validation (adaptive on every run would have cost KO/PEP's p10
# 0.8%), on the S&P it varies by fold (level). benchmarks/RESULTS.md, "The anchored head".
METHODS = ("auto", "adaptive", "fixed", "none")
DEFAULT_METHOD = "auto"


def resolved_method(method: str, anchored: bool, adaptive_won: bool = False) -> str:
    """`auto` as it applies to a model: fixed without an anchor; with one, adaptive if its shifts beat the model's own
    quantiles on validation (`adaptive_won`, train/calibrate.py), none if not. Another method as it is."""
    if method != "auto":
        return method
    return ("adaptive" if adaptive_won else "none") if anchored else "fixed"


def heads_fit(hidden_size: int, heads: int) -> bool:
    """Whether `heads` attention heads split the hidden size evenly (model/attention.py: each is hidden / heads wide);
    `foxhunt tune` draws only sizes that do (tune/space.py)."""
    return hidden_size % heads == 0


def quantile_label(q: float | str) -> str:
    """The name of quantile level `q` (a float or its JSON key) everywhere it is shown or stored: 0.1 -> "p10",
    0.025 -> "p2.5" (a forecast file's column, a table's header, the console's q-risk)."""
    return f"p{float(q) * 100:g}"


# The quantile head (model/quantile_head.py): independent linear maps, or the median plus softplus gaps (tied: cannot
# cross); the default is chosen by benchmarks/versus.py (docs/benchmarks.md): level, so independent.
HEADS = ("independent", "tied")


@dataclass(frozen=True)
class ModelConfig:
    """Each field with `option(...)` is an option of `foxhunt train` (and plan-memory, backtest, tune), a `--config`
    key and a `foxhunt.fit` keyword, declared here once (foxhunt/flags.py). The window's lengths are the data's."""

    hidden_size: int = option(16, "Hidden size d.", MODEL)
    attention_heads: int = option(4, "Attention heads.", MODEL)
    dropout: float = option(0.1, "Dropout rate.", MODEL)
    lstm_layers: int = option(1, "LSTM layers.", MODEL)
    quantiles: tuple[float, ...] = option((0.1, 0.5, 0.9), "Comma-separated quantiles.", MODEL, metavar="LIST")
    quantile_head: str = option("independent", f"{' | '.join(HEADS)}: tied cannot cross.", MODEL, metavar="KIND")
    encoder_length: int = 32  # DataConfig.encoder_length (RunConfig checks they agree)
    horizon: int = 5  # DataConfig.horizon
    # DataConfig.anchor != "none": the head outputs a correction to the batch's anchor quantiles (model/tft.py)
    anchored: bool = False
    # Recompute VSN/GRN activations in backward to save memory.
    activation_checkpointing: bool = option(False, "Recompute activations in backward: less memory.", MEMORY)

    def __post_init__(self) -> None:
        if self.hidden_size < 1:
            raise InputError(f"--hidden-size must be positive, got {self.hidden_size}")
        if self.attention_heads < 1:
            raise InputError(f"--attention-heads must be positive, got {self.attention_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.lstm_layers < 1:
            raise InputError(f"--lstm-layers must be at least 1, got {self.lstm_layers}")
        if self.quantile_head not in HEADS:
            raise InputError(f"--quantile-head must be one of {' | '.join(HEADS)}, got {self.quantile_head!r}")
        if self.anchored and self.quantile_head != "independent":
            raise InputError("an anchor (--anchor, or a store prepared with one) is corrected by the independent head; "
                             f"drop --quantile-head {self.quantile_head} or give --anchor none")
        qs = self.quantiles
        if not qs or any(not 0.0 < q < 1.0 for q in qs) or list(qs) != sorted(set(qs)):
            raise InputError(
                f"--quantiles must be increasing, distinct and inside (0, 1), got {','.join(map(str, qs))}"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ModelConfig:
        d = dict(d)
        d["quantiles"] = tuple(float(q) for q in d["quantiles"])
        return ModelConfig(**d)
