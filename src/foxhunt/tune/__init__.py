"""Hyperparameter search with Optuna (extra `tune`): TPE sampling, median pruning on per-epoch validation loss,
trials on the training and validation periods only, the study in SQLite so that it resumes and can be shared."""
