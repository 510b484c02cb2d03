"""Data options, validated once at the edge (the CLI or a TOML file) and saved whole into the run directory."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from foxhunt.errors import InputError

CONTRACT_MODES = ("auto", "continuous", "each")
ADJUST_MODES = ("ratio", "difference", "none")
TARGETS = ("log_return", "log_range", "price_change")
SCALINGS = ("series", "volatility")
VOL_ESTIMATORS = ("returns", "range")
COVARIATE_SCALINGS = ("series", "global", "none")


@dataclass(frozen=True)
class DataConfig:
    paths: tuple[str, ...] = ()  # files, directories or globs; read as one dataset
    timestamp_col: str | None = None  # override time-column detection
    symbol_col: str | None = None  # override symbol-column detection
    contracts: str = "auto"  # auto | continuous | each
    adjust: str = "ratio"  # ratio | difference | none (back-adjustment of continuous series)
    # Sessions the next contract must out-trade the front before the series rolls to it. 2, because a single
    # session's lead is what one block trade or a spread's legs can make, while a roll that real volume has made holds:
    # waiting one more session costs at most one session on the old contract, which still trades heavily in roll week
    # (on the ES fixture the lead starts on the CME roll date, Thu 03-07, and the series rolls on Mon 03-11, four
    # sessions before expiry). 1 is the plain previous-session-volume rule.
    roll_confirm: int = 2
    target: str = "log_return"  # log_return | log_range | price_change (close_t - close_t-1: prices <= 0 allowed)
    encoder_length: int = 32
    horizon: int = 5
    train_end: str | None = None  # ISO date: first forecast bar before it -> train
    val_end: str | None = (
        None  # ISO date: first forecast bar before it (and >= train_end) -> validation, else test
    )
    # ISO date: a rolling window's start (`foxhunt backtest --window rolling`): windows forecasting from before it
    # do not train and the scalers are fitted from it on. No flag of its own; None: from the first bar.
    train_start: str | None = None
    val_fraction: float = 0.2  # used when train_end is not given: the fraction of time before the test part validates
    # Used when train_end is not given: the last fraction of time is the test split, held out of training and of
    # early stopping, so that `evaluate` scores a period no choice has seen. 0 keeps the old train / validation split.
    test_fraction: float = 0.2
    # Target scaling, trailing-volatility estimator and halflife: chosen on validation scores of the bundled ES sample
    # and SPX daily (benchmarks/defaults_search.py, docs/benchmarks.md "How the defaults were chosen"). Volatility units let the
    # model learn one shape of returns across regimes; the range (Parkinson) estimator is sharp enough for a 5-bar
    # halflife, which reacts to a volatility shock as fast as GARCH does. series scaling lost to GARCH-t on SPX.
    scaling: str = "volatility"  # series: per-series standardisation fitted on train | volatility: trailing-vol units
    vol_halflife: float = 5.0  # bars: halflife of the trailing-volatility EWMA (scaling and the log_vol input)
    vol_estimator: str = "range"  # returns: EWMA of r^2 | range: EWMA of ln(H/L)^2 (in return units)
    vol_features: bool = False  # extra inputs: shocks in volatility units, fast/slow volatility ratios
    # Intraday bars: the training period's volatility profile by minute of the day (seasonality.py) as a known input
    # (`tod_vol`), trailing volatility divided by it as an observed one, and volatility scaling by their product.
    # Ignored for daily bars (no time of day).
    seasonality: bool = True
    calendar_features: bool = False  # CME Globex Equity session features (needs the `calendars` extra)
    fill_gaps: bool = False  # intraday: missing grid bars inside a session become flagged zero-volume bars (fill.py)
    exchange_tz: str = "America/Chicago"  # with `calendar`: the calendar's zone
    timezone: str | None = None  # zone of naive timestamps (None: UTC, checked against the session grid)
    # How text times of the bar, --covariates and --events files are written: a strftime format (%m/%d/%Y %H:%M).
    # None: ISO 8601 or epoch counts; day and month side by side (03/05/2015) are refused rather than guessed.
    # Saved with the run: predict and evaluate read the later files the same way.
    date_format: str | None = None
    # A pandas-market-calendars name, or 24/7 (no package needed): every bar's session in the closed-bars check, and
    # (its zone) the exchange zone of the halt, the time-of-day inputs and the forecast grid. None: per root.
    calendar: str | None = None
    price_scale: float = 1.0  # every price is divided by it (100: a generic file of integer cents)
    # A feature store written by `foxhunt prepare` (data/store): the prepared data are mapped from it instead of
    # being computed from `paths` (the files it was prepared from). Does not shape the data.
    features: str | None = None
    # ISO dates or times (UTC when naive): only bars with since <= ts < until are read, and hive partitions dated
    # outside them are never opened (read.py). Saved with the run, so that the run says which bars it saw.
    since: str | None = None
    until: str | None = None
    # Your own inputs (data/features/inputs.py). `observed`: columns known up to and including their bar (of the bar
    # files or of a --covariates file, joined as of each bar's time); `known`: columns known in advance for future
    # times (of an unkeyed --covariates file, read at every forecast step); `covariates`: one entry per --covariates
    # flag (a file, folder or glob); `events`: a calendar of scheduled events, each name becoming known inputs.
    # Real inputs are standardized on the training rows: per series, over all of them (global), or not at all.
    observed: tuple[str, ...] = ()
    known: tuple[str, ...] = ()
    covariates: tuple[str, ...] = ()
    events: str | None = None
    # Cross-market context: each series also sees these series' own moves, volume and log_vol (inputs.context_names).
    context: tuple[str, ...] = ()
    covariate_scaling: str = "series"
    # One value per series (features/static.py): a column of the bar files or of a keyed --covariates file;
    # categorical when it is text or named in `categorical`, real (standardized over the training series) otherwise.
    # `categorical` may name --observed and --known columns too (features/timed_categories.py).
    static: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise InputError(msg)

        if self.contracts not in CONTRACT_MODES:
            bad(f"--contracts {self.contracts!r} is not one of {', '.join(CONTRACT_MODES)}")
        if self.adjust not in ADJUST_MODES:
            bad(f"--adjust {self.adjust!r} is not one of {', '.join(ADJUST_MODES)}")
        if self.roll_confirm < 1:
            bad(f"--roll-confirm must be at least 1 session, got {self.roll_confirm}")
        if self.target not in TARGETS:
            bad(f"--target {self.target!r} is not one of {', '.join(TARGETS)}")
        if self.scaling not in SCALINGS:
            bad(f"--scaling {self.scaling!r} is not one of {', '.join(SCALINGS)}")
        if self.vol_estimator not in VOL_ESTIMATORS:
            bad(f"--vol-estimator {self.vol_estimator!r} is not one of {', '.join(VOL_ESTIMATORS)}")
        if not self.vol_halflife > 0:
            bad(f"--vol-halflife must be positive (bars), got {self.vol_halflife}")
        if self.timezone is not None:
            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                bad(f"--timezone {self.timezone!r} is not a time zone; use an IANA name like America/Chicago or UTC")
        if self.date_format is not None:
            from foxhunt.data.io.times import check_date_format  # raises naming --date-format

            check_date_format(self.date_format)
        if self.calendar is not None:
            from foxhunt.data.bars.sessions import calendar_session  # raises naming --calendar

            object.__setattr__(self, "exchange_tz", calendar_session(self.calendar).tz)  # derived: set once here
        if self.since is not None or self.until is not None:
            from foxhunt.data.io.partitions import TimeBounds  # raises naming --since / --until

            TimeBounds.parse(self.since, self.until)
        if not self.price_scale > 0:
            bad(f"--price-scale must be positive (prices are divided by it), got {self.price_scale}")
        if self.encoder_length < 1:
            bad(f"--encoder-length must be at least 1, got {self.encoder_length}")
        if self.horizon < 1:
            bad(f"--horizon must be at least 1, got {self.horizon}")
        if not 0.0 < self.val_fraction < 1.0:
            bad(f"--val-fraction must be between 0 and 1 (exclusive), got {self.val_fraction}")
        if not 0.0 <= self.test_fraction < 1.0:
            bad(f"--test-fraction must be in [0, 1) (0: no test split), got {self.test_fraction}")
        if not self.val_fraction + self.test_fraction < 1.0:
            bad(f"--val-fraction {self.val_fraction} plus --test-fraction {self.test_fraction} leave no time to "
                "train; make their sum less than 1")
        if self.val_end is not None and self.train_end is None:
            bad("--val-end needs --train-end as well (validation is the span between them)")
        if self.train_start and self.train_end and self.train_start >= self.train_end:
            bad(f"train_start {self.train_start} must come before --train-end {self.train_end}")
        if self.train_end and self.val_end and self.val_end <= self.train_end:
            bad(f"--val-end {self.val_end} must come after --train-end {self.train_end}")
        if self.covariate_scaling not in COVARIATE_SCALINGS:
            bad(f"--covariate-scaling {self.covariate_scaling!r} is not one of {', '.join(COVARIATE_SCALINGS)}")
        if self.observed or self.known or self.static or self.categorical:
            from foxhunt.data.features.inputs import check_names  # raises naming the flag and the column

            check_names(self.observed, self.known, self.static, self.categorical)

    def check_test_period(self) -> None:
        """A new run's split must say whether it holds a test period. --test-fraction divides the time span only
        without --train-end: with --train-end and no --val-end every bar after the train cut validates, so the
        default --test-fraction 0.2 would be dropped without a word and the run would hold nothing back. Refused
        where options are typed (settings.data_config); saved runs and stores load as they were made."""
        if self.train_end and self.val_end is None and self.test_fraction > 0:
            raise InputError(f"--train-end {self.train_end} without --val-end holds out no test period "
                             f"(--test-fraction {self.test_fraction:g} applies only without --train-end): add "
                             "--val-end DATE, where the test period starts, or pass --test-fraction 0 to validate "
                             "up to the last bar")

    @property
    def window_length(self) -> int:
        return self.encoder_length + self.horizon

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("paths", "observed", "known", "covariates", "context", "static", "categorical"):
            d[key] = list(d[key])
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DataConfig:
        d = dict(d)  # a run saved before an option existed gets its default
        for key in ("paths", "observed", "known", "covariates", "context", "static", "categorical"):
            d[key] = tuple(d.get(key, ()))
        # Runs saved before --roll-confirm rolled on the previous session's volume alone: rebuild their data that way.
        d.setdefault("roll_confirm", 1)
        # Runs saved before --test-fraction split train / validation only.
        d.setdefault("test_fraction", 0.0)
        d.setdefault("seasonality", False)  # and without a time-of-day profile
        # Runs saved before an option existed used the old defaults (series scaling, EWMA of r^2, halflife 20)
        for key, old in (("scaling", "series"), ("vol_estimator", "returns"), ("vol_halflife", 20.0)):
            d.setdefault(key, old)
        return DataConfig(**d)
