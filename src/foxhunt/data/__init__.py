"""Read, validate, roll, featurize and window futures bars, in stages that import only downstream:
util < io < bars < features < dataset < store (config.py: the options every stage reads)."""
