"""Stage 3, features: the calendar, the seasonal profile, the known inputs, the raw features, their fit
statistics and scaling, the user's inputs, the feature schema.

Each feature is computed over whole histories (the batch form, for training and `predict`) and, where
`Forecaster.update` needs it one bar at a time, by an online form beside it that must give the same numbers:
bar_features_live.py (`StreamState`: returns, moves, trailing volatilities and scaling, from a running state),
known_live.py (known inputs and the forecast grid), inputs_live.py (the user's observed, known and event inputs),
context_live.py (--context inputs), codes_live.py (static and categorical codes), covariates_live.py (a covariate
file as of a bar). Each pair has its parity test in tests/data/features/test_<online form>.py.
"""
