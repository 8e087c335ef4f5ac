"""What `Config.pv_fp16` changes in the fp8-cache prefill, compiled for sm_90 on a CPU (no GPU).

The anchor's fp8 prefill (llama3-8b 1 x 8k, bf16 queries over an OCP e4m3 cache), planned
as static_grid plans it for sm_90, compiled with the knob off and on (in a subprocess: a
compile needs Triton's real JITFunctions, not the interpreter's). Each e4m3 pair reaches
fp16 in one `cvt.rn.f16x2.e4m3x2`; bf16 takes one `cvt.bf16.f16` more per value. With
the knob the V side skips that step (half of them go) and the P V wgmma runs in f16 while
Q K^T stays in bf16; ptxas (the wheel's, as the static gate runs it) spills no more than
without (triton 3.6.0, 2026-11-27: 132 B stored -> 0). Its speed is `perf tune`'s to say
(stage `pv_fp16`). About 10 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from perf.static import metrics  # the static gate's reading of ptxas, here as in the probe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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

target = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
spec = next(s for s in scenarios.suite("anchor") if s.name == sys.argv[1]).spec()
batch = build_batch(spec, "cpu", fill=False, **plan.fp8_format(target))
chosen = heuristics.choose("nvidia", heuristics.features_from_spec(spec, target.facts.num_sms))
facts = {}
for knob in (False, True):
    config = dataclasses.replace(chosen, pv_fp16=knob)
    launches = plan.plan_as_if_on(target, kernels.VARIANTS["static_grid"], batch, config=config)
    launch = next(x for x in launches if x.name.startswith("q_block"))
    signature, constexprs, attrs, options = plan.bind(launch, target)
    compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                              target=target.gpu_target(), options=options.__dict__)
    ptx = compiled.asm["ptx"]
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m\d+n\d+k\d+\.f32\.(\w+)\.(\w+)", ptx)
    facts[str(knob)] = {"PV_FP16": launch.constexprs["PV_FP16"],
                        "e4m3x2_to_f16x2": ptx.count("cvt.rn.f16x2.e4m3x2"),
                        "f16_to_bf16": len(re.findall(r"cvt(?:\.rn)?\.bf16\.f16\b", ptx)),
                        "wgmma": sorted({f"{a}.{b}" for a, b in wgmma}),
                        "ptxas": metrics.run_ptxas(ptx, 90)}
print(json.dumps(facts))
"""


def test_the_knob_multiplies_p_v_in_fp16_and_converts_v_once():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", PROBE, SCENARIO], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    off, on = ({**f, **metrics.parse_ptxas(f.pop("ptxas"))} for f in (facts["False"], facts["True"]))
    assert not off["PV_FP16"] and on["PV_FP16"]
    assert off["wgmma"] == ["bf16.bf16"] and on["wgmma"] == ["bf16.bf16", "f16.f16"], facts
    assert on["e4m3x2_to_f16x2"] == off["e4m3x2_to_f16x2"] > 0, facts  # K and V still convert
    assert 0 < 2 * on["f16_to_bf16"] == off["f16_to_bf16"], facts  # only K goes on to bf16
    assert on["spill_stores"] <= off["spill_stores"], facts
