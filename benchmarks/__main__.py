"""``python -m benchmarks <name>``: a benchmark (``--help`` lists them)."""

import sys

from benchmarks import main

raise SystemExit(main(sys.argv[1:]))
