"""Pure parts of timing (samples, counts, calls per sample) and the A/A noise analysis,
from A/A results to the calibration file the gate reads back."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from perf import results, stats
from perf.checkout import ROOT
from perf.latency import noise
from perf.measure import timing
from perf.measure.timing import Samples
from perf.thresholds import calibration_for, load_thresholds
from perf.vendor import on_gpu


def test_samples_statistics():
    s = Samples(tuple(float(x) for x in range(1, 11)), reps=4)
    assert s.median == 5.5
    assert s.p20 == pytest.approx(np.percentile(range(1, 11), 20))
    assert s.summary() == {"median": 5.5, "p20": s.p20, "p80": s.p80, "n": 10, "reps": 4, "redone": 0}
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


@pytest.mark.parametrize("estimate_ms,reps", [
    (0.007, math.ceil(timing.MIN_SAMPLE_MS / 0.007)),  # a 7 us graph replay: several per sample
    (timing.MIN_SAMPLE_MS, 1), (1.0, 1), (1e-6, timing.MAX_REPS), (0.0, 1)])
def test_calls_per_sample(estimate_ms, reps):
    assert timing.reps_for(estimate_ms) == reps


def test_plan_caps_calls_per_sample_by_the_spin_they_need():
    fast_host = timing.make_plan(0.007, host_ms=0.01)  # a graph replay: cheap to enqueue
    assert fast_host.reps == timing.reps_for(0.007) > 1
    spin = timing.SPIN_FACTOR * 0.01 * fast_host.reps + timing.SPIN_MARGIN_MS
    assert fast_host.spin_ms == pytest.approx(spin)
    slow_host = timing.make_plan(0.007, host_ms=0.3)  # an eager call with 0.3 ms of Python
    assert slow_host.reps == 1 and slow_host.spin_ms <= timing.MAX_SPIN_MS + timing.SPIN_MARGIN_MS
    both = timing.merge_plans(timing.make_plan(0.02, 0.01), timing.make_plan(0.01, 0.05))
    assert (both.estimate_ms, both.host_ms) == (0.01, 0.05)
    assert timing.merge_plans(None, both) is both


def test_a_sample_the_host_queued_late_is_timed_again(monkeypatch):
    """The spin's end event must still be pending once the sample's calls are queued; a late
    host (the event already passed) gets the sample timed again with twice the spin."""
    late = iter([True, False, True, True, True, True])  # sample 0: late once; sample 1: always
    spins = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self):
            pass

        def query(self):
            return next(late)

        def elapsed_time(self, other):
            return 2.0

    monkeypatch.setattr(timing.torch.cuda, "Event", Event)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "_spin", spins.append)
    calls = []
    plan = timing.Plan(reps=2, spin_ms=0.1, estimate_ms=1.0)
    s = timing._time_events(lambda: calls.append(1), 2, plan, flush=False, budget_ms=None)
    assert s.values == (1.0, 1.0) and s.reps == 2
    # sample 0: 0.1 (late), 0.2 (in time); sample 1 starts at 0.2 and gives up after MAX_REDOS
    assert spins == pytest.approx([0.1, 0.2] + [0.2 * 2 ** k for k in range(timing.MAX_REDOS + 1)])
    assert s.redone == 1 + timing.MAX_REDOS and len(calls) == 2 * len(spins)
    # a call that is always late (a host sync inside): the spin stops growing at its bound
    late = iter(lambda: True, None)
    spins.clear()
    s = timing._time_events(lambda: None, 10, plan, flush=False, budget_ms=None)
    bound = timing.MAX_REDO_SPIN_MS
    assert spins == pytest.approx([0.1, 0.2, 0.4, 0.8, 0.8, 1.6, 3.2, bound] + [bound] * 8)
    assert s.redone == 6  # to the bound; none after it


def test_time_eager_without_gpu_is_wall_clock():
    calls = []
    s = timing.time_eager(lambda: calls.append(1), samples=4, warmup=2)
    if on_gpu():
        assert s.clock == "device-events" and len(s.values) == 4
    else:
        assert len(calls) == 6 and len(s.values) == 4 and s.clock == "wall-clock"


ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "driver": "580.1", "commit": "abc", "torch": "t",
       "triton": "3.6.0"}


def _aa(tmp_path, cases: dict, processes=6, rounds=10, seed=0):
    """A/A results as the gate's workers write them: (variant, scenario, metric) -> (sigma, tau)."""
    rng = np.random.default_rng(seed)
    header = {"environment": ENV, "repeats": rounds, "samples": 25, "suite": "pr"}
    ws = {s: results.ResultsWriter(str(tmp_path / f"{s}.jsonl"), header, resume=False)
          for s in ("base", "head")}
    for key, (sigma, tau) in cases.items():
        for p in range(processes):
            off = rng.normal(0, tau)
            for r in range(rounds):
                b = 0.2
                h = b * math.exp(off + rng.normal(0, sigma))
                for s, v in (("base", b), ("head", h)):
                    ws[s].record(variant=key[0], scenario=key[1], metric=key[2], repeat=p * rounds + r,
                                 samples=Samples((v,)), config=[], digest="d", process=f"p{p}")
    for w in ws.values():
        w.close()


def test_noise_rows_to_calibration_file_and_back(tmp_path):
    th_path = tmp_path / "thresholds.yaml"
    th_path.write_text(open(os.path.join(ROOT, "thresholds.yaml"), encoding="utf-8").read())
    th = load_thresholds(th_path)
    quiet, loud = ("static_grid", "quiet", "graph"), ("static_grid", "loud", "eager")
    _aa(tmp_path, {quiet: (0.002, 0.0), loud: (0.01, 0.02)}, processes=40)
    base, head, processes = noise.load_aa(str(tmp_path))
    rows = {r["scenario"]: r for r in noise.noise_rows(base, head, processes, th, "nvidia", 3, 10)}
    q, lo = rows["quiet"], rows["loud"]
    assert q["case"].sigma_round == pytest.approx(0.002, rel=0.1) and q["case"].tau < 0.001
    assert lo["case"].tau == pytest.approx(0.02, rel=0.3)
    assert q["noise"] == pytest.approx(stats.gate_sigma(q["case"].sigma_round, q["case"].tau, 3, 10))
    rule = th.vendor("nvidia").noise_rule
    assert q["fail"] == rule.floor_fail and lo["fail"] == pytest.approx(math.exp(rule.k_fail * lo["noise"]))
    assert q["min_detectable"] < 1.02 < lo["min_detectable"]
    # written as the calibration file the gate reads beside thresholds.yaml
    doc = noise.calibration_doc(list(rows.values()), "nvidia", ENV, {"processes": 40, "repeats": 10})
    path = tmp_path / "calibration" / "nvidia.yaml"
    noise.write_calibration(str(path), doc, {"fail_percent": 7.5, "runs": 4})
    cal, note = calibration_for(th, "nvidia", ENV["gpu"])
    assert "2 cases calibrated" in note and "driver 580.1" in note and cal.launch_cost["fail_percent"] == 7.5
    got = cal.case(*quiet)
    assert got.sigma_round == pytest.approx(q["case"].sigma_round, rel=1e-4) and got.processes == 40
    assert cal.noise(*quiet, 3, 10) == pytest.approx(q["noise"], rel=1e-3)
    # rewriting without launch cost keeps the measured launch-cost threshold
    noise.write_calibration(str(path), noise.calibration_doc(list(rows.values()), "nvidia", ENV, {}))
    assert calibration_for(th, "nvidia", ENV["gpu"])[0].launch_cost["fail_percent"] == 7.5


def test_noise_needs_an_aa_directory(tmp_path):
    from perf.errors import ConfigError

    with pytest.raises(ConfigError, match="no base.jsonl/head.jsonl"):
        noise.load_aa(str(tmp_path))


def test_launch_cost_threshold_from_separate_runs():
    from perf.latency.calibrate import launch_cost_threshold

    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    rule = th.vendor("nvidia").noise_rule
    quiet = launch_cost_threshold({"a": [1e-4, 1e-4 * 1.0001, 1e-4 * 0.9999]}, th, "nvidia")
    assert quiet["fail_percent"] == pytest.approx(100 * (rule.floor_fail - 1)) and quiet["runs"] == 3
    loud = launch_cost_threshold({"a": [1e-4, 1.05e-4, 0.95e-4], "b": [2e-4, 2e-4, 2e-4]}, th, "nvidia")
    sigma = float(np.std(np.log([1e-4, 1.05e-4, 0.95e-4]), ddof=1))
    expected = 100 * (math.exp(rule.k_fail * math.sqrt(2) * sigma) - 1)
    assert loud["fail_percent"] == pytest.approx(expected, abs=0.1)
    assert loud["sigma_process"]["a"] == pytest.approx(sigma, abs=1e-5)


# --- the calibration file is measured data: never replaced by another machine's unasked ----

H100_CALIBRATION = os.path.join(ROOT, "calibration", "nvidia.yaml")
INTERPRETER = {"vendor": "cpu", "gpu": "Triton interpreter", "interpreter": True, "driver": None,
               "commit": "abc", "torch": "t", "triton": "3.6.0"}


def _repo_with_h100_calibration(tmp_path):
    """thresholds.yaml and the committed H100 calibration/nvidia.yaml, copied into tmp_path."""
    (tmp_path / "calibration").mkdir()
    cal = tmp_path / "calibration" / "nvidia.yaml"
    cal.write_bytes(open(H100_CALIBRATION, "rb").read())
    th = tmp_path / "thresholds.yaml"
    th.write_bytes(open(os.path.join(ROOT, "thresholds.yaml"), "rb").read())
    return th, cal


def _aa_of(tmp_path, env, processes=3, name="ab"):
    out = tmp_path / name
    out.mkdir()
    global ENV
    saved, ENV = ENV, env
    try:
        _aa(out, {("static_grid", "tiny/decode/batch1-kv16/block16", "eager"): (0.01, 0.0)},
            processes=processes)
    finally:
        ENV = saved
    return out


def _noise(*argv) -> int:
    from perf import cli

    return cli.main(["noise", *map(str, argv)])


def test_noise_write_refuses_to_replace_a_gpu_calibration_with_interpreter_noise(tmp_path, capsys):
    """The bug this pins: after an interpreter gate, `perf noise results/ab --vendor nvidia
    --write calibration/nvidia.yaml` replaced the committed H100 calibration, exit 0."""
    th, cal = _repo_with_h100_calibration(tmp_path)
    ab = _aa_of(tmp_path, INTERPRETER)
    before = cal.read_bytes()
    assert _noise(ab, "--vendor", "nvidia", "--write", cal, "--thresholds", th) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(cal) in err[0] and "NVIDIA H100" in err[0] and "--force" in err[0], err
    assert cal.read_bytes() == before
    # --force replaces it, and the file says where its numbers come from
    assert _noise(ab, "--vendor", "nvidia", "--write", cal, "--thresholds", th, "--force") == 0
    from perf.thresholds import load_calibration

    written = load_calibration(str(cal))
    assert written.gpu == "Triton interpreter" and written.meta["interpreter"] is True
    assert written.launch_cost is None  # the H100's launch-cost threshold is not carried over
    # ... and a GPU's calibration does not silently replace the interpreter's either
    capsys.readouterr()
    assert _noise(_aa_of(tmp_path, ENV, name="gpu"), "--write", cal, "--thresholds", th) == 2
    err = capsys.readouterr().err
    assert "holds data measured with gpu 'Triton interpreter'" in err and "--force" in err


@pytest.mark.parametrize("other,field", [
    ({**ENV, "gpu": "NVIDIA H200"}, "gpu"),
    ({**ENV, "interpreter": True}, "interpreter"),
])
def test_write_calibration_refuses_another_gpu_or_the_interpreter(tmp_path, other, field):
    from perf.errors import ConfigError

    _, cal = _repo_with_h100_calibration(tmp_path)
    before = cal.read_bytes()
    row = {"variant": "static_grid", "scenario": "s", "metric": "graph", "case": _case()}
    doc = noise.calibration_doc([row], "nvidia", other, {})
    with pytest.raises(ConfigError) as err:
        noise.write_calibration(str(cal), doc)
    msg = str(err.value)
    assert msg.startswith(f"{cal}: holds data measured with {field}") and "--force" in msg
    assert cal.read_bytes() == before
    noise.write_calibration(str(cal), doc, force=True)
    assert cal.read_bytes() != before


def _case():
    from perf.thresholds import CaseNoise

    return CaseNoise(0.002, 0.001, 6, 60, 0.05)


def test_write_calibration_refuses_another_vendor_and_an_unreadable_file(tmp_path):
    from perf.errors import ConfigError

    _, cal = _repo_with_h100_calibration(tmp_path)
    row = {"variant": "static_grid", "scenario": "s", "metric": "graph", "case": _case()}
    amd = noise.calibration_doc([row], "amd", {**ENV, "gpu": "AMD Instinct MI300X"}, {})
    with pytest.raises(ConfigError, match="holds data measured with vendor 'nvidia'.*--force"):
        noise.write_calibration(str(cal), amd)
    cal.write_text("version: 1\nvendor: nvidia\nvendor: amd\n")  # not a calibration: not replaced unread
    with pytest.raises(ConfigError, match=r"given twice.*not replaced unread.*--force"):
        noise.write_calibration(str(cal), noise.calibration_doc([row], "nvidia", ENV, {}))
    noise.write_calibration(str(cal), noise.calibration_doc([row], "nvidia", ENV, {}), force=True)
    assert "static_grid" in cal.read_text()


def test_nothing_measured_writes_nothing(tmp_path, capsys):
    from perf.errors import NothingMeasured

    th, cal = _repo_with_h100_calibration(tmp_path)
    before = cal.read_bytes()
    with pytest.raises(NothingMeasured, match="^nothing was measured: "):
        noise.write_calibration(str(cal), noise.calibration_doc([], "nvidia", ENV, {}))
    one_process = _aa_of(tmp_path, ENV, processes=1)  # no case in two processes: no noise to calibrate
    assert _noise(one_process, "--write", cal, "--thresholds", th) == 2
    err = capsys.readouterr().err
    assert "nothing was measured: " in err and "left as it is" in err and cal.read_bytes() == before


def test_write_calibration_holds_the_lock_and_refuses_a_file_the_reader_would_refuse(tmp_path):
    from perf import files
    from perf.errors import ConfigError

    path = tmp_path / "calibration" / "nvidia.yaml"
    row = {"variant": "static_grid", "scenario": "s", "metric": "graph", "case": _case()}
    with files.lock(str(path)), pytest.raises(ConfigError, match="being written by"):
        noise.write_calibration(str(path), noise.calibration_doc([row], "nvidia", ENV, {}))
    assert not path.exists()
    no_gpu = {k: v for k, v in ENV.items() if k != "gpu"}  # results that do not say which GPU
    with pytest.raises(ConfigError, match="refusing to write a calibration the gate could not read.*gpu"):
        noise.write_calibration(str(path), noise.calibration_doc([row], "nvidia", no_gpu, {}))
    assert not path.exists()


def test_calibrate_on_another_gpu_writes_its_own_file_beside_the_h100s(tmp_path, monkeypatch):
    """An H200 runner's `perf calibrate` neither refuses nor replaces the H100's calibration/nvidia.yaml:
    it measures into calibration/nvidia-h200.yaml (one file per GPU model); `--write` onto the H100's
    file is still refused before measuring, without --force."""
    import argparse

    from perf.errors import ConfigError
    from perf.latency import ab, calibrate

    class Measured(Exception):
        pass

    th, cal = _repo_with_h100_calibration(tmp_path)
    written = []
    monkeypatch.setattr(calibrate.vendor_mod, "on_gpu", lambda: True)
    monkeypatch.setattr(calibrate.vendor_mod, "resolve", lambda given: "nvidia")
    monkeypatch.setattr(calibrate, "this_environment",
                        lambda vendor: {"vendor": vendor, "gpu": "NVIDIA H200", "interpreter": False})
    real = calibrate.noise.refuse_replacing
    monkeypatch.setattr(calibrate.noise, "refuse_replacing",
                        lambda path, *a: (written.append(path), real(path, *a)))
    monkeypatch.setattr(ab, "measure", lambda *a, **k: (_ for _ in ()).throw(Measured()))
    parser = argparse.ArgumentParser()
    parser.add_argument("--thresholds")
    calibrate.add_arguments(parser)
    args = parser.parse_args(["--thresholds", str(th), "--out", str(tmp_path / "out")])
    with pytest.raises(Measured):
        calibrate.main(args)
    assert written[-1] == str(tmp_path / "calibration" / "nvidia-h200.yaml")
    args = parser.parse_args(["--thresholds", str(th), "--out", str(tmp_path / "out2"), "--write", str(cal)])
    with pytest.raises(ConfigError, match=f"^{cal}: holds data measured with gpu 'NVIDIA H100.*--force"):
        calibrate.main(args)
