"""Experiment entry points: simulation launcher, benchmarks and figure scripts."""
