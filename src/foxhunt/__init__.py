"""foxhunt: Temporal Fusion Transformers on futures bars, trained end to end without running out of memory."""

__version__ = "0.1.0"
