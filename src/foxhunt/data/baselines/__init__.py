"""Stage 4, baselines: the forecasts the model must beat (training quantiles, rolling and seasonal volatility,
GARCH(1,1)-t, HAR), per series, fitted on the training rows and run forward causally. Below the dataset stage
because the model may start from them (anchor.py: the anchored quantile head's starting point) as well as be
scored against them (evaluate/).
"""
