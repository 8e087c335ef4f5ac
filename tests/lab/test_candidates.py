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


def test_candidates_on_e4m3_operands_are_checked_with_the_fp8_products_tolerance(tmp_path):
    """Both products on e4m3, or Q K^T alone (the NVIDIA tree's own choice here, [fp8-qk-e4m3], and so
    `s2`'s): q is rounded to e4m3, so the check takes FP8_PRODUCTS_TOLERANCE; both products in fp16
    their dtype's; the plan decides, as in `perf run`."""
    name = "llama3-8b/prefill/batch4-kv2048/block16/fp8/bf16"
    plan = candidates.load_plan(_plan(tmp_path, f"""{name}:
  f8: {{fp8_products: true, qk_e4m3: false}}
  s2: {{num_stages: 2}}
  qk16: {{qk_e4m3: false}}
"""))
    with mock.patch.object(planning, "resolve_target", return_value=("nvidia", 132)):
        case = candidates._Scenario(name, plan[name], "cpu")
    assert case.configs["default"].qk_e4m3 and not case.refused
    assert {case.tolerance(label) for label in ("default", "f8", "s2")} == {check.FP8_PRODUCTS_TOLERANCE}
    assert case.tolerance("qk16") == check.TOLERANCES["bfloat16"]


def test_an_interrupted_run_keeps_the_scenarios_it_measured_with_the_same_candidates(tmp_path):
    """A second run into the same --out times only what the first did not finish: a row is kept
    when it measured exactly the candidates and peers asked for now, on the same GPU."""
    import json

    other = "llama3-8b/decode/batch4-kv4096-q2/block16/bf16"
    plan = {SCENARIO: {"seg4": {"num_segments": 4}}, other: {}}
    rows = {
        SCENARIO: {"ms": {"default": 0.1, "peer:flashinfer_paged": 0.1},
                   "configs": {"default": {}, "seg4": {}}, "refused": {}, "rounds": {}},
        other: {"ms": {"default": 0.1}, "configs": {"default": {}}, "refused": {}, "rounds": {}},  # no peer
        "llama3-8b/decode/batch1-kv1024/block16/bf16": {"ms": {}, "configs": {"default": {}}, "refused": {}},
    }
    path = tmp_path / "candidates.json"
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "limits": {"copy_tb_s": 4.2}, "rows": rows}))
    kept = candidates.measured_before(str(path), plan, ["flashinfer_paged"], "NVIDIA H200")
    assert set(kept["rows"]) == {SCENARIO} and kept["limits"] == {"copy_tb_s": 4.2}
    assert set(candidates.measured_before(str(path), plan, [], "NVIDIA H200")["rows"]) == {other}
    assert candidates.measured_before(str(tmp_path / "none.json"), plan, [], "NVIDIA H200") == {}
    with pytest.raises(ConfigError, match="measured on 'NVIDIA H200', not this 'NVIDIA H100'"):
        candidates.measured_before(str(path), plan, [], "NVIDIA H100")
    path.write_text("[1]\n")
    with pytest.raises(ConfigError, match="earlier candidates run"):
        candidates.measured_before(str(path), plan, [], "NVIDIA H200")
