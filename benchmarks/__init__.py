"""Benchmarks: speed and cost measurements run on demand (numbers in docs/performance.md)."""
