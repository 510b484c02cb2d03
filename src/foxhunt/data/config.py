"""Data options, validated once at the edge (the CLI or a TOML file) and saved whole into the run directory."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from foxhunt.data.io.discover import absolute_path
from foxhunt.errors import InputError
from foxhunt.flags import DATA, INPUTS, option

CONTRACT_MODES = ("auto", "continuous", "each")
ADJUST_MODES = ("ratio", "difference", "none")
TARGETS = ("log_return", "log_range", "price_change")
SCALINGS = ("series", "volatility")
VOL_ESTIMATORS = ("returns", "range")
COVARIATE_SCALINGS = ("series", "global", "none")
ANCHORS = ("none", "garch_t")  # data/baselines/anchor.py
# --anchor auto (the default): GARCH-t for a returns target (with the independent quantile head, which corrects it);
# none for log_range, which GARCH-t does not forecast, and for the tied head. Chosen by the quality benchmark
# (benchmarks/RESULTS.md, "The anchored head"): with it, and without calibration, the model beats the strongest
# baseline on every dataset in every seed.
AUTO = "auto"
# Copies of model options added within FORMAT_VERSION 3: a file saved without one had its anchor resolved already
# (all the copy is for), so the field's default stands.
LATER_COPIES = ("quantile_head",)


PATH_FIELDS = ("paths", "covariates", "events", "features")  # the options that name files (with_absolute_paths)


def absolute_option(value: Any) -> Any:
    """A path option's value (one path, several, or None) as a run saves it: what a value typed now, or saved
    relative by an older run, is compared as."""
    if isinstance(value, str):
        return absolute_path(value)
    return tuple(map(absolute_path, value)) if isinstance(value, (tuple, list)) else value


def same_option(name: str, a: Any, b: Any) -> bool:
    """Whether two values of option `name` are the same: a path option's up to its absolute form (one as typed now,
    one as a run saves it), so that a run resumed or a store reused from another directory is not refused."""
    return a == b or (name in PATH_FIELDS and absolute_option(a) == absolute_option(b))


@dataclass(frozen=True)
class DataConfig:
    """Each field with `option(...)` is an option of `foxhunt train` (and prepare, inspect, plan-memory, backtest,
    tune), a `--config` key and a `foxhunt.fit` keyword, declared here once (foxhunt/flags.py)."""

    # Files, directories or globs; read as one dataset.
    paths: tuple[str, ...] = option((), "Bars: parquet/CSV/DBN files, folders or globs.", DATA, name="parquet_file",
                                    flags=("--parquet-file", "-f"), metavar="PATH", repeat=True,
                                    show_default="the bundled ES sample")
    # A feature store written by `foxhunt prepare` (data/store): the prepared data are mapped from it instead of
    # being computed from `paths` (the files it was prepared from). Does not shape the data.
    features: str | None = option(None, "A store from `foxhunt prepare`: train from it.", DATA, metavar="PATH")
    timestamp_col: str | None = option(None, "Time column.", DATA, metavar="NAME", show_default="detected")
    symbol_col: str | None = option(None, "Symbol column.", DATA, metavar="NAME", show_default="detected")
    # Zone of naive timestamps (None: UTC, checked against the session grid).
    timezone: str | None = option(None, "Zone of naive timestamps, e.g. America/Chicago.", DATA, metavar="TZ",
                                  show_default="UTC")
    # How text times of the bar, --covariates and --events files are written: a strftime format (%m/%d/%Y %H:%M).
    # None: ISO 8601 or epoch counts; day and month side by side (03/05/2015) are refused rather than guessed.
    # Saved with the run: predict and evaluate read the later files the same way.
    date_format: str | None = option(None, "How text times are written, e.g. %m/%d/%Y %H:%M.", DATA,
                                     metavar="FORMAT", show_default="ISO 8601")
    # A pandas-market-calendars name, or 24/7 (no package needed): every bar's session in the closed-bars check, and
    # (its zone) the exchange zone of the halt, the time-of-day inputs and the forecast grid. None: per root.
    calendar: str | None = option(None, "Sessions and holidays: a calendar name, or 24/7.", DATA, metavar="NAME",
                                  show_default="by futures root")
    # ISO dates or times (UTC when naive): only bars with since <= ts < until are read, and hive partitions dated
    # outside them are never opened (read.py). Saved with the run, so that the run says which bars it saw.
    since: str | None = option(None, "Read only bars at or after this ISO date/time.", DATA, metavar="DATE")
    until: str | None = option(None, "Read only bars before this ISO date/time.", DATA, metavar="DATE")
    price_scale: float = option(1.0, "Divide every price by this (100: integer cents).", DATA)
    contracts: str = option("auto", "Series: auto | continuous | each.", DATA, metavar="MODE")
    # Back-adjustment of continuous series.
    adjust: str = option("ratio", "Roll adjustment: ratio | difference | none.", DATA, metavar="MODE")
    # Sessions the next contract must out-trade the front before the series rolls to it. 2, because a single
    # session's lead is what one block trade or a spread's legs can make, while a roll that real volume has made holds:
    # waiting one more session costs at most one session on the old contract, which still trades heavily in roll week
    # (on the ES fixture the lead starts on the CME roll date, Thu 03-07, and the series rolls on Mon 03-11, four
    # sessions before expiry). 1 is the plain previous-session-volume rule.
    roll_confirm: int = option(2, "Roll when the next contract out-trades N sessions.", DATA)
    # price_change is close_t - close_t-1: prices <= 0 allowed.
    target: str = option("log_return", "Target: log_return | log_range | price_change.", DATA, metavar="KIND")
    encoder_length: int = option(32, "Encoder (look-back) bars.", DATA)
    horizon: int = option(5, "Forecast bars.", DATA)
    # ISO dates: forecasts whose first bar is before train_end train; before val_end (and from train_end) validate;
    # the rest are the test period.
    train_end: str | None = option(None, "ISO date: training split ends (needs --val-end).", DATA, metavar="DATE")
    val_end: str | None = option(None, "ISO date: validation ends, the test split starts.", DATA, metavar="DATE")
    # ISO date: a rolling window's start (`foxhunt backtest --window rolling`): windows forecasting from before it
    # do not train and the scalers are fitted from it on. No flag of its own; None: from the first bar.
    train_start: str | None = None
    # Used when train_end is not given: the fraction of time before the test part that validates.
    val_fraction: float = option(0.2, "Validation fraction of the time before the test.", DATA)
    # Used when train_end is not given: the last fraction of time is the test split, held out of training and of
    # early stopping, so that `evaluate` scores a period no choice has seen. 0 keeps the old train / validation split.
    test_fraction: float = option(0.2, "Last fraction of time held out as test (0: none).", DATA)
    # Target scaling, trailing-volatility estimator and halflife: chosen on validation scores of the bundled ES sample
    # and SPX daily (benchmarks/defaults_search.py, docs/benchmarks.md "How the defaults were chosen"). Volatility units let the
    # model learn one shape of returns across regimes; the range (Parkinson) estimator is sharp enough for a 5-bar
    # halflife, which reacts to a volatility shock as fast as GARCH does. series scaling lost to GARCH-t on SPX.
    # series: per-series standardisation fitted on train | volatility: trailing-volatility units.
    scaling: str = option("volatility", "Target scaling: series | volatility.", DATA, metavar="MODE")
    # returns: EWMA of r^2 | range: EWMA of ln(H/L)^2 (in return units).
    vol_estimator: str = option("range", "Trailing volatility from: returns | range.", DATA, metavar="KIND")
    # Bars: halflife of the trailing-volatility EWMA (scaling and the log_vol input).
    vol_halflife: float = option(5.0, "Halflife (bars) of the trailing volatility.", DATA)
    # Extra inputs: shocks in volatility units, fast/slow volatility ratios.
    vol_features: bool = option(False, "Volatility shocks and fast/slow ratios as inputs.", DATA)
    # Intraday bars: the training period's volatility profile by minute of the day (seasonality.py) as a known input
    # (`tod_vol`), trailing volatility divided by it as an observed one, and volatility scaling by their product.
    # Ignored for daily bars (no time of day).
    seasonality: bool = option(True, "Time-of-day volatility profile as an input.", DATA)
    # Session inputs (holidays, early closes, minutes to close) of --calendar's calendar, CME Globex Equity's without
    # one (data/features/calendar.py; needs the `calendars` extra).
    calendar_features: bool = option(False, "Holiday inputs of --calendar (extra: calendars).", DATA)
    # Intraday: missing grid bars inside a session become flagged zero-volume bars (fill.py).
    fill_gaps: bool = option(False, "Fill missing intraday bars inside a session.", DATA)
    # Start every forecast from a baseline's quantiles, fitted on the training rows (data/baselines/anchor.py): the
    # model's quantile head learns a correction to them, and an untrained model forecasts the baseline itself.
    anchor: str = option(AUTO, "Start from a baseline: auto | garch_t | none.", DATA, metavar="KIND")
    # The quantiles the anchor is computed at: the model's (ModelConfig.quantiles; settings sets it, no flag here).
    quantiles: tuple[float, ...] = (0.1, 0.5, 0.9)
    # The model's quantile head (ModelConfig.quantile_head; settings sets it): an anchor is corrected by the
    # independent head, so --anchor auto is none for another.
    quantile_head: str = "independent"
    exchange_tz: str = "America/Chicago"  # with `calendar`: the calendar's zone (derived, no flag)
    # Your own inputs (data/features/inputs.py). `observed`: columns known up to and including their bar (of the bar
    # files or of a --covariates file, joined as of each bar's time); `known`: columns known in advance for future
    # times (of an unkeyed --covariates file, read at every forecast step); `covariates`: one entry per --covariates
    # flag (a file, folder or glob); `events`: a calendar of scheduled events, each name becoming known inputs.
    # Real inputs are standardized on the training rows: per series, over all of them (global), or not at all.
    observed: tuple[str, ...] = option((), "Columns known from their bar on, e.g. vix,flow.", INPUTS, metavar="COLS")
    known: tuple[str, ...] = option((), "Columns known in advance (from --covariates).", INPUTS, metavar="COLS")
    covariates: tuple[str, ...] = option((), "File, folder or glob of more columns (repeatable).", INPUTS,
                                         metavar="PATH", repeat=True)
    events: str | None = option(None, "Events (time, name[, symbol]): known inputs.", INPUTS, metavar="PATH")
    # Cross-market context: each series also sees these series' own moves, volume and log_vol (inputs.context_names).
    context: tuple[str, ...] = option((), "Series every series also sees, e.g. NQ,ZN.", INPUTS, metavar="NAMES")
    covariate_scaling: str = option("series", "Your real inputs: series | global | none.", INPUTS, metavar="MODE")
    # One value per series (features/static.py): a column of the bar files or of a keyed --covariates file;
    # categorical when it is text or named in `categorical`, real (standardized over the training series) otherwise.
    # `categorical` may name --observed and --known columns too (features/timed_categories.py).
    static: tuple[str, ...] = option((), "Columns of one value per series, e.g. sector.", INPUTS, metavar="COLS")
    categorical: tuple[str, ...] = option((), "Input columns of numbers taken as categories.", INPUTS,
                                          metavar="COLS")

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
        if self.anchor == AUTO:  # resolved once, here: what a run saves is the anchor it used
            returns = self.target != "log_range" and self.quantile_head == "independent"
            object.__setattr__(self, "anchor", "garch_t" if returns else "none")
        if self.anchor not in ANCHORS:
            bad(f"--anchor {self.anchor!r} is not one of {AUTO}, {', '.join(ANCHORS)}")
        if self.anchored and self.target == "log_range":
            bad(f"--anchor {self.anchor} forecasts returns; it needs --target log_return or price_change")
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
            if self.calendar_features and calendar_session(self.calendar).always_open:
                bad(f"--calendar-features has no holidays or closes to mark under --calendar {self.calendar}; drop one "
                    "of them")
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

    @property
    def anchored(self) -> bool:
        """Whether forecasts start from an anchor (data/baselines/anchor.py); `auto` is resolved on construction, and
        a config built without it (tests/cli/test_options_once.py skips __post_init__) is not anchored by it."""
        return self.anchor not in (ANCHORS[0], AUTO)

    def with_absolute_paths(self) -> DataConfig:
        """These options with the files they name (the bars, --covariates, --events, --features) made absolute
        against the working directory: what a run saves, so that its model reads its inputs (and `evaluate --model`
        its bars) from any directory. Lexical (os.path.abspath): a glob or a folder stays one."""
        return replace(self, **{k: absolute_option(getattr(self, k)) for k in PATH_FIELDS})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("paths", "observed", "known", "covariates", "context", "static", "categorical", "quantiles"):
            d[key] = list(d[key])
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DataConfig:
        """The inverse of `to_dict`, of a file of this foxhunt's format (saved_format.check_format, done by the
        reader first): every option is there, or KeyError (an option is never guessed); an unknown one is a
        TypeError."""
        missing = [f.name for f in fields(DataConfig) if f.name not in d and f.name not in LATER_COPIES]
        if missing:
            raise KeyError(f"data options {', '.join(missing)} missing")
        d = dict(d)
        for key in ("paths", "observed", "known", "covariates", "context", "static", "categorical"):
            d[key] = tuple(d[key])
        d["quantiles"] = tuple(float(q) for q in d["quantiles"])
        return DataConfig(**d)
