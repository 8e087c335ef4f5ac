"""One measuring process of the gate, end to end in Triton's interpreter (no GPU).

Both sides are this checkout loaded twice (an A/A): the worker must write paired records
(one per side, round and case), alternate which side goes first in a balanced way, tag each
record with its process, and end with the `done` protocol line. About 15 s on a CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from interpreter_support import needs_interpreter

from perf import results
from perf.checkout import ROOT
from perf.latency import analysis, worker
from perf.latency.worker import PROTOCOL

CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}


@needs_interpreter
def test_worker_pairs_both_sides_in_one_process(tmp_path):
    cmd = [sys.executable, "-m", "perf.latency.worker", "--base-from", ROOT, "--head-from", ROOT,
           "--out-dir", str(tmp_path), "--first-repeat", "20", "--suite", "smoke", "--scenarios",
           "tiny_bs16_b1_s16_d100", "--variants", "flex_tile,nonexistent", "--metrics", "eager,graph",
           "--repeats", "4", "--samples", "1", "--seed", "3", "--header", json.dumps({"gate": {"x": 1}})]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **CPU_ONLY, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    events = [json.loads(x[len(PROTOCOL):]) for x in out.stdout.splitlines() if x.startswith(PROTOCOL)]
    assert events[0]["event"] == "ready" and events[-1]["event"] == "done" and events[-1]["pairs"] == 4
    base, head = (results.load(str(tmp_path / f"{s}.jsonl")) for s in ("base", "head"))
    assert base.header["side"] == "base" and head.header["gate"] == {"x": 1}
    recs = {s: [r for r in res.measurements()] for s, res in (("base", base), ("head", head))}
    assert all(r["metric"] == "eager" and r["process"] == events[-1]["process"] for r in recs["head"])
    assert sorted(r["repeat"] for r in recs["head"]) == [20, 21, 22, 23]  # numbered from --first-repeat
    # each round: base and head once, in positions 0 and 1; base first in half of the rounds
    first = Counter(r["position"] for r in recs["base"])
    assert first == Counter({0: 2, 1: 2})
    order = worker.side_order(4, 3)
    for r in recs["head"]:
        assert order[r["repeat"] - 20][r["position"]] == "head"
    (case,) = analysis.pairs(base, head).values()
    assert case.processes == 1 and len(case.groups()[0]) == 4
    # the missing variant is recorded on both sides, not dropped
    assert {s["variant"] for s in base.skips()} == {"nonexistent"} == {s["variant"] for s in head.skips()}
