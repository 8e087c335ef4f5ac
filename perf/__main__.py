"""`python -m perf`: the harness's command line (placeholder until the gates land)."""

import sys

from kernels import VARIANTS, platform


def main() -> int:
    p = platform.current()
    print(f"platform: {p.vendor} {p.arch} ({p.device_name}); variants: {', '.join(VARIANTS)}")
    print("no performance gate is implemented yet: the latency gate (issue 4) and the static "
          "gate (issue 5) will run here; nothing was measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
