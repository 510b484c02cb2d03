"""Shared test fixtures: the bundled input files (tests/fixtures), small-model CLI flags, the sample cache, one thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # in the repository: a clone with nothing beside it passes its own tests


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def spx_path() -> Path:
    """Real S&P 500 daily bars, 1999-2018 (as the arch package ships them): see tests/fixtures/README.md."""
    return FIXTURES / "spx_daily.parquet"


@pytest.fixture(scope="session")
def daily_path(fixtures_dir) -> Path:
    """Generic daily OHLCV bars of one symbol: the quickest file to train a tiny model on."""
    return fixtures_dir / "generic_ohlcv_daily.parquet"


@pytest.fixture(scope="session")
def tiny_flags() -> tuple[str, ...]:
    """A tiny model and short windows, so every CLI test trains in seconds (session scope: module fixtures use it);
    3 epochs, not --epochs auto (30 on the tiny fixtures), unless a test passes its own --epochs after these."""
    return ("--epochs", "3", "--hidden-size", "8", "--attention-heads", "2", "--encoder-length", "16", "--horizon", "3",
            "--no-progress", "--threads", "1")


@pytest.fixture
def tiny(tiny_flags) -> list[str]:
    return list(tiny_flags)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny tensors gain nothing from intra-op threads, and spinning threads slow a shared 2-core box badly."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    """The bundled sample is generated once per session into a temporary cache (never $HOME); no injected faults."""
    monkeypatch.setenv("FOXHUNT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "foxhunt-cache"))
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT", raising=False)


@pytest.fixture(scope="session")
def bare_transform():
    """Make a FittedTransform of series ("ES",) with unit scalers, fitted under DataConfig(**`data`) (the zone, the
    calendar...): for tests of what the forecast grid and the calendar inputs read. Keywords: the transform's fields."""
    from foxhunt.data.config import DataConfig
    from foxhunt.data.dataset.types import FittedTransform
    from foxhunt.data.features.fitted import Scalers, SeriesScalers

    def make(data: dict | None = None, **fields) -> FittedTransform:
        scalers = Scalers({}, SeriesScalers({}, 0.0, 1.0, 1.0))
        return FittedTransform(**{"series_vocab": ("ES",), "scalers": scalers, "data": DataConfig(**(data or {})),
                                  **fields})

    return make
