"""The night's compile times: every variant cold-compiled for every target of thresholds.yaml.

After the latency is recorded, `perf nightly run` compiles this commit's kernels once more
with an empty cache (`python -m perf compile --emit-json SIDE --no-cache`: the static gate's
one side, CPU only, Triton's real compilers, never the interpreter) and appends one record per
variant and target to the night's results file (perf.static.report.record_compile_times:
metric `compile_time/<target>`, scenario `*`, CPU seconds). The history, the change-point
alert and the dashboard then read them like any other series, so a Triton bump that doubles
compile time shows as a step. `--no-compile-time` skips it (docs/nightly.md says the cost).
A sharded nightly's merge job has neither torch nor Triton: there runner 1 of M compiles (`compile`
into `<machine>-<sha8>-compile-time.json` beside its part, which the merge job downloads with the
parts) and the merge job appends that file (`record(..., side=...)`); a process without torch or
Triton and without such a file records none and says so.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile

from perf.results import COMPILE_TIME

SUITE = "pr"  # the static gate's suite: its calibration (calibration/compile-time.yaml) is of it
SIDE_SUFFIX = "-compile-time.json"  # a sharded nightly's compile times, beside runner 1's part


def side_path(parts_dir: str, machine: str, sha: str) -> str:
    """Where runner 1 of a sharded nightly leaves the commit's compile times for the merge job."""
    return os.path.join(parts_dir, f"{machine}-{sha[:8]}{SIDE_SUFFIX}")


def find_side(folder: str, sha: str) -> str | None:
    """The compile times runner 1 left among the parts the merge job downloaded into `folder`."""
    found = sorted(glob.glob(os.path.join(folder, "**", f"*-{sha[:8]}{SIDE_SUFFIX}"), recursive=True))
    return found[0] if found else None


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


def compile_side(side: str, root: str, thresholds: str) -> bool:
    """Compile `root`'s kernels cold into the side document `side`; False (said on stdout or
    stderr) where torch or Triton is missing or the compile fails."""
    import importlib.util

    absent = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if absent:  # the sharded nightly's merge job installs neither (perf/ci/jobs.py)
        print(f"nightly: no compile times recorded: {' and '.join(absent)} not installed here", flush=True)
        return False
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real compiles only
    done = subprocess.run(command(side, thresholds), cwd=root, env=env, check=False)
    if done.returncode != 0 or not os.path.exists(side):
        print(f"warning: the compile-time run ({' '.join(command(side, thresholds)[1:])}) exited "
              f"{done.returncode}; this night records no compile times", file=sys.stderr, flush=True)
        return False
    return True


def record(results_path: str, root: str, thresholds: str, side: str | None = None) -> int:
    """Append the compile times to `results_path`: those of `side` (runner 1's file, for a sharded
    nightly's merge job), else of `root`'s kernels compiled cold here. A compile that fails leaves
    the night's latency as it is and says so on stderr (returns 0)."""
    from perf.static import gate

    if side is not None:
        doc = gate.read_doc(side)
    else:
        with tempfile.TemporaryDirectory(prefix="nightly-compile-") as tmp:
            path = os.path.join(tmp, "side.json")
            if not compile_side(path, root, thresholds):
                return 0
            doc = gate.read_doc(path)
    n = append(results_path, doc)
    print(f"nightly: {n} compile-time records (variant x target, cold CPU s) appended to {results_path}",
          flush=True)
    return n
