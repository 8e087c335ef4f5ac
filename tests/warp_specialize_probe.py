"""What Triton's automatic warp specialization does for sm_90, compiled on a CPU (no GPU).

Run as `python -m tests.warp_specialize_probe` without TRITON_INTERPRET (a compile needs
Triton's real JITFunctions): prints one JSON object that tests/kernels/test_warp_specialize.py
checks, and docs/lab/2026-11-27.md ("Warp specialization on sm_90") cites.

The lab's paged loop (`perf.lab.warp_specialize.paged_loop`: `common.attend_tiles`' online
softmax over one cache block per tile, its id read from the block table) with
`tl.range(..., warp_specialize=True)`, K and V read through pointer tensors as the paged
kernel does and through TMA descriptors, each at 4 and 8 warps. And the paged kernel
itself (`q_block_kernel`, as static_grid plans the NVIDIA prefill of llama3-8b 1 x 8k for
sm_90): the constructs Triton's Hopper pass (`NVGPUWarpSpecialization`) declines or cannot
handle.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import triton

BLOCK_N = 64  # a tile of 64 keys (the lab's 3-stage tile)
SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)")  # PTX: registers moved
PREFILL = "llama3-8b/prefill/batch1-kv8192/block16/bf16"  # the anchor prefill the lab notes measure


def _facts(compiled) -> dict:
    """What says whether the loop was warp-specialized: TTGIR partitions, PTX register moves."""
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    return {
        "status": "ok",
        "warp_specialize_ops": ttgir.count("ttg.warp_specialize"),
        "partition_warps": [int(w) for w in re.findall(r"num_warps\((\d+)\)", ttgir)],
        "setmaxnreg": sorted({f"{op} {n}" for op, n in SETMAXNREG.findall(ptx)}),
        "num_warps": compiled.metadata.num_warps,
        "shared": compiled.metadata.shared,
        "loop_attribute_kept": ttgir.count("tt.warp_specialize"),
    }


def _compile(src, num_warps: int, num_stages: int) -> dict:
    from triton.backends.compiler import GPUTarget

    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": num_warps, "num_stages": num_stages})
    except Exception as e:  # the pass's refusal (an assertion inside it) ends as a failed pass pipeline
        return {"status": "error", "error": str(e).strip().splitlines()[-1][:200]}
    return _facts(compiled)


def lab_loops() -> dict:
    """`perf.lab.warp_specialize.paged_loop` (tile 64, 3 stages) with warp specialization asked
    for, K/V through pointers and through descriptors, at 4 and 8 warps."""
    from triton.compiler import ASTSource

    from perf.lab.warp_specialize import BLOCK_M, HEAD, HEADS, KV_HEADS, STAGES, paged_loop

    names = paged_loop.arg_names
    signature = dict(zip(names, ("*bf16",) * 4 + ("*i32", "i32", "i32", "i32", "fp32") + ("constexpr",) * 7))
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    out = {}
    for reads, descriptors in (("pointers", False), ("descriptors", True)):
        given = {"HEADS": HEADS, "GROUP": HEADS // KV_HEADS, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N,
                 "D": HEAD, "DESCRIPTORS": descriptors, "WARP_SPECIALIZE": True}
        constexprs = {(names.index(n),): v for n, v in given.items()}
        for warps in (4, 8):
            src = ASTSource(paged_loop, signature, constexprs, attrs)
            out[f"{reads}/{warps}"] = _compile(src, warps, STAGES[BLOCK_N])
    return out


def paged_prefill() -> dict:
    """The paged kernel's NVIDIA prefill for sm_90 (the heuristics' config), with the loop
    constructs the Hopper pass looks at, read from its TTIR."""
    import torch
    from triton.compiler import ASTSource

    import kernels
    from kernels.batch import build_batch
    from kernels.paged_attention import heuristics
    from perf import scenarios
    from perf.static import plan
    from perf.thresholds import load_thresholds

    target = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
    spec = next(s for s in scenarios.suite("anchor") if s.name == PREFILL).spec()
    batch = build_batch(spec, "cpu", fill=False)
    variant = kernels.VARIANTS["static_grid"]
    # the Q-block kernel's config: on an sm_90 host the tree plans this prefill on the Gluon kernel
    chosen = heuristics.choose(target.vendor, heuristics.features_from_spec(spec, target.facts.num_sms))
    launches = plan.plan_as_if_on(target, variant, batch, out=torch.empty_like(batch.q),
                                  config=dataclasses.replace(chosen, warp_specialized=False))
    launch = next(x for x in launches if x.name.startswith("q_block"))
    signature, constexprs, attrs, options = plan.bind(launch, target)
    compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                              target=target.gpu_target(), options=options.__dict__)
    ttir = compiled.asm["ttir"]
    return {
        "num_warps": launch.num_warps,
        "else_blocks": ttir.count("} else {"),
        "while_loops": ttir.count("scf.while"),
        "descriptor_loads": ttir.count("tt.descriptor_load"),
        "pointer_loads": ttir.count("tt.load "),
        "warp_specialize_ops": compiled.asm["ttgir"].count("ttg.warp_specialize"),
    }


def main() -> int:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("run without TRITON_INTERPRET: the probe compiles for sm_90", file=sys.stderr)
        return 2
    print(json.dumps({"triton": triton.__version__, "lab_loops": lab_loops(),
                      "paged_prefill": paged_prefill()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
