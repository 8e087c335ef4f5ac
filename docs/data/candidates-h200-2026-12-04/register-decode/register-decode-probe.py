"""Probe: the fp8 decode with no shared memory in its loop (ran as `.fi/reg/probe.py`; `run.sh` names it). A program
per (sequence, KV head) item, W warps, each warp its own KEYS keys a step (keys KEYS*w.. of the program's W*KEYS-key
step) with its own online softmax, merged across warps once at the end. Every load goes from global memory straight
into the registers that mma.sync (Triton's MMA v2 layouts, fp16 products) reads, as packed 32-bit words (a tensor of
8-bit elements would be carried a byte a register): K as the B operand of S = q K^T, each thread 16 contiguous bytes
at 16t and at 64 + 16t of a key (the product's reduction dims permuted to make them so, q permuted alike, q in fp16
after a power of two); V as the B operand of O = P V, each thread 16 contiguous bytes of a key (O's columns
permuted, undone at the store). sm_90 has no e4m3 mma.sync (ptxas converts both operands of one, every step), so K
and V are converted to fp16 in registers. A form is W:PV_FP8:DEPTH:KEYS[:ASYNC[:FENCE]]: DEPTH + 1 buffers in a
ring, each refilled DEPTH + 1 steps ahead right after its step (registers: reg_decode; cp.async into shared buffers
with ASYNC: reg_decode_async); FENCE puts each step and its refill in a branch of its own. The PV_FP8 forms (P
rounded to e4m3, V kept e4m3) compiled with spills at 255 registers and were never timed. Whole steps run unmasked
(a prefetch past them reads the last whole step again, its keys masked out of the scores), the partial last step
after the loop, masked.

Run from the repository root on an sm_90 GPU: checks each form against an fp32 reference on a poisoned output
(small batches of uneven lengths first, then each timed batch), then times it beside the production entry and the
token items (graph replay, L2 flushed, ROUNDS rounds); writes $OUT/reg-<TAG>.json. compile-sm90.py compiles the
forms for sm_90 on the CPU."""
import json
import math
import os

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2


@gluon.jit
def _bytes(words, L5: gl.constexpr):
    """[..., n] int32 words (layout SliceLayout(4, L5)) as [..., n, 4] e4m3 bytes, in L5. The words are what the
    loop carries: a tensor of 8-bit elements would be carried a byte a register."""
    x = gl.expand_dims(words, 4) + gl.zeros([words.shape[0], words.shape[1], words.shape[2], words.shape[3], 4],
                                            gl.int32, L5)
    y = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r,r,r", [x], dtype=gl.int8, is_pure=True, pack=4)
    return y.to(gl.float8e4nv, bitcast=True)


@gluon.jit
def _rows(base, n, table, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr, KEYS: gl.constexpr,
          L2: gl.constexpr, MASKED: gl.constexpr):
    """The step's keys' word offsets [W, KEYS] (layout L2) and which are below n. Unmasked (every key below n)
    and with BLOCK a multiple of KEYS, a warp's keys lie in one block: one id a warp, the rest loop-invariant."""
    keys = gl.arange(0, KEYS, gl.SliceLayout(0, L2))
    warps = gl.arange(0, W, gl.SliceLayout(1, L2))
    if MASKED or BLOCK % KEYS != 0:
        pos = base + gl.expand_dims(warps, 1) * KEYS + gl.expand_dims(keys, 0)
        ok = pos < n
        blk = gl.load(table + pos // BLOCK, mask=ok, other=0)
        row = (blk.to(gl.int64) * s_kb + (pos % BLOCK) * s_kp + head_off) // 4
    else:
        first = base + warps * KEYS
        blk = gl.load(table + gl.minimum(first // BLOCK, (n - 1) // BLOCK))  # [W], within the sequence's blocks
        inner = (gl.expand_dims(first % BLOCK, 1) + gl.expand_dims(keys, 0)) * (s_kp // 4) + head_off // 4
        row = gl.expand_dims(blk.to(gl.int64) * (s_kb // 4), 1) + inner
        ok = row >= 0
    return row, ok


@gluon.jit
def _k_words(k_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
             KEYS: gl.constexpr, KW: gl.constexpr, MASKED: gl.constexpr, POINTERS: gl.constexpr = False):
    """The step's K words [W, KEYS, 4 (t), 8]: thread (g, t) bytes 16t..16t+15 and 64+16t..64+16t+15 of keys
    g, g + 8, ..."""
    row, ok = _rows(base, n, table, s_kb, s_kp, head_off, BLOCK, W, KEYS,
                    gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, KW))), MASKED)
    t = gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(3, gl.SliceLayout(4, KW)))))
    w = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(4, KW)))))
    # word w of thread t: bytes 16t + 4(w % 4) + 64(w // 4): a warp's load covers 64 whole bytes of each key
    off = gl.expand_dims(gl.expand_dims(gl.expand_dims(t * 4, 0), 0), 3) + \
        gl.expand_dims(gl.expand_dims(gl.expand_dims((w // 4) * 16 + w % 4, 0), 0), 0)
    ptr = k_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + gl.expand_dims(gl.expand_dims(row, 2), 3) + off
    if POINTERS:
        res = ptr
    elif MASKED:
        res = gl.load(ptr, mask=gl.expand_dims(gl.expand_dims(ok, 2), 3), other=0)
    else:
        res = gl.load(ptr)
    return res


@gluon.jit
def _k_operand(words, W: gl.constexpr, KEYS: gl.constexpr, KW: gl.constexpr, KB: gl.constexpr):
    """K words as the fp16 B operand [W, 128 (reduction index 16c + 8h + 2t + i = byte 64(c // 4) + 16t + 4(c % 4)
    + 2h + i), KEYS]:
    converted in adjacent pairs, which are the operand's pairs (sm_90 has no e4m3 mma.sync: ptxas converts
    both operands of one, q too, every step)."""
    k = gl.reshape(_bytes(words, KW).to(gl.float16), [W, KEYS, 4, 8, 2, 2])  # [W, n, t, c, h, i]
    k = gl.permute(k, [0, 3, 4, 2, 5, 1])  # [W, c, h, t, i, n]
    return gl.convert_layout(gl.reshape(k, [W, 128, KEYS]), KB, assert_trivial=True)


@gluon.jit
def _v_words(v_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
             KEYS: gl.constexpr, VW: gl.constexpr, MASKED: gl.constexpr, POINTERS: gl.constexpr = False):
    """The step's V words [W, KEYS, 8 (g), 4]: thread (g, t) bytes 16g..16g+15 of its keys."""
    row, ok = _rows(base, n, table, s_kb, s_kp, head_off, BLOCK, W, KEYS,
                    gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, VW))), MASKED)
    g = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(3, gl.SliceLayout(4, VW)))))
    w = gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(4, VW)))))
    off = gl.expand_dims(gl.expand_dims(gl.expand_dims(g * 4, 0), 0), 3) + \
        gl.expand_dims(gl.expand_dims(gl.expand_dims(w, 0), 0), 0)
    ptr = v_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + gl.expand_dims(gl.expand_dims(row, 2), 3) + off
    if POINTERS:
        res = ptr
    elif MASKED:
        res = gl.load(ptr, mask=gl.expand_dims(gl.expand_dims(ok, 2), 3), other=0)
    else:
        res = gl.load(ptr)
    return res


@gluon.jit
def _v_operand(words, W: gl.constexpr, KEYS: gl.constexpr, VW: gl.constexpr, VB: gl.constexpr,
               PV_FP8: gl.constexpr):
    """V words as the B operand [W, KEYS, 128 (column 8j + g = dim 16g + j)], in fp16 unless PV_FP8."""
    v = gl.reshape(_bytes(words, VW), [W, KEYS, 8, 16])  # [W, keys, g, j]
    if not PV_FP8:
        v = v.to(gl.float16)
    v = gl.permute(v, [0, 1, 3, 2])  # [W, keys, j, g]
    return gl.convert_layout(gl.reshape(v, [W, KEYS, 128]), VB, assert_trivial=True)


@gluon.jit
def _kv(k_ptr, v_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK: gl.constexpr, W: gl.constexpr,
        KEYS: gl.constexpr, KW: gl.constexpr, VW: gl.constexpr, MASKED: gl.constexpr):
    """A step's K and V words, masked past n or not (no branch: ptxas waits for a branch's loads where it
    joins)."""
    if MASKED:
        k = _k_words(k_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, True)
        v = _v_words(v_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, VW, True)
    else:
        k = _k_words(k_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, False)
        v = _v_words(v_ptr, table, base, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, VW, False)
    return k, v


@gluon.jit
def _step(qa, kw, vw, base, bound, scale, m, l, acc, W: gl.constexpr, KEYS: gl.constexpr, KW: gl.constexpr,
          KB: gl.constexpr, VW: gl.constexpr, VB: gl.constexpr, PA: gl.constexpr, MMA: gl.constexpr,
          PV_FP8: gl.constexpr):
    """One step of each warp's online softmax over its KEYS keys (keys at or past bound masked out)."""
    cols = gl.arange(0, KEYS, gl.SliceLayout(0, gl.SliceLayout(1, MMA)))
    wcols = gl.arange(0, W, gl.SliceLayout(1, gl.SliceLayout(1, MMA)))
    s = mma_v2(qa, _k_operand(kw, W, KEYS, KW, KB), gl.zeros([W, 16, KEYS], gl.float32, MMA)) * scale
    pos = base + gl.expand_dims(wcols, 1) * KEYS + gl.expand_dims(cols, 0)  # [W, KEYS] keys
    s = gl.where(gl.expand_dims(pos < bound, 1), s, float("-inf"))
    m_new = gl.maximum(m, gl.max(s, axis=2))
    alpha = gl.exp2(m - m_new)
    p = gl.exp2(s - gl.expand_dims(m_new, 2))
    l = l * alpha + gl.sum(p, axis=2)
    if PV_FP8:
        pa = gl.convert_layout(p.to(gl.float8e4nv), PA)
    else:
        pa = gl.convert_layout(p.to(gl.float16), PA)
    acc = mma_v2(pa, _v_operand(vw, W, KEYS, VW, VB, PV_FP8), acc * gl.expand_dims(alpha, 2))
    return m_new, l, acc


@gluon.jit
def _ring_step(qa, kw, vw, base, refill, bound, lim, scale, m, l, acc, k_ptr, v_ptr, table, n, s_kb, s_kp, head_off,
               BLOCK: gl.constexpr, W: gl.constexpr, KEYS: gl.constexpr, KW: gl.constexpr, KB: gl.constexpr,
               VW: gl.constexpr, VB: gl.constexpr, PA: gl.constexpr, MMA: gl.constexpr, PV_FP8: gl.constexpr):
    """A step over one ring buffer, then the buffer refilled with the step at `refill` (at most lim)."""
    m, l, acc = _step(qa, kw, vw, base, bound, scale, m, l, acc, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
    kw, vw = _kv(k_ptr, v_ptr, table, gl.minimum(refill, lim), n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, VW,
                 False)
    return m, l, acc, kw, vw


@gluon.jit
def _finish(m, l, acc, out_ptr, seq, head, s_ot, s_oh, v_scale, GROUP: gl.constexpr, W: gl.constexpr):
    """The warps' parts merged, normalised, stored (O's columns back in dim order)."""
    top = gl.max(m, axis=0)  # [16]
    w8 = gl.exp2(m - gl.expand_dims(top, 0))  # [W, 16]
    total = gl.sum(acc * gl.expand_dims(w8, 2), axis=0)  # [16, 128]
    weight = gl.sum(l * w8, axis=0)
    OL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])
    o = gl.convert_layout(total / gl.expand_dims(gl.convert_layout(weight, gl.SliceLayout(1, total.type.layout)), 1),
                          OL) * v_scale
    orow = gl.arange(0, 16, gl.SliceLayout(1, OL))
    ocol = gl.arange(0, 128, gl.SliceLayout(0, OL))
    odim = (ocol % 8) * 16 + ocol // 8  # column 8j + g holds dim 16g + j
    optr = out_ptr + seq * s_ot + gl.expand_dims((head * GROUP + orow) * s_oh, 1) + gl.expand_dims(odim, 0)
    gl.store(optr, o.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(orow < GROUP, 1) & gl.expand_dims(ocol >= 0, 0))



@gluon.jit
def reg_decode(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr,
               s_qt, s_qh, s_kb, s_kp, s_kh, s_bt, s_ot, s_oh, kv_heads, qk_scale, v_scale,
               GROUP: gl.constexpr, BLOCK: gl.constexpr, W: gl.constexpr, PV_FP8: gl.constexpr,
               DEPTH: gl.constexpr, KEYS: gl.constexpr, FENCE: gl.constexpr = False):
    gl.static_assert(DEPTH >= 0 and DEPTH <= 3)
    item = gl.program_id(0)
    seq = item // kv_heads
    head = item % kv_heads
    n = gl.load(lens_ptr + seq)
    table = table_ptr + seq.to(gl.int64) * s_bt
    head_off = head * s_kh

    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1, 1], instr_shape=[1, 16, 8])
    QA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    KB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    PA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4 if PV_FP8 else 2)
    VB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4 if PV_FP8 else 2)
    # K's words: thread (g, t) of a warp (lane 4g + t) keys g, g + 8, .., bytes 16t.. and 64 + 16t.. (16 each)
    KW: gl.constexpr = gl.BlockedLayout([1, 1, 1, 8, 4], [1, 8, 4, 1, 1], [W, 1, 1, 1, 1], [4, 3, 2, 1, 0])
    # V's words: thread (g, t) keys 2t, 2t + 1, + 8 (fp16 products) or 4t..4t+3, + 16 (e4m3), bytes 16g..16g+15
    VW: gl.constexpr = gl.BlockedLayout([1, 4 if PV_FP8 else 2, 1, 4, 4], [1, 4, 8, 1, 1], [W, 1, 1, 1, 1],
                                        [4, 3, 1, 2, 0])

    # q in fp16 after a power of two (taken back in the score's scale), in the product's permuted reduction order
    # (k = 16c + 8h + 2t + i holds dim 64(c // 4) + 16t + 4(c % 4) + 2h + i, as K's operand), the same for every warp
    rows = gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(2, QA)))
    kk = gl.arange(0, 128, gl.SliceLayout(0, gl.SliceLayout(0, QA)))
    dim_of_k = (kk // 64) * 64 + (kk // 2 % 4) * 16 + (kk // 16 % 4) * 4 + (kk // 8 % 2) * 2 + kk % 2
    q_rows = q_ptr + seq * s_qt + (head * GROUP + rows) * s_qh
    q_mask = gl.expand_dims(gl.expand_dims(rows < GROUP, 0), 2) & (gl.zeros([W, 16, 128], gl.int32, QA) == 0)
    q = gl.load(gl.expand_dims(gl.expand_dims(q_rows, 0), 2) + gl.expand_dims(gl.expand_dims(dim_of_k, 0), 0),
                mask=q_mask, other=0.0).to(gl.float32)
    amax = gl.max(gl.max(gl.max(gl.abs(q), axis=2), axis=1), axis=0)
    pw = gl.exp2(gl.floor(gl.log2(16384.0 / gl.maximum(amax, 1e-30))))
    qa = (q * pw).to(gl.float16)
    scale = qk_scale / pw  # log2 domain

    m = gl.full([W, 16], -1.0e30, gl.float32, gl.SliceLayout(2, MMA))
    l = gl.zeros([W, 16], gl.float32, gl.SliceLayout(2, MMA))
    acc = gl.zeros([W, 16, 128], gl.float32, MMA)
    step = KEYS * W
    # whole steps in the loop, unmasked; a prefetch past them reads the last whole step again (its keys masked
    # out of the scores, its bytes finite); the partial last step after the loop, masked, not prefetched
    full_end = n // step * step
    lim = gl.maximum(full_end - step, 0)
    k0, v0 = _kv(k_ptr, v_ptr, table, 0, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, VW, False)
    if DEPTH >= 1:
        k1, v1 = _kv(k_ptr, v_ptr, table, gl.minimum(step, lim), n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, VW,
                     False)
    if DEPTH >= 2:
        k2, v2 = _kv(k_ptr, v_ptr, table, gl.minimum(2 * step, lim), n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW,
                     VW, False)
    if DEPTH >= 3:
        k3, v3 = _kv(k_ptr, v_ptr, table, gl.minimum(3 * step, lim), n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW,
                     VW, False)
    # a ring of DEPTH + 1 buffers, unrolled: each buffer refilled DEPTH + 1 steps ahead right after its step, so
    # that no register with a load in flight is copied (a copy waits for the load)
    ring = (DEPTH + 1) * step
    # with FENCE each step and its refill are a branch of their own, so that ptxas
    # cannot sink the refill's loads below the next steps (it groups them at the ring's end to save registers)
    for base in range(0, full_end, ring):
        if FENCE:
            if ((base + 0) ^ s_kb) != -1:  # always (s_kb > 0), which no compiler can know
                m, l, acc, k0, v0 = _ring_step(qa, k0, v0, base, base + ring, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                          table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
        else:
            m, l, acc, k0, v0 = _ring_step(qa, k0, v0, base, base + ring, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                      table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
        if DEPTH >= 1:
            if FENCE:
                if ((base + 1) ^ s_kb) != -1:  # always (s_kb > 0), which no compiler can know
                    m, l, acc, k1, v1 = _ring_step(qa, k1, v1, base + step, base + ring + step, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                              table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
            else:
                m, l, acc, k1, v1 = _ring_step(qa, k1, v1, base + step, base + ring + step, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                          table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
        if DEPTH >= 2:
            if FENCE:
                if ((base + 2) ^ s_kb) != -1:  # always (s_kb > 0), which no compiler can know
                    m, l, acc, k2, v2 = _ring_step(qa, k2, v2, base + 2 * step, base + ring + 2 * step, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                              table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
            else:
                m, l, acc, k2, v2 = _ring_step(qa, k2, v2, base + 2 * step, base + ring + 2 * step, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                          table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
        if DEPTH >= 3:
            if FENCE:
                if ((base + 3) ^ s_kb) != -1:  # always (s_kb > 0), which no compiler can know
                    m, l, acc, k3, v3 = _ring_step(qa, k3, v3, base + 3 * step, base + ring + 3 * step, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                              table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
            else:
                m, l, acc, k3, v3 = _ring_step(qa, k3, v3, base + 3 * step, base + ring + 3 * step, full_end, lim, scale, m, l, acc, k_ptr, v_ptr,
                                          table, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
    if full_end < n:
        kt, vt = _kv(k_ptr, v_ptr, table, full_end, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, VW, True)
        m, l, acc = _step(qa, kt, vt, full_end, n, scale, m, l, acc, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)

    _finish(m, l, acc, out_ptr, seq, head, s_ot, s_oh, v_scale, GROUP, W)


@gluon.jit
def reg_decode_async(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr,
                     s_qt, s_qh, s_kb, s_kp, s_kh, s_bt, s_ot, s_oh, kv_heads, qk_scale, v_scale,
                     GROUP: gl.constexpr, BLOCK: gl.constexpr, W: gl.constexpr, PV_FP8: gl.constexpr,
                     DEPTH: gl.constexpr, KEYS: gl.constexpr):
    """reg_decode with its steps' bytes copied by cp.async into a ring of DEPTH + 1 shared buffers (no registers
    held by a copy in flight, which ptxas would otherwise sink to their use), each thread reading back the words
    it copied (no barrier)."""
    item = gl.program_id(0)
    seq = item // kv_heads
    head = item % kv_heads
    n = gl.load(lens_ptr + seq)
    table = table_ptr + seq.to(gl.int64) * s_bt
    head_off = head * s_kh

    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1, 1], instr_shape=[1, 16, 8])
    QA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    KB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    PA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4 if PV_FP8 else 2)
    VB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4 if PV_FP8 else 2)
    KW: gl.constexpr = gl.BlockedLayout([1, 1, 1, 8, 4], [1, 8, 4, 1, 1], [W, 1, 1, 1, 1], [4, 3, 2, 1, 0])
    VW: gl.constexpr = gl.BlockedLayout([1, 4 if PV_FP8 else 2, 1, 4, 4], [1, 4, 8, 1, 1], [W, 1, 1, 1, 1],
                                        [4, 3, 1, 2, 0])
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[3, 2, 1, 0])
    R: gl.constexpr = DEPTH + 1
    k_ring = gl.allocate_shared_memory(gl.int32, [R, W, KEYS, 4, 8], FLAT)
    v_ring = gl.allocate_shared_memory(gl.int32, [R, W, KEYS, 8, 4], FLAT)

    rows = gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(2, QA)))
    kk = gl.arange(0, 128, gl.SliceLayout(0, gl.SliceLayout(0, QA)))
    dim_of_k = (kk // 64) * 64 + (kk // 2 % 4) * 16 + (kk // 16 % 4) * 4 + (kk // 8 % 2) * 2 + kk % 2
    q_rows = q_ptr + seq * s_qt + (head * GROUP + rows) * s_qh
    q_mask = gl.expand_dims(gl.expand_dims(rows < GROUP, 0), 2) & (gl.zeros([W, 16, 128], gl.int32, QA) == 0)
    q = gl.load(gl.expand_dims(gl.expand_dims(q_rows, 0), 2) + gl.expand_dims(gl.expand_dims(dim_of_k, 0), 0),
                mask=q_mask, other=0.0).to(gl.float32)
    amax = gl.max(gl.max(gl.max(gl.abs(q), axis=2), axis=1), axis=0)
    pw = gl.exp2(gl.floor(gl.log2(16384.0 / gl.maximum(amax, 1e-30))))
    qa = (q * pw).to(gl.float16)
    scale = qk_scale / pw

    m = gl.full([W, 16], -1.0e30, gl.float32, gl.SliceLayout(2, MMA))
    l = gl.zeros([W, 16], gl.float32, gl.SliceLayout(2, MMA))
    acc = gl.zeros([W, 16, 128], gl.float32, MMA)
    step = KEYS * W
    full_end = n // step * step
    lim = gl.maximum(full_end - step, 0)
    for i in gl.static_range(R):
        kp = _k_words(k_ptr, table, gl.minimum(i * step, lim), n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, False,
                      True)
        vp = _v_words(v_ptr, table, gl.minimum(i * step, lim), n, s_kb, s_kp, head_off, BLOCK, W, KEYS, VW, False,
                      True)
        async_copy.async_copy_global_to_shared(k_ring.index(i), kp)
        async_copy.async_copy_global_to_shared(v_ring.index(i), vp)
        async_copy.commit_group()
    for j in range(0, full_end // step):
        slot = j % R
        async_copy.wait_group(R - 1)
        kw = k_ring.index(slot).load(gl.SliceLayout(4, KW))
        vw = v_ring.index(slot).load(gl.SliceLayout(4, VW))
        m, l, acc = _step(qa, kw, vw, j * step, full_end, scale, m, l, acc, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
        nxt = gl.minimum((j + R) * step, lim)
        kp = _k_words(k_ptr, table, nxt, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, False, True)
        vp = _v_words(v_ptr, table, nxt, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, VW, False, True)
        async_copy.async_copy_global_to_shared(k_ring.index(slot), kp)
        async_copy.async_copy_global_to_shared(v_ring.index(slot), vp)
        async_copy.commit_group()
    async_copy.wait_group(0)
    if full_end < n:
        kt, vt = _kv(k_ptr, v_ptr, table, full_end, n, s_kb, s_kp, head_off, BLOCK, W, KEYS, KW, VW, True)
        m, l, acc = _step(qa, kt, vt, full_end, n, scale, m, l, acc, W, KEYS, KW, KB, VW, VB, PA, MMA, PV_FP8)
    _finish(m, l, acc, out_ptr, seq, head, s_ot, s_oh, v_scale, GROUP, W)


class Reg:
    """One form of reg_decode over a paged decode batch (one query a sequence, e4m3 cache)."""

    def __init__(self, batch, warps, pv8, depth, keys, asynchronous=0, fence=0):
        q, k = batch.q, batch.k_cache
        assert k.shape[3] == 128 and k.stride(3) == 1 and k.stride(1) % 4 == 0
        self.batch = batch
        self.kv_heads = k.shape[2]
        self.group = q.shape[1] // self.kv_heads
        assert self.group <= 16
        self.items = batch.block_table.shape[0] * self.kv_heads
        opts = batch.options
        self.qk_scale = opts["scale"] * float(opts.get("k_scale", torch.ones(1)).item()) * math.log2(math.e)
        self.v_scale = float(opts.get("v_scale", torch.ones(1)).item())
        self.kw = dict(GROUP=self.group, BLOCK=k.shape[1], W=warps, PV_FP8=pv8, DEPTH=depth, KEYS=keys, **({"FENCE": True} if fence else {}),
                       num_warps=warps)
        self.label = f"reg w{warps} d{depth} k{keys}" + (" pv8" if pv8 else "") + (" cp.async" if asynchronous else "") + (" fenced" if fence else "")
        self.kernel = reg_decode_async if asynchronous else reg_decode

    def __call__(self, out):
        b, k = self.batch, self.batch.k_cache
        self.kernel[(self.items,)](
            b.q, k, b.v_cache, b.block_table, b.seq_lens, out,
            b.q.stride(0), b.q.stride(1), k.stride(0), k.stride(1), k.stride(2), b.block_table.stride(0),
            out.stride(0), out.stride(1), self.kv_heads, self.qk_scale, self.v_scale, **self.kw)


def reference(batch, round_p=False, round_q=False):
    """fp32 attention of each sequence's one query (rounded to e4m3 as `perf.measure.check.e4m3_rounded` rounds
    it) over its dequantised keys; with round_p, P rounded to e4m3 (of its row maximum 1) as PV_FP8 rounds it."""
    from perf.measure.check import e4m3_rounded

    q, k, v, bt, lens = batch.q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens
    opts = batch.options
    ks = float(opts.get("k_scale", torch.ones(1)).item())
    vs = float(opts.get("v_scale", torch.ones(1)).item())
    kv_heads, group = k.shape[2], q.shape[1] // k.shape[2]
    qr = e4m3_rounded(q.view(q.shape[0], kv_heads, group * q.shape[2]), k.dtype).view(q.shape) if round_q else q
    outs = []
    for s in range(bt.shape[0]):
        n = int(lens[s])
        blocks = bt[s, : triton.cdiv(n, k.shape[1])].long()
        kk = k[blocks].float().reshape(-1, kv_heads, k.shape[3])[:n] * ks
        vv = v[blocks].float().reshape(-1, kv_heads, k.shape[3])[:n] * vs
        qq = qr[s].float().view(kv_heads, group, -1)
        a = torch.einsum("hgd,nhd->hgn", qq, kk) * opts["scale"]
        p = a.softmax(-1)
        if round_p:
            e = torch.exp(a - a.amax(-1, keepdim=True))
            p = e.to(k.dtype).float() / e.sum(-1, keepdim=True)
        outs.append(torch.einsum("hgn,nhd->hgd", p, vv).reshape(q.shape[1], -1))
    return torch.stack(outs)


def check(run, batch, ref):
    out = batch.new_output().fill_(float("nan"))
    run(out)
    torch.cuda.synchronize()
    err = (out.float() - ref).abs().max().item()
    assert err <= 0.01, f"{run.label}: max error {err}"
    return err


FORMS = [tuple(int(x) for x in f.split(":")) for f in
         os.environ.get("FORMS", "4:0:2:16,8:0:1:16,8:0:2:16,4:0:3:16").split(",")]


def small_checks(reg=None, forms=None):
    """Each form (`forms` of the probe class `reg`: this probe's, or the P V transposed probe's) on small batches."""
    from kernels.batch import BatchSpec, build_batch

    reg, forms = reg or Reg, forms or FORMS

    for group, lens, block in ((7, (300, 700, 1, 129), 16), (4, (256, 1024, 77), 32), (7, (512, 512), 16),
                               (4, (4096, 33), 16)):
        spec = BatchSpec((1,) * len(lens), lens, num_q_heads=4 * group, num_kv_heads=4, head_size=128,
                         block_size=block, dtype="bfloat16", fp8_kv=True)
        batch = build_batch(spec, "cuda")
        refs = {0: reference(batch), 1: reference(batch, round_p=True), "q1": reference(batch, round_q=True)}
        for form in forms:
            run = reg(batch, *form)
            err = check(run, batch, refs[run.kw.get("PV_FP8", 0)])
            print(f"check group {group} lens {lens} block {block} {run.label}: max error {err:.4f}", flush=True)


def main(reg=None, forms=None, prefix="reg"):
    """Checks, then times each form beside the tree and the token items; writes $OUT/<prefix>-<TAG>.json."""
    import dataclasses

    from kernels import VARIANTS
    from kernels.batch import build_batch
    from kernels.paged_attention import heuristics, planning
    from perf import roofline, scenarios
    from perf.measure import timing
    from perf.measure.cases import host_hints

    out_dir = os.environ.get("OUT", "/tmp")
    names = os.environ.get("SCENARIOS", "qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16").split(",")
    rounds = int(os.environ.get("ROUNDS", "5"))
    reg, forms = reg or Reg, forms or FORMS
    small_checks(reg, forms)
    lim = roofline.measure_limits()
    doc = {"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": []}
    vendor, sms = planning.resolve_target()
    for name in names:
        spec = scenarios.Scenario.parse(name).spec()
        batch = build_batch(spec, "cuda")
        refs = {0: reference(batch), 1: reference(batch, round_p=True), "q1": reference(batch, round_q=True)}
        limit = roofline.limit_ms(spec, lim)
        out = batch.new_output()
        variant = VARIANTS["static_grid"]
        hints = host_hints(variant, spec)
        default = heuristics.choose(vendor, heuristics.features_from_spec(spec, sms))
        tokens = dataclasses.replace(default, warp_specialized=True, ws_token_items=True, qk_e4m3=True)
        calls = {"tree": lambda: variant(*batch.args(), out=out, **batch.options, **hints),
                 "tokens-q1": lambda: variant(*batch.args(), out=out, config=tokens, **batch.options, **hints)}
        errors = {}
        for label, fn in list(calls.items()):
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            errors[label] = (out.float() - refs["q1" if label == "tokens-q1" else 0]).abs().max().item()
        for form in forms:
            run = reg(batch, *form)
            try:
                errors[run.label] = check(run, batch, refs[run.kw.get("PV_FP8", 0)])
            except Exception as e:  # reported, not timed
                print(f"{name} {run.label}: failed {repr(e)[:300]}", flush=True)
                continue
            calls[run.label] = lambda run=run: run(out)
        graphs = {label: timing.capture_graph(fn) for label, fn in calls.items()}
        times = {label: [] for label in calls}
        for r in range(rounds):
            order = list(calls) if r % 2 == 0 else list(reversed(calls))
            for label in order:
                times[label].append(timing.time_graph(calls[label], samples=25, graph=graphs[label]).median)
        for label, t in times.items():
            ms = sorted(t)[len(t) // 2]
            row = dict(scenario=name, label=label, ms=ms, pct=100 * limit / ms, rounds=t, max_error=errors[label])
            doc["rows"].append(row)
            print(f"{name} {label}: {ms * 1e3:.2f} us, {row['pct']:.1f} %, max error {errors[label]:.4f}", flush=True)
        with open(os.path.join(out_dir, f"{prefix}-{os.environ.get('TAG', 'all')}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        del graphs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
