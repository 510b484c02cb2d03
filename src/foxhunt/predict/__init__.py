"""Batch prediction from a saved model (model/saved.py): the data it forecasts from (origins.py, and bar_range.py:
which bars it reads), the model run over windows batch by batch (predictor.py; interpretation.py keeps the running
sums of what the model reports about itself), the calibration applied (calibrated.py) and the forecasts streamed to
parquet (parquet.py). Used by `foxhunt predict`, `evaluate`, `backtest` and the Python API's `Forecaster`; it sits
after train/ (out-of-memory rungs, fault hooks, the raw quantiles) and before evaluate/, which scores what it writes.
"""
