"""What Triton's automatic warp specialization does for sm_90, compiled on a CPU (no GPU).

Run as `python -m tests.warp_specialize_probe` without TRITON_INTERPRET (a compile needs
Triton's real JITFunctions): prints one JSON object that tests/test_warp_specialize.py
checks, and docs/kernels.md ("Warp specialization on sm_90") cites.

Small online-softmax loops (Q K^T, exp2, P V, the shape of `common.attend_tiles`) with
`tl.range(..., warp_specialize=True)`: one reading K and V through pointer tensors as the
paged kernel does, one through TMA tensor descriptors, each at 4 and 8 warps, and a paged
one (a block id per tile from a block table, K and V by descriptor) at 4 warps. And the
paged kernel itself (`q_block_kernel`, as static_grid plans the NVIDIA prefill of
llama3-8b 1 x 8k for sm_90): the constructs Triton's Hopper pass
(`NVGPUWarpSpecialization`) declines or cannot handle.
"""

from __future__ import annotations

import json
import os
import re
import sys

import triton
import triton.language as tl

BLOCK_M, BLOCK_N, HEAD = 128, 64, 128  # tile 64: with 128, the partitions' buffers exceed 227 KiB
SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)")  # PTX: registers moved
PREFILL = "llama3-8b/prefill/batch1-kv8192/block16/bf16"  # the anchor prefill the lab notes measure


@triton.jit
def online_softmax_step(q, k_t, v, acc, m, s_sum):
    """One tile of `common.attend_tiles`' loop, unmasked: scores, exp2, rescale, P V."""
    s = tl.dot(q, k_t)
    m_new = tl.maximum(m, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m - m_new)
    return acc * alpha[:, None] + tl.dot(p.to(v.dtype), v), m_new, s_sum * alpha + tl.sum(p, 1)


@triton.jit
def pointer_loop(Q, K, V, O, BT, n_keys, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    q = tl.load(Q + rows[:, None] * D + d[None, :])
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for j in tl.range(0, n_keys // BLOCK_N, warp_specialize=True):
        keys = j * BLOCK_N + tl.arange(0, BLOCK_N)
        k = tl.load(K + keys[None, :] * D + d[:, None])
        v = tl.load(V + keys[:, None] * D + d[None, :])
        acc, m, s_sum = online_softmax_step(q, k, v, acc, m, s_sum)
    tl.store(O + rows[:, None] * D + d[None, :], (acc / s_sum[:, None]).to(tl.bfloat16))


@triton.jit
def descriptor_loop(Q, K, V, O, BT, n_keys, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                    PAGED: tl.constexpr):
    """Q, K and V through TMA descriptors. PAGED: a cache of BLOCK_N-key blocks ([blocks *
    BLOCK_N, D] rows), one block per tile, its id read from the block table BT, K and V by
    descriptor at that block's first row."""
    q_desc = tl.make_tensor_descriptor(Q, shape=[n_keys, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[n_keys, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(V, shape=[n_keys, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    q = q_desc.load([tl.program_id(0) * BLOCK_M, 0])
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for j in tl.range(0, n_keys // BLOCK_N, warp_specialize=True):
        if PAGED:
            block = tl.load(BT + j)
        else:
            block = j
        k = k_desc.load([block * BLOCK_N, 0])
        v = v_desc.load([block * BLOCK_N, 0])
        acc, m, s_sum = online_softmax_step(q, k.T, v, acc, m, s_sum)
    tl.store(O + rows[:, None] * D + d[None, :], (acc / s_sum[:, None]).to(tl.bfloat16))


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


def small_loops() -> dict:
    from triton.compiler import ASTSource

    signature = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "O": "*bf16", "BT": "*i32", "n_keys": "i32",
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "D": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    cases = {"pointer": (pointer_loop, {}, (4, 8)), "descriptor": (descriptor_loop, {(9,): False}, (4, 8)),
             "paged_descriptor": (descriptor_loop, {(9,): True}, (4,))}
    out = {}
    for name, (fn, more, warp_counts) in cases.items():
        sig = {**signature, "PAGED": "constexpr"} if more else signature
        constexprs = {(6,): BLOCK_M, (7,): BLOCK_N, (8,): HEAD, **more}
        for warps in warp_counts:
            out[f"{name}/{warps}"] = _compile(ASTSource(fn, sig, constexprs, attrs), warps, 3)
    return out


def paged_prefill() -> dict:
    """The paged kernel's NVIDIA prefill for sm_90 (the heuristics' config), with the loop
    constructs the Hopper pass looks at, read from its TTIR."""
    import torch
    from triton.compiler import ASTSource

    import kernels
    from kernels.batch import build_batch
    from perf import scenarios
    from perf.static import plan
    from perf.thresholds import load_thresholds

    target = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
    spec = next(s for s in scenarios.suite("anchor") if s.name == PREFILL).spec()
    batch = build_batch(spec, "cpu", fill=False)
    variant = kernels.VARIANTS["static_grid"]
    launches = plan.plan_as_if_on(target, variant, batch, out=torch.empty_like(batch.q))
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
    print(json.dumps({"triton": triton.__version__, "small_loops": small_loops(),
                      "paged_prefill": paged_prefill()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
