"""Bad rows of a read frame, judged: rows with a missing or non-finite price or volume, and rows whose prices
contradict each other, are dropped with one warning unless more than MAX_BAD_FRACTION of the panel's rows are bad
(then the export is broken and the run stops, naming the first). A panel read in pieces (prepare/driver.py) merges its
pieces' counts before they are judged, so the 1% is the panel's in pieces as in memory."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from foxhunt.data.bars.duplicates import Duplicates
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

MAX_BAD_FRACTION = 0.01


@dataclass(frozen=True)
class BadRows:
    """The rows with a missing or non-finite value and those with contradicting OHLC prices among the `rows`
    clean_bars checks, with the first of each kind in read order (the row's file_idx, row, symbol, ts and prices;
    None where not looked for): what `judge_bad_rows` decides on. The 1% is of the panel's rows, so the counts of a
    panel read in pieces are merged (`merge`) before they are judged."""

    rows: int
    nonfinite: int = 0
    inconsistent: int = 0
    first_nonfinite: dict | None = None
    first_inconsistent: dict | None = None
    duplicates: Duplicates = Duplicates()  # a piece's (clean_bars with judge=False), told over the panel's rows
    out_of_order: int = 0

    def over(self) -> bool:
        return self.nonfinite + self.inconsistent > MAX_BAD_FRACTION * self.rows

    @staticmethod
    def merge(parts: list[BadRows]) -> BadRows:
        """The BadRows of the rows of `parts` together (pieces of one panel, file_idx counted over its files)."""
        def first(rows: list[dict | None]) -> dict | None:
            return min((r for r in rows if r is not None), key=lambda r: (r["file_idx"], r["row"]), default=None)

        return BadRows(sum(p.rows for p in parts), sum(p.nonfinite for p in parts),
                       sum(p.inconsistent for p in parts), first([p.first_nonfinite for p in parts]),
                       first([p.first_inconsistent for p in parts]),
                       Duplicates.merge([p.duplicates for p in parts]), sum(p.out_of_order for p in parts))


class AllRowsBad(Exception):
    """Every row of a piece of a panel is bad (clean_bars with judge=False): nothing is left to load. Its caller
    judges `bad` over the panel's rows."""

    def __init__(self, bad: BadRows) -> None:
        super().__init__(bad)  # pickled by its args: it comes back from a worker process
        self.bad = bad


def judge_bad_rows(bad: BadRows, files: list[str]) -> None:
    """InputError naming the first bad row when more than MAX_BAD_FRACTION of the rows are bad (the export is
    broken); otherwise one warning with the counts dropped, if any. `files` maps file_idx to a path."""
    n, n_nonfinite, n_inconsistent = bad.rows, bad.nonfinite, bad.inconsistent
    if bad.over():
        if n_nonfinite >= n_inconsistent:
            first = bad.first_nonfinite
            problem = f"{n_nonfinite} of {n} rows ({100 * n_nonfinite / n:.1f}%) have a missing or non-finite price"
            problem += " or volume (NaN, inf)"
        else:
            first = bad.first_inconsistent
            problem = f"{_inconsistent(first)}; {n_inconsistent} of {n} rows ({100 * n_inconsistent / n:.1f}%) have"
            problem += " OHLC prices that contradict each other"
        others = f" ({n_nonfinite + n_inconsistent} bad rows in all)" if n_nonfinite and n_inconsistent else ""
        raise InputError(
            f"{row_place(first, files)}: {problem}{others}, more than the 1% that is dropped; fix or re-export the data"
        )
    if n_nonfinite or n_inconsistent:
        log.warning(
            "dropped %d rows with missing or non-finite values and %d rows with inconsistent OHLC prices",
            n_nonfinite,
            n_inconsistent,
        )


def _inconsistent(r: dict) -> str:
    """Why one row's OHLC prices contradict each other."""
    if r["high"] < r["low"]:
        return f"high {r['high']} is below low {r['low']}"
    if r["high"] < max(r["open"], r["close"]):
        return f"high {r['high']} is below max(open, close) {max(r['open'], r['close'])}"
    return f"low {r['low']} is above min(open, close) {min(r['open'], r['close'])}"


def row_place(r: dict, files: list[str]) -> str:
    """'file row N (SYMBOL at ISO-TS)' for one row of the read frame."""
    ts = r["ts"].isoformat() if r["ts"] is not None else "?"
    return f"{files[r['file_idx']]} data row {r['row'] + 1} ({r['symbol']} at {ts})"
