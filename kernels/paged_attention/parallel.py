"""Variant `parallel` (paper section 4.5, Listing 3): KV segments for decode batches.

With one program per (Q-block, KV head), a decode batch of few sequences occupies a
handful of SMs however long its contexts are. Here the grid gains a third axis: the tiles
of every decode sequence (one Q-block, at most BLOCK_Q queries) are split into
`num_segments` contiguous segments whose partial results (output, max, exp-sum, float32)
a second kernel merges with the online softmax's rescaling. Longer sequences (prefill,
chunked prefill) run whole in segment 0, so any batch composition is correct; when to
split is `heuristics.num_segments`.

Beyond qblock: tiles wholly outside a sliding window are never loaded; tiles every query
sees whole run without masks; tiles of up to 32 keys read the block table a tile ahead;
blocks that are not a power of two (544) are walked in their largest power-of-two
sub-tiles (544 = 17 x 32). The tile is otherwise the cache block (decoupling them is
flex_tile's step) and warps/stages are Triton's defaults, untuned on purpose: the paper's
progression.

The kernels (`common.q_block_kernel`, PERSISTENT off: grid (Q-blocks, KV heads,
segments)) and their planning (`planning`) are shared with flex_tile and static_grid.
"""

from __future__ import annotations

from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics, planning
from kernels.paged_attention.common import decode_block_m, largest_pow2_divisor

FEATURES = planning.FEATURES


def block_tile(block_size: int) -> int:
    """The tile of this variant: the cache block, or its largest power-of-two divisor."""
    tile = largest_pow2_divisor(block_size)
    return max(heuristics.MIN_TILE, tile)  # below 16 (odd blocks) the kernel gathers per position


def choose(vendor: str, f: heuristics.Features) -> heuristics.Config:
    """Tile = cache block, the smallest Q-block, the block table read ahead (tiles <= 32), Triton's
    default warps and stages."""
    tile = block_tile(f.block_size)
    return heuristics.Config(
        block_m=decode_block_m(f.queries_per_kv), tile_size=tile,
        num_segments=heuristics.num_segments(f, tile),
        # Triton's defaults, untuned on purpose: tuning is flex_tile's and static_grid's step.
        num_warps=4, num_stages=2,
        # The block table a tile ahead (`common.tile_blocks`) for tiles of 16 and 32: without it each
        # tile's copies wait on a load of its block id, and the loop's speed followed ptxas's
        # schedule, 1.04-1.09x slower on three pr rows after changes outside the loop; with it the
        # pr suite's tiles of 16 and 32 ran 0.93-1.02x, its one tile of 64 1.10x (H200, 2026-11-29,
        # pr gate: docs/lab/2026-11-29.md, "The bounds land").
        read_ahead=tile <= 32,
        source="parallel: tile = cache block, block ids read ahead in tiles <= 32, Triton defaults",
    )


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out,
         **options) -> list[KernelLaunch]:
    return planning.plan_q_blocks(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens,
                                  out=out, choose=choose, persistent=False, **options)
