"""`python -m perf`: see perf/cli.py for the commands and the error boundary."""

from perf.cli import entry, main

if __name__ == "__main__":
    entry(main)
