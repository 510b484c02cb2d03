"""Stage 2, bars: validation, futures symbols, front contracts and rolls, back-adjustment, sessions, the bar grid
and gap filling: the loaded bars of each series.
"""
