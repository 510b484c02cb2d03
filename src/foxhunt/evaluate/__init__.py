"""Metrics, baselines, prediction, interpretation, reports."""
