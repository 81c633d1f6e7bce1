"""The paper's tables and figures that need no training, and the paper's setting for the scripts."""
