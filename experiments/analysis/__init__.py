"""Analysis and figures: statistics over seeds, CSV tables, figure conventions, plots of runs."""
