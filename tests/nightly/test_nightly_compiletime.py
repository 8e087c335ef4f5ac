"""The nightly's compile times: appended to a night's results by the production writer, read by
the history as `compile_time/<target>` series, and a doubling at one night is an alert."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perf.nightly import alert, attribute, compiletime, history, store
from perf.nightly.selection import slug
from perf.results import compile_time_metric
from tests.nightly.test_nightly import THRESHOLDS
from tests.nightly.test_nightly_store import results_file

RUNNER = "h100-a_nvidia-h100"
TARGETS = ("sm_90", "gfx942")


def side_doc(seconds: float) -> dict:
    """A static-gate side document (perf.static.gate.run_side) of two variants on two targets,
    each with two specializations of `seconds` / 2 CPU s each."""
    entries = [{"variant": v, "scenario": f"s{i}", "target": t, "kernel": "attn", "key": f"{v}-{t}-{i}",
                "status": "ok", "vendor": "nvidia" if t.startswith("sm") else "amd", "cached": False,
                "metrics": {"compile_cpu_s": seconds / 2}}
               for v in ("qblock", "static_grid") for t in TARGETS for i in range(2)]
    return {"entries": entries}


def nights(tmp_path: Path, seconds: list[float]) -> str:
    data = tmp_path / "data"
    (data / store.NIGHTS).mkdir(parents=True)
    for i, s in enumerate(seconds):
        day = f"2026-11-{i + 1:02d}"
        src = results_file(tmp_path / "src" / f"{i}.jsonl", RUNNER, f"{i:040x}", day=day)
        assert compiletime.append(src, side_doc(s)) == 4
        assert compiletime.append(src, side_doc(s)) == 0  # a rerun adds no second repeat
        store.write_night(str(data), RUNNER, day, src, None, None)
    return str(data)


def test_compile_times_are_series_and_a_doubling_is_flagged(tmp_path):
    seconds = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 20.0]  # the newest night compiles twice as long
    (h,) = history.load_data(nights(tmp_path, seconds))
    keys = {(v, "*", compile_time_metric(t)) for v in ("qblock", "static_grid") for t in TARGETS}
    assert keys <= set(h.series)
    assert h.value("qblock", "*", compile_time_metric("sm_90")) == 20.0
    findings, _ = alert.detect(h, THRESHOLDS)
    flagged = {(f.variant, f.scenario, f.metric) for f in findings if f.verdict.value == "fail"}
    assert keys <= flagged
    assert "graph" not in {m for _, _, m in flagged}  # the latency did not move
    for key in keys:  # the attribution's state keys a series by text: scenario "*" survives it
        assert attribute.key_of(attribute.key_text(key)) == key


def test_steady_compile_times_are_not_flagged(tmp_path):
    (h,) = history.load_data(nights(tmp_path, [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.02]))
    findings, _ = alert.detect(h, THRESHOLDS)
    assert not [f for f in findings if f.verdict.value == "fail"]


def test_the_dashboard_lists_them_and_the_re_measure_leaves_them_to_the_static_gate(tmp_path):
    from perf.nightly import confirm, site

    (h,) = history.load_data(nights(tmp_path, [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 20.0]))
    findings, notes = alert.detect(h, THRESHOLDS)
    result = alert.machine_result(h, findings, notes, alert.Settings())
    out = tmp_path / "html" / "nightly"
    site.build([h], str(out), {RUNNER: result})
    page = (out / slug(RUNNER) / "index.html").read_text()
    assert compile_time_metric("sm_90") in page and "FAIL" in page
    runs, skipped = confirm.plan(h, result, THRESHOLDS, alert.Settings(), str(tmp_path / "out"), "nightly",
                                 "thresholds.yaml")
    assert not runs  # no latency gate run for a compile time
    key = ("qblock", "*", compile_time_metric("sm_90"))
    assert "python -m perf compile --base-ref" in skipped[key]["note"]


def test_a_sharded_night_gets_the_compile_times_runner_1_left_beside_its_part(tmp_path, monkeypatch):
    """The merge job has no torch: it appends the file runner 1 of M compiled into its parts
    folder (found among the downloaded parts by the commit), and compiles nothing itself."""
    import argparse

    from perf import files
    from perf import nightly as nightly_cli
    from perf.static import gate

    sha = "c" * 40
    parts = tmp_path / "parts" / "nightly-nvidia-part-1"
    parts.mkdir(parents=True)
    side = compiletime.side_path(str(parts), "2-runners_nvidia-h100", sha)
    assert side.endswith(f"-{sha[:8]}-compile-time.json")
    files.write_json(side, {"schema": gate.SIDE_SCHEMA, **side_doc(12.0)})
    assert compiletime.find_side(str(tmp_path / "parts"), sha) == side
    assert compiletime.find_side(str(tmp_path / "parts"), "d" * 40) is None  # another commit's: not it
    def compiled(*a):
        raise AssertionError("the merge job compiled")

    monkeypatch.setattr(compiletime, "compile_side", compiled)
    out = results_file(tmp_path / "merged" / f"{sha}.jsonl", RUNNER, sha, day="2026-11-26")
    args = argparse.Namespace(out=str(tmp_path / "artifact"), data=str(tmp_path / "data"), bench=None,
                              no_compile_time=False, no_asv=True, merge_shards=str(tmp_path / "parts"),
                              thresholds="thresholds.yaml")
    assert nightly_cli._record(args, {"_root": str(tmp_path)}, RUNNER, sha, out) == 0
    from perf import results

    metrics = {r["metric"] for r in results.load(out, warn=False).measurements()}
    assert {compile_time_metric(t) for t in TARGETS} <= metrics


@pytest.mark.parametrize("shard, compiles", [("1/2", True), ("2/2", False)])
def test_runner_1_of_a_sharded_nightly_compiles_beside_its_part(tmp_path, monkeypatch, shard, compiles):
    from perf.cli import main
    from perf.nightly import shard as shard_mod
    from tests.nightly.test_nightly import ROOT

    calls = []
    monkeypatch.setattr(shard_mod, "measure", lambda *a, **k: None)
    monkeypatch.setattr(compiletime, "compile_side", lambda side, root, th: calls.append(side) or True)
    out = tmp_path / "out"
    argv = ["nightly", "run", "--shard", shard, "--allow-cpu", "--allow-dirty", "--suite", "smoke", "--peers",
            "none", "--config", str(ROOT / "asv.conf.json"), "--out", str(out)]
    assert main(argv) == 0
    assert len(calls) == int(compiles)
    if compiles:
        (side,) = calls
        assert os.path.dirname(side) == str(out / "shards") and side.endswith(compiletime.SIDE_SUFFIX)
    assert main([*argv, "--no-compile-time"]) == 0 and len(calls) == int(compiles)
