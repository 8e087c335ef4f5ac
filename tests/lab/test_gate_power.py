"""The gate-power driver (perf/lab/gate_power.py) on a CPU: its order, budget, resume, counts and
tables, with the seeded noise model (`FakeRunner`) in place of every measuring process and the
model's clock in place of time (the GPU run itself is the lead's command in docs/latency.md)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from scipy import stats as scipy_stats

from perf import stats
from perf.lab import gate_power as gp
from perf.latency import selftest

pytestmark = pytest.mark.slow  # makes a repository and runs git

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def source(tmp_path):
    from throwaway_repo import harness_repo

    return str(harness_repo(tmp_path / "source"))


def _run(tmp_path, source, budget=gp.BUDGET_S, runner=None, work="work", out="out"):
    runner = runner or gp.FakeRunner(1)
    doc = gp.power(str(tmp_path / out), str(tmp_path / work), budget, runner, runner.clock, fake=1,
                   source=source)
    return doc, runner


def _runs(tmp_path, work="work") -> list[dict]:
    return selftest.load_runs(str(tmp_path / work / "selftest" / "runs.json"))


@pytest.mark.parametrize("k,n", [(0, 20), (20, 20), (3, 24), (1, 1), (0, 1), (7, 50)])
def test_rate_interval_is_the_exact_binomial_one(k, n):
    low, high = stats.rate_interval(k, n)
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert low <= k / n <= high


def test_rate_interval_of_nothing_is_everything_and_refuses_nonsense():
    assert stats.rate_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        stats.rate_interval(3, 2)


def test_the_order_puts_aa_gates_first_and_every_plant_in_each_cycle():
    seq = gp.order((10, 2), max_aa=5, max_plant_runs=2, per_cycle=2)
    assert seq == [("aa", None, 0), ("aa", None, 1), ("plant", 10, 0), ("plant", 2, 0),
                   ("aa", None, 2), ("aa", None, 3), ("plant", 10, 1), ("plant", 2, 1), ("aa", None, 4)]
    names = [gp.run_name(*g) for g in gp.order()]
    assert len(names) == len(set(names)) == gp.MAX_AA + gp.MAX_PLANT_RUNS * len(gp.PLANTS)


@pytest.mark.parametrize("kind,pct,i", [("aa", None, 0), ("aa", None, 4), ("plant", 2, 0), ("plant", 10, 3)])
def test_one_gate_of_the_selftest_is_the_one_named(kind, pct, i):
    """The self-test run with the driver's command line asks for exactly the gates up to this one of
    its kind and size, the last of them named as the driver names it (it resumes the rest)."""
    args = selftest._parser().parse_args(gp.selftest_argv(kind, pct, i, "OUT")[2:])
    plants = [int(x) for x in args.plants.split(",") if x.strip()]
    asked = [(k, p, j) for k, p, j in selftest.schedule(args, plants)]
    assert asked == [(kind, pct, j) for j in range(i + 1)]
    assert args.scenarios.split(",") == list(gp.SCENARIOS) and args.variants == gp.VARIANT
    assert gp.run_name(kind, pct, i) == (f"aa-{i}" if kind == "aa" else f"plant{pct}-vs0-{i}")


def test_a_gate_is_expected_to_take_what_its_kind_took_before():
    runs = [{"kind": "aa", "percent": None, "seconds": s} for s in (40, 60, 44)]
    assert gp.expected_s(runs, "aa", None) == 44
    assert gp.expected_s(runs, "plant", 10) == gp.PRIOR_S["largest"]
    assert gp.expected_s(runs, "plant", 2) == gp.PRIOR_S["plant"]


def _finding(scenario, metric, verdict, ratio=1.0):
    return {"scenario": scenario, "metric": metric, "verdict": verdict, "ratio": ratio,
            "threshold": "warn > 1.005, fail > 1.01 (calibrated (nvidia.latency.k x noise 0.10 %))"}


def test_counts_per_case_verdict_and_per_gate():
    aa = [{"kind": "aa", "rc": 0,
           "findings": [_finding("a", "graph", "fail"), _finding("b", "graph", "warn")]},
          {"kind": "aa", "rc": 0, "findings": [_finding("a", "graph", "ok"), _finding("b", "graph", "ok"),
                                               {**_finding("c", "graph", "warn"), "ratio": None}]}]
    plant = [{"kind": "plant", "percent": 2, "rc": 1,
              "findings": [_finding("a", "graph", "fail", 1.02), _finding("b", "graph", "ok", 1.01)]},
             {"kind": "plant", "percent": 2, "rc": 1,
              "findings": [_finding("a", "graph", "fail", 1.02), _finding("b", "graph", "fail", 1.02)]}]
    c = gp.counts(aa + plant)
    # a case verdict without a ratio is not judged
    assert (c["aa"]["fail_per_case"]["count"], c["aa"]["fail_per_case"]["of"]) == (1, 4)
    assert (c["aa"]["fail_per_gate"]["count"], c["aa"]["fail_per_gate"]["of"]) == (1, 2)
    assert c["aa"]["warn_per_case"]["count"] == 1
    p = c["plants"]["2"]
    assert (p["detected_per_case_run"]["count"], p["detected_per_case_run"]["of"]) == (3, 4)
    assert (p["gates_failing_every_case"]["count"], p["gates_failing_every_case"]["of"]) == (1, 2)
    assert p["cases"]["b graph"] == {"runs": 2, "fail": 1, "effect": pytest.approx((1.01 * 1.02) ** 0.5)}
    assert c["aa"]["fail_per_case"]["ci95"] == list(stats.rate_interval(1, 4))
    assert c["calibrated_verdicts"] == {"count": 8, "of": 8}


def test_the_whole_run_fits_its_budget_and_writes_what_a_device_call_brings_back(tmp_path, source):
    doc, runner = _run(tmp_path, source)
    out = tmp_path / "out"
    (cal,) = [f for f in os.listdir(out) if f.startswith("nvidia") and f.endswith(".yaml")]  # its GPU model's
    assert sorted(set(os.listdir(out)) - {cal}) == ["gate_power.json", "gate_power.md", "plan.json",
                                       "runs.json"]
    assert runner.calls[:2] == ["plan", "calibrate"]
    assert doc["wall_s"] <= gp.BUDGET_S and doc["passed"]
    assert doc["plan"]["measure"] == 0 and doc["counts"]["calibrated_verdicts"]["count"] > 0
    runs = _runs(tmp_path)
    assert {r["kind"] for r in runs} == {"aa", "plant"} and {r["percent"] for r in runs} >= set(gp.PLANTS)
    assert json.loads((out / "gate_power.json").read_text())["counts"] == doc["counts"]
    md = (out / "gate_power.md").read_text()
    assert "FAKE" in md and "**0 of 4 cases to time**" in md and "A/A false fails per case verdict" in md
    assert gp.FAKE_GPU in (out / cal).read_text()


def test_false_fails_are_counted_and_fail_the_run(tmp_path, source):
    """A model whose head is 2 % slower in A/A too: the gate fails A/A cases, and the counts are those
    of the runs' own findings."""
    doc, _ = _run(tmp_path, source, runner=gp.FakeRunner(2, offset=0.02))
    runs = _runs(tmp_path)
    fails = [f for r in runs if r["kind"] == "aa" for f in r["findings"] if f["verdict"] == "fail"]
    assert fails and doc["counts"]["aa"]["fail_per_case"]["count"] == len(fails)
    assert doc["counts"]["aa"]["fail_per_gate"]["count"] == sum(
        any(f["verdict"] == "fail" for f in r["findings"]) for r in runs if r["kind"] == "aa")
    assert not doc["promises_kept"] and not doc["passed"]


def test_a_smaller_budget_runs_fewer_gates_and_the_same_work_resumes(tmp_path, source):
    doc, runner = _run(tmp_path, source, budget=300)
    first = _runs(tmp_path)
    assert 1 <= len(first) and doc["wall_s"] <= 300
    assert all(p.get("note", "").startswith("timed out") is False for p in doc["phases"])
    again = gp.FakeRunner(3)
    doc2 = gp.power(str(tmp_path / "out2"), str(tmp_path / "work"), 300, again, again.clock, fake=3,
                    source=source)
    assert "plan" not in again.calls and "calibrate" not in again.calls  # kept in --work
    second = _runs(tmp_path)
    assert second[:len(first)] == first and len(second) > len(first)
    assert doc2["plan"]["measure"] == 0


def test_a_hung_gate_is_stopped_at_its_limit_and_the_other_kinds_go_on(tmp_path, source):
    doc, runner = _run(tmp_path, source, runner=gp.FakeRunner(1, hang="aa-0"))
    hung = next(p for p in doc["phases"] if p["phase"] == "aa-0")
    assert hung["note"].startswith("timed out")
    assert hung["timeout_s"] == max(gp.MIN_GATE_S, gp.GATE_LIMIT * gp.PRIOR_S["aa"] + gp.STEP_OVERHEAD_S)
    runs = _runs(tmp_path)
    # no A/A gate after it (the next one's step would run it again first); the plants go on
    assert {r["kind"] for r in runs} == {"plant"} and len(runs) >= 2 and doc["wall_s"] <= gp.BUDGET_S
    assert [p["phase"] for p in doc["phases"]].count("aa-0") == 1


def test_a_plan_that_times_cases_fails_the_run(tmp_path, source):
    doc, _ = _run(tmp_path, source, runner=gp.FakeRunner(1, plan_measure=2))
    assert doc["plan"]["measure"] == 2 and not doc["passed"]
    assert "**2 of 4 cases to time**" in (tmp_path / "out" / "gate_power.md").read_text()


def test_a_run_killed_midway_keeps_its_tables(tmp_path, source):
    class Killed(gp.FakeRunner):
        def __call__(self, argv, env, cwd, timeout, log):
            if len(self.calls) == 4:  # plan, calibrate, aa-0, aa-1 ran
                raise KeyboardInterrupt
            return super().__call__(argv, env, cwd, timeout, log)

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, source, runner=Killed(1))
    doc = json.loads((tmp_path / "out" / "gate_power.json").read_text())
    assert [p["phase"] for p in doc["phases"]][-1] == "aa-2" and doc["phases"][-1]["note"] == "interrupted"
    assert doc["counts"]["aa"]["gates"] == 2
    assert "| A/A gates with a false fail | 2 |" in (tmp_path / "out" / "gate_power.md").read_text()


def test_a_failing_calibration_is_said_and_the_gates_run_uncalibrated(tmp_path, source):
    doc, _ = _run(tmp_path, source, runner=gp.FakeRunner(1, hang="calibrate"))
    assert doc["calibration"]["note"].startswith("FAILED") and not doc["passed"]
    assert doc["counts"]["calibrated_verdicts"]["count"] == 0  # the fake GPU is no GPU of calibration/


def test_the_comment_commit_changes_comments_alone(source):
    """The same program (a docstring change would alter it) with every line below the comment moved."""
    import ast

    from perf import git

    head = git.git(source, "rev-parse", "HEAD")
    sha = gp.comment_commit(source)
    assert git.git(source, "rev-parse", "HEAD") == head and git.git(source, "status", "--porcelain") == ""
    old, new = (git.git(source, "show", f"{c}:{gp.TARGET}") for c in (head, sha))
    assert ast.dump(ast.parse(old)) == ast.dump(ast.parse(new)) and new.startswith("# ")
    assert new.splitlines()[1:] == old.splitlines()
    assert git.git(source, "diff", "--name-only", head, sha) == gp.TARGET


def test_bad_input_is_one_line(tmp_path, capsys):
    from perf.process import entry

    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "gate_power.json").write_text("{}")
    for argv in (["--out", str(tmp_path / "o"), "--budget-s", "0", "--fake", "1"],
                 ["--out", str(tmp_path / "used"), "--fake", "1"]):
        with pytest.raises(SystemExit) as e:
            entry(gp.main, argv)
        assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--budget-s 0" in err[0] and "earlier run" in err[1]


def test_the_fake_calibration_is_one_the_gate_reads(tmp_path, source):
    from perf.thresholds import calibration_for, load_thresholds

    repo = tmp_path / "repo"
    shutil.copytree(source, repo)
    assert gp.FakeRunner(1)._calibrate(str(repo)) == 0
    cal, note = calibration_for(load_thresholds(str(repo / "thresholds.yaml")), "nvidia", gp.FAKE_GPU)
    assert cal is not None and len(cal.cases) == 2 * len(gp.SCENARIOS), note
