"""Ctrl-C during `python -m perf run`: exit 130, what finished is kept in a file that parses, and
the same command run again resumes to completion with every case measured exactly once.

The signal lands at a random point of the measurement (after a random number of the run's
records, drawn anew each run and shown on failure), in Triton's interpreter on a CPU.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from interpreter_support import needs_interpreter

from perf import results

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
VARIANTS, REPEATS = ("flex_tile", "qblock"), 4
ARGV = ["run", "--suite", "smoke", "--variants", ",".join(VARIANTS), "--scenarios", "tiny/decode*",
        "--metrics", "eager", "--repeats", str(REPEATS), "--samples", "2"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="",
           TRITON_INTERPRET="1")


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@needs_interpreter
def test_sigint_keeps_what_finished_and_a_rerun_completes_each_case_once(tmp_path):
    out = tmp_path / "r.jsonl"
    total = len(VARIANTS) * REPEATS
    after = random.randrange(total)  # records written before the signal (0: right after the header)
    proc = subprocess.Popen([sys.executable, "-m", "perf", *ARGV, "--out", str(out)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _lines(out) < 1 + after and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    where = f"SIGINT after {after} of {total} records"
    assert proc.returncode == 130, (where, stdout[-500:], stderr[-2000:])
    assert "Traceback" not in stderr, (where, stderr)
    assert stderr.strip().splitlines()[-1].startswith("interrupted"), (where, stderr)
    kept = results.load(str(out))  # parses: whole lines only (a cut line would be reported and dropped)
    assert len(kept.measurements()) <= total, where
    again = subprocess.run([sys.executable, "-m", "perf", *ARGV, "--out", str(out)], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, (where, again.stderr[-2000:])
    done = results.load(str(out))
    keys = Counter((r["variant"], r["scenario"], r["metric"], r["repeat"]) for r in done.measurements())
    assert len(keys) == total and set(keys.values()) == {1}, (where, keys)
    assert {r["commit"] for r in done.measurements()} == {done.environment["commit"]}
