"""Scenarios: names encode and parse back, batches are reproducible, suites are sized as promised."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perf import scenarios
from perf.errors import ConfigError
from perf.scenarios import MODELS, Scenario


def test_name_round_trip_with_every_option():
    s = Scenario("gpt-oss-20b", 16, 8, 2048, 50, chunk=256, variable=True, window=128, softcap=30,
                 sinks=True, fp8=True, dtype="bf16")
    assert s.name == ("gpt-oss-20b/mixed50/batch8-kv2048-var-chunk256/block16/window128/softcap30/sinks/fp8/"
                      "bf16")
    assert Scenario.parse(s.name) == s
    assert Scenario.parse("llama3-8b/decode/batch1-kv16/block16") == Scenario("llama3-8b", 16, 1, 16, 100)
    assert Scenario.parse("llama3-8b/prefill/batch8-kv16/block16") == Scenario("llama3-8b", 16, 8, 16, 0)
    # features in another order, and the default dtype spelled out, name the same scenario
    assert Scenario.parse("gpt-oss-20b/mixed50/batch8-kv2048-var-chunk256/block16/bf16/fp8/sinks/softcap30/"
                          "window128") == s
    default_dtype = Scenario.parse("llama3-8b/decode/batch1-kv16/block16/fp16")
    assert default_dtype.name == "llama3-8b/decode/batch1-kv16/block16"


@pytest.mark.parametrize("old, new", [
    ("llama3-8b_bs16_b8_s16_d0", "llama3-8b/prefill/batch8-kv16/block16"),
    ("llama3-8b_bs16_b32_s1024_d100", "llama3-8b/decode/batch32-kv1024/block16"),
    ("llama3-8b_bs16_b16_s1024_d50_var", "llama3-8b/mixed50/batch16-kv1024-var/block16"),
    ("llama3-8b_bs16_b4_s4096_d0_c512", "llama3-8b/prefill/batch4-kv4096-chunk512/block16"),
    ("gpt-oss-20b_bs16_b8_s2048_d50_c256_var_w128_cap30_sinks_fp8_bf16",
     "gpt-oss-20b/mixed50/batch8-kv2048-var-chunk256/block16/window128/softcap30/sinks/fp8/bf16"),
])
def test_earlier_names_parse_to_the_same_scenario(old, new):
    s = Scenario.parse(old)
    assert s.name == new and s == Scenario.parse(new) and s.seed_key == old
    assert scenarios.canonical_name(old) == new == scenarios.canonical_name(new)
    assert scenarios.canonical_name("not a scenario") == "not a scenario"


def test_renaming_changed_no_batch():
    # tests/data/scenario_digests.json: every smoke, pr, nightly and paper scenario under its earlier
    # name with its BatchSpec digest, written by the code before the rename; a scenario added since
    # is recorded under its compact form (`Scenario.seed_key`) with the digest of its first commit.
    recorded = json.loads((Path(__file__).parents[1] / "data" / "scenario_digests.json").read_text())
    current = {s.name: s for n in ("smoke", "pr", "nightly", "paper") for s in scenarios.suite(n)}
    assert len(recorded) == len(current)
    for old, digest in recorded.items():
        s = Scenario.parse(old)
        assert s.name in current and current[s.name].spec().digest() == digest, old


@pytest.mark.parametrize("bad", [
    "llama3-8b_b1_s16_d100", "nope_bs16_b1_s16_d100", "llama3-8b_bs16_b1_s16_d100_x",
    "llama3-8b/decode/batch1-kv16", "llama3-8b/decoding/batch1-kv16/block16",
    "llama3-8b/mixed0/batch1-kv16/block16", "llama3-8b/mixed100/batch1-kv16/block16",
    "llama3-8b/decode/batch1-kv16-chunk4-var/block16", "llama3-8b/decode/b1-kv16/block16",
    "llama3-8b/decode/batch1-kv16/bs16", "llama3-8b/decode/batch1-kv16/block16/window",
    "llama3-8b/decode/batch1-kv16/block16/fp8/fp8", "nope/decode/batch1-kv16/block16",
])
def test_bad_names_are_refused(bad):
    with pytest.raises(ValueError):
        Scenario.parse(bad)


@pytest.mark.parametrize("name,decode,prefill_q", [
    ("llama3-8b/prefill/batch8-kv64/block16", 0, [64] * 8),
    ("llama3-8b/decode/batch8-kv64/block16", 8, []),
    ("llama3-8b/mixed50/batch8-kv64/block16", 4, [64] * 4),
    ("llama3-8b/mixed50/batch8-kv64-chunk16/block16", 4, [16] * 4),  # chunked prefill after 48 cached tokens
])
def test_composition(name, decode, prefill_q):
    q, kv = Scenario.parse(name).lengths()
    assert sum(1 for x in q if x == 1) == decode
    assert sorted(x for x in q if x > 1) == prefill_q
    assert kv == [64] * 8


def test_variable_lengths_keep_the_maximum_and_are_reproducible():
    s = Scenario.parse("llama3-8b/mixed50/batch32-kv4096-var/block16")
    q, kv = s.lengths()
    assert max(kv) == 4096 and min(kv) >= 4096 // 8 and len(set(kv)) > 10
    assert s.lengths() == (q, kv)
    assert s.spec().digest() == Scenario.parse(s.name).spec().digest()
    other = Scenario.parse("llama3-8b/decode/batch32-kv4096-var/block16")
    assert other.spec().digest() != s.spec().digest()


def test_spec_carries_model_and_features():
    spec = Scenario.parse("gemma2-9b/mixed50/batch2-kv64/block32/window16/softcap50/sinks/fp8").spec()
    m = MODELS["gemma2-9b"]
    assert (spec.num_q_heads, spec.num_kv_heads, spec.head_size) == (
        m.num_q_heads, m.num_kv_heads, m.head_size)
    assert (spec.block_size, spec.sliding_window, spec.softcap, spec.sinks, spec.fp8_kv) == (
        32, 16, 50.0, True, True)


def test_suites_are_sized_for_their_jobs():
    names = {n: [s.name for s in scenarios.suite(n)] for n in scenarios.suite_names()}
    assert 20 <= len(names["pr"]) <= 30
    assert len(names["nightly"]) >= 150
    assert len(names["paper"]) == 8 * 9 * 3
    assert all(n.startswith("tiny/") for n in names["smoke"])
    for n, items in names.items():
        assert len(items) == len(set(items)), n
        assert all(Scenario.parse(x).name == x for x in items)
    pr = scenarios.suite("pr")
    # every model shape, block size, batch kind and feature appears in the pr suite
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
    fp8_and_phi2 = ["phi-2/decode/batch16-kv1024/block16", "llama3-8b/decode/batch32-kv2048/block16/fp8",
                    "llama3-8b/prefill/batch8-kv1024/block16/fp8"]
    assert [s.name for s in scenarios.select(scenarios.suite("pr"), "*/fp8,phi-2/*")] == fp8_and_phi2
    # globs over the earlier names still select (scripts written before the rename)
    assert [s.name for s in scenarios.select(scenarios.suite("pr"), "*_fp8,phi-2_*")] == fp8_and_phi2
    with pytest.raises(ConfigError, match="matches no scenario"):
        scenarios.select(scenarios.suite("pr"), "zzz*")


def test_anchor_grid_is_the_papers_17_cases_then_the_targets_beyond_them():
    suite = scenarios.suite("anchor")
    short = [s for s in suite if s.decode == 0 and 16 <= s.batch <= 64 and 128 <= s.max_seq <= 512]
    anchor = [s for s in suite if s.decode_len == 1 and not s.fp8 and s not in short]
    decode = {(s.batch, s.max_seq) for s in anchor if s.decode == 100}
    prefill = {(s.batch, s.max_seq) for s in anchor if s.decode == 0}
    assert decode == {(b, k * 1024) for b in (1, 8, 32, 128) for k in (1, 8, 32) if b * k * 1024 <= 2**20}
    assert len(decode) == 11
    assert prefill == {(1, 512), (1, 2048), (1, 8192), (4, 2048), (8, 1024), (1, 16384)}
    assert len(anchor) == 17 and suite[:17] == anchor  # the paper's grid first, in its order
    multi = [s for s in suite if s.decode_len > 1]
    fp8 = [s for s in suite if s.fp8]
    assert len(multi) == 4 and {s.decode_len for s in multi} == {2, 4, 8}
    assert {s.decode for s in multi} == {100}
    assert {(s.batch, s.max_seq, s.decode) for s in fp8} <= {*((b, k, 0) for b, k in prefill),
                                                              *((b, k, 100) for b, k in decode)}
    assert len(short) == 3 and not any(s.fp8 for s in short)  # batches of short prompts
    assert len(suite) == 17 + len(multi) + len(fp8) + len(short)
    for s in suite:  # Llama-3-8B heads, bf16, block 16, uniform lengths, whole-prompt prefills
        assert (s.model, s.dtype, s.block_size, s.variable, s.chunk) == ("llama3-8b", "bf16", 16, False, None)
        spec = s.spec()
        assert set(spec.kv_lens) == {s.max_seq}
        assert set(spec.query_lens) == {s.decode_len if s.decode else s.max_seq}
        assert s.batch * s.max_seq <= 2**20  # at most 4 GiB of KV cache
    assert {s.name for s in scenarios.suite("tune")} <= {s.name for s in anchor}


def test_multi_token_decode_names_say_the_queries_per_sequence():
    s = Scenario.parse("llama3-8b/decode/batch32-kv8192-q4/block16/bf16")
    assert (s.decode, s.decode_len, s.batch, s.max_seq) == (100, 4, 32, 8192)
    assert s.lengths() == ([4] * 32, [8192] * 32)
    assert s.seed_key == "llama3-8b_bs16_b32_s8192_d100_q4_bf16" and Scenario.parse(s.seed_key) == s
    assert s.spec().digest() != Scenario.parse("llama3-8b/decode/batch32-kv8192/block16/bf16").spec().digest()
    mixed = Scenario.parse("llama3-8b/mixed50/batch8-kv64-var-q3-chunk16/block16")
    assert mixed.name == "llama3-8b/mixed50/batch8-kv64-var-q3-chunk16/block16"
    q, kv = mixed.lengths()
    assert sorted(q) == [3] * 4 + [16] * 4 and all(x <= k for x, k in zip(q, kv))
    # q1 is the ordinary decode, spelled without the segment
    ordinary = "llama3-8b/decode/batch1-kv16/block16"
    assert Scenario.parse("llama3-8b/decode/batch1-kv16-q1/block16").name == ordinary
    for bad in ("llama3-8b/prefill/batch1-kv16-q4/block16",  # a prefill has no decode sequences
                "llama3-8b/decode/batch1-kv4-q8/block16",  # more queries than keys
                "llama3-8b/decode/batch1-kv16-q0/block16", "llama3-8b/decode/batch1-kv16-chunk4-q2/block16"):
        with pytest.raises(ValueError):
            Scenario.parse(bad)


def test_multi_token_decode_suites():
    spec = scenarios.suite("spec-decode")
    assert {s.decode_len for s in spec} >= {1, 2, 4, 5, 8} and {s.decode for s in spec} == {100}
    assert {s.batch for s in spec} >= {1, 256} and {s.max_seq for s in spec} >= {1024, 32768}
    assert all(s.batch * s.max_seq <= 2**20 for s in spec)  # 4 GiB of Llama-3-8B cache at most
    by_group: dict[int, set] = {}
    for s in spec:  # head groups that are not a power of two, with 2-8 queries per sequence
        group = MODELS[s.model].num_q_heads // MODELS[s.model].num_kv_heads
        by_group.setdefault(group, set()).add(s.decode_len)
    assert {4, 5, 7, 8} <= set(by_group) and all(by_group[g] >= {2, 4, 5, 8} for g in (4, 5, 7, 8))
    pr = [s for s in scenarios.suite("pr") if s.decode_len > 1]
    assert len(pr) == 2  # the gate runs on every pull request: two cases, each side of one Q-block
    assert len([s for s in scenarios.suite("nightly") if s.decode_len > 1]) >= 4


def test_scenarios_without_calibration_take_the_vendor_floor_and_say_so():
    """New scenarios (multi-token decode) are not in calibration/nvidia.yaml until `perf calibrate`
    runs again: the gate must use the vendor's uncalibrated thresholds for them, and say so."""
    from perf.latency.analysis import threshold_for
    from perf.thresholds import calibration_path, load_calibration, load_thresholds

    th = load_thresholds(str(Path(__file__).parents[2] / "thresholds.yaml"))
    cal = load_calibration(calibration_path(th.path, "nvidia"))
    floor = th.latency("nvidia", "static_grid", "x", "graph")
    new = [s.name for s in scenarios.suite("pr") if s.decode_len > 1]
    for name in new:
        assert cal.case("static_grid", name, "graph") is None
        t, var, df = threshold_for(th, "nvidia", cal, ("static_grid", name, "graph"), 3, 10)
        assert (t.warn, t.fail, var, df) == (floor.warn, floor.fail, None, None)
        assert not t.calibrated and t.source == "nvidia.latency"  # the findings note "uncalibrated default"


def test_names_are_safe_where_they_become_file_names():
    from perf.nightly.selection import slug

    for s in scenarios.suite("nightly"):
        assert "," not in s.name and " " not in s.name  # --scenarios and asv's params split on neither
        assert "/" not in slug(s.name) and slug(s.name)


GRID = "{model: tiny, batch: 1, max_seq: 16, decode: 0}"


@pytest.mark.parametrize("text,says", [
    ("", "expected a mapping of suite names to suites, got nothing"),
    ("- smoke\n", "got list"),
    ("{}\n", "got an empty mapping"),
    ("a: {scenarios: [tiny/decode/batch1-kv16/block16]}\na: {grids: [" + GRID + "]}\n",
     "key 'a' is given twice"),
    ("a:\n", "a: a suite is a mapping"),
    ("a: {scenarios: []}\n", "a: the suite has no scenarios"),
    ("a: {scenario: [tiny/decode/batch1-kv16/block16]}\n", "a.scenario: unknown key"),
    ("a: {scenarios: tiny/decode/batch1-kv16/block16}\n", "a.scenarios: expected a list"),
    ("a: {scenarios: [42]}\n", "a.scenarios[0]: a scenario is a name"),
    ("a: {scenarios: [tiny/decoding/batch1-kv16/block16]}\n", "a.scenarios[0]: scenario"),
    ("a: {grids: [[1]]}\n", "a.grids[0]: a grid is a mapping"),
    ("a: {grids: [{model: tiny, batch: 1, max_seq: 16}]}\n", "a.grids[0]: missing axis 'decode'"),
    ("a: {grids: [{model: tiny, batch: [], max_seq: 16, decode: 0}]}\n", "a.grids[0].batch: an empty list"),
    ("a: {grids: [{model: tiny, batch: true, max_seq: 16, decode: 0}]}\n", "batch must be an integer > 0"),
    ("a: {grids: [{model: tiny, batch: '1', max_seq: 16, decode: 0}]}\n", "batch must be an integer > 0"),
    ("a: {grids: [{model: tiny, batch: 1.5, max_seq: 16, decode: 0}]}\n", "batch must be an integer > 0"),
    ("a: {grids: [{model: tiny, batch: 1, max_seq: 16, decode: 0, window: 0}]}\n", "window must be null or"),
    ("a: {grids: [{model: tiny, batch: 1, max_seq: 16, decode: 0, fp8: 1}]}\n", "fp8 must be true or false"),
    ("a: {grids: [{model: tiny, batch: 1, max_seq: 16, decode: 101}]}\n", "decode is a percentage"),
    ("a: {grids: [{model: nope, batch: 1, max_seq: 16, decode: 0}]}\n", "unknown model"),
    ("a: {grids: [{model: tiny, batch: 1, max_seq: 16, decode: 0, dtype: fp64}]}\n", "unknown dtype"),
    ("a: {grids: [{model: tiny, batch: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "
     "max_seq: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], decode: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "
     "block_size: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}]}\n",
     "expands to more than"),
    ("a: {description: [x], grids: [" + GRID + "]}\n", "a.description: must be text"),
    ("1: {grids: [" + GRID + "]}\n", "suite name 1 is not a name"),
    # the whole file is checked, not only the suite asked for
    ("ok: {grids: [" + GRID + "]}\nbad: {scenarios: [nope]}\n", "bad.scenarios[0]"),
])
def test_a_suites_file_is_validated_whole(tmp_path, text, says):
    p = tmp_path / "suites.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        scenarios.suite("ok" if text.startswith("ok:") else "a", str(p))
    msg = str(err.value)
    assert msg.startswith(f"{p}: ") and says in msg and "\n" not in msg, msg


def test_suites_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"suites file not found"):
        scenarios.suite_names(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"is a directory"):
        scenarios.suite_names(str(tmp_path))
    p = tmp_path / "suites.yaml"
    p.write_bytes(b"a: {grids: [" + GRID.encode() + b"]}\n# \xff\n")
    with pytest.raises(ConfigError, match=r"not UTF-8"):
        scenarios.suite_names(str(p))


def test_suites_are_parsed_once_per_content_of_the_file(tmp_path, monkeypatch):
    p = tmp_path / "suites.yaml"
    p.write_text("a: {grids: [" + GRID + "]}\n")
    parsed = []
    real = scenarios.files.parse_yaml
    monkeypatch.setattr(scenarios.files, "parse_yaml", lambda *a: parsed.append(1) or real(*a))
    for _ in range(3):
        assert [s.name for s in scenarios.suite("a", str(p))] == ["tiny/prefill/batch1-kv16/block16"]
    assert len(parsed) == 1
    stat = os.stat(p)
    p.write_text("a: {grids: [" + GRID.replace("batch: 1", "batch: 2") + "]}\n")  # same size
    os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time
    assert [s.name for s in scenarios.suite("a", str(p))] == ["tiny/prefill/batch2-kv16/block16"]
    assert len(parsed) == 2
