"""Variant `naive` (paper section 4.3, Listing 1): one program per (query token, query head).

Each program loads its query vector [HEAD_SIZE], walks the sequence's KV-cache blocks up
to its own causal position through the block table, and runs the online softmax with the
tile equal to one cache block. Decode batches therefore get one program per (sequence,
query head). Keys past the query's position are masked at the load (never read: a cache
block's tail may belong to no sequence and hold NaN). There are no matrix products:
scores are elementwise products summed over the head dimension, which is why this variant
is slow on prefill (the baseline of the paper's progression). It supports only the basic
contract; the production features live in the later variants.

Shapes: q [num_tokens, num_q_heads, HEAD_SIZE]; caches [num_blocks, BLOCK_SIZE,
num_kv_heads, HEAD_SIZE]; grid (num_tokens, num_q_heads).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.launch import KernelLaunch
from kernels.paged_attention import planning
from kernels.paged_attention.common import (
    LOG2E,
    cache_block,
    find_seq_idx,
    keys_ok,
    layout_strides,
    next_pow2,
    offset_index,
    query_span,
    shape_bounds,
)

# No tl.dot: any head size, any power-of-two block
FEATURES = frozenset({"head_size_non_pow2", "head_size_below_16", "block_size_below_16"})


# runtime integers that vary from batch to batch or may be 1 (which Triton would make a constant)
@triton.jit(do_not_specialize=["num_seqs", "num_tokens", "max_seq_len", "last_block"])
def _naive_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
    scale, num_seqs, num_tokens, max_seq_len, last_block,
    stride_q_token, stride_q_head,
    stride_k_block, stride_k_pos, stride_k_head,
    stride_v_block, stride_v_pos, stride_v_head,
    stride_bt_seq,
    stride_o_token, stride_o_head,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    TOKEN_OFFSETS_32: tl.constexpr,  # q and out offsets in int32: every one fits
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    seq = find_seq_idx(cu_seqlens_q_ptr, token, num_seqs, 1, False)
    q_start, q_len = query_span(cu_seqlens_q_ptr, seq, num_tokens)
    seq_len = tl.load(seq_lens_ptr + seq)
    # A token of no sequence (inconsistent cu_seqlens_q) or a sequence failing `keys_ok` sees
    # no key: its row is zeros.
    mine = (token >= q_start) & (token < q_start + q_len) & keys_ok(seq_len, q_len, max_seq_len)
    position = tl.where(mine, seq_len - q_len + (token - q_start), -1)  # absolute position of this query
    kv_head = head // QUERIES_PER_KV

    dims = tl.arange(0, HEAD_SIZE_PADDED)
    dim_mask = dims < HEAD_SIZE
    row = offset_index(token, TOKEN_OFFSETS_32)
    q = tl.load(q_ptr + row * stride_q_token + head * stride_q_head + dims,
                mask=dim_mask, other=0.0).to(tl.float32)
    qk_scale = scale * LOG2E

    m_i = tl.full([], float("-inf"), tl.float32)  # running max (log2 domain)
    l_i = tl.full([], 0.0, tl.float32)  # running denominator
    acc = tl.zeros([HEAD_SIZE_PADDED], dtype=tl.float32)
    offs = tl.arange(0, BLOCK_SIZE)
    num_blocks = tl.cdiv(position + 1, BLOCK_SIZE)
    for j in range(0, num_blocks):
        physical = cache_block(tl.load(block_table_ptr + seq * stride_bt_seq + j), last_block, False)
        # Keys past this query are never read: the last block's tail may belong to no one and
        # hold anything (NaN), and a masked key's p = 0 times a NaN V is NaN.
        visible = j * BLOCK_SIZE + offs <= position
        kv_mask = visible[:, None] & dim_mask[None, :]
        k = tl.load(k_cache_ptr + physical * stride_k_block + offs[:, None] * stride_k_pos
                    + kv_head * stride_k_head + dims[None, :],
                    mask=kv_mask, other=0.0).to(tl.float32)  # [BLOCK_SIZE, D]
        s = tl.sum(k * q[None, :], axis=1) * qk_scale  # [BLOCK_SIZE]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp2(s - m_new)
        alpha = tl.exp2(m_i - m_new)
        v = tl.load(v_cache_ptr + physical * stride_v_block + offs[:, None] * stride_v_pos
                    + kv_head * stride_v_head + dims[None, :],
                    mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    l_i = tl.where(l_i > 0.0, l_i, 1.0)
    tl.store(out_ptr + row * stride_o_token + head * stride_o_head + dims,
             (acc / l_i).to(out_ptr.dtype.element_ty), mask=dim_mask)


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out, scale=None,
         **_) -> list[KernelLaunch]:
    num_tokens, num_q_heads, head_size = q.shape
    scale = head_size ** -0.5 if scale is None else float(scale)
    return [KernelLaunch(
        kernel=_naive_kernel,
        grid=(num_tokens, num_q_heads),
        args=dict(
            out_ptr=out, q_ptr=q, k_cache_ptr=k_cache, v_cache_ptr=v_cache,
            block_table_ptr=block_table, cu_seqlens_q_ptr=cu_seqlens_q, seq_lens_ptr=seq_lens,
            scale=scale, num_seqs=block_table.shape[0], **shape_bounds(q, k_cache, block_table),
            **layout_strides(q, k_cache, v_cache, block_table, out),
        ),
        constexprs=dict(
            QUERIES_PER_KV=num_q_heads // k_cache.shape[2],
            BLOCK_SIZE=k_cache.shape[1],
            HEAD_SIZE=head_size,
            HEAD_SIZE_PADDED=next_pow2(head_size),
            TOKEN_OFFSETS_32=planning.token_offsets_32(q, out, 1),
        ),
        # Triton's defaults, untuned on purpose: naive is the baseline of the progression.
        num_warps=4,
        num_stages=2,
    )]
