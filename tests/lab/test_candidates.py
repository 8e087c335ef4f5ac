"""perf.lab.candidates on the CPU: its plan file is checked in one line, and every candidate of a
scenario is planned from an unfilled batch (the filled one is made at the scenario's turn)."""

from __future__ import annotations

from unittest import mock

import pytest

from kernels.paged_attention import planning
from perf.errors import ConfigError
from perf.lab import candidates
from perf.measure import check

SCENARIO = "qwen2.5-7b/decode/batch4-kv8192-q8/block16/bf16"


def _plan(tmp_path, text: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ("[]\n", "a mapping of scenario names"),
    (f"{SCENARIO}: {{a: {{tile_width: 64}}}}\n", "unknown Config fields tile_width"),
    (f"{SCENARIO}: {{default: {{}}}}\n", "'default' is the heuristics' own choice"),
    (f"{SCENARIO}: [1]\n", "a mapping of labels to Config fields"),
])
def test_a_bad_plan_is_refused_in_one_line(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        candidates.load_plan(_plan(tmp_path, text))


def test_every_candidate_is_planned_from_an_unfilled_batch_and_a_bad_one_is_refused(tmp_path):
    plan = candidates.load_plan(_plan(tmp_path, f"""{SCENARIO}:
  prev: {{block_vector: false, read_ahead: false, num_stages: 2}}
  seg4: {{num_segments: 4}}
  odd: {{tile_size: 48}}
"""))
    with mock.patch.object(planning, "resolve_target", return_value=("nvidia", 132)):
        case = candidates._Scenario(SCENARIO, plan[SCENARIO], "cpu")
        launches = case.launches()
    assert set(case.configs) == {"default", "prev", "seg4"}  # `odd` is no Config the kernels take
    assert case.refused["odd"].startswith("ValueError: tile_size")
    assert case.configs["seg4"].num_segments == 4 and case.configs["default"].read_ahead
    attention = [(x.num_stages, x.constexprs["READ_AHEAD"], x.grid) for x in launches
                 if x.name.startswith("q_block")]
    assert len(attention) == 3 and len(set(attention)) == 3  # default, prev and seg4: one launch each
    assert {stages for stages, *_ in attention} == {2, 3}


def test_candidates_are_held_to_the_reference_and_tolerance_their_plan_calls_for(tmp_path):
    """Q K^T alone on e4m3 (the NVIDIA tree's own choice here, [fp8-qk-e4m3], and so `s2`'s): q is
    rounded to e4m3, so the check takes the reference of q so rounded and bf16's tolerance; both products
    on e4m3 (`f8`) FP8_PRODUCTS_TOLERANCE for P's rounding too; both in fp16 (`qk16`) the reference of q
    itself and their dtype's. The plan decides, as in `perf run` (qk16 on the Q-block kernel: on an sm_90
    host the tree plans this prefill on the Gluon kernel, which rounds q to e4m3 as well)."""
    name = "llama3-8b/prefill/batch4-kv2048/block16/fp8/bf16"
    plan = candidates.load_plan(_plan(tmp_path, f"""{name}:
  f8: {{fp8_products: true, qk_e4m3: false}}
  s2: {{num_stages: 2}}
  qk16: {{qk_e4m3: false, warp_specialized: false}}
"""))
    with mock.patch.object(planning, "resolve_target", return_value=("nvidia", 132)):
        case = candidates._Scenario(name, plan[name], "cpu")
    assert case.configs["default"].qk_e4m3 and not case.refused
    references = check.Reference(exact="q itself", q_rounded="q rounded")
    bf16 = check.TOLERANCES["bfloat16"]
    assert case.held_to("default", references) == case.held_to("s2", references) == ("q rounded", bf16)
    assert case.held_to("qk16", references) == ("q itself", bf16)
    assert case.held_to("f8", references) == ("q rounded", check.FP8_PRODUCTS_TOLERANCE)


def _cases(plan: dict) -> list:
    with mock.patch.object(planning, "resolve_target", return_value=("nvidia", 132)):
        return [candidates._Scenario(name, over, "cpu") for name, over in plan.items()]


def _row(case, peers=(), refused=None) -> dict:
    """An earlier run's row as `measure` writes it, of a case planned the way it is planned now."""
    import dataclasses

    return {"ms": {**{k: 0.1 for k in case.configs}, **{"peer:" + p: 0.1 for p in peers}},
            "configs": {k: dataclasses.asdict(c) for k, c in case.configs.items()},
            "refused": dict(refused or case.refused), "rounds": {}, "limit_ms": 0.05}


def test_a_resumed_run_keeps_a_row_only_where_it_would_time_the_same_configurations():
    """Kept: a scenario whose candidates plan to the configurations the earlier run timed, with the
    same peers. Timed again: a candidate whose fields changed (or a tree whose choice did), another
    peer list, a label the earlier run did not have; rows of scenarios no longer planned are dropped."""
    import copy

    other = "llama3-8b/decode/batch4-kv4096-q2/block16/bf16"
    plan = {SCENARIO: {"seg4": {"num_segments": 4}, "odd": {"tile_size": 48}}, other: {}}
    cases = _cases(plan)
    assert cases[0].refused and "odd" not in cases[0].configs  # refused when its Config was made
    rows = {case.name: _row(case, ["flashinfer_paged"]) for case in cases}
    rows["llama3-8b/decode/batch1-kv1024/block16/bf16"] = rows[other]
    before = {"limits": {"copy_tb_s": 4.2, "matmul_tflop_s": 780.0}, "rows": rows}
    assert set(candidates.kept_rows(before, cases, ["flashinfer_paged"])) == {SCENARIO, other}
    assert candidates.kept_rows(before, cases, []) == {}  # the peers differ
    changed = _cases({SCENARIO: {"seg4": {"num_segments": 8}, "odd": {"tile_size": 48}}, other: {}})
    assert set(candidates.kept_rows(before, changed, ["flashinfer_paged"])) == {other}
    tree = copy.deepcopy(before)  # the tree's own choice moved since: default differs
    tree["rows"][other]["configs"]["default"]["num_segments"] += 1
    assert set(candidates.kept_rows(tree, cases, ["flashinfer_paged"])) == {SCENARIO}
    more = _cases({SCENARIO: {"seg4": {"num_segments": 4}, "odd": {"tile_size": 48}},
                   other: {"s3": {"num_stages": 3}}})
    assert set(candidates.kept_rows(before, more, ["flashinfer_paged"])) == {SCENARIO}


def test_a_resumed_run_refuses_an_earlier_file_of_other_settings_in_one_line(tmp_path):
    import json

    settings = {"gpu": "NVIDIA H200", "source": {"commit": "abc", "dirty": False}, "rounds": 5,
                "samples": 25, "peers": ["flashinfer_paged"]}
    doc = {"limits": {"copy_tb_s": 4.2, "matmul_tflop_s": 780.0}, "rows": {}, **settings}
    path = tmp_path / "candidates.json"
    assert candidates.earlier_run(str(path), settings) == {}
    path.write_text(json.dumps(doc))
    assert candidates.earlier_run(str(path), settings) == doc
    for key, value in [("gpu", "NVIDIA H100"), ("source", {"commit": "def", "dirty": False}), ("rounds", 3),
                       ("samples", 10), ("peers", [])]:
        with pytest.raises(ConfigError, match=f"made with {key} .*this run's is"):
            candidates.earlier_run(str(path), {**settings, key: value})
    for bad in ([1], {"rows": {}}, {"rows": {}, "limits": {"copy_tb_s": 4.2}}):
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="candidates run|leave out --resume"):
            candidates.earlier_run(str(path), settings)


def test_a_run_whose_rows_are_all_kept_times_nothing_and_keeps_their_limits(monkeypatch):
    """measure() with every scenario kept: no limits measured, nothing compiled or timed, the rows
    in the plan's order, the earlier limits for all of them."""
    plan = {SCENARIO: {"seg4": {"num_segments": 4}}}
    cases = _cases(plan)
    before = {"limits": {"copy_tb_s": 4.2, "matmul_tflop_s": 780.0}, "rows": {SCENARIO: _row(cases[0])}}
    from perf import roofline, tune

    monkeypatch.setattr(roofline, "measure_limits", lambda device: pytest.fail("limits measured again"))
    monkeypatch.setattr(tune, "precompile", lambda launches, threads: launches and pytest.fail("compiled"))
    real = candidates._Scenario
    monkeypatch.setattr(candidates, "_Scenario", lambda name, over, device: real(name, over, "cpu"))
    saved = []
    with mock.patch.object(planning, "resolve_target", return_value=("nvidia", 132)):
        doc = candidates.measure(plan, 5, 25, [], 1, before=before, save=saved.append)
    assert doc == {"limits": before["limits"], "rows": before["rows"]} and not saved
