"""`python -m perf`: see perf/cli.py for the commands."""

import sys

from perf.cli import main

if __name__ == "__main__":
    sys.exit(main())
