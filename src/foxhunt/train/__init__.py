"""Training loop, memory, checkpoints.

`foxhunt.train(...)` is the public training function (foxhunt/api/training.py), and this package shares its name:
importing `foxhunt.train.x` sets the attribute `foxhunt.train` to this package, whatever the order of imports. So
the package is callable, and calling it is calling the function, which is imported only then (the layers stay:
nothing here imports the API).
"""

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from foxhunt.api.training import train

        return train(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
