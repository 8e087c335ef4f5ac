"""Variant `static_grid` (paper section 4.7): a launch grid that does not depend on the batch.

The grid is a fixed number of persistent programs, about `programs_per_sm` per SM / CU;
each program loops over work items (Q-block, KV head, segment), striding by the grid
size. How many Q-blocks a batch has is read on the device (from cu_seqlens_q), so the
launch arguments, the grid and the preallocated segment buffers are the same for every
batch of the same tensor shapes. That is what lets one CUDA/HIP graph, captured once with
dummy maximum-size metadata, be replayed for batches of other compositions (decodes,
prefills, mixed; padding tokens past cu_seqlens_q[-1] and empty sequences included):
only the metadata's values change between replays. The reduction of split decode
sequences is persistent the same way, over (sequence, query head) items.

Items run heaviest first (Q-blocks in reverse order: under the causal mask the last
Q-blocks of a sequence have the most tiles), so the persistent programs finish together.
Tiles, Q-blocks, segments, warps, stages and programs per SM come from the per-vendor
decision trees of `heuristics`, chosen at plan time from shapes and host-side hints
(`max_seqlen_q`, `max_seqlen_k`); a graph keeps the configuration it was captured with,
which is correct for any batch and fastest for batches like the one it was captured for.

Shapes as in `parallel`; grid (num_programs,); reduce grid (num_reduce_programs,).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import platform
from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics
from kernels.paged_attention.common import attend_q_block, next_pow2, reduce_sequence_head
from kernels.paged_attention.parallel import (
    FEATURES as PARALLEL_FEATURES,
)
from kernels.paged_attention.parallel import (
    NO_SPECIALIZE,
    REDUCE_NO_SPECIALIZE,
    _features_only,
    attention_args,
    attention_constexprs,
    batch_features,
    current_vendor,
    reduce_launch,
    segment_buffers,
)

FEATURES = PARALLEL_FEATURES
REDUCE_PROGRAMS_PER_SM = 4  # reduce items are tiny; unmeasured default


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _static_grid_kernel(
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
    num_kv_heads = num_q_heads // QUERIES_PER_KV
    items_per_q_block = num_kv_heads * num_segments
    # Q-blocks of this batch, read on the device: the same upper bound as the 2-D grids.
    num_q_blocks = tl.load(cu_seqlens_q_ptr + num_seqs) // BLOCK_Q + num_seqs
    for item in range(tl.program_id(0), num_q_blocks * items_per_q_block, tl.num_programs(0)):
        q_block = num_q_blocks - 1 - item // items_per_q_block  # heaviest (last) Q-blocks first
        kv_head = (item // num_segments) % num_kv_heads
        segment = item % num_segments
        attend_q_block(
            q_block, kv_head, segment,
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


@triton.jit(do_not_specialize=REDUCE_NO_SPECIALIZE + ["num_seqs"])
def _static_reduce_kernel(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr, cu_seqlens_q_ptr, split_max_q,
    num_q_heads, num_segments, stride_o_token, stride_o_head, num_seqs,
    SEGMENTS_PADDED: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
):
    for item in range(tl.program_id(0), num_seqs * num_q_heads, tl.num_programs(0)):
        reduce_sequence_head(
            item // num_q_heads, item % num_q_heads, out_ptr, segm_out_ptr, segm_max_ptr,
            segm_sum_ptr, cu_seqlens_q_ptr, split_max_q, num_q_heads, num_segments,
            stride_o_token, stride_o_head, SEGMENTS_PADDED, HEAD_SIZE, HEAD_SIZE_PADDED,
        )


# Segment buffers by (device, tokens, heads, segments, padded head size). Allocated on the
# first call of a shape and kept: a captured graph holds their addresses, so they must
# outlive it; every later call (and every replay) of that shape reuses them.
_BUFFERS: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def preallocated_buffers(num_tokens: int, num_q_heads: int, segments: int, head_size_padded: int,
                         device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    key = (str(torch.device(device)), num_tokens, num_q_heads, segments, head_size_padded)
    if key not in _BUFFERS:
        _BUFFERS[key] = segment_buffers(num_tokens, num_q_heads, segments, head_size_padded, device)
    return _BUFFERS[key]


def release_buffers() -> None:
    """Drop the preallocated segment buffers (only once no captured graph uses them)."""
    _BUFFERS.clear()


def num_programs(config: heuristics.Config, num_sms: int, max_items: int) -> int:
    """The static grid: programs_per_sm per SM, never more than the shapes' item bound."""
    programs = min(config.programs_per_sm * num_sms, max_items)
    if config.max_programs:
        programs = min(programs, config.max_programs)
    return max(1, programs)


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out, max_seqlen_q=None,
         max_seqlen_k=None, config: heuristics.Config | None = None, vendor: str | None = None,
         **options) -> list[KernelLaunch]:
    vendor = vendor or current_vendor()
    num_sms = (platform.current().num_sms if vendor == current_vendor() else 0) \
        or heuristics.DEFAULT_NUM_SMS[vendor]
    if config is None:
        f = batch_features(q, k_cache, block_table, max_seqlen_q=max_seqlen_q,
                           max_seqlen_k=max_seqlen_k, vendor=vendor)
        config = heuristics.choose(vendor, f)
    num_tokens, num_q_heads, head_size = q.shape
    num_seqs, num_kv_heads = block_table.shape[0], k_cache.shape[2]
    block_q = config.block_q(num_q_heads // num_kv_heads)
    buffers = None
    if config.num_segments > 1:
        buffers = preallocated_buffers(num_tokens, num_q_heads, config.num_segments,
                                       next_pow2(head_size), q.device)
    max_items = (num_tokens // block_q + num_seqs) * num_kv_heads * config.num_segments
    launches = [KernelLaunch(
        kernel=_static_grid_kernel,
        grid=(num_programs(config, num_sms, max_items),),
        args=attention_args(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out,
                            buffers, split_max_q=block_q, num_segments=config.num_segments,
                            **options),
        constexprs=attention_constexprs(q, k_cache, config, **_features_only(options)),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        vendor_options=config.vendor_options(vendor),
    )]
    if buffers is not None:
        reduce_programs = max(1, min(REDUCE_PROGRAMS_PER_SM * num_sms, num_seqs * num_q_heads))
        launches.append(reduce_launch(_static_reduce_kernel, (reduce_programs,), q, cu_seqlens_q,
                                      out, buffers, config, block_q,
                                      extra_args=dict(num_seqs=num_seqs)))
    return launches
