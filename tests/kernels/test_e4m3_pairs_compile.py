"""What `Config.v_pairs` compiles to for sm_90, on a CPU: the fp8-cache decode of 32 sequences x 4k
keys (bf16 queries, blocks of 16), as the NVIDIA tree plans it, with the pairs and without. Without
them each thread reads V from shared memory one byte at a time (`ld.shared.b8`: an 8-bit tile has no
transposed ldmatrix); with them V takes transposed ldmatrix of 16-bit pairs and no byte-wide load,
each pair one `cvt.rn.f16x2.e4m3x2`, and ptxas (the wheel's, as the static gate reads it) gives the
kernel fewer registers and spills nothing (triton 3.6.0, 2026-11-30: 255 registers and 8 bytes of
stack -> 168). In a subprocess: a compile needs Triton's real JITFunctions. About 10 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perf.static import metrics  # the static gate's reading of ptxas, here as in the probe

pytestmark = pytest.mark.slow  # starts processes
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = "llama3-8b/decode/batch32-kv4096/block16/fp8/bf16"
PROBE = r"""
import dataclasses, json, sys
import triton
from triton.compiler import ASTSource
import kernels
from kernels.batch import build_batch
from kernels.paged_attention import heuristics
from perf import scenarios
from perf.static import metrics, plan
from perf.thresholds import load_thresholds

target = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
spec = scenarios.Scenario.parse(sys.argv[1]).spec()
batch = build_batch(spec, "cpu", fill=False, **plan.fp8_format(target))
chosen = heuristics.choose("nvidia", heuristics.features_from_spec(spec, target.facts.num_sms))
facts = {"tree": chosen.v_pairs}
for pairs in (False, True):
    config = dataclasses.replace(chosen, v_pairs=pairs)
    launch = plan.plan_as_if_on(target, kernels.VARIANTS["static_grid"], batch, config=config)[0]
    signature, constexprs, attrs, options = plan.bind(launch, target)
    compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                              target=target.gpu_target(), options=options.__dict__)
    ptx = compiled.asm["ptx"]
    facts[str(pairs)] = {"planned": launch.constexprs["V_PAIRS"], "bytes": ptx.count("ld.shared.b8"),
                         "trans": ptx.count(".trans"), "pairs_to_f16": ptx.count("cvt.rn.f16x2.e4m3x2"),
                         "ptxas": metrics.run_ptxas(ptx, 90)}
print(json.dumps(facts))
"""


def test_v_as_pairs_leaves_no_byte_wide_shared_loads_and_fewer_registers():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", PROBE, SCENARIO], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts.pop("tree")  # [e4m3-pairs]
    off, on = facts["False"], facts["True"]
    assert not off["planned"] and on["planned"]
    assert off["bytes"] > 0 and off["trans"] == 0, off
    assert on["bytes"] == 0 and on["trans"] > 0, on
    assert on["pairs_to_f16"] >= off["pairs_to_f16"] > 0  # every K and V pair still converts in one
    before, after = metrics.parse_ptxas(off.pop("ptxas")), metrics.parse_ptxas(on.pop("ptxas"))
    assert after["registers"] < before["registers"] and after["spill_stores"] == 0, (before, after)
