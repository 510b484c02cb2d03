"""Stage 4, the dataset: what a prepared dataset is (types.py), prepare, the window index and splits, batches,
the epoch order and the summary.
"""
