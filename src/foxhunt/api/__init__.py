"""The Python API behind `foxhunt/__init__.py` (private modules: import from `foxhunt`)."""
