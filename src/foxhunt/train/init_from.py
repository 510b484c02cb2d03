"""`--init-from RUN`: a new run's model starts from a trained run's weights instead of a random draw (a model
trained on one panel, fine-tuned on another market with little history of its own; or on newer bars).

What is taken: every tensor of RUN's model.safetensors whose name and shape are this model's. What is not: the
scalers and calibration (this run fits its own on its own training split) and the optimizer state (a fine-tune starts
its own schedule, warm-up included). The architecture must be RUN's (hidden size, heads, LSTM layers, quantiles and
head, encoder and horizon, target and its scaling, and the same inputs by name in each role), else the run stops
with one line naming what differs; dropout may differ.

The categorical embedding tables are matched by category, not by code, since codes number each run's own
vocabulary: a series (or a category of your inputs) that RUN knew keeps its row; one it never saw starts from RUN's
row for code 0, "unknown". For the series that row is trained as the pooled model (a share of the training windows
is shown with its series masked, train/step.py), and it is the row a forecast of an unseen series reads: so the
fine-tuned model starts where RUN's zero-shot forecast of the new series stands (with this run's scalers), and
training moves from there. A freshly drawn row would instead start the new series from noise in the static context
that conditions every layer. (Row 0 of your own categoricals is trained only where unknown codes occurred; it is
still what RUN does with a category it did not see.)

A resumed run (--resume) continues from its checkpoint and never re-initialises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch

from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.schema import UNKNOWN_SERIES, FeatureSchema, Kind, Role
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.model.saved import LoadedModel, load_model
from foxhunt.train.run_dir import RunDir

FLAG = "--init-from"
# The model's options that fix a weight's shape or meaning, with the flag that sets each; the window's two are the
# data's options of the same names.
ARCHITECTURE = ("hidden_size", "attention_heads", "lstm_layers", "quantiles", "quantile_head", "encoder_length",
                "horizon")
# The model's categorical embedding tables (model/tft.py: one table per role, rows at per-variable offsets).
TABLES = {"static_cat.table.weight": Role.STATIC, "known_cat.table.weight": Role.KNOWN,
          "observed_cat.table.weight": Role.OBSERVED}
ROLE_FLAGS = {Role.STATIC: "--static", Role.KNOWN: "--known", Role.OBSERVED: "--observed"}


@dataclass(frozen=True)
class Transfer:
    """What `init_weights` took from RUN: scalars copied of the model's, the tensors left as drawn (no counterpart
    in RUN), and per categorical input the categories RUN knew and those started from its unknown row."""

    run: str
    taken: int
    total: int
    fresh: tuple[str, ...] = ()
    known: dict[str, int] = field(default_factory=dict)
    new: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def line(self) -> str:
        """The console line: what was taken and what was not."""
        head = (f"{FLAG} {self.run}: all {self.total:,} weights from its model" if self.taken == self.total
                else f"{FLAG} {self.run}: {self.taken:,} of {self.total:,} weights from its model, "
                     f"{', '.join(self.fresh)} drawn fresh (no counterpart there)")
        parts = [head]
        for name, new in self.new.items():
            if new:
                parts.append(f"{name}: {self.known[name]} known there, {len(new)} new ({listing(new, 3)}) "
                             "starting from its unknown row")
        return "; ".join(parts) + "; scalers and calibration fitted here"

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "weights_taken": self.taken, "weights": self.total, "fresh": list(self.fresh),
                "categories_known": dict(self.known), "categories_new": {k: list(v) for k, v in self.new.items()}}


def source_model(run: str, model_cfg: ModelConfig) -> LoadedModel:
    """RUN's trained model, its architecture checked against this run's options (before any data is read): an
    InputError naming the difference and the flags that would make it RUN's."""
    src = load_model(run, calibration=False, flag=FLAG)
    differ = [(n, getattr(src.model_cfg, n), getattr(model_cfg, n)) for n in ARCHITECTURE
              if getattr(src.model_cfg, n) != getattr(model_cfg, n)]
    if differ:
        what = ", ".join(f"{n.replace('_', ' ')} {_text(there)} there, {_text(here)} here" for n, there, here in differ)
        fix = " ".join(f"--{n.replace('_', '-')} {_text(there)}" for n, there, _ in differ)
        raise InputError(f"{FLAG} {run}: another architecture ({what}); train with {fix} to start from it, or "
                         f"without {FLAG}")
    return src


def check_inputs(src: LoadedModel, schema: FeatureSchema, run: str) -> None:
    """The target, its scaling and the inputs (by name, in each role and kind) must be RUN's: a weight of one input
    is meaningless for another. An InputError naming the first difference and what to do."""
    there, here = src.schema, schema
    for what, a, b in (("target", there.target, here.target),
                       ("scaling", there.extra.get("scaling"), here.extra.get("scaling"))):
        if a != b:
            raise InputError(f"{FLAG} {run}: its {what} is {a}, this run's {b}; train with --{what} {a} to start "
                             f"from it, or without {FLAG}")
    for role in Role:
        for kind in Kind:
            mine, theirs = here.names(role, kind), there.names(role, kind)
            if mine != theirs:
                only_there = [n for n in theirs if n not in mine]
                only_here = [n for n in mine if n not in theirs]
                diff = "; ".join(x for x in (f"only there: {', '.join(only_there)}" if only_there else "",
                                             f"only here: {', '.join(only_here)}" if only_here else "") if x)
                raise InputError(f"{FLAG} {run}: its {role.value} {kind.value} inputs differ from this run's "
                                 f"({diff or 'another order'}); give this run the same inputs ({ROLE_FLAGS[role]}, "
                                 f"--vol-features, --calendar-features, --seasonality as RUN had them) or train "
                                 f"without {FLAG}")


def init_weights(model: torch.nn.Module, schema: FeatureSchema, transform: FittedTransform,
                 src: LoadedModel, run: str) -> Transfer:
    """Copy RUN's weights into `model` (built from `schema`) where the names and shapes agree, and its embedding
    rows category by category (see the module's docstring), once `check_inputs` agrees."""
    check_inputs(src, schema, run)
    theirs = src.model.state_dict()
    taken, total, fresh = 0, 0, []
    known: dict[str, int] = {}
    new: dict[str, tuple[str, ...]] = {}
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            total += tensor.numel()
            if name in TABLES and name in theirs:
                rows, k, n = _table_rows(TABLES[name], schema, transform, src)
                known.update(k)
                new.update(n)
                tensor.copy_(theirs[name][rows])  # (rows here, H) <- RUN's rows of the same categories
            elif name in theirs and theirs[name].shape == tensor.shape:
                tensor.copy_(theirs[name])
            else:
                fresh.append(name)
                continue
            taken += tensor.numel()
    return Transfer(run, taken, total, tuple(fresh), known, new)


def check_resumed(saved: dict[str, Any] | None, init_from: str | None) -> None:
    """A resumed run continues from its checkpoint's weights, so RUN is never read again: --init-from on --resume
    must be the RUN the run started from (`saved`, its `saved_transfer` record), or it would be ignored without a
    word."""
    started = (saved or {}).get("run")
    if init_from and init_from != started:
        how = f"from {started}" if started else "without it"
        raise InputError(f"{FLAG} cannot change when resuming (the run was started {how}); drop it or start a new "
                         "run with it")


def saved_transfer(run: RunDir) -> dict[str, Any] | None:
    """A resumed run's config.json record of what it took from RUN when it started (None: none, or unreadable)."""
    try:
        return json.loads(run.config.read_text(encoding="utf-8")).get("init_from")
    except (OSError, ValueError, AttributeError):
        return None


def _table_rows(role: Role, schema: FeatureSchema, transform: FittedTransform, src: LoadedModel
                ) -> tuple[torch.Tensor, dict[str, int], dict[str, tuple[str, ...]]]:
    """For the categorical table of `role`: the row of RUN's table each of this table's rows starts from (rows
    ordered as CategoricalEmbedding lays them out), and per input the categories RUN knew and the new ones."""
    here = schema.group(role, Kind.CATEGORICAL)
    there = src.schema.group(role, Kind.CATEGORICAL)
    offsets = [0]
    for f in there:
        offsets.append(offsets[-1] + max(f.cardinality, 1))
    rows: list[torch.Tensor] = []
    known: dict[str, int] = {}
    new: dict[str, tuple[str, ...]] = {}
    for j, f in enumerate(here):  # a handful of inputs; the rows of each are one gather
        mine, theirs = vocabulary(transform, f.name), vocabulary(src.transform, f.name)
        if mine is None or theirs is None:  # no vocabulary saved: codes are the categories (same cardinality only)
            codes = torch.arange(max(f.cardinality, 1))
            codes = torch.where(codes < there[j].cardinality, codes, UNKNOWN_SERIES)
            fresh_names: tuple[str, ...] = ()
        else:
            index = {v: i + 1 for i, v in enumerate(theirs)}  # code = index + 1; 0 = unknown
            codes = torch.tensor([UNKNOWN_SERIES, *(index.get(v, UNKNOWN_SERIES) for v in mine)])
            fresh_names = tuple(v for v in mine if v not in index)
            known[f.name], new[f.name] = len(mine) - len(fresh_names), fresh_names
        rows.append(offsets[j] + codes)
    return (torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)), known, new


def vocabulary(transform: FittedTransform, name: str) -> tuple[str, ...] | None:
    """The categories of the categorical input `name` in code order (code = index + 1), or None if not saved."""
    if name == "series":
        return transform.series_vocab
    inputs = transform.inputs
    if inputs is None:
        return None
    return inputs.static_vocab.get(name) or inputs.timed_vocab.get(name)


def _text(value: Any) -> str:
    return ",".join(f"{q:g}" for q in value) if isinstance(value, tuple | list) else str(value)
