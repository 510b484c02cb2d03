"""Walk-forward backtests: train + forecast fold after fold through time, score against the baselines.

It sits beside the CLI at the top of the layering: it orchestrates `train` and `evaluate` and nothing imports it."""
