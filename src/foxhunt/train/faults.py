"""Injected faults: a test hook that makes the training loop's out-of-memory recovery run on any machine.

Not a user flag. Set FOXHUNT_FAULT_INJECT to a comma-separated list of `KIND@SITE:INDEX`, e.g.
`oom@train:5,oom@val:3`:
- KIND: `oom` raises torch.OutOfMemoryError, the exception a real CUDA allocation failure raises.
- SITE `train`: INDEX is the global training step, 1-based and counted across epochs (the first optimizer step of
  the run is 1); the loop calls `check("train", step)` before the step's forward.
- SITE `val`: INDEX is the batch within a validation pass, 1-based; the loop calls `check("val", batch)`.
- KIND `kill` at SITE `epoch`: raises KeyboardInterrupt right after epoch INDEX's checkpoint is written, as if the
  run were killed there (`kill@epoch:1`); it makes resuming testable.
- KIND `sigkill` at SITE `train`: the process sends itself SIGKILL before step INDEX's forward (`sigkill@train:7`):
  no handler, no clean-up, exactly what `kill -9` or the OOM killer does; for tests of resuming from any step.
Each fault fires once per process: a retry of the same step (e.g. in smaller micro-batches) does not fire again, so the
test sees the recovery path succeed.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from typing import NoReturn

import torch

from foxhunt.errors import InputError

ENV_VAR = "FOXHUNT_FAULT_INJECT"
KINDS = ("oom", "kill", "sigkill")
SITES = ("train", "val", "epoch")
_TOKEN = re.compile(r"^([a-z_]+)@([a-z_]+):(\d+)$")


class FaultInjector:
    """Armed faults keyed by (site, index); `check` raises the matching one and disarms it."""

    def __init__(self, faults: Mapping[tuple[str, int], str] | None = None, spec: str = ""):
        self._armed: dict[tuple[str, int], str] = dict(faults or {})
        self.spec = spec

    @staticmethod
    def from_env(env: Mapping[str, str] = os.environ) -> FaultInjector:
        """Parse FOXHUNT_FAULT_INJECT (absent or blank: no faults); a bad token raises InputError naming it."""
        spec = env.get(ENV_VAR, "").strip()
        return FaultInjector(parse_spec(spec), spec) if spec else FaultInjector()

    @property
    def pending(self) -> tuple[tuple[str, str, int], ...]:
        """Faults not yet fired, as (kind, site, index), in site/index order: for a warning in the run log."""
        return tuple((kind, site, idx) for (site, idx), kind in sorted(self._armed.items()))

    def __bool__(self) -> bool:
        return bool(self._armed)

    def check(self, where: str, index: int) -> None:
        """Raise the fault armed for (`where`, `index`) once; otherwise do nothing (one dict lookup)."""
        if not self._armed:
            return
        if where not in SITES:
            raise ValueError(f"fault site {where!r} is not one of {', '.join(SITES)}")
        kind = self._armed.pop((where, index), None)
        if kind == "oom":
            raise torch.OutOfMemoryError(
                f"CUDA out of memory (injected by {ENV_VAR}: oom@{where}:{index}; this fault fires once)"
            )
        if kind == "kill":
            raise KeyboardInterrupt(f"killed by {ENV_VAR}: kill@{where}:{index}")
        if kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)


def parse_spec(spec: str) -> dict[tuple[str, int], str]:
    """`"oom@train:5,oom@val:3"` -> {("train", 5): "oom", ("val", 3): "oom"}; InputError on any bad token."""
    faults: dict[tuple[str, int], str] = {}
    for raw in spec.split(","):
        token = raw.strip()
        kind, site, index = _parse_token(token, spec)
        if (site, index) in faults:
            _bad(token, spec, "the same site and index appear twice")
        faults[(site, index)] = kind
    return faults


def _parse_token(token: str, spec: str) -> tuple[str, str, int]:
    m = _TOKEN.match(token)
    if not m:
        _bad(token, spec, "expected KIND@SITE:INDEX such as oom@train:5")
    kind, site, index = m.group(1), m.group(2), int(m.group(3))
    if kind not in KINDS:
        _bad(token, spec, f"kind must be one of {', '.join(KINDS)}")
    if site not in SITES:
        _bad(token, spec, f"site must be one of {', '.join(SITES)}")
    if (kind == "kill") != (site == "epoch") or (kind == "sigkill" and site != "train"):
        _bad(token, spec, "kill goes with the epoch site (kill@epoch:N), sigkill with train, oom with train or val")
    if index < 1:
        _bad(token, spec, "index is 1-based, so it must be at least 1")
    return kind, site, index


def _bad(token: str, spec: str, problem: str) -> NoReturn:
    raise InputError(f"{ENV_VAR}: bad token {token!r} in {spec!r}: {problem}; unset it to train normally")
