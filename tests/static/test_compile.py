"""Static gate, fast parts: planning as if on a target, metric parsing, verdict rules.

Nothing here compiles (tests/static/test_compile_gate.py does, in subprocesses): these run in
the test process, where Triton's interpreter is active.
"""

from __future__ import annotations

import copy

import pytest
import torch

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from perf.errors import ConfigError
from perf.scenarios import Scenario
from perf.static import gate, plan
from perf.static import metrics as sm
from perf.thresholds import load_thresholds, parse_thresholds
from perf.vendor import TARGETS
from perf.verdicts import Verdict


@pytest.fixture(scope="module")
def thresholds():
    return load_thresholds("thresholds.yaml")


@pytest.fixture(scope="module")
def targets(thresholds):
    return {t.name: t for t in plan.load_targets(thresholds)}


@pytest.mark.parametrize("spec", [
    BatchSpec((1, 7, 1), (40, 23, 100)),
    BatchSpec((3,), (33,), num_q_heads=5, num_kv_heads=1, head_size=80, block_size=544, fp8_kv=True,
              sliding_window=8, softcap=30.0, sinks=True),
    BatchSpec((1, 1), (16, 17), head_size=64, dtype="bfloat16", block_size=32),
])
def test_unfilled_batch_matches_the_filled_one(spec):
    """What the static gate plans with: every property a compiler can see equals the real
    batch's (shapes, dtypes, strides, block table, metadata, option keys); only values differ."""
    real, empty = build_batch(spec), build_batch(spec, fill=False)
    for a, b in zip(real.args(), empty.args()):
        assert (a.shape, a.dtype, a.stride()) == (b.shape, b.dtype, b.stride())
    for a, b in ((real.block_table, empty.block_table), (real.cu_seqlens_q, empty.cu_seqlens_q),
                 (real.seq_lens, empty.seq_lens)):
        assert torch.equal(a, b)
    assert real.options.keys() == empty.options.keys()
    for key, value in real.options.items():
        other = empty.options[key]
        if isinstance(value, torch.Tensor):
            assert (value.shape, value.dtype) == (other.shape, other.dtype), key
        else:
            assert value == other, key


class _Recorder:
    """A stand-in variant whose plan records the target hints it was given."""

    def plan(self, *args, out=None, vendor=None, num_sms=None, **options):
        self.seen = (vendor, num_sms)
        return out, ["launch"]


def test_plan_as_if_on_passes_the_target_as_hints_without_touching_the_platform(targets):
    before = platform.current()
    batch = build_batch(BatchSpec((1,), (16,)), fill=False)
    for t in targets.values():
        variant = _Recorder()
        assert plan.plan_as_if_on(t, variant, batch) == ["launch"]
        assert variant.seen == (t.vendor, sm.TARGET_FACTS[t.name].num_sms)
    assert platform.current() is before


def test_plans_follow_the_target_vendors_heuristics(targets):
    """The production variant planned 'as if on' each target carries that vendor's choice."""
    from kernels.paged_attention import heuristics

    batch = build_batch(Scenario.parse("llama3-8b/prefill/batch1-kv512/block16").spec(), fill=False)
    planned = {}
    for name in ("sm_90", "sm_100", "gfx942", "gfx950"):
        t = targets[name]
        launches = plan.plan_as_if_on(t, VARIANTS["static_grid"], batch)
        f = heuristics.features_from_call(batch.q, batch.k_cache, batch.block_table,
                                          num_sms=t.facts.num_sms, vendor=t.vendor)
        want = heuristics.choose(t.vendor, f)
        main = launches[0]
        assert (main.num_warps, main.num_stages, main.vendor_options) == (
            want.num_warps, want.num_stages, want.vendor_options(t.vendor))
        planned[name] = main.config()
    assert planned["sm_90"] != planned["gfx942"]
    # a target of the same vendor takes that vendor's tree (no architecture branch yet)
    assert planned["sm_100"]["constexprs"] == planned["sm_90"]["constexprs"]
    assert planned["gfx950"]["constexprs"] == planned["gfx942"]["constexprs"]


@pytest.mark.parametrize("host", [platform.Platform("nvidia", "sm_90", "NVIDIA H200", 32, 132),
                                  platform.Platform("nvidia", "sm_100", "NVIDIA B200", 32, 148),
                                  platform.Platform("amd", "gfx942", "AMD Instinct MI300X", 64, 304),
                                  platform.Platform("cpu", "interpreter", "Triton interpreter", 32, 0)],
                         ids=lambda p: p.arch)
def test_a_plan_as_if_on_a_target_takes_the_gluon_kernel_only_for_sm90_on_sm90(monkeypatch, targets, host):
    """The static gate's plan of a prefill for each target (`plan_as_if_on`), on each kind of host: the
    Gluon kernel (sm_90's) only for sm_90 planned on an sm_90 GPU, as it runs there; every other pair
    the Q-block kernel, as planned from a CPU in CI (an sm_90 host once planned it for sm_100 too)."""
    from kernels.paged_attention import planning

    monkeypatch.setattr(platform, "current", lambda: host)
    batch = build_batch(BatchSpec((2048,), (2048,), num_q_heads=32, num_kv_heads=8), "cpu", fill=False)
    for target in targets.values():
        planning.release_buffers()
        names = [x.name for x in plan.plan_as_if_on(target, VARIANTS["static_grid"], batch)]
        gluon = host.arch == target.name == "sm_90" and planning.gluon_available()
        assert ("ws_prefill_kernel" in names) == gluon, (target.name, names)
        assert platform.current() is host  # given back


def test_a_gluon_kernel_is_compiled_from_gluon_source():
    """The warp-specialized prefill is a Gluon kernel: its IR is built by Gluon's source, the Q-block
    kernel's by Triton's (what `triton.compile` gets in the static gate and the change keys)."""
    pytest.importorskip("triton.experimental.gluon", reason="this Triton has no Gluon (3.6 and later)")
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernels.paged_attention import common, warp_specialized

    assert type(plan.source(warp_specialized.ws_prefill_kernel, {}, {}, {})) is GluonASTSource
    assert type(plan.source(common.q_block_kernel, {}, {}, {})) is ASTSource


@pytest.mark.parametrize("name, num_sms", [("sm_90", 132), ("sm_100", 148), ("gfx942", 304), ("gfx950", 256)])
def test_persistent_grid_is_sized_by_the_targets_own_sm_count(targets, name, num_sms):
    """B200 (148 SMs) and MI355X (256 CUs) plan their own grids, not H100's or MI300X's: the
    persistent grid of a batch with more work items than programs is programs_per_sm x SMs."""
    from kernels.paged_attention import heuristics

    t = targets[name]
    assert t.facts.num_sms == num_sms  # the product's count (perf/vendor.py TARGETS cites it)
    # 1k keys: a short context (<= heuristics.SHORT_CONTEXT keys) would take one program per item
    batch = build_batch(Scenario.parse("llama3-8b/decode/batch128-kv1024/block16").spec(), fill=False)
    [main, *_] = plan.plan_as_if_on(t, VARIANTS["static_grid"], batch)
    f = heuristics.features_from_call(batch.q, batch.k_cache, batch.block_table, num_sms=num_sms,
                                      vendor=t.vendor)
    config = heuristics.choose(t.vendor, f)
    items = 128 * 8 * config.num_segments  # 128 sequences of one Q-block x 8 KV heads x segments
    assert config.programs_per_sm * num_sms < items  # the bound that the SM count decides
    assert main.grid == (config.programs_per_sm * num_sms,)


def test_new_targets_carry_their_documented_limits(targets):
    """perf/vendor.py TARGETS, through thresholds.yaml: 227 KiB of shared memory per block on
    sm_100 as on sm_90, 160 KiB of LDS on gfx950 against gfx942's 64 KiB; the occupancy facts
    agree with them."""
    limits = {n: (t.backend, t.arch, t.warp_size, t.max_shared_memory_bytes, t.max_registers_per_thread)
              for n, t in targets.items()}
    assert limits["sm_100"] == ("cuda", 100, 32, 227 * 1024, 255)
    assert limits["gfx950"] == ("hip", "gfx950", 64, 160 * 1024, 512)
    for name in ("sm_90", "sm_100"):
        facts, limit = targets[name].facts, targets[name].max_shared_memory_bytes
        assert facts.shared_per_unit - facts.shared_reserved_per_block == limit
    assert targets["gfx950"].facts.shared_per_unit == targets["gfx950"].max_shared_memory_bytes


def test_fp8_scenarios_are_planned_in_each_targets_native_format(targets, monkeypatch):
    """gfx942 gets FNUZ caches (Triton's fp8e4b8, converted natively on MI300), sm_90 OCP
    (fp8e4nv): what `plan_side` hands to the binder, i.e. the signatures it compiles. (Binding
    itself needs a real backend, not the interpreter: test_compile_gate.py compiles them.)"""
    from triton._utils import type_canonicalisation_dict as triton_names

    from kernels.inputs import FNUZ_E4M3, FP8_FORMATS, OCP_E4M3, fp8_decoded_in_kernel

    handed = set()

    def recording_bind(launch, target):
        k, v = launch.args["k_cache_ptr"], launch.args["v_cache_ptr"]
        handed.add((target.name, launch.name, k.dtype, v.dtype))
        raise RuntimeError("recorded")  # the entry becomes an error; nothing is compiled

    monkeypatch.setattr(plan, "bind", recording_bind)
    scenario = Scenario.parse("llama3-8b/prefill/batch8-kv1024/block16/fp8")
    plan.plan_side(["qblock", "static_grid"], [scenario], list(targets.values()))
    kernel = {"qblock": "_qblock_kernel", "static_grid": "q_block_kernel"}
    by_name = {fmt.name: d for d, fmt in FP8_FORMATS.items()}  # a target record's fp8 format by name

    def cache(t):  # its native format, or the bytes the kernels decode where its Triton cannot convert it
        dtype = by_name[TARGETS[t.name].fp8]
        return torch.uint8 if fp8_decoded_in_kernel(dtype, t.vendor) else dtype

    assert handed == {(t.name, kernel[v], cache(t), cache(t))
                      for t in targets.values() for v in (t.default_variants or kernel)}
    assert {(t, d) for t, _, d, _ in handed} >= {("gfx942", FNUZ_E4M3), ("sm_90", OCP_E4M3)}
    for dtype, fmt in FP8_FORMATS.items():  # the table's Triton names are Triton's own
        assert triton_names[str(dtype).removeprefix("torch.")] == fmt.triton


def test_a_base_without_fp8_formats_plans_its_only_one(targets, monkeypatch):
    """A checkout older than kernels.inputs.fp8_dtype_for builds its batches as it always
    did (OCP only): the gate passes no fp8_dtype its build_batch would not take."""
    from kernels import inputs

    assert plan.fp8_format(targets["gfx942"]) == {"fp8_dtype": inputs.FNUZ_E4M3}
    monkeypatch.delattr(inputs, "fp8_dtype_for")
    assert plan.fp8_format(targets["gfx942"]) == plan.fp8_format(targets["sm_90"]) == {}


def test_unknown_target_and_filter_are_config_errors(thresholds):
    names = ", ".join(t.name for vt in thresholds.vendors.values() for t in vt.targets)
    with pytest.raises(ConfigError, match=rf"--targets 'sm_90,sm_1': sm_1 not in .*some of: {names}$"):
        plan.load_targets(thresholds, "sm_90,sm_1")
    broken = copy.deepcopy(thresholds.raw)
    broken["nvidia"]["compile"]["targets"][0]["name"] = "sm_77"
    with pytest.raises(ConfigError, match=r"nvidia\.compile\.targets\[0\]\.name: no hardware facts"):
        plan.load_targets(parse_thresholds(broken, "thresholds.yaml"))  # refused with the file
    # given every key thresholds.yaml may hold, it loads; planning needs the rest of a record
    broken["nvidia"]["compile"]["targets"][0].update(
        backend="cuda", arch=77, warp_size=32, max_shared_memory_bytes=1024, max_registers_per_thread=255)
    with pytest.raises(ConfigError, match=r"nvidia\.compile\.targets\[0\]\.name: no hardware facts for "
                                          r"'sm_77' .*; add it to perf/vendor\.py TARGETS"):
        plan.load_targets(parse_thresholds(broken, "thresholds.yaml"))


def test_a_base_without_the_variant_skips_it(targets):
    """The base side may predate a variant the head adds: skipped with the reason, not refused."""
    scenario = Scenario.parse("llama3-8b_bs16_b1_s512_d0")
    entries, jobs = plan.plan_side(["no_such_variant"], [scenario], list(targets.values()))
    assert not jobs and {e["status"] for e in entries} == {"skip"}
    assert "not registered in this checkout" in entries[0]["error"]


def test_new_targets_compile_their_default_variants_unless_named(targets):
    """sm_100 and gfx950 compile static_grid only (thresholds.yaml default_variants, CI time),
    unless `--variants` names others; sm_90 and gfx942 compile every variant."""
    scenario = Scenario.parse("llama3-8b/decode/batch1-kv128/block16")
    both = {"qblock", "static_grid"}
    default = {n: set(t.default_variants or both) for n, t in targets.items()}
    assert (default["sm_90"], default["gfx942"], default["sm_100"], default["gfx950"]) == (
        both, both, {"static_grid"}, {"static_grid"})
    for named, want in ((False, default), (True, {t: both for t in targets})):
        entries, _ = plan.plan_side(["qblock", "static_grid"], [scenario], list(targets.values()),
                                    named=named)
        planned: dict[str, set] = {}
        for e in entries:
            planned.setdefault(e["target"], set()).add(e["variant"])
        assert planned == want, named


def test_default_variants_are_checked_against_the_registry(thresholds):
    raw = copy.deepcopy(thresholds.raw)
    raw["nvidia"]["compile"]["targets"][1]["default_variants"] = ["static_gird"]
    misspelled = parse_thresholds(raw, "thresholds.yaml")
    with pytest.raises(ConfigError, match=r"thresholds.yaml: nvidia.compile.targets\[1\].default_variants: "
                                          r"static_gird: unknown variant static_gird; registered: naive"):
        plan.load_targets(misspelled, registered=VARIANTS)
    raw["nvidia"]["compile"]["targets"][1]["default_variants"] = "static_grid"
    with pytest.raises(ConfigError, match=r"default_variants: must be a non-empty list of variant names"):
        parse_thresholds(raw, "thresholds.yaml")


@pytest.mark.parametrize("key", ["new_spill", "registers_ratio", "occupancy"])
def test_misspelled_static_key_is_refused_naming_the_valid_ones(thresholds, key):
    raw = copy.deepcopy(thresholds.raw)
    raw["amd"]["compile"]["static"][key] = "ignore"
    with pytest.raises(ConfigError) as err:
        parse_thresholds(raw, "thresholds.yaml")
    msg = str(err.value)
    assert msg.startswith(f"thresholds.yaml: amd.compile.static.{key}: unknown key")
    assert "new_spills" in msg and "occupancy_drop" in msg


def test_static_keys_left_out_take_the_documented_defaults(thresholds):
    from perf.vendor_thresholds import STATIC_DEFAULTS

    raw = copy.deepcopy(thresholds.raw)
    raw["amd"]["compile"]["static"] = {"occupancy_drop": "fail"}
    policy = parse_thresholds(raw, "thresholds.yaml").vendor("amd").static
    assert policy == {**STATIC_DEFAULTS, "occupancy_drop": "fail"}


# ---------------------------------------------------------------- parsers and occupancy

PTXAS = """ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '_qblock_kernel' for 'sm_90a'
ptxas info    : Function properties for _qblock_kernel
    32 bytes stack frame, 28 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 32 bytes cumulative stack size
"""

AMDGCN = """\t.text
; Kernel info:
; NumVgprs: 82
; NumAgprs: 12
; TotalNumVgprs: 96
; Occupancy: 5
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     12
    .group_segment_fixed_size: 0
    .name:           _qblock_kernel
    .private_segment_fixed_size: 284
    .sgpr_count:     56
    .sgpr_spill_count: 3
    .vgpr_count:     96
    .vgpr_spill_count: 7
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
...
\t.end_amdgpu_metadata
"""


# What the ptxas of the triton 3.6 wheel printed for a prefill configuration of ours whose
# K/V offsets were summed in another order (sm_90, 2026-11-24).
SERIALIZED = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
              "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
              "between start and end of the pipeline stage in the function 'q_block_kernel'\n")


def test_parse_ptxas():
    assert sm.parse_ptxas(PTXAS) == {"registers": 255, "stack_frame": 32, "spill_stores": 28,
                                     "spill_loads": 24, "wgmma_serialized": 0}
    assert sm.parse_ptxas(SERIALIZED + PTXAS)["wgmma_serialized"] == 1
    with pytest.raises(ValueError):
        sm.parse_ptxas("ptxas info    : 0 bytes gmem\n")


def test_parse_amdgcn():
    m = sm.parse_amdgcn(AMDGCN)
    assert m == {"registers": 96, "arch_vgprs": 82, "agprs": 12, "sgprs": 56, "vgpr_spills": 7,
                 "sgpr_spills": 3, "scratch": 284, "static_lds": 0, "compiler_occupancy": 5}


def test_occupancy_rules():
    h100, mi300 = sm.TARGET_FACTS["sm_90"], sm.TARGET_FACTS["gfx942"]
    # 255 registers: 8192 per warp after rounding to 256, one 8-warp block per SM.
    assert sm.nvidia_occupancy(255, 0, 8, h100) == 8
    assert sm.nvidia_occupancy(32, 0, 4, h100) == 64  # the 64-warp limit
    assert sm.nvidia_occupancy(32, 100 * 1024, 4, h100) == 8  # 228 KiB / (100 + 1) KiB = 2 blocks
    assert sm.amd_occupancy(5, 8192, 4, mi300) == 5  # register-limited
    assert sm.amd_occupancy(8, 32768, 4, mi300) == 2  # 2 workgroups x 4 waves over 4 SIMDs
    assert sm.amd_occupancy(8, 98304, 8, mi300) == 0  # LDS over the CU's 64 KiB: cannot launch


# ---------------------------------------------------------------- verdict rules


def _doc(targets, entries):
    return {"targets": [vars(t) for t in targets.values()], "entries": entries}


def _entry(target, vendor, **metrics):
    base = ({"registers": 88, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0} if vendor == "nvidia"
            else {"registers": 92, "arch_vgprs": 80, "agprs": 12, "sgprs": 46, "vgpr_spills": 0,
                  "sgpr_spills": 0, "scratch": 0})
    base.update(shared_memory=12800, occupancy=5, compile_time_s=0.5)
    base.update(metrics)
    return {"variant": "qblock", "scenario": "s", "target": target, "vendor": vendor, "kernel": "_k",
            "occurrence": 0, "status": "ok", "metrics": base, "error": ""}


def _verdicts(findings):
    return {f.metric.split("/")[-1]: f.verdict for f in findings}


@pytest.mark.parametrize("change, metric, verdict", [
    ({}, None, None),  # A/A: nothing warns or fails
    ({"vgpr_spills": 4}, "vgpr_spills", Verdict.FAIL),
    ({"sgpr_spills": 1}, "sgpr_spills", Verdict.FAIL),
    ({"registers": 104}, "registers", Verdict.WARN),  # +13 %
    ({"registers": 120}, "registers", Verdict.FAIL),  # +30 % > registers_fail_ratio 1.25
    ({"shared_memory": 65536 + 1}, "shared_memory", Verdict.FAIL),
    ({"occupancy": 4}, "occupancy", Verdict.WARN),
    ({"registers": 64, "occupancy": 8}, "occupancy", Verdict.IMPROVED),
])
def test_rules_amd(thresholds, targets, change, metric, verdict):
    base = _doc(targets, [_entry("gfx942", "amd")])
    head = _doc(targets, [_entry("gfx942", "amd", **change)])
    v = _verdicts(gate.compare(base, head, thresholds))
    bad = {m: x for m, x in v.items() if x in (Verdict.FAIL, Verdict.WARN)}
    if metric is None:
        assert not bad
    else:
        assert v[metric] is verdict


def test_registers_are_compared_per_program_when_the_warp_count_changes(thresholds, targets):
    """Halving the warps gives each thread twice the work: 142 -> 204 registers per thread with
    4 -> 2 warps (H100-measured short-context decode) is 568 -> 408 per program, not a +44 %
    regression; with the warps unchanged the same numbers fail."""
    def side(registers, warps):
        entry = _entry("sm_90", "nvidia", registers=registers)
        return _doc(targets, [{**entry, "config": {"num_warps": warps}}])

    [f] = [f for f in gate.compare(side(142, 4), side(204, 2), thresholds) if f.metric.endswith("registers")]
    assert f.verdict is Verdict.IMPROVED and "per program: 142 x 4 warps -> 204 x 2 warps" in f.note
    [f] = [f for f in gate.compare(side(142, 4), side(204, 4), thresholds) if f.metric.endswith("registers")]
    assert f.verdict is Verdict.FAIL
    [f] = [f for f in gate.compare(side(100, 2), side(140, 4), thresholds) if f.metric.endswith("registers")]
    assert f.verdict is Verdict.FAIL  # more warps and more registers each: 200 -> 560 per program


def test_shared_memory_limit_is_the_targets_own(thresholds, targets):
    """64 -> 70 KiB of LDS (within the 1.10 warn ratio) cannot launch on gfx942 (64 KiB) but
    can on gfx950 (160 KiB); 228 KiB of shared memory is over sm_100's 227 KiB per block."""
    for name, verdict in (("gfx942", Verdict.FAIL), ("gfx950", Verdict.OK)):
        base = _doc(targets, [_entry(name, "amd", shared_memory=64 * 1024)])
        head = _doc(targets, [_entry(name, "amd", shared_memory=70 * 1024)])
        assert _verdicts(gate.compare(base, head, thresholds))["shared_memory"] is verdict, name
    base = _doc(targets, [_entry("sm_100", "nvidia")])
    head = _doc(targets, [_entry("sm_100", "nvidia", shared_memory=228 * 1024)])
    [f] = [f for f in gate.compare(base, head, thresholds) if f.metric.endswith("shared_memory")]
    assert f.verdict is Verdict.FAIL and "cannot launch on sm_100" in f.note


@pytest.mark.parametrize("rule, verdict",
                         [("warn", Verdict.WARN), ("fail", Verdict.FAIL), ("ignore", Verdict.OK)])
def test_a_target_triton_cannot_compile_for_is_a_finding(thresholds, targets, rule, verdict):
    """One finding per such target, whatever the base, with the compiler's reason and the
    vendor's `target_not_compilable` verdict (warn by default)."""
    from perf.vendor_thresholds import STATIC_DEFAULTS

    assert STATIC_DEFAULTS["target_not_compilable"] == "warn"
    raw = copy.deepcopy(thresholds.raw)
    raw["amd"]["compile"]["static"]["target_not_compilable"] = rule
    policy = parse_thresholds(raw, "thresholds.yaml")
    head = {**_doc(targets, [_entry("gfx942", "amd")]), "triton": "3.6.0",
            "cannot_compile": {"gfx950": "RuntimeError: unsupported target: 'gfx950'"}}
    for base in (_doc(targets, [_entry("gfx942", "amd")]), {"comparable": False}):
        [f] = [f for f in gate.compare(base, head, policy) if f.target == "gfx950"]
        assert (f.verdict, f.vendor, f.metric, f.threshold) == (verdict, "amd", "compiles",
                                                                f"target_not_compilable: {rule}")
        assert f.note == ("target gfx950: Triton 3.6.0 cannot compile for it: "
                          "RuntimeError: unsupported target: 'gfx950'")


@pytest.mark.parametrize("kind, text, want", [
    ("PTXASError", "PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n"
     "ptxas-blackwell fatal   : Value 'sm_110a' is not defined for option 'gpu-name'\n\n"
     "Repro command: ptxas ...", "PTXASError: Value 'sm_110a' is not defined for option 'gpu-name'"),
    ("RuntimeError", "PassManager::run failed\n#blocked = ...\n/x/probe.py:37:0: error: unsupported target: "
     "'gfx9999'\n/x/probe.py:37:0: note: Pipeline failed", "RuntimeError: unsupported target: 'gfx9999'"),
    ("the compiler died (SIGABRT)",
     "'sm_99a' is not a recognized processor for this target (ignoring processor)\n"
     "LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.ldmatrix",
     "the compiler died (SIGABRT): Cannot select: intrinsic %llvm.nvvm.ldmatrix"),
    ("ValueError", "something   else\nand more", "ValueError: something else"),
])
def test_probe_reason_is_the_compilers_own_line(kind, text, want):
    """What Triton 3.6 printed for sm_110, gfx9999 and sm_99 (perf/static/probe.py docstring)."""
    from perf.static import probe

    assert probe.reason(kind, text) == want


def test_rules_nvidia_spills_and_shared_limit(thresholds, targets):
    base = _doc(targets, [_entry("sm_90", "nvidia")])
    head = _doc(targets, [_entry("sm_90", "nvidia", spill_stores=48, spill_loads=48, shared_memory=232449)])
    findings = gate.compare(base, head, thresholds)
    v = _verdicts(findings)
    assert v["spill_stores"] is v["spill_loads"] is v["shared_memory"] is Verdict.FAIL
    assert all(f.target == "sm_90" and f.vendor == "nvidia" for f in findings)


def test_rules_nvidia_wgmma_serialization(thresholds, targets):
    """Serialized wgmma fails (no spill need come with it); its end is an improvement; a
    metrics document without the key (AMD, or older metrics) is never judged on it."""
    calm = _entry("sm_90", "nvidia", wgmma_serialized=0)
    serial = _entry("sm_90", "nvidia", wgmma_serialized=1)
    v = _verdicts(gate.compare(_doc(targets, [calm]), _doc(targets, [serial]), thresholds))
    assert v["wgmma_serialized"] is Verdict.FAIL and v["spill_stores"] is Verdict.OK
    v = _verdicts(gate.compare(_doc(targets, [serial]), _doc(targets, [calm]), thresholds))
    assert v["wgmma_serialized"] is Verdict.IMPROVED
    v = _verdicts(gate.compare(_doc(targets, [serial]), _doc(targets, [serial]), thresholds))
    assert v["wgmma_serialized"] is Verdict.OK
    v = _verdicts(gate.compare(_doc(targets, []), _doc(targets, [serial]), thresholds))  # a new kernel
    assert v["wgmma_serialized"] is Verdict.FAIL
    amd = _doc(targets, [_entry("gfx942", "amd")])
    assert "wgmma_serialized" not in _verdicts(gate.compare(amd, amd, thresholds))


def test_no_longer_compiles_fails_with_the_message_and_target(thresholds, targets):
    base = _doc(targets, [_entry("gfx942", "amd")])
    broken = {**_entry("gfx942", "amd"), "status": "error", "metrics": {},
              "error": "CompilationError: out of LDS"}
    [f] = gate.compare(base, _doc(targets, [broken]), thresholds)
    assert f.verdict is Verdict.FAIL and f.target == "gfx942"
    assert "no longer compiles" in f.note and "gfx942" in f.note and "out of LDS" in f.note
    # failing on both sides is known, not new: a warning
    [f] = gate.compare(_doc(targets, [broken]), _doc(targets, [broken]), thresholds)
    assert f.verdict is Verdict.WARN
    # a type the target does not support, on both sides: reported, not a failure
    unsupported = {**broken, "status": "unsupported", "error": "fp8e4nv not supported"}
    [f] = gate.compare(_doc(targets, [unsupported]), _doc(targets, [unsupported]), thresholds)
    assert f.verdict is Verdict.OK and "not supported" in f.note


def test_findings_collapse_over_scenarios(thresholds, targets):
    entries = [{**_entry("gfx942", "amd"), "scenario": s} for s in ("a", "b", "c")]
    findings = gate.compare(_doc(targets, entries), _doc(targets, entries), thresholds)
    assert {f.scenario for f in findings} == {"a (+2)"}


def test_sgpr_spills_can_have_their_own_severity(thresholds, targets):
    base = _doc(targets, [_entry("gfx942", "amd")])
    head = _doc(targets, [_entry("gfx942", "amd", sgpr_spills=5)])
    assert _verdicts(gate.compare(base, head, thresholds))["sgpr_spills"] is Verdict.FAIL  # new_spills
    relaxed = copy.deepcopy(thresholds.raw)
    relaxed["amd"]["compile"]["static"]["new_sgpr_spills"] = "warn"
    from perf.thresholds import parse_thresholds

    v = _verdicts(gate.compare(base, head, parse_thresholds(relaxed, "thresholds.yaml")))
    assert v["sgpr_spills"] is Verdict.WARN


def test_not_comparable_base_reports_without_failing(thresholds, targets):
    head = _doc(targets, [_entry("gfx942", "amd", vgpr_spills=3)])
    findings = gate.compare({"comparable": False}, head, thresholds)
    [f] = [f for f in findings if f.metric.endswith("vgpr_spills")]
    assert f.verdict is Verdict.OK and f.note.startswith("base not comparable; would be fail")


def test_each_case_is_planned_with_the_host_hints_the_harness_passes(targets):
    """The static gate compiles what the latency gate times: each case planned with the host hints a
    serving engine passes (`cases.host_hints`). A multi-token decode is where they change the plan
    (without them, 64-row Q-blocks in tiles of 128 that spilled 168 B on sm_90)."""
    from perf.measure.cases import host_hints

    scenario = Scenario.parse("llama3-8b/decode/batch4-kv1024-q5/block16/bf16")
    target = targets["sm_90"]
    entries, _ = plan.plan_side(["static_grid"], [scenario], [target], named=True)
    batch = build_batch(scenario.spec(), "cpu", fill=False)
    hints = host_hints(VARIANTS["static_grid"], scenario.spec())
    assert set(hints) == {"max_seqlen_q", "max_seqlen_k"}
    variant = VARIANTS["static_grid"]
    hinted = [launch.config() for launch in plan.plan_as_if_on(target, variant, batch, **hints)]
    bare = [launch.config() for launch in plan.plan_as_if_on(target, variant, batch)]
    assert hinted != bare  # else this case would not tell the two apart
    assert [e["config"] for e in entries] == hinted
