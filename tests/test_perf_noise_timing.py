"""Pure parts of timing (sample statistics, sample counts) and the A/A noise analysis."""

from __future__ import annotations

import os

import numpy as np
import pytest

from perf import results
from perf.latency import noise, timing
from perf.latency.timing import Samples
from perf.vendor import on_gpu


def test_samples_statistics():
    s = Samples(tuple(float(x) for x in range(1, 11)))
    assert s.median == 5.5
    assert s.p20 == pytest.approx(np.percentile(range(1, 11), 20))
    assert s.p80 == pytest.approx(np.percentile(range(1, 11), 80))
    assert s.summary() == {"median": 5.5, "p20": s.p20, "p80": s.p80, "n": 10}
    assert Samples((2.0, 2.0)).cv == 0.0


@pytest.mark.parametrize("estimate_ms,samples,budget,expected", [
    (0.05, 25, 100, 25),  # short calls: the configured count
    (10.0, 25, 100, 10),  # 25 x 10 ms would pass the budget
    (170.0, 25, 100, timing.MIN_SAMPLES),  # never fewer than the minimum
    (170.0, 3, 100, 3),  # ... unless fewer were asked for
    (10.0, 25, None, 25),  # no budget
])
def test_sample_count(estimate_ms, samples, budget, expected):
    assert timing._count(estimate_ms, samples, budget) == expected


def test_time_eager_counts_warmup_and_names_its_clock():
    calls = []
    s = timing.time_eager(lambda: calls.append(1), samples=4, warmup=2)
    clock = "device-events" if on_gpu() else "wall-clock"
    assert len(calls) == 6 and len(s.values) == 4 and s.clock == clock


def _write(path, values_by_key, env):
    with results.ResultsWriter(str(path), {"environment": env}, resume=False) as w:
        for (v, sc, m), values in values_by_key.items():
            for r, x in enumerate(values):
                w.record(variant=v, scenario=sc, metric=m, repeat=r, samples=Samples((x,)), config=[],
                         digest="d")


def test_noise_rows_measure_cv_and_detectable_effect(tmp_path):
    env = {"vendor": "nvidia", "gpu": "G"}
    rng = np.random.default_rng(0)
    quiet = ("q", "quiet", "graph")
    loud = ("q", "loud", "eager")
    _write(tmp_path / "base.jsonl", {quiet: 1 + 0.002 * rng.standard_normal(10),
                                     loud: 2 * (1 + 0.10 * rng.standard_normal(10))}, env)
    # the head side sits 3 % higher on average: an offset between processes is not noise
    _write(tmp_path / "head.jsonl", {quiet: 1.03 * (1 + 0.002 * rng.standard_normal(10)),
                                     loud: 2 * (1 + 0.10 * rng.standard_normal(10))}, env)
    files = noise._files([str(tmp_path)])
    assert [os.path.basename(f) for f in files] == ["base.jsonl", "head.jsonl"]
    rows = {r["scenario"]: r for r in noise.noise_rows(files, 10, 0.01, lambda *k: 1.05, sims=300)}
    assert rows["quiet"]["cv"] < 0.005 and rows["quiet"]["aa_ratio"] == pytest.approx(1.03, abs=0.005)
    assert 1.05 < rows["quiet"]["mde"] < 1.06
    assert 0.05 < rows["loud"]["cv"] < 0.2 and rows["loud"]["mde"] > 1.15
