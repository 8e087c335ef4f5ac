"""`python -m perf.nightly {all,run,publish,report,alert}`: see perf/nightly/__init__.py."""

import sys

from perf.nightly import cli_main

if __name__ == "__main__":
    sys.exit(cli_main())
