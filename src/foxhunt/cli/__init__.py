"""The `foxhunt` command line. It parses and wires; the work happens in data / train / evaluate.

- `app.py`: the typer app and `main(argv)` (in-process, returns the exit status);
- `options.py`: every option shared by several commands, declared once in groups (data, model, training, console);
- `training.py`: train, backtest, tune; `data.py`: prepare, inspect, sample, plan-memory;
  `forecasts.py`: predict, evaluate, export, memory-report; `wiring.py`: what they share besides options.
"""

from foxhunt.cli import data, forecasts, training  # noqa: F401  (each registers its commands on `app`)
from foxhunt.cli.app import app, main

__all__ = ["app", "main"]
