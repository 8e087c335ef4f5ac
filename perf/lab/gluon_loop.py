"""Lab: the paged loop of `perf.lab.warp_specialize`, warp-specialized by hand in Gluon (sm_90).

Triton's automatic warp specialization cannot take the paged kernel's loop on sm_90 (it needs
TMA descriptors on every dot operand, 4 warps, no else block, no while loop; and where it did
apply, its output was wrong: docs/lab/2026-11-27.md). Gluon (`triton.experimental.gluon`,
shipped with Triton 3.6) lets a kernel name its own partitions, shared buffers and barriers,
as FlashAttention-3 does on Hopper. This is the smallest such loop that answers whether the
partitioned form is worth a rewrite of the prefill:

- **a loader** (one warp, few registers) reads each tile of K and V by TMA, one copy per cache
  block into its rows of the stage's buffer, so blocks smaller than the tile (the anchor's 16
  keys) still fill a tile of 128 keys; the copies complete on the stage's `ready` barrier;
- **two consumers** (one warpgroup each, most registers) take 64 of the Q-block's 128 rows each:
  Q K^T on wgmma, the online softmax, P V on wgmma with P from registers; each arrives on the
  stage's `empty` barrier when its product has read the buffer. Nothing but those barriers
  orders them, so one consumer's softmax runs while the other's products hold the tensor cores,
  and the loader runs ahead by `stages` tiles.

The same problem as the Triton loop (one query head per program, no mask, llama3-8b's heads);
its rows are timed beside that loop's in `perf.lab.warp_specialize`. Not interpretable: Gluon
has no interpreter mode; on a CPU it is compiled for sm_90 only (`compile_for_sm90`).
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

BLOCK_M = 128  # the Q-block: two consumers of 64 rows (wgmma's M per warpgroup)
TILE = 128  # keys per tile; FA3's tile for head 128 in 16 bits (hopper/tile_size.h, read 2026-11-28)
STAGES = 2  # K and V buffers of 32 KiB each per stage, Q 32 KiB: 160 KiB of an SM's 227
CONSUMER_REGS = 240  # per thread of each consumer warpgroup (FA3's split for 2 consumers: 240 / 24)
LOADER_REGS = 24  # the least setmaxnreg allows
MAXNREG = 168  # the kernel's average: (2 x 240 + 24) / 3 warpgroups


@gluon.jit
def _consume(q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, O, first, head, row_stride,
             n_queries, n_tiles, scale_log2, HALF: gl.constexpr):
    """64 rows of the Q-block (HALF 0 or 1) over every tile: a consumer warpgroup's whole work."""
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, TILE, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.index(HALF)
    m = gl.full([64], float("-inf"), gl.float32, rows_s)
    total = gl.zeros([64], gl.float32, rows_s)
    acc = gl.zeros([64, D], gl.float32, o_layout)
    zero_s = gl.zeros([64, TILE], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(n_tiles):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        s = warpgroup_mma(q, k_bufs.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(s, ))
        mbarrier.arrive(k_empty.index(stage), count=1)
        s = s * scale_log2
        m_new = gl.maximum(m, gl.max(s, axis=1))
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m - m_new)
        total = total * alpha + gl.sum(p, axis=1)
        m = m_new
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, rows_o), 1)
        p16 = gl.convert_layout(p.to(gl.bfloat16), p_layout)
        mbarrier.wait(v_ready.index(stage), phase)
        acc = warpgroup_mma(p16, v_bufs.index(stage), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(stage), count=1)
    out = acc / gl.expand_dims(gl.convert_layout(total, rows_o), 1)
    rows = first + HALF * 64 + gl.arange(0, 64, rows_o)
    cols = gl.arange(0, D, gl.SliceLayout(0, o_layout))
    offsets = gl.expand_dims(rows, 1) * row_stride + head * D + gl.expand_dims(cols, 0)
    gl.store(O + offsets, out.to(O.dtype.element_ty), mask=gl.expand_dims(rows < n_queries, 1))


@gluon.jit
def _consume_low(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, O,
                 BT, first, head, col, row_stride, n_queries, n_tiles, scale_log2):
    _consume(q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, O, first, head,
             row_stride, n_queries, n_tiles, scale_log2, 0)


@gluon.jit
def _consume_high(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty,
                  O, BT, first, head, col, row_stride, n_queries, n_tiles, scale_log2):
    _consume(q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, O, first, head,
             row_stride, n_queries, n_tiles, scale_log2, 1)


@gluon.jit
def _load(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, O,
          BT, first, head, col, row_stride, n_queries, n_tiles, scale_log2):
    """The loader: Q once, then K and V a tile at a time, one TMA copy per cache block."""
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    PER_TILE: gl.constexpr = TILE // BLOCK
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [first, head * D], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [first + 64, head * D], q_bar, q_smem.index(1))
    for j in range(n_tiles):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_empty.index(stage), phase ^ 1)  # a fresh barrier passes phase 1: the first lap
        mbarrier.expect(k_ready.index(stage), PER_TILE * k_desc.block_type.nbytes)
        for i in gl.static_range(PER_TILE):
            block = gl.load(BT + j * PER_TILE + i)
            tma.async_copy_global_to_shared(k_desc, [block * BLOCK, col], k_ready.index(stage),
                                            k_bufs.index(stage).slice(i * BLOCK, BLOCK))
        mbarrier.wait(v_empty.index(stage), phase ^ 1)
        mbarrier.expect(v_ready.index(stage), PER_TILE * v_desc.block_type.nbytes)
        for i in gl.static_range(PER_TILE):
            block = gl.load(BT + j * PER_TILE + i)
            tma.async_copy_global_to_shared(v_desc, [block * BLOCK, col], v_ready.index(stage),
                                            v_bufs.index(stage).slice(i * BLOCK, BLOCK))


@gluon.jit
def paged_loop_ws(q_desc, k_desc, v_desc, O, BT, n_queries, n_tiles, scale_log2, HEADS: gl.constexpr,
                  GROUP: gl.constexpr, D: gl.constexpr, TILE: gl.constexpr, BLOCK: gl.constexpr,
                  STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    """Rows 128 * program_id(0).. of query head program_id(1) over n_tiles tiles of the block table
    BT; Q and O [queries, HEADS * D], K and V [cache rows, HEADS // GROUP * D] (as
    `perf.lab.warp_specialize.paged_loop`)."""
    head = gl.program_id(1)
    first = gl.program_id(0) * 128
    col = (head // GROUP) * D
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, 64, D], q_desc.layout)
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
    args = (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, k_empty, v_ready, v_empty, O, BT,
            first, head, col, HEADS * D, n_queries, n_tiles, scale_log2)
    gl.warp_specialize([(_consume_low, args), (_consume_high, args), (_load, args)], [4, 1],
                       [CONSUMER_REGS, LOADER_REGS])


def descriptors(q, k, v, block: int, head: int = 128):
    """Host TMA descriptors: Q in halves of a Q-block (64 rows), K and V a cache block at a time,
    all in the 128-byte swizzle wgmma reads."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = gl.bfloat16 if str(q.dtype) == "torch.bfloat16" else gl.float16
    layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=dtype.primitive_bitwidth, rank=2)
    return (TensorDescriptor.from_tensor(q, [64, head], layout),
            TensorDescriptor.from_tensor(k, [block, head], layout),
            TensorDescriptor.from_tensor(v, [block, head], layout))


def launch(inputs: dict, out, tile: int = TILE, stages: int = STAGES):
    """One call over `perf.lab.warp_specialize.make_inputs`' inputs (keys a multiple of the tile)."""
    keys, block, head = inputs["keys"], inputs["block"], inputs["head"]
    q_desc, k_desc, v_desc = descriptors(inputs["q"], inputs["k"], inputs["v"], block, head)
    grid = (triton.cdiv(keys, BLOCK_M), inputs["heads"])
    paged_loop_ws[grid](q_desc, k_desc, v_desc, out, inputs["table"], keys, keys // tile,
                        head ** -0.5 * 1.4426950408889634, HEADS=inputs["heads"],
                        GROUP=inputs["heads"] // inputs["kv_heads"], D=head, TILE=tile, BLOCK=block,
                        STAGES=stages, CONSUMER_REGS=CONSUMER_REGS, LOADER_REGS=LOADER_REGS,
                        num_warps=4, maxnreg=MAXNREG)
