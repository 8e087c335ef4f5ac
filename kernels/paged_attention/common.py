"""Device code the variants share, and the one Q-block kernel of parallel/flex_tile/static_grid.

Kept interpreter-compatible (TRITON_INTERPRET=1) so CPU-only CI runs every kernel: scalar
while-loops with loaded bounds, no libdevice calls, and no inline assembly but NVIDIA's two
programmatic-dependent-launch instructions and the e4m3 pairs' conversion, behind constexprs the
planner never sets for the interpreter (`planning.pdl_applies`, `planning.pairs_constexprs`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

LOG2E = tl.constexpr(1.4426950408889634)  # scores are scaled by log2(e) so the kernels can use exp2
MIN_BLOCK_M = 16  # tl.dot needs M >= 16 (Triton's minimum on every backend)


@triton.jit
def token_bound(token, num_tokens):
    """A token index from cu_seqlens_q clamped into [0, num_tokens] (q's rows, a shape the host
    knows for free) by one unsigned min: a negative one is past every row."""
    return tl.minimum(token.to(tl.uint32), num_tokens.to(tl.uint32)).to(tl.int32)


@triton.jit
def token_range(q_start, q_end, num_tokens):
    """(first token, query count) of the queries [q_start, q_end) read from cu_seqlens_q, inside
    q's rows: each end clamped (`token_bound`), a range that ends before it starts empty. Every
    kernel takes a sequence's queries through it, so no metadata, however inconsistent, makes a
    query or output row outside q and out."""
    first = token_bound(q_start, num_tokens)
    return first, tl.maximum(token_bound(q_end, num_tokens) - first, 0)


@triton.jit
def query_span(cu_seqlens_q_ptr, seq, num_tokens):
    """`token_range` of sequence `seq`."""
    return token_range(tl.load(cu_seqlens_q_ptr + seq), tl.load(cu_seqlens_q_ptr + seq + 1), num_tokens)


@triton.jit
def keys_ok(seq_len, q_len, max_seq_len):
    """Whether a sequence's key count is one its block-table row can hold (max_seq_len: the
    row's blocks times the block size) and covers its queries. The kernels give a sequence
    failing it no keys (its rows are zeros), so its block-table reads stay inside its row."""
    return (seq_len >= q_len) & (seq_len <= max_seq_len)


@triton.jit
def clamp_blocks(ids, last_block):
    """Block-table entries clamped into [0, last_block] (the cache's blocks, from its shape), as
    uint32: a negative or too large id reads the last block, never outside the cache. One
    unsigned min per id (a negative id is a large unsigned one)."""
    return tl.minimum(ids.to(tl.uint32), last_block.to(tl.uint32))


@triton.jit
def cache_block(ids, last_block, OFFSETS_32: tl.constexpr):
    """Block-table entries as cache block indices (`offset_index`), clamped (`clamp_blocks`): int32
    under OFFSETS_32, else widened unsigned to int64."""
    if OFFSETS_32:
        return clamp_blocks(ids, last_block).to(tl.int32)
    else:
        return clamp_blocks(ids, last_block).to(tl.int64)


@triton.jit
def find_seq_idx(cu_seqlens_q_ptr, target, num_seqs, BLOCK_Q: tl.constexpr,
                 Q_BLOCK_MODE: tl.constexpr):
    """Index of the sequence holding `target` (a token, or a Q-block in Q_BLOCK_MODE).

    Binary search over cu_seqlens_q (it reads entries 0 to num_seqs - 1 whatever their values). In
    Q_BLOCK_MODE sequence i's first Q-block is cu_seqlens_q[i] // BLOCK_Q + i, an upper bound on the
    blocks before it that needs no extra metadata; programs that land in the gaps find no queries and
    exit. Always a sequence: 0 when the first starts after `target` (metadata not starting at 0).
    """
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        start = tl.load(cu_seqlens_q_ptr + mid)
        if Q_BLOCK_MODE:
            start = start // BLOCK_Q + mid
        if start <= target:
            lo = mid + 1
        else:
            hi = mid
    return tl.maximum(lo - 1, 0)


@triton.jit
def search_q_block(cu_seqlens_q_ptr, q_block, num_seqs, BLOCK_Q: tl.constexpr):
    """`locate_q_block` by the binary search alone."""
    seq = find_seq_idx(cu_seqlens_q_ptr, q_block, num_seqs, BLOCK_Q, True)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    return seq, q_start, q_len, q_block - (q_start // BLOCK_Q + seq)


@triton.jit
def locate_q_block(cu_seqlens_q_ptr, q_block, num_seqs, num_tokens, BLOCK_Q: tl.constexpr,
                   DECODE_LAYOUT: tl.constexpr):
    """(sequence, its first query, its query count, the Q-block's index in it) of Q-block
    `q_block` (`find_seq_idx`'s numbering). A Q-block of no sequence (the gaps that numbering
    leaves) gets no queries: a count of 0, or an index outside the sequence's Q-blocks
    (negative where inconsistent metadata puts the first sequence's start after it). The queries
    are `token_range`'s; the numbering is the metadata's as read.

    Every load an item makes before its first key waits on these. The binary search costs
    log2(sequences) dependent loads, then the sequence's query range one more. A decode
    batch has one Q-block per sequence, sequence i at i + i // BLOCK_Q: with DECODE_LAYOUT
    that layout is guessed first and checked with three loads issued together (a hit, or a
    gap next to the guess); only a miss (a prefill among the decodes) searches.
    """
    if DECODE_LAYOUT:
        guess = tl.minimum(q_block - q_block // (BLOCK_Q + 1), num_seqs - 1)
        prev = tl.maximum(guess - 1, 0)
        before = tl.load(cu_seqlens_q_ptr + prev)
        start = tl.load(cu_seqlens_q_ptr + guess)
        stop = tl.load(cu_seqlens_q_ptr + guess + 1)
        first = start // BLOCK_Q + guess
        end = first + tl.cdiv(stop - start, BLOCK_Q)
        # Where the sequence before the guess ends (0 for the first: cu_seqlens_q[0] is 0)
        # and where the one after it begins (for the last: the Q-block bound itself).
        before_end = before // BLOCK_Q + prev + tl.cdiv(start - before, BLOCK_Q)
        next_first = stop // BLOCK_Q + guess + 1
        hit = (first <= q_block) & (q_block < end)
        gap = ((before_end <= q_block) & (q_block < first)) | ((end <= q_block) & (q_block < next_first))
        if hit | gap:
            seq = guess
            q_start = start
            q_len = tl.where(hit, stop - start, 0)
            local_block = tl.where(hit, q_block - first, 0)
        else:
            seq, q_start, q_len, local_block = search_q_block(cu_seqlens_q_ptr, q_block, num_seqs, BLOCK_Q)
    else:
        seq, q_start, q_len, local_block = search_q_block(cu_seqlens_q_ptr, q_block, num_seqs, BLOCK_Q)
    q_start, q_len = token_range(q_start, q_start + q_len, num_tokens)
    return seq, q_start, q_len, local_block


@triton.jit
def apply_softcap(s, cap):
    """cap * tanh(s / cap), written as 1 - 2 / (exp(2x) + 1) so that large |x| saturates."""
    return cap * (1.0 - 2.0 / (tl.exp(2.0 * s / cap) + 1.0))


def layout_strides(q, k_cache, v_cache, block_table, out) -> dict:
    """The element strides every kernel of the family takes, by the names they take them
    under (q and out: token, head; the caches: block, position, head; the block table: seq)."""
    return dict(
        stride_q_token=q.stride(0), stride_q_head=q.stride(1),
        stride_k_block=k_cache.stride(0), stride_k_pos=k_cache.stride(1), stride_k_head=k_cache.stride(2),
        stride_v_block=v_cache.stride(0), stride_v_pos=v_cache.stride(1), stride_v_head=v_cache.stride(2),
        stride_bt_seq=block_table.stride(0),
        stride_o_token=out.stride(0), stride_o_head=out.stride(1),
    )


def shared_strides(q, k_cache, v_cache, out, vendor: str) -> dict:
    """Which strides the Q-block kernel takes from another tensor's, known equal on the host: V's
    from K's (vLLM's and FlashInfer's caches, two halves of one tensor) and out's from q's (an
    output allocated like q). On AMD only, where kernel arguments are held in scalar registers:
    gfx942's and gfx950's fp8 prefill (the anchor's 1 x 8k, static_grid) spilled 4 and 3 of them
    once the bounds (`shape_bounds`) took theirs, none with this (triton 3.6.0, 2026-11-29). An
    NVIDIA kernel reads its arguments from the constant bank, so there it saves nothing, and on
    parallel's tiles of 16 ptxas scheduled it worse (H200, 2026-11-29: gpt-oss-20b's mixed batch
    1.037x of before with it, 0.989 without, both with the bounds and the read-ahead; qwen2.5-14b's
    1.060x with it alone: docs/lab/2026-11-29.md, "The bounds land")."""
    share = vendor == "amd"
    return dict(V_STRIDES_OF_K=share and k_cache.stride()[:3] == v_cache.stride()[:3],
                OUT_STRIDES_OF_Q=share and out.stride()[:2] == q.stride()[:2])


def shape_bounds(q, k_cache, block_table) -> dict:
    """What the kernels bound every read and write by, from shapes alone (no host sync):
    q's rows (`token_bound`), the keys a block-table row holds (`keys_ok`; capped at int32's
    largest, which no `seq_lens` entry passes) and the cache's last block (`cache_block`)."""
    return dict(num_tokens=q.shape[0],
                max_seq_len=min(block_table.shape[1] * k_cache.shape[1], 2**31 - 1),
                last_block=k_cache.shape[0] - 1)


_PLACEHOLDERS: dict[torch.device, torch.Tensor] = {}


def placeholder(device: torch.device) -> torch.Tensor:
    """One float32 element per device, passed for absent optional tensors (never read); kept,
    as an allocation on every call's host path costs more than it needs to."""
    if device not in _PLACEHOLDERS:
        _PLACEHOLDERS[device] = torch.empty(1, dtype=torch.float32, device=device)
    return _PLACEHOLDERS[device]


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n < 1). Plain integer arithmetic: it runs on
    every call's host path, where `triton.next_power_of_2` (a constexpr function, callable
    inside kernels) cost about 10 us a call on the CI machine's CPU."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def largest_pow2_divisor(n: int) -> int:
    return n & -n


def decode_block_m(queries_per_kv: int) -> int:
    """Smallest Q-block holding a whole head group: BLOCK_M rows for one token's query heads.

    The Q-block of `qblock` and of every decode batch: a power of two (tl.arange) of at
    least MIN_BLOCK_M rows; BLOCK_Q = BLOCK_M // queries_per_kv tokens fit in it.
    """
    return max(MIN_BLOCK_M, next_pow2(queries_per_kv))


# ---------------------------------------------------------------------------------------
# The tiled online softmax of one Q-block, shared by `parallel`, `flex_tile` and
# `static_grid` (paper sections 4.5-4.7). A Q-block is BLOCK_M rows: BLOCK_Q consecutive
# query tokens of one sequence times the QUERIES_PER_KV query heads that read one KV head
# (row r = token r // QUERIES_PER_KV, head r % QUERIES_PER_KV of the group), as in qblock.
# Scores live in the log2 domain (multiplied by LOG2E) so the kernels use exp2.
# ---------------------------------------------------------------------------------------


@triton.jit
def tile_bounds(first_pos, last_pos, window, TILE_SIZE: tl.constexpr,
                USE_SLIDING_WINDOW: tl.constexpr, REROUTE: tl.constexpr = False):
    """Tiles of one Q-block whose queries sit at absolute positions first_pos..last_pos.

    Returns (lo, full_lo, full_hi, hi): tiles [lo, hi) hold every key some query sees
    (sliding-window pruning: tiles wholly before the window are never loaded); tiles
    [full_lo, full_hi) are seen whole by every query and run without masks. Always
    lo <= full_lo <= full_hi <= hi. With no such tile the causal edge [lo, hi) takes every
    tile, or with REROUTE (a window and block-vector tiles, `attend_rows`) the window edge
    does: its loads guard the keys before the window (`attend_tiles`).
    """
    hi = last_pos // TILE_SIZE + 1
    full_hi = (first_pos + 1) // TILE_SIZE
    if USE_SLIDING_WINDOW:
        lo = tl.maximum(first_pos - window + 1, 0) // TILE_SIZE
        full_lo = tl.cdiv(tl.maximum(last_pos - window + 1, 0), TILE_SIZE)
    else:
        lo = hi * 0
        full_lo = hi * 0
    no_full = full_lo >= full_hi  # e.g. a window narrower than the Q-block: all tiles masked
    if REROUTE:  # all in the window edge
        full_lo = tl.where(no_full, hi, full_lo)
        full_hi = tl.where(no_full, hi, full_hi)
    else:
        full_lo = tl.where(no_full, lo, full_lo)
        full_hi = tl.where(no_full, lo, full_hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def decode_fnuz_e4m3(bits):
    """FNUZ e4m3 bytes (uint8) -> float32, exactly, with integer operations only.

    For targets whose Triton has no fp8e4b8 (NVIDIA; see `kernels.inputs.FP8_FORMATS`).
    Exponent bias 8: a normal byte s.eeee.mmm is (-1)^s 2^(e-8) (1 + m/8), i.e. float32 bits
    with exponent e - 8 + 127 and mantissa m << 20; a subnormal (e = 0) is m 2^-10, exact in
    float32; 0x80 (the "negative zero" byte) is NaN; there are no infinities.
    """
    b = bits.to(tl.int32)
    exponent = (b >> 3) & 0xF
    mantissa = b & 0x7
    normal = (((exponent + 119) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.0009765625, normal)  # 2^-10
    value = tl.where(b >= 0x80, -magnitude, magnitude)
    return tl.where(b == 0x80, float("nan"), value)


@triton.jit
def kv_to(x, dtype: tl.constexpr, DECODE_FNUZ: tl.constexpr):
    """A K/V tile as `dtype`, exactly (every fp8 value is representable in fp16, bf16, fp32):
    FNUZ bytes decoded here when DECODE_FNUZ, else Triton's conversion (a no-op when the cache
    already has q's dtype)."""
    if DECODE_FNUZ:
        return decode_fnuz_e4m3(x).to(dtype)
    else:
        return x.to(dtype)


@triton.jit
def split_e4m3_pairs(pairs, dtype: tl.constexpr, PTX: tl.constexpr):
    """int16 pairs of OCP e4m3 bytes (a cache's even and odd dims) -> (low bytes, high bytes) as
    fp16, exactly. PTX (NVIDIA, compiled): one `cvt.rn.f16x2.e4m3x2` per pair, its halves the two
    results (ptxas then packs two keys' even dims into one register with a `prmt`). Why the pairs
    exist: an 8-bit tile has no transposed ldmatrix on sm_90, so a V tile read as the P V
    product's operand took one shared-memory load per byte; 16-bit pairs take ldmatrix, and the
    fp16 values land where the product reads them (sm_90 SASS of the fp8 decode's loop, triton
    3.6.0: 865 -> 659 instructions a warp and tile of 64, 255 -> 168 registers). Elsewhere (the
    interpreter runs no inline assembly) Triton's integer ops split them: the same values."""
    if PTX:
        lo, hi = tl.inline_asm_elementwise(
            """{
            .reg .b32 t;
            cvt.rn.f16x2.e4m3x2 t, $2;
            mov.b32 {$0, $1}, t;
            }""", "=h,=h,h", [pairs], dtype=(tl.float16, tl.float16), is_pure=True, pack=1)
    else:
        lo = pairs.to(tl.uint8).to(dtype, bitcast=True).to(tl.float16)
        hi = (pairs >> 8).to(tl.uint8).to(dtype, bitcast=True).to(tl.float16)
    return lo, hi


@triton.jit
def to_range(x, dtype: tl.constexpr, TOP: tl.constexpr):
    """A Q-block as `dtype` and the power of two it was divided by: (x / 2^shift, shift), its
    largest magnitude brought to (2^(TOP - 1), 2^TOP], a power of two no larger than the
    format's largest value, so every element fits. An all-zero, NaN or infinite block keeps
    shift 0 (NaN stays NaN). The caller multiplies its score scale by 2^shift (exact)."""
    big = tl.max(tl.max(tl.abs(x.to(tl.float32)), axis=1), axis=0)
    usable = (big > 0.0) & (big < 3.0e38)
    shift = tl.where(usable, tl.ceil(tl.log2(tl.where(usable, big, 1.0))) - TOP, 0.0)
    return (x.to(tl.float32) * tl.exp2(-shift)).to(dtype), shift


@triton.jit
def to_fp16_range(x):
    """`to_range` into fp16 (max 65504), the largest magnitude in [2^13, 2^14]: a bf16 value
    keeps all its mantissa bits unless it lies 2^27 or more below the largest (fp16's
    subnormals)."""
    return to_range(x, tl.float16, 14.0)


@triton.constexpr_function
def e4m3_top(dtype):
    """The largest power of two's exponent in an e4m3 format (`kernels.inputs.FP8_FORMATS`):
    7 for FNUZ (largest 240, Triton's fp8e4b8), 8 for OCP (448, fp8e4nv). Queries are scaled
    into it (`to_range`) and P spans [0, 2^top] (`attend_tiles`): FlashAttention-3 runs P in
    [0, 256] for OCP e4m3 (hopper/softmax.h, Max_offset 8)."""
    return 7.0 if dtype == tl.float8e4b8 else 8.0


@triton.jit
def p_offset(m_new, FP8_PRODUCTS: tl.constexpr, TOP: tl.constexpr):
    """What exp2's argument subtracts per row: the running max, or with FP8_PRODUCTS the max
    less TOP, so P spans [0, 2^TOP] of e4m3 (fewer of its values underflow than in [0, 1])."""
    if FP8_PRODUCTS:
        return m_new - TOP
    else:
        return m_new


@triton.jit
def _load(ptrs, mask, NEED_MASK: tl.constexpr):
    if NEED_MASK:
        return tl.load(ptrs, mask=mask, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def offset_index(indices, OFFSETS_32: tl.constexpr):
    """Indices (block ids, token indices) in the type the offsets formed from them are
    computed in: int64 unless OFFSETS_32 (the planner's `planning.offsets_32`: every one fits)."""
    if OFFSETS_32:
        return indices
    else:
        return indices.to(tl.int64)


@triton.jit
def tile_blocks(bt_row, j, offs, seq_len, TILE_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                VECTOR: tl.constexpr):
    """Physical cache blocks of KV tile j: one scalar when the tile lies in one block, one per
    block it spans with VECTOR (see `attend_tiles`), else one per position; 0 past seq_len,
    so the tile after the last one reads nothing out of range.

    With READ_AHEAD, `attend_tiles` reads them one iteration ahead, into registers. Read in
    the iteration that used them, they were one of the loop's pipelined copies: every
    iteration waited for all outstanding copies (the block ids included), read the ids back
    from shared memory and only then addressed the next tile's K/V, so the loop never ran
    more than one tile ahead (sm_90 TTGIR: `async_wait {num = 0}` and two buffers even with 3
    stages; with the read-ahead and 3 stages, `{num = 2}` and three). NVIDIA H100,
    2026-11-23, graph replay, llama3-8b bf16, block 16, before -> after (with the prefill's 2
    stages, heuristics): prefill 1x8k 1.700 -> 1.308 ms, 1x16k 6.43 -> 5.07, 4x2k 0.600 ->
    0.474, 8x1k 0.337 -> 0.295, 16 mixed up to 4k keys 1.825 -> 1.450, 4 chunks of 2k after
    6k 2.948 -> 2.377; block 128 (one read per tile) 1x8k 1.350 -> 1.270. It costs registers
    (the next tile's ids are carried), and decodes gained nothing from it: the heuristics
    choose it (`Config.read_ahead`).
    """
    if BLOCK_SIZE % TILE_SIZE == 0:
        first = j * TILE_SIZE
        return tl.load(bt_row + first // BLOCK_SIZE, mask=first < seq_len, other=0)
    elif VECTOR:
        first = j * TILE_SIZE
        blocks = tl.arange(0, TILE_SIZE // BLOCK_SIZE)
        return tl.load(bt_row + first // BLOCK_SIZE + blocks, mask=first + blocks * BLOCK_SIZE < seq_len,
                       other=0)
    else:
        pos = j * TILE_SIZE + offs
        return tl.load(bt_row + pos // BLOCK_SIZE, mask=pos < seq_len, other=0)


@triton.jit
def attend_tiles(
    acc, m_i, l_i, q, tile_lo, tile_hi,
    k_cache_ptr, v_cache_ptr, block_table_ptr,
    seq, seq_len, kv_head, abs_pos, first_pos, qk_scale, softcap, window, last_block,
    stride_k_block, stride_k_pos, stride_k_head,
    stride_v_block, stride_v_pos, stride_v_head,
    stride_bt_seq,
    TILE_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    MASKED: tl.constexpr,
    WINDOW_EDGE: tl.constexpr,  # the tiles [lo, full_lo) of `tile_bounds` (masked)
    USE_SOFTCAP: tl.constexpr,
    USE_SLIDING_WINDOW: tl.constexpr,
    DECODE_FNUZ: tl.constexpr,
    READ_AHEAD: tl.constexpr,
    BLOCK_VECTOR: tl.constexpr,
    OFFSETS_32: tl.constexpr,
    PV_FP16: tl.constexpr,
    FP8_PRODUCTS: tl.constexpr,
    V_PAIRS: tl.constexpr,
    K_PAIRS: tl.constexpr,
    PAIRS_PTX: tl.constexpr,
):
    """Online softmax over KV tiles [tile_lo, tile_hi); returns the updated (acc, m_i, l_i).

    A tile is TILE_SIZE consecutive key positions, independent of the cache's BLOCK_SIZE:
    when BLOCK_SIZE is a multiple of TILE_SIZE a tile lies inside one cache block (one
    block-table read); otherwise each position looks its block up (a gather, as for tiles
    larger than a block or blocks such as 544 that no power-of-two tile divides).
    MASKED tiles apply the causal/window masks and guard reads past seq_len; the others
    are seen whole by every row. A WINDOW_EDGE tile that spans blocks (a tile larger than
    the block, or one a block does not hold whole: 64 in 544) also guards reads before the
    first key the Q-block's first query (at first_pos) sees: the blocks wholly before it may
    have been released to the engine and hold anything (NaN; a masked key's p = 0 times a
    NaN V is NaN): WINDOW_EDGE 1, the window edge, whose keys precede first_pos unless
    `tile_bounds` rerouted (block-vector tiles: masks both bounds), reads key_lo's slot for
    earlier keys (positions clamped, no mask) or masks them; WINDOW_EDGE 2, the causal edge
    of tiles spanning blocks, which takes every tile when there is no middle, masks them.
    A tile inside one block holds a key some query sees, so its block is kept; the middle
    starts at or after the first key every query sees. fp8 caches are converted
    exactly to q's dtype (`kv_to`); their scales are folded into qk_scale (k) and the
    caller's epilogue (v).

    With BLOCK_VECTOR, a tile spanning several whole blocks (a power-of-two block dividing
    the tile: 16 in 128) reads one id per block, not per position, and loads K and V as
    [blocks, BLOCK_SIZE, D] (reshaped to [TILE_SIZE, D]); OFFSETS_32 computes the cache
    offsets in int32. Both cut the address arithmetic of every copy: NVIDIA H100, 2026-11-24,
    triton 3.6.0, a lab kernel of this loop (llama3-8b heads, bf16, blocks of 16, causal 1 x
    8k, 3 stages): per-position ids in int64 429 TFLOP/s, in int32 467, block ids in int64
    445, in int32 525 (a dense cache: 520); docs/lab/2026-11-24.md.
    """
    offs = tl.arange(0, TILE_SIZE)
    dims = tl.arange(0, HEAD_SIZE_PADDED)
    dim_ok = dims < HEAD_SIZE
    PAD_HEAD: tl.constexpr = HEAD_SIZE_PADDED != HEAD_SIZE
    bt_row = block_table_ptr + seq * stride_bt_seq
    VECTOR: tl.constexpr = BLOCK_VECTOR and BLOCK_SIZE < TILE_SIZE and TILE_SIZE % BLOCK_SIZE == 0
    FOLD: tl.constexpr = VECTOR and not MASKED and not USE_SOFTCAP  # the softmax's form (below)
    WINDOW_LOADS: tl.constexpr = WINDOW_EDGE != 0 and BLOCK_SIZE % TILE_SIZE != 0
    EDGE_LOADS: tl.constexpr = WINDOW_LOADS and WINDOW_EDGE == 1  # the window edge's
    EDGE_CLAMP: tl.constexpr = EDGE_LOADS and not VECTOR and not READ_AHEAD
    # PV_FP16 (the planner sets it for bf16 q over an OCP e4m3 cache, and with FP8_PRODUCTS for
    # Q K^T alone on e4m3, `Config.qk_e4m3`): an e4m3 value is
    # exact in fp16 as in bf16 but reaches fp16 in one conversion per pair (sm_90:
    # cvt.rn.f16x2.e4m3x2), bf16 in two; P in [0, 1] keeps 10 mantissa bits instead of 7.
    PV_DTYPE: tl.constexpr = tl.float16 if PV_FP16 else q.dtype
    # FP8_PRODUCTS: q arrives in the cache's e4m3 format (`attend_rows`), so K and V enter both
    # products as loaded (`kv_to` to their own dtype is no conversion) and P goes to e4m3 in
    # [0, 2^P_TOP] (`p_offset`); l_i sums P in [0, 1], acc carries 2^P_TOP to the epilogue. With
    # PV_FP16 too (`Config.qk_e4m3`) P and V go to fp16 instead, P in the same range.
    P_TOP: tl.constexpr = e4m3_top(q.dtype) if FP8_PRODUCTS else 0.0
    key_lo = first_pos - window + 1  # keys before it: read by WINDOW_LOADS tiles, never
    if EDGE_LOADS and VECTOR:
        row_lo = abs_pos - window
    # Where a read-ahead tile's ids are clamped (`clamp_blocks`) is where ptxas schedules the loop
    # best: per-position ids in int64 as they are read, a tile ahead (then widened unsigned);
    # the others where the loop takes them (NVIDIA H200, 2026-11-29, pr gate of the two places:
    # docs/lab/2026-11-29.md, "The kernels' bounds, rebuilt": form B against form A).
    CLAMP_READ: tl.constexpr = (READ_AHEAD and not VECTOR and not OFFSETS_32
                                and BLOCK_SIZE % TILE_SIZE != 0)
    if CLAMP_READ:
        next_blocks = clamp_blocks(tile_blocks(bt_row, tile_lo, offs, seq_len, TILE_SIZE, BLOCK_SIZE, VECTOR),
                                   last_block)
    elif READ_AHEAD:
        next_blocks = tile_blocks(bt_row, tile_lo, offs, seq_len, TILE_SIZE, BLOCK_SIZE, VECTOR)
    else:
        next_blocks = 0
    # V_PAIRS, K_PAIRS (`split_e4m3_pairs`): V, K read as [keys, D / 2] int16 pairs of dims, split
    # into the even and the odd dims' fp16 tiles: P V is two products of half the head each, into
    # acc's even and odd dims (split here, joined at the end), and Q K^T sums q's even dims times
    # K's even plus the odd times the odd. Tiles of keys looked up one by one only: block-vector
    # tiles read [blocks, BLOCK_SIZE, D] copies and keep their form.
    PAIRS_V: tl.constexpr = V_PAIRS and not VECTOR
    PAIRS_K: tl.constexpr = K_PAIRS and not VECTOR
    HALF: tl.constexpr = HEAD_SIZE_PADDED // 2
    if PAIRS_V or PAIRS_K:
        tl.static_assert(not PAD_HEAD and not DECODE_FNUZ, "pairs of dims need a whole head of OCP e4m3")
        pair_idx = tl.arange(0, HALF)
    if PAIRS_V:
        tl.static_assert(PV_DTYPE == tl.float16, "pairs of V dims become fp16")
        acc_even, acc_odd = tl.split(tl.reshape(acc, (acc.shape[0], HALF, 2)))
        v_pairs_ptr = v_cache_ptr.to(tl.pointer_type(tl.int16))
    if PAIRS_K:
        tl.static_assert(q.dtype == tl.float16, "pairs of K dims become fp16")
        q_even, q_odd = tl.split(tl.reshape(q, (q.shape[0], HALF, 2)))
        k_pairs_ptr = k_cache_ptr.to(tl.pointer_type(tl.int16))
    for j in range(tile_lo, tile_hi):
        key_pos = j * TILE_SIZE + offs  # [TILE_SIZE] absolute key positions
        if EDGE_CLAMP:  # keys before key_lo read key_lo's slot (kept); all in seq_len
            key_ok = offs < TILE_SIZE
            load_pos = tl.maximum(key_pos, key_lo)
        elif EDGE_LOADS:
            key_ok = key_pos >= key_lo
        elif WINDOW_LOADS:
            key_ok = (key_pos < seq_len) & (key_pos >= key_lo)
        else:
            key_ok = key_pos < seq_len
        if READ_AHEAD:  # the block-table entries one tile ahead (see `tile_blocks`)
            if CLAMP_READ:
                physical = offset_index(next_blocks, OFFSETS_32)
                next_blocks = clamp_blocks(tile_blocks(bt_row, j + 1, offs, seq_len, TILE_SIZE, BLOCK_SIZE,
                                                       VECTOR), last_block)
            else:
                physical = cache_block(next_blocks, last_block, OFFSETS_32)
                next_blocks = tile_blocks(bt_row, j + 1, offs, seq_len, TILE_SIZE, BLOCK_SIZE, VECTOR)
        # Without it, the current tile's own entries, masked only where positions can pass
        # seq_len (not `tile_blocks`: masking the one-block read too added ptxas spills to
        # decode configurations, static gate sm_90, triton 3.6.0, 2026-11-23).
        elif BLOCK_SIZE % TILE_SIZE == 0:
            physical = cache_block(tl.load(bt_row + (j * TILE_SIZE) // BLOCK_SIZE), last_block, OFFSETS_32)
        elif VECTOR:
            physical = cache_block(tile_blocks(bt_row, j, offs, seq_len, TILE_SIZE, BLOCK_SIZE, VECTOR),
                                   last_block, OFFSETS_32)
        else:
            if EDGE_CLAMP:
                physical = cache_block(tl.load(bt_row + load_pos // BLOCK_SIZE), last_block, OFFSETS_32)
            else:
                physical = cache_block(_load(bt_row + key_pos // BLOCK_SIZE, key_ok, MASKED), last_block,
                                       OFFSETS_32)
        if VECTOR:  # [blocks, BLOCK_SIZE, D] copies, seen as [TILE_SIZE, D]
            in_block = tl.arange(0, BLOCK_SIZE)
            pos2 = (j * TILE_SIZE + tl.arange(0, TILE_SIZE // BLOCK_SIZE)[:, None] * BLOCK_SIZE
                    + in_block[None, :])
            if WINDOW_LOADS:
                ok3 = ((pos2 < seq_len) & (pos2 >= key_lo))[:, :, None] & dim_ok[None, None, :]
            else:
                ok3 = (pos2 < seq_len)[:, :, None] & dim_ok[None, None, :]
            k3 = physical[:, None] * stride_k_block + in_block[None, :] * stride_k_pos
            v3 = physical[:, None] * stride_v_block + in_block[None, :] * stride_v_pos
            k = _load(k_cache_ptr + k3[:, :, None] + kv_head * stride_k_head + dims[None, None, :],
                      ok3, MASKED or PAD_HEAD).reshape(TILE_SIZE, HEAD_SIZE_PADDED)
            v = _load(v_cache_ptr + v3[:, :, None] + kv_head * stride_v_head + dims[None, None, :],
                      ok3, MASKED or PAD_HEAD).reshape(TILE_SIZE, HEAD_SIZE_PADDED)
            s = tl.dot(q, tl.trans(kv_to(k, q.dtype, DECODE_FNUZ)))  # [BLOCK_M, TILE_SIZE]
        else:
            if BLOCK_SIZE % TILE_SIZE == 0:
                k_rows = physical * stride_k_block + ((j * TILE_SIZE) % BLOCK_SIZE + offs) * stride_k_pos
                v_rows = physical * stride_v_block + ((j * TILE_SIZE) % BLOCK_SIZE + offs) * stride_v_pos
            elif EDGE_CLAMP:
                k_rows = physical * stride_k_block + (load_pos % BLOCK_SIZE) * stride_k_pos
                v_rows = physical * stride_v_block + (load_pos % BLOCK_SIZE) * stride_v_pos
            else:
                k_rows = physical * stride_k_block + (key_pos % BLOCK_SIZE) * stride_k_pos
                v_rows = physical * stride_v_block + (key_pos % BLOCK_SIZE) * stride_v_pos
            LOAD_MASK: tl.constexpr = (MASKED and not EDGE_CLAMP) or PAD_HEAD
            # pairs: element offsets are even (`planning.pairs_apply`), so halved they index int16
            if PAIRS_K:
                k_pairs = _load(k_pairs_ptr + ((k_rows + kv_head * stride_k_head) // 2)[None, :]
                                + pair_idx[:, None], key_ok[None, :], LOAD_MASK)  # [D / 2, TILE_SIZE]
            else:
                k = _load(k_cache_ptr + k_rows[None, :] + kv_head * stride_k_head + dims[:, None],
                          dim_ok[:, None] & key_ok[None, :], LOAD_MASK)  # [D, TILE_SIZE]
            if PAIRS_V:
                v_pairs = _load(v_pairs_ptr + ((v_rows + kv_head * stride_v_head) // 2)[:, None]
                                + pair_idx[None, :], key_ok[:, None], LOAD_MASK)  # [TILE_SIZE, D / 2]
            else:
                v = _load(v_cache_ptr + v_rows[:, None] + kv_head * stride_v_head + dims[None, :],
                          key_ok[:, None] & dim_ok[None, :], LOAD_MASK)  # [TILE_SIZE, D]
            if PAIRS_K:
                k_even, k_odd = split_e4m3_pairs(k_pairs, k_cache_ptr.dtype.element_ty, PAIRS_PTX)
                s = tl.dot(q_odd, k_odd, tl.dot(q_even, k_even))  # [BLOCK_M, TILE_SIZE]
            else:
                s = tl.dot(q, kv_to(k, q.dtype, DECODE_FNUZ))  # [BLOCK_M, TILE_SIZE]
            if PAIRS_V:
                v_even, v_odd = split_e4m3_pairs(v_pairs, v_cache_ptr.dtype.element_ty, PAIRS_PTX)
        # Block-vector tiles seen whole fold the score scale into exp2's argument (one FMA a
        # score) and accumulate P V into acc: NVIDIA H100, 2026-11-24, two fresh processes
        # each, llama3-8b 1x8k 1.228 -> 1.167-1.189 ms, 4x2k 420 -> 400-404 us, 8x1k 273 ->
        # 267, 16 mixed up to 4k 1.337-1.352 -> 1.307-1.311 ms, 4 chunks of 2k after 6k
        # 2.084-2.107 -> 2.027-2.068 (docs/lab/2026-11-24.md). Elsewhere the loop keeps its form: with
        # ids per position the fold added ptxas spills and lost 5-12 % (H100, 2026-11-23).
        if not FOLD:
            if USE_SOFTCAP:
                s = apply_softcap(s * qk_scale, softcap) * LOG2E
            else:
                s = s * (qk_scale * LOG2E)
            if MASKED:
                if EDGE_LOADS and VECTOR:
                    visible = (key_pos[None, :] > row_lo[:, None]) & (key_pos[None, :] <= abs_pos[:, None])
                elif EDGE_LOADS:  # keys at most first_pos: only the window's bound
                    visible = abs_pos[:, None] - key_pos[None, :] < window
                else:
                    visible = key_pos[None, :] <= abs_pos[:, None]
                    if USE_SLIDING_WINDOW:
                        visible = visible & (abs_pos[:, None] - key_pos[None, :] < window)
                s = tl.where(visible, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                m_new = tl.where(m_new > float("-inf"), m_new, 0.0)  # rows that see nothing yet
            else:
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp2(s - p_offset(m_new, FP8_PRODUCTS, P_TOP)[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(s, axis=1) * (qk_scale * LOG2E))
            p = tl.exp2(s * (qk_scale * LOG2E) - p_offset(m_new, FP8_PRODUCTS, P_TOP)[:, None])
        alpha = tl.exp2(m_i - m_new)
        if PAIRS_V:
            p_v = p.to(PV_DTYPE)
            acc_even = acc_even * alpha[:, None] + tl.dot(p_v, v_even)
            acc_odd = acc_odd * alpha[:, None] + tl.dot(p_v, v_odd)
        elif FOLD:
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(PV_DTYPE), kv_to(v, PV_DTYPE, DECODE_FNUZ), acc)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(PV_DTYPE), kv_to(v, PV_DTYPE, DECODE_FNUZ))
        if FP8_PRODUCTS:
            l_i = l_i * alpha + tl.sum(p, axis=1) * (2.0 ** -P_TOP)
        else:
            l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    if PAIRS_V:
        acc = tl.reshape(tl.join(acc_even, acc_odd), acc.shape)
    return acc, m_i, l_i


@triton.jit
def attend_q_block(
    q_block, kv_head, segment,
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
    sinks_ptr, k_scale_ptr, v_scale_ptr,
    segm_out_ptr, segm_max_ptr, segm_sum_ptr, arrivals_ptr,
    scale, softcap, window, num_seqs, split_max_q, num_q_heads, num_segments,
    num_tokens, max_seq_len, last_block,
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
    DECODE_FNUZ: tl.constexpr,
    READ_AHEAD: tl.constexpr,
    SEQ_ITEMS: tl.constexpr,
    DECODE_LAYOUT: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
    SEGMENTS_PADDED: tl.constexpr,
    EDGE_TILE: tl.constexpr,
    BLOCK_VECTOR: tl.constexpr,
    OFFSETS_32: tl.constexpr,
    TOKEN_OFFSETS_32: tl.constexpr,
    PV_FP16: tl.constexpr,
    QK_FP16: tl.constexpr,
    FP8_PRODUCTS: tl.constexpr,
    V_PAIRS: tl.constexpr,
    K_PAIRS: tl.constexpr,
    PAIRS_PTX: tl.constexpr,
):
    """Work item (Q-block, KV head, segment): attention of one Q-block over its tiles.

    Items index Q-blocks: sequence i's first is cu_seqlens_q[i] // BLOCK_Q + i
    (`locate_q_block` finds the sequence). With SEQ_ITEMS (`Config.seq_items`, chosen
    where every sequence fits one Q-block: decodes) they index sequences: no search, no
    empty items in the gaps of that bound. A loop over the sequence's Q-blocks keeps a longer
    one whole (a graph captured for decodes replaying a prefill); it costs registers and
    some spills in decode configurations (static gate, sm_90: flex_tile 168 -> 224, falcon-7b
    static_grid 52 -> 148 bytes), not speed on the H100 (the heuristics cite the lab).

    When num_segments > 1, a sequence with at most split_max_q queries (decodes) has its
    tiles split into num_segments contiguous segments; each item stores its partial output,
    max and exp-sum for `reduce_segments`, empty segments included (m = -inf, l = 0), so
    stale buffer contents are never read; with FUSED_REDUCE the last of them merges them
    (`merge_if_last`) and no reduction is launched. Other sequences run whole in segment 0,
    which writes the output; their items for segments > 0 do nothing.
    """
    if SEQ_ITEMS:
        seq = q_block
        q_start, q_len = query_span(cu_seqlens_q_ptr, seq, num_tokens)
        local_block = 0
    else:
        seq, q_start, q_len, local_block = locate_q_block(cu_seqlens_q_ptr, q_block, num_seqs, num_tokens,
                                                          BLOCK_Q, DECODE_LAYOUT)
    split = (num_segments > 1) & (q_len <= split_max_q)  # runtime: one kernel serves both paths
    # Two calls of `attend_rows`, not one loop for both: a loop around it costs registers
    # (see above), and the Q-block path, prefill's, stays as it was measured.
    if SEQ_ITEMS:
        if split | (segment == 0):
            for local_block in range(0, tl.cdiv(q_len, BLOCK_Q)):
                attend_rows(
                    seq, q_start, q_len, local_block, split, kv_head, segment,
                    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr,
                    sinks_ptr, k_scale_ptr, v_scale_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr,
                    scale, softcap, window, num_q_heads, num_segments, max_seq_len, last_block,
                    stride_q_token, stride_q_head,
                    stride_k_block, stride_k_pos, stride_k_head,
                    stride_v_block, stride_v_pos, stride_v_head,
                    stride_bt_seq, stride_o_token, stride_o_head,
                    QUERIES_PER_KV, BLOCK_SIZE, TILE_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED,
                    BLOCK_M, BLOCK_Q, USE_SOFTCAP, USE_SLIDING_WINDOW, USE_SINKS, USE_FP8,
                    DECODE_FNUZ, READ_AHEAD, EDGE_TILE, BLOCK_VECTOR, OFFSETS_32, TOKEN_OFFSETS_32, PV_FP16,
                    QK_FP16, FP8_PRODUCTS, V_PAIRS, K_PAIRS, PAIRS_PTX,
                )
    else:
        if (local_block >= 0) & (local_block * BLOCK_Q < q_len) & (split | (segment == 0)):
            attend_rows(
                seq, q_start, q_len, local_block, split, kv_head, segment,
                out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr,
                sinks_ptr, k_scale_ptr, v_scale_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr,
                scale, softcap, window, num_q_heads, num_segments, max_seq_len, last_block,
                stride_q_token, stride_q_head,
                stride_k_block, stride_k_pos, stride_k_head,
                stride_v_block, stride_v_pos, stride_v_head,
                stride_bt_seq, stride_o_token, stride_o_head,
                QUERIES_PER_KV, BLOCK_SIZE, TILE_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED,
                BLOCK_M, BLOCK_Q, USE_SOFTCAP, USE_SLIDING_WINDOW, USE_SINKS, USE_FP8,
                DECODE_FNUZ, READ_AHEAD, EDGE_TILE, BLOCK_VECTOR, OFFSETS_32, TOKEN_OFFSETS_32, PV_FP16,
                QK_FP16, FP8_PRODUCTS, V_PAIRS, K_PAIRS, PAIRS_PTX,
            )
    if FUSED_REDUCE:
        # A split sequence is one Q-block: its item for Q-block 0 arrives, once per segment.
        if SEQ_ITEMS:
            arrives = split
        else:
            arrives = split & (q_block == q_start // BLOCK_Q + seq)
        if arrives:
            merge_if_last(seq, kv_head, arrivals_ptr, out_ptr, segm_out_ptr, segm_max_ptr,
                          segm_sum_ptr, cu_seqlens_q_ptr, split_max_q, num_q_heads, num_segments, num_tokens,
                          stride_o_token, stride_o_head, QUERIES_PER_KV, SEGMENTS_PADDED,
                          HEAD_SIZE, HEAD_SIZE_PADDED, TOKEN_OFFSETS_32)


@triton.jit
def attend_rows(
    seq, q_start, q_len, local_block, split, kv_head, segment,
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr,
    sinks_ptr, k_scale_ptr, v_scale_ptr,
    segm_out_ptr, segm_max_ptr, segm_sum_ptr,
    scale, softcap, window, num_q_heads, num_segments, max_seq_len, last_block,
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
    DECODE_FNUZ: tl.constexpr,
    READ_AHEAD: tl.constexpr,
    EDGE_TILE: tl.constexpr,
    BLOCK_VECTOR: tl.constexpr,
    OFFSETS_32: tl.constexpr,
    TOKEN_OFFSETS_32: tl.constexpr,
    PV_FP16: tl.constexpr,
    QK_FP16: tl.constexpr,
    FP8_PRODUCTS: tl.constexpr,
    V_PAIRS: tl.constexpr,
    K_PAIRS: tl.constexpr,
    PAIRS_PTX: tl.constexpr,
):
    """Q-block `local_block` of sequence `seq` (KV head `kv_head`, `segment` when `split`):
    its rows' online softmax over their tiles, then the output or the segment's partials.
    A sequence whose key count fails `keys_ok` gets no tiles: its rows are zeros."""
    seq_len = tl.load(seq_lens_ptr + seq)
    keys_fit = keys_ok(seq_len, q_len, max_seq_len)
    context_len = tl.where(keys_fit, seq_len - q_len, 0)
    seq_len = tl.where(keys_fit, seq_len, 0)  # the read-ahead's first read, masked by it, reads nothing
    rows = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_SIZE_PADDED)
    q_pos = local_block * BLOCK_Q + rows // QUERIES_PER_KV  # query index within the sequence
    head = kv_head * QUERIES_PER_KV + rows % QUERIES_PER_KV
    row_mask = (rows < BLOCK_Q * QUERIES_PER_KV) & (q_pos < q_len)
    dim_mask = dims < HEAD_SIZE
    token = offset_index(q_start + q_pos, TOKEN_OFFSETS_32)  # q, out and partials are per token
    q = tl.load(q_ptr + token[:, None] * stride_q_token + head[:, None] * stride_q_head
                + dims[None, :], mask=row_mask[:, None] & dim_mask[None, :], other=0.0)
    abs_pos = context_len + q_pos
    first_pos = context_len + local_block * BLOCK_Q
    WINDOW_VECTOR: tl.constexpr = (USE_SLIDING_WINDOW and BLOCK_VECTOR and BLOCK_SIZE < TILE_SIZE
                                   and TILE_SIZE % BLOCK_SIZE == 0)
    last_pos = context_len + tl.minimum(local_block * BLOCK_Q + BLOCK_Q, q_len) - 1
    lo, full_lo, full_hi, hi = tile_bounds(first_pos, last_pos, window, TILE_SIZE,
                                           USE_SLIDING_WINDOW, WINDOW_VECTOR)
    hi = tl.where(keys_fit, hi, 0)  # every loop below ends by hi: none runs
    if split:
        per_segment = tl.cdiv(hi - lo, num_segments)
        seg_lo = tl.minimum(lo + segment * per_segment, hi)
        seg_hi = tl.minimum(seg_lo + per_segment, hi)
    else:
        seg_lo = lo
        seg_hi = hi

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if USE_SINKS:
        if segment == 0:  # the sink joins the denominator once: in segment 0
            m_i = tl.load(sinks_ptr + head, mask=row_mask, other=float("-inf")).to(tl.float32) * LOG2E
            l_i = tl.where(row_mask, 1.0, 0.0).to(tl.float32)  # exp2(sink - m_i) = 1
    acc = tl.zeros([BLOCK_M, HEAD_SIZE_PADDED], dtype=tl.float32)
    qk_scale = scale
    if USE_FP8:
        qk_scale = scale * tl.load(k_scale_ptr)
    if FP8_PRODUCTS:  # both products on e4m3 operands (`Config.fp8_products`)
        tl.static_assert(not DECODE_FNUZ, "fp8 products need a cache format the target's Triton converts")
        Q_DTYPE: tl.constexpr = k_cache_ptr.dtype.element_ty
        q, q_shift = to_range(q, Q_DTYPE, e4m3_top(Q_DTYPE))
        qk_scale = qk_scale * tl.exp2(q_shift)
    elif QK_FP16:  # both products in fp16: one conversion per e4m3 pair (`Config.qk_fp16`)
        q, q_shift = to_fp16_range(q)
        qk_scale = qk_scale * tl.exp2(q_shift)
    # Masked window edge (only with a window: otherwise lo = full_lo = 0), unmasked middle,
    # masked causal edge.
    if USE_SLIDING_WINDOW:
        acc, m_i, l_i = attend_tiles(
            acc, m_i, l_i, q, tl.maximum(lo, seg_lo), tl.minimum(full_lo, seg_hi),
            k_cache_ptr, v_cache_ptr, block_table_ptr, seq, seq_len, kv_head, abs_pos, first_pos,
            qk_scale, softcap, window, last_block,
            stride_k_block, stride_k_pos, stride_k_head, stride_v_block, stride_v_pos, stride_v_head,
            stride_bt_seq, TILE_SIZE, BLOCK_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED, True, 1,
            USE_SOFTCAP, USE_SLIDING_WINDOW, DECODE_FNUZ, READ_AHEAD, BLOCK_VECTOR, OFFSETS_32, PV_FP16,
            FP8_PRODUCTS, V_PAIRS, K_PAIRS, PAIRS_PTX)
    acc, m_i, l_i = attend_tiles(
        acc, m_i, l_i, q, tl.maximum(full_lo, seg_lo), tl.minimum(full_hi, seg_hi),
        k_cache_ptr, v_cache_ptr, block_table_ptr, seq, seq_len, kv_head, abs_pos, first_pos,
        qk_scale, softcap, window, last_block,
        stride_k_block, stride_k_pos, stride_k_head, stride_v_block, stride_v_pos, stride_v_head,
        stride_bt_seq, TILE_SIZE, BLOCK_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED, False, 0,
        USE_SOFTCAP, USE_SLIDING_WINDOW, DECODE_FNUZ, READ_AHEAD, BLOCK_VECTOR, OFFSETS_32, PV_FP16,
            FP8_PRODUCTS, V_PAIRS, K_PAIRS, PAIRS_PTX)
    # The causal edge in tiles of EDGE_TILE keys (a divisor of TILE_SIZE): the tiles of
    # TILE_SIZE it covers, cut after the last key a query of this Q-block sees.
    if EDGE_TILE == TILE_SIZE:
        edge_lo = tl.maximum(full_hi, seg_lo)
        edge_hi = tl.minimum(hi, seg_hi)
    else:
        edge_lo = tl.maximum(full_hi, seg_lo) * (TILE_SIZE // EDGE_TILE)
        edge_hi = tl.minimum(tl.minimum(hi, seg_hi) * (TILE_SIZE // EDGE_TILE), last_pos // EDGE_TILE + 1)
        if (USE_SLIDING_WINDOW and BLOCK_SIZE % TILE_SIZE != 0 and BLOCK_SIZE % EDGE_TILE == 0
                and not WINDOW_VECTOR):
            edge_lo = tl.maximum(edge_lo, tl.maximum(first_pos - window + 1, 0) // EDGE_TILE)
    CAUSAL_EDGE_LOADS: tl.constexpr = 2 * (USE_SLIDING_WINDOW and BLOCK_SIZE % TILE_SIZE != 0
                                           and not WINDOW_VECTOR)
    acc, m_i, l_i = attend_tiles(
        acc, m_i, l_i, q, edge_lo, edge_hi,
        k_cache_ptr, v_cache_ptr, block_table_ptr, seq, seq_len, kv_head, abs_pos, first_pos,
        qk_scale, softcap, window, last_block,
        stride_k_block, stride_k_pos, stride_k_head, stride_v_block, stride_v_pos, stride_v_head,
        stride_bt_seq, EDGE_TILE, BLOCK_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED, True, CAUSAL_EDGE_LOADS,
        USE_SOFTCAP, USE_SLIDING_WINDOW, DECODE_FNUZ, READ_AHEAD, BLOCK_VECTOR, OFFSETS_32, PV_FP16,
            FP8_PRODUCTS, V_PAIRS, K_PAIRS, PAIRS_PTX)
    if FP8_PRODUCTS:  # P was 2^top times larger (`attend_tiles`)
        acc = acc * (tl.load(v_scale_ptr) * 2.0 ** -e4m3_top(k_cache_ptr.dtype.element_ty))
    elif USE_FP8:
        acc = acc * tl.load(v_scale_ptr)

    if split:
        # Partials: [num_tokens, num_q_heads, num_segments, (HEAD_SIZE_PADDED)], float32.
        slot = (token * num_q_heads + head) * num_segments + segment
        tl.store(segm_max_ptr + slot, m_i, mask=row_mask)
        tl.store(segm_sum_ptr + slot, l_i, mask=row_mask)
        tl.store(segm_out_ptr + slot[:, None] * HEAD_SIZE_PADDED + dims[None, :], acc,
                 mask=row_mask[:, None])
    else:
        # [q-block-reciprocal] one reciprocal a row, not a div.full.f32 an element (a range check, two
        # scalings and a product each): H200 2026-12-01, short prefills 0.976-0.991x (docs/lab/2026-12-01.md).
        # Not where tile and block do not divide each other (blocks of 544): there ptxas laid the whole kernel
        # out anew (572 of the tile loop's 731 sm_90 instructions differ) and the mixed 32 x 32k over blocks
        # of 544 took 1.064x as long (H200 2026-12-01, nightly latency gate): those divide, as before.
        UNEVEN_BLOCKS: tl.constexpr = BLOCK_SIZE % TILE_SIZE != 0 and TILE_SIZE % BLOCK_SIZE != 0
        # Two branches, not one: each side keeps the operation order (so the code) it was gated with.
        if UNEVEN_BLOCKS:
            l_i = tl.where(l_i > 0.0, l_i, 1.0)
        else:
            inverse = 1.0 / tl.where(l_i > 0.0, l_i, 1.0)
        out_ptrs = out_ptr + token[:, None] * stride_o_token + head[:, None] * stride_o_head + dims[None, :]
        if UNEVEN_BLOCKS:
            o = acc / l_i[:, None]
        else:
            o = acc * inverse[:, None]
        tl.store(out_ptrs, o.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & dim_mask[None, :])


@triton.jit
def reduce_sequence_head(
    seq, head, out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr, cu_seqlens_q_ptr, split_max_q,
    num_q_heads, num_segments, num_tokens, stride_o_token, stride_o_head,
    SEGMENTS_PADDED: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    TOKEN_OFFSETS_32: tl.constexpr,
    SAME_LAUNCH: tl.constexpr = False,
    query=-1,
):
    """Merge the segments of one (sequence, query head) for each of its queries, if split; with
    `query` >= 0 for that query of the sequence alone (none where the sequence has fewer).

    The online softmax's rescaling: out = sum_s exp2(m_s - M) acc_s / sum_s exp2(m_s - M) l_s
    with M = max_s m_s; empty segments (m_s = -inf) weigh nothing. SAME_LAUNCH: the partials
    were stored by other programs of this launch (`merge_if_last`), so the loads are volatile:
    an SM's L1 is not coherent with the others' stores within a launch.
    """
    q_start, q_len = query_span(cu_seqlens_q_ptr, seq, num_tokens)
    if q_len <= split_max_q:
        segs = tl.arange(0, SEGMENTS_PADDED)
        dims = tl.arange(0, HEAD_SIZE_PADDED)
        seg_ok = segs < num_segments
        t_lo = q_start
        t_hi = q_start + q_len
        if query >= 0:  # a constant -1 when called per (sequence, query head)
            t_lo = q_start + query
            t_hi = tl.minimum(t_hi, t_lo + 1)
        for t in range(t_lo, t_hi):
            if TOKEN_OFFSETS_32:
                token = t
            else:  # widened through q_start: t is a plain int in Triton's interpreter
                token = q_start.to(tl.int64) + (t - q_start)
            slot = (token * num_q_heads + head) * num_segments + segs
            m = tl.load(segm_max_ptr + slot, mask=seg_ok, other=float("-inf"), volatile=SAME_LAUNCH)
            m_max = tl.max(m, axis=0)
            w = tl.where(m > float("-inf"), tl.exp2(m - m_max), 0.0)
            denom = tl.sum(tl.load(segm_sum_ptr + slot, mask=seg_ok, other=0.0, volatile=SAME_LAUNCH) * w,
                           axis=0)
            acc = tl.load(segm_out_ptr + slot[:, None] * HEAD_SIZE_PADDED + dims[None, :],
                          mask=seg_ok[:, None], other=0.0, volatile=SAME_LAUNCH)
            o = tl.sum(acc * w[:, None], axis=0) / tl.where(denom > 0.0, denom, 1.0)
            tl.store(out_ptr + token * stride_o_token + head * stride_o_head + dims,
                     o.to(out_ptr.dtype.element_ty), mask=dims < HEAD_SIZE)


@triton.jit
def merge_if_last(
    seq, kv_head, arrivals_ptr, out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr, cu_seqlens_q_ptr,
    split_max_q, num_q_heads, num_segments, num_tokens, stride_o_token, stride_o_head,
    QUERIES_PER_KV: tl.constexpr,
    SEGMENTS_PADDED: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    TOKEN_OFFSETS_32: tl.constexpr,
):
    """Called by each segment's item of a split (sequence, KV head) once its partials are
    stored: the last of the num_segments to arrive merges them for the KV head's query heads,
    what `reduce_segments_kernel` does a launch later otherwise, and resets the count to 0
    for the next call or graph replay (every split item arrives exactly once per launch).

    Ordering: the barrier puts every thread's partial stores before the arrival in the
    program; the arrival is a GPU-scope acquire-release atomic, so the last program sees all
    the others' stores (the pattern of CUTLASS's split-K semaphore).
    """
    tl.debug_barrier()
    count = arrivals_ptr + seq * (num_q_heads // QUERIES_PER_KV) + kv_head
    if tl.atomic_add(count, 1, sem="acq_rel", scope="gpu") == num_segments - 1:
        tl.atomic_xchg(count, 0, sem="relaxed", scope="gpu")
        for h in range(QUERIES_PER_KV):
            reduce_sequence_head(
                seq, kv_head * QUERIES_PER_KV + h, out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr,
                cu_seqlens_q_ptr, split_max_q, num_q_heads, num_segments, num_tokens, stride_o_token,
                stride_o_head, SEGMENTS_PADDED, HEAD_SIZE, HEAD_SIZE_PADDED, TOKEN_OFFSETS_32, True,
            )


# ---------------------------------------------------------------------------------------
# The Q-block kernel and its reduction, launched by `parallel`, `flex_tile` (PERSISTENT off:
# one program per work item) and `static_grid` (PERSISTENT on: a fixed grid of programs
# looping over work items). `planning.py` plans both launches.
# ---------------------------------------------------------------------------------------

# Runtime integers that vary from batch to batch: Triton would otherwise compile one kernel per
# value class (== 1, divisible by 16, other), multiplying compilations for no speed.
NO_SPECIALIZE = ["num_seqs", "split_max_q", "num_q_heads", "num_segments", "window", "stride_bt_seq",
                 "num_tokens", "max_seq_len", "last_block"]
REDUCE_NO_SPECIALIZE = ["split_max_q", "num_q_heads", "num_segments", "num_seqs", "num_tokens"]


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def q_block_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
    sinks_ptr, k_scale_ptr, v_scale_ptr,
    segm_out_ptr, segm_max_ptr, segm_sum_ptr, arrivals_ptr,
    scale, softcap, window, num_seqs, split_max_q, num_q_heads, num_segments,
    num_tokens, max_seq_len, last_block,
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
    DECODE_FNUZ: tl.constexpr,  # the caches are FNUZ e4m3 bytes (uint8) to decode here (NVIDIA)
    READ_AHEAD: tl.constexpr,  # read the block table a tile ahead (`tile_blocks`; heuristics choose)
    SEQ_ITEMS: tl.constexpr,  # items index sequences, not Q-blocks (decode batches; `attend_q_block`)
    DECODE_LAYOUT: tl.constexpr,  # Q-block items guess a decode batch's layout (`locate_q_block`)
    FUSED_REDUCE: tl.constexpr,  # the last segment merges a split sequence (`merge_if_last`)
    SEGMENTS_PADDED: tl.constexpr,
    PERSISTENT: tl.constexpr,
    EDGE_TILE: tl.constexpr,  # keys per tile of the masked causal edge (`Config.edge_tile`)
    BLOCK_VECTOR: tl.constexpr,  # a tile over several cache blocks reads one id per block (`attend_tiles`)
    OFFSETS_32: tl.constexpr,  # cache offsets in int32: every one fits (`planning.offsets_32`)
    TOKEN_OFFSETS_32: tl.constexpr,  # q, out and partials offsets in int32: every one fits
    PV_FP16: tl.constexpr,  # P V in fp16 (bf16 queries, OCP fp8 caches; `Config.pv_fp16`, `.qk_e4m3`)
    QK_FP16: tl.constexpr,  # Q K^T in fp16 too, q scaled into its range (`Config.qk_fp16`)
    # Q K^T on e4m3 operands, and P V unless PV_FP16 (`Config.fp8_products`, `.qk_e4m3`)
    FP8_PRODUCTS: tl.constexpr,
    # an OCP e4m3 V, K read as 16-bit pairs of dims, split into even and odd dims (`Config.v_pairs`,
    # `.k_pairs`; `split_e4m3_pairs`), by one PTX conversion a pair where compiled for NVIDIA
    V_PAIRS: tl.constexpr,
    K_PAIRS: tl.constexpr,
    PAIRS_PTX: tl.constexpr,
    V_STRIDES_OF_K: tl.constexpr,  # V is addressed with K's strides (`shared_strides`)
    OUT_STRIDES_OF_Q: tl.constexpr,  # out with q's
    # the reduction may launch once each program is done; it waits for the grid (`Config.pdl_reduce`)
    LAUNCH_DEPENDENTS: tl.constexpr,
):
    """Work items (Q-block, KV head, segment), each by `attend_q_block` (with SEQ_ITEMS a
    sequence stands in for the Q-block).

    PERSISTENT off: grid (Q-blocks, KV heads, segments), one item per program. PERSISTENT
    on: any grid size; the Q-block count is read on the device (the same upper bound as
    the 3-D grid's; with SEQ_ITEMS the sequence count) and each program takes every
    num_programs-th item, heaviest first (under the causal mask a sequence's last Q-blocks
    have the most tiles), so the grid does not depend on the batch's composition.
    """
    if V_STRIDES_OF_K:
        stride_v_block = stride_k_block
        stride_v_pos = stride_k_pos
        stride_v_head = stride_k_head
    if OUT_STRIDES_OF_Q:
        stride_o_token = stride_q_token
        stride_o_head = stride_q_head
    if PERSISTENT:
        num_kv_heads = num_q_heads // QUERIES_PER_KV
        items_per_q_block = num_kv_heads * num_segments
        if SEQ_ITEMS:
            num_q_blocks = num_seqs
        elif DECODE_LAYOUT:
            # The bound less its trailing gaps: where the last sequence's Q-blocks end. A
            # decode batch of 16 x k sequences otherwise ends in an empty Q-block whose items
            # some programs take first (heaviest first), starting a real item late.
            last = token_bound(tl.load(cu_seqlens_q_ptr + tl.maximum(num_seqs - 1, 0)), num_tokens)
            total = token_bound(tl.load(cu_seqlens_q_ptr + num_seqs), num_tokens)
            num_q_blocks = last // BLOCK_Q + num_seqs - 1 + tl.cdiv(total - last, BLOCK_Q)
        else:
            num_q_blocks = token_bound(tl.load(cu_seqlens_q_ptr + num_seqs), num_tokens) // BLOCK_Q + num_seqs
        for item in range(tl.program_id(0), num_q_blocks * items_per_q_block, tl.num_programs(0)):
            q_block = num_q_blocks - 1 - item // items_per_q_block  # heaviest (last) Q-blocks first
            kv_head = (item // num_segments) % num_kv_heads
            segment = item % num_segments
            attend_q_block(
                q_block, kv_head, segment,
                out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr,
                seq_lens_ptr, sinks_ptr, k_scale_ptr, v_scale_ptr, segm_out_ptr, segm_max_ptr,
                segm_sum_ptr, arrivals_ptr, scale, softcap, window, num_seqs, split_max_q, num_q_heads,
                num_segments, num_tokens, max_seq_len, last_block,
                stride_q_token, stride_q_head,
                stride_k_block, stride_k_pos, stride_k_head,
                stride_v_block, stride_v_pos, stride_v_head,
                stride_bt_seq, stride_o_token, stride_o_head,
                QUERIES_PER_KV, BLOCK_SIZE, TILE_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED,
                BLOCK_M, BLOCK_Q, USE_SOFTCAP, USE_SLIDING_WINDOW, USE_SINKS, USE_FP8, DECODE_FNUZ,
                READ_AHEAD, SEQ_ITEMS, DECODE_LAYOUT, FUSED_REDUCE, SEGMENTS_PADDED, EDGE_TILE,
                BLOCK_VECTOR, OFFSETS_32, TOKEN_OFFSETS_32, PV_FP16, QK_FP16, FP8_PRODUCTS,
                V_PAIRS, K_PAIRS, PAIRS_PTX,
            )
    else:
        attend_q_block(
            tl.program_id(0), tl.program_id(1), tl.program_id(2),
            out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, cu_seqlens_q_ptr,
            seq_lens_ptr, sinks_ptr, k_scale_ptr, v_scale_ptr, segm_out_ptr, segm_max_ptr,
            segm_sum_ptr, arrivals_ptr, scale, softcap, window, num_seqs, split_max_q, num_q_heads,
            num_segments, num_tokens, max_seq_len, last_block,
            stride_q_token, stride_q_head,
            stride_k_block, stride_k_pos, stride_k_head,
            stride_v_block, stride_v_pos, stride_v_head,
            stride_bt_seq, stride_o_token, stride_o_head,
            QUERIES_PER_KV, BLOCK_SIZE, TILE_SIZE, HEAD_SIZE, HEAD_SIZE_PADDED,
            BLOCK_M, BLOCK_Q, USE_SOFTCAP, USE_SLIDING_WINDOW, USE_SINKS, USE_FP8, DECODE_FNUZ,
            READ_AHEAD, SEQ_ITEMS, DECODE_LAYOUT, FUSED_REDUCE, SEGMENTS_PADDED, EDGE_TILE,
            BLOCK_VECTOR, OFFSETS_32, TOKEN_OFFSETS_32, PV_FP16, QK_FP16, FP8_PRODUCTS,
            V_PAIRS, K_PAIRS, PAIRS_PTX,
        )
    if LAUNCH_DEPENDENTS:  # after this program's items: earlier, the waiting reduction lost (`Config`)
        gdc_launch_dependents()


@triton.jit(do_not_specialize=REDUCE_NO_SPECIALIZE)
def reduce_segments_kernel(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr, cu_seqlens_q_ptr, split_max_q,
    num_q_heads, num_segments, stride_o_token, stride_o_head, num_seqs, num_tokens,
    SEGMENTS_PADDED: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    PERSISTENT: tl.constexpr,
    TOKEN_OFFSETS_32: tl.constexpr,
    BY_QUERY: tl.constexpr,  # an item per query, not per (sequence, query head) (`Config.reduce_by_query`)
    # launched as a programmatic dependent of the attention kernel: wait for its end and its writes
    WAIT_PRIMARY: tl.constexpr,
):
    """Items (sequence, query head), each by `reduce_sequence_head`, or with BY_QUERY (sequence,
    query head, query < split_max_q), so a sequence's queries merge side by side, not one after
    another in one program: grid (sequences, query heads, 1 or split_max_q) with PERSISTENT off,
    any grid looping over the items with PERSISTENT on."""
    if WAIT_PRIMARY:
        gdc_wait()
    per_head = split_max_q if BY_QUERY else 1  # items per (sequence, query head)
    if PERSISTENT:
        for item in range(tl.program_id(0), num_seqs * num_q_heads * per_head, tl.num_programs(0)):
            pair = item // per_head
            reduce_sequence_head(
                pair // num_q_heads, pair % num_q_heads, out_ptr, segm_out_ptr, segm_max_ptr,
                segm_sum_ptr, cu_seqlens_q_ptr, split_max_q, num_q_heads, num_segments, num_tokens,
                stride_o_token, stride_o_head, SEGMENTS_PADDED, HEAD_SIZE, HEAD_SIZE_PADDED,
                TOKEN_OFFSETS_32, False, item % per_head if BY_QUERY else -1,
            )
    else:
        reduce_sequence_head(
            tl.program_id(0), tl.program_id(1), out_ptr, segm_out_ptr, segm_max_ptr, segm_sum_ptr,
            cu_seqlens_q_ptr, split_max_q, num_q_heads, num_segments, num_tokens, stride_o_token,
            stride_o_head, SEGMENTS_PADDED, HEAD_SIZE, HEAD_SIZE_PADDED, TOKEN_OFFSETS_32, False,
            tl.program_id(2) if BY_QUERY else -1,
        )
