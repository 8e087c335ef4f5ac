"""Variant `flex_tile` (paper section 4.6): the softmax tile decoupled from the cache block.

`parallel` walks the KV cache one cache block per softmax tile, so the block size chosen
for memory management (16 in vLLM; 544 for hybrid attention/SSM models) also fixes the
shape of every `tl.dot`. Here the tile is a launch parameter of its own: smaller than,
equal to or larger than the block, chosen separately for prefill (large Q-blocks,
compute bound) and decode (small Q-blocks, long contiguous reads) by the per-vendor
decision trees of `heuristics`, which also pick BLOCK_M, warps, stages and segments.
A tile that a cache block divides reads one block-table entry; otherwise the kernel
looks each position's block up (a gather), which is how power-of-two tiles cover blocks
of 544. The kernels are those of `parallel` (their TILE_SIZE was already a constexpr);
this variant is the planning decision.
"""

from __future__ import annotations

from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics
from kernels.paged_attention.parallel import FEATURES as PARALLEL_FEATURES
from kernels.paged_attention.parallel import batch_features, current_vendor, grid_launches

FEATURES = PARALLEL_FEATURES


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out, max_seqlen_q=None,
         max_seqlen_k=None, config: heuristics.Config | None = None, vendor: str | None = None,
         **options) -> list[KernelLaunch]:
    vendor = vendor or current_vendor()
    if config is None:
        f = batch_features(q, k_cache, block_table, max_seqlen_q=max_seqlen_q,
                           max_seqlen_k=max_seqlen_k, vendor=vendor)
        config = heuristics.choose(vendor, f)
    return grid_launches(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out, config,
                         vendor, **options)
