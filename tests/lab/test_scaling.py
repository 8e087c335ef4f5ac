"""The nightly's scaling lab (perf/lab/scaling.py) without a GPU: its subset, its case
comparison, its resume, and a run over one and two interpreter workers (stand-in GPUs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from interpreter_support import needs_interpreter

from perf.errors import ConfigError
from perf.lab import scaling
from perf.nightly import selection, shard
from perf.scenarios import suite

NIGHTLY = tuple(s.name for s in suite("nightly"))


def _nightly() -> selection.Selection:
    import kernels

    return selection.Selection("nightly", NIGHTLY, tuple(kernels.VARIANTS), ("sdpa_cudnn", "sdpa_flash"))


@pytest.mark.parametrize("minutes", [5.0, 10.0, 12.0, 20.0])
def test_the_subset_reaches_its_minutes_in_suite_order_with_no_long_scenario(minutes):
    sel = _nightly()
    chosen = scaling.subset(sel, minutes)
    costs = [shard.cost(n, sel) for n in chosen]
    assert sum(costs) >= minutes * 60 and sum(costs) - costs[-1] < minutes * 60  # stops once there
    assert max(costs) <= minutes * 60 / scaling.SHARE_OF_ONE
    assert list(chosen) == [n for n in NIGHTLY if n in chosen]  # suite order
    assert scaling.subset(sel, minutes) == chosen  # the same subset on every machine
    loads = [sum(shard.cost(n, sel) for n in s) for s in shard.assign(chosen, 4, sel)]
    assert max(loads) <= 1.1 * min(loads), loads  # four even shares


def test_a_subset_the_suite_cannot_fill_is_refused():
    with pytest.raises(ConfigError, match="add up to .* estimated minutes; ask for fewer minutes"):
        scaling.subset(_nightly(), 10_000)


def test_the_comparison_names_what_a_run_lost_or_gained():
    first = ({("qblock", "s1", "eager", 0), ("qblock", "s2", "eager", 0)}, {("skip", "naive", "s1")})
    assert scaling.compare(first, first)["same_cases"]
    lost = scaling.compare(first, ({("qblock", "s1", "eager", 0)}, set()))
    assert not lost["same_cases"] and lost["missing_count"] == 2 and lost["extra_count"] == 0
    gained = scaling.compare(first, (first[0] | {("qblock", "s3", "eager", 0)}, first[1]))
    assert not gained["same_cases"] and gained["extra"] == [["qblock", "s3", "eager", 0]]


@pytest.mark.parametrize("text", ["", "0,2", "1,1", "two", "1,-2"])
def test_bad_gpu_counts_are_refused(text):
    with pytest.raises(ConfigError, match="expected distinct GPU counts"):
        scaling.run(argparse.Namespace(gpus=text))  # refused before anything else is read


def test_a_damaged_table_is_refused_and_another_selections_is_not_kept(tmp_path):
    path = tmp_path / "scaling.json"
    path.write_text(json.dumps({"key": "k", "runs": [{"gpus": "1", "wall_s": 3, "results": "x"}]}))
    with pytest.raises(ConfigError, match="`runs` is not a list"):
        scaling.load_previous(str(path), "k")
    path.write_text(json.dumps({"key": "other", "runs": [{"gpus": 1, "wall_s": 3, "results": str(path)}]}))
    assert scaling.load_previous(str(path), "k") == []


def test_goals_are_judged_on_gpus_only():
    runs = [{"gpus": 1, "wall_s": 100.0}, {"gpus": 2, "wall_s": 60.0}, {"gpus": 4, "wall_s": 28.0}]
    judged = scaling.rows(runs, judged=True)
    assert [r["goal_met"] for r in judged] == [None, False, True]  # 1.67x < 1.8x; 3.57x >= 3.3x
    assert [round(r["speedup"], 2) for r in judged] == [1.0, 1.67, 3.57]
    assert all(r["goal_met"] is None for r in scaling.rows(runs, judged=False))


ARGS = ["--allow-cpu", "--gpus", "1,2", "--suite", "smoke", "--scenarios", "*", "--variants", "qblock",
        "--peers", "none", "--repeats", "1", "--samples", "3"]


@needs_interpreter
def test_one_and_two_interpreter_workers_hold_the_same_cases_and_a_rerun_keeps_them(tmp_path, capsys):
    out = tmp_path / "sc"
    assert scaling.main([*ARGS, "--out", str(out)]) == 0
    doc = json.loads((out / "scaling.json").read_text())
    assert [r["gpus"] for r in doc["runs"]] == [1, 2] and doc["passed"]
    assert all(r["same_cases"] and r["measured"] == len(doc["selection"]["scenarios"]) for r in doc["runs"])
    assert "| 2 |" in (out / "scaling.md").read_text()
    capsys.readouterr()

    # a rerun measures nothing again; a run whose merged file lost a case then fails
    two = Path(doc["runs"][1]["results"])
    lines = two.read_text().splitlines(keepends=True)
    dropped = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "record")
    two.write_text("".join(lines[:dropped] + lines[dropped + 1:]))
    assert scaling.main([*ARGS, "--out", str(out)]) == 1
    said = capsys.readouterr().out
    assert "(1, 2 kept from the last run)" in said and "GPU(s)..." not in said
    assert "no: 1 missing, 0 extra" in said and "FAILED" in said
