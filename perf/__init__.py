"""The harness: scenarios, timing, A/B, statistics, thresholds, gates and reports."""

import sys

from perf import process

if sys.argv[:1] == ["-m"]:  # imported to run `python -m perf...` (runpy's marker while it finds the module)
    process.catch_from_start()
