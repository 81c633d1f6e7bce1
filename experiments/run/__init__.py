"""Runs: one federation, runs side by side on Ray, their processes, checks, progress, TLS."""
