"""`python -m perf.nightly {all,run,publish,report,alert}`: see perf/nightly/__init__.py."""

from perf.nightly import cli_main

if __name__ == "__main__":
    from perf.process import entry

    entry(cli_main)
