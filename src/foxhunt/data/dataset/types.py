"""What a prepared dataset is and what a saved model keeps of its preparation: `FittedTransform` (the series
vocabulary, the scalers, the user's inputs and the grid, saved in model.json and a store's manifest) and
`PreparedData` (the windows, splits and summary).

They live apart from data/prepare so that loading a model (model/saved.py) or a store (store/read.py) does not
import the loading pipeline (bars/load.py, io/read.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.data.bars.grid import Grid, default_grid, grid_of
from foxhunt.data.bars.sessions import Session, session_of
from foxhunt.data.baselines.anchor import AnchorFit
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.data.features.calendar import SESSION_CALENDAR
from foxhunt.data.features.fitted import FittedInputs, Scalers
from foxhunt.data.features.scaling import observed_names
from foxhunt.data.features.schema import UNKNOWN_SERIES, FeatureSchema
from foxhunt.data.util.listing import listing

if TYPE_CHECKING:  # imported where tensors are made: prepare's worker processes (data/prepare) never need it
    import torch

log = logging.getLogger("foxhunt.data")
SHOWN = 10  # unseen series named in the warning at most


# The DataConfig options a transform featurizes by (its properties; the scalers' and the inputs' readers): two
# transforms featurize bars alike when these and their fitted values are equal.
FEATURIZING = ("target", "scaling", "vol_halflife", "vol_estimator", "vol_features", "fill_gaps", "exchange_tz",
               "calendar_features", "covariate_scaling", "encoder_length", "horizon", "anchor", "quantiles")


@dataclass(frozen=True)
class FittedTransform:
    """Everything needed to featurize new data exactly as in training. Saved (`to_dict`) in model.json and a
    store's manifest; the options it was fitted under are `data`, saved once beside it (model.json's "data", the
    store's "data_options") and given back to `from_dict`."""

    series_vocab: tuple[str, ...]  # code = index + 1; 0 = unknown series
    scalers: Scalers
    data: DataConfig  # the options it was fitted under: the target, the scaling, the trailing volatility's, ...
    intraday: bool = False  # which calendar features exist (time of day vs month)
    bar_spacing_ns: int = 0  # median bar spacing in training: the step of the forecast grid (known.py)
    # `--calendar`'s session: the closures of the forecast grid (`grid`). None (no --calendar): the zone's
    # default, CME Globex Equity's in America/Chicago, none elsewhere.
    session: Session | None = None
    inputs: FittedInputs | None = None  # the user's own inputs (features/inputs.fit_inputs); None: none declared
    # What `--contracts auto` decided on the training bars (bars/chains.py): the roots whose symbols are each a series
    # of their own, and those whose contracts roll into one series; the model's bars are read that way
    # (`contract_roots`). None: another --contracts mode, or bars without futures roots (nothing decided).
    roots_apart: tuple[str, ...] | None = None
    roots_rolled: tuple[str, ...] | None = None
    anchor: AnchorFit | None = None  # --anchor's fitted baselines (data/baselines/anchor.py); None: no anchor
    # The pandas-market-calendars calendar the session inputs follow (`--calendar-features`; calendar.features_calendar:
    # --calendar's, CME Globex Equity without one). Model files and stores saved before it was recorded followed CME's.
    features_calendar: str = SESSION_CALENDAR

    @property
    def target(self) -> str:
        return self.data.target

    @property
    def scaling(self) -> str:
        return self.data.scaling

    @property
    def calendar_features(self) -> bool:
        return self.data.calendar_features

    @property
    def session_calendar(self) -> str | None:
        """The calendar of the session inputs (calendar.session_features), None without `--calendar-features`."""
        return self.features_calendar if self.data.calendar_features else None

    @property
    def exchange_tz(self) -> str:
        return self.data.exchange_tz

    @property
    def event_cap(self) -> int:
        """Steps at which the event features saturate (events.event_features): the window's length."""
        return self.data.encoder_length + self.data.horizon

    @property
    def observed_names(self) -> tuple[str, ...]:
        """The observed continuous inputs in batch column order (scaling.observed_names)."""
        return observed_names(self.scalers, self.data)

    @property
    def grid(self) -> Grid:
        """Where the forecast steps may sit (grid.future_timestamps)."""
        return default_grid(self.exchange_tz) if self.session is None else grid_of(self.session)

    def contract_roots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(roots kept apart, roots rolled) for reading bars for the model (load.load_bars' `roots`): the decision
        saved with it (none where none was taken: bars without futures roots, or another --contracts mode), so that
        it reads its bars into the series it was trained on."""
        return self.roots_apart or (), self.roots_rolled or ()

    def code(self, names: list[str]) -> np.ndarray:
        """Series codes for `names` (0 for a series unseen in training)."""
        index = {n: i + 1 for i, n in enumerate(self.series_vocab)}
        return np.array([index.get(n, UNKNOWN_SERIES) for n in names], dtype=np.int64)

    def tell_unseen(self, names: Sequence[str]) -> None:
        """Warn once of the series in `names` that training never saw: a forecast of one is the pooled model's
        (the code UNKNOWN_SERIES), which a user reading its rows could not otherwise tell from a series' own."""
        known = set(self.series_vocab)
        unseen = [n for n in names if n not in known]
        if not unseen:
            return
        listed = listing([repr(n) for n in unseen], SHOWN)
        anchor = "" if self.anchor is None else ", and the standard normal quantiles as anchor (no GARCH-t fit of its own)"
        log.warning("%s the model never saw in training (%s): forecast with its unknown-series embedding (the "
                    "pooled model) and pooled scalers%s", "a series" if len(unseen) == 1 else f"{len(unseen)} series",
                    listed, anchor)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, every key present (null where there is none); without `data`, which is saved beside it."""
        return {
            "series_vocab": list(self.series_vocab),
            "scalers": self.scalers.to_dict(),
            "intraday": self.intraday,
            "bar_spacing_ns": self.bar_spacing_ns,
            "session": None if self.session is None else dataclasses.asdict(self.session),
            "inputs": None if self.inputs is None else self.inputs.to_dict(),
            "roots_apart": None if self.roots_apart is None else list(self.roots_apart),
            "roots_rolled": None if self.roots_rolled is None else list(self.roots_rolled),
            "anchor": None if self.anchor is None else self.anchor.to_dict(),
            "features_calendar": self.features_calendar,
        }

    @staticmethod
    def from_dict(d: dict[str, Any], data: DataConfig) -> FittedTransform:
        """The inverse of `to_dict`, fitted under `data` (the DataConfig saved beside it)."""

        def names(key: str) -> tuple[str, ...] | None:
            return None if d[key] is None else tuple(d[key])

        return FittedTransform(
            series_vocab=tuple(d["series_vocab"]), scalers=Scalers.from_dict(d["scalers"]), data=data,
            intraday=bool(d["intraday"]), bar_spacing_ns=int(d["bar_spacing_ns"]),
            session=None if d["session"] is None else session_of(d["session"]),
            inputs=None if d["inputs"] is None else FittedInputs.from_dict(d["inputs"]),
            roots_apart=names("roots_apart"), roots_rolled=names("roots_rolled"),
            anchor=None if d["anchor"] is None else AnchorFit.from_dict(d["anchor"]),
            features_calendar=d.get("features_calendar", SESSION_CALENDAR))  # absent: saved when it was always CME's


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


def digest_order(names: Collection[str]) -> list[str]:
    """The arrays of `names` the digest of a prepared dataset covers (train/resume.py's; a store's manifest's), in
    its order: WindowedData's tensors as its fields list them, then the splits' window ids (`split_<name>`) by name.
    The baselines' own moves are not covered (training does not read them)."""
    fields = [f.name for f in dataclasses.fields(WindowedData) if f.name in names]
    return fields + sorted(n for n in names if n.startswith("split_"))
