"""Variant `flex_tile` (paper section 4.6): the softmax tile decoupled from the cache block.

`parallel` walks the KV cache one cache block per softmax tile, so the block size chosen
for memory management (16 in vLLM; 544 for hybrid attention/SSM models) also fixes the
shape of every `tl.dot`. Here the tile is a launch parameter of its own: smaller than,
equal to or larger than the block, chosen separately for prefill (large Q-blocks,
compute bound) and decode (small Q-blocks, long contiguous reads) by the per-vendor
decision trees of `heuristics`, which also pick BLOCK_M, warps, stages and segments.
A tile that a cache block divides reads one block-table entry; otherwise the kernel
looks each position's block up (a gather), which is how power-of-two tiles cover blocks
of 544. The kernel is parallel's (its TILE_SIZE was already a constexpr): this variant
is a planning decision.
"""

from __future__ import annotations

from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics, planning

FEATURES = planning.FEATURES


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out,
         **options) -> list[KernelLaunch]:
    return planning.plan_q_blocks(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens,
                                  out=out, choose=heuristics.choose, persistent=False, **options)
