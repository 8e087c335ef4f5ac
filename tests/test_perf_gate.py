"""Gate verdicts, exit codes and the comparison of two results files (synthetic results)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from perf import results
from perf.errors import ConfigError
from perf.latency.ab import compare_results
from perf.latency.timing import Samples
from perf.thresholds import load_thresholds
from perf.verdicts import Finding, Verdict, exit_code, latency_verdict, worst_first

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TH = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))


@pytest.mark.parametrize("ratio,p_slow,p_fast,verdict", [
    (1.10, 0.001, 0.99, Verdict.FAIL),  # beyond fail and significant
    (1.10, 0.20, 0.80, Verdict.WARN),  # beyond fail, not significant: never fails
    (1.04, 0.001, 0.99, Verdict.WARN),  # between warn and fail
    (1.02, 0.001, 0.99, Verdict.OK),  # significant but small
    (1.00, 0.50, 0.50, Verdict.OK),
    (0.90, 0.99, 0.001, Verdict.IMPROVED),
    (0.90, 0.80, 0.20, Verdict.OK),  # faster but not significant
])
def test_latency_verdict(ratio, p_slow, p_fast, verdict):
    assert latency_verdict(ratio, p_slow, p_fast, warn=1.03, fail=1.05, alpha=0.01)[0] is verdict


def _finding(verdict: Verdict, ratio: float | None, scenario: str = "s") -> Finding:
    return Finding("latency", "nvidia", "GPU", "v", scenario, "eager", 1.0, ratio, ratio, None, None,
                   0.5, "warn > 1.03, fail > 1.05", verdict)


def test_exit_code_and_order():
    ok, warn, fail, imp = (_finding(Verdict.OK, 1.0), _finding(Verdict.WARN, 1.04),
                           _finding(Verdict.FAIL, 1.2), _finding(Verdict.IMPROVED, 0.8))
    assert exit_code([ok, warn, imp]) == 0
    assert exit_code([ok, fail]) == 1
    assert exit_code([]) == 0
    assert [f.verdict for f in worst_first([imp, ok, fail, warn])] == [
        Verdict.FAIL, Verdict.WARN, Verdict.OK, Verdict.IMPROVED]
    f2 = _finding(Verdict.FAIL, 1.5, "t")
    assert worst_first([fail, f2])[0] is f2  # larger ratio first within a verdict


def test_finding_round_trips_through_json():
    f = _finding(Verdict.FAIL, 1.2)
    assert Finding.from_dict(f.to_dict()) == f


# --- compare_results on synthetic results files --------------------------------------------

ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90"}


def _write(path, medians: dict, env=ENV, skips=(), digest="d") -> results.Results:
    """medians: (variant, scenario, metric) -> list of repeat medians."""
    with results.ResultsWriter(str(path), {"environment": env}, resume=False) as w:
        for (v, s, m), values in medians.items():
            for r, x in enumerate(values):
                w.record(variant=v, scenario=s, metric=m, repeat=r, samples=Samples((x * 0.99, x, x * 1.01)),
                         config=[{"kernel": "k"}], digest=digest)
        for v, s, reason, kind in skips:
            w.skip(variant=v, scenario=s, reason=reason, kind=kind)
    return results.load(str(path))


def _rng_values(center, cv, n=10, seed=0):
    return list(np.random.default_rng(seed).normal(center, center * cv, n))


def test_compare_finds_regression_improvement_and_noise(tmp_path):
    key = lambda s: ("qblock", s, "eager")  # noqa: E731
    noisy = [1.08 * x for x in _rng_values(1.0, 0.2, seed=4)][::-1]
    base = _write(tmp_path / "b.jsonl", {key("slow"): _rng_values(1.0, 0.005, seed=1),
                                         key("same"): _rng_values(1.0, 0.005, seed=2),
                                         key("fast"): _rng_values(1.0, 0.005, seed=3),
                                         key("noisy"): _rng_values(1.0, 0.2, seed=4)})
    head = _write(tmp_path / "h.jsonl", {key("slow"): _rng_values(1.10, 0.005, seed=5),
                                         key("same"): _rng_values(1.0, 0.005, seed=6),
                                         key("fast"): _rng_values(0.8, 0.005, seed=7),
                                         key("noisy"): noisy})
    by = {f.scenario: f for f in compare_results(base, head, TH, "nvidia")}
    assert by["slow"].verdict is Verdict.FAIL and by["slow"].ratio == pytest.approx(1.10, abs=0.01)
    assert by["slow"].ci_low < 1.10 < by["slow"].ci_high
    assert by["same"].verdict is Verdict.OK
    assert by["fast"].verdict is Verdict.IMPROVED
    assert by["noisy"].verdict is not Verdict.FAIL  # 8 % slower but lost in 20 % noise
    assert by["slow"].target == ENV["gpu"] and by["slow"].threshold.startswith("warn > 1.03")


def test_compare_reports_missing_and_broken_variants(tmp_path):
    vals = _rng_values(1.0, 0.005)
    base = _write(tmp_path / "b.jsonl", {("gone", "s", "eager"): vals, ("broke", "s", "eager"): vals},
                  skips=[("new", "s", "variant 'new' is not registered in this checkout", "missing"),
                         ("naive", "s", "variant 'naive' does not support softcap", "skip")])
    head = _write(tmp_path / "h.jsonl", {("new", "s", "eager"): vals},
                  skips=[("gone", "s", "variant 'gone' is not registered in this checkout", "missing"),
                         ("broke", "s", "output has NaN/Inf", "error"),
                         ("naive", "s", "variant 'naive' does not support softcap", "skip")])
    by = {f.variant: f for f in compare_results(base, head, TH, "nvidia")}
    assert by["broke"].verdict is Verdict.FAIL and "broken on head" in by["broke"].note
    assert by["gone"].verdict is Verdict.WARN and "not registered" in by["gone"].note
    assert by["new"].verdict is Verdict.OK and "new on head" in by["new"].note
    assert by["naive"].verdict is Verdict.OK and "skipped on both sides" in by["naive"].note


def test_compare_warns_when_batches_differ(tmp_path):
    vals = _rng_values(1.0, 0.005)
    base = _write(tmp_path / "b.jsonl", {("q", "s", "eager"): vals}, digest="aaa")
    head = _write(tmp_path / "h.jsonl", {("q", "s", "eager"): [v * 1.2 for v in vals]}, digest="bbb")
    (f,) = compare_results(base, head, TH, "nvidia")
    assert f.verdict is Verdict.WARN and "batch differs" in f.note


def test_results_of_another_gpu_or_schema_are_refused(tmp_path):
    a = _write(tmp_path / "a.jsonl", {("q", "s", "eager"): [1.0]})
    b = _write(tmp_path / "b.jsonl", {("q", "s", "eager"): [1.0]}, env=dict(ENV, gpu="AMD Instinct MI300X"))
    with pytest.raises(ConfigError, match="environment.gpu.*same GPU"):
        results.check_comparable(a, b)
    text = (tmp_path / "a.jsonl").read_text().replace('"schema_version": 1', '"schema_version": 0')
    (tmp_path / "old.jsonl").write_text(text)
    with pytest.raises(ConfigError, match="schema_version 0, this harness reads 1"):
        results.load(str(tmp_path / "old.jsonl"))


def test_results_survive_interruption_and_resume(tmp_path):
    path = tmp_path / "r.jsonl"
    _write(path, {("q", "s", "eager"): [1.0, 1.1]})
    with open(path, "a") as f:
        f.write('{"kind": "record", "variant": "q", "scen')  # a line cut short by a kill
    res = results.load(str(path))
    assert res.done() == {("q", "s", "eager", 0), ("q", "s", "eager", 1)}
    assert res.medians()[("q", "s", "eager")] == [1.0, 1.1]
    with pytest.raises(ConfigError, match="resume on the same GPU"):
        results.ResultsWriter(str(path), {"environment": dict(ENV, gpu="other")})
