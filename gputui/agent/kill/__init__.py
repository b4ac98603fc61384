"""A confirmed kill, run to its end on the host: identity guard, signals, outcomes."""
