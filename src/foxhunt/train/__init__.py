"""Training loop, memory, checkpoints."""
