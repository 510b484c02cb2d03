"""Where a run's splits are cut, and the checks that a panel holds windows and that every split has some: train
before the train cut, validation before the validation cut, test after it (windows.assign_splits puts each window
in one).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.summary import EPOCH, iso
from foxhunt.data.dataset.windows import SplitResult
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")
SHOWN = 10  # short series named in the warning at most


def _date_ns(text: str, flag: str) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} {text!r} is not an ISO date; write it as YYYY-MM-DD") from None
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return (dt - EPOCH) // timedelta(microseconds=1) * 1000


def train_start_ns(cfg: DataConfig) -> int:
    """A rolling window's start (DataConfig.train_start) in ns; the earliest int64 without one."""
    return _date_ns(cfg.train_start, "train_start") if cfg.train_start else np.iinfo(np.int64).min


def split_cuts(cfg: DataConfig, ts_ns: np.ndarray | list[np.ndarray]) -> tuple[int, int | None]:
    """(train cut, val cut) in ns UTC: the dates given, or `split_times`' fractions of the bars' span, each moved to
    the first bar at or after it, so that daily bars are cut at a day and the summary's cut is a bar's time.
    Moving a cut past no bar moves no row and no window across it: the splits and the purge are those of the
    fraction's time. `ts_ns`: every bar's time (N,), or arrays that together hold them (the pieces' distinct
    times)."""
    parts = [ts_ns] if isinstance(ts_ns, np.ndarray) else [p for p in ts_ns if len(p)]
    times = split_times(cfg, min(int(p.min()) for p in parts), max(int(p.max()) for p in parts))
    if cfg.train_end:
        return times
    train_cut, val_cut = times
    return bar_at_or_after(train_cut, parts), None if val_cut is None else bar_at_or_after(val_cut, parts)


def split_times(cfg: DataConfig, lo: int, hi: int) -> tuple[int, int | None]:
    """(train cut, val cut) in ns UTC before `split_cuts` puts them on bars: from the dates, or by fractions of the
    time span [lo, hi]: the last `test_fraction` is test (none when 0), the `val_fraction` before it validation,
    the rest train."""
    if cfg.train_end:
        val_cut = _date_ns(cfg.val_end, "--val-end") if cfg.val_end else None
        return _date_ns(cfg.train_end, "--train-end"), val_cut
    test = cfg.test_fraction
    val_cut = lo + int((hi - lo) * (1.0 - test)) if test > 0 else None
    return lo + int((hi - lo) * (1.0 - cfg.val_fraction - test)), val_cut


CUT_CHUNK = 1 << 20  # bar times bar_at_or_after compares at a time (its temporaries: a few MB)


def bar_at_or_after(t: int, parts: list[np.ndarray]) -> int:
    """The least time at or after `t` in the arrays `parts` (any order); `t` itself when none is."""
    best = None
    for p in parts:
        for lo in range(0, len(p), CUT_CHUNK):
            chunk = np.asarray(p[lo : lo + CUT_CHUNK])
            later = chunk[chunk >= t]
            if len(later):
                best = int(later.min()) if best is None else min(best, int(later.min()))
    return t if best is None else best


def check_length(names: list[str], lengths: np.ndarray, e: int, d: int, for_prediction: bool) -> None:
    """At least one series must hold one window (the first bar of a series has no return and is never used). A
    prediction's series too short for a forecast beside longer ones are said once, as a warning naming each: they
    get no forecast, and the output would otherwise leave them out without a word."""
    need = e + 1 if for_prediction else e + d + 1
    longest = int(np.argmax(lengths))
    have = int(lengths[longest])
    if have >= need:
        if for_prediction:
            tell_short(names, lengths, need, e)
        return
    where = f"the longest series {names[longest]!r} has {have}"
    if for_prediction:
        raise InputError(
            f"too few bars for a forecast: the model's encoder needs {need} bars in one series "
            f"(encoder {e} + 1, the first bar has no return), but {where}; load a longer history"
        )
    most = have - d - 1
    fix = (
        f"use a smaller --encoder-length (at most {most})"
        if most >= 1
        else "load a longer history or lower --horizon"
    )
    raise InputError(
        f"too few bars for one window: it needs {need} bars in one series (encoder {e} + horizon {d} + 1, "
        f"the first bar has no return), but {where}; {fix}"
    )


def tell_short(names: list[str], lengths: np.ndarray, need: int, e: int) -> None:
    """Warn once of the series (`names`, their bar counts `lengths` (S,)) with fewer than `need` bars."""
    short = np.flatnonzero(lengths < need)
    if not len(short):
        return
    listed = listing([f"{names[i]!r} ({int(lengths[i])} bars)" for i in short], SHOWN)
    log.warning("no forecast for %d series with fewer bars than the model's encoder needs, %d (encoder %d + 1, the "
                "first bar has no return): %s; load a longer history of them", len(short), need, e, listed)


def check_splits(split: SplitResult, cuts: tuple[int, int | None], cfg: DataConfig, span: np.ndarray) -> None:
    """InputError naming the fix where a split has no window. `span`: the bars' first and last time (or all of
    them)."""
    span_text = f"the data cover {iso(int(span.min()))[:10]} .. {iso(int(span.max()))[:10]}"
    train_cut, val_cut = cuts
    by_date = cfg.train_end is not None
    if len(split.ids["train"]) == 0:
        fix = "move --train-end later" if by_date else "lower --val-fraction"
        raise InputError(
            f"train split is empty: no window's forecast bars all fall before {iso(train_cut)} "
            f"({split.purged['train']} purged for crossing it); {span_text}; {fix} or use a smaller --encoder-length"
        )
    if len(split.ids["val"]) == 0:
        end = f"and {iso(val_cut)}" if val_cut is not None else "and the end of the data"
        fix = "move --train-end earlier or --val-end later" if by_date else "raise --val-fraction or --test-fraction"
        raise InputError(
            f"val split is empty: no window's forecast bars fall between {iso(train_cut)} {end} "
            f"({split.purged['val']} purged for crossing the end); {span_text}; {fix} or use a smaller --horizon"
        )
    if val_cut is not None and len(split.ids["test"]) == 0:
        where, fix = (
            (f"--val-end {cfg.val_end}", "move --val-end earlier or drop it (then all after --train-end validates)")
            if by_date
            else (iso(val_cut), "raise --test-fraction, or set it to 0 for no test split")
        )
        raise InputError(f"test split is empty: no window's first forecast bar is on or after {where}; {span_text}; "
                         f"{fix}")
