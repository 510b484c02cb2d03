"""Read, validate, roll, featurize and window futures bars."""
