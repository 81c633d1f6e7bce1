"""Comparisons and presets: policies over seeds with statistics, and the paper's presets (Hydra)."""
