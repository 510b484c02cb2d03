"""The epoch's order of training windows (runs of windows a stride apart, the runs shuffled), computed a slice at a time.

Training used to build the whole permutation: half a dozen int64 arrays of one entry per
training window (about 120 MB each for 15M windows), held for the epoch. `RunOrder` draws the same random numbers in
the same order from the generator and keeps only what fixes the permutation: the run starts and lengths in their
shuffled order and their running end (one entry per run, `run` times fewer; int32 below 2**31 windows). Any slice of
the permutation is then computed on demand with one `searchsorted`, so a batch's positions cost O(batch) memory and
`RunOrder(...).take(0, n)` equals the whole permutation built before, entry for entry (tests/train/test_epoch_order.py).

Legend: n positions, R runs, L lanes (= stride).
"""

from __future__ import annotations

import torch


class RunOrder:
    """A permutation of range(n) made of runs of `run` positions `stride` apart, the runs in random order.

    The positions are first laid out lane by lane: lane j holds the positions congruent to (j + shift) mod stride,
    in increasing order, so neighbours in a lane are `stride` apart. That layout is cut into runs of `run` entries
    (the first cut at a random phase, so the first and last runs may be short), and the runs are shuffled. `run` 1
    is a plain shuffle (materialized: its permutation has no shorter description); `n <= run` keeps the order.

    Why runs: windows are sorted by series and time, so a run is `run` windows starting `stride` bars apart; they
    share all but `stride * (run - 1)` of their bars, and a batch of such runs needs per-bar work on far fewer
    distinct bars (see `Batch`). A stride of at least the horizon keeps the forecast bars of a run's windows apart.
    The run boundaries move with a random phase each epoch, so no two windows are always in the same run.
    """

    def __init__(self, n: int, run: int, generator: torch.Generator | None = None, stride: int = 1):
        self.n = n
        self.perm: torch.Tensor | None = None  # the whole permutation, when it has no shorter form
        if run <= 1 or n <= run:
            self.perm = torch.randperm(n, generator=generator) if run <= 1 else torch.arange(n)
            self.perm = self.perm.to(_index_dtype(n))
            return
        stride = max(1, min(stride, n // run))
        shift = int(torch.randint(stride, (1,), generator=generator))
        phase = int(torch.randint(run, (1,), generator=generator))
        bounds = torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(phase or run, n, run), torch.tensor([n])])
        sizes = bounds.diff()  # (R,) run lengths
        order = torch.randperm(len(sizes), generator=generator)  # (R,) runs in random order
        dtype = _index_dtype(n)
        self.starts = bounds[:-1][order].to(dtype)  # (R,) each shuffled run's first lane position
        self.ends = sizes[order].cumsum(0).to(dtype)  # (R,) its end in the permutation
        self.stride = stride
        residues = (torch.arange(stride) + shift) % stride  # (L,) the residue of each lane, in lane order
        lane_sizes = (n - residues + stride - 1) // stride  # (L,)
        self.residues = residues
        self.lane_first = torch.cat([torch.zeros(1, dtype=torch.long), lane_sizes.cumsum(0)[:-1]])  # (L,)

    def __len__(self) -> int:
        return self.n

    def take(self, start: int, stop: int) -> torch.Tensor:
        """Positions start..stop of the permutation, (stop - start,) int64."""
        start, stop = max(0, start), min(self.n, stop)
        if stop <= start:
            return torch.zeros(0, dtype=torch.long)
        if self.perm is not None:
            return self.perm[start:stop].long()
        k = torch.arange(start, stop, dtype=torch.long)  # (B,) positions in the permutation
        r = torch.searchsorted(self.ends, k.to(self.ends.dtype), right=True)  # (B,) the run each falls in
        run_begin = torch.where(r > 0, self.ends[(r - 1).clamp(min=0)].long(), 0)  # (B,) its start in the permutation
        lane_pos = self.starts[r].long() + (k - run_begin)  # (B,) position in the lane layout
        lane = torch.searchsorted(self.lane_first, lane_pos, right=True) - 1  # (B,)
        return self.residues[lane] + (lane_pos - self.lane_first[lane]) * self.stride


def _index_dtype(n: int) -> torch.dtype:
    return torch.int32 if n < 2**31 else torch.int64


class OrderedIds:
    """`ids[order]` from position `start` to `stop` of the order, sliced lazily: `self[a:b]` (int64) reads entries
    a..b only, so a mapped `ids` (a store's split array) is read a batch at a time, never copied whole."""

    def __init__(self, ids: torch.Tensor, order: RunOrder, start: int = 0, stop: int | None = None):
        self.ids, self.order = ids, order
        self.start = max(0, start)
        self.stop = max(self.start, min(len(order), len(order) if stop is None else stop))

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, part: slice) -> torch.Tensor:
        a, b, step = part.indices(len(self))
        if step != 1:
            raise ValueError("OrderedIds takes contiguous slices only")
        return self.ids.index_select(0, self.order.take(self.start + a, self.start + b)).long()
