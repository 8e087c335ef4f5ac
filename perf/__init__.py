"""The harness: scenarios, timing, A/B, statistics, thresholds, gates and reports."""

import sys

if sys.argv[:1] == ["-m"]:  # this package is being imported to run `python -m perf...` (runpy's marker)
    from perf.cli import catch_interrupts_from_start

    catch_interrupts_from_start()
