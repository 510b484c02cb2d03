"""Stage 1, reading: which files the paths name, one file into the normalised columns, a panel read in scans,
the bundled sample.
"""
