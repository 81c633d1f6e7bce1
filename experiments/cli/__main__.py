"""``python -m experiments.cli``: the ``fedcgd`` tool where its script is not installed."""

from experiments.cli import main

raise SystemExit(main())
