"""Stage 3, features: the calendar, the seasonal profile, the known inputs, the raw features, their fit
statistics and scaling, the feature schema.
"""
