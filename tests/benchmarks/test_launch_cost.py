"""Host-side cost of one call per variant (validation, planning, launch), by pytest-benchmark.

The paper reports 80-300 us of host work per call for Triton attention kernels; CUDA/HIP
graphs remove it. The latency gate times device time only (perf/measure/timing.py hides the
host's launch cost), so this suite is where host cost is gated. The clock is the host's:
each round is one call of the variant's public entry exactly as a serving engine makes it
(preallocated `out=`, the host-side hints the variant takes, no metadata value checks: they
ran once, outside the rounds), with the GPU left to run asynchronously and synchronized only
outside the timed rounds. A serving loop's `max_seqlen_k` hint grows by one every decode
step, so every round passes the next one (`perf.measure.host_cost.serving_options`): one
round in 16 enters a new class of KV lengths and chooses its configuration again
(`heuristics.kv_len_class`), as a serving loop does; a loop over one batch with fixed hints
would never choose again. The decode batch of Llama-3-8B (32 sequences of 1024 tokens)
keeps the GPU busy for longer than a launch, so the launch queue never drains into the
measurement; 200 rounds stay far below its depth.

`test_anchor_launch_cost` times the production entry on every scenario of the `anchor` suite
(docs/kernels.md's benchmark grid). The peers are not timed here: a test per entry times
each seconds apart, and the host's speed drifts more than that between and within processes,
so beside a peer the comparison is paired, call by call (`python -m perf host-cost`,
perf/measure/host_cost.py); and a peer's own host cost drifting would fail this gate.

Used the way pytest-benchmark intends (`nox -s launch-cost`): save a baseline on main
(`--benchmark-save=main`), then compare a branch against it; the session fails beyond the
threshold `python -m perf calibrate --launch-cost-runs N` measured on this GPU
(calibration/<vendor>.yaml). Needs a GPU: under Triton's interpreter the cost of a call is
the interpreter's, so every case skips there with that reason.
"""

from __future__ import annotations

import functools

import pytest
import torch

from kernels import VARIANTS
from kernels.inputs import CHECK_VALUES_ENV
from perf.measure.cases import host_hints, takes
from perf.measure.host_cost import serving_options
from perf.scenarios import Scenario, suite
from perf.vendor import on_gpu

SCENARIO = "llama3-8b/decode/batch32-kv1024/block16"
ON_GPU = on_gpu()
ANCHOR = [s.name for s in suite("anchor")]
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

    steps = serving_options(options)

    def call():
        fn(*batch.args(), out=out, **next(steps))

    monkeypatch.setenv(CHECK_VALUES_ENV, "0")  # the test session turns them on; production does not
    benchmark.pedantic(call, rounds=200, iterations=1, warmup_rounds=20)
    torch.cuda.synchronize()


@functools.lru_cache(maxsize=1)  # the entries of a scenario run one after another: one batch
def _anchor_batch(scenario: str):
    from kernels.batch import build_batch

    return build_batch(Scenario.parse(scenario).spec(), "cuda")


@pytest.mark.parametrize("scenario", ANCHOR)
def test_anchor_launch_cost(benchmark, scenario, monkeypatch):
    spec = Scenario.parse(scenario).spec()
    batch = _anchor_batch(scenario)
    fn, out = VARIANTS["static_grid"], batch.new_output()
    options = dict(batch.options, **host_hints(fn, spec))
    fn(*batch.args(), out=out, **options, check_values=True)  # compile; values checked once
    steps = serving_options(options)

    def call():
        fn(*batch.args(), out=out, **next(steps))
    torch.cuda.synchronize()
    benchmark.group = f"launch cost: {scenario}"
    benchmark.extra_info.update(scenario=scenario, entry="static_grid")
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    # 100 rounds: the longest anchor call (a 16k prefill, about 6 ms) queues 0.6 s of GPU
    # work, far below the launch queue's depth, so the host never waits for the device
    benchmark.pedantic(call, rounds=100, iterations=1, warmup_rounds=10)
    torch.cuda.synchronize()


@pytest.mark.parametrize("scenario", ANCHOR)
def test_anchor_plan_cost(benchmark, scenario, monkeypatch):
    """The production entry's host work before its launches (validation, planning): with
    `test_anchor_launch_cost`, what of a call's host time is ours and what Triton's launcher's."""
    spec = Scenario.parse(scenario).spec()
    batch = _anchor_batch(scenario)
    fn, out = VARIANTS["static_grid"], batch.new_output()
    options = dict(batch.options, **host_hints(fn, spec))
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    benchmark.group = f"plan cost: {scenario}"
    benchmark.extra_info.update(scenario=scenario, entry="static_grid.plan")
    steps = serving_options(options)
    benchmark.pedantic(lambda: fn.plan(*batch.args(), out=out, **next(steps)), rounds=100, iterations=1,
                       warmup_rounds=10)

