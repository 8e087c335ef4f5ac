"""The nightly history: asv configuration, benchmarks and results, the change-point alert, peers' grouping.

Everything here runs without a GPU and without asv: the benchmark module enumerates its
parameters from the environment as asv's processes do, asv's results are written from the
store as asv reads them, and the alert runs on synthetic histories written in the real results
format into a store (perf/nightly/store.py).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from perf import results
from perf.errors import ConfigError
from perf.measure.timing import Samples
from perf.nightly import alert, asvrun, collect, history, selection, store
from perf.scenarios import suite
from perf.thresholds import load_thresholds

ROOT = Path(__file__).resolve().parents[2]
THRESHOLDS = load_thresholds(ROOT / "thresholds.yaml")
ENV = {"time": "2026-11-21T00:00:00+00:00", "vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3",
       "arch": "sm_90"}


# --- asv.conf.json and the benchmark module -------------------------------------------------


def test_asv_conf_has_what_the_nightly_and_the_workflow_need():
    conf = asvrun.read_config(str(ROOT / "asv.conf.json"))
    assert conf["environment_type"] == "existing" and conf["launch_method"] == "spawn"
    assert conf["branches"] == ["HEAD"] and conf["version"] == 1
    assert Path(conf["_benchmark_dir"]) == ROOT / "perf" / "asv"
    assert (Path(conf["_benchmark_dir"]) / "benchmarks.py").is_file()
    # .github/workflows/nightly.yml caches and uploads these two folders (perf/ci/nightly_yml.py reads them).
    from perf.ci.nightly_yml import _asv_dirs

    assert _asv_dirs(ROOT) == (".asv/results", ".asv/html")
    assert (conf["results_dir"], conf["html_dir"]) == (".asv/results", ".asv/html")


@pytest.mark.parametrize("key, value", [("launch_method", "forkserver"), ("environment_type", "virtualenv"),
                                        ("branches", ["main"])])
def test_asv_conf_refuses_what_breaks_the_nightly(tmp_path, key, value):
    conf = json.loads((ROOT / "asv.conf.json").read_text())
    conf[key] = value
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    with pytest.raises(ConfigError, match=key):
        asvrun.read_config(str(tmp_path / "asv.conf.json"))


def _bench_module(monkeypatch, **env):
    for key in ("SUITE", "SCENARIOS", "VARIANTS", "PEERS", "REPEATS", "SAMPLES", "RESULTS"):
        monkeypatch.delenv(selection.ENV_PREFIX + key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(selection.ENV_PREFIX + key, value)
    sys.modules.pop("perf.asv.benchmarks", None)  # a fresh module, as each asv process imports it
    return importlib.import_module("perf.asv.benchmarks")


def test_benchmarks_enumerate_the_exported_selection(monkeypatch):
    bench = _bench_module(monkeypatch, SUITE="smoke", VARIANTS="naive,qblock", PEERS="sdpa_cudnn,sdpa_flash")
    smoke = [s.name for s in suite("smoke")]
    assert bench.PagedAttention.params == [["naive", "qblock"], smoke]
    assert bench.PagedAttention.param_names == ["variant", "scenario"]
    assert bench.VendorLibrary.params == [["sdpa_cudnn", "sdpa_flash"], smoke]
    for cls in (bench.PagedAttention, bench.VendorLibrary):
        assert cls.unit == "ms" and cls.version == "1"  # pinned: editing a body keeps the history
        assert callable(cls.track_latency_ms) and callable(cls.track_graph_ms)
    # what asv's results are written under (perf/nightly/asvrun.py) is what the module defines
    for name, prefix, param_names in asvrun.CLASSES:
        cls = getattr(bench, name)
        assert (cls.prefix, cls.param_names) == (prefix, list(param_names))
        assert (cls.unit, cls.version) == (asvrun.UNIT, asvrun.VERSION)
        assert all(callable(getattr(cls, method)) for method in asvrun.METHODS)


def test_benchmarks_default_to_every_variant_and_the_nightly_suite(monkeypatch):
    import kernels

    bench = _bench_module(monkeypatch, PEERS="none")
    assert bench.PagedAttention.params == [list(kernels.VARIANTS), [s.name for s in suite("nightly")]]
    assert not hasattr(bench, "VendorLibrary")  # no library: no class, no empty parameter grid


def test_benchmarks_skip_fail_and_report_as_asv_expects(monkeypatch):
    bench = _bench_module(monkeypatch, SUITE="smoke", VARIANTS="naive", PEERS="none")
    cache = {"path": "x.jsonl", "cases": {
        ("naive", "a"): {"eager": 1.5, "graph": 0.5},
        ("naive", "b"): {"skip": "variant 'naive' does not support sliding_window"},
        ("naive", "c"): {"eager": 2.0, "errors": {"graph": "graph: RuntimeError: capture failed"}},
        ("naive", "d"): {"eager": 3.0},  # graphs not measurable here (no GPU)
    }}
    b = bench.PagedAttention()
    b.setup(cache, "naive", "a")
    assert b.track_latency_ms(cache, "naive", "a") == 1.5 and b.track_graph_ms(cache, "naive", "a") == 0.5
    with pytest.raises(NotImplementedError, match="sliding_window"):  # asv's skip
        b.setup(cache, "naive", "b")
    with pytest.raises(NotImplementedError, match="not in this commit"):
        b.setup(cache, "naive", "zzz")
    with pytest.raises(RuntimeError, match="capture failed"):  # asv's "failed"
        b.track_graph_ms(cache, "naive", "c")
    assert math.isnan(b.track_graph_ms(cache, "naive", "d"))  # asv's n/a


def test_selection_round_trips_through_the_environment():
    sel = selection.Selection("smoke", ("tiny/mixed50/batch2-kv16/block16",), ("naive", "qblock"), (),
                              repeats=7, samples=9, budget_ms=100.0, max_call_ms=50.0,
                              results="/tmp/x.jsonl")
    assert selection.Selection.from_env(sel.to_env()) == sel
    with pytest.raises(ConfigError, match="PERF_NIGHTLY_REPEATS"):
        selection.Selection.from_env({**sel.to_env(), "PERF_NIGHTLY_REPEATS": "zero"})


def test_scenarios_take_globs_over_the_suite_and_exact_names():
    got = selection.resolve_scenarios("paper", "llama3-8b/*/batch1-kv1024/*,"
                                               "llama3-8b/prefill/batch3-kv100/block16")
    expected = ("llama3-8b/prefill/batch1-kv1024/block16", "llama3-8b/mixed50/batch1-kv1024/block16",
                "llama3-8b/decode/batch1-kv1024/block16", "llama3-8b/prefill/batch3-kv100/block16")
    assert got == expected
    # the earlier names, as globs and exact names, select the same (under the current names)
    old = selection.resolve_scenarios("paper", "llama3-8b_bs16_b1_s1024_d*,llama3-8b_bs16_b3_s100_d0")
    assert old == expected
    with pytest.raises(ConfigError):
        selection.resolve_scenarios("paper", "no-such-model/decode/batch1-kv1/block16")


def test_machine_name_names_the_runner_and_the_gpu():
    name = selection.machine_name("GPU Runner #7", "NVIDIA H100 80GB HBM3")
    assert name == "gpu-runner-7_nvidia-h100-80gb-hbm3"


def test_samples_per_repeat_follow_the_budget():
    assert collect.samples_for(0.02, 250, 25) == 25  # fast: all samples
    assert collect.samples_for(20.0, 250, 25) == 12
    assert collect.samples_for(400.0, 250, 25) == selection.MIN_SAMPLES  # slow: the floor


# --- results files ----------------------------------------------------------------------------


def write_night(data: Path, runner: str, sha: str, day: int, series: dict, skips: dict | None = None,
                vendor: str = "nvidia") -> Path:
    """One night of `runner` in the store `data` (perf/nightly/store.py), of commit `sha` on day
    `day`: series maps (name, scenario, metric) -> repeat medians; the results file's path."""
    header = {"environment": {**ENV, "vendor": vendor, "time": f"2026-11-{day:02d}T03:00:00+00:00"},
              "nightly": {"commit": sha, "commit_date": f"2026-11-{day:02d}T01:00:00+00:00",
                          "machine": runner},
              "peers_absent": {"flashinfer_paged": "flashinfer is not installed"}}
    path = store.night_dir(str(data), runner, f"2026-11-{day:02d}")
    os.makedirs(path, exist_ok=True)
    path = Path(path) / store.RESULTS
    with results.ResultsWriter(str(path), header, resume=False) as w:
        for (name, scenario, metric), medians in series.items():
            for r, m in enumerate(medians):
                w.record(variant=name, scenario=scenario, metric=metric, repeat=r,
                         samples=Samples((m * 0.99, m, m * 1.01)), config=[], digest="d")
        for (name, scenario), reason in (skips or {}).items():
            w.skip(variant=name, scenario=scenario, reason=reason)
    return path


def write_commit(folder: Path, sha: str, day: int, series: dict, skips: dict | None = None,
                 vendor: str = "nvidia") -> Path:
    """`write_night` for tests that name a machine's place as `<results>/<machine>/perf-nightly`
    (asv's results folder, `_conf`'s): the night goes into the local store beside `<results>`
    (store.local), where `perf nightly run` without --data puts it."""
    data = Path(store.local(str(folder.parent.parent)))
    return write_night(data, folder.parent.name, sha, day, series, skips, vendor)


def test_summarize_gives_asv_the_median_of_repeat_medians_and_the_reasons(tmp_path):
    path = write_night(tmp_path, "m", "a" * 40, 1, {("naive", "s", "eager"): [1.0, 3.0, 2.0]},
                        skips={("naive", "t"): "variant 'naive' does not support softcap"})
    with results.ResultsWriter(str(path), {"environment": ENV}, resume=True) as w:
        w.skip(variant="qblock", scenario="s", reason="graph: RuntimeError: no capture", kind="error")
        w.skip(variant="peer:sdpa_cudnn", scenario="s", reason="RuntimeError: boom", kind="error")
    cases = asvrun.summarize(str(path))["cases"]
    assert cases[("naive", "s")] == {"eager": 2.0}
    assert cases[("naive", "t")] == {"skip": "variant 'naive' does not support softcap"}
    assert cases[("qblock", "s")] == {"errors": {"graph": "graph: RuntimeError: no capture"}}
    assert cases[("peer:sdpa_cudnn", "s")] == {"error": "RuntimeError: boom"}


def test_results_written_under_the_earlier_names_continue_the_history(tmp_path):
    # A commit measured before the scenarios were renamed, one after: one series, two commits.
    old, new = "llama3-8b_bs16_b16_s1024_d50_var", "llama3-8b/mixed50/batch16-kv1024-var/block16"
    first = write_night(tmp_path, "m", "a" * 40, 1, {("qblock", old, "graph"): [1.0] * 5},
                        skips={("naive", old + "_w8"): "variant 'naive' lacks sliding_window"})
    write_night(tmp_path, "m", "b" * 40, 2, {("qblock", new, "graph"): [1.1] * 5})
    res = results.load(str(first))
    assert {r["scenario"] for r in res.measurements()} == {new}
    assert [r["scenario"] for r in res.skips()] == [new + "/window8"]
    (h,) = history.load_data(str(tmp_path))
    assert h.scenarios() == [new]
    assert set(h.series[("qblock", new, "graph")]) == {"a" * 40, "b" * 40}
    assert h.value("qblock", new, "graph", "a" * 40) == 1.0


def test_results_header_scenarios_are_renamed_too(tmp_path):
    path = tmp_path / "r.jsonl"
    header = {"environment": ENV, "scenarios": {"tiny_bs16_b1_s16_d100": "digest", "not-a-scenario": "x"}}
    with results.ResultsWriter(str(path), header, resume=False):
        pass
    assert results.load(str(path)).header["scenarios"] == {"tiny/decode/batch1-kv16/block16": "digest",
                                                           "not-a-scenario": "x"}


# --- the change-point alert -------------------------------------------------------------------

SCENARIOS = ("llama3-8b/decode/batch1-kv1024/block16", "llama3-8b/prefill/batch8-kv1024/block16",
             "llama3-8b/mixed50/batch32-kv1024/block16")
VARIANTS = ("naive", "qblock", "static_grid")
PEERS = ("peer:sdpa_cudnn", "peer:sdpa_flash")


MACHINE = "runner-1_nvidia-h100"


def synthetic(tmp_path: Path, commits: int, cv: float, steps: dict | None = None, seed: int = 0,
              drift: float = 1.0) -> Path:
    """A machine's history in the store `<tmp_path>/data`, which it returns: 5 repeat medians per
    series and commit (one night each), relative noise `cv`; `steps` multiplies (name, scenario,
    metric) at the newest commit; `drift` multiplies every series (variants and libraries) there."""
    rng = np.random.default_rng(seed)
    data = tmp_path / "data"
    for i in range(commits):
        newest = i == commits - 1
        series = {}
        for k, name in enumerate(VARIANTS + PEERS):
            for j, scenario in enumerate(SCENARIOS):
                for metric in ("eager", "graph"):
                    level = 0.05 * (k + 1) * (j + 1)
                    factor = (steps or {}).get((name, scenario, metric), 1.0) * drift if newest else 1.0
                    noise = 1 + cv * rng.standard_normal(5)
                    series[(name, scenario, metric)] = list(level * factor * noise)
        skips = {("naive", "llama3-8b/prefill/batch8-kv1024/block16/window8"):
                 "variant 'naive' lacks sliding_window"}
        write_night(data, MACHINE, f"{i:040x}", i + 1, series, skips=skips)
    return data


def _detect(data: Path, **kw):
    (h,) = history.load_data(str(data))
    return h, *alert.detect(h, THRESHOLDS, alert.Settings(**kw))


def fails(findings):
    return {(f.variant, f.scenario, f.metric) for f in findings if f.verdict.value == "fail"}


def test_a_step_at_the_newest_commit_is_found_and_only_there(tmp_path):
    step = ("qblock", SCENARIOS[1], "graph")
    h, findings, _ = _detect(synthetic(tmp_path, 6, cv=0.01, steps={step: 1.3}))
    assert [c.sha for c in h.commits] == [f"{i:040x}" for i in range(6)]  # commit order
    assert fails(findings) == {step}
    (f,) = [f for f in findings if (f.variant, f.scenario, f.metric) == step]
    assert f.ratio == pytest.approx(1.3, rel=0.05) and f.p_value < 0.01 and "vs 5 earlier commits" in f.note
    assert not any(f.variant.startswith("peer:") for f in findings)  # libraries are never alerted


@pytest.mark.parametrize("seed", range(5))
def test_noise_alone_raises_no_alert(tmp_path, seed):
    _, findings, _ = _detect(synthetic(tmp_path, 8, cv=0.02, seed=seed))
    assert len(findings) == len(VARIANTS) * len(SCENARIOS) * 2
    assert fails(findings) == set()


def test_what_moved_the_libraries_on_a_scenario_too_is_no_regression(tmp_path):
    # Every series, libraries included, 25 % slower at the newest commit (the machine moved):
    # divided out per scenario; a 1.4 step on top of it still fails, at 1.4.
    step = ("static_grid", SCENARIOS[0], "eager")
    _, findings, notes = _detect(synthetic(tmp_path, 5, cv=0.01, drift=1.25, steps={step: 1.4}))
    assert fails(findings) == {step}
    (f,) = [f for f in findings if (f.variant, f.scenario, f.metric) == step]
    assert f.ratio == pytest.approx(1.4, rel=0.05) and "got x1.2" in f.note and "raw 1.7" in f.note
    assert any("the machine or the image moved" in n for n in notes)


def test_libraries_that_got_faster_change_nothing(tmp_path):
    # The control is one-sided: libraries 20 % faster must not turn a small slowdown into an alert.
    faster = {(p, s, m): 0.8 for p in PEERS for s in SCENARIOS for m in ("eager", "graph")}
    step = {("qblock", SCENARIOS[1], "graph"): 1.03}
    _, findings, notes = _detect(synthetic(tmp_path, 5, cv=0.002, steps={**faster, **step}))
    assert fails(findings) == set() and notes == []
    (f,) = [f for f in findings if (f.variant, f.scenario, f.metric) == ("qblock", SCENARIOS[1], "graph")]
    assert f.ratio == pytest.approx(1.03, rel=0.01) and "divided out" not in f.note


# Measured on an NVIDIA H200 (2026-11-21, torch 2.11, triton 3.6; the perf/asv demo of
# docs/nightly.md): graph-replay repeat medians in microseconds of the 16-sequence decode
# scenario llama3-8b/decode/batch16-kv1024/block16 at three commits measured back to back; the third
# launches qblock's kernel twice. Every other series rose 4-6 % at the third commit, the
# libraries too.
H200_B16_DECODE_GRAPH_US = {
    "qblock": [[93.95, 93.90, 93.95, 93.97, 94.05], [95.68, 94.40, 94.27, 95.73, 94.37],
               [180.56, 181.39, 180.90, 181.50, 180.69]],
    "flex_tile": [[40.06, 39.90, 39.98, 40.18, 40.06], [41.09, 42.37, 39.97, 41.31, 40.02],
                  [42.22, 43.01, 41.89, 42.05, 41.47]],
    "naive": [[216.86, 217.42, 217.07, 216.91, 216.91], [217.01, 219.10, 217.82, 220.00, 217.52],
              [218.32, 219.58, 218.58, 218.96, 219.66]],
    "static_grid": [[39.42, 38.88, 39.50, 38.85, 39.01], [40.10, 39.42, 40.18, 39.39, 39.33],
                    [41.78, 41.65, 41.26, 41.63, 40.83]],
    "parallel": [[43.28, 43.28, 43.41, 43.33, 43.25], [45.39, 43.60, 43.71, 44.70, 44.08],
                 [44.93, 45.90, 45.68, 45.44, 45.70]],
    "peer:sdpa_cudnn": [[30.02, 29.30, 29.60, 29.36, 29.41], [30.30, 30.69, 31.28, 31.95, 29.66],
                        [32.05, 32.78, 31.57, 31.73, 31.31]],
    "peer:sdpa_flash": [[34.22, 34.10, 34.18, 34.11, 34.35], [36.24, 34.82, 34.58, 36.58, 34.38],
                        [36.80, 36.75, 36.08, 36.51, 35.89]],
}


@pytest.mark.parametrize("with_libraries", [True, False])
def test_h200_history_alerts_the_slowed_variant_only_with_the_libraries_as_control(tmp_path, with_libraries):
    scenario = "llama3-8b/decode/batch16-kv1024/block16"
    names = [n for n in H200_B16_DECODE_GRAPH_US if with_libraries or not n.startswith("peer:")]
    for i in range(3):
        series = {(n, scenario, "graph"): [x / 1000 for x in H200_B16_DECODE_GRAPH_US[n][i]] for n in names}
        write_night(tmp_path / "data", "vm_nvidia-h200", f"{i:040x}", i + 1, series)
    _, findings, _ = _detect(tmp_path / "data")
    if with_libraries:
        assert fails(findings) == {("qblock", scenario, "graph")}
    else:  # without the control, the machine's 4-6 % move is taken for regressions
        assert ("qblock", scenario, "graph") in fails(findings) and len(fails(findings)) > 1


def test_thresholds_overrides_apply_to_the_alert(tmp_path):
    import copy

    from perf.thresholds import parse_thresholds

    raw = copy.deepcopy(THRESHOLDS.raw)  # thresholds.yaml with one override of the kind it documents
    raw["overrides"] = [{"variant": "naive", "metric": "eager", "scenario": "*/batch1-*",
                         "latency": {"warn": 1.05, "fail": 1.10}, "reason": "test"}]
    th = parse_thresholds(raw, "thresholds.yaml")
    b1 = SCENARIOS[0]
    steps = {("naive", b1, "eager"): 1.08, ("qblock", b1, "eager"): 1.08}
    res = synthetic(tmp_path, 6, cv=0.005, steps=steps)
    (h,) = history.load_data(str(res))
    findings, _ = alert.detect(h, th)
    assert fails(findings) == {("qblock", b1, "eager")}
    (f,) = [f for f in findings if (f.variant, f.scenario, f.metric) == ("naive", b1, "eager")]
    assert f.verdict.value == "warn" and f.threshold == "warn > 1.05, fail > 1.1"


def test_too_little_history_gives_no_verdict(tmp_path):
    step = {("qblock", SCENARIOS[0], "eager"): 2.0}
    _, findings, notes = _detect(synthetic(tmp_path, 2, cv=0.01, steps=step))
    assert findings == [] and "fewer than 2 earlier commits" in notes[0]


def _conf(tmp_path: Path, results_dir: Path) -> str:
    """asv.conf.json with its results folder `results_dir` (the local store beside it: store.local)."""
    conf = json.loads((ROOT / "asv.conf.json").read_text())
    conf.update(results_dir=str(results_dir), html_dir=str(tmp_path / "html"),
                benchmark_dir=str(ROOT / "perf" / "asv"))
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    return str(tmp_path / "asv.conf.json")


def test_alert_command_writes_the_files_and_exits_1_on_a_step(tmp_path, capsys):
    from perf.cli import main

    res = synthetic(tmp_path, 4, cv=0.01, steps={("naive", SCENARIOS[2], "graph"): 1.5})
    out = tmp_path / "out"
    rc = main(["alert", "--config", _conf(tmp_path, tmp_path / "asv"), "--data", str(res), "--out", str(out),
               "--thresholds", str(ROOT / "thresholds.yaml")])
    assert rc == 1
    doc = json.loads((out / "alert.json").read_text())
    assert doc["alert"] is True
    (m,) = doc["machines"]
    assert m["machine"] == "runner-1_nvidia-h100" and m["commit"] == f"{3:040x}"
    alerts = [(a["variant"], a["scenario"], a["metric"]) for a in m["alerts"]]
    assert alerts == [("naive", SCENARIOS[2], "graph")]
    md = (out / "alert.md").read_text()
    assert "**FAIL**" in md and SCENARIOS[2] in md
    assert "**FAIL**" in capsys.readouterr().out  # also printed (and the job summary when set)


def test_alert_command_exits_0_without_a_step_and_2_without_history(tmp_path, capsys):
    from perf.cli import main

    res = synthetic(tmp_path, 4, cv=0.01)
    args = ["--config", _conf(tmp_path, tmp_path / "asv"), "--data", str(res), "--out", str(tmp_path / "out"),
            "--thresholds", str(ROOT / "thresholds.yaml")]
    assert main(["alert", *args]) == 0
    assert json.loads((tmp_path / "out" / "alert.json").read_text())["alert"] is False
    empty = tmp_path / "empty"
    empty.mkdir()
    # without --data: the local store beside asv's results folder, empty here
    assert main(["alert", "--config", _conf(tmp_path, empty / "results"), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no nightly history" in err[0]


def test_nightly_run_without_a_gpu_is_refused_in_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from perf.cli import main

    assert main(["nightly", "run", "--config", str(ROOT / "asv.conf.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "no GPU" in err[0] or "asv is not installed" in err[0]


# --- vendor libraries on a scenario's batch ---------------------------------------------------


def test_dense_peers_run_uniform_or_two_group_batches_only():
    from perf import peers
    from perf.scenarios import Scenario

    groups = peers.dense_groups(Scenario.parse("llama3-8b/decode/batch8-kv1024/block16").spec())
    assert [(g.batch, g.query_len, g.kv_len) for g in groups] == [(8, 1, 1024)]
    groups = peers.dense_groups(Scenario.parse("llama3-8b/mixed50/batch8-kv1024/block16").spec())
    assert sorted((g.batch, g.query_len, g.kv_len) for g in groups) == [(4, 1, 1024), (4, 1024, 1024)]
    with pytest.raises(peers.PeerUnavailable, match="distinct"):
        peers.dense_groups(Scenario.parse("llama3-8b/mixed50/batch16-kv1024-var/block16").spec())
    with pytest.raises(peers.PeerUnavailable, match="softcap"):
        peers.dense_groups(Scenario.parse("llama3-8b/decode/batch8-kv1024/block16/softcap50").spec())


def test_absent_libraries_are_notes_not_errors():
    from perf import peers

    assert peers.peers_for("cpu") == []
    for vendor in ("nvidia", "amd"):
        present, absent = peers.peers_for(vendor), peers.absent_for(vendor)
        assert set(present) | set(absent) == set(peers.VENDOR_PEERS[vendor])
        assert all("not installed" in r for r in absent.values())
    with pytest.raises(peers.PeerUnavailable):
        peers.setup_for_batch("no_such_library", None, "cpu")


# --- asv's results, written from the store ----------------------------------------------------


def test_asv_results_are_written_from_the_store_as_asv_run_writes_them(tmp_path):
    data = tmp_path / "data"
    for i in range(3):  # asv names a commit's file by its first 8 hex digits: three distinct ones
        series = {(n, s, m): [0.1 * (k + 1)] * 5 for k, n in enumerate(VARIANTS + PEERS) for s in SCENARIOS
                  for m in ("eager", "graph")}
        write_night(data, MACHINE, f"{i + 1}" * 40, i + 1, series)
    conf = asvrun.read_config(_conf(tmp_path, tmp_path / "asv" / "results"))
    (h,) = history.load_data(str(data))
    assert asvrun.record(conf, [h]) == 3  # one results file per commit, no asv process
    root = Path(conf["_results_dir"])
    benchmarks = json.loads((root / "benchmarks.json").read_text())
    assert benchmarks.pop("version") == 2
    graph = benchmarks["benchmarks.PagedAttention.track_graph_ms"]
    assert set(benchmarks) == {f"benchmarks.{c}.{m}" for c in ("PagedAttention", "VendorLibrary")
                               for m in ("track_latency_ms", "track_graph_ms")}
    assert graph["params"] == [[repr(v) for v in VARIANTS], [repr(s) for s in SCENARIOS]]
    assert (graph["param_names"], graph["type"], graph["unit"], graph["version"]) == (
        ["variant", "scenario"], "track", "ms", "1")
    assert "def track_graph_ms" in graph["code"]  # what asv's site shows, read from perf/asv/benchmarks.py
    libraries = benchmarks["benchmarks.VendorLibrary.track_graph_ms"]
    assert libraries["params"][0] == ["'sdpa_cudnn'", "'sdpa_flash'"]
    assert libraries["param_names"] == ["library", "scenario"]
    assert json.loads((root / MACHINE / "machine.json").read_text())["machine"] == MACHINE
    files = sorted((root / MACHINE).glob("*-existing-py*.json"))
    assert [f.name[:8] for f in files] == ["11111111", "22222222", "33333333"]
    doc = json.loads(files[-1].read_text())
    assert doc["version"] == 2 and doc["commit_hash"] == "3" * 40 and doc["params"]["machine"] == MACHINE
    assert doc["result_columns"][:4] == ["result", "params", "version", "started_at"]
    values, params, version, _ = doc["results"]["benchmarks.PagedAttention.track_graph_ms"]
    assert params == graph["params"] and version == "1"
    # the product of the parameters, in order: each the median of the commit's repeat medians
    import itertools

    expected = [h.value(v, s, "graph") for v, s in itertools.product(VARIANTS, SCENARIOS)]
    assert values == pytest.approx(expected)
    assert doc["date"] == 1793667600000  # the commit's date in ms: 2026-11-03T01:00Z


def test_asv_results_leave_out_what_was_not_measured_and_what_bench_does_not_match(tmp_path):
    data = tmp_path / "data"
    write_night(data, "m", "a" * 40, 1, {("naive", SCENARIOS[0], "eager"): [1.0] * 5},
                skips={("qblock", SCENARIOS[0]): "variant 'qblock' lacks sliding_window"})
    conf = asvrun.read_config(_conf(tmp_path, tmp_path / "asv" / "results"))
    (h,) = history.load_data(str(data))
    assert asvrun.record(conf, [h], bench=["track_latency_ms"]) == 1
    (path,) = (Path(conf["_results_dir"]) / "m").glob("aaaaaaaa-*.json")
    results_ = json.loads(path.read_text())["results"]
    assert results_["benchmarks.PagedAttention.track_latency_ms"][0] == [1.0, None]  # qblock: skipped
    assert results_["benchmarks.PagedAttention.track_graph_ms"][0] is None  # --bench left it out
    assert "benchmarks.VendorLibrary.track_graph_ms" not in results_  # no library in the store


def test_publish_runs_asv_once_over_results_written_from_the_store(tmp_path, monkeypatch):
    from perf.cli import main

    data = synthetic(tmp_path, 3, cv=0.0)
    calls = []
    monkeypatch.setattr(asvrun, "require_asv", lambda: None)
    monkeypatch.setattr(asvrun, "asv", lambda conf, *args, **kw: calls.append(args) or 0)
    conf = _conf(tmp_path, tmp_path / "asv" / "results")
    out = ["--config", conf, "--data", str(data), "--out", str(tmp_path / "out")]
    assert main(["nightly", "publish", *out]) == 0
    assert calls == [("publish",)]  # asv's one process of a night: no `asv machine`, no `asv run`
    assert (tmp_path / "asv" / "results" / "benchmarks.json").is_file()
    assert list((tmp_path / "asv" / "results" / MACHINE).glob("*-existing-py*.json"))
