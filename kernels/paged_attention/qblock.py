"""Variant `qblock` (paper section 4.4, Listing 2): Q-blocks and tensor-core products.

A Q-block packs the QUERIES_PER_KV query heads that share one KV head with BLOCK_Q
consecutive query tokens of one sequence into BLOCK_M = BLOCK_Q * QUERIES_PER_KV (rounded
up to a power of two) rows, so each K/V tile loaded from the cache serves all of them and
both products (Q K^T and P V) are `tl.dot`s. Grid: (Q-blocks, KV heads). A program finds
its sequence by binary search over the cumulative Q-block counts; the tile is one cache
block. Row r of a Q-block is query token r // QUERIES_PER_KV and head r % QUERIES_PER_KV
of the KV head's group.

Supports the production features as masks: sliding window (masked; tiles wholly before it skipped),
softcap, sinks and fp8 caches, OCP or FNUZ e4m3 (dequantized to the query dtype per tile).
Cache slots past seq_len (the last block's tail, nobody's) are masked at the load, never read;
so are, under a window, the keys before the first one the Q-block's first query sees (the
blocks wholly before it may have been released to the engine and hold anything).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels import inputs
from kernels.launch import KernelLaunch
from kernels.paged_attention import planning
from kernels.paged_attention.common import (
    LOG2E,
    apply_softcap,
    cache_block,
    decode_block_m,
    find_seq_idx,
    keys_ok,
    kv_to,
    layout_strides,
    next_pow2,
    offset_index,
    placeholder,
    shape_bounds,
    token_range,
)

FEATURES = frozenset({"sliding_window", "softcap", "sinks", "fp8_kv", "head_size_non_pow2"})


# runtime integers that vary from batch to batch or may be 1 (which Triton would make a constant)
@triton.jit(do_not_specialize=["num_seqs", "num_tokens", "max_seq_len", "last_block"])
def _qblock_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
    sinks_ptr, k_scale_ptr, v_scale_ptr,
    scale, softcap, sliding_window, num_seqs, num_tokens, max_seq_len, last_block,
    stride_q_token, stride_q_head,
    stride_k_block, stride_k_pos, stride_k_head,
    stride_v_block, stride_v_pos, stride_v_head,
    stride_bt_seq,
    stride_o_token, stride_o_head,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    USE_SLIDING_WINDOW: tl.constexpr,
    USE_SINKS: tl.constexpr,
    USE_FP8: tl.constexpr,
    DECODE_FNUZ: tl.constexpr,  # the caches are FNUZ e4m3 bytes (uint8) to decode here (NVIDIA)
    TOKEN_OFFSETS_32: tl.constexpr,  # q and out offsets in int32: every one fits
):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = find_seq_idx(cu_seqlens_q_ptr, q_block, num_seqs, BLOCK_Q, True)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    local_block = q_block - (q_start // BLOCK_Q + seq)  # the numbering as read; the rows clamped
    q_start, q_len = token_range(q_start, tl.load(cu_seqlens_q_ptr + seq + 1), num_tokens)
    if (local_block < 0) | (local_block * BLOCK_Q >= q_len):
        return  # a gap left by the Q-block upper bound (or by inconsistent cu_seqlens_q)
    seq_len = tl.load(seq_lens_ptr + seq)
    keys_fit = keys_ok(seq_len, q_len, max_seq_len)  # else no tiles: the rows are zeros
    context_len = tl.where(keys_fit, seq_len - q_len, 0)

    rows = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_SIZE_PADDED)
    q_pos = local_block * BLOCK_Q + rows // QUERIES_PER_KV  # query index within the sequence
    head = kv_head * QUERIES_PER_KV + rows % QUERIES_PER_KV
    row_mask = (rows < BLOCK_Q * QUERIES_PER_KV) & (q_pos < q_len)
    dim_mask = dims < HEAD_SIZE
    token = offset_index(q_start + q_pos, TOKEN_OFFSETS_32)
    q_offs = token[:, None] * stride_q_token + head[:, None] * stride_q_head + dims[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_mask[:, None] & dim_mask[None, :], other=0.0)

    if USE_SINKS:
        m_i = tl.load(sinks_ptr + head, mask=row_mask, other=float("-inf")).to(tl.float32) * LOG2E
        l_i = tl.where(row_mask, 1.0, 0.0).to(tl.float32)  # exp2(sink - m_i) = 1
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_SIZE_PADDED], dtype=tl.float32)
    if USE_FP8:
        k_scale = tl.load(k_scale_ptr)
        v_scale = tl.load(v_scale_ptr)

    abs_pos = context_len + q_pos  # absolute position of each row's query
    # Tiles up to the last query of this Q-block (causal), never beyond the sequence.
    last = tl.minimum(context_len + local_block * BLOCK_Q + BLOCK_Q, seq_len)
    num_tiles = tl.where(keys_fit, tl.cdiv(last, BLOCK_SIZE), 0)
    first_tile = 0
    if USE_SLIDING_WINDOW:  # the first key the Q-block's first query sees
        window_lo = context_len + local_block * BLOCK_Q - sliding_window + 1
        # tiles wholly before it hold no visible key (and may have been released): not walked
        first_tile = tl.maximum(window_lo, 0) // BLOCK_SIZE
    offs = tl.arange(0, BLOCK_SIZE)
    for j in range(first_tile, num_tiles):
        physical = cache_block(tl.load(block_table_ptr + seq * stride_bt_seq + j), last_block, False)
        key_pos = j * BLOCK_SIZE + offs
        # Slots past seq_len are never read: the last block's tail belongs to no sequence and
        # may hold anything (NaN); selecting -inf scores alone would leave p = 0 times a NaN V
        # in the P V product, NaN for every row. Under a window, nor are keys before it (the
        # tile that straddles its lower edge masks them here).
        key_ok = key_pos < seq_len
        if USE_SLIDING_WINDOW:
            key_ok = key_ok & (key_pos >= window_lo)
        k = tl.load(k_cache_ptr + physical * stride_k_block + offs[None, :] * stride_k_pos
                    + kv_head * stride_k_head + dims[:, None],
                    mask=dim_mask[:, None] & key_ok[None, :], other=0.0)  # [D, BLOCK_SIZE]
        v = tl.load(v_cache_ptr + physical * stride_v_block + offs[:, None] * stride_v_pos
                    + kv_head * stride_v_head + dims[None, :],
                    mask=key_ok[:, None] & dim_mask[None, :], other=0.0)  # [BLOCK_SIZE, D]
        if USE_FP8:
            k = (kv_to(k, tl.float32, DECODE_FNUZ) * k_scale).to(q.dtype)
            v = (kv_to(v, tl.float32, DECODE_FNUZ) * v_scale).to(q.dtype)
        s = tl.dot(q, k) * scale  # [BLOCK_M, BLOCK_SIZE], natural units
        if USE_SOFTCAP:
            s = apply_softcap(s, softcap)
        s = s * LOG2E
        visible = row_mask[:, None] & (key_pos[None, :] <= abs_pos[:, None])
        if USE_SLIDING_WINDOW:
            visible = visible & (abs_pos[:, None] - key_pos[None, :] < sliding_window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_new = tl.where(m_new > float("-inf"), m_new, 0.0)  # rows with nothing visible yet
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    l_i = tl.where(l_i > 0.0, l_i, 1.0)
    out_offs = token[:, None] * stride_o_token + head[:, None] * stride_o_head + dims[None, :]
    tl.store(out_ptr + out_offs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & dim_mask[None, :])


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out, scale=None,
         sliding_window=None, softcap=None, sinks=None, k_scale=None, v_scale=None,
         vendor=None, **_) -> list[KernelLaunch]:
    """One launch; the vendor (hint or device) decides only how an fp8 cache is read."""
    vendor = planning.resolve_target(vendor)[0]
    k_operand, v_operand = planning.kv_operands(k_cache, v_cache, vendor)
    num_tokens, num_q_heads, head_size = q.shape
    num_kv_heads = k_cache.shape[2]
    num_seqs = block_table.shape[0]
    queries_per_kv = num_q_heads // num_kv_heads
    block_m = decode_block_m(queries_per_kv)  # at least 16 rows for tl.dot, whole head groups
    block_q = block_m // queries_per_kv
    dummy = placeholder(q.device)  # stands in for absent optional tensors
    return [KernelLaunch(
        kernel=_qblock_kernel,
        # Upper bound on Q-blocks: every sequence may leave one partial block.
        grid=(num_tokens // block_q + num_seqs, num_kv_heads),
        args=dict(
            out_ptr=out, q_ptr=q, k_cache_ptr=k_operand, v_cache_ptr=v_operand,
            block_table_ptr=block_table, cu_seqlens_q_ptr=cu_seqlens_q, seq_lens_ptr=seq_lens,
            sinks_ptr=sinks if sinks is not None else dummy,
            k_scale_ptr=k_scale if k_scale is not None else dummy,
            v_scale_ptr=v_scale if v_scale is not None else dummy,
            scale=head_size ** -0.5 if scale is None else float(scale),
            softcap=float(softcap or 0.0),
            sliding_window=int(sliding_window or 0),
            num_seqs=num_seqs,
            **shape_bounds(q, k_cache, block_table),
            **layout_strides(q, k_cache, v_cache, block_table, out),
        ),
        constexprs=dict(
            QUERIES_PER_KV=queries_per_kv,
            BLOCK_SIZE=k_cache.shape[1],
            HEAD_SIZE=head_size,
            HEAD_SIZE_PADDED=next_pow2(head_size),
            BLOCK_M=block_m,
            BLOCK_Q=block_q,
            USE_SOFTCAP=bool(softcap),
            USE_SLIDING_WINDOW=bool(sliding_window),
            USE_SINKS=sinks is not None,
            USE_FP8=inputs.is_fp8(k_cache.dtype),
            DECODE_FNUZ=inputs.fp8_decoded_in_kernel(k_cache.dtype, vendor),
            TOKEN_OFFSETS_32=planning.token_offsets_32(q, out, 1),
        ),
        # Triton's defaults; per-vendor tuning belongs to the later variants' heuristics.
        num_warps=4,
        num_stages=2,
    )]
