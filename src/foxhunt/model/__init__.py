"""Temporal Fusion Transformer layers."""
