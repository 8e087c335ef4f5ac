"""The gate self-test's parts that need no GPU: the planted slowdown and the promise check."""

from __future__ import annotations

import argparse
import os

import pytest

from perf.checkout import ROOT
from perf.latency import plant, selftest


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
    assert last.strip() == "_selftest_delay(_selftest_t0, 5)" and last.startswith("    ")
    assert "%clock64" in out and "def _selftest_delay(t0, PERCENT: tl.constexpr):" in out
    compile(out, plant.TARGET, "exec")  # valid Python
    assert "s_memtime" in plant.plant_source(source, 5, "amd")


def test_plant_refuses_what_it_cannot_do():
    with pytest.raises(plant.PlantError, match=f"no `def {plant.KERNEL}"):
        plant.plant_source("def other():\n    pass\n", 2)
    with pytest.raises(plant.PlantError, match="returns early"):
        plant.plant_source(f"def {plant.KERNEL}(\n    x,\n):\n    if x:\n        return\n    y = 1\n", 2)
    with pytest.raises(plant.PlantError, match="percent"):
        plant.plant_source("", 0)


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


def test_small_plants_gate_the_graph_metric_their_promise_is_about():
    args = argparse.Namespace(suite="pr", variants="static_grid", scenarios=None)
    aa = selftest.gate_command("/repo", "/out", "abc", 0, args)
    assert "--metrics" not in aa and aa[aa.index("--variants") + 1] == "static_grid"
    assert "--metrics" not in selftest.gate_command("/repo", "/out", "abc", 0, args, selftest.LARGEST)
    small = selftest.gate_command("/repo", "/out", "abc", 3, args, selftest.SMALLEST)
    assert small[small.index("--metrics") + 1] == "graph" and small[small.index("--seed") + 1] == "3"


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
