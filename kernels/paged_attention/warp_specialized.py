"""The prefill warp-specialized for NVIDIA sm_90, in Gluon: a TMA loader warp and two consumer warpgroups.

Why a second kernel: on Hopper the Triton kernel's software pipeline stalls on `bar.sync` for
27-29 % of its samples in a long prefill, FlashAttention-3's warp-specialized kernel for 3 %
(NVIDIA H200, ncu, docs/lab/2026-11-30.md), and Triton's automatic warp specialization cannot
take the paged loop on sm_90 (docs/lab/2026-11-27.md). Written by hand in Gluon
(`triton.experimental.gluon`, Triton >= 3.6) it takes 0.85-0.88x FlashInfer's time on the lab's
unmasked loop, where the Triton loop takes 1.2-1.5x (`perf.lab.warp_specialize`, H200,
docs/lab/2026-11-30.md), and the anchor's prefills that take it run 0.81-1.01x FlashInfer's time.

The work item is FlashAttention-3's: 128 queries of one query head of one sequence (a Q-block;
the grid is query heads x Q-blocks, the Q-blocks numbered as `common.find_seq_idx` numbers them
and launched last first, so the longest causal rows start first), causal at the end of the
sequence's keys, over tiles of TILE keys.

- **The loader** (one warp, LOADER_REGS registers) copies the Q-block once, then each tile of K
  and V into one of STAGES shared buffers, one TMA copy per cache block (a tile of 128 keys is 8
  copies of the anchor's blocks of 16), completing on the stage's `ready` barrier. Past the
  sequence's last key it copies from beyond the cache's rows, which TMA fills with zeros. The
  cache block holding the last key has stale rows after it: K's are masked out of the scores,
  but a stale V that is not finite would poison P V (0 x inf), so that block of V is read by
  ordinary masked loads, zeros past the last key, and stored by the loader.
- **Two consumers** (a warpgroup each, CONSUMER_REGS registers) take 64 of the Q-block's rows
  each: S = Q K^T on wgmma, the causal mask on the tiles that cross the diagonal or the end,
  the online softmax in exp2 (the scale in each exponent's FFMA), O += P V on wgmma with P from
  registers. A tile's P V and the next tile's Q K^T are issued back to back and waited on once
  (the first Q K^T before the loop, the last P V after it): 0.85-0.95x the time of waiting on
  each product (H200, docs/lab/2026-11-30.md). Each consumer arrives on a stage's `empty`
  barriers once its products have read the buffers. Nothing else orders the consumers, so one's
  softmax runs while the other's products hold the tensor cores.

Metadata the value checks would refuse stays inside the tensors, as in the Q-block kernel
(tests/kernels/test_memory_safety.py states the contract): token ranges are clamped into q's rows,
a sequence whose keys do not cover its queries or overflow its block-table row gets rows of zeros
(`common.keys_ok`), and a block id outside the cache reads zeros (TMA's bounds; the Q-block kernel
clamps such ids into the cache instead).

Where it runs is `planning.warp_specialized_applies`'s: bf16 or fp16 without softcap, window,
sinks or an fp8 cache, heads of 64 or 128, cache blocks that divide the tile, layouts TMA can
read. Gluon has no interpreter mode: on a CPU it is compiled for sm_90 only
(tests/kernels/test_warp_specialized.py), and it runs on an sm_90 GPU.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

BLOCK_M = gl.constexpr(128)  # queries per work item: two consumers of 64 rows, wgmma's M per warpgroup
HALF = gl.constexpr(64)
TILE = 128  # keys per tile: FA3's tile for a head of 128 in 16 bits (hopper/tile_size.h, read 2026-11-28)
STAGES = 2  # K and V buffers: 2 x 2 x 32 KiB and Q 32 KiB, 160 KiB of an SM's 227 (3 stages do not fit)
# Registers per thread (setmaxnreg): the kernel's average MAXNREG over 3 warpgroups is split into
# two consumers and a loader. FA3's split for two consumers is 240 / 24; the loader here also stages
# the last V block through registers (sm_90 compile, triton 3.6.0, 2026-11-30: 240 / 24 spilled 312 B
# of stack, 232 / 40 112 B, 216 / 72 32 B in the consumers; 224 / 56 8-16 B)
CONSUMER_REGS = 224
LOADER_REGS = 56
MAXNREG = 168  # (2 x 224 + 56) / 3
# the loader's masked V block goes through registers 8 rows at a time: [8, 128] 16-bit values are 16
# registers a thread of its one warp, within its LOADER_REGS
ROWS_PER_STORE = gl.constexpr(8)


@gluon.jit
def locate(cu_seqlens_q_ptr, q_block, num_seqs, num_tokens):
    """(first token, query count, first row in the sequence) of Q-block `q_block` in
    `common.find_seq_idx`'s numbering (sequence i's first Q-block is cu_seqlens_q[i] // 128 + i):
    a count <= 0 for the gaps it leaves. The token range is clamped into q's rows."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if gl.load(cu_seqlens_q_ptr + mid) // BLOCK_M + mid <= q_block:
            lo = mid + 1
        else:
            hi = mid
    seq = gl.maximum(lo - 1, 0)
    start = gl.load(cu_seqlens_q_ptr + seq)
    stop = gl.load(cu_seqlens_q_ptr + seq + 1)
    first = gl.minimum(gl.maximum(start, 0), num_tokens)
    count = gl.minimum(gl.maximum(stop, 0), num_tokens) - first
    row = (q_block - (start // BLOCK_M + seq)) * BLOCK_M
    return seq, first, count, row


@gluon.jit
def _online_softmax(s, m, total, acc, j, unmasked, positions, kv_len, scale_log2, dtype: gl.constexpr,
                    o_layout: gl.constexpr):
    """Tile j's scores into P (`dtype`, P V's register operand), the running maximum `m` (log2
    units), row sums and the accumulator rescaled: the causal mask only on tiles from `unmasked`."""
    TILE_: gl.constexpr = s.type.shape[1]
    s_layout: gl.constexpr = s.type.layout
    if j >= unmasked:
        keys = j * TILE_ + gl.arange(0, TILE_, gl.SliceLayout(0, s_layout))
        seen = ((gl.expand_dims(keys, 0) <= gl.expand_dims(positions, 1))
                & gl.expand_dims(keys < kv_len, 0))
        s = gl.where(seen, s, float("-inf"))
    # the scale rides in each score's exp2 (one FFMA): the maximum is kept in log2 units
    m_new = gl.maximum(m, gl.max(s, axis=1) * scale_log2)
    # a row that has seen no key yet (only where the metadata puts queries before the first key)
    # keeps m at -inf: exp2 of a finite offset instead of NaN
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * scale_log2 - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m - m_use)
    total = total * alpha + gl.sum(p, axis=1)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    p16 = gl.convert_layout(p.to(dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return p16, m_new, total, acc


@gluon.jit
def _consume(q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, out_ptr, out_stride_t,
             out_stride_h, head, first, count, row, context, kv_len, n_tiles, scale_log2,
             HALF_INDEX: gl.constexpr):
    """Rows HALF_INDEX * 64.. of the Q-block over every tile: one consumer warpgroup's work."""
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, TILE_, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.index(HALF_INDEX)
    # the query positions of these rows: the sequence's queries are its last keys
    top = context + row + HALF_INDEX * HALF
    positions = top + gl.arange(0, HALF, rows_s)
    # tiles before `unmasked` hold only keys every row sees
    unmasked = gl.minimum(top + 1, kv_len) // TILE_
    m = gl.full([HALF], float("-inf"), gl.float32, rows_s)
    total = gl.zeros([HALF], gl.float32, rows_s)
    acc = gl.zeros([HALF, D], gl.float32, o_layout)
    zero_s = gl.zeros([HALF, TILE_], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    # Q K^T of each tile is issued right behind P V of the tile before, and one wait takes both:
    # the first tile's Q K^T before the loop, the last tile's P V after it
    s = zero_s
    if n_tiles > 0:
        mbarrier.wait(k_ready.index(0), 0)
        s = warpgroup_mma(q, k_bufs.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(s, ))
        mbarrier.arrive(k_empty.index(0), count=1)
    for j in range(n_tiles - 1):
        stage = j % STAGES_
        p16, m, total, acc = _online_softmax(s, m, total, acc, j, unmasked, positions, kv_len, scale_log2,
                                             q_smem.dtype, o_layout)
        mbarrier.wait(v_ready.index(stage), (j // STAGES_) & 1)
        acc = warpgroup_mma(p16, v_bufs.index(stage), acc, is_async=True)
        ahead = (j + 1) % STAGES_
        mbarrier.wait(k_ready.index(ahead), ((j + 1) // STAGES_) & 1)
        s = warpgroup_mma(q, k_bufs.index(ahead).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s, acc = warpgroup_mma_wait(0, deps=(s, acc))
        mbarrier.arrive(v_empty.index(stage), count=1)
        mbarrier.arrive(k_empty.index(ahead), count=1)
    if n_tiles > 0:
        last = n_tiles - 1
        p16, m, total, acc = _online_softmax(s, m, total, acc, last, unmasked, positions, kv_len, scale_log2,
                                             q_smem.dtype, o_layout)
        mbarrier.wait(v_ready.index(last % STAGES_), (last // STAGES_) & 1)
        acc = warpgroup_mma(p16, v_bufs.index(last % STAGES_), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(last % STAGES_), count=1)
    # rows that saw no key (a Q-block given no tiles: `common.keys_ok` failed) are zeros, as the
    # Q-block kernel's
    total_o = gl.expand_dims(gl.convert_layout(total, rows_o), 1)
    o = gl.where(total_o > 0.0, acc / total_o, 0.0)
    local = row + HALF_INDEX * HALF + gl.arange(0, HALF, rows_o)
    cols = gl.arange(0, D, gl.SliceLayout(0, o_layout))
    tokens = (first + local).to(gl.int64)
    offsets = gl.expand_dims(tokens * out_stride_t, 1) + head * out_stride_h + gl.expand_dims(cols, 0)
    rows_here = gl.expand_dims((local >= 0) & (local < count), 1)
    gl.store(out_ptr + offsets, o.to(out_ptr.dtype.element_ty), mask=rows_here)


@gluon.jit
def _consume_low(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty,
                 out_ptr, out_stride_t, out_stride_h, v_cache_ptr, v_stride_row, block_table_ptr, kv_rows,
                 head, col, first, count, row, context, kv_len, n_tiles, scale_log2):
    _consume(q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, out_ptr, out_stride_t,
             out_stride_h, head, first, count, row, context, kv_len, n_tiles, scale_log2, 0)


@gluon.jit
def _consume_high(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty,
                  out_ptr, out_stride_t, out_stride_h, v_cache_ptr, v_stride_row, block_table_ptr, kv_rows,
                  head, col, first, count, row, context, kv_len, n_tiles, scale_log2):
    _consume(q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, out_ptr, out_stride_t,
             out_stride_h, head, first, count, row, context, kv_len, n_tiles, scale_log2, 1)


@gluon.jit
def _load(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty,
          out_ptr, out_stride_t, out_stride_h, v_cache_ptr, v_stride_row, block_table_ptr, kv_rows, head,
          col, first, count, row, context, kv_len, n_tiles, scale_log2):
    """The loader: the Q-block once, then K and V a tile at a time, a TMA copy per cache block."""
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    PER_TILE: gl.constexpr = TILE_ // BLOCK
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [ROWS_PER_STORE // 2, 64 // ROWS_PER_STORE], [1, 1],
                                                 [1, 0])
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [first + row, head * D], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [first + row + HALF, head * D], q_bar, q_smem.index(1))
    # the cache block holding the last key, when keys follow it in that block (-1: none)
    last_partial = gl.where(kv_len % BLOCK != 0, kv_len // BLOCK, -1)
    for j in range(n_tiles):
        stage = j % STAGES_
        phase = (j // STAGES_) & 1
        mbarrier.wait(k_empty.index(stage), phase ^ 1)  # a fresh barrier passes phase 1: the first lap
        mbarrier.expect(k_ready.index(stage), PER_TILE * k_desc.block_type.nbytes)
        for i in gl.static_range(PER_TILE):
            logical = j * PER_TILE + i
            used = logical * BLOCK < kv_len
            block = gl.load(block_table_ptr + logical, mask=used, other=0)
            start = gl.where(used, block * BLOCK, kv_rows)  # past the rows: TMA's zeros
            tma.async_copy_global_to_shared(k_desc, [start, col], k_ready.index(stage),
                                            k_bufs.index(stage).slice(i * BLOCK, BLOCK))
        mbarrier.wait(v_empty.index(stage), phase ^ 1)
        partial_here = (last_partial >= j * PER_TILE) & (last_partial < (j + 1) * PER_TILE)
        if partial_here:
            i_partial = last_partial - j * PER_TILE
            block = gl.load(block_table_ptr + last_partial)
            # read only a block of the cache: an id past it (corrupt metadata) stores zeros, as TMA's
            # copies of such ids do
            in_cache = (block >= 0) & (block < kv_rows // BLOCK)
            for i in gl.static_range(PER_TILE):
                if i == i_partial:
                    for c in gl.static_range(BLOCK // ROWS_PER_STORE):
                        r = c * ROWS_PER_STORE + gl.arange(0, ROWS_PER_STORE, gl.SliceLayout(1, rows_layout))
                        d = gl.arange(0, D, gl.SliceLayout(0, rows_layout))
                        rows = (block * BLOCK + r).to(gl.int64)
                        keep = gl.expand_dims((last_partial * BLOCK + r < kv_len) & in_cache, 1)
                        values = gl.load(v_cache_ptr + gl.expand_dims(rows * v_stride_row, 1) + col
                                         + gl.expand_dims(d, 0), mask=keep, other=0.0)
                        v_bufs.index(stage).slice(i * BLOCK + c * ROWS_PER_STORE,
                                                  ROWS_PER_STORE).store(values)
            fence_async_shared()  # the stores, before the products read them through the async proxy
        # one arrival with the bytes of the copies (a constant each way): all but the stored block
        mbarrier.expect(v_ready.index(stage), PER_TILE * v_desc.block_type.nbytes, pred=not partial_here)
        mbarrier.expect(v_ready.index(stage), (PER_TILE - 1) * v_desc.block_type.nbytes, pred=partial_here)
        for i in gl.static_range(PER_TILE):
            logical = j * PER_TILE + i
            used = logical * BLOCK < kv_len
            block = gl.load(block_table_ptr + logical, mask=used, other=0)
            start = gl.where(used, block * BLOCK, kv_rows)
            tma.async_copy_global_to_shared(v_desc, [start, col], v_ready.index(stage),
                                            v_bufs.index(stage).slice(i * BLOCK, BLOCK),
                                            pred=logical != last_partial)


@gluon.jit
def ws_prefill_kernel(q_desc, k_desc, v_desc, out_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr,
                      seq_lens_ptr, num_seqs, num_tokens, num_q_blocks, block_table_stride, max_blocks,
                      out_stride_t, out_stride_h, v_stride_row, kv_rows, scale_log2, GROUP: gl.constexpr,
                      TILE: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                      LOADER_REGS: gl.constexpr, CAUSAL: gl.constexpr = True):
    """Q-block num_q_blocks - 1 - program_id(1) of query head program_id(0) (module docstring).
    The partition functions are one per warpgroup (`_consume_low`, `_consume_high`), not one taking
    the half as an argument: a constant passed through `gl.warp_specialize` arrives as a tensor
    (triton 3.6.0), and the half's Q buffer and row offsets are then computed at run time.
    q_desc: q as [tokens, query heads x D] in boxes of 64 rows; k_desc, v_desc: the caches as
    [blocks x block size, KV heads x D] rows in boxes of one cache block."""
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    head = gl.program_id(0)
    q_block = num_q_blocks - 1 - gl.program_id(1)
    seq, first, count, row = locate(cu_seqlens_q_ptr, q_block, num_seqs, num_tokens)
    seq_len = gl.load(seq_lens_ptr + seq)
    kv_len = gl.minimum(gl.maximum(seq_len, 0), max_blocks * BLOCK)
    # `common.keys_ok`: keys that cover the queries and fit the block-table row, else no tiles
    keys_fit = (seq_len >= count) & (seq_len <= max_blocks * BLOCK)
    # the keys before the queries; without the causal mask (a lab's question, never the contract's) the
    # queries are placed after every key, so that each sees them all
    context = kv_len - count if CAUSAL else kv_len
    # the keys the Q-block's last row sees; none for a Q-block of no queries
    keys = gl.minimum(gl.maximum(context + row + BLOCK_M, 0), kv_len)
    n_tiles = gl.where((row >= 0) & (row < count) & keys_fit, gl.cdiv(keys, TILE), 0)
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, HALF, D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, TILE, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, TILE, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # both consumers read every tile
        mbarrier.init(v_empty.index(i), count=2)
    args = (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty,
            out_ptr, out_stride_t, out_stride_h, v_cache_ptr, v_stride_row,
            block_table_ptr + seq.to(gl.int64) * block_table_stride, kv_rows, head, (head // GROUP) * D,
            first, count, row, context, kv_len, n_tiles, scale_log2)
    gl.warp_specialize([(_consume_low, args), (_consume_high, args), (_load, args)], [4, 1],
                       [CONSUMER_REGS, LOADER_REGS])


HEAD_SIZES = (64, 128)  # a row of 128 or 256 bytes: the 128-byte swizzle; both compiled for sm_90 on a CPU
BLOCK_SIZES = (16, 32, 64, 128)  # whole cache blocks per tile, each a TMA box of >= 8 rows (1 KiB)


def descriptors(q, k_cache, v_cache):
    """Host TMA descriptors: q as [tokens, query heads x D] in boxes of 64 rows, each cache as
    [blocks x block size, KV heads x D] in boxes of one cache block (`planning.tma_layout`
    holds the strides this needs)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    num_tokens, num_q_heads, head_size = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)  # wgmma's, every tile
    q_desc = TensorDescriptor(q, [num_tokens, num_q_heads * head_size], [q.stride(0), 1],
                              [HALF.value, head_size], layout)
    rows = [num_blocks * block_size, num_kv_heads * head_size]
    return (q_desc,
            TensorDescriptor(k_cache, rows, [k_cache.stride(1), 1], [block_size, head_size], layout),
            TensorDescriptor(v_cache, rows, [v_cache.stride(1), 1], [block_size, head_size], layout))


def q_blocks(num_tokens: int, num_seqs: int) -> int:
    """The grid's Q-blocks: `common.find_seq_idx`'s bound, one more per sequence for its partial block."""
    return num_tokens // BLOCK_M.value + num_seqs
