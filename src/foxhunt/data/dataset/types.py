"""What a prepared dataset is and what a saved model keeps of its preparation: `FittedTransform` (the series
vocabulary, the scalers and the grid, saved in model.json) and `PreparedData` (the windows, splits and summary).

They live apart from prepare.py so that loading a model (train/checkpoint.py) or a store (store/read.py) does not
import the loading pipeline (bars/load.py, io/read.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.data.bars.chains import roots_of_series
from foxhunt.data.bars.grid import Grid, default_grid, grid_of
from foxhunt.data.bars.sessions import Session, session_of
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.data.features.schema import FeatureSchema

if TYPE_CHECKING:  # imported where tensors are made: prepare's worker processes (data/prepare) never need it
    import torch


# Code of a series not in the training vocabulary: it gets embedding row 0 and the pooled scalers (fitted on all
# training rows). Row 0 is only trained if the trainer masks series codes; otherwise it stays at its initial value.
UNKNOWN_SERIES = 0


@dataclass(frozen=True)
class FittedTransform:
    """Everything needed to featurize new data exactly as in training; saved (as `to_dict`) in model.json."""

    series_vocab: tuple[str, ...]  # code = index + 1; 0 = unknown series
    scalers: dict  # see scaling.py: per-series and pooled {mean, std} per feature and the target center/scale
    target: str = "log_return"
    scaling: str = "series"
    intraday: bool = False  # which calendar features exist (time of day vs month)
    calendar_features: bool = False
    exchange_tz: str = "America/Chicago"
    bar_spacing_ns: int = 0  # median bar spacing in training: the step of the forecast grid (known.py)
    # `--calendar`'s session: the closures of the forecast grid (`grid`). None (no --calendar, or a model saved
    # before it): the zone's default, CME Globex Equity's in America/Chicago, none elsewhere.
    session: Session | None = None
    # The user's own inputs (features/inputs.fitted): names, scaling, the event calendar. None: none declared.
    inputs: dict | None = None
    # What `--contracts auto` decided on the training bars (bars/chains.py): the roots whose symbols are each a series
    # of their own, and those whose contracts roll into one series; the model's bars are read that way
    # (`contract_roots`). None: another --contracts mode, or a model saved before the decision was kept.
    roots_apart: tuple[str, ...] | None = None
    roots_rolled: tuple[str, ...] | None = None

    @property
    def grid(self) -> Grid:
        """Where the forecast steps may sit (grid.future_timestamps)."""
        return default_grid(self.exchange_tz) if self.session is None else grid_of(self.session)

    def contract_roots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(roots kept apart, roots rolled) for reading bars for the model (load.load_bars' `roots`): the decision
        saved with it, or, for a model saved before it was, the one its series' names show (chains.roots_of_series),
        so that it reads its bars into the series it was trained on."""
        if self.roots_apart is not None:
            return self.roots_apart, self.roots_rolled or ()
        return roots_of_series(self.series_vocab)

    def code(self, names: list[str]) -> np.ndarray:
        """Series codes for `names` (0 for a series unseen in training)."""
        index = {n: i + 1 for i, n in enumerate(self.series_vocab)}
        return np.array([index.get(n, UNKNOWN_SERIES) for n in names], dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "series_vocab": list(self.series_vocab),
            "scalers": self.scalers,
            "target": self.target,
            "scaling": self.scaling,
            "intraday": self.intraday,
            "calendar_features": self.calendar_features,
            "exchange_tz": self.exchange_tz,
            "bar_spacing_ns": self.bar_spacing_ns,
            # only with --calendar: a transform without one is saved as before it existed
            **({} if self.session is None else {"session": dataclasses.asdict(self.session)}),
            **({} if self.inputs is None else {"inputs": self.inputs}),
            **({} if self.roots_apart is None else {"roots_apart": list(self.roots_apart),
                                                    "roots_rolled": list(self.roots_rolled or ())}),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> FittedTransform:
        d = dict(d)
        d["series_vocab"] = tuple(d["series_vocab"])
        for key in ("roots_apart", "roots_rolled"):  # absent from a model saved before: contract_roots reads its series
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        if d.get("session") is not None:
            d["session"] = session_of(d["session"])
        return FittedTransform(**d)


@dataclass
class PreparedData:
    schema: FeatureSchema
    windows: WindowedData
    splits: dict[str, torch.Tensor]  # "train", "val", "test" -> int64 window ids (test may be empty)
    transform: FittedTransform
    summary: dict  # JSON-able; `summary.format_summary` prints it
    rolls: list[dict] = field(default_factory=list)
    # features.own_move_columns(target) -> (N,) float32 per row of `windows` (NaN on rows that are not real): what
    # the baselines read besides the target. Empty for a store prepared before foxhunt kept them.
    own_moves: dict[str, np.ndarray] = field(default_factory=dict)
