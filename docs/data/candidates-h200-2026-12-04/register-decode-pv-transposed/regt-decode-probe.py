"""Probe (ran as `.fi/regt/probe.py`; `run.sh` names it): the register decode with P V transposed (O^T = V^T P^T). A
program per (sequence, KV head) item, W warps, each warp its own 16 keys a step with its own online softmax, merged
across warps at the end; every load from global memory straight into mma.sync's operand registers (Triton's MMA v2,
fp16 products), as packed 32-bit words.

Against the register decode of 2026-12-04 (`register-decode-probe.py`, P V as O = P V, 16 rows of which 7 are the
group): the accumulator O^T is [128 dims, 8 queries], 32 registers a thread where O took 64 (half of them padding
rows), its products 8 mma a step where O = P V took 16, and its rescale 32 multiplies where O's took 64. V^T is the A
operand: thread (g, t) reads 16 contiguous bytes (dims 16g..16g+15, O^T's rows permuted, undone at the store) of keys
2t, 2t + 1, 2t + 8, 2t + 9. P^T, the B operand, is in two forms (QKS):
- QKS=0: S = q K^T as before (16 rows, 7 real): its accumulator's rows 0-7 are P^T's B operand register for
  register (thread (g, t) holds keys 2t, 2t + 1, 2t + 8, 2t + 9 of query g), no data moved;
- QKS=1: S^T = K q^T (K the A operand, q^T the B operand, 8 mma a step where S took 16), P^T moved across lanes.

A form is W:QKS:DEPTH[:EARLY]: DEPTH + 1 register buffers in an unrolled ring (a negative DEPTH: `regt_decode_ring`,
S^T, each warp's steps copied by `cp.async` into -DEPTH slots of shared memory; QKS 2: the same with DEPTH slots and
the copies in inline PTX: `regt_decode_ring`), each warp's block ids read a ring ahead (`block-ids-ahead.diff`: the
first call's probe read them with each refill); EARLY (1, the forms timed) converts V to fp16 in its load's layout
and then pairs the keys' halves, 0 pairs the bytes first (more instructions on the CPU). Whole steps run unmasked (a
prefetch past them reads the last whole step again, its keys masked out of the scores), the partial last step after
the loop, masked. Run from the repository root on an sm_90 GPU: checks each form against an fp32 reference on a
poisoned output (small batches of uneven lengths first, then each timed batch), then times it beside the production
entry and the token items (graph replay, L2 flushed, ROUNDS rounds); writes $OUT/regt-<TAG>.json."""
import math
import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2


@gluon.jit
def _to_bytes(words, L: gl.constexpr):
    """int32 words (layout SliceLayout(last, L)) as e4m3 bytes with a trailing dim of 4, in L."""
    x = gl.expand_dims(words, len(words.shape))
    x = x + gl.full(x.shape[:-1] + [4], 0, gl.int32, L)
    y = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r,r,r", [x], dtype=gl.int8, is_pure=True, pack=4)
    return y.to(gl.float8e4nv, bitcast=True)


@gluon.constexpr_function
def _axis_layout(L, rank, d):
    """The layout of a 1-D index along dim d of a rank-`rank` tensor in L (every other dim sliced away)."""
    lay = L
    for k in reversed(range(rank)):
        if k != d:
            lay = gl.SliceLayout(k, lay)
    return lay


@gluon.jit
def _idx(size: gl.constexpr, L: gl.constexpr, rank: gl.constexpr, d: gl.constexpr):
    """0..size-1 along dim d of a rank-`rank` tensor in L, size 1 along every other dim."""
    x = gl.arange(0, size, _axis_layout(L, rank, d))
    for k in gl.static_range(rank):
        if k != d:
            x = gl.expand_dims(x, k)
    return x


@gluon.jit
def _word_rows(first, kin, n, table, blk, s_kb, s_kp, head_off, BLOCK: gl.constexpr, MASKED: gl.constexpr):
    """Word offsets of keys first + kin (first: each warp's first key, size-1 dims but the warp's; kin: in-warp key
    indices) and which are below n. Unmasked, a warp's 16 keys lie in one block (BLOCK a multiple of 16): one block
    id a warp."""
    pos = first + kin
    ok = pos < n
    if MASKED:
        blk = gl.load(table + pos // BLOCK, mask=ok, other=0)
        row = (blk.to(gl.int64) * s_kb + (pos % BLOCK) * s_kp + head_off) // 4
    else:  # blk: each warp's block id, read a ring ahead (`_blocks`)
        row = blk.to(gl.int64) * (s_kb // 4) + ((first % BLOCK + kin) * s_kp + head_off) // 4
    return row, ok


@gluon.jit
def _fetch(ptr, mask, MASKED: gl.constexpr, POINTERS: gl.constexpr = False):
    """The words at ptr (zeros where a masked step's mask is off), or with POINTERS the pointers (for cp.async)."""
    if POINTERS:
        res = ptr
    elif MASKED:
        res = gl.load(ptr, mask=mask, other=0)
    else:
        res = gl.load(ptr)
    return res


@gluon.jit
def _ka_words(k_ptr, table, base, n, blk, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
              KAW: gl.constexpr, MASKED: gl.constexpr, POINTERS: gl.constexpr = False):
    """K words for S^T's A operand, [W, 2 (r), 8 (g), 4 (t), 8 (c)]: thread (g, t) keys g + 8r, bytes 32t..32t+31."""
    WL: gl.constexpr = gl.SliceLayout(5, KAW)
    L4: gl.constexpr = gl.SliceLayout(4, WL)
    first = base + _idx(W, L4, 4, 0) * 16
    kin = _idx(2, L4, 4, 1) * 8 + _idx(8, L4, 4, 2)
    row, ok = _word_rows(first, kin, n, table, blk, s_kb, s_kp, head_off, BLOCK, MASKED)  # [W, 2, 8, 1]
    off = _idx(4, WL, 5, 3) * 8 + _idx(8, WL, 5, 4)
    ptr = k_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + gl.expand_dims(row, 4) + off
    return _fetch(ptr, gl.expand_dims(ok, 4) & (off >= 0), MASKED, POINTERS)


@gluon.jit
def _ka_operand(words, W: gl.constexpr, KAW: gl.constexpr, KA: gl.constexpr):
    """K words as the fp16 A operand [W, 16 keys (8r + g), 128 (k = 16c + 8h + 2t + i = byte 32t + 4c + 2h + i)]."""
    k = _to_bytes(words, KAW)
    k = gl.reshape(k.to(gl.float16), [W, 2, 8, 4, 8, 2, 2])  # [W, r, g, t, c, h, i]
    k = gl.permute(k, [0, 1, 2, 4, 5, 3, 6])  # [W, r, g, c, h, t, i]
    return gl.convert_layout(gl.reshape(k, [W, 16, 128]), KA, assert_trivial=True)


@gluon.jit
def _kb_words(k_ptr, table, base, n, blk, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
              KBW: gl.constexpr, MASKED: gl.constexpr):
    """K words for S's B operand, [W, 16 keys, 4 (t), 8]: thread (g, t) keys g, g + 8, bytes 16t.. and 64 + 16t..."""
    WL: gl.constexpr = gl.SliceLayout(4, KBW)
    L3: gl.constexpr = gl.SliceLayout(3, WL)
    first = base + _idx(W, L3, 3, 0) * 16
    kin = _idx(16, L3, 3, 1)
    row, ok = _word_rows(first, kin, n, table, blk, s_kb, s_kp, head_off, BLOCK, MASKED)  # [W, 16, 1]
    w = _idx(8, WL, 4, 3)
    off = _idx(4, WL, 4, 2) * 4 + (w // 4) * 16 + w % 4
    ptr = k_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + gl.expand_dims(row, 3) + off
    return _fetch(ptr, gl.expand_dims(ok, 3) & (off >= 0), MASKED)


@gluon.jit
def _kb_operand(words, W: gl.constexpr, KBW: gl.constexpr, KB: gl.constexpr):
    """K words as the fp16 B operand [W, 128 (k = 16c + 8h + 2t + i = byte 64(c // 4) + 16t + 4(c % 4) + 2h + i),
    16 keys] (the register decode's)."""
    k = gl.reshape(_to_bytes(words, KBW).to(gl.float16), [W, 16, 4, 8, 2, 2])
    k = gl.permute(k, [0, 3, 4, 2, 5, 1])  # [W, c, h, t, i, n]
    return gl.convert_layout(gl.reshape(k, [W, 128, 16]), KB, assert_trivial=True)


@gluon.jit
def _va_words(v_ptr, table, base, n, blk, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
              VAW: gl.constexpr, MASKED: gl.constexpr, POINTERS: gl.constexpr = False):
    """V words for O^T's A operand, [W, 2 (j), 4 (t), 2 (i), 8 (g), 4]: thread (g, t) keys 8j + 2t + i, bytes
    16g..16g+15."""
    WL: gl.constexpr = gl.SliceLayout(6, VAW)
    L4: gl.constexpr = gl.SliceLayout(4, gl.SliceLayout(5, WL))
    first = base + _idx(W, L4, 4, 0) * 16
    kin = _idx(2, L4, 4, 1) * 8 + _idx(4, L4, 4, 2) * 2 + _idx(2, L4, 4, 3)
    row, ok = _word_rows(first, kin, n, table, blk, s_kb, s_kp, head_off, BLOCK, MASKED)  # [W, 2, 4, 2]
    off = _idx(8, WL, 6, 4) * 4 + _idx(4, WL, 6, 5)
    ptr = v_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + gl.expand_dims(gl.expand_dims(row, 4), 5) + off
    return _fetch(ptr, gl.expand_dims(gl.expand_dims(ok, 4), 5) & (off >= 0), MASKED, POINTERS)


@gluon.jit
def _va_operand(words, W: gl.constexpr, VAW: gl.constexpr, VA: gl.constexpr, EARLY: gl.constexpr):
    """V words as the fp16 A operand of O^T = V^T P^T, [W, 128 (row 16m + 8h + g = dim 16g + 2m + h), 16 keys
    (8j + 2t + i)]. EARLY: converted to fp16 in the load's layout (adjacent dims paired, then moved as halves),
    else the bytes moved into the operand's layout first (adjacent keys paired for the conversion)."""
    v = _to_bytes(words, VAW)
    if EARLY:
        v = v.to(gl.float16)
    v = gl.reshape(v, [W, 2, 4, 2, 8, 4, 2, 2])  # [W, j, t, i, g, w, b1, b0]; dim 16g + 4w + 2b1 + b0
    v = gl.permute(v, [0, 5, 6, 7, 4, 1, 2, 3])  # [W, w, b1, b0, g, j, t, i]: m = 2w + b1, h = b0
    v = gl.convert_layout(gl.reshape(v, [W, 128, 16]), VA, assert_trivial=True)
    if not EARLY:
        v = v.to(gl.float16)
    return v


@gluon.jit
def _warp_blocks(table, base, n, BLOCK: gl.constexpr, W: gl.constexpr, L: gl.constexpr, rank: gl.constexpr):
    """Each warp's block id for the step at base, [W, 1, ...] in L (within the sequence's blocks)."""
    first = base + _idx(W, L, rank, 0) * 16
    return gl.load(table + gl.minimum(first // BLOCK, (n - 1) // BLOCK))


@gluon.jit
def _blocks(table, base, n, BLOCK: gl.constexpr, W: gl.constexpr, QKS: gl.constexpr, KW: gl.constexpr,
            VAW: gl.constexpr):
    """The step's block ids in the layouts of K's and V's word offsets."""
    if QKS:
        bk = _warp_blocks(table, base, n, BLOCK, W, gl.SliceLayout(4, gl.SliceLayout(5, KW)), 4)
    else:
        bk = _warp_blocks(table, base, n, BLOCK, W, gl.SliceLayout(3, gl.SliceLayout(4, KW)), 3)
    bv = _warp_blocks(table, base, n, BLOCK, W, gl.SliceLayout(4, gl.SliceLayout(5, gl.SliceLayout(6, VAW))), 4)
    return bk, bv


@gluon.jit
def _kv(k_ptr, v_ptr, table, base, n, bk, bv, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
        QKS: gl.constexpr, KW: gl.constexpr, VAW: gl.constexpr, MASKED: gl.constexpr):
    if QKS:
        k = _ka_words(k_ptr, table, base, n, bk, s_kb, s_kp, head_off, BLOCK, W, KW, MASKED)
    else:
        k = _kb_words(k_ptr, table, base, n, bk, s_kb, s_kp, head_off, BLOCK, W, KW, MASKED)
    v = _va_words(v_ptr, table, base, n, bv, s_kb, s_kp, head_off, BLOCK, W, VAW, MASKED)
    return k, v


@gluon.jit
def _step(qop, kw, vw, base, bound, scale, m, lt, acc, W: gl.constexpr, QKS: gl.constexpr, KW: gl.constexpr,
          KOP: gl.constexpr, VAW: gl.constexpr, VA: gl.constexpr, PB: gl.constexpr, MMA: gl.constexpr,
          EARLY: gl.constexpr):
    """One step of each warp's online softmax over its 16 keys (keys at or past bound masked out). m [W, 8] in
    SliceLayout(1, MMA) (O^T's columns), lt [W, 16, 8] (or [W, 8, 16]) each thread's running sums."""
    if QKS:
        st = mma_v2(_ka_operand(kw, W, KW, KOP), qop, gl.zeros([W, 16, 8], gl.float32, MMA)) * scale
        keys = gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(2, MMA)))
        wk = gl.arange(0, W, gl.SliceLayout(1, gl.SliceLayout(2, MMA)))
        pos = base + gl.expand_dims(wk, 1) * 16 + gl.expand_dims(keys, 0)  # [W, 16]
        st = gl.where(gl.expand_dims(pos < bound, 2), st, float("-inf"))
        m_new = gl.maximum(m, gl.max(st, axis=1))
        alpha = gl.exp2(m - m_new)
        pt = gl.exp2(st - gl.expand_dims(m_new, 1))
        lt = lt * gl.expand_dims(alpha, 1) + pt
        pb = gl.convert_layout(pt.to(gl.float16), PB)
    else:
        s = mma_v2(qop, _kb_operand(kw, W, KW, KOP), gl.zeros([W, 16, 16], gl.float32, MMA))
        s = gl.permute(gl.reshape(s, [W, 2, 8, 16]), [0, 2, 3, 1])
        s, _pad = gl.split(s)  # [W, 8, 16]: the accumulator's rows 0-7 (the group), rows 8-15 dropped
        s = s * scale
        SL: gl.constexpr = s.type.layout
        keys = gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(1, SL)))
        wk = gl.arange(0, W, gl.SliceLayout(1, gl.SliceLayout(1, SL)))
        pos = base + gl.expand_dims(wk, 1) * 16 + gl.expand_dims(keys, 0)  # [W, 16]
        s = gl.where(gl.expand_dims(pos < bound, 1), s, float("-inf"))
        m_rows = gl.convert_layout(m, gl.SliceLayout(2, SL))
        m_new_rows = gl.maximum(m_rows, gl.max(s, axis=2))
        p = gl.exp2(s - gl.expand_dims(m_new_rows, 2))
        alpha_rows = gl.exp2(m_rows - m_new_rows)
        lt = lt * gl.expand_dims(alpha_rows, 2) + p
        pb = gl.convert_layout(gl.permute(p.to(gl.float16), [0, 2, 1]), PB, assert_trivial=True)
        m_new = gl.convert_layout(m_new_rows, m.type.layout)
        alpha = gl.exp2(m - m_new)
    acc = mma_v2(_va_operand(vw, W, VAW, VA, EARLY), pb, acc * gl.expand_dims(alpha, 1))
    return m_new, lt, acc


@gluon.jit
def _finish(m, lt, acc, out_ptr, seq, head, s_ot, s_oh, v_scale, GROUP: gl.constexpr, W: gl.constexpr,
            QKS: gl.constexpr):
    """The warps' parts merged, normalised, stored (O^T's rows back in dim order)."""
    if QKS:
        sums = gl.sum(lt, axis=1)  # [W, 8], m's layout
    else:
        sums = gl.convert_layout(gl.sum(lt, axis=2), m.type.layout)
    top = gl.max(m, axis=0)  # [8]
    w8 = gl.exp2(m - gl.expand_dims(top, 0))  # [W, 8]
    total = gl.sum(acc * gl.expand_dims(w8, 1), axis=0)  # [128, 8]
    weight = gl.sum(sums * w8, axis=0)  # [8]
    o = total / gl.expand_dims(gl.convert_layout(weight, gl.SliceLayout(0, total.type.layout)), 0) * v_scale
    OL: gl.constexpr = gl.BlockedLayout([2, 1], [16, 2], [W, 1], [0, 1])
    o = gl.convert_layout(o, OL)
    r = gl.arange(0, 128, gl.SliceLayout(1, OL))
    qc = gl.arange(0, 8, gl.SliceLayout(0, OL))
    dim = (r % 8) * 16 + (r // 16) * 2 + (r // 8) % 2  # row 16m + 8h + g holds dim 16g + 2m + h
    optr = out_ptr + seq * s_ot + gl.expand_dims((head * GROUP + qc) * s_oh, 0) + gl.expand_dims(dim, 1)
    gl.store(optr, o.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(qc < GROUP, 0) & gl.expand_dims(r >= 0, 1))


@gluon.jit
def _ring_step(qop, kw, vw, bk, bv, base, refill, ring, bound, lim, scale, m, lt, acc, k_ptr, v_ptr, table, n,
               s_kb, s_kp,
               head_off, BLOCK: gl.constexpr, W: gl.constexpr, QKS: gl.constexpr, KW: gl.constexpr,
               KOP: gl.constexpr, VAW: gl.constexpr, VA: gl.constexpr, PB: gl.constexpr, MMA: gl.constexpr,
               EARLY: gl.constexpr):
    m, lt, acc = _step(qop, kw, vw, base, bound, scale, m, lt, acc, W, QKS, KW, KOP, VAW, VA, PB, MMA, EARLY)
    kw, vw = _kv(k_ptr, v_ptr, table, gl.minimum(refill, lim), n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, QKS, KW,
                 VAW, False)
    bk, bv = _blocks(table, gl.minimum(refill + ring, lim), n, BLOCK, W, QKS, KW, VAW)
    return m, lt, acc, kw, vw, bk, bv


@gluon.jit
def _scaled(q, qk_scale):
    """q in fp16 after a power of two, and the score scale that takes it back (log2 domain)."""
    amax = gl.max(gl.max(gl.max(gl.abs(q), axis=2), axis=1), axis=0)
    pw = gl.exp2(gl.floor(gl.log2(16384.0 / gl.maximum(amax, 1e-30))))
    return (q * pw).to(gl.float16), qk_scale / pw


@gluon.jit
def _qt_operand(q_ptr, seq, head, s_qt, s_qh, qk_scale, GROUP: gl.constexpr, W: gl.constexpr, QOP: gl.constexpr):
    """q^T, S^T's B operand [W, 128 (k), 8]: k = 16c + 8h + 2t + i holds dim 32t + 4c + 2h + i (K's A operand's
    order); `_scaled`."""
    kk = gl.arange(0, 128, gl.SliceLayout(1, gl.SliceLayout(0, QOP)))
    qc = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(0, QOP)))
    dim_of_k = (kk // 2 % 4) * 32 + (kk // 16) * 4 + (kk // 8 % 2) * 2 + kk % 2
    q_off = gl.expand_dims(dim_of_k, 1) + gl.expand_dims((head * GROUP + qc) * s_qh, 0)
    q_mask = gl.expand_dims(gl.expand_dims(dim_of_k >= 0, 1) & gl.expand_dims(qc < GROUP, 0), 0) & \
        (gl.zeros([W, 128, 8], gl.int32, QOP) == 0)
    q = gl.load(q_ptr + seq * s_qt + gl.expand_dims(q_off, 0), mask=q_mask, other=0.0).to(gl.float32)
    return _scaled(q, qk_scale)


@gluon.jit
def _item(lens_ptr, table_ptr, s_bt, s_kh, kv_heads):
    """This program's (sequence, KV head): its sequence, head, length, block-table row and head offset."""
    item = gl.program_id(0)
    seq = item // kv_heads
    head = item % kv_heads
    return seq, head, gl.load(lens_ptr + seq), table_ptr + seq.to(gl.int64) * s_bt, head * s_kh


@gluon.constexpr_function
def _mma_layout(W):
    """mma.sync (MMA v2) over [W, ...]: each warp its own products."""
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1, 1], instr_shape=[1, 16, 8])


@gluon.constexpr_function
def _v_bytes_layout(W):
    """V's bytes [W, j, t, i, g, w, b]: thread (g, t) (lane 4g + t) keys 8j + 2t + i, bytes 16g + 4w + b."""
    return gl.BlockedLayout([1, 2, 1, 2, 1, 4, 4], [1, 1, 4, 1, 8, 1, 1], [W, 1, 1, 1, 1, 1, 1], [6, 5, 2, 3, 4, 1, 0])


@gluon.constexpr_function
def _k_bytes_layout(W, QKS):
    """K's bytes. QKS: [W, r, g, t, c, b], thread (g, t) keys 8r + g, bytes 32t + 4c + b; else [W, 16 keys, t, w, b],
    thread (g, t) keys g, g + 8, bytes 16t.. and 64 + 16t.. (the afternoon's)."""
    if QKS:
        return gl.BlockedLayout([1, 2, 1, 1, 8, 4], [1, 1, 8, 4, 1, 1], [W, 1, 1, 1, 1, 1], [5, 4, 3, 1, 2, 0])
    return gl.BlockedLayout([1, 1, 1, 8, 4], [1, 8, 4, 1, 1], [W, 1, 1, 1, 1], [4, 3, 2, 1, 0])


@gluon.jit
def regt_decode(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr,
                s_qt, s_qh, s_kb, s_kp, s_kh, s_bt, s_ot, s_oh, kv_heads, qk_scale, v_scale,
                GROUP: gl.constexpr, BLOCK: gl.constexpr, W: gl.constexpr, QKS: gl.constexpr,
                DEPTH: gl.constexpr, EARLY: gl.constexpr):
    gl.static_assert(DEPTH >= 0 and DEPTH <= 2)
    gl.static_assert(GROUP <= 8)
    seq, head, n, table, head_off = _item(lens_ptr, table_ptr, s_bt, s_kh, kv_heads)
    MMA: gl.constexpr = _mma_layout(W)
    VA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    PB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    VAW: gl.constexpr = _v_bytes_layout(W)
    KW: gl.constexpr = _k_bytes_layout(W, QKS)
    if QKS:
        KOP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        QOP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        qop, scale = _qt_operand(q_ptr, seq, head, s_qt, s_qh, qk_scale, GROUP, W, QOP)
        lt = gl.zeros([W, 16, 8], gl.float32, MMA)
    else:
        KOP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        QOP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        rows = gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(2, QOP)))
        kk = gl.arange(0, 128, gl.SliceLayout(0, gl.SliceLayout(0, QOP)))
        dim_of_k = (kk // 64) * 64 + (kk // 2 % 4) * 16 + (kk // 16 % 4) * 4 + (kk // 8 % 2) * 2 + kk % 2
        q_rows = q_ptr + seq * s_qt + (head * GROUP + rows) * s_qh
        q_mask = gl.expand_dims(gl.expand_dims(rows < GROUP, 0), 2) & (gl.zeros([W, 16, 128], gl.int32, QOP) == 0)
        q = gl.load(gl.expand_dims(gl.expand_dims(q_rows, 0), 2) + gl.expand_dims(gl.expand_dims(dim_of_k, 0), 0),
                    mask=q_mask, other=0.0).to(gl.float32)
        qop, scale = _scaled(q, qk_scale)
        lt = gl.split(gl.permute(gl.reshape(gl.zeros([W, 16, 16], gl.float32, MMA), [W, 2, 8, 16]), [0, 2, 3, 1]))[0]

    m = gl.full([W, 8], -1.0e30, gl.float32, gl.SliceLayout(1, MMA))
    acc = gl.zeros([W, 128, 8], gl.float32, MMA)
    step = 16 * W
    full_end = n // step * step
    lim = gl.maximum(full_end - step, 0)
    ring = (DEPTH + 1) * step
    # buffer b: the words of step b (then b + ring, ...), and the block ids of its next refill, read a ring ahead
    bk, bv = _blocks(table, 0, n, BLOCK, W, QKS, KW, VAW)
    k0, v0 = _kv(k_ptr, v_ptr, table, 0, n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, QKS, KW, VAW, False)
    bk0, bv0 = _blocks(table, gl.minimum(ring, lim), n, BLOCK, W, QKS, KW, VAW)
    if DEPTH >= 1:
        bk, bv = _blocks(table, gl.minimum(step, lim), n, BLOCK, W, QKS, KW, VAW)
        k1, v1 = _kv(k_ptr, v_ptr, table, gl.minimum(step, lim), n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, QKS, KW,
                     VAW, False)
        bk1, bv1 = _blocks(table, gl.minimum(ring + step, lim), n, BLOCK, W, QKS, KW, VAW)
    if DEPTH >= 2:
        bk, bv = _blocks(table, gl.minimum(2 * step, lim), n, BLOCK, W, QKS, KW, VAW)
        k2, v2 = _kv(k_ptr, v_ptr, table, gl.minimum(2 * step, lim), n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, QKS,
                     KW, VAW, False)
        bk2, bv2 = _blocks(table, gl.minimum(ring + 2 * step, lim), n, BLOCK, W, QKS, KW, VAW)
    for base in range(0, full_end, ring):
        m, lt, acc, k0, v0, bk0, bv0 = _ring_step(
            qop, k0, v0, bk0, bv0, base, base + ring, ring, full_end, lim, scale, m, lt, acc, k_ptr, v_ptr, table, n,
            s_kb, s_kp, head_off, BLOCK, W, QKS, KW, KOP, VAW, VA, PB, MMA, EARLY)
        if DEPTH >= 1:
            m, lt, acc, k1, v1, bk1, bv1 = _ring_step(
                qop, k1, v1, bk1, bv1, base + step, base + ring + step, ring, full_end, lim, scale, m, lt, acc, k_ptr,
                v_ptr, table, n, s_kb, s_kp, head_off, BLOCK, W, QKS, KW, KOP, VAW, VA, PB, MMA, EARLY)
        if DEPTH >= 2:
            m, lt, acc, k2, v2, bk2, bv2 = _ring_step(
                qop, k2, v2, bk2, bv2, base + 2 * step, base + ring + 2 * step, ring, full_end, lim, scale, m, lt,
                acc, k_ptr, v_ptr, table, n, s_kb, s_kp, head_off, BLOCK, W, QKS, KW, KOP, VAW, VA, PB, MMA, EARLY)
    if full_end < n:
        kt, vt = _kv(k_ptr, v_ptr, table, full_end, n, bk0, bv0, s_kb, s_kp, head_off, BLOCK, W, QKS, KW, VAW, True)
        m, lt, acc = _step(qop, kt, vt, full_end, n, scale, m, lt, acc, W, QKS, KW, KOP, VAW, VA, PB, MMA, EARLY)
    _finish(m, lt, acc, out_ptr, seq, head, s_ot, s_oh, v_scale, GROUP, W, QKS)


@gluon.jit
def _prefetch_table(table, W: gl.constexpr):
    """The sequence's first 32 x W x 32 block ids into L1, a 128-byte line a thread: each refill reads its block id
    again."""
    PL: gl.constexpr = gl.BlockedLayout([1], [32], [W], [0])
    lines = gl.arange(0, 32 * W, PL) * 32
    gl.inline_asm_elementwise("prefetch.global.L1 [$1]; mov.u32 $0, 0;", "=r,l", [table + lines], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _refill(k_ring, v_ring, slot, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off, BLOCK: gl.constexpr,
            W: gl.constexpr, KW: gl.constexpr, VAW: gl.constexpr):
    """The step at `at` (block ids bk, bv) copied (cp.async, 16 bytes a copy) into ring slot `slot`, as one commit
    group."""
    kp = _ka_words(k_ptr, table, at, n, bk, s_kb, s_kp, head_off, BLOCK, W, KW, False, True)
    vp = _va_words(v_ptr, table, at, n, bv, s_kb, s_kp, head_off, BLOCK, W, VAW, False, True)
    async_copy.async_copy_global_to_shared(k_ring.index(slot), kp)
    async_copy.async_copy_global_to_shared(v_ring.index(slot), vp)
    async_copy.commit_group()


@gluon.constexpr_function
def _wait_asm(pending):
    return f"cp.async.wait_group {pending}; mov.b32 $0, 0;"


_COPY_ASM = gl.constexpr("{ .reg .u32 a; mov.u32 a, global_smem; add.u32 a, a, $4; "
                         "cp.async.cg.shared.global [a], [$8], 16; mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0; "
                         "mov.b32 $3, 0; }")
_READ_ASM = gl.constexpr("{ .reg .u32 a; mov.u32 a, global_smem; add.u32 a, a, $4; "
                         "ld.shared.v4.b32 {$0, $1, $2, $3}, [a]; }")


@gluon.jit
def _thread_op(asm: gl.constexpr, W: gl.constexpr):
    """asm run once by every thread (a tensor of one element a thread)."""
    one = gl.zeros([32 * W], gl.int32, gl.BlockedLayout([1], [32], [W], [0]))
    gl.inline_asm_elementwise(asm, "=r,r", [one], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _slot_addresses(slot, W: gl.constexpr, KW: gl.constexpr, VAW: gl.constexpr):
    """Each word's byte address in the ring for this thread's copies: a slot is W warps x 4 KiB (K's 2 KiB, then
    V's), a warp's part 4 chunks of 512 bytes for each, lane l's 16 bytes at 16l of each chunk."""
    KL: gl.constexpr = gl.SliceLayout(5, KW)
    w = _idx(W, KL, 5, 0)
    kaddr = slot * (W * 4096) + w * 4096 + (_idx(2, KL, 5, 1) * 2 + _idx(8, KL, 5, 4) // 4) * 512 + \
        (_idx(8, KL, 5, 2) * 4 + _idx(4, KL, 5, 3)) * 16 + (_idx(8, KL, 5, 4) % 4) * 4
    VL: gl.constexpr = gl.SliceLayout(6, VAW)
    vaddr = slot * (W * 4096) + _idx(W, VL, 6, 0) * 4096 + 2048 + (_idx(2, VL, 6, 1) * 2 + _idx(2, VL, 6, 3)) * 512 + \
        (_idx(8, VL, 6, 4) * 4 + _idx(4, VL, 6, 2)) * 16 + _idx(4, VL, 6, 5) * 4
    return kaddr, vaddr


@gluon.jit
def _asm_refill(slot, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off, BLOCK: gl.constexpr,
                W: gl.constexpr, KW: gl.constexpr, VAW: gl.constexpr):
    """The step at `at` (block ids bk, bv) copied by this thread's own cp.async (16 bytes each) into its part of ring
    slot `slot`: one commit group, out of Triton's sight (no barrier: each thread reads back only its own copies)."""
    kp = _ka_words(k_ptr, table, at, n, bk, s_kb, s_kp, head_off, BLOCK, W, KW, False, True)
    vp = _va_words(v_ptr, table, at, n, bv, s_kb, s_kp, head_off, BLOCK, W, VAW, False, True)
    kaddr, vaddr = _slot_addresses(slot, W, KW, VAW)
    gl.inline_asm_elementwise(_COPY_ASM, "=r,=r,=r,=r,r,r,r,r,l,l,l,l", [kaddr, kp.to(gl.int64, bitcast=True)],
                              dtype=gl.int32, is_pure=False, pack=4)
    gl.inline_asm_elementwise(_COPY_ASM, "=r,=r,=r,=r,r,r,r,r,l,l,l,l", [vaddr, vp.to(gl.int64, bitcast=True)],
                              dtype=gl.int32, is_pure=False, pack=4)
    _thread_op("cp.async.commit_group; mov.b32 $0, 0;", W)


@gluon.jit
def _ring_refill(ASM: gl.constexpr, k_ring, v_ring, slot, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off,
                 BLOCK: gl.constexpr, W: gl.constexpr, KW: gl.constexpr, VAW: gl.constexpr):
    if ASM:
        _asm_refill(slot, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, KW, VAW)
    else:
        _refill(k_ring, v_ring, slot, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, KW, VAW)


@gluon.jit
def _ring_read(ASM: gl.constexpr, k_ring, v_ring, slot, R: gl.constexpr, W: gl.constexpr, KW: gl.constexpr,
               VAW: gl.constexpr):
    """The words of ring slot `slot`, once this thread's copies into it have landed."""
    if ASM:
        _thread_op(_wait_asm(R - 1), W)
        kaddr, vaddr = _slot_addresses(slot, W, KW, VAW)
        kw = gl.inline_asm_elementwise(_READ_ASM, "=r,=r,=r,=r,r,r,r,r", [kaddr], dtype=gl.int32, is_pure=False,
                                       pack=4)
        vw = gl.inline_asm_elementwise(_READ_ASM, "=r,=r,=r,=r,r,r,r,r", [vaddr], dtype=gl.int32, is_pure=False,
                                       pack=4)
    else:
        async_copy.wait_group(R - 1)
        kw = k_ring.index(slot).load(gl.SliceLayout(5, KW))
        vw = v_ring.index(slot).load(gl.SliceLayout(6, VAW))
    return kw, vw


@gluon.jit
def regt_decode_ring(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr,
                     s_qt, s_qh, s_kb, s_kp, s_kh, s_bt, s_ot, s_oh, kv_heads, qk_scale, v_scale,
                     GROUP: gl.constexpr, BLOCK: gl.constexpr, W: gl.constexpr, R: gl.constexpr, ASM: gl.constexpr):
    """regt_decode (S^T = K q^T) with each warp's steps copied by cp.async into a ring of R slots of shared memory,
    R - 1 steps ahead (no registers held by a copy in flight); each thread reads back the words it copied. The
    sequence's block ids are prefetched into L1 first: each refill reads its block id again, before the step.
    Without ASM the copies, waits and reads are Triton's (`async_copy`, shared memory descriptors), and Triton puts
    two CTA barriers in each step. With ASM they are inline PTX (cp.async.cg, cp.async.wait_group, ld.shared.v4),
    out of Triton's sight, and no barrier is in the loop: each thread copies 16-byte pieces of its own operands into
    its own part of the ring (reserved by an allocation Triton places at global_smem + 0, zeroed once)."""
    gl.static_assert(GROUP <= 8)
    seq, head, n, table, head_off = _item(lens_ptr, table_ptr, s_bt, s_kh, kv_heads)
    MMA: gl.constexpr = _mma_layout(W)
    VA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    PB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    VAW: gl.constexpr = _v_bytes_layout(W)
    KW: gl.constexpr = _k_bytes_layout(W, 1)
    KOP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    QOP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    qop, scale = _qt_operand(q_ptr, seq, head, s_qt, s_qh, qk_scale, GROUP, W, QOP)

    _prefetch_table(table, W)
    if ASM:
        RL: gl.constexpr = gl.BlockedLayout([4], [32], [W], [0])
        k_ring = gl.allocate_shared_memory(gl.int32, [R * W * 1024], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        k_ring.store(gl.zeros([R * W * 1024], gl.int32, RL))
        v_ring = k_ring
        gl.thread_barrier()
    else:
        k_ring = gl.allocate_shared_memory(gl.int32, [R, W, 2, 8, 4, 8],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[4, 3, 2, 1, 0]))
        v_ring = gl.allocate_shared_memory(gl.int32, [R, W, 2, 4, 2, 8, 4],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[5, 4, 3, 2, 1, 0]))

    m = gl.full([W, 8], -1.0e30, gl.float32, gl.SliceLayout(1, MMA))
    acc = gl.zeros([W, 128, 8], gl.float32, MMA)
    lt = gl.zeros([W, 16, 8], gl.float32, MMA)
    step = 16 * W
    full_end = n // step * step
    lim = gl.maximum(full_end - step, 0)
    for i in gl.static_range(R):
        at = gl.minimum(i * step, lim)
        bk, bv = _blocks(table, at, n, BLOCK, W, 1, KW, VAW)
        _ring_refill(ASM, k_ring, v_ring, i, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, KW,
                     VAW)
    for j in range(0, full_end // step):
        slot = j % R
        at = gl.minimum((j + R) * step, lim)
        bk, bv = _blocks(table, at, n, BLOCK, W, 1, KW, VAW)  # read before the step
        kw, vw = _ring_read(ASM, k_ring, v_ring, slot, R, W, KW, VAW)
        m, lt, acc = _step(qop, kw, vw, j * step, full_end, scale, m, lt, acc, W, 1, KW, KOP, VAW, VA, PB, MMA, 1)
        _ring_refill(ASM, k_ring, v_ring, slot, k_ptr, v_ptr, table, at, n, bk, bv, s_kb, s_kp, head_off, BLOCK, W,
                     KW, VAW)
    if ASM:
        _thread_op("cp.async.wait_all; mov.b32 $0, 0;", W)
        # every warp's copies landed before any warp's merge scratch (Triton may place it over the ring) is written
        gl.thread_barrier()
    else:
        async_copy.wait_group(0)
    if full_end < n:
        bk, bv = _blocks(table, full_end, n, BLOCK, W, 1, KW, VAW)
        kt, vt = _kv(k_ptr, v_ptr, table, full_end, n, bk, bv, s_kb, s_kp, head_off, BLOCK, W, 1, KW, VAW, True)
        m, lt, acc = _step(qop, kt, vt, full_end, n, scale, m, lt, acc, W, 1, KW, KOP, VAW, VA, PB, MMA, 1)
    _finish(m, lt, acc, out_ptr, seq, head, s_ot, s_oh, v_scale, GROUP, W, 1)


class Reg:
    """One form of regt_decode over a paged decode batch (one query a sequence, e4m3 cache)."""

    def __init__(self, batch, warps, qks, depth, early=1):
        q, k = batch.q, batch.k_cache
        assert k.shape[3] == 128 and k.stride(3) == 1 and k.stride(1) % 4 == 0
        self.batch = batch
        self.kv_heads = k.shape[2]
        self.group = q.shape[1] // self.kv_heads
        assert self.group <= 8
        self.items = batch.block_table.shape[0] * self.kv_heads
        opts = batch.options
        self.qk_scale = opts["scale"] * float(opts.get("k_scale", torch.ones(1)).item()) * math.log2(math.e)
        self.v_scale = float(opts.get("v_scale", torch.ones(1)).item())
        if qks == 2 or depth < 0:  # regt_decode_ring: QKS 2 its copies in inline PTX (depth slots), else -depth
            slots = depth if qks == 2 else -depth
            self.kw = dict(GROUP=self.group, BLOCK=k.shape[1], W=warps, R=slots, ASM=qks == 2, num_warps=warps)
            self.label = f"regt w{warps} {'asm' if qks == 2 else 'cp.async'} r{slots}"
            self.kernel = regt_decode_ring
        else:
            self.kw = dict(GROUP=self.group, BLOCK=k.shape[1], W=warps, QKS=qks, DEPTH=depth, EARLY=early,
                           num_warps=warps)
            self.label = f"regt w{warps} qks{qks} d{depth}" + ("" if early else " late")
            self.kernel = regt_decode

    def __call__(self, out):
        b, k = self.batch, self.batch.k_cache
        self.kernel[(self.items,)](
            b.q, k, b.v_cache, b.block_table, b.seq_lens, out,
            b.q.stride(0), b.q.stride(1), k.stride(0), k.stride(1), k.stride(2), b.block_table.stride(0),
            out.stride(0), out.stride(1), self.kv_heads, self.qk_scale, self.v_scale, **self.kw)


def _register_decode():
    """The afternoon's register-decode probe, whose checks and timing (`small_checks`, `main`, the fp32 reference)
    this probe runs with its own forms; loaded from its folder: this probe runs from the repository root."""
    import importlib.util

    path = "docs/data/candidates-h200-2026-12-04/register-decode/register-decode-probe.py"
    spec = importlib.util.spec_from_file_location("register_decode_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORMS = [tuple(int(x) for x in f.split(":")) for f in
         os.environ.get("FORMS", "16:1:0:1,8:1:1:1").split(",")]


def main():
    _register_decode().main(Reg, FORMS, "regt")


if __name__ == "__main__":
    main()
