"""What `Config.pv_fp16` (and `.fp8_products`, `.v_pairs`) change in the fp8-cache kernels, compiled
on a CPU.

The anchor's fp8 prefill (llama3-8b 1 x 8k, bf16 queries over an OCP e4m3 cache), planned
as static_grid plans it for sm_90, compiled with the knob off and on (in a subprocess: a
compile needs Triton's real JITFunctions, not the interpreter's). Each e4m3 pair reaches
fp16 in one `cvt.rn.f16x2.e4m3x2`; bf16 takes one `cvt.bf16.f16` more per value. With
the knob the V side skips that step (half of them go) and the P V wgmma runs in f16 while
Q K^T stays in bf16; ptxas (the wheel's, as the static gate runs it) spills no more than
without (triton 3.6.0, 2026-11-27: 132 B stored -> 0). Its speed is `perf tune`'s to say
(stage `pv_fp16`). The other knobs' tests say what each changes. About 20 s of CPU.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from interpreter_support import needs_interpreter

from perf.static import metrics  # the static gate's reading of ptxas, here as in the probe

pytestmark = pytest.mark.slow  # starts processes
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = "llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16"
PROBE = r"""
import dataclasses, json, re, sys
import triton
from triton.compiler import ASTSource
import kernels
from kernels.batch import build_batch
from kernels.paged_attention import heuristics
from perf import scenarios
from perf.static import metrics, plan
from perf.thresholds import load_thresholds

target = next(t for t in plan.load_targets(load_thresholds()) if t.name == sys.argv[2])
facts = {}
for i, (scenario, over) in enumerate(json.loads(sys.argv[1])):
    spec = scenarios.Scenario.parse(scenario).spec()
    batch = build_batch(spec, "cpu", fill=False, **plan.fp8_format(target))
    chosen = heuristics.choose(target.vendor, heuristics.features_from_spec(spec, target.facts.num_sms))
    # the Q-block kernel's knobs: on an sm_90 host the tree plans its prefills on the Gluon kernel
    config = dataclasses.replace(chosen, warp_specialized=False, **over)
    launches = plan.plan_as_if_on(target, kernels.VARIANTS["static_grid"], batch, config=config)
    launch = next(x for x in launches if x.name.startswith("q_block"))
    signature, constexprs, attrs, options = plan.bind(launch, target)
    compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                              target=target.gpu_target(), options=options.__dict__)
    facts[str(i)] = {name: launch.constexprs[name]
                     for name in ("PV_FP16", "QK_FP16", "FP8_PRODUCTS", "V_PAIRS")}
    facts[str(i)]["shared"] = compiled.metadata.shared
    if target.vendor == "amd":
        amdgcn = compiled.asm["amdgcn"]
        facts[str(i)].update(mfma=sorted(set(re.findall(r"v_mfma_\w+", amdgcn))),
                             **metrics.parse_amdgcn(amdgcn))
        continue
    ptx = compiled.asm["ptx"]
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m\d+n\d+k\d+\.f32\.(\w+)\.(\w+)", ptx)
    facts[str(i)].update({"e4m3x2_to_f16x2": ptx.count("cvt.rn.f16x2.e4m3x2"),
                          "byte_loads": ptx.count("ld.shared.b8"), "transposed": ptx.count(".trans"),
                          "f16_to_bf16": len(re.findall(r"cvt(?:\.rn)?\.bf16\.f16\b", ptx)),
                          "wgmma": sorted({f"{a}.{b}" for a, b in wgmma}),
                          "ptxas": metrics.run_ptxas(ptx, 90)})
print(json.dumps(facts))
"""


DECODE = "llama3-8b/decode/batch32-kv4096/block16/fp8/bf16"
# The anchor's fp8 prefills (bf16 queries over an OCP e4m3 cache; on gfx942 FNUZ, its native format).
FP8_PREFILLS = ["llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16",
                "llama3-8b/prefill/batch4-kv2048/block16/fp8/bf16"]
# Every (scenario, Config change) the tests below ask of each target, compiled by one process per
# target (`_probe`): each compile once, and one interpreter start instead of one per test.
REQUESTS = {
    "sm_90": [(SCENARIO, {"pv_fp16": False, "qk_fp16": False, "qk_e4m3": False}),
              (SCENARIO, {"pv_fp16": True, "qk_fp16": False, "qk_e4m3": False}),
              ("llama3-8b/decode/batch64-kv4096/block32/fp8/bf16", {"qk_fp16": False}),
              ("llama3-8b/decode/batch64-kv4096/block32/fp8/bf16", {"qk_fp16": True}),
              (DECODE, {"v_pairs": False}), (DECODE, {}),
              *[(scenario, over) for scenario in FP8_PREFILLS
                for over in ({"qk_e4m3": False}, {"fp8_products": True, "qk_e4m3": False}, {})]],
    "gfx942": [(FP8_PREFILLS[0], {}), (FP8_PREFILLS[0], {"fp8_products": True})],
    "gfx950": [(FP8_PREFILLS[0], {}), (FP8_PREFILLS[0], {"fp8_products": True})],
}
if importlib.util.find_spec("xdist") is not None:  # one worker runs each target's probe once for all tests
    pytestmark = [pytestmark, pytest.mark.xdist_group("fp8_pv_compile")]


def _key(scenario: str, over: dict) -> str:
    return json.dumps([scenario, over], sort_keys=True)


@functools.cache
def _probe(target: str) -> dict:
    """{_key: facts} of every REQUESTS entry of `target`, compiled in one subprocess."""
    requests = REQUESTS[target]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(requests), target], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    return {_key(*request): facts[str(i)] for i, request in enumerate(requests)}


def compiled_facts(scenario: str, *overrides: dict, target: str = "sm_90") -> list[dict]:
    """For each Config change of the scenario's chosen configuration (the target vendor's tree):
    the kernel's constexprs and shared memory; on sm_90 conversion and wgmma counts in its PTX
    and ptxas's resource report, on AMD the MFMA instructions and the AMDGCN metadata's. From
    the target's probe: REQUESTS lists every change a test asks for."""
    known = _probe(target)
    found = [dict(known[_key(scenario, over)]) for over in overrides]
    return [{**f, **metrics.parse_ptxas(f.pop("ptxas"))} if "ptxas" in f else f for f in found]


def test_the_knob_multiplies_p_v_in_fp16_and_converts_v_once():
    off, on = compiled_facts(SCENARIO, {"pv_fp16": False, "qk_fp16": False, "qk_e4m3": False},
                             {"pv_fp16": True, "qk_fp16": False, "qk_e4m3": False})
    facts = {"off": off, "on": on}
    assert not off["PV_FP16"] and on["PV_FP16"]
    assert off["wgmma"] == ["bf16.bf16"] and on["wgmma"] == ["bf16.bf16", "f16.f16"], facts
    assert on["e4m3x2_to_f16x2"] == off["e4m3x2_to_f16x2"] > 0, facts  # K and V still convert
    assert 0 < 2 * on["f16_to_bf16"] == off["f16_to_bf16"], facts  # only K goes on to bf16
    assert on["spill_stores"] <= off["spill_stores"], facts


def test_both_products_in_fp16_leave_no_conversion_to_bf16():
    """`Config.qk_fp16` on the fp8 decode the NVIDIA tree sends it to (64 x 4k, blocks of 32):
    q goes to fp16 once per work item, so K and V reach the products through one
    `cvt.rn.f16x2.e4m3x2` per pair and none to bf16 (512 `cvt.bf16.f16` per thread without it:
    sm_90, triton 3.6.0, 2026-11-28). Both compile to 255 registers; ptxas spilled 24 bytes
    without it and 28 with it that day, which the static gate judges, not this test."""
    off, on = compiled_facts("llama3-8b/decode/batch64-kv4096/block32/fp8/bf16", {"qk_fp16": False},
                             {"qk_fp16": True})
    assert on["QK_FP16"] and not off["QK_FP16"]
    assert off["f16_to_bf16"] > 0 and on["f16_to_bf16"] == 0, (off, on)
    assert on["e4m3x2_to_f16x2"] == off["e4m3x2_to_f16x2"] > 0


def test_the_decodes_v_as_pairs_leaves_no_byte_wide_shared_loads_and_fewer_registers():
    """`Config.v_pairs` on the fp8 decode of 32 x 4k (blocks of 16) as the NVIDIA tree plans it
    ([e4m3-pairs]) against the same launch without: without, each thread reads V from shared memory
    a byte at a time (`ld.shared.b8`: sm_90 has no transposed ldmatrix for 8-bit tiles); with, V
    takes transposed ldmatrix of 16-bit pairs and no byte-wide load, every K and V pair still
    converts in one `cvt.rn.f16x2.e4m3x2`, and ptxas gives fewer registers and spills nothing
    (triton 3.6.0, 2026-11-30: 255 registers and 8 bytes of stack -> 168)."""
    off, on = compiled_facts(DECODE, {"v_pairs": False}, {})
    assert not off["V_PAIRS"] and on["V_PAIRS"], (off, on)
    assert off["byte_loads"] > 0 and off["transposed"] == 0, off
    assert on["byte_loads"] == 0 and on["transposed"] > 0, on
    assert on["e4m3x2_to_f16x2"] >= off["e4m3x2_to_f16x2"] > 0, (off, on)
    assert on["registers"] < off["registers"] and on["spill_stores"] == 0, (off, on)


@needs_interpreter
def test_queries_reach_fp16_scaled_by_a_power_of_two():
    """`common.to_fp16_range` in Triton's interpreter: blocks of any magnitude (bf16's whole
    range) come back exactly once the shift is applied, the largest magnitude in [2^13, 2^14];
    an all-zero block keeps shift 0; a NaN stays in its element; an infinity leaves the shift 0."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", RANGE_PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    for scale, shift, largest, exact in rows["finite"]:
        assert exact and (largest == 0 if scale == 0 else 2 ** 13 <= largest <= 2 ** 14), (scale, shift)
    assert rows["zero_shift"] == 0 and rows["nan_count"] == 1 and rows["inf_shift"] == 0


RANGE_PROBE = r"""
import json
import torch, triton, triton.language as tl
from kernels.paged_attention.common import to_fp16_range

@triton.jit
def probe(x_ptr, y_ptr, s_ptr, M: tl.constexpr, D: tl.constexpr):
    r = tl.arange(0, M)[:, None] * D + tl.arange(0, D)[None, :]
    y, s = to_fp16_range(tl.load(x_ptr + r))
    tl.store(y_ptr + r, y.to(tl.float32))
    tl.store(s_ptr, s)

def run(x):
    y, s = torch.empty_like(x), torch.empty(1)
    probe[(1,)](x, y, s, 16, 32)
    return y, s.item()

gen = torch.Generator().manual_seed(0)
finite = []
for scale in (1e-30, 1e-6, 1.0, 3e4, 1e5, 1e30, 0.0):
    x = (torch.randn(16, 32, generator=gen) * scale).to(torch.bfloat16).float()
    y, shift = run(x)
    finite.append((scale, shift, float(y.abs().max()), bool(torch.equal(y * 2.0 ** shift, x))))
x = torch.randn(16, 32, generator=gen); x[3, 4] = float("nan")
y, _ = run(x)
inf = torch.randn(16, 32, generator=gen); inf[3, 4] = float("inf")
print(json.dumps({"finite": finite, "zero_shift": run(torch.zeros(16, 32))[1],
                  "nan_count": int(torch.isnan(y).sum()), "inf_shift": run(inf)[1]}))
"""


@pytest.mark.parametrize("scenario", FP8_PREFILLS)
def test_fp8_products_run_both_products_on_e4m3_wgmma(scenario):
    """`Config.fp8_products` on the NVIDIA tree's fp8 prefill (128 rows, tile 128, 8 warps, 3 stages,
    both products in fp16 without it): every wgmma takes e4m3 x e4m3 (Q K^T, the causal edge's
    tiles of 32, and P V, although V is MN-major in the cache and an fp8 wgmma reads its B
    operand K-major only), no e4m3 -> f16 conversion is left, and ptxas spills no more (sm_90, triton 3.6.0,
    2026-11-28: 255 registers either way, 48 B spilled without it, 0 with it; shared memory 128
    -> 112 KiB)."""
    off, on = compiled_facts(scenario, {"qk_e4m3": False}, {"fp8_products": True, "qk_e4m3": False})
    assert not off["FP8_PRODUCTS"] and on["FP8_PRODUCTS"] and not on["QK_FP16"], (off, on)
    assert off["wgmma"] == ["f16.f16"] and on["wgmma"] == ["e4m3.e4m3"], (off, on)
    assert off["e4m3x2_to_f16x2"] > 0 and on["e4m3x2_to_f16x2"] == 0, (off, on)
    assert on["spill_stores"] <= off["spill_stores"] and on["shared"] <= off["shared"], (off, on)


@pytest.mark.parametrize("scenario", FP8_PREFILLS)
def test_the_trees_fp8_prefill_puts_q_kt_alone_on_e4m3_wgmma(scenario):
    """The NVIDIA tree's fp8 prefill as it ships ([fp8-qk-e4m3]) against the same launch with both
    products in fp16: Q K^T on e4m3 x e4m3 wgmma, P V on f16, half the e4m3 -> f16 conversions
    (V only) and no more spills (sm_90, triton 3.6.0, 2026-11-29, 1 x 8k: 255 registers and 48 B
    spilled with both products in fp16, 243 and none with this)."""
    off, on = compiled_facts(scenario, {"qk_e4m3": False}, {})
    assert on["FP8_PRODUCTS"] and on["PV_FP16"] and not on["QK_FP16"] and off["QK_FP16"], (off, on)
    assert off["wgmma"] == ["f16.f16"] and sorted(on["wgmma"]) == ["e4m3.e4m3", "f16.f16"], (off, on)
    assert 0 < 2 * on["e4m3x2_to_f16x2"] == off["e4m3x2_to_f16x2"], (off, on)
    assert on["spill_stores"] <= off["spill_stores"], (off, on)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_fp8_products_take_fp8_mfma_on_amd_without_spills(target):
    """The AMD tree's fp8 prefill (64 rows, tile 32, 8 warps) with the knob: fp8 MFMA (gfx942's
    FNUZ cache, gfx950's OCP), no VGPR or SGPR spills, LDS within CDNA3's 64 KiB (triton 3.6.0,
    2026-11-28: gfx942 219 -> 157 VGPRs, 16 -> 10 KiB; gfx950 170 -> 126, 16 -> 10 KiB)."""
    off, on = compiled_facts(FP8_PREFILLS[0], {}, {"fp8_products": True}, target=target)
    assert on["FP8_PRODUCTS"] and all("fp8" in m or "f8f6f4" in m for m in on["mfma"]), (off, on)
    assert not any("fp8" in m for m in off["mfma"]), off
    assert on["vgpr_spills"] == on["sgpr_spills"] == 0 and on["shared"] <= 64 * 1024, on
