"""The gate self-test's parts that need no GPU: the planted slowdown and the promise check."""

from __future__ import annotations

import argparse
import os

import pytest
from throwaway_repo import harness_repo

from perf.checkout import ROOT
from perf.latency import plant, selftest

pytestmark = pytest.mark.slow  # starts processes


def test_plant_wraps_the_whole_kernel_body():
    with open(os.path.join(ROOT, plant.TARGET), encoding="utf-8") as f:
        source = f.read()
    out = plant.plant_source(source, 5)
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"def {plant.KERNEL}("))
    body = next(i for i in range(start, len(lines)) if lines[i].startswith("):")) + 1
    assert lines[body].strip().startswith('"""')  # the docstring stays first
    body = next(i for i in range(body + 1, len(lines)) if '"""' in lines[i]) + 1
    assert lines[body].strip() == "_selftest_t0 = _selftest_clock()"
    end = next(i for i in range(body, len(lines)) if lines[i] and not lines[i][0].isspace())
    last = [x for x in lines[body:end] if x.strip()][-1]
    assert last.strip() == "_selftest_delay(_selftest_t0)" and last.startswith("    ")
    assert "%clock64" in out and '"mov.u32 $0, 5;"' in out
    compile(out, plant.TARGET, "exec")  # valid Python
    assert "s_memtime" in plant.plant_source(source, 5, "amd")


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_plants_of_any_size_differ_by_one_immediate(vendor):
    """The self-test's base is the 0 % plant: head and base must differ by the spin's size
    alone (the compiled kernels then differ by that immediate; checked for sm_90 and gfx942)."""
    with open(os.path.join(ROOT, plant.TARGET), encoding="utf-8") as f:
        source = f.read()
    zero, two = (plant.plant_source(source, p, vendor).splitlines() for p in (0, 2))
    changed = [(a, b) for a, b in zip(zero, two) if a != b]
    assert len(zero) == len(two) and len(changed) == 1
    assert changed[0][0].replace(" 0", " 2", 1) == changed[0][1]


def test_plant_refuses_what_it_cannot_do():
    with pytest.raises(plant.PlantError, match=f"no `def {plant.KERNEL}"):
        plant.plant_source("def other():\n    pass\n", 2)
    with pytest.raises(plant.PlantError, match="returns early"):
        plant.plant_source(f"def {plant.KERNEL}(\n    x,\n):\n    if x:\n        return\n    y = 1\n", 2)
    with pytest.raises(plant.PlantError, match="percent"):
        plant.plant_source("", -1)


def _run(kind, verdicts, percent=None, seconds=300.0, rc=0, base=0.2, metric="graph", ratio=None):
    ratio = ratio or 1 + (percent or 0) / 100
    findings = [{"variant": "static_grid", "scenario": f"s{i}", "metric": metric, "base": base,
                 "ratio": ratio, "verdict": v} for i, v in enumerate(verdicts)]
    return {"name": f"{kind}{percent}", "kind": kind, "percent": percent, "rc": rc, "seconds": seconds,
            "findings": findings}


ARGS = argparse.Namespace(aa_runs=20, plants="2,5,10", plant_runs=20)


def test_summary_keeps_and_breaks_promises(tmp_path):
    good = [_run("aa", ["ok"] * 50), _run("aa", ["ok"] * 49 + ["warn"]),
            _run("plant", ["fail"] * 50, 2), _run("plant", ["fail"] * 50, 10)]
    summary, ok = selftest.summarize(good, str(tmp_path), ARGS)
    assert ok and summary["aa"]["fail"] == 0 and summary["aa"]["warn"] == 1
    assert summary["plants"][2]["kept"] and summary["plants"][2]["in_scope"] == 50
    md = selftest.markdown(summary, {"gpu": "G", "driver": "d", "date": "x", "commit": "c"})
    assert "| A/A false fails | 0 FAIL | 2 runs (100 case verdicts; asked for 20)" in md
    assert md.startswith("Gate self-test on G (driver d), x, commit c;")
    # a copied runs file without raw results names no GPU rather than printing None
    md = selftest.markdown(summary, {"gpu": None, "driver": None, "date": "x", "commit": None,
                                     "suite": "pr", "variants": "static_grid"})
    assert "None" not in md.splitlines()[0] and "from the runs file alone" in md.splitlines()[0]
    # one false fail, too many warnings, a missed 2 % on a long graph case, a slow gate
    for bad in ([_run("aa", ["fail"] + ["ok"] * 49)], [_run("aa", ["warn"] * 2 + ["ok"] * 48)],
                [_run("plant", ["ok"] + ["fail"] * 49, 2)], [_run("aa", ["ok"], seconds=700)]):
        assert not selftest.summarize(bad, str(tmp_path), ARGS)[1]
    assert not selftest.summarize([_run("plant", ["ok"] + ["fail"] * 49, 10)], str(tmp_path), ARGS)[1]
    # a missed 2 % on a short case or on the eager metric, or a missed 10 % plant where the
    # metric slowed by much less (host time in it), is not a broken promise
    # (a change that did not slow a case by about its size cannot test the promise there)
    short = [_run("plant", ["ok"] * 5, 2, base=0.01), _run("plant", ["ok"] * 5, 2, metric="eager"),
             _run("plant", ["ok"] * 5, 10, ratio=1.05), _run("plant", ["improved"] * 5, 2, ratio=0.983)]
    summary, ok = selftest.summarize(short, str(tmp_path), ARGS)
    assert ok and summary["plants"][10]["in_scope"] == 0 and summary["plants"][2]["in_scope"] == 0


def test_planted_worktrees_share_the_repository_the_gate_reads_the_base_from(tmp_path):
    """The plant runs gate the p % worktree against the 0 % plant's commit, made in another
    worktree: both commits must be reachable from either (one object store)."""
    repo = tmp_path / "repo"
    harness_repo(repo)
    parent = tmp_path / "plants"
    parent.mkdir()
    zero, two = (selftest._planted_repo(str(repo), p, "nvidia", str(parent)) for p in (0, 2))
    base = selftest.git(zero, "rev-parse", "HEAD", check=True)
    assert selftest.git(two, "cat-file", "-t", base, check=True) == "commit"
    diff = selftest.git(two, "diff", base, "HEAD", "--unified=0", check=True)
    assert [x for x in diff.splitlines() if x[:1] in "+-" and not x.startswith(("+++", "---"))] == [
        '-    return tl.inline_asm_elementwise("mov.u32 $0, 0;", "=r", [], dtype=tl.int32,',
        '+    return tl.inline_asm_elementwise("mov.u32 $0, 2;", "=r", [], dtype=tl.int32,']


def test_runs_against_the_zero_plant_are_judged_apart_from_earlier_ones(tmp_path):
    """Once runs against a 0 % plant exist, the promise is judged on them alone; the earlier
    runs (against the unplanted commit) are counted, not judged."""
    earlier = _run("plant", ["ok"] * 50, 2)  # missed everything: would break the promise
    current = {**_run("plant", ["fail"] * 50, 2), "baseline": selftest.ZERO_PLANT}
    summary, ok = selftest.summarize([earlier, current], str(tmp_path), ARGS)
    p = summary["plants"][2]
    assert ok and p["runs"] == 1 and p["earlier_runs"] == 1 and p["baseline"] == selftest.ZERO_PLANT
    md = selftest.markdown(summary, {"gpu": "G", "driver": "d", "date": "x", "commit": "c"})
    assert "planted +2 % (against a 0 % plant)" in md and "1 earlier runs against HEAD not counted" in md
    assert not selftest.summarize([earlier], str(tmp_path), ARGS)[1]


def test_small_plants_gate_the_graph_metric_their_promise_is_about():
    args = argparse.Namespace(suite="pr", variants="static_grid", scenarios=None)
    aa = selftest.gate_request("/repo", "/out", "abc", 0, args)
    assert aa.metrics == "eager,graph" and aa.variants == "static_grid" and aa.base_ref == "abc"
    assert aa.thresholds == "/repo/thresholds.yaml" and aa.out == "/out" and aa.allow_dirty
    assert selftest.gate_request("/repo", "/out", "abc", 0, args, selftest.LARGEST).metrics == "eager,graph"
    small = selftest.gate_request("/repo", "/out", "abc", 3, args, selftest.SMALLEST)
    assert small.metrics == "graph" and small.seed == 3
    # every case timed: an A/A's change plan would time nothing (every launch is identical)
    assert aa.all_cases and small.all_cases


def test_runs_are_interleaved_so_a_cut_short_self_test_holds_some_of_each():
    args = argparse.Namespace(aa_runs=2, plant_runs=1)
    assert selftest.schedule(args, [2, 10]) == [("aa", None, 0), ("plant", 2, 0), ("plant", 10, 0),
                                                 ("aa", None, 1)]


def test_only_a_rewritten_calibration_counts_as_clean(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "calibration").mkdir()
    for name in ("calibration/nvidia.yaml", "kernels.py"):
        (tmp_path / name).write_text("a\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    (tmp_path / "calibration" / "nvidia.yaml").write_text("b\n")  # status line " M calibration/..."
    assert selftest.changed_outside_calibration(str(tmp_path)) == []
    (tmp_path / "kernels.py").write_text("b\n")
    assert selftest.changed_outside_calibration(str(tmp_path)) == ["kernels.py"]


def test_a_gate_is_expected_to_take_as_long_as_earlier_ones_of_its_kind_and_size():
    runs = [{"kind": "aa", "percent": None, "seconds": 120}, {"kind": "aa", "percent": None, "seconds": 100},
            {"kind": "plant", "percent": 10, "seconds": 240}, {"kind": "plant", "percent": 2, "seconds": 130}]
    assert selftest.typical_minutes(runs, "plant", 10) == 4.0
    assert selftest.typical_minutes(runs, "aa", None) == pytest.approx(110 / 60)
    assert selftest.typical_minutes(runs, "plant", 5) == pytest.approx(125 / 60)  # none yet: every gate's
    assert selftest.typical_minutes([], "plant", 5) == 0.0


def test_a_new_out_folder_is_made_before_the_first_gate_writes_its_log(tmp_path, monkeypatch):
    """The self-test's first gate run logs into --out before runs.json exists there: a fresh
    folder must be made first (on an H100 a missing one ended the self-test with exit 3)."""
    repo = harness_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(selftest.vendor_mod, "on_gpu", lambda: True)
    monkeypatch.setattr(selftest.vendor_mod, "resolve", lambda given: "nvidia")
    logged = []

    def gate(where, out, base, seed, args, percent, batches):
        with open(out + ".log", "w", encoding="utf-8") as f:  # what the real run does first
            f.write("ok\n")
        logged.append(out)
        return {"rc": 0, "seconds": 1.0}

    monkeypatch.setattr(selftest, "_gate", gate)
    monkeypatch.setattr(selftest, "summarize", lambda runs, out_dir, args: ({}, True))
    monkeypatch.setattr(selftest, "markdown", lambda summary, env: "")
    out = tmp_path / "new" / "selftest"
    args = selftest._parser().parse_args(["--aa-runs", "1", "--plant-runs", "0", "--out", str(out)])
    selftest._main(args)
    assert logged == [str(out / "aa-0")] and (out / "aa-0.log").exists()
