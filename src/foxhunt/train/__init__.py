"""Training: the loop, memory planning and measurement, checkpoints, distributed runs.

The public Python entry point is `foxhunt.fit(...)` (foxhunt/api/training.py); this package is the machinery under it
and never imports the API.
"""
