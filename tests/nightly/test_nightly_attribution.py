"""Attribution of the nightly's steps: the rules, the creep detector, and the replay that proves the pipeline.

The replay (perf/nightly/simulate.py) writes a history with known events and runs the production
attribution, heartbeat and issues on it; its causes must come out right within two nights, with
no issue on a quiet night. A pipeline broken on purpose must fail it. The seeds here were not used
to build the pipeline.
"""

from __future__ import annotations

import datetime
import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf import verdicts
from perf.errors import ConfigError
from perf.nightly import creep, simulate

# Seeds 2, 11, 23, 83, 89 and 127 were looked at while the pipeline was built (docs/nightly.md,
# "The replay"); these were first run on the pipeline as committed. One held-out seed in CI (a
# replay takes 6-20 s on a 2-core machine), more by hand: PERF_REPLAY_SEEDS=181,191,193,...
FAST_SEED = 179
HELD_OUT = tuple(int(s) for s in os.environ.get("PERF_REPLAY_SEEDS", "181").split(","))


# --- the rules ----------------------------------------------------------------------------------

STATUS = st.sampled_from([None, verdicts.CONFIRMED, verdicts.NOISE, verdicts.PENDING, verdicts.INCONCLUSIVE])


@given(kept=st.booleans(), code_changed=st.booleans(), code_ab=STATUS, toolchain_changed=st.booleans(),
       toolchain_ab=STATUS, environment_changed=st.booleans(), libraries_moved=st.booleans(),
       nights_held=st.integers(0, 3))
def test_noise_is_a_conclusion_and_a_kept_step_is_never_noise(kept, code_changed, code_ab, toolchain_changed,
                                                               toolchain_ab, environment_changed,
                                                               libraries_moved, nights_held):
    cause, why = verdicts.step_cause(kept=kept, code_changed=code_changed, code_ab=code_ab,
                                     toolchain_changed=toolchain_changed, toolchain_ab=toolchain_ab,
                                     environment_changed=environment_changed, libraries_moved=libraries_moved,
                                     nights_held=nights_held)
    assert cause in (*verdicts.CAUSES, None) and why
    if cause == verdicts.NOISE_CAUSE:
        assert not kept and not toolchain_changed and not environment_changed
        assert not code_changed or code_ab == verdicts.NOISE
    if kept:
        assert cause != verdicts.NOISE_CAUSE
    if cause == verdicts.CODE:
        assert code_changed and code_ab == verdicts.CONFIRMED
    if cause == verdicts.TOOLCHAIN:
        assert toolchain_changed and toolchain_ab == verdicts.CONFIRMED
    if cause == verdicts.ENVIRONMENT and not environment_changed:  # a blip of two nights is never one
        assert nights_held >= verdicts.UNEXPLAINED_HELD_NIGHTS


@pytest.mark.parametrize("evidence, cause", [
    (dict(code_changed=True, code_ab=verdicts.CONFIRMED), verdicts.CODE),
    (dict(code_changed=True, code_ab=verdicts.NOISE, toolchain_changed=True, toolchain_ab=verdicts.CONFIRMED),
     verdicts.TOOLCHAIN),  # a Triton bump on a night with commits: one commit under both reproduces it
    (dict(code_changed=True, code_ab=verdicts.NOISE, environment_changed=True), verdicts.ENVIRONMENT),
    (dict(code_changed=True, code_ab=verdicts.NOISE, environment_changed=True, nights_held=1),
     verdicts.ENVIRONMENT),  # a changed driver names it the night after the step
    (dict(code_changed=False, libraries_moved=True), verdicts.ENVIRONMENT),
    (dict(code_changed=False, libraries_moved=True, nights_held=1), None),  # seed 1018: waits a night
    (dict(code_changed=True, code_ab=verdicts.PENDING), None),  # waits for its re-measure
    (dict(toolchain_changed=True, toolchain_ab=verdicts.NOISE, code_changed=False), verdicts.ENVIRONMENT),
    (dict(toolchain_changed=True, toolchain_ab=verdicts.NOISE, code_changed=False, nights_held=1), None),
])
def test_a_kept_step_gets_the_cause_its_evidence_names(evidence, cause):
    args = dict(kept=True, code_changed=False, code_ab=None, toolchain_changed=False, toolchain_ab=None,
                environment_changed=False, libraries_moved=False, nights_held=2)
    assert verdicts.step_cause(**{**args, **evidence})[0] == cause


def _finding(verdict, ratio):
    return verdicts.Finding("latency", "nvidia", "H100", "v", "s", "graph", 1, 1, ratio, None, None, 0.01, "",
                            verdict)


def test_the_toolchain_ab_reads_the_old_triton_faster_as_the_step_reproduced():
    f = _finding
    assert verdicts.toolchain_status(f(verdicts.Verdict.IMPROVED, 0.94)) == verdicts.CONFIRMED
    assert verdicts.toolchain_status(f(verdicts.Verdict.OK, 1.0)) == verdicts.NOISE
    assert verdicts.toolchain_status(f(verdicts.Verdict.FAIL, 1.2)) == verdicts.NOISE  # new Triton faster
    assert verdicts.toolchain_status(None) == verdicts.INCONCLUSIVE


# --- the creep detector -----------------------------------------------------------------------


def _series(rng, flat: int, ramp: int, per_night: float, noise: float, tail: int = 0) -> list[float]:
    levels = [1.0] * flat + [per_night ** (i + 1) for i in range(ramp)] + [per_night ** ramp] * tail
    return [0.1 * x * math.exp(rng.normal(0, noise)) for x in levels]


@pytest.mark.parametrize("noise", [0.002, 0.004])
def test_a_ramp_of_small_steps_is_creep_and_a_flat_series_is_not(noise):
    rng = np.random.default_rng(5)
    found = creep.find(_series(rng, 20, 12, 1.004, noise), floor=1.03, step_limit=1.05)
    assert found is not None and 1.03 < found.ratio < 1.07 and 18 <= found.start <= 27
    assert all(r < 1.05 for _, r in found.steps)
    for seed in range(5):
        assert creep.find(_series(np.random.default_rng(seed), 32, 0, 1.0, noise), 1.03, 1.05) is None


def test_one_large_step_is_the_alerts_not_creep_and_short_series_say_nothing():
    rng = np.random.default_rng(1)
    step = [0.1 * math.exp(rng.normal(0, 0.002)) for _ in range(20)] + \
        [0.108 * math.exp(rng.normal(0, 0.002)) for _ in range(5)]
    assert creep.find(step, 1.03, 1.05) is None
    assert creep.find([0.1, 0.2, 0.3], 1.03, 1.05) is None


@given(first=st.lists(st.floats(-0.045, 0.045), min_size=1, max_size=creep.MIN_BASELINE - 1),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=40, deadline=None)
def test_a_first_level_too_short_to_be_a_baseline_is_never_creep(first, seed):
    """Replay seed 2013: a runner's first night 3.5 % faster, then flat nights, fitted the first night
    alone as the baseline and named the flat nights creep. Nights before a level held MIN_BASELINE
    nights are no baseline, whatever they are."""
    rng = np.random.default_rng(seed)
    flat = _series(rng, 12, 0, 1.0, 0.002)
    assert creep.find([0.1 * math.exp(x) for x in first] + flat, 1.03, 1.05) is None


def test_a_ramp_after_a_short_first_level_is_still_creep_and_says_where_it_starts():
    rng = np.random.default_rng(5)
    found = creep.find([0.0965] + _series(rng, 10, 12, 1.004, 0.002), floor=1.03, step_limit=1.05)
    assert found is not None and 1.03 < found.ratio < 1.07 and 9 <= found.start <= 18
    assert all(9 <= i for i, _ in found.steps)  # indices of the whole series, the skipped night counted


# --- the replay ------------------------------------------------------------------------------------


def _events(doc: dict) -> dict:
    return {e["kind"]: e for e in doc["events"]}


def test_replay_attributes_every_event_and_opens_no_false_issue(tmp_path):
    from perf.cli import main

    rc = main(["nightly", "simulate", "--seed", str(FAST_SEED), "--nights", "60", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "simulation.json").read_text())
    kinds = {"driver", "toolchain", "code", "creep", "outage", "cache_loss"}
    assert {e["kind"] for e in doc["events"]} >= kinds
    for e in doc["events"]:
        assert e["reported_cause"] == e["expected_cause"], e
        assert e["detected_after_nights"] is None or e["detected_after_nights"] <= 2, e
    code = _events(doc)["code"]
    assert code["issue"] == f"code/nvidia/{code['first_bad_commit'][:12]}"  # bisect named the planted commit
    assert doc["false_issues"] == 0 and doc["lost_nights"] == 0 and doc["passed"] and rc == 0
    issues = [json.loads(p.read_text()) for p in (tmp_path / "issues").glob("*.json")]
    assert len({i["key"] for i in issues}) == len(issues)  # one issue per cause
    (driver,) = [i for i in issues if i["key"].startswith("environment/")]
    assert "| driver |" in driver["body"] and "libraries" in driver["body"]


def test_a_pipeline_that_calls_everything_noise_fails_the_replay(tmp_path, monkeypatch):
    monkeypatch.setattr(verdicts, "step_cause", lambda **kw: (verdicts.NOISE_CAUSE, "broken on purpose"))
    doc = simulate.replay(FAST_SEED, 60, str(tmp_path))
    assert not simulate.passed(doc)
    wrong = {e["kind"] for e in doc["events"] if e["reported_cause"] != e["expected_cause"]}
    assert {"driver", "toolchain", "code"} <= wrong


def test_an_issue_of_another_cause_inside_an_events_nights_is_false_and_a_second_of_its_cause_duplicate():
    E = simulate.Event
    events = [E("driver", 10, "environment", runner="r1"), E("toolchain", 20, "toolchain"),
              E("cache_loss", 21, "none")]
    right = {"environment/r1/driver-1-2": 11, "toolchain/nvidia/3.6.0-3.7.0": 21}
    doc = simulate.evaluate(events, right, 0)
    assert simulate.passed(doc), doc  # the toolchain's issue in the cache loss's nights is the toolchain's
    assert [e["reported_cause"] for e in doc["events"]] == ["environment", "toolchain", "none"]
    wrong = simulate.evaluate(events, {**right, "code/nvidia/abc": 11}, 0)  # beside the driver's issue
    assert wrong["false_issue_keys"] == ["code/nvidia/abc"] and not simulate.passed(wrong)
    twice = simulate.evaluate(events, {**right, "environment/r1/2026-01-12": 12}, 0)
    assert twice["duplicate_issue_keys"] == ["environment/r1/2026-01-12"] and not simulate.passed(twice)
    assert twice["false_issues"] == 0


@pytest.mark.parametrize("seed", HELD_OUT)
def test_replay_on_seeds_not_used_for_tuning(tmp_path, seed):
    doc = simulate.replay(seed, 60, str(tmp_path))
    assert simulate.passed(doc), json.dumps(doc, indent=1)


def test_a_remeasure_that_finds_nothing_does_not_clear_a_step_that_came_with_a_new_toolchain():
    f = _finding
    bump = {"triton": ("3.6.0", "3.7.0")}
    assert verdicts.remeasure_status(f(verdicts.Verdict.OK, 1.0)) == verdicts.NOISE
    assert verdicts.remeasure_status(f(verdicts.Verdict.OK, 1.0), bump) == verdicts.INCONCLUSIVE
    assert verdicts.remeasure_status(f(verdicts.Verdict.FAIL, 1.2), bump) == verdicts.CONFIRMED


def test_the_alert_reads_the_toolchain_and_environment_from_the_history():
    from perf.nightly import alert

    old = {"triton": "3.6.0", "torch": "2.11.0", "driver": "580.159.04", "gpu": "H100", "clocks": None}
    new = {**old, "triton": "3.7.0", "driver": "590.48.01", "time": "later"}
    assert alert.environment_diff(old, new) == {"triton": ("3.6.0", "3.7.0"),
                                                "driver": ("580.159.04", "590.48.01")}
    assert alert.environment_diff(old, {**old, "time": "later"}) == {}
    unknown_before = {**old, "image_digest": "sha256:ab"}
    assert alert.environment_diff(old, unknown_before) == {}  # a field unknown on one side is no change


def test_production_lab_remeasures_with_the_latency_gate(tmp_path, monkeypatch):
    """GateLab's re-measure is confirm's gate run (`perf gate --base-ref GOOD --head-ref BAD ...
    --all-cases`), its findings read back into remeasure records."""
    from perf.nightly import attribute, confirm
    from tests.nightly.test_nightly_confirm import FakeGate

    key = ("static_grid", "llama3-8b/decode/batch32-kv1024/block16", "graph")
    gate = FakeGate(ratios={key: 1.2})
    monkeypatch.setattr(confirm, "run_in_process", gate)
    lab = attribute.GateLab(str(tmp_path), str(tmp_path / "out"), "thresholds.yaml")
    got = lab.remeasure("gpu-a", "a" * 40, "b" * 40, [key])
    assert got[key]["status"] == verdicts.CONFIRMED and got[key]["ratio"] == pytest.approx(1.2)
    (request,) = gate.calls
    assert (request.base_ref, request.head_ref, request.all_cases) == ("a" * 40, "b" * 40, True)
    assert (request.variants, request.scenarios, request.metrics, request.suite) == (*key, "nightly")
    assert request.thresholds == "thresholds.yaml" and got[key]["command"] == request.command_line()


def test_production_lab_runs_the_toolchain_ab_on_the_steps_commit(tmp_path, monkeypatch):
    """GateLab's toolchain A/B is `perf gate --toolchain triton==OLD --head-ref STEP ...`: the step's
    commit under the old and the new Triton, not whatever this checkout holds tonight."""
    from perf.nightly import attribute, confirm

    key = ("static_grid", "llama3-8b/decode/batch32-kv1024/block16", "graph")
    calls: list = []
    monkeypatch.setattr(confirm, "run_in_process", lambda request, repo: calls.append(request) or 0)
    lab = attribute.GateLab(str(tmp_path), str(tmp_path / "out"), "thresholds.yaml")
    got = lab.toolchain_ab("gpu-a", "b" * 40, {"triton": "3.6.0"}, {"triton": "3.7.0"}, [key])
    (request,) = calls
    assert (request.toolchain, request.head_ref, request.base_ref) == ("triton==3.6.0", "b" * 40, None)
    assert got[key]["command"].startswith("python -m perf gate --toolchain triton==3.6.0 --head-ref")


def test_interpreter_nights_are_refused_in_one_line_that_names_no_impossible_fix(tmp_path):
    """A night measured in Triton's interpreter (vendor "cpu") has no thresholds: attribution says
    so instead of suggesting a `cpu:` section of thresholds.yaml, which the file may not hold."""
    import dataclasses

    from perf.thresholds import load_thresholds

    nights = [dataclasses.replace(n, vendor="cpu") for n in _history([{}] * 4)]
    with pytest.raises(ConfigError, match="'cpu', not a vendor measured here") as e:
        _judge_each_night(tmp_path, nights)
    assert "section" not in str(e.value)
    with pytest.raises(ConfigError, match="'cpu', not a vendor measured here") as e:
        load_thresholds("thresholds.yaml").vendor("cpu")


def test_the_state_joins_the_alerts_document_that_nightly_save_commits():
    """`perf nightly save` commits the alert's alert.json as the night's: attribution adds its state
    to this runner's entry and keeps everything else."""
    from perf.nightly import attribute

    doc = {"alert": True, "machines": [{"machine": "a", "commit": "c1", "alerts": [{"x": 1}]},
                                       {"machine": "b", "commit": "c2", "alerts": []}]}
    out = attribute.with_state(doc, "a", "c1", {"pending": []})
    assert out["alert"] is True and [m["machine"] for m in out["machines"]] == ["b", "a"]
    state = {"pending": []}
    assert out["machines"][1] == {"machine": "a", "commit": "c1", "alerts": [{"x": 1}], "attribution": state}
    fresh = attribute.with_state(None, "a", "c1", state)
    assert fresh["machines"] == [{"machine": "a", "commit": "c1", "alerts": [], "attribution": state}]


def _three_nights(second: float, third: float, driver_of_second: str = "580.159.04"):
    """Three nights of the replay's cases: the decode scenario's kernels and libraries at 1, then
    `second`, then `third` (x their level), the other scenario flat; a little repeat noise."""
    from perf.nightly import attribute

    rng = np.random.default_rng(5)
    fp = {"gpu_model": simulate.GPU, "driver": "580.159.04", "triton": "3.6.0", "torch": "2.11.0"}
    nights = []
    for i, factor in enumerate((1.0, second, third)):
        series = {k: [float((1 + 0.1 * j) * (factor if k[1] == simulate.DECODE else 1.0)
                            * math.exp(rng.normal(0, 0.001))) for _ in range(5)]
                  for j, k in enumerate(simulate.keys())}
        driver = driver_of_second if i == 1 else "580.159.04"
        nights.append(attribute.Night(f"2026-01-0{i + 5}", f"{i:040x}", {**fp, "driver": driver}, series,
                                      gpu=simulate.GPU))
    return nights


@pytest.mark.parametrize("second, third, driver, outlier", [
    (0.944, 1.0, "580.159.04", True),   # seed 199: a runner's second night moved and came back
    (1.06, 1.0, "580.159.04", True),    # the same move upwards
    (1.08, 1.08, "580.159.04", False),  # a level change, not a night's move
    (0.944, 1.0, "590.48.01", False),   # the driver changed on that night: never an outlier
])
def test_a_night_long_move_the_alert_could_not_judge_leaves_the_window(tmp_path, second, third, driver,
                                                                         outlier):
    """A scenario's kernels and libraries moving for one night on a window's second night (too
    early for the alert to flag, so the pending-step rule never sees it) is an outlier of the
    machine: it leaves the window, so the third night is not judged against half that move."""
    from perf.ci import github
    from perf.nightly import attribute
    from perf.thresholds import load_thresholds

    class NoLab:
        def __getattr__(self, name):
            raise AssertionError(f"no experiment expected, got {name}")

    ctx = attribute.Context("gpu-a", load_thresholds("thresholds.yaml"), NoLab(),
                            github.tracker(dry_run_dir=str(tmp_path)))
    nights = _three_nights(second, third, driver)
    state = attribute.judge_night(nights, ctx)
    marked = {(d, s) for d, s, _ in state["outliers"]}
    assert marked == ({("2026-01-06", simulate.DECODE)} if outlier else set())
    if outlier:  # the third night is judged against the first alone: too little history for a step
        assert state["pending"] == []


def _history(plan: list[dict]):
    """Nights of the replay's cases, one per entry of `plan`: {"kernels": {scenario: x}, "libraries":
    {scenario: x}, "driver": version} (levels x1 where absent), one commit throughout, a little
    repeat noise."""
    from perf.nightly import attribute

    rng = np.random.default_rng(7)
    fp = {"gpu_model": simulate.GPU, "triton": "3.6.0", "torch": "2.11.0"}
    nights = []
    for i, p in enumerate(plan):
        series = {}
        for j, k in enumerate(simulate.keys()):
            f = p.get("libraries" if k[0].startswith("peer:") else "kernels", {}).get(k[1], 1.0)
            series[k] = [float((1 + 0.1 * j) * f * math.exp(rng.normal(0, 0.001))) for _ in range(5)]
        date = (simulate.START + datetime.timedelta(days=i)).isoformat()
        nights.append(attribute.Night(date, "c" * 40, {**fp, "driver": p.get("driver", "580.159.04"),
                                                        "triton": p.get("triton", "3.6.0")}, series,
                                      gpu=simulate.GPU))
    return nights


class NoLab:  # one commit throughout: no experiment but the toolchain A/B can be asked for
    def __getattr__(self, name):
        raise AssertionError(f"no experiment expected, got {name}")


class TritonLab(NoLab):
    """The toolchain A/B of the replay's model: our decode kernels 6 % slower under Triton 3.7."""

    def toolchain_ab(self, runner, sha, old, new, cases):
        def slower(k):
            changed = old.get("triton") != new.get("triton")
            return changed and k[1] == simulate.DECODE and not k[0].startswith("peer:")

        return {k: {"status": verdicts.CONFIRMED if slower(k) else verdicts.NOISE, "ratio": 1.06 if slower(k)
                    else 1.0} for k in cases}


def _judge_each_night(tmp_path, nights, lab=None):
    """attribute.judge_night night by night (each night's state kept for the next); the tracker and
    the decided records of every night."""
    from perf.ci import github
    from perf.nightly import attribute
    from perf.thresholds import load_thresholds

    tracker = github.tracker(dry_run_dir=str(tmp_path))
    ctx = attribute.Context("gpu-a", load_thresholds("thresholds.yaml"), lab or NoLab(), tracker)
    decided = []
    for i in range(len(nights)):
        nights[i].state = attribute.judge_night(nights[:i + 1], ctx)
        decided += [(nights[i].date, r["night"], r["cause"]) for r in nights[i].state["decided"]]
    return tracker, decided


def _move(scenario: str, x: float, also_libraries: bool = True, **more) -> dict:
    return {"kernels": {scenario: x}, **({"libraries": {scenario: x}} if also_libraries else {}), **more}


@pytest.mark.parametrize("stays", [False, True])
def test_a_two_night_move_with_an_unchanged_fingerprint_is_noise_and_one_that_stays_is_the_environment(
        tmp_path, stays):
    """Replay seed 1018: one scenario's kernels and libraries +4.5 % on two nights in a row, then back,
    the fingerprint unchanged. The night after the step kept it, yet nothing but the libraries says
    why: it waits a second night, and a move gone by then is noise (no issue). One that stays is the
    environment's, named on that second night."""
    plan = [{}] * 8 + [_move(simulate.DECODE, 1.045)] * 2 + \
        [_move(simulate.DECODE, 1.045 if stays else 1.0)] + [{}] * 2
    nights = _history(plan)
    tracker, decided = _judge_each_night(tmp_path, nights)
    step = nights[8].date
    outliers = [d for d, s, _ in nights[-1].state["outliers"] if s == simulate.DECODE]
    assert outliers == ([] if stays else [nights[8].date, nights[9].date])  # both nights leave the windows
    if stays:
        assert [i["key"] for i in tracker.issues()] == [f"environment/gpu-a/{step}"]  # nothing changed
        assert (nights[10].date, step, verdicts.ENVIRONMENT) in decided
    else:
        assert tracker.issues() == []
        assert [c for _, night, c in decided if night == step] == [verdicts.NOISE_CAUSE]


def test_a_driver_step_found_a_night_late_is_named_with_the_driver_the_night_after(tmp_path):
    """Replay seeds 1008 and 2010: a driver upgrade (+8 % everywhere) on a night one scenario moved
    -6 % for everyone: that scenario's step is found the next night, where the fingerprint no longer
    changes; its window still holds the change, so it is the environment's without a second night."""
    new = "590.48.01"
    hidden = {"kernels": {simulate.DECODE: 1.08 * 0.94, simulate.MIXED: 1.08},
              "libraries": {simulate.DECODE: 1.08 * 0.94, simulate.MIXED: 1.08}, "driver": new}
    up = {s: 1.08 for s in simulate.SCENARIOS}
    after = {"kernels": up, "libraries": up, "driver": new}
    nights = _history([{}] * 8 + [hidden] + [after] * 4)
    tracker, decided = _judge_each_night(tmp_path, nights)
    causes = {night: (when, cause) for when, night, cause in decided if cause}
    assert all(cause == verdicts.ENVIRONMENT for _, cause in causes.values()), decided
    for night, (when, _) in causes.items():  # each step named the night after it
        assert [n.date for n in nights].index(when) - [n.date for n in nights].index(night) == 1, decided
    # one cause, one issue: keyed by what changed, not by the night each scenario's step was found
    assert [i["key"] for i in tracker.issues()] == ["environment/gpu-a/driver-580.159.04-590.48.01"]


@pytest.mark.parametrize("change", ["driver", "triton"])
def test_a_step_found_a_night_before_a_driver_or_triton_change_is_that_changes(tmp_path, change):
    """Held-out replay seeds 5009 and 5025: one scenario moved +5 % for everyone on the night before a
    driver upgrade (+8 % everywhere from then on). The alert dates that scenario's step a night early,
    where the fingerprint did not change; the nights that keep it carry the upgrade, so the step is
    the upgrade's: one issue keyed by the driver change, where a second one keyed by the early night
    (`environment/<runner>/<night>`, "the machine moved") was opened beside it. A Triton bump on our
    decode kernels after such a night stays the toolchain's (it was: the libraries' move back on the
    bump's night leaves our step alone)."""
    if change == "driver":
        up = {s: 1.08 for s in simulate.SCENARIOS}
        early = _move(simulate.DECODE, 1.05)
        after, lab = {"kernels": up, "libraries": up, "driver": "590.48.01"}, None
        key = "environment/gpu-a/driver-580.159.04-590.48.01"
    else:
        early = {"kernels": {simulate.DECODE: 1.05}, "libraries": {simulate.DECODE: 1.05}}
        after, lab = {"kernels": {simulate.DECODE: 1.06}, "triton": "3.7.0"}, TritonLab()
        key = "toolchain/nvidia/triton-3.6.0-3.7.0"
    nights = _history([{}] * 8 + [early] + [after] * 4)
    tracker, decided = _judge_each_night(tmp_path, nights, lab)
    assert [i["key"] for i in tracker.issues()] == [key], decided


def test_the_libraries_move_is_kept_by_the_libraries(tmp_path):
    """Replay seed 2013: one scenario moved for everyone for a night; the next night the libraries were
    back and our kernels on it stayed up (a creep under way). The libraries' step is not kept (noise,
    that night an outlier); what stays of ours is a step of its own, judged on its own nights."""
    plan = [{}] * 8 + [_move(simulate.DECODE, 1.05)] + \
        [_move(simulate.DECODE, 1.05, also_libraries=False)] * 4
    nights = _history(plan)
    tracker, decided = _judge_each_night(tmp_path, nights)
    moved, next_night = nights[8].date, nights[9].date
    assert (next_night, moved, verdicts.NOISE_CAUSE) in decided, decided
    assert [moved, simulate.DECODE, "graph"] in nights[-1].state["outliers"]
    ours = [(when, cause) for when, night, cause in decided if night == next_night and cause]
    assert ours == [(nights[11].date, verdicts.ENVIRONMENT)], decided  # held on two nights after its own


def test_a_triton_step_found_a_night_late_is_the_toolchains(tmp_path):
    """Held-out replay seeds 3019 and 3039: the Triton bump (+6 % on our decode kernels) on a night the
    decode scenario moved -6 % for everyone; our decode step is found the next night, where the
    fingerprint no longer changes. Its window still holds the bump: the toolchain A/B runs under the
    window's Triton and names it `toolchain` the night after, under the bump's own issue key (it was
    a false `environment` issue three nights after the bump)."""
    hidden = {"kernels": {simulate.DECODE: 1.06 * 0.94}, "libraries": {simulate.DECODE: 0.94},
              "triton": "3.7.0"}
    after = {"kernels": {simulate.DECODE: 1.06}, "triton": "3.7.0"}
    nights = _history([{}] * 8 + [hidden] + [after] * 4)
    tracker, decided = _judge_each_night(tmp_path, nights, TritonLab())
    dates = [n.date for n in nights]
    causes = [(dates.index(when) - dates.index(night), cause) for when, night, cause in decided
              if cause not in (None, verdicts.NOISE_CAUSE)]
    assert causes == [(1, verdicts.TOOLCHAIN)], decided
    assert [i["key"] for i in tracker.issues()] == ["toolchain/nvidia/triton-3.6.0-3.7.0"]


def test_a_driver_step_after_an_attributed_triton_bump_is_the_drivers(tmp_path):
    """Replay seed 2013 (with the late-found Triton rule first tried): a Triton bump named on our decode
    kernels re-anchors those alone, so the libraries' and the other scenario's windows still hold it;
    a driver step six nights later, on every series, changed the driver on its own night: it is the
    environment's, and the bump in the window is no suspect."""
    bump = {"kernels": {simulate.DECODE: 1.06}, "triton": "3.7.0"}
    up = {s: 1.08 for s in simulate.SCENARIOS}
    driver = {"kernels": {simulate.DECODE: 1.06 * 1.08, simulate.MIXED: 1.08}, "libraries": up,
              "triton": "3.7.0", "driver": "590.48.01"}
    nights = _history([{}] * 8 + [bump] * 6 + [driver] * 3)
    tracker, decided = _judge_each_night(tmp_path, nights, TritonLab())
    dates = [n.date for n in nights]
    causes = [(dates.index(night), dates.index(when) - dates.index(night), cause)
              for when, night, cause in decided if cause not in (None, verdicts.NOISE_CAUSE)]
    assert causes == [(8, 1, verdicts.TOOLCHAIN), (14, 1, verdicts.ENVIRONMENT)], decided
