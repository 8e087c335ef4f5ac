"""Variant `parallel` (paper section 4.5, Listing 3): KV segments for decode batches.

With one program per (Q-block, KV head), a decode batch of few sequences occupies a
handful of SMs however long its contexts are. Here the grid gains a third axis: the tiles
of every decode sequence (one Q-block, at most BLOCK_Q queries) are split into
`num_segments` contiguous segments; each program runs the tiled online softmax over its
segment and stores its partial output, max and exp-sum (float32); a second kernel,
`_reduce_segments_kernel`, merges the segments with the online softmax's rescaling.
Sequences longer than one Q-block (prefill, chunked prefill) run whole in segment 0, so
a batch of any composition is correct; when to split (decode batches of few sequences
with long contexts) is `heuristics.num_segments`. Batches that need no split launch the
Q-block kernel alone (grid depth 1), as qblock does.

Beyond qblock: tiles wholly outside a sliding window are never loaded (pruned); tiles
every query sees whole run without masks; block sizes that are not a power of two (544)
are walked in their largest power-of-two sub-tiles (544 = 17 x 32). The tile is otherwise
the cache block; decoupling the two is the next variant's step (flex_tile). Warps and
stages are Triton's defaults here, untuned on purpose (the paper's progression).

Shapes: q [num_tokens, num_q_heads, HEAD_SIZE]; caches [num_blocks, BLOCK_SIZE,
num_kv_heads, HEAD_SIZE]; grid (Q-blocks, KV heads, segments); partials
[num_tokens, num_q_heads, segments, HEAD_SIZE_PADDED]; reduce grid (sequences, heads).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import platform
from kernels.inputs import FP8_DTYPE
from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics
from kernels.paged_attention.common import (
    attend_q_block,
    largest_pow2_divisor,
    next_pow2,
    reduce_sequence_head,
)

FEATURES = frozenset({"sliding_window", "softcap", "sinks", "fp8_kv", "head_size_non_pow2",
                      "block_size_non_pow2"})
# Runtime integers that vary from batch to batch: Triton would otherwise compile one kernel per
# value class (== 1, divisible by 16, other), multiplying compilations for no speed.
NO_SPECIALIZE = ["num_seqs", "split_max_q", "num_q_heads", "num_segments", "window", "stride_bt_seq"]
REDUCE_NO_SPECIALIZE = ["split_max_q", "num_q_heads", "num_segments"]


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _parallel_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
    sinks_ptr, k_scale_ptr, v_scale_ptr,
    segm_out_ptr, segm_max_ptr, segm_sum_ptr,
    scale, softcap, window, num_seqs, split_max_q, num_q_heads, num_segments,
    stride_q_token, stride_q_head,
    stride_k_block, stride_k_pos, stride_k_head,
    stride_v_block, stride_v_pos, stride_v_head,
    stride_bt_seq,
    stride_o_token, stride_o_head,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    USE_SLIDING_WINDOW: tl.constexpr,
    USE_SINKS: tl.constexpr,
    USE_FP8: tl.constexpr,
):
    attend_q_block(
        tl.program_id(0), tl.program_id(1), tl.program_id(2),
        out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
        sinks_ptr, k_scale_ptr, v_scale_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr,
        scale, softcap, window, num_seqs, split_max_q, num_q_heads, num_segments,
        stride_q_token, stride_q_head,
        stride_k_block, stride_k_pos, stride_k_head,
        stride_v_block, stride_v_pos, stride_v_head,
        stride_bt_seq, stride_o_token, stride_o_head,
        QUERIES_PER_KV, BLOCK_SIZE, TILE_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED,
        BLOCK_M, BLOCK_Q, USE_SOFTCAP, USE_SLIDING_WINDOW, USE_SINKS, USE_FP8,
    )


@triton.jit(do_not_specialize=REDUCE_NO_SPECIALIZE)
def _reduce_segments_kernel(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr, cu_seqlens_q_ptr, split_max_q,
    num_q_heads, num_segments, stride_o_token, stride_o_head,
    SEGMENTS_PADDED: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
):
    reduce_sequence_head(
        tl.program_id(0), tl.program_id(1), out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr,
        cu_seqlens_q_ptr, split_max_q, num_q_heads, num_segments, stride_o_token, stride_o_head,
        SEGMENTS_PADDED, HEAD_SIZE, HEAD_SIZE_PADDED,
    )


def block_tile(block_size: int) -> int:
    """The tile of this variant: the cache block, or its largest power-of-two divisor."""
    tile = largest_pow2_divisor(block_size)
    return max(heuristics.MIN_TILE, tile)  # below 16 (odd blocks) the kernel gathers per position


def current_vendor() -> str:
    """The heuristics' vendor: the interpreter runs NVIDIA's choices."""
    vendor = platform.current().vendor
    return "nvidia" if vendor == "cpu" else vendor


def batch_features(q, k_cache, block_table, *, max_seqlen_q=None, max_seqlen_k=None,
                   vendor: str | None = None) -> heuristics.Features:
    vendor = vendor or current_vendor()
    num_sms = platform.current().num_sms if vendor == current_vendor() else None
    return heuristics.features_from_call(q, k_cache, block_table, max_seqlen_q=max_seqlen_q,
                                        max_seqlen_k=max_seqlen_k, num_sms=num_sms or None,
                                        vendor=vendor)


def segment_buffers(num_tokens: int, num_q_heads: int, segments: int, head_size_padded: int,
                    device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(partial outputs, maxima, exp-sums), float32, for `segments` segments per query."""
    out = torch.empty(num_tokens, num_q_heads, segments, head_size_padded, dtype=torch.float32,
                      device=device)
    stats = torch.empty(2, num_tokens, num_q_heads, segments, dtype=torch.float32, device=device)
    return out, stats[0], stats[1]


def attention_args(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out, buffers, *,
                   split_max_q: int, num_segments: int, scale=None, sliding_window=None,
                   softcap=None, sinks=None, k_scale=None, v_scale=None) -> dict:
    """Runtime arguments shared by the Q-block kernels of parallel, flex_tile, static_grid."""
    dummy = q.new_empty(1, dtype=torch.float32)  # stands in for absent optional tensors
    segm_out, segm_max, segm_sum = buffers if buffers is not None else (dummy, dummy, dummy)
    return dict(
        out_ptr=out, q_ptr=q, k_cache_ptr=k_cache, v_cache_ptr=v_cache,
        block_table_ptr=block_table, cu_seqlens_q_ptr=cu_seqlens_q, seq_lens_ptr=seq_lens,
        sinks_ptr=sinks if sinks is not None else dummy,
        k_scale_ptr=k_scale if k_scale is not None else dummy,
        v_scale_ptr=v_scale if v_scale is not None else dummy,
        segm_out_ptr=segm_out, segm_max_ptr=segm_max, segm_sum_ptr=segm_sum,
        scale=q.shape[2] ** -0.5 if scale is None else float(scale),
        softcap=float(softcap or 0.0),
        window=int(sliding_window or 0),
        num_seqs=block_table.shape[0],
        split_max_q=split_max_q,
        num_q_heads=q.shape[1],
        num_segments=num_segments,
        stride_q_token=q.stride(0), stride_q_head=q.stride(1),
        stride_k_block=k_cache.stride(0), stride_k_pos=k_cache.stride(1),
        stride_k_head=k_cache.stride(2),
        stride_v_block=v_cache.stride(0), stride_v_pos=v_cache.stride(1),
        stride_v_head=v_cache.stride(2),
        stride_bt_seq=block_table.stride(0),
        stride_o_token=out.stride(0), stride_o_head=out.stride(1),
    )


def attention_constexprs(q, k_cache, config: heuristics.Config, *, sliding_window=None,
                         softcap=None, sinks=None) -> dict:
    num_q_heads, head_size = q.shape[1], q.shape[2]
    queries_per_kv = num_q_heads // k_cache.shape[2]
    return dict(
        QUERIES_PER_KV=queries_per_kv,
        BLOCK_SIZE=k_cache.shape[1],
        TILE_SIZE=config.tile_size,
        HEAD_SIZE=head_size,
        HEAD_SIZE_PADDED=next_pow2(head_size),
        BLOCK_M=config.block_m,
        BLOCK_Q=config.block_q(queries_per_kv),
        USE_SOFTCAP=bool(softcap),
        USE_SLIDING_WINDOW=bool(sliding_window),
        USE_SINKS=sinks is not None,
        USE_FP8=k_cache.dtype == FP8_DTYPE,
    )


def reduce_launch(kernel, grid, q, cu_seqlens_q, out, buffers, config, split_max_q,
                  extra_args=None) -> KernelLaunch:
    segm_out, segm_max, segm_sum = buffers
    return KernelLaunch(
        kernel=kernel,
        grid=grid,
        args=dict(out_ptr=out, segm_out_ptr=segm_out, segm_max_ptr=segm_max, segm_sum_ptr=segm_sum,
                  cu_seqlens_q_ptr=cu_seqlens_q, split_max_q=split_max_q, num_q_heads=q.shape[1],
                  num_segments=config.num_segments, stride_o_token=out.stride(0),
                  stride_o_head=out.stride(1), **(extra_args or {})),
        constexprs=dict(SEGMENTS_PADDED=next_pow2(config.num_segments), HEAD_SIZE=q.shape[2],
                        HEAD_SIZE_PADDED=next_pow2(q.shape[2])),
        num_warps=4,  # a few KB per (sequence, head): Triton's default suffices (unmeasured)
        num_stages=1,
    )


def grid_launches(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out,
                  config: heuristics.Config, vendor: str, **options) -> list[KernelLaunch]:
    """Launches of the (Q-blocks, KV heads, segments) grid plus, if split, the reduction."""
    num_tokens, num_q_heads, _ = q.shape
    num_seqs = block_table.shape[0]
    block_q = config.block_q(num_q_heads // k_cache.shape[2])
    buffers = None
    if config.num_segments > 1:
        buffers = segment_buffers(num_tokens, num_q_heads, config.num_segments,
                                  next_pow2(q.shape[2]), q.device)
    launches = [KernelLaunch(
        kernel=_parallel_kernel,
        # Upper bound on Q-blocks: every sequence may leave one partial block.
        grid=(num_tokens // block_q + num_seqs, k_cache.shape[2], config.num_segments),
        args=attention_args(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out,
                            buffers, split_max_q=block_q, num_segments=config.num_segments,
                            **options),
        constexprs=attention_constexprs(q, k_cache, config, **_features_only(options)),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        vendor_options=config.vendor_options(vendor),
    )]
    if buffers is not None:
        launches.append(reduce_launch(_reduce_segments_kernel, (num_seqs, num_q_heads), q,
                                      cu_seqlens_q, out, buffers, config, block_q))
    return launches


def _features_only(options: dict) -> dict:
    return {k: options.get(k) for k in ("sliding_window", "softcap", "sinks")}


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out, max_seqlen_q=None,
         max_seqlen_k=None, config: heuristics.Config | None = None, vendor: str | None = None,
         **options) -> list[KernelLaunch]:
    vendor = vendor or current_vendor()
    if config is None:
        f = batch_features(q, k_cache, block_table, max_seqlen_q=max_seqlen_q,
                           max_seqlen_k=max_seqlen_k, vendor=vendor)
        tile = block_tile(k_cache.shape[1])
        block_m = heuristics.decode_block_m(f.queries_per_kv)
        config = heuristics.Config(
            block_m=block_m, tile_size=tile, num_segments=heuristics.num_segments(f, tile),
            # Triton's defaults, untuned on purpose: tuning is flex_tile's and static_grid's step.
            num_warps=4, num_stages=2, source="parallel: tile = cache block, Triton defaults",
        )
    return grid_launches(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out, config,
                         vendor, **options)
