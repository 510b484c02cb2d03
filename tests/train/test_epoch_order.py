"""The epoch's window order taken a batch at a time (data/dataset/run_order.py) is the permutation training built
whole before, entry for entry, and leaves the generator where it left it."""

from __future__ import annotations

import pytest
import torch

from foxhunt.data.dataset.run_order import OrderedIds, RunOrder


def _whole(n: int, run: int, generator: torch.Generator, stride: int = 1) -> torch.Tensor:
    """The permutation as training built it before it was taken lazily (kept here as the reference)."""
    if run <= 1 or n <= run:
        return torch.randperm(n, generator=generator) if run <= 1 else torch.arange(n)
    stride = max(1, min(stride, n // run))
    shift = int(torch.randint(stride, (1,), generator=generator))
    lanes = torch.cat([torch.arange((r + shift) % stride, n, stride) for r in range(stride)])
    phase = int(torch.randint(run, (1,), generator=generator))
    bounds = torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(phase or run, n, run), torch.tensor([n])])
    sizes = bounds.diff()
    order = torch.randperm(len(sizes), generator=generator)
    starts, lengths = bounds[:-1][order], sizes[order]
    offsets = torch.arange(int(lengths.sum())) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    return lanes[torch.repeat_interleave(starts, lengths) + offsets]


@pytest.mark.parametrize(("n", "run", "stride"), [(100, 16, 1), (17, 4, 1), (5, 8, 1), (9, 1, 1), (200, 8, 5),
                                                  (12_345, 16, 5), (64, 16, 5), (33, 16, 3), (3, 2, 5)])
def test_every_slice_is_the_whole_permutations_slice(n: int, run: int, stride: int) -> None:
    for seed in range(3):
        g_ref, g = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        want = _whole(n, run, g_ref, stride)
        order = RunOrder(n, run, g, stride)
        assert torch.equal(g.get_state(), g_ref.get_state())  # the same draws: the next epoch's are unchanged too
        assert torch.equal(order.take(0, n), want)
        for a, b in ((0, 7), (3, 50), (n // 2, n), (n - 1, n + 5), (5, 5)):
            assert torch.equal(order.take(a, b), want[a:b]), (seed, a, b)


def test_ordered_ids_slice_the_ids_in_the_epochs_order() -> None:
    ids = torch.arange(1000, 1300) * 3  # (W,) window ids of a split
    order = RunOrder(len(ids), 8, torch.Generator().manual_seed(4), stride=3)
    epoch = OrderedIds(ids, order, 16, 290)  # a resumed epoch: two batches of 8 done; the last batch cut at 290
    want = ids[order.take(0, len(ids))][16:290]
    assert len(epoch) == len(want)
    assert torch.equal(torch.cat([epoch[i : i + 8] for i in range(0, len(epoch), 8)]), want)
    assert epoch[3:11].dtype == torch.int64
