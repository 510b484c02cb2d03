"""A thin fake of the torch.cuda calls foxhunt makes, so that its CUDA branches run in a suite that has no GPU.

Only the API is faked: tensors stay on the CPU, so a test drives the code that decides and records (telemetry, the
budget, the precision, the out-of-memory ladder, the process group) rather than a CUDA tensor path. Each call is
logged in `calls` as (name, args); the numbers it answers are attributes a test sets (bytes, as torch gives them).
`benchmarks/gpu_check.sh` stays the real check on a machine with a GPU.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

MIB = 2**20
GIB = 2**30


@dataclass
class FakeCuda:
    """One visible card (an H200 unless a test says otherwise) and the state of torch's caching allocator on it."""

    name: str = "NVIDIA H200"
    total: int = 141 * GIB  # get_device_properties().total_memory
    major: int = 9  # compute capability (8.0+: native bfloat16)
    uuid: str = "5c1a9e44-0b3e-c2f1-7d36-1f0e2a9b8c7d"  # str() of torch's _CUuuid: no "GPU-" prefix
    count: int = 1
    allocated: int = 300 * MIB
    reserved: int = 512 * MIB
    peak: int = 700 * MIB  # max_memory_allocated since the last reset
    free: int = 100 * GIB  # mem_get_info()[0]
    bf16_runs: bool = True  # is_bf16_supported(): True also where bfloat16 is only emulated (its default)
    nvml_used: int | None = None  # device-wide used bytes as NVML reports them; None: no pynvml installed
    current: int = 0
    rng: torch.Tensor = field(default_factory=lambda: torch.arange(16, dtype=torch.uint8))  # the device generator
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def called(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of every call to `name`, in order."""
        return [args for n, args in self.calls if n == name]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
        def log(name: str, result: Any = None):
            def call(*args: Any, **kwargs: Any) -> Any:
                self.calls.append((name, args + tuple(kwargs.items())))
                return result(*args, **kwargs) if callable(result) else result
            monkeypatch.setattr(torch.cuda, name, call)

        def index(device: Any = None) -> int:
            if device is None:
                return self.current
            d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
            assert d.type == "cuda", f"a torch.cuda call was given {device!r}"
            i = self.current if d.index is None else d.index
            assert i < self.count, f"cuda:{i} asked of a fake with {self.count} card(s)"
            return i

        def properties(device: Any = None) -> types.SimpleNamespace:
            index(device)
            return types.SimpleNamespace(name=self.name, total_memory=self.total, major=self.major, minor=0,
                                         uuid=self.uuid, multi_processor_count=132)

        def reset_peak(device: Any = None) -> None:
            index(device)
            self.peak = self.allocated

        def set_device(device: Any) -> None:
            self.current = index(device)

        log("is_available", lambda: True)
        log("device_count", lambda: self.count)
        log("current_device", lambda: self.current)
        log("set_device", set_device)
        log("get_device_properties", properties)
        log("get_device_name", lambda device=None: properties(device).name)
        log("memory_allocated", lambda device=None: (index(device), self.allocated)[1])
        log("memory_reserved", lambda device=None: (index(device), self.reserved)[1])
        log("max_memory_allocated", lambda device=None: (index(device), self.peak)[1])
        log("reset_peak_memory_stats", reset_peak)
        log("mem_get_info", lambda device=None: (index(device), (self.free, self.total))[1])
        log("set_per_process_memory_fraction", lambda fraction, device=None: (index(device), None)[1])
        log("is_bf16_supported", lambda including_emulation=True: self.bf16_runs if including_emulation
            else self.bf16_runs and self.major >= 8)
        log("empty_cache")
        log("get_rng_state", lambda device="cuda": (index(device), self.rng.clone())[1])
        log("set_rng_state", lambda state, device="cuda": (index(device), setattr(self, "rng", state.clone()))[1])
        log("synchronize", lambda device=None: (index(device), None)[1])
        if self.nvml_used is not None:
            monkeypatch.setitem(sys.modules, "pynvml", self._pynvml())
        else:
            monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
        return self

    def _pynvml(self) -> types.ModuleType:
        """nvidia-ml-py's three calls the telemetry makes; a handle is found by the "GPU-" UUID only."""
        nvml = types.ModuleType("pynvml")
        handle = object()

        def by_uuid(uuid: str) -> object:
            self.calls.append(("nvmlDeviceGetHandleByUUID", (uuid,)))
            if uuid != "GPU-" + self.uuid:
                raise RuntimeError(f"NVML: no device {uuid}")
            return handle

        def memory_info(h: object) -> types.SimpleNamespace:
            assert h is handle
            return types.SimpleNamespace(total=self.total, free=self.total - self.nvml_used, used=self.nvml_used)

        nvml.nvmlInit = lambda: self.calls.append(("nvmlInit", ()))
        nvml.nvmlDeviceGetHandleByUUID = by_uuid
        nvml.nvmlDeviceGetMemoryInfo = memory_info
        return nvml


@pytest.fixture(name="fake_cuda")
def fake_cuda_fixture(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """One fake H200 with NVML; a test changes its numbers before the code under test reads them."""
    return FakeCuda(nvml_used=2 * GIB).install(monkeypatch)
