"""`python -m perf`: see perf/cli.py for the commands and the error boundary."""

from perf.cli import main
from perf.process import entry

if __name__ == "__main__":
    entry(main)
