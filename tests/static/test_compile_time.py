"""Compile time as a judged metric of the static gate: the verdict rule, its thresholds and
calibration, the two sides sharing compiles, the nightly's records, and a planted 2x slower
compile seen end to end (real compiles in a subprocess, CPU burnt inside triton.compile)."""

from __future__ import annotations

import copy
import json
import operator
import os
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from perf import results
from perf.errors import ConfigError
from perf.static import build, calibrate, report
from perf.thresholds import load_thresholds, parse_compile_calibration, parse_thresholds
from perf.vendor_thresholds import NoiseRule
from perf.verdicts import Verdict, compile_time_finding

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULE = NoiseRule(1.25, 1.75, 3.0, 4.0)


@pytest.fixture(scope="module")
def thresholds():
    return load_thresholds(os.path.join(ROOT, "thresholds.yaml"))


def _side(cpu_s: float, count: int = 3, cached: int = 0) -> dict:
    return {"cpu_s": cpu_s, "count": count, "cached": cached}


# ------------------------------------------------------------------------- the verdict rule

@pytest.mark.parametrize("ratio,noise,verdict", [
    (1.0, None, Verdict.OK), (1.2, None, Verdict.OK), (1.3, None, Verdict.WARN), (1.8, None, Verdict.FAIL),
    (0.55, None, Verdict.IMPROVED), (0.6, None, Verdict.OK),
    # noise 0.1: warn beyond exp(0.3) = 1.35, fail beyond max(1.75, exp(0.4)) = 1.75
    (1.3, 0.1, Verdict.OK), (1.4, 0.1, Verdict.WARN), (1.8, 0.1, Verdict.FAIL),
    # noise 0.25: warn beyond exp(0.75) = 2.12, fail beyond exp(1) = 2.72 (misses a doubling)
    (2.2, 0.25, Verdict.WARN), (2.8, 0.25, Verdict.FAIL),
])
def test_compile_time_verdicts(ratio, noise, verdict):
    f = compile_time_finding("static_grid", "sm_90", "nvidia", _side(10.0), _side(10.0 * ratio), RULE, noise,
                             "calibration/compile-time.yaml")
    assert f.verdict is verdict, (f.threshold, f.note)
    assert f.metric == "compile_time" and f.scenario == "*" and f.ratio == pytest.approx(ratio)
    assert ("noise" in f.threshold) == (noise is not None)


def test_a_variant_new_on_a_target_is_ok_and_says_so():
    f = compile_time_finding("static_grid", "sm_90", "nvidia", None, _side(4.0), RULE, None)
    assert f.verdict is Verdict.OK and f.base is None and "new on this target" in f.note


def test_the_note_counts_specializations_and_cached_times():
    f = compile_time_finding("qblock", "gfx942", "amd", _side(2.0, count=2), _side(5.0, count=3, cached=1),
                             RULE, None)
    assert "2 -> 3 specializations" in f.note and "1 from the metrics cache" in f.note


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 20.0), st.floats(0.05, 20.0), st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_a_slower_head_never_gets_a_better_verdict(r1, r2, noise):
    """Monotone: of two heads against one base, the slower one's verdict is at least as bad,
    and a slowdown within max(floor, exp(k x noise)) never warns."""
    lo, hi = sorted((r1, r2))
    a, b = (compile_time_finding("v", "t", "amd", _side(1.0), _side(r), RULE, noise) for r in (lo, hi))
    assert b.verdict.severity <= a.verdict.severity
    warn = max(RULE.floor_warn, RULE.apply(noise)[0] if noise is not None else 0)
    if hi <= warn:
        assert b.verdict in (Verdict.OK, Verdict.IMPROVED)


# ------------------------------------------------------------------------- thresholds.yaml

def test_thresholds_carry_the_compile_time_rule(thresholds):
    for vendor in thresholds.vendors:
        assert thresholds.vendor(vendor).compile_time == RULE


def test_compile_time_keys_left_out_take_the_defaults(thresholds):
    raw = copy.deepcopy(thresholds.raw)
    del raw["amd"]["compile"]["compile_time"]
    raw["nvidia"]["compile"]["compile_time"] = {"fail": 3.0}
    th = parse_thresholds(raw, "thresholds.yaml")
    assert th.vendor("amd").compile_time == RULE
    assert th.vendor("nvidia").compile_time == NoiseRule(1.25, 3.0, 3.0, 4.0)
    raw["nvidia"]["compile"]["compile_time"] = {"warn": 1.5}
    th = parse_thresholds(raw, "thresholds.yaml")
    assert th.vendor("nvidia").compile_time == NoiseRule(1.5, 1.75, 3, 4)


@pytest.mark.parametrize("value,says", [
    ({"warn": 0.9}, "nvidia.compile.compile_time.warn: must be a number > 1"),
    ({"warn": 2.5}, "nvidia.compile.compile_time.warn: fail 1.75 is below warn 2.5 (the other one is the "
                    "default)"),
    ({"warn": 1.5, "fail": 1.4}, "nvidia.compile.compile_time.fail: fail 1.4 is below warn 1.5;"),
    ({"k": {"warn": 3, "fail": 2}}, "nvidia.compile.compile_time.k.fail: must be >= k.warn (3), got 2"),
    ({"fial": 2.0}, "nvidia.compile.compile_time.fial: unknown key (expected one of: warn, fail, k)"),
    ({"fail": True}, "nvidia.compile.compile_time.fail: must be a number"),
    ("fast", "nvidia.compile.compile_time: expected a mapping, got str"),
])
def test_bad_compile_time_keys_are_one_line(thresholds, value, says):
    raw = copy.deepcopy(thresholds.raw)
    raw["nvidia"]["compile"]["compile_time"] = value
    with pytest.raises(ConfigError) as e:
        parse_thresholds(raw, "thresholds.yaml")
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


# ------------------------------------------------------------------------- calibration

def _calibration(machine: str = "AMD EPYC (2 CPUs)", **case) -> dict:
    return {"version": 1, "machine": machine, "meta": {"date": "2026-11-26", "repeats": 4},
            "cases": [{"variant": "static_grid", "target": "sm_90", "noise": 0.05, "repeats": 4,
                       "cpu_s": 12.0, "specializations": 10, **case}]}


def test_the_committed_calibration_reads_and_covers_what_ci_compiles(thresholds):
    from perf.thresholds import compile_calibration_for

    cal, note = compile_calibration_for(thresholds)
    assert cal is not None, note
    assert {("static_grid", t) for t in ("sm_90", "sm_100", "gfx942", "gfx950")} <= set(cal.cases)
    assert all(0 <= c["noise"] < 0.5 for c in cal.cases.values())


@pytest.mark.parametrize("change,says", [
    ({"noise": -0.1}, "cases[0].noise: must be a number >= 0"),
    ({"repeats": 1}, "cases[0].repeats: must be an integer from 2"),
    ({"cpu_s": 0}, "cases[0].cpu_s: must be a number > 0"),
    ({"target": ""}, "cases[0].target: must be a non-empty string"),
])
def test_bad_calibration_files_are_one_line(change, says):
    with pytest.raises(ConfigError) as e:
        parse_compile_calibration(_calibration(**change), "calibration/compile-time.yaml")
    assert str(e.value).startswith("calibration/compile-time.yaml: ") and says in str(e.value), str(e.value)


def test_noise_is_the_rms_of_the_aa_log_ratios():
    def pair(a, b):
        return ({("v", "t"): _side(a)}, {("v", "t"): _side(b)})

    [case] = calibrate.noise_cases([pair(1.0, 1.0), pair(2.0, 2.0)])
    assert case["noise"] == 0 and case["repeats"] == 2
    [case] = calibrate.noise_cases([pair(1.1, 1.0), pair(1.0, 1.1)])
    assert case["noise"] == pytest.approx(0.09531, abs=1e-5)  # log(1.1), whichever copy was slower


def _cli(*args, cwd=ROOT, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    return subprocess.run([sys.executable, "-m", "perf", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_another_machines_calibration_is_replaced_only_with_force(tmp_path):
    path = tmp_path / "compile-time.yaml"
    path.write_text(yaml.safe_dump(_calibration(machine="Some Other CPU (64 CPUs)")))
    done = _cli("compile-calibrate", "--write", str(path), "--targets", "sm_90", "--repeats", "2")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "holds data measured with machine 'Some Other CPU (64 CPUs)'" in done.stderr
    assert "--force" in done.stderr and "compiling" not in done.stderr  # refused before any compile
    assert "Some Other CPU" in path.read_text()


@pytest.mark.parametrize("args,says", [
    (["--targets", "sm_1"], "--targets 'sm_1': sm_1 not in thresholds.yaml"),
    (["--suite", "bogus"], "no suite 'bogus'"),
    (["--variants", "nave"], "nave"),
    (["--scenarios", "nothing*"], "nothing*"),
])
def test_a_bad_argument_is_refused_before_the_files_machine(tmp_path, args, says):
    """The refusal of a bad argument is the same on every CPU: it does not wait behind the check of the
    calibration's machine (a --targets refusal once did, and read as another error on another CPU)."""
    path = tmp_path / "compile-time.yaml"
    path.write_text(yaml.safe_dump(_calibration(machine="Some Other CPU (64 CPUs)")))
    done = _cli("compile-calibrate", "--write", str(path), *args, "--repeats", "2")
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "Some Other CPU" not in done.stderr and "Some Other CPU" in path.read_text()


def test_calibrate_writes_a_file_the_gate_reads(tmp_path):
    """Two A/A pairs of real cold compiles of one launch (sm_90), into a file of this machine."""
    path = tmp_path / "compile-time.yaml"
    done = _cli("compile-calibrate", "--write", str(path), "--targets", "sm_90", "--variants", "static_grid",
                "--scenarios", "llama3-8b/decode/batch32-kv1024/block16", "--repeats", "2", "--quiet")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cal = parse_compile_calibration(yaml.safe_load(path.read_text()), str(path))
    assert cal.machine == calibrate.machine() and set(cal.cases) == {("static_grid", "sm_90")}
    assert cal.cases[("static_grid", "sm_90")]["repeats"] == 2
    assert path.read_text().startswith("# Compile-time noise of the static gate")


# ------------------------------------------------------------------------- shared compiles

def test_two_sides_at_once_compile_a_shared_specialization_once(tmp_path, monkeypatch):
    """Both sides in parallel (threads here, processes in the gate) over one cache: each key is
    compiled by one of them, and both get every result."""
    calls: list[str] = []

    def fake_compile(job):
        calls.append(job.key)
        time.sleep(0.05)
        return {"status": "ok", "metrics": {"compile_cpu_s": 1.0}, "error": ""}

    monkeypatch.setattr(build, "compile_job", fake_compile)

    class Job:
        def __init__(self, key):
            self.key, self.qualname = key, "k"
            self.target = type("T", (), {"name": "sm_90"})()

    shared = [Job(f"{i:064x}") for i in range(6)]
    sides = {"base": shared + [Job("b" * 64)], "head": shared + [Job("c" * 64)]}
    cache = build.DiskCache(str(tmp_path / "cache"))
    out: dict = {}
    threads = [threading.Thread(target=lambda s=s: out.__setitem__(s, build.compile_all(sides[s], cache, 1,
                                                                                          quiet=True)))
               for s in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(calls) == sorted({j.key for js in sides.values() for j in js})  # each key once
    for side, jobs in sides.items():
        results_, _ = out[side]
        assert set(results_) == {j.key for j in jobs} and all(r["status"] == "ok" for r in results_.values())
    assert out["base"][1] + out["head"][1] == len(calls)
    assert not list((tmp_path / "cache").rglob("*.claim"))  # every claim released


def test_a_dead_processs_claim_is_taken_over(tmp_path):
    cache = build.DiskCache(str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    claims = build.Claims(cache)
    os.makedirs(os.path.dirname(claims._path("ab" * 32)), exist_ok=True)
    with open(claims._path("ab" * 32), "w") as f:
        f.write(str(gone.pid))
    assert claims.wait("ab" * 32) is None  # nobody will deliver it
    with claims:
        assert claims.take("ab" * 32)
    assert not os.path.exists(claims._path("ab" * 32))


# ------------------------------------------------------------------------- the nightly's records

def test_results_carry_compile_time_per_variant_and_target(tmp_path):
    metrics = {"registers": 96, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0, "shared_memory": 4096,
               "occupancy": 8, "compile_time_s": 2.0, "compile_cpu_s": 1.5}
    entries = [{"variant": "static_grid", "scenario": s, "target": "sm_90", "vendor": "nvidia", "kernel": k,
                "occurrence": 0, "status": "ok", "key": f"{k}-{key}", "metrics": metrics, "config": {},
                "batch_digest": "d"}
               for s, key in (("a", 1), ("b", 1), ("c", 2)) for k in ("_attn", "_reduce")]
    doc = {"suite": "pr", "triton": "3.6.0", "targets": [{"name": "sm_90"}], "variants": ["static_grid"],
           "entries": entries}
    path = str(tmp_path / "static.jsonl")
    report.write_results(path, doc, ROOT)
    loaded = results.load(path)
    [r] = [r for r in loaded.measurements() if r["metric"] == results.compile_time_metric("sm_90")]
    # four distinct specializations (two kernels x two keys), 1.5 CPU s each
    assert r["variant"] == "static_grid" and r["median"] == 6.0 and r["specializations"] == 4
    assert r["clock"] == "cpu" and r["unit"] == "CPU s"


# ------------------------------------------------------------------------- a planted 2x slower compile

SLOWER = textwrap.dedent("""
    import argparse, json, os, sys, time
    import triton
    from perf.static import gate, build
    from perf.thresholds import load_thresholds

    th = load_thresholds("thresholds.yaml")
    real_probe, probed = build.probe_targets, []

    def probe_once(targets, cache):  # the target probe, a process timed in no compile: once, not per run
        if not probed:
            probed.append(real_probe(targets, cache))
        return probed[0]

    build.probe_targets = probe_once
    args = argparse.Namespace(gate_side=None, variants="static_grid", targets="sm_90", suite="pr",
                              scenarios="llama3-8b/decode/batch32-kv1024/block16", source=None, no_cache=True,
                              cache_dir="", jobs=1, quiet=True)
    gate.run_side(args, th)  # warm-up: one-time start-up costs (imports, first compile) fall here
    base = gate.run_side(args, th)
    real = triton.compile

    def slower(*a, **k):  # a Triton whose compiles take 3x the CPU: the same work twice more, no sleep
        start = build.cpu_seconds()
        out = real(*a, **k)
        spent = build.cpu_seconds() - start
        end = time.process_time() + 2 * spent
        while time.process_time() < end:
            pass
        return out

    triton.compile = slower
    head = gate.run_side(args, th)
    found = gate.compile_time_findings(base, head, th)
    print(json.dumps([f.to_dict() for f in found]))
""")


def test_a_compile_three_times_as_slow_fails(tmp_path):
    """A planted 3x (not 2x): on a loaded 2-core machine the measured ratio of a planted 2x came
    out at 1.60, under the 1.75 fail line, while the compile itself was as planted."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", SLOWER], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [f] = json.loads(done.stdout.splitlines()[-1])
    assert (f["variant"], f["target"], f["metric"]) == ("static_grid", "sm_90", "compile_time")
    assert f["ratio"] > 1.75 and f["verdict"] == "fail", f


def _job(name: str) -> SimpleNamespace:
    """What TargetPools reads of a job (its target's name), and `pid`: os.getpid, pickled by name,
    so that a worker calls its own. Nothing of this module travels, so the worker each pool spawns
    does not import it (hypothesis, perf): 0.08 CPU s a worker, not 0.37 (2-core CPU machine, 2026-12-04)."""
    return SimpleNamespace(target=SimpleNamespace(name=name), pid=os.getpid)


def test_no_worker_compiles_for_two_targets():
    """build.TargetPools: jobs of three targets, interleaved, never share a worker process."""
    # each target twice, after another target's jobs (a pool closed and opened again for it)
    names = ["sm_90", "gfx942", "sm_90", "gfx950", "gfx942", "gfx950"]
    pools = build.TargetPools(2)
    try:
        served = [(name, pools.submit(operator.methodcaller("pid"), _job(name)).result(120))
                  for name in names]
    finally:
        pools.shutdown()
    targets_of: dict[int, set] = {}
    for name, pid in served:
        targets_of.setdefault(pid, set()).add(name)
    assert all(len(t) == 1 for t in targets_of.values()), targets_of
    assert {n for t in targets_of.values() for n in t} == set(names) and os.getpid() not in targets_of
