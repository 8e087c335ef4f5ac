"""Host-side cost of one call per variant (validation, planning, launch), by pytest-benchmark.

The paper reports 80-300 us of host work per call for Triton attention kernels; CUDA/HIP
graphs remove it. The latency gate times device time only (perf/latency/timing.py hides the
host's launch cost), so this suite is where host cost is gated. The clock is the host's:
each round is one call of the variant's public entry exactly as a serving engine makes it
(preallocated `out=`, the host-side hints the variant takes, no metadata value checks: they
ran once, outside the rounds), with the GPU left to run asynchronously and synchronized only
outside the timed rounds. The decode batch of Llama-3-8B (32 sequences of 1024 tokens) keeps
the GPU busy for longer than a launch, so the launch queue never drains into the
measurement; 200 rounds stay far below its depth.

Used the way pytest-benchmark intends (`nox -s launch-cost`): save a baseline on main
(`--benchmark-save=main`), then compare a branch against it; the session fails beyond the
threshold `python -m perf calibrate --launch-cost-runs N` measured on this GPU
(calibration/<vendor>.yaml). Needs a GPU: under Triton's interpreter the cost of a call is
the interpreter's, so every case skips there with that reason.
"""

from __future__ import annotations

import pytest
import torch

from kernels import VARIANTS
from kernels.inputs import CHECK_VALUES_ENV
from perf.latency.measure import host_hints, takes
from perf.scenarios import Scenario
from perf.vendor import on_gpu

SCENARIO = "llama3-8b/decode/batch32-kv1024/block16"
ON_GPU = on_gpu()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not ON_GPU, reason="host launch cost is measured on GPU runners (nox -s launch-cost); "
                                          "in Triton's interpreter a call costs the interpreter's time"),
]


@pytest.fixture(scope="module")
def batch():
    from kernels.batch import build_batch

    return build_batch(Scenario.parse(SCENARIO).spec(), "cuda")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_launch_cost(benchmark, batch, variant, monkeypatch):
    fn = VARIANTS[variant]
    out = batch.new_output()
    options = dict(batch.options, **host_hints(fn, batch.spec))
    check = {"check_values": True} if takes(fn, "check_values") else {}
    try:
        fn(*batch.args(), out=out, **options, **check)  # compile, and validate once with value checks
    except NotImplementedError as e:
        pytest.skip(str(e))
    torch.cuda.synchronize()
    benchmark.group = f"launch cost: {SCENARIO}"
    benchmark.extra_info["scenario"] = SCENARIO

    def call():
        fn(*batch.args(), out=out, **options)

    monkeypatch.setenv(CHECK_VALUES_ENV, "0")  # the test session turns them on; production does not
    benchmark.pedantic(call, rounds=200, iterations=1, warmup_rounds=20)
    torch.cuda.synchronize()
