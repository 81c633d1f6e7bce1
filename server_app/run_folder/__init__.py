"""A run's folder and its files: locks, atomic writes, status, metrics, summary and config.

Pure Python (no flwr, no torch); see docs/design.md, "Result folders".
"""
