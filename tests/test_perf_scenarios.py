"""Scenarios: names encode and parse back, batches are reproducible, suites are sized as promised."""

from __future__ import annotations

import pytest

from perf import scenarios
from perf.errors import ConfigError
from perf.scenarios import MODELS, Scenario


def test_name_round_trip_with_every_option():
    s = Scenario("gpt-oss-20b", 16, 8, 2048, 50, chunk=256, variable=True, window=128, softcap=30,
                 sinks=True, fp8=True, dtype="bf16")
    assert s.name == "gpt-oss-20b_bs16_b8_s2048_d50_c256_var_w128_cap30_sinks_fp8_bf16"
    assert Scenario.parse(s.name) == s
    assert Scenario.parse("llama3-8b_bs16_b1_s16_d100") == Scenario("llama3-8b", 16, 1, 16, 100)


@pytest.mark.parametrize("bad", ["llama3-8b_b1_s16_d100", "nope_bs16_b1_s16_d100",
                                 "llama3-8b_bs16_b1_s16_d100_x"])
def test_bad_names_are_refused(bad):
    with pytest.raises(ValueError):
        Scenario.parse(bad)


@pytest.mark.parametrize("name,decode,prefill_q", [
    ("llama3-8b_bs16_b8_s64_d0", 0, [64] * 8),
    ("llama3-8b_bs16_b8_s64_d100", 8, []),
    ("llama3-8b_bs16_b8_s64_d50", 4, [64] * 4),
    ("llama3-8b_bs16_b8_s64_d50_c16", 4, [16] * 4),  # chunked prefill after a 48-token context
])
def test_composition(name, decode, prefill_q):
    q, kv = Scenario.parse(name).lengths()
    assert sum(1 for x in q if x == 1) == decode
    assert sorted(x for x in q if x > 1) == prefill_q
    assert kv == [64] * 8


def test_variable_lengths_keep_the_maximum_and_are_reproducible():
    s = Scenario.parse("llama3-8b_bs16_b32_s4096_d50_var")
    q, kv = s.lengths()
    assert max(kv) == 4096 and min(kv) >= 4096 // 8 and len(set(kv)) > 10
    assert s.lengths() == (q, kv)
    assert s.spec().digest() == Scenario.parse(s.name).spec().digest()
    other = Scenario.parse("llama3-8b_bs16_b32_s4096_d100_var")
    assert other.spec().digest() != s.spec().digest()


def test_spec_carries_model_and_features():
    spec = Scenario.parse("gemma2-9b_bs32_b2_s64_d50_w16_cap50_sinks_fp8").spec()
    m = MODELS["gemma2-9b"]
    assert (spec.num_q_heads, spec.num_kv_heads, spec.head_size) == (
        m.num_q_heads, m.num_kv_heads, m.head_size)
    assert (spec.block_size, spec.sliding_window, spec.softcap, spec.sinks, spec.fp8_kv) == (
        32, 16, 50.0, True, True)


def test_suites_are_sized_as_the_issue_asks():
    names = {n: [s.name for s in scenarios.suite(n)] for n in ("smoke", "pr", "nightly", "paper")}
    assert 20 <= len(names["pr"]) <= 30
    assert len(names["nightly"]) >= 150
    assert len(names["paper"]) == 8 * 9 * 3
    assert all(n.startswith("tiny_") for n in names["smoke"])
    for n, items in names.items():
        assert len(items) == len(set(items)), n
        assert all(Scenario.parse(x).name == x for x in items)
    pr = scenarios.suite("pr")
    # every axis of DESIGN 6 appears in the pr suite
    assert {s.decode for s in pr} >= {0, 50, 100} and {s.block_size for s in pr} >= {16, 32, 64, 544}
    assert any(s.chunk for s in pr) and any(s.variable for s in pr) and any(s.window for s in pr)
    assert any(s.softcap for s in pr) and any(s.sinks for s in pr) and any(s.fp8 for s in pr)
    assert {MODELS[s.model].head_size for s in pr} >= {64, 80, 96, 128, 256}
    ratios = {MODELS[s.model].num_q_heads // MODELS[s.model].num_kv_heads for s in pr}
    assert {1, 4, 5, 71} <= ratios  # MHA, GQA 4:1 and 5:1, MQA
    assert sum(s.footprint_bytes() for s in pr) < 8 * 2**30  # both A/B sides fit one GPU


def test_suite_errors(tmp_path):
    with pytest.raises(ConfigError, match="no suite 'nope'"):
        scenarios.suite("nope")
    p = tmp_path / "s.yaml"
    p.write_text("x:\n  grids:\n    - {model: llama3-8b, batch: 1, max_seq: 16, decode: 0, colour: red}\n")
    with pytest.raises(ConfigError, match="x.grids\\[0\\].colour: unknown axis"):
        scenarios.suite("x", str(p))
    assert [s.name for s in scenarios.select(scenarios.suite("pr"), "*_fp8,phi-2*")] == [
        "phi-2_bs16_b16_s1024_d100", "llama3-8b_bs16_b32_s2048_d100_fp8", "llama3-8b_bs16_b8_s1024_d0_fp8"]
    with pytest.raises(ConfigError, match="matches no scenario"):
        scenarios.select(scenarios.suite("pr"), "zzz*")
