"""Runs: one federation, runs side by side on Ray, the checks before a start, certificates."""
