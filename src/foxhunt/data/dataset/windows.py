"""Windows as an index into one contiguous set of row tensors, and their assignment to train / val / test.

All series are concatenated row-wise (sorted by series, ts). A window is the row of its first encoder bar; its
E encoder rows and D forecast rows are `start + arange(E + D)`, always inside one series. A batch is one gather per
tensor, so memory is O(rows x features) however many windows there are.

The known inputs at forecast steps do not come from the forecast rows: they come from a separate table indexed by
the origin (see `known.py`), the calendar of the regular grid after the origin, so that they are exactly what
`predict` can compute at the origin and never reveal which later bars exist. The forecast rows give the targets.

Legend: B batch, E encoder steps, D forecast steps, T = E + D, F continuous columns, W windows, N rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import FeatureSchema, Kind, Role
from foxhunt.errors import InputError

if TYPE_CHECKING:  # imported where tensors are made: prepare's worker processes (data/prepare) never need it
    import torch

OFF_GRID_CHUNK = 1 << 16  # windows whose forecast grid off_grid checks at a time (its temporaries: 2.5 MB)


def off_grid_windows(starts: np.ndarray, ts: np.ndarray, grid_ts: np.ndarray, e: int, d: int, base: np.ndarray,
                     last_index: np.ndarray | None = None, chunk: int = OFF_GRID_CHUNK) -> int:
    """How many windows `starts` (W,) have bars missing from their forecast span: their last forecast bar's time
    (`ts` (N,)) is not the last step of the origin's grid (`grid_ts` (U,); an origin row's grid row of step 1 is
    `base` (N,), of step D `last_index` (N,) when the grid is not one lattice). The data summary's count
    (dataset/featurize.windowed_rows), for the panel in memory and for each piece of a store alike.

    Counted `chunk` windows at a time: over all windows at once its int64 temporaries would take 80 MB for 2M bars,
    at the end of loading when the most memory is in use."""
    total = 0
    for lo in range(0, len(starts), chunk):
        origin = starts[lo : lo + chunk] + (e - 1)  # (C,)
        last = base[origin] + (d - 1) if last_index is None else last_index[origin].astype(np.int64)  # (C,)
        total += int(np.count_nonzero(ts[origin + d] != grid_ts[last]))
    return total


@dataclass
class WindowedData:
    cont: (
        torch.Tensor
    )  # (N, F) float32: known continuous (calendar) columns, then observed continuous columns
    static_cat: torch.Tensor  # (N, Sc) int64, constant within a series: the series code, then --static categories
    time_cat: torch.Tensor  # (N, Kc + Oc) int64: known categorical, then observed categorical columns
    target_raw: torch.Tensor  # (N,) float32 in the target's own units; NaN on rows beyond the data
    center: torch.Tensor  # (N,) float32, the target center at each row (used at a window's origin)
    scale: torch.Tensor  # (N,) float32 > 0
    ts_ns: torch.Tensor  # (N,) int64 bar timestamps (extrapolated on rows beyond the data)
    real: torch.Tensor  # (N,) bool: False on rows appended for prediction
    series_idx: torch.Tensor  # (N,) int64 index into `series_names`
    starts: torch.Tensor  # (W,) int64 row of each window's first encoder bar
    encoder_length: int
    horizon: int
    n_known_cont: int  # calendar columns stored in `cont`; the relative time index is appended in `batch`
    n_known_cat: int
    series_names: tuple[str, ...]  # the series in this data (not the model's vocabulary)
    # Known inputs at forecast steps, a function of the origin alone (known.DecoderKnown):
    known_cont: torch.Tensor  # (U, Kr) float32 calendar columns of each distinct grid timestamp
    known_cat: torch.Tensor  # (U, Kc) int64
    known_ts: torch.Tensor  # (U,) int64 the grid timestamps
    known_base: torch.Tensor  # (N,) int64 table row of step 1 of an origin at each row; step k at base + k - 1
    known_index: torch.Tensor | None = None  # (N, D) int32 table rows per step when the grid is not one lattice
    # (N, Sr) float32 the user's real static inputs (features/static.py), constant within a series; None: none
    # (zero-width, as for a store written before them)
    static_cont: torch.Tensor | None = None
    # (N, D * Q) float32 the anchor's quantiles at each row as an origin, scaled (--anchor); None: no anchor
    anchor: torch.Tensor | None = None

    def __post_init__(self) -> None:
        import torch

        if self.static_cont is None:
            self.static_cont = torch.zeros(self.static_cat.shape[0], 0)

        e, t = self.encoder_length, self.encoder_length + self.horizon
        self._steps = torch.arange(t, dtype=torch.int64)  # (T,)
        self._dsteps = torch.arange(self.horizon, dtype=torch.int64)  # (D,)
        # TFT relative time index: position -E+1 .. D (0 at the origin), divided by E.
        self._rel = ((self._steps - (e - 1)).float() / e).view(1, t, 1)  # (1, T, 1)

    @property
    def n_windows(self) -> int:
        return int(self.starts.shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.cont.shape[0])

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.starts[ids.long()][:, None] + self._steps  # (B, T)

    def _origin(self, ids: torch.Tensor) -> torch.Tensor:
        return self.starts[ids.long()] + (self.encoder_length - 1)  # (B,)

    def _future(self, ids: torch.Tensor) -> torch.Tensor:
        # (B, D), without the (B, T) rows of the whole window: T/D times the memory (1M windows of 64 + 5: 552 MB)
        return self.starts[ids.long()][:, None] + (self.encoder_length + self._dsteps)

    def _known_rows(self, origin: torch.Tensor) -> torch.Tensor:
        """(B, D) rows of the known-input table for the forecast steps of origin rows `origin` (B,)."""
        if self.known_index is None:
            return self.known_base.index_select(0, origin)[:, None] + self._dsteps
        return self.known_index.index_select(0, origin).long()

    def decoder_ns(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, D) int64 grid timestamps whose calendar the decoder sees: the regular grid after each origin."""
        return self.known_ts[self._known_rows(self._origin(ids))]

    def batch(self, ids: torch.Tensor) -> Batch:
        """The windows `ids` (B,) as a Batch: each distinct bar's inputs once, the windows as row indices into them.

        The target is scaled with center/scale taken at each origin row. Bars are deduplicated separately for the
        encoder and the forecast positions. Forecast positions read the known-input table at the origin's grid
        steps, not the forecast rows: observed values, and the timestamps of the bars that follow, never reach them.
        `ids` may be empty (a rank's share of a global batch smaller than the ranks): a batch of no windows.
        """
        import torch

        ids = ids.long()
        e = self.encoder_length
        rows = self._rows(ids)  # (B, T)
        b = rows.shape[0]
        origin = rows[:, e - 1]  # (B,)
        enc_rows, enc_index = torch.unique(rows[:, :e], return_inverse=True)  # (Re,), (B, E)
        dec_rows, dec_index = torch.unique(self._known_rows(origin), return_inverse=True)  # (Rd,), (B, D)
        center, scale = self.center.index_select(0, origin), self.scale.index_select(0, origin)  # (B,)
        raw = self.target_raw.index_select(0, rows[:, e:].reshape(-1)).view(b, self.horizon)  # (B, D)
        dec_cont = self.known_cont.index_select(0, dec_rows)  # (Rd, Kr)
        dec_cat = self.known_cat.index_select(0, dec_rows)  # (Rd, Kc)
        return Batch(
            static_cat=self.static_cat.index_select(0, origin),  # (B, Sc)
            static_cont=self.static_cont.index_select(0, origin),  # (B, Sr)
            enc_cont=self.cont.index_select(0, enc_rows),  # (Re, Kr + Or)
            enc_cat=self.time_cat.index_select(0, enc_rows),  # (Re, Kc + Oc)
            enc_index=enc_index,
            dec_cont=dec_cont.contiguous(),
            dec_cat=dec_cat.contiguous(),
            dec_index=dec_index,
            pos_cont=self._rel[0],  # (T, 1)
            target=(raw - center[:, None]) / scale[:, None],  # (B, D)
            target_center=center,
            target_scale=scale,
            window=ids,
            anchor=None if self.anchor is None else  # (B, D, Q); Q spelt out: B may be 0 (an empty shard)
            self.anchor.index_select(0, origin).view(b, self.horizon, self.anchor.shape[1] // self.horizon),
        )

    def origin_ns(self, ids: torch.Tensor) -> torch.Tensor:
        """(B,) int64 timestamp of each window's last encoder bar (the forecast origin)."""
        return self.ts_ns[self._origin(ids)]

    def target_ns(self, ids: torch.Tensor, extrapolated: bool = False) -> torch.Tensor:
        """(B, D) int64 timestamps of the forecast bars; -1 beyond the data unless `extrapolated` (then the guess)."""
        import torch

        fut = self._future(ids)
        ts = self.ts_ns[fut]
        return ts if extrapolated else torch.where(self.real[fut], ts, torch.full_like(ts, -1))

    def series_code(self, ids: torch.Tensor) -> torch.Tensor:
        """(B,) the model's series code (index into the training vocabulary + 1; 0 = series unseen in training)."""
        return self.static_cat[self._origin(ids), 0]

    def series_index(self, ids: torch.Tensor) -> torch.Tensor:
        """(B,) index into `series_names` (works for series unseen in training too)."""
        return self.series_idx[self._origin(ids)]

    def at_targets(self, ids: torch.Tensor, column: int) -> torch.Tensor:
        """(B, D) continuous column `column` of `cont` at the forecast bars (e.g. the observed `filled` flag)."""
        return self.cont[self._future(ids), column]

    def actual(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, D) raw (unscaled) target of the forecast bars; NaN beyond the data."""
        return self.target_raw[self._future(ids)]

    def origin_target(self, ids: torch.Tensor) -> torch.Tensor:
        """(B,) raw target of each window's origin bar: the outcome known at the origin (adaptive calibration scores
        the earlier origins' forecasts with it)."""
        return self.target_raw[self._origin(ids)]

    def check_codes(self, schema: FeatureSchema, whose: str = "the data") -> None:
        """InputError unless every categorical code lies in [0, cardinality) of its feature in `schema`.

        The model keeps all categorical inputs of a group in one embedding table at per-variable offsets, so a code
        past its variable's cardinality would silently read the next variable's rows (or, past the table, fail
        inside the model with an index error on the device). Checked once here, at the data boundary: one min/max
        per column, O(rows).
        """
        columns = [(self.static_cat, schema.group(Role.STATIC, Kind.CATEGORICAL)),
                   (self.time_cat, schema.group(Role.KNOWN, Kind.CATEGORICAL)
                    + schema.group(Role.OBSERVED, Kind.CATEGORICAL))]
        for codes, features in columns:
            if codes.shape[1] != len(features):
                raise InputError(f"the data has {codes.shape[1]} categorical columns where {whose} has "
                                 f"{len(features)} ({', '.join(f.name for f in features) or 'none'}); prepare the data "
                                 "with the model's own transform")
            for j, f in enumerate(features):
                col = codes[:, j]  # (N,)
                bad = (col < 0) | (col >= max(f.cardinality, 1))
                if bool(bad.any()):
                    row = int(bad.nonzero()[0, 0])
                    when = np.datetime64(int(self.ts_ns[row]), "ns").astype("datetime64[s]")
                    raise InputError(
                        f"categorical input {f.name!r}: code {int(col[row])} at series "
                        f"{self.series_names[int(self.series_idx[row])]} bar {when}Z is outside [0, {f.cardinality}) "
                        f"of {whose}; the codes and the model's embedding table disagree: prepare the data with the "
                        "model's own transform (model.json), or retrain"
                    )

    def iter_batches(
        self,
        ids: torch.Tensor,
        batch_size: int,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
    ) -> Iterator[Batch]:
        """Batches of at most `batch_size` windows, in the order of `ids` or shuffled with `generator`."""
        import torch

        if shuffle:
            ids = ids[torch.randperm(len(ids), generator=generator)]
        for i in range(0, len(ids), batch_size):
            yield self.batch(ids[i : i + batch_size])


ID_CHUNK = 1 << 20  # window ids read at a time by `id_chunks`


def id_chunks(ids: torch.Tensor, size: int = ID_CHUNK) -> Iterator[torch.Tensor]:
    """`ids` `size` at a time: a read by window ids gives (chunk, D) times or actuals, where all of a store's 20M
    windows at once would be (W, D), 800 MB of int64 times."""
    for a in range(0, len(ids), size):
        yield ids[a : a + size]


def series_bounds(series_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row, end row) of each run of equal `series_idx` in a frame sorted by series."""
    change = np.flatnonzero(series_idx[1:] != series_idx[:-1]) + 1  # a bool per row, not an int64 difference
    first = np.concatenate([[0], change]).astype(np.int64)
    end = np.concatenate([change, [len(series_idx)]]).astype(np.int64)
    return first, end


def window_starts(first: np.ndarray, end: np.ndarray, window_length: int) -> np.ndarray:
    """Start rows of every window of `window_length` rows inside each series' rows [first, end).

    A series' first row has no return and is never read, so windows start at first + 1 and the last one ends at
    `end`: max(0, end - first - window_length) windows per series. In prediction mode `end` includes the appended
    future rows, so the last window's origin is the last real bar. Vectorized: no loop over series or windows.
    """
    counts = np.maximum(end - first - window_length, 0)
    offsets = np.repeat(first + 1 - (np.cumsum(counts) - counts), counts)
    return np.arange(int(counts.sum()), dtype=np.int64) + offsets


@dataclass(frozen=True)
class SplitResult:
    ids: dict[str, np.ndarray]  # split -> window ids (int64)
    purged: dict[str, int]  # split -> windows dropped because their forecast bars cross the split's end


def assign_splits(
    first_fc_ns: np.ndarray, last_fc_ns: np.ndarray, train_cut: int, val_cut: int | None,
    train_start: int | None = None,
) -> SplitResult:
    """Each window belongs to the split of its first forecast bar: train before `train_cut`, val before `val_cut`
    (None: no end), test after. Train windows whose last forecast bar is at or after `train_cut` are purged (their
    targets would be validation data), and so are val windows crossing `val_cut`. With `train_start` (a rolling
    window) windows forecasting from before it are in no split."""
    is_train = first_fc_ns < train_cut
    is_val = ~is_train if val_cut is None else ~is_train & (first_fc_ns < val_cut)
    is_test = ~is_train & ~is_val
    if train_start is not None:
        is_train &= first_fc_ns >= train_start
    purge_train = is_train & (last_fc_ns >= train_cut)
    purge_val = is_val & (last_fc_ns >= val_cut) if val_cut is not None else np.zeros_like(is_val)
    return SplitResult(
        ids={
            "train": np.flatnonzero(is_train & ~purge_train),
            "val": np.flatnonzero(is_val & ~purge_val),
            "test": np.flatnonzero(is_test),
        },
        purged={"train": int(purge_train.sum()), "val": int(purge_val.sum())},
    )
