"""Read, validate, roll, featurize and window futures bars, in stages that each import only from themselves and the
stages before them: util < io < bars < features < dataset < store (config.py: the options every stage reads)."""
