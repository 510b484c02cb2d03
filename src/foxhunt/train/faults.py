"""Injected faults: a test hook that makes the training loop's recovery paths run on any machine.

Not a user flag. Set FOXHUNT_FAULT_INJECT to a comma-separated list of `KIND@SITE:INDEX` or `KIND@SITE:INDEXxTIMES`,
e.g. `oom@train:5,oom@val:3x2,nan@train:7`:
- KIND `oom` raises torch.OutOfMemoryError, the exception a real CUDA allocation failure raises. Sites:
  `train` (INDEX is the global training step, 1-based and counted across epochs; the stepper checks it before each
  attempt at the step's forward), `val` (the batch within a validation pass, 1-based), `predict` (the batch within
  a prediction pass, 1-based), `probe` (the memory probe's step, 1-based).
- KIND `nan` at SITE `train`: the step's loss is multiplied by NaN, so its loss and gradients are not finite.
- KIND `kill` at SITE `epoch`: raises KeyboardInterrupt right after epoch INDEX's checkpoint is written, as if the
  run were killed there (`kill@epoch:1`); it makes resuming testable.
- KIND `sigkill` at SITE `train`: the process sends itself SIGKILL before step INDEX's forward (`sigkill@train:7`):
  no handler, no clean-up, exactly what `kill -9` or the OOM killer does; for tests of resuming from any step.
A fault first fires at the check of its site with exactly INDEX, then on the next TIMES - 1 checks of that site
(default TIMES 1): a retried step checks its index again, so `oom@train:3x4` fails step 3 and its next three retries,
climbing the out-of-memory ladder, and `nan@train:3x5` poisons steps 3 to 7. Once spent, a fault stays quiet.
Under torchrun, FOXHUNT_FAULT_RANK=R arms the faults on rank R only (the RANK torchrun sets; other ranks get none).
To add a kind or a site, add it to SITES_OF (and, for a kind that raises, to `_fire`).

The hook: production code calls `at(SITE, INDEX)` at each named point, and nothing else about faults reaches it. The
places that own a pass arm it for the pass with `armed()`: a training run's fit (train, val, epoch), the memory probe
(probe), a prediction pass (predict), each from the variable as it is when they start, as separate runs in one
process expect. Tests arm it the same way, with a spec: `with faults.armed("oom@train:1"): ...`. Disarmed, `at` is
one comparison.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NoReturn

import torch

from foxhunt.errors import InputError

ENV_VAR = "FOXHUNT_FAULT_INJECT"
RANK_VAR = "FOXHUNT_FAULT_RANK"
SITES_OF: dict[str, tuple[str, ...]] = {  # the sites each kind can fire at
    "oom": ("train", "val", "predict", "probe"),
    "nan": ("train",),
    "kill": ("epoch",),
    "sigkill": ("train",),
}
KINDS = tuple(SITES_OF)
SITES = tuple(dict.fromkeys(s for sites in SITES_OF.values() for s in sites))
_TOKEN = re.compile(r"^([a-z_]+)@([a-z_]+):(\d+)(?:x(\d+))?$")


@dataclass
class Fault:
    kind: str
    remaining: int  # firings left
    started: bool = False  # fired at its index already: fires on the site's next checks until spent


class FaultInjector:
    """Armed faults keyed by (site, index); `check` fires the matching one (raising for oom and kill)."""

    def __init__(self, faults: Mapping[tuple[str, int], str | Fault] | None = None, spec: str = ""):
        self._armed: dict[tuple[str, int], Fault] = {
            key: f if isinstance(f, Fault) else Fault(f, 1) for key, f in (faults or {}).items()
        }
        self.spec = spec

    @staticmethod
    def from_env(env: Mapping[str, str] = os.environ) -> FaultInjector:
        """Parse FOXHUNT_FAULT_INJECT (absent or blank: no faults); a bad token raises InputError naming it."""
        spec = env.get(ENV_VAR, "").strip()
        if env.get(RANK_VAR, "").strip() not in ("", env.get("RANK", "0")):
            return FaultInjector()
        return FaultInjector(parse_spec(spec), spec) if spec else FaultInjector()

    @property
    def pending(self) -> tuple[tuple[str, str, int], ...]:
        """Faults not yet spent, as (kind, site, index), in site/index order: for a warning in the run log."""
        return tuple((f.kind, site, idx) for (site, idx), f in sorted(self._armed.items()))

    def __bool__(self) -> bool:
        return bool(self._armed)

    def check(self, where: str, index: int) -> str | None:
        """Fire the fault due at (`where`, `index`): raise for oom and kill, return "nan" for nan; None otherwise."""
        if not self._armed:
            return None
        if where not in SITES:
            raise ValueError(f"fault site {where!r} is not one of {', '.join(SITES)}")
        key = next((k for k, f in self._armed.items() if k[0] == where and f.started), (where, index))
        fault = self._armed.get(key)
        if fault is None:
            return None
        fault.started = True
        fault.remaining -= 1
        if fault.remaining <= 0:
            del self._armed[key]
        return _fire(fault.kind, where, key[1])


_armed: FaultInjector | None = None  # the hook's faults; None: disarmed (or nothing in FOXHUNT_FAULT_INJECT)


def at(site: str, index: int) -> str | None:
    """The hook at a named point: fire the armed fault due at (`site`, `index`), as `FaultInjector.check` does (raise
    for oom and kill, return "nan" for nan); None when none is due or nothing is armed."""
    if _armed is None:
        return None
    return _armed.check(site, index)


@contextlib.contextmanager
def armed(faults: FaultInjector | str | None = None) -> Iterator[None]:
    """Arm the hook for the block with `faults` (a FaultInjector, a spec such as "oom@val:3x2", or None for
    FOXHUNT_FAULT_INJECT), then put back what was armed before: a pass sees its own faults, never an earlier pass's
    leftovers. A bad spec raises InputError before the block runs."""
    global _armed
    if not isinstance(faults, FaultInjector):
        faults = FaultInjector.from_env() if faults is None else FaultInjector(parse_spec(faults), faults)
    before, _armed = _armed, (faults if faults else None)
    try:
        yield
    finally:
        _armed = before


def _fire(kind: str, where: str, index: int) -> str | None:
    if kind == "oom":
        raise torch.OutOfMemoryError(f"CUDA out of memory (injected by {ENV_VAR}: oom@{where}:{index})")
    if kind == "kill":
        raise KeyboardInterrupt(f"killed by {ENV_VAR}: kill@{where}:{index}")
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    return kind


def parse_spec(spec: str) -> dict[tuple[str, int], Fault]:
    """`"oom@train:5x2,oom@val:3"` -> {("train", 5): Fault("oom", 2), ("val", 3): Fault("oom", 1)}; InputError on
    any bad token."""
    faults: dict[tuple[str, int], Fault] = {}
    for raw in spec.split(","):
        token = raw.strip()
        kind, site, index, times = _parse_token(token, spec)
        if (site, index) in faults:
            _bad(token, spec, "the same site and index appear twice")
        faults[(site, index)] = Fault(kind, times)
    return faults


def _parse_token(token: str, spec: str) -> tuple[str, str, int, int]:
    m = _TOKEN.match(token)
    if not m:
        _bad(token, spec, "expected KIND@SITE:INDEX or KIND@SITE:INDEXxTIMES such as oom@train:5 or oom@val:3x4")
    kind, site, index, times = m.group(1), m.group(2), int(m.group(3)), int(m.group(4) or 1)
    if kind not in KINDS:
        _bad(token, spec, f"kind must be one of {', '.join(KINDS)}")
    if site not in SITES:
        _bad(token, spec, f"site must be one of {', '.join(SITES)}")
    if site not in SITES_OF[kind]:
        _bad(token, spec, f"{kind} goes with the site{'s' if len(SITES_OF[kind]) > 1 else ''} "
                          f"{', '.join(SITES_OF[kind])}")
    if index < 1:
        _bad(token, spec, "index is 1-based, so it must be at least 1")
    if times < 1:
        _bad(token, spec, "TIMES must be at least 1")
    return kind, site, index, times


def _bad(token: str, spec: str, problem: str) -> NoReturn:
    raise InputError(f"{ENV_VAR}: bad token {token!r} in {spec!r}: {problem}; unset it to train normally")
