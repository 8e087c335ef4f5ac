"""What `Config.pdl_reduce` compiles to for sm_90, on a CPU: the attention kernel's one
`griddepcontrol.launch_dependents` and the reduction's one `griddepcontrol.wait` where the planner
applies it, neither where it does not, the reduction's `launch_pdl` option with them, and not one
register or spilled byte more (ptxas of the triton wheel, as the static gate reads it). In a
subprocess: a compile needs Triton's real JITFunctions, not the interpreter's. About 5 s.
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
PROBE = r"""
import json
import triton
from triton.compiler import ASTSource
import kernels
from kernels.batch import BatchSpec, build_batch
from kernels.paged_attention.heuristics import Config
from perf.static import metrics, plan
from perf.thresholds import load_thresholds

target = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
spec = BatchSpec((1, 1, 1), (700, 33, 1500), num_q_heads=8, num_kv_heads=2, head_size=64)
batch = build_batch(spec, "cpu", fill=False)
facts = {}
for pdl in (False, True):
    config = Config(16, 32, 3, num_warps=2, num_stages=2, seq_items=True, pdl_reduce=pdl)
    for launch in plan.plan_as_if_on(target, kernels.VARIANTS["static_grid"], batch, config=config):
        signature, constexprs, attrs, options = plan.bind(launch, target)
        compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                                  target=target.gpu_target(), options=options.__dict__)
        ptx = compiled.asm["ptx"]
        facts[f"{launch.name} {pdl}"] = {
            "wait": ptx.count("griddepcontrol.wait"), "launch": ptx.count("griddepcontrol.launch_dependents"),
            "launch_pdl": compiled.metadata.launch_pdl, "ptxas": metrics.run_ptxas(ptx, 90)}
print(json.dumps(facts))
"""


def test_sm90_holds_the_dependent_launch_only_where_planned_and_costs_no_registers():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    resources = {name: metrics.parse_ptxas(f.pop("ptxas")) for name, f in facts.items()}
    assert facts == {
        "q_block_kernel False": {"wait": 0, "launch": 0, "launch_pdl": False},
        "reduce_segments_kernel False": {"wait": 0, "launch": 0, "launch_pdl": False},
        "q_block_kernel True": {"wait": 0, "launch": 1, "launch_pdl": False},
        "reduce_segments_kernel True": {"wait": 1, "launch": 0, "launch_pdl": True},
    }
    for kernel in ("q_block_kernel", "reduce_segments_kernel"):
        off, on = resources[f"{kernel} False"], resources[f"{kernel} True"]
        assert (on["registers"], on["spill_stores"]) == (off["registers"], off["spill_stores"]), kernel
