"""The night's compile times: every variant cold-compiled for every target of thresholds.yaml.

After the latency is recorded, `perf nightly run` compiles this commit's kernels once more
with an empty cache (`python -m perf compile --emit-json SIDE --no-cache`: the static gate's
one side, CPU only, Triton's real compilers, never the interpreter) and appends one record per
variant and target to the night's results file (perf.static.report.record_compile_times:
metric `compile_time/<target>`, scenario `*`, CPU seconds). The history, the change-point
alert and the dashboard then read them like any other series, so a Triton bump that doubles
compile time shows as a step. `--no-compile-time` skips it (docs/nightly.md says the cost);
a process without torch or Triton (the sharded nightly's merge job) records none and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from perf.results import COMPILE_TIME

SUITE = "pr"  # the static gate's suite: its calibration (calibration/compile-time.yaml) is of it


def command(side: str, thresholds: str, suite: str = SUITE) -> list[str]:
    """The compile of one side, cold, every target of `thresholds`, every registered variant."""
    return [sys.executable, "-m", "perf", "compile", "--emit-json", side, "--no-cache", "--quiet",
            "--thresholds", os.path.abspath(thresholds), "--suite", suite]


def append(results_path: str, doc: dict) -> int:
    """Append the compile times of the side document `doc` to the night's results file (same
    header, so the file stays one commit's, one machine's); a file that holds them already is
    left as it is (a rerun of `_record` adds no second repeat). Returns the records written."""
    from perf import results
    from perf.static import report

    old = results.load(results_path, warn=False)
    if any(r["metric"].startswith(f"{COMPILE_TIME}/") for r in old.measurements()):
        return 0
    header = {k: v for k, v in old.header.items() if k not in ("kind", "schema_version")}
    with results.ResultsWriter(results_path, header, resume=True) as w:
        return report.record_compile_times(w, doc)


def record(results_path: str, root: str, thresholds: str) -> int:
    """Compile `root`'s kernels cold and append their compile times to `results_path`. A compile
    that fails leaves the night's latency as it is and says so on stderr (returns 0)."""
    import importlib.util

    from perf.static import gate

    absent = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if absent:  # the sharded nightly's merge job installs neither (perf/ci/jobs.py)
        print(f"nightly: no compile times recorded: {' and '.join(absent)} not installed here", flush=True)
        return 0
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real compiles only
    with tempfile.TemporaryDirectory(prefix="nightly-compile-") as tmp:
        side = os.path.join(tmp, "side.json")
        done = subprocess.run(command(side, thresholds), cwd=root, env=env, check=False)
        if done.returncode != 0 or not os.path.exists(side):
            print(f"warning: the compile-time run ({' '.join(command(side, thresholds)[1:])}) exited "
                  f"{done.returncode}; this night records no compile times", file=sys.stderr, flush=True)
            return 0
        doc = gate.read_doc(side)
    n = append(results_path, doc)
    print(f"nightly: {n} compile-time records (variant x target, cold CPU s) appended to {results_path}",
          flush=True)
    return n
