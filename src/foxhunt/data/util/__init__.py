"""Shared low-level helpers of every data stage: runs of equal values, the exact median, threads, sort orders and
wall-clock time (clock.py).
"""
