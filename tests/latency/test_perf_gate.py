"""Gate verdicts, exit codes and findings from paired results files (synthetic results)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from perf import results
from perf.errors import ConfigError, NothingMeasured
from perf.latency import ab, analysis
from perf.measure.timing import Samples
from perf.thresholds import Calibration, CaseNoise, load_thresholds
from perf.verdicts import Finding, Verdict, detectable_summary, exit_code, latency_verdict, worst_first

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TH = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))


@pytest.mark.parametrize("ratio,p_slow,p_fast,verdict", [
    (1.10, 0.001, 0.99, Verdict.FAIL),  # beyond fail and significant
    (1.10, 0.20, 0.80, Verdict.WARN),  # beyond fail, not significant: inconclusive, never fails
    (1.04, 0.001, 0.99, Verdict.WARN),  # between warn and fail, significant
    (1.04, 0.20, 0.80, Verdict.OK),  # between warn and fail, not significant: no evidence
    (1.02, 0.001, 0.99, Verdict.OK),  # significant but small
    (1.00, 0.50, 0.50, Verdict.OK),
    (0.90, 0.99, 0.001, Verdict.IMPROVED),  # the mirror image of FAIL
    (0.96, 0.99, 0.001, Verdict.OK),  # faster beyond 1/warn only: not "improved"
    (0.90, 0.80, 0.20, Verdict.OK),  # faster but not significant
])
def test_latency_verdict_is_symmetric(ratio, p_slow, p_fast, verdict):
    assert latency_verdict(ratio, p_slow, p_fast, warn=1.03, fail=1.05, alpha=0.01)[0] is verdict
    mirrored = latency_verdict(1 / ratio, p_fast, p_slow, warn=1.03, fail=1.05, alpha=0.01)[0]
    if verdict is Verdict.FAIL:
        assert mirrored is Verdict.IMPROVED
    if verdict is Verdict.IMPROVED:
        assert mirrored is Verdict.FAIL


def _finding(verdict: Verdict, ratio: float | None, scenario: str = "s", mde=None) -> Finding:
    return Finding("latency", "nvidia", "GPU", "v", scenario, "graph", 1.0, ratio, ratio, None, None,
                   0.5, "warn > 1.03, fail > 1.05", verdict, min_detectable=mde)


def test_exit_code_and_order():
    ok, warn, fail, imp = (_finding(Verdict.OK, 1.0), _finding(Verdict.WARN, 1.04),
                           _finding(Verdict.FAIL, 1.2), _finding(Verdict.IMPROVED, 0.8))
    assert exit_code([ok, warn, imp]) == 0
    assert exit_code([ok, fail]) == 1
    with pytest.raises(NothingMeasured, match="nothing was measured: no case at all"):
        exit_code([])  # a pass needs something checked
    skipped = _finding(Verdict.OK, None)
    skipped.note = "skipped on both sides: no softcap"
    with pytest.raises(NothingMeasured, match="2 skipped on both sides"):
        exit_code([skipped, skipped])
    broken = _finding(Verdict.FAIL, None)  # broken on head: a regression, measured or not
    assert exit_code([skipped, broken]) == 1
    assert [f.verdict for f in worst_first([imp, ok, fail, warn])] == [
        Verdict.FAIL, Verdict.WARN, Verdict.OK, Verdict.IMPROVED]


def test_finding_round_trips_through_json_old_findings_too():
    f = _finding(Verdict.FAIL, 1.2, mde=1.013)
    assert Finding.from_dict(f.to_dict()) == f
    old = f.to_dict()
    del old["min_detectable"]  # findings version 1
    assert Finding.from_dict(old).min_detectable is None


def test_detectable_summary_counts_cases():
    fs = [_finding(Verdict.OK, 1.0, mde=m) for m in (1.015, 1.04, 1.09, 1.3)] + [_finding(Verdict.OK, None)]
    assert detectable_summary(fs).startswith("of 4 measured cases, with 95 % power: 1 see 2 %, 2 see 5 %, "
                                             "3 see 10 %")


# --- paired results files, as the gate's workers write them ---------------------------------

ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90"}


def _write_pair(tmp_path, cases: dict, processes: int = 3, rounds: int = 10, skips=(), seed=0):
    """cases: (variant, scenario, metric) -> (effect ratio, per-process offset sd, round sd).
    Writes base.jsonl and head.jsonl with paired records as perf/latency/worker.py does."""
    rng = np.random.default_rng(seed)
    writers = {s: results.ResultsWriter(str(tmp_path / f"{s}.jsonl"), {"environment": ENV, "side": s},
                                        resume=False) for s in ("base", "head")}
    ids = [f"proc{p}" for p in range(processes)]
    for key, (effect, tau, sigma) in cases.items():
        for p, pid in enumerate(ids):
            offset = rng.normal(0, tau)
            for r in range(rounds):
                b = 0.1 * math.exp(rng.normal(0, 0.001))
                h = b * effect * math.exp(offset + rng.normal(0, sigma))
                for side, value in (("base", b), ("head", h)):
                    writers[side].record(variant=key[0], scenario=key[1], metric=key[2],
                                         repeat=p * rounds + r, samples=Samples((value,)), config=[],
                                         digest="d", process=pid, position=0 if side == "base" else 1)
    for side, v, s, reason, kind in skips:
        writers[side].skip(variant=v, scenario=s, reason=reason, kind=kind)
    for w in writers.values():
        w.close()
    return results.load(str(tmp_path / "base.jsonl")), results.load(str(tmp_path / "head.jsonl")), set(ids)


def test_paired_findings_fail_improve_and_ignore_process_offsets(tmp_path):
    k = lambda s: ("static_grid", s, "graph")  # noqa: E731
    base, head, ids = _write_pair(tmp_path, {
        k("slow"): (1.06, 0.0005, 0.002), k("same"): (1.0, 0.0005, 0.002), k("fast"): (0.90, 0.0005, 0.002),
        k("offsets"): (1.0, 0.05, 0.001),  # processes 5 % apart, rounds quiet: no change at all
    })
    by = {f.scenario: f for f in analysis.paired_findings(base, head, TH, "nvidia", None, ids)}
    assert by["slow"].verdict is Verdict.FAIL and by["slow"].ratio == pytest.approx(1.06, abs=0.005)
    assert by["slow"].ci_low < 1.06 < by["slow"].ci_high
    assert by["same"].verdict is Verdict.OK
    assert by["fast"].verdict is Verdict.IMPROVED
    assert by["offsets"].verdict is not Verdict.FAIL and by["offsets"].p_value > 0.01
    assert "uncalibrated default threshold" in by["same"].note
    assert "3 processes x 10 rounds" in by["same"].note
    assert 1.05 < by["same"].min_detectable < 1.07  # default fail 1.05 plus a little noise
    assert by["offsets"].min_detectable > by["same"].min_detectable


def test_calibration_sets_thresholds_and_the_test_floor(tmp_path):
    k = ("static_grid", "s", "graph")
    base, head, ids = _write_pair(tmp_path, {k: (1.02, 0.0002, 0.001)})
    (uncal,) = analysis.paired_findings(base, head, TH, "nvidia", None, ids)
    assert uncal.verdict is Verdict.OK  # 2 % is inside the default 1.05
    quiet = Calibration("c.yaml", "nvidia", ENV["gpu"], {}, {k: CaseNoise(0.001, 0.0002, 6, 60, 0.1)})
    (cal,) = analysis.paired_findings(base, head, TH, "nvidia", quiet, ids)
    assert cal.verdict is Verdict.FAIL and "calibrated" in cal.threshold
    assert cal.min_detectable < 1.02
    loud = Calibration("c.yaml", "nvidia", ENV["gpu"], {}, {k: CaseNoise(0.03, 0.02, 6, 60, 0.1)})
    (noisy,) = analysis.paired_findings(base, head, TH, "nvidia", loud, ids)
    assert noisy.verdict is Verdict.OK and "noise: calibrated" in noisy.note  # the calibration knows better


def test_processes_not_listed_are_ignored(tmp_path):
    k = ("static_grid", "s", "graph")
    base, head, ids = _write_pair(tmp_path, {k: (1.2, 0.0, 0.001)}, processes=4)
    (f,) = analysis.paired_findings(base, head, TH, "nvidia", None, {"proc0", "proc1", "proc2"})
    assert "3 processes" in f.note


def test_missing_and_broken_cases(tmp_path):
    k = lambda v: (v, "s", "graph")  # noqa: E731
    base, head, ids = _write_pair(tmp_path, {k("ok"): (1.0, 0.0, 0.001)}, skips=[
        ("head", "broke", "s", "output has NaN/Inf (unwritten or wrong): not timed", "error"),
        ("base", "both", "s", "RuntimeError: boom", "error"),
        ("head", "both", "s", "RuntimeError: boom", "error"),
        ("head", "gone", "s", "variant 'gone' is not registered in this checkout", "missing"),
        ("base", "new", "s", "variant 'new' is not registered in this checkout", "missing"),
        ("base", "naive", "s", "variant 'naive' does not support softcap", "skip"),
        ("head", "naive", "s", "variant 'naive' does not support softcap", "skip"),
        ("head", "ok", "s", "eager: RuntimeError: only the eager metric broke", "error"),
    ])
    by = {f.variant: f for f in analysis.paired_findings(base, head, TH, "nvidia", None, ids)}
    assert by["broke"].verdict is Verdict.FAIL and by["broke"].note.startswith("broken on head")
    assert by["both"].verdict is Verdict.WARN and "broken on both sides" in by["both"].note
    assert by["gone"].verdict is Verdict.WARN and "not measured on head" in by["gone"].note
    assert by["new"].verdict is Verdict.OK and "new on head" in by["new"].note
    assert by["naive"].verdict is Verdict.OK and "skipped on both sides" in by["naive"].note
    assert by["ok"].verdict is Verdict.OK and by["ok"].ratio is not None  # the graph metric was measured
    assert exit_code(list(by.values())) == 1


def test_recompute_applies_the_re_measure_like_the_gate(tmp_path):
    k = lambda s: ("static_grid", s, "graph")  # noqa: E731
    # six processes: the first three the measurement, the last three the re-measure of "slow"
    _write_pair(tmp_path, {k("slow"): (1.06, 0.0005, 0.002), k("same"): (1.0, 0.0005, 0.002)}, processes=6)
    (tmp_path / "gate.json").write_text(json.dumps({"identity": {}, "processes": [
        {"attempt": 0 if p < 3 else 1, "index": p % 3, "process": f"proc{p}", "first_repeat": 0, "pairs": 1}
        for p in range(6)]}))
    (tmp_path / "retry1-keys.json").write_text(json.dumps([list(k("slow"))]))
    by = {f.scenario: f for f in ab.recompute(str(tmp_path), TH, "nvidia", None)}
    assert by["slow"].verdict is Verdict.FAIL and "re-measured in fresh processes" in by["slow"].note
    assert by["same"].verdict is Verdict.OK and "re-measured" not in by["same"].note
    (tmp_path / "retry1-keys.json").write_text("[]")  # the gate back then did not fail it
    (slow,) = [f for f in ab.recompute(str(tmp_path), TH, "nvidia", None) if f.scenario == "slow"]
    assert slow.verdict is Verdict.FAIL and "not re-measured" in slow.note


def test_ledger_resumes_the_same_gate_and_starts_another_over(tmp_path):
    ident = {"base": "a", "head": "b"}
    led = ab.Ledger(str(tmp_path), ident)
    led.add({"attempt": 0, "index": 0, "process": "p0", "first_repeat": 0, "pairs": 5})
    (tmp_path / "base.jsonl").write_text("x")
    again = ab.Ledger(str(tmp_path), ident)
    assert again.resumed == 1 and again.done(0, 0) and not again.done(0, 1) and again.ids(0) == {"p0"}
    assert (tmp_path / "base.jsonl").exists()
    other = ab.Ledger(str(tmp_path), {"base": "a", "head": "c"})
    assert other.resumed == 0 and not (tmp_path / "base.jsonl").exists()
    assert json.loads((tmp_path / "gate.json").read_text())["identity"]["head"] == "c"


def test_plot_draws_each_cases_own_thresholds(tmp_path):
    pytest.importorskip("matplotlib")
    from perf.latency.plot import plot_ratios

    fs = [_finding(Verdict.OK, 1.0, "a"), _finding(Verdict.FAIL, 1.2, "b")]
    path = plot_ratios(fs, str(tmp_path / "r.png"), "t", {("v", "a", "graph"): (1.005, 1.01),
                                                          ("v", "b", "graph"): (1.3, 1.5)})
    assert path and os.path.getsize(path) > 1000


def test_results_of_another_gpu_or_schema_are_refused(tmp_path):
    def one(path, env):
        with results.ResultsWriter(str(path), {"environment": env}, resume=False) as w:
            w.record(variant="q", scenario="s", metric="graph", repeat=0, samples=Samples((1.0,)), config=[],
                     digest="d")
        return results.load(str(path))

    a = one(tmp_path / "a.jsonl", ENV)
    b = one(tmp_path / "b.jsonl", dict(ENV, gpu="AMD Instinct MI300X"))
    with pytest.raises(ConfigError, match="environment.gpu.*same GPU"):
        results.check_comparable(a, b)
    with pytest.raises(ConfigError, match="resume on the same GPU"):
        results.ResultsWriter(str(tmp_path / "a.jsonl"), {"environment": dict(ENV, gpu="other")})


def test_only_re_measure_processes_profile_per_kernel(tmp_path, monkeypatch):
    """The first measurement's processes time only; a re-measure's also profile each case per
    kernel (`--kernel-times`: the why section reads it from their records, perf/why.py)."""
    cmds = []

    def run_process(cmd, log_path, label, reporter, pythonpath=None):
        cmds.append(cmd)
        return {"event": "done", "process": f"p{len(cmds)}", "pairs": 1}

    monkeypatch.setattr(ab, "run_process", run_process)
    settings = ab.Settings("smoke", None, None, "graph", processes=2, repeats=3, samples=5, budget_ms=10.0)
    ledger = ab.Ledger(str(tmp_path), {"x": 1})
    keys = [("static_grid", "s", "graph")]
    for attempt in (0, 1):
        ab.measure(settings, {"base": "B", "head": "H"}, str(tmp_path), ledger, attempt, keys, None)
    assert ["--kernel-times" in c for c in cmds] == [False, False, True, True]
