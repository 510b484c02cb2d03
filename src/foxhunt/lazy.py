"""Package names that load their module on first use (PEP 562), so that importing the package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, modules: dict[str, str], namespace: dict[str, Any], public: list[str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of the package `package` (its `globals()`: `namespace`, its `__all__`:
    `public`) whose names `modules` (name -> module) load on first use and are kept."""

    def getattr_(name: str) -> Any:
        if name in modules:
            value = getattr(importlib.import_module(modules[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(public))

    return getattr_, dir_
