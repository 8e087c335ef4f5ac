"""The prefill warp-specialized for NVIDIA sm_90, in Gluon: a TMA loader warp and two consumer warpgroups,
and over an e4m3 cache a converter warpgroup; and the same kernel's decode form over an e4m3 cache, in token
items (below).

Why a second kernel: on Hopper the Triton kernel's software pipeline stalls on `bar.sync` for
27-29 % of its samples in a long prefill, FlashAttention-3's warp-specialized kernel for 3 %
(NVIDIA H200, ncu, docs/lab/2026-11-30.md), and Triton's automatic warp specialization cannot
take the paged loop on sm_90 (docs/lab/2026-11-27.md). Written by hand in Gluon
(`triton.experimental.gluon`, Triton >= 3.6) it takes 0.85-0.88x FlashInfer's time on the lab's
unmasked loop, where the Triton loop takes 1.2-1.5x (`perf.lab.warp_specialize`, H200,
docs/lab/2026-11-30.md), and the anchor's prefills that take it run 0.80-0.92x FlashInfer's time.

The work item is FlashAttention-3's: 128 queries of one query head of one sequence (a Q-block,
numbered as `common.find_seq_idx` numbers them, the last first, so that the longest causal rows
start first), causal at the end of the sequence's keys, over tiles of TILE keys. The kernel is
persistent, as FA3's: a program per SM (shared memory holds one) takes its own program id's item first,
then draws the next from a counter (`_ticket`, FA3's dynamic scheduler), so that its loader copies the
next item's q and first tiles while the consumers finish the last one, and the items in flight are always
the next ones in the numbering, as a program per item would run them. A program per item, the kernel's
first form, paid each item's start (8 x 1k 1.10-1.12x, 4 x 2k 1.05-1.09x, 2 x 2k 1.04x the time of this
one, bf16 and e4m3); taking every num_programs-th item instead of drawing took 1.11x its time on a long
mixed batch (32 x 32k) and 1.04x on a mixed batch of chunks, but 0.91-0.97x on batches of equal short
prompts (8 x 1k, 16 x 512) and 0.94x on a mixed batch over e4m3 (NVIDIA H200, docs/lab/2026-11-30.md).

- **The loader** (one warp, LOADER_REGS registers) finds each work item (`_item`: the binary search
  over the sequences, the keys, the tiles) and hands it on (`_hand_on`): its numbers into a small
  shared buffer and its Q-block by TMA, both completing on `q_bar`, once the readers of the last one
  have arrived on `q_empty`; so the consumers never search. Then each tile of K and V into one of
  STAGES shared buffers, one TMA copy per cache block (a tile of 128 keys is 8 copies of the anchor's
  blocks of 16), completing on the stage's `ready` barrier. Past the sequence's last key it copies from
  beyond the cache's rows, which TMA fills with zeros. The cache block holding the last key has stale
  rows after it: K's are masked out of the scores, but a stale V that is not finite would poison P V
  (0 x inf), so that block of V is read by ordinary masked loads, zeros past the last key, and stored
  by the loader, in an item's last tile only (`_copy_kv`: in the tile loop it spilled). Past its last
  item it hands on an item of -1 tiles, which ends the other partitions.
- **Two consumers** (a warpgroup each, CONSUMER_REGS registers) take 64 of the Q-block's rows
  each: S = Q K^T on wgmma, the causal mask on the tiles that cross the diagonal or the end,
  the online softmax in exp2 (the scale in each exponent's FFMA), O += P V on wgmma with P from
  registers. A tile's P V and the next tile's Q K^T are issued back to back and waited on once
  (the first Q K^T before the loop, the last P V after it): 0.85-0.95x the time of waiting on
  each product (H200, docs/lab/2026-11-30.md). Each consumer arrives on a stage's `empty`
  barriers once its products have read the buffers. Nothing else orders the consumers, so one's
  softmax runs while the other's products hold the tensor cores. A work item of at most 64 queries (a
  decode in a mixed batch, a sequence's last Q-block) leaves the second consumer no rows: it only passes
  each stage on, in order, and the first has the SM's tensor cores and issue slots to itself: mixed
  batches of 16 sequences up to 4k keys 0.95-0.98x the time, bf16 and e4m3, the same bits (H200,
  docs/lab/2026-11-30.md).
- **Packed heads** (`Config.ws_pack_gqa`, 16-bit caches; FlashAttention-3's PackGQA): a sequence whose
  queries' groups of heads fit the 128 rows (a decode, a few queries) takes one work item a KV head, each
  query's heads its rows (`_item`), where a Q-block of one query head read the keys once a query head:
  0.85-0.97x the time on batches of decodes beside prompts, 1.004-1.014x on chunks with no decode (NVIDIA
  H200, docs/lab/2026-12-04.md).
- **An OCP e4m3 cache** (FP8_PRODUCTS; bf16 or fp16 queries): each consumer rounds its rows of q
  to e4m3 once, after a power of two that the score scale takes back with k_scale (the next item's
  while the last P V of the item before runs, `_take_rounded`), and Q K^T runs
  on e4m3 straight from K's stage (only the rows of the item's queries set the power, so a
  sequence's rounding does not depend on the sequence after it). wgmma takes an 8-bit B only K-major
  and V's rows are keys, so P V runs in fp16 (P in fp16, 10 bits where bf16 keeps 7) over V converted
  exactly from e4m3 by a fourth warpgroup (`_convert_v`), which zeroes the keys past the last one; the
  loader copies V as stored into E4M3_SLOTS staging buffers for it. v_scale scales the output. The
  conversion in the loader's own warpgroup (its copies then wait on a barrier each) or in the consumers
  left it 1.15-1.2x slower than the bf16 kernel at blocks of 16; in a warpgroup of its own 0.91-1.08x.
  Rounding q there too, instead of in each consumer, lost 1.03-1.09x: the next item's V then waits
  behind it (H200, docs/lab/2026-11-30.md). One e4m3 part keeps 4 significant bits of q (the check holds
  such a launch to the reference of q so rounded, `perf.measure.check.e4m3_rounded`); against q itself,
  over scenario-sized batches, the outputs' largest error reached 0.139-0.154 (H200,
  docs/lab/2026-11-30.md). With `Q_PARTS` 2 (the planner's choice under fp16 queries) q goes into two
  parts, the second what the first's rounding lost, and Q K^T accumulates both: 8 bits, bf16's, for twice
  the e4m3 products (2 stages then fit, 1.12-1.14x the time of one part).

Metadata the value checks would refuse stays inside the tensors, as in the Q-block kernel
(tests/kernels/test_memory_safety.py states the contract): token ranges are clamped into q's rows,
a sequence whose keys do not cover its queries or overflow its block-table row gets rows of zeros
(`common.keys_ok`), and a block id outside the cache reads zeros (TMA's bounds; the Q-block kernel
clamps such ids into the cache instead).

**Token items** (`Config.ws_token_items`, TOKEN_ITEMS; a decode over an OCP e4m3 cache, set by no branch):
a work item is one token's query heads of one KV head (`_token_item`), a program per item up to the SMs,
so that a decode of about one item per SM streams its keys through TMA with no segments and no reduction.
A TMA stream of those bytes alone reaches 87-95 % of the copy limit at a program an item (NVIDIA H200,
docs/lab/2026-12-01.md), where the Q-block kernel's split decode reaches 72 %. One consumer warpgroup takes
the products transposed (`_consume_tokens`), the converter turns V to fp16 in passes of TOKEN_CONVERT_ROWS
(`_convert_v_tokens`), and the loader reads each block id once for its K and its V (`_copy_token_tile`). On
the H200 it takes 0.98-0.99x the Q-block kernel's time over q in two e4m3 parts and 0.93-0.94x over q in
one (`qk_e4m3`), on the 134 MB decodes; decodes of two items a program 1.03-1.09x (docs/kernels.md). Since the
converter's lanes run down the rows (`_convert_tiles`) 0.89-0.92x over q in one (docs/lab/2026-12-02.md).

Where it runs is `planning.warp_specialized_applies`'s: bf16 or fp16 queries over a cache of their
dtype or of OCP e4m3, without softcap, window or sinks, heads of 64 or 128 (128 over e4m3), cache
blocks that divide the tile, layouts TMA can read. Gluon has no interpreter mode: on a CPU it is
compiled for sm_90 only (tests/kernels/test_warp_specialized.py), and it runs on an sm_90 GPU.
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

from kernels.paged_attention.common import e4m3_top, next_pow2

BLOCK_M = gl.constexpr(128)  # queries per work item: two consumers of 64 rows, wgmma's M per warpgroup
HALF = gl.constexpr(64)
TILE = 128  # keys per tile: FA3's tile for a head of 128 in 16 bits (hopper/tile_size.h, read 2026-11-28)
STAGES = 2  # K and V buffers: 2 x 2 x 32 KiB and Q 32 KiB, 160 KiB of an SM's 227 (3 stages do not fit)
# Registers per thread (setmaxnreg): the kernel's average MAXNREG over 3 warpgroups is split into
# two consumers and a loader. FA3's split for two consumers is 240 / 24; the loader here also stages
# the last V block through registers (sm_90 compile, triton 3.6.0, 2026-11-30: 240 / 24 spilled 312 B
# of stack, 232 / 40 112 B, 216 / 72 32 B in the consumers; 224 / 56 8-16 B; with the persistent loop
# 72-216 B, spilling in the loader's tile loop, none there since `_copy_kv` took that block out of it)
CONSUMER_REGS = 224
LOADER_REGS = 56
MAXNREG = 168  # (2 x 224 + 56) / 3
# the loader's masked V block goes through registers 8 rows at a time: [8, 128] 16-bit values are 16
# registers a thread of its one warp, within its LOADER_REGS
ROWS_PER_STORE = gl.constexpr(8)
# e4m3 caches: the converter's warpgroup beside them (16 warps, 128 registers each at launch):
# 2 x 224 + 40 + 24 = 4 x 128, no spill (sm_90 compile, triton 3.6.0, 2026-11-30)
E4M3_REGS = dict(CONSUMER_REGS=224, CONVERTER_REGS=40, LOADER_REGS=24)
E4M3_MAXNREG = 128
# e4m3 caches: 3 stages of K and of fp16 V fit beside q in both types and the staging buffers (224.5 KiB
# of 227) and took 0.97-1.0x the time of 2 (H200, docs/lab/2026-11-30.md)
E4M3_STAGES = 3
# e4m3 caches with q in two parts (Q_PARTS 2): 3 stages do not fit beside the second part (240.5 KiB of 227);
# 2 stages took 0.90-0.99x the time of 3 over one staging buffer (H200, two processes, docs/lab/2026-11-30.md)
E4M3_TWO_PART_STAGES = 2
# e4m3 decodes in token items (`Config.ws_token_items`): 3 stages of K and fp16 V and 3 staging buffers beside
# q's rows and its e4m3 parts, within 227 KiB for groups of up to TOKEN_MAX_GROUP heads (sm_90 compile,
# triton 3.6.0, 2026-12-01: 16 heads 213 KiB); 5 stages of K, 4 buffers and 2 fp16 stages took 1.01-1.04x the
# time (NVIDIA H200, 2026-12-01 night, one process, the plans cleared between forms; docs/lab/2026-12-01.md)
TOKEN_STAGES = 3
TOKEN_SLOTS = gl.constexpr(3)
TOKEN_MAX_GROUP = 16
# its converter: passes of 32 rows in 128 registers a thread (passes of 16 in 40: 1.01-1.03x the time, of 8:
# 1.6x; NVIDIA H200, docs/lab/2026-12-01.md; of 64 since its lanes run down the rows 0.996-1.008x, 12-02)
TOKEN_CONVERT_ROWS = gl.constexpr(32)
# (the consumer, the default partition, takes the rest: 3 x E4M3_MAXNREG - 128 - 24 = 232; sm_90 PTX)
TOKEN_REGS = dict(CONSUMER_REGS=224, CONVERTER_REGS=128, LOADER_REGS=24)
# V's staging buffers, e4m3 as copied: the converter's one behind the loader's (2: not timed against 3)
E4M3_SLOTS = gl.constexpr(2)
# the converter's rows a pass: [16, 128] e4m3 in its warpgroup is 16 bytes a thread, in fp16 8 registers,
# within its 40 (not timed against other passes)
CONVERT_ROWS = gl.constexpr(16)


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
def _rows_to_e4m3(q, q8_smem, HALF_INDEX: gl.constexpr, valid):
    """A consumer's rows of q (16-bit, shared) into its e4m3 part(s) in `q8_smem` for Q K^T (`_q_parts`),
    brought into e4m3's range by a power of two as `common.to_range` does; returns the exponent q was
    divided by. In two parts, the second is what rounding to the first lost, rounded again: together 8
    significant bits of each value (bf16's) where one e4m3 part keeps 4 (`ws_prefill_kernel`'s Q_PARTS).
    Only the first `valid` rows are the work item's queries, and only their row maxima set the power, so
    that no other sequence's magnitudes do. The rest (the next sequence's, or TMA's zeros) are rounded too,
    saturating: a row of S, P and O reads only its own row of q, and their outputs are never stored.
    Masking the row maxima, not every element, took 60 selects a thread off each item's rounding."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, q.type.shape[0], gl.SliceLayout(1, layout))
    x = q.load(layout).to(gl.float32)
    big = gl.max(gl.where(rows < valid, gl.max(gl.abs(x), axis=1), 0.0), axis=0)
    usable = (big > 0.0) & (big < 3.0e38)
    shift = gl.where(usable, gl.ceil(gl.log2(gl.where(usable, big, 1.0))) - e4m3_top(q8_smem.dtype), 0.0)
    x = x * gl.exp2(-shift)
    rounded = x.to(q8_smem.dtype)
    PARTS: gl.constexpr = q8_smem.type.shape[0] // 2
    q8_smem.index(HALF_INDEX * PARTS).store(rounded)
    if PARTS == 2:
        q8_smem.index(HALF_INDEX * PARTS + 1).store((x - rounded.to(gl.float32)).to(q8_smem.dtype))
    fence_async_shared()  # the stores, before Q K^T reads them through the async proxy
    gl.thread_barrier()  # every warp's rows, before the warpgroup's products
    return shift


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
def _item(w, work, TILE: gl.constexpr, BLOCK: gl.constexpr, D: gl.constexpr):
    """Work item w: query head w % num_q_heads of Q-block num_q_blocks - 1 - w // num_q_heads (the
    longest causal rows first, a KV head's query heads side by side). Returns (head, its KV head's
    first column, the sequence's block-table row, first token, query count, first row in the sequence,
    keys before the queries, keys, tiles, packed).
    Packed (`pack_shift` > 0, `ws_prefill_kernel`'s PackGQA): a sequence of so few queries that each
    query's group of heads, 2^pack_shift rows apart, fits one item's 128 rows takes one item per KV head,
    its first num_kv_heads heads' numbers; `head` is then the group's first query head, `packed` the shift
    plus 256 x the group (0: not packed). Its other numbers are gaps, neither handed on nor copied."""
    (num_q_heads, group, cu_seqlens_q_ptr, seq_lens_ptr, num_seqs, num_tokens, num_q_blocks, block_table_ptr,
     block_table_stride, max_blocks, causal, tickets_ptr, pack_shift) = work
    head = w % num_q_heads
    q_block = num_q_blocks - 1 - w // num_q_heads
    seq, first, count, row = locate(cu_seqlens_q_ptr, q_block, num_seqs, num_tokens)
    packed = (pack_shift > 0) & (count >= 1) & ((count << pack_shift) <= BLOCK_M)
    gap = packed & (head >= num_q_heads // group)
    head = gl.where(packed, head * group, head)
    row = gl.where(gap, count, row)  # not a Q-block of queries: `_load_items` hands it on to no one
    seq_len = gl.load(seq_lens_ptr + seq)
    kv_len = gl.minimum(gl.maximum(seq_len, 0), max_blocks * BLOCK)
    # `common.keys_ok`: keys that cover the queries and fit the block-table row, else no tiles
    keys_fit = (seq_len >= count) & (seq_len <= max_blocks * BLOCK)
    # the keys before the queries; without the causal mask (a lab's question, never the contract's) the
    # queries are placed after every key, so that each sees them all
    context = kv_len - count * causal
    # the keys the Q-block's last row sees; none for a Q-block of no queries
    keys = gl.minimum(gl.maximum(context + row + BLOCK_M, 0), kv_len)
    n_tiles = gl.where((row >= 0) & (row < count) & keys_fit, gl.cdiv(keys, TILE), 0)
    table = block_table_ptr + seq.to(gl.int64) * block_table_stride
    return (head, (head // group) * D, table, first, count, row, context, kv_len, n_tiles,
            gl.where(packed, pack_shift + 256 * group, 0))


@gluon.jit
def _prefetch(ptr):
    """ptr's line fetched into L1, not waited for: a load of it later waits only for what is left of the
    trip. On the token items' fp8 decodes the loader's first copies went out 2.0 us after its start, 1.7
    with these prefetches (0.994x the time), where a stream that reads no metadata but the block ids issues
    them at 0.9 (NVIDIA H200, stamped, docs/lab/2026-12-01.md)."""
    gl.inline_asm_elementwise("prefetch.global.L1 [$1]; mov.u32 $0, 0;", "=r,l", [ptr], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _token_item(w, work, TILE: gl.constexpr, BLOCK: gl.constexpr, D: gl.constexpr):
    """Work item w of a decode launch (TOKEN_ITEMS): the query heads of KV head w % num_kv_heads at token
    w // num_kv_heads, a row each, over the keys its query sees. Returned as `_item`'s tuple, read so:
    `first` the token, `count` the group's heads (none for a token outside every sequence), `row`
    0, `context` the query's position (the keys before it), `head` the group's first query head. Its
    sequence is guessed first (a decode batch's token t is sequence t), and searched only where the guess
    is wrong: the search's dependent loads would otherwise hold up the item's first copies."""
    (num_q_heads, group, cu_seqlens_q_ptr, seq_lens_ptr, num_seqs, num_tokens, num_q_blocks, block_table_ptr,
     block_table_stride, max_blocks, causal, tickets_ptr, pack_shift) = work
    num_kv_heads = num_q_heads // group
    token = w // num_kv_heads
    kv_head = w % num_kv_heads
    guess = gl.maximum(gl.minimum(token, num_seqs - 1), 0)
    # the guessed sequence's length and first block ids fetched beside cu_seqlens_q's, so that their loads
    # here and in the first tile's copies wait on one round trip, not three (`_prefetch`)
    _prefetch(seq_lens_ptr + guess)
    _prefetch(block_table_ptr + guess.to(gl.int64) * block_table_stride)
    start = gl.load(cu_seqlens_q_ptr + guess)
    stop = gl.load(cu_seqlens_q_ptr + guess + 1)
    seq = guess
    if (token < start) | (token >= stop):
        lo = 0
        hi = num_seqs
        while lo < hi:  # the last sequence that starts at or before the token
            mid = (lo + hi) // 2
            if gl.load(cu_seqlens_q_ptr + mid) <= token:
                lo = mid + 1
            else:
                hi = mid
        seq = gl.maximum(lo - 1, 0)
        start = gl.load(cu_seqlens_q_ptr + seq)
        stop = gl.load(cu_seqlens_q_ptr + seq + 1)
    queries = stop - start
    seq_len = gl.load(seq_lens_ptr + seq)
    kv_len = gl.minimum(gl.maximum(seq_len, 0), max_blocks * BLOCK)
    # `common.keys_ok`: keys that cover the queries and fit the block-table row, else no tiles
    keys_fit = (seq_len >= queries) & (seq_len <= max_blocks * BLOCK)
    position = kv_len - queries * causal + token - start
    keys = gl.minimum(gl.maximum(position + 1, 0), kv_len)
    inside = (token >= start) & (token < stop) & (token < num_tokens)
    n_tiles = gl.where(inside & keys_fit, gl.cdiv(keys, TILE), 0)
    table = block_table_ptr + seq.to(gl.int64) * block_table_stride
    return (kv_head * group, kv_head * D, table, token, gl.where(inside, group, 0), 0, position, kv_len,
            n_tiles, 0)


@gluon.jit
def _items(work, TOKEN_ITEMS: gl.constexpr):
    """How many work items the grid has: query heads x the bound on Q-blocks, or for TOKEN_ITEMS tokens x
    KV heads."""
    if TOKEN_ITEMS:
        return work[5] * (work[0] // work[1])
    return work[6] * work[0]


@gluon.jit
def _ticket(work, n_tiles, step, drawn, items, STAGES_: gl.constexpr):
    """The number of the program's next work item, drawn from the counter at `step` (0: before the item's
    first tile's copies, j + 1: before tile j's) if that is STAGES_ tiles before the item's end (at 0 for
    an item of no more tiles), else `drawn`. There the loader waits on the consumers anyway, so the
    atomic's latency passes under their last tiles, and the drawn item waits on this program only for
    them. Drawn as the item started, it waited for the whole item: a mixed batch of chunks took 1.09x the
    time of a program per item, against 0.98x drawn here (NVIDIA H200, 2026-11-30, docs/lab/2026-11-30.md).
    A grid of at least a program per item (`gl.num_programs(0) >= items`) draws nothing: every ticket would
    be past the last item.
    The draw is relaxed: a ticket orders no memory (an item's inputs are only read), and `_leave`'s
    acquire-release arrival orders the program's draws before the counters are zeroed. Drawn acquire-release,
    it was a GPU-scope fence in the loader's warp between two tiles' copies, which waited under the stream:
    relaxed, 0.987x the time on the token items' fp8 decodes, and with `_token_item`'s prefetches
    0.975-0.985x; the Gluon prefills 0.983-1.000x (NVIDIA H200, docs/lab/2026-12-01.md)."""
    tickets_ptr = work[11]
    if (step == gl.maximum(n_tiles - STAGES_, -1) + 1) & (gl.num_programs(0) < items):
        drawn = gl.num_programs(0) + gl.atomic_add(tickets_ptr, 1, sem="relaxed")
    return drawn


@gluon.jit
def _leave(work):
    """Counts a program out once its last ticket came back past the items; the last program out zeroes
    both counters (every other one has drawn its last ticket), so the next launch, and a graph's next
    replay, start from zero (`planning.ticket_counters`)."""
    tickets_ptr = work[11]
    if gl.atomic_add(tickets_ptr + 1, 1) == gl.num_programs(0) - 1:
        gl.atomic_xchg(tickets_ptr, 0)
        gl.atomic_xchg(tickets_ptr + 1, 0)


# a work item as the loader hands it on: head, first, count, row, context, keys, tiles, packed (`_item`)
INFO = gl.constexpr(8)


@gluon.jit
def _hand_on(info, q_desc, qh_desc, q_smem, q_bar, q_empty, n, head, first, count, row, context, kv_len,
             n_tiles, packed, num_q_heads, TOKEN_ITEMS: gl.constexpr, PACK: gl.constexpr):
    """The loader hands its n-th work item on (`_next_item` takes it), once every reader is done with the
    last one (q_empty): its numbers into `info`, and its q by TMA, both completing on q_bar. Tiles < 0: no
    items are left. TOKEN_ITEMS: q is [tokens x query heads, D] rows, the item's one box of `token_rows`
    from its group's first head on (the group's heads, then whatever follows, never stored). A packed item
    (PACK: `_item`) the same from `qh_desc`, a box for each of its queries, one after another from row 0."""
    D: gl.constexpr = q_desc.block_type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([INFO], [32], [1], [0])  # the loader's warp, every lane all
    field = gl.arange(0, INFO, layout)
    values = gl.where(field == 0, head, gl.where(field == 1, first, gl.where(field == 2, count, gl.where(
        field == 3, row, gl.where(field == 4, context, gl.where(field == 5, kv_len, gl.where(
            field == 6, n_tiles, packed)))))))
    mbarrier.wait(q_empty, (n & 1) ^ 1)  # a fresh barrier passes phase 1
    info.store(values)
    gl.thread_barrier()  # every lane's stores, before the arrival that publishes them
    if TOKEN_ITEMS and n_tiles > 0:
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [first * num_q_heads + head, 0], q_bar, q_smem.index(0))
    elif PACK and (packed > 0) & (n_tiles > 0):
        ROWS: gl.constexpr = qh_desc.block_type.shape[0]
        for t in gl.static_range(BLOCK_M // ROWS):
            # one arrival with the bytes of `count` boxes: the expectation is a constant, so one of these
            mbarrier.expect(q_bar, (t + 1) * qh_desc.block_type.nbytes, pred=count == t + 1)
        for t in gl.static_range(BLOCK_M // ROWS):
            tma.async_copy_global_to_shared(qh_desc, [(first + t) * num_q_heads + head, 0], q_bar,
                                            q_smem.index(t * ROWS // HALF).slice(t * ROWS % HALF, ROWS),
                                            pred=count > t)
    elif n_tiles > 0:
        mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [first + row, head * D], q_bar, q_smem.index(0))
        tma.async_copy_global_to_shared(q_desc, [first + row + HALF, head * D], q_bar, q_smem.index(1))
    else:
        mbarrier.arrive(q_bar, count=1)


@gluon.jit
def _next_item(info, q_bar, n):
    """The n-th work item the loader handed on (`_hand_on`), once its q has landed: (head, first, count,
    row, context, kv_len, tiles, packed), in a partition of 4 warps."""
    mbarrier.wait(q_bar, n & 1)
    layout: gl.constexpr = gl.BlockedLayout([INFO], [32], [4], [0])  # every thread all of it
    values = info.load(layout)
    field = gl.arange(0, INFO, layout)
    return (gl.sum(gl.where(field == 0, values, 0), axis=0), gl.sum(gl.where(field == 1, values, 0), axis=0),
            gl.sum(gl.where(field == 2, values, 0), axis=0), gl.sum(gl.where(field == 3, values, 0), axis=0),
            gl.sum(gl.where(field == 4, values, 0), axis=0), gl.sum(gl.where(field == 5, values, 0), axis=0),
            gl.sum(gl.where(field == 6, values, 0), axis=0), gl.sum(gl.where(field == 7, values, 0), axis=0))


@gluon.jit
def _take_rounded(info, q_bar, q_empty, q_smem, q8_smem, n, HALF_INDEX: gl.constexpr):
    """The n-th work item (`_next_item`) over an e4m3 cache, its half of q rounded into q8_smem
    (`_rows_to_e4m3`) if it has tiles and queries in that half; then q's buffer is free for the loader
    (q_empty). Returns its numbers
    and the exponent.
    Taken under the last P V of the item before, not at the item's start, where the tensor cores waited
    for it: 0.977-0.995x the time of rounding there on the e4m3 rows, outputs the same bits (NVIDIA H200,
    one process, docs/lab/2026-11-30.md)."""
    head, first, count, row, context, kv_len, n_tiles, packed = _next_item(info, q_bar, n)
    shift = 0.0
    if (n_tiles > 0) & (count - row - HALF_INDEX * HALF > 0):
        shift = _rows_to_e4m3(q_smem.index(HALF_INDEX), q8_smem, HALF_INDEX, count - row - HALF_INDEX * HALF)
    mbarrier.arrive(q_empty, count=1)
    return head, first, count, row, context, kv_len, n_tiles, shift


@gluon.jit
def _q_parts(q, q_rest, k, zero_s, q8_smem):
    """Q K^T issued on wgmma: over e4m3 q in two parts (`_rows_to_e4m3`) the second accumulates onto the
    first, twice the e4m3 products, as many as one in 16 bits."""
    s = warpgroup_mma(q, k, zero_s, use_acc=False, is_async=True)
    if q8_smem.type.shape[0] == 4:
        s = warpgroup_mma(q_rest, k, s, is_async=True)
    return s


@gluon.jit
def _consume(info, q_smem, q8_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty,
             out_ptr, out_stride_t, out_stride_h, k_scale_ptr, v_scale_ptr, scale_log2,
             HALF_INDEX: gl.constexpr):
    """Rows HALF_INDEX * 64.. of each work item the loader hands on, over every tile: one consumer
    warpgroup's work. A packed item's rows (`_item`) are its queries' groups of heads, a group's first
    row 2^rows_shift rows after the last's, the rows past the group's heads never stored."""
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    K_STEP: gl.constexpr = 256 // k_bufs.dtype.primitive_bitwidth  # wgmma's K, 32 bytes: 16 or 32 values
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, TILE_, K_STEP])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    E4M3: gl.constexpr = k_bufs.dtype != q_smem.dtype  # FP8_PRODUCTS: no constant reaches a partition
    done = 0  # tiles of the earlier work items: the stages' barriers count on
    n = 0
    if E4M3:  # the scales once: loaded at each work item, each load's latency held up its start and its end
        # (latency gate, 3 processes: 0.993-0.998x the time, NVIDIA H200, docs/lab/2026-11-30.md)
        k_scale = gl.load(k_scale_ptr)
        v_scale = gl.load(v_scale_ptr)
        # each item's q is rounded under the last P V of the item before (below); the first's here
        head, first, count, row, context, kv_len, n_tiles, shift = _take_rounded(info, q_bar, q_empty, q_smem,
                                                                                 q8_smem, n, HALF_INDEX)
        packed = count * 0  # e4m3 items are never packed (`planning.WarpSpecializedPlan`)
    else:
        head, first, count, row, context, kv_len, n_tiles, packed = _next_item(info, q_bar, n)
    while n_tiles >= 0:
        rows_shift = packed & 255  # a packed item's rows a query, as a power of two (`_item`), else 0
        # the query positions of these rows: the sequence's queries are its last keys
        here = row + HALF_INDEX * HALF  # the item's row at this half's first
        top = context + (here >> rows_shift)
        positions = context + ((here + gl.arange(0, HALF, rows_s)) >> rows_shift)
        # tiles before `unmasked` hold only keys every row sees
        unmasked = gl.minimum(top + 1, kv_len) // TILE_
        m = gl.full([HALF], float("-inf"), gl.float32, rows_s)
        total = gl.zeros([HALF], gl.float32, rows_s)
        acc = gl.zeros([HALF, D], gl.float32, o_layout)
        mine = (count << rows_shift) - here  # rows of this half that are the item's queries
        if (n_tiles > 0) & (mine > 0):
            q = q_smem.index(HALF_INDEX)
            q_rest = q
            scale = scale_log2
            if E4M3:
                # an e4m3 cache: Q K^T on e4m3 operands, these rows of q brought into e4m3's range by a
                # power of two (`common.to_range`, exact) that the score scale takes back with K's scale
                PARTS: gl.constexpr = q8_smem.type.shape[0] // 2
                q = q8_smem.index(HALF_INDEX * PARTS)
                q_rest = q8_smem.index(HALF_INDEX * PARTS + PARTS - 1)
                scale = scale * k_scale * gl.exp2(shift)
            zero_s = gl.zeros([HALF, TILE_], gl.float32, s_layout)
            # Q K^T of each tile is issued right behind P V of the tile before, and one wait takes both:
            # the first tile's Q K^T before the loop, the last tile's P V after it
            first_stage = done % STAGES_
            mbarrier.wait(k_ready.index(first_stage), (done // STAGES_) & 1)
            s = _q_parts(q, q_rest, k_bufs.index(first_stage).permute((1, 0)), zero_s, q8_smem)
            s = warpgroup_mma_wait(0, deps=(s, ))
            mbarrier.arrive(k_empty.index(first_stage), count=1)
            for j in range(n_tiles - 1):
                t = done + j
                stage = t % STAGES_
                p16, m, total, acc = _online_softmax(s, m, total, acc, j, unmasked, positions, kv_len, scale,
                                                     v_bufs.dtype, o_layout)
                mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)
                acc = warpgroup_mma(p16, v_bufs.index(stage), acc, is_async=True)
                ahead = (t + 1) % STAGES_
                mbarrier.wait(k_ready.index(ahead), ((t + 1) // STAGES_) & 1)
                s = _q_parts(q, q_rest, k_bufs.index(ahead).permute((1, 0)), zero_s, q8_smem)
                s, acc = warpgroup_mma_wait(0, deps=(s, acc))
                mbarrier.arrive(v_empty.index(stage), count=1)
                mbarrier.arrive(k_empty.index(ahead), count=1)
            if not E4M3:
                mbarrier.arrive(q_empty, count=1)  # the last Q K^T has read q
            last = n_tiles - 1
            t = done + last
            p16, m, total, acc = _online_softmax(s, m, total, acc, last, unmasked, positions, kv_len, scale,
                                                 v_bufs.dtype, o_layout)
            mbarrier.wait(v_ready.index(t % STAGES_), (t // STAGES_) & 1)
            acc = warpgroup_mma(p16, v_bufs.index(t % STAGES_), acc, is_async=True)
            if E4M3:
                # the next item's q rounded while this P V runs: its last Q K^T has read q8_smem
                (next_head, next_first, next_count, next_row, next_context, next_kv_len, next_tiles,
                 next_shift) = _take_rounded(info, q_bar, q_empty, q_smem, q8_smem, n + 1, HALF_INDEX)
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(t % STAGES_), count=1)
            done += n_tiles
        else:
            # none of these rows is a query (an item of <= 64: a decode, a sequence's last Q-block), or no
            # tiles: the stages pass through this consumer's hands, in order, without a product
            for t in range(done, done + n_tiles):
                mbarrier.wait(k_ready.index(t % STAGES_), (t // STAGES_) & 1)
                mbarrier.arrive(k_empty.index(t % STAGES_), count=1)
                mbarrier.wait(v_ready.index(t % STAGES_), (t // STAGES_) & 1)
                mbarrier.arrive(v_empty.index(t % STAGES_), count=1)
            done += n_tiles
            if E4M3:
                (next_head, next_first, next_count, next_row, next_context, next_kv_len, next_tiles,
                 next_shift) = _take_rounded(info, q_bar, q_empty, q_smem, q8_smem, n + 1, HALF_INDEX)
            else:
                mbarrier.arrive(q_empty, count=1)  # no q to read
        # rows that saw no key (a work item given no tiles: `common.keys_ok` failed) are zeros, as the
        # Q-block kernel's: their accumulator is zeros, and so is their factor. One reciprocal a row:
        # `acc / total` was a div.full.f32 an element (sm_90 SASS: 3 FMUL, 2 of them range fixes, and a
        # select each, 250 instructions a consumer thread each work item); 0.965-0.989x the time on the bf16
        # rows, the same bits, and 0.970-0.995x on the e4m3 rows (NVIDIA H200, one process,
        # docs/lab/2026-12-01.md)
        total_o = gl.convert_layout(total, rows_o)
        inverse = gl.where(total_o > 0.0, 1.0 / total_o, 0.0)
        if E4M3:
            inverse = inverse * v_scale  # V entered P V as stored: its scale, once a row here
        o = acc * gl.expand_dims(inverse, 1)
        local = here + gl.arange(0, HALF, rows_o)
        cols = gl.arange(0, D, gl.SliceLayout(0, o_layout))
        query = local >> rows_shift
        within = local & ((1 << rows_shift) - 1)  # a packed row's head in its query's group, else 0
        tokens = (first + query).to(gl.int64)
        offsets = (gl.expand_dims(tokens * out_stride_t + (head + within) * out_stride_h, 1)
                   + gl.expand_dims(cols, 0))
        rows_here = (local >= 0) & (query < count) & (within < gl.maximum(packed >> 8, 1))
        gl.store(out_ptr + offsets, o.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(rows_here, 1))
        n += 1
        if E4M3:
            head, first, count, row = next_head, next_first, next_count, next_row
            context, kv_len, n_tiles, shift = next_context, next_kv_len, next_tiles, next_shift
        else:
            head, first, count, row, context, kv_len, n_tiles, packed = _next_item(info, q_bar, n)


@gluon.jit
def _consume_low(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                 q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t,
                 out_stride_h, v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2,
                 work):
    _consume(info, q_smem, q8_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty,
             out_ptr, out_stride_t, out_stride_h, k_scale_ptr, v_scale_ptr, scale_log2, 0)


@gluon.jit
def _consume_high(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                  q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t,
                  out_stride_h, v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2,
                  work):
    _consume(info, q_smem, q8_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty,
             out_ptr, out_stride_t, out_stride_h, k_scale_ptr, v_scale_ptr, scale_log2, 1)


@gluon.jit
def _consume_tokens(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                    q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t,
                    out_stride_h, v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2,
                    work):
    """The consumer of token items (`_token_item`; one warpgroup). Its products are transposed, the keys as
    wgmma's M and the item's ROWS query heads as its N (FlashInfer's and TensorRT-LLM's decode under
    grouped heads), so that a group of 7 heads costs a tile of 8 columns, not 64 rows: S^T = K Q^T on e4m3
    (K and q both K-major as stored), the online softmax down each column, O^T += V^T P^T in fp16, V^T
    read from the converter's stage as it lies and P^T through shared memory (wgmma's B). Two consumers of
    alternate tiles, merged at the item's end, took 1.01-1.02x the time of one (NVIDIA H200,
    docs/lab/2026-12-01.md)."""
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    ROWS: gl.constexpr = q8_smem.type.shape[1]
    PARTS: gl.constexpr = q8_smem.type.shape[0] // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ROWS, 32])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ROWS, 16])
    heads_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    heads_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    p_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    p_smem = gl.allocate_shared_memory(gl.float16, [ROWS, TILE_], p_layout)
    k_scale = gl.load(k_scale_ptr)
    v_scale = gl.load(v_scale_ptr)
    done = 0
    n = 0
    head, first, count, row, context, kv_len, n_tiles, shift = _take_rounded(info, q_bar, q_empty, q_smem,
                                                                             q8_smem, n, 0)
    while n_tiles >= 0:
        seen = gl.minimum(context + 1, kv_len)  # the keys the token's query sees
        unmasked = seen // TILE_  # tiles before it hold only such keys
        scale = scale_log2 * k_scale * gl.exp2(shift)
        q_t = q8_smem.index(0).permute((1, 0))
        q_rest_t = q8_smem.index(PARTS - 1).permute((1, 0))
        m = gl.full([ROWS], float("-inf"), gl.float32, heads_s)
        sums = gl.zeros([TILE_, ROWS], gl.float32, s_layout)  # each thread's part of the row sums
        acc = gl.zeros([D, ROWS], gl.float32, o_layout)
        zero_s = gl.zeros([TILE_, ROWS], gl.float32, s_layout)
        for j in range(n_tiles):
            t = done + j
            stage = t % STAGES_
            mbarrier.wait(k_ready.index(stage), (t // STAGES_) & 1)
            s = warpgroup_mma(k_bufs.index(stage), q_t, zero_s, use_acc=False, is_async=True)
            if PARTS == 2:
                s = warpgroup_mma(k_bufs.index(stage), q_rest_t, s, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s, ))
            mbarrier.arrive(k_empty.index(stage), count=1)
            if j >= unmasked:
                keys = j * TILE_ + gl.arange(0, TILE_, gl.SliceLayout(1, s_layout))
                s = gl.where(gl.expand_dims(keys < seen, 1), s, float("-inf"))
            m_new = gl.maximum(m, gl.max(s, axis=0) * scale)
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
            p = gl.exp2(s * scale - gl.expand_dims(m_use, 0))
            alpha = gl.exp2(m - m_use)
            sums = sums * gl.expand_dims(alpha, 0) + p
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, heads_o), 0)
            m = m_new
            p_smem.permute((1, 0)).store(p.to(gl.float16))
            fence_async_shared()  # the stores, before the product reads them through the async proxy
            gl.thread_barrier()  # every warp's keys, before the warpgroup's product
            mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)
            acc = warpgroup_mma(v_bufs.index(stage).permute((1, 0)), p_smem.permute((1, 0)), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(stage), count=1)
        done += n_tiles
        # rows of zeros where no key was seen (their sums are zeros), as the Q-block kernel's
        total = gl.convert_layout(gl.sum(sums, axis=0), heads_o)
        inverse = gl.where(total > 0.0, 1.0 / total, 0.0) * v_scale
        o = acc * gl.expand_dims(inverse, 0)
        dims = gl.arange(0, D, gl.SliceLayout(1, o_layout))
        heads = gl.arange(0, ROWS, heads_o)
        offsets = (first.to(gl.int64) * out_stride_t + gl.expand_dims((head + heads) * out_stride_h, 0)
                   + gl.expand_dims(dims, 1))
        gl.store(out_ptr + offsets, o.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(heads < count, 0))
        n += 1
        head, first, count, row, context, kv_len, n_tiles, shift = _take_rounded(info, q_bar, q_empty, q_smem,
                                                                                 q8_smem, n, 0)


@gluon.jit
def _copy_tile(desc, dest, bar, j, kv_len, kv_rows, block_table_ptr, col, skip_block):
    """Tile j's cache blocks into `dest` by TMA, completing on `bar`: the blocks past the last key
    from beyond the cache's rows (TMA's zeros), none for block `skip_block` (-1: none)."""
    BLOCK: gl.constexpr = desc.block_type.shape[0]
    PER_TILE: gl.constexpr = dest.type.shape[0] // BLOCK
    for i in gl.static_range(PER_TILE):
        logical = j * PER_TILE + i
        used = logical * BLOCK < kv_len
        block = gl.load(block_table_ptr + logical, mask=used, other=0)
        start = gl.where(used, block * BLOCK, kv_rows)  # past the rows: TMA's zeros
        tma.async_copy_global_to_shared(desc, [start, col], bar, dest.slice(i * BLOCK, BLOCK),
                                        pred=logical != skip_block)


@gluon.jit
def _copy_k(k_desc, k_bufs, k_ready, k_empty, j, t, kv_len, kv_rows, block_table_ptr, col):
    """Tile j of K, the program's t-th, into its stage once both consumers have released it."""
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    stage = t % STAGES_
    mbarrier.wait(k_empty.index(stage), ((t // STAGES_) & 1) ^ 1)  # a fresh barrier passes phase 1
    mbarrier.expect(k_ready.index(stage), TILE_ // BLOCK * k_desc.block_type.nbytes)
    _copy_tile(k_desc, k_bufs.index(stage), k_ready.index(stage), j, kv_len, kv_rows, block_table_ptr, col,
               -1)


@gluon.jit
def _copy_v(v_desc, v_bufs, v_ready, v_empty, j, t, kv_len, kv_rows, table, col, last_partial, v_cache_ptr,
            v_stride_row, LAST: gl.constexpr):
    """Tile j of a 16-bit V into its stage, a TMA copy per cache block. In an item's LAST tile, not the block
    holding the sequence's last key (`last_partial`, -1: none): the loader's warp reads that one by masked
    loads (zeros past the last key) and stores it (module docstring)."""
    STAGES_: gl.constexpr = v_bufs.type.shape[0]
    TILE_: gl.constexpr = v_bufs.type.shape[1]
    D: gl.constexpr = v_bufs.type.shape[2]
    BLOCK: gl.constexpr = v_desc.block_type.shape[0]
    PER_TILE: gl.constexpr = TILE_ // BLOCK
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [ROWS_PER_STORE // 2, 64 // ROWS_PER_STORE], [1, 1],
                                                 [1, 0])
    stage = t % STAGES_
    mbarrier.wait(v_empty.index(stage), ((t // STAGES_) & 1) ^ 1)
    if not LAST:  # no tile but an item's last holds the block of the sequence's last key (`_copy_kv`)
        mbarrier.expect(v_ready.index(stage), PER_TILE * v_desc.block_type.nbytes)
        _copy_tile(v_desc, v_bufs.index(stage), v_ready.index(stage), j, kv_len, kv_rows, table, col, -1)
        return
    partial_here = (last_partial >= j * PER_TILE) & (last_partial < (j + 1) * PER_TILE)
    if partial_here:
        i_partial = last_partial - j * PER_TILE
        block = gl.load(table + last_partial)
        # read only a block of the cache: an id past it (corrupt metadata) stores zeros, as TMA's
        # copies of such ids do
        in_cache = (block >= 0) & (block < kv_rows // BLOCK)
        for i in gl.static_range(PER_TILE):
            if i == i_partial:
                for c in gl.static_range(BLOCK // ROWS_PER_STORE):
                    r = c * ROWS_PER_STORE + gl.arange(0, ROWS_PER_STORE,
                                                       gl.SliceLayout(1, rows_layout))
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
    mbarrier.expect(v_ready.index(stage), (PER_TILE - 1) * v_desc.block_type.nbytes,
                    pred=partial_here)
    _copy_tile(v_desc, v_bufs.index(stage), v_ready.index(stage), j, kv_len, kv_rows, table, col,
               last_partial)


@gluon.jit
def _copy_token_tile(k_desc, v_desc, k_bufs, v8_bufs, bars, t, j, kv_len, kv_rows, table, col):
    """Tile j of a token item, the program's t-th, of an e4m3 K and V as stored: K into its stage and V into
    its staging buffer, once both are free; each block's id read alone (past the last key, the rows past the
    cache's: TMA's zeros) and its K and V copied by TMA at once. Ids read a tile ahead as one vector per
    tile, then taken out of it one by one, took 1.05-1.10x the time over blocks of 16 (0.98-1.00x over 32):
    the loader's warp then fell behind the stream (NVIDIA H200, docs/lab/2026-12-01.md)."""
    k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty = bars
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    SLOTS: gl.constexpr = v8_bufs.type.shape[0]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    PER_TILE: gl.constexpr = k_bufs.type.shape[1] // BLOCK
    stage = t % STAGES_
    slot = t % SLOTS
    mbarrier.wait(k_empty.index(stage), ((t // STAGES_) & 1) ^ 1)  # a fresh barrier passes phase 1
    mbarrier.wait(v8_empty.index(slot), ((t // SLOTS) & 1) ^ 1)
    mbarrier.expect(k_ready.index(stage), PER_TILE * k_desc.block_type.nbytes)
    mbarrier.expect(v8_ready.index(slot), PER_TILE * v_desc.block_type.nbytes)
    for i in gl.static_range(PER_TILE):
        logical = j * PER_TILE + i
        used = logical * BLOCK < kv_len
        block = gl.load(table + logical, mask=used, other=0)
        start = gl.where(used, block * BLOCK, kv_rows)
        tma.async_copy_global_to_shared(k_desc, [start, col], k_ready.index(stage),
                                        k_bufs.index(stage).slice(i * BLOCK, BLOCK))
        tma.async_copy_global_to_shared(v_desc, [start, col], v8_ready.index(slot),
                                        v8_bufs.index(slot).slice(i * BLOCK, BLOCK))


@gluon.jit
def _copy_kv(k_desc, v_desc, k_bufs, v_bufs, v8_bufs, bars, j, t, kv_len, kv_rows, table, col, last_partial,
             v_cache_ptr, v_stride_row, LAST: gl.constexpr):
    """Tile j of K and V, the program's t-th. LAST: the item's last tile, the only one that can hold the
    block of the sequence's last key, whose masked copy through registers (`_copy_v`) is compiled there
    alone: inside the tile loop it made the loader's warp spill there (stack of 72 B for heads of 128 over
    blocks of 16, 96 B over 64, 216 B over 128; sm_90 compile, triton 3.6.0, 2026-11-30), and none since."""
    k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty = bars
    E4M3: gl.constexpr = k_desc.dtype != v_bufs.dtype  # V converted to fp16 for P V (`_convert_v`)
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    SLOTS: gl.constexpr = v8_bufs.type.shape[0]
    _copy_k(k_desc, k_bufs, k_ready, k_empty, j, t, kv_len, kv_rows, table, col)
    if E4M3:
        slot = t % SLOTS
        mbarrier.wait(v8_empty.index(slot), ((t // SLOTS) & 1) ^ 1)
        mbarrier.expect(v8_ready.index(slot), TILE_ // BLOCK * v_desc.block_type.nbytes)
        _copy_tile(v_desc, v8_bufs.index(slot), v8_ready.index(slot), j, kv_len, kv_rows, table, col, -1)
    else:
        _copy_v(v_desc, v_bufs, v_ready, v_empty, j, t, kv_len, kv_rows, table, col, last_partial,
                v_cache_ptr, v_stride_row, LAST)


@gluon.jit
def _load(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar, q_empty,
          k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t, out_stride_h,
          v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2, work):
    _load_items(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, v_cache_ptr, v_stride_row,
                kv_rows, work, False)


@gluon.jit
def _load_tokens(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                 q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t,
                 out_stride_h, v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2,
                 work):
    _load_items(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, v_cache_ptr, v_stride_row,
                kv_rows, work, True)


@gluon.jit
def _load_items(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, v_cache_ptr, v_stride_row,
                kv_rows, work, TOKEN_ITEMS: gl.constexpr):
    """The loader (one warp): the program's work items in turn, each handed on with its Q-block (`_hand_on`),
    then K and V a tile at a time, a TMA copy per cache block. Over an e4m3 cache K as stored, for Q K^T on
    e4m3, and V as stored into one of the staging buffers that `_convert_v` empties."""
    E4M3: gl.constexpr = k_desc.dtype != q_desc.dtype
    STAGES_: gl.constexpr = k_bufs.type.shape[0]
    TILE_: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    bars = (k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty)
    done = 0
    n = 0
    items = _items(work, TOKEN_ITEMS)
    w = gl.program_id(0)
    while w < items:
        if TOKEN_ITEMS:
            head, col, table, first, count, row, context, kv_len, n_tiles, packed = _token_item(
                w, work, TILE_, BLOCK, D)
        else:
            head, col, table, first, count, row, context, kv_len, n_tiles, packed = _item(
                w, work, TILE_, BLOCK, D)
        if (row >= 0) & (row < count):  # a Q-block of queries: the gaps in the numbering are not handed on
            _hand_on(info, q_desc, qh_desc, q_smem, q_bar, q_empty, n, head, first, count, row, context,
                     kv_len, n_tiles, packed, work[0], TOKEN_ITEMS, not E4M3)  # token items are e4m3's
            n += 1
        # the cache block holding the last key, when keys follow it in that block (-1: none; a 16-bit V's)
        last_partial = gl.where(kv_len % BLOCK != 0, kv_len // BLOCK, -1)
        # every item draws once (an item of no tiles at once), before the loop or in it
        following = _ticket(work, n_tiles, 0, items, items, STAGES_)
        if TOKEN_ITEMS:
            # a block id read once for its K and V (`_copy_token_tile`): a token item's loader copies at the
            # stream's pace, where a Q-block's consumers leave it time
            for j in range(n_tiles):
                following = _ticket(work, n_tiles, j + 1, following, items, STAGES_)
                _copy_token_tile(k_desc, v_desc, k_bufs, v8_bufs, bars, done + j, j, kv_len, kv_rows, table,
                                 col)
        else:
            # a 16-bit V: the last tile peeled off (`_copy_kv`), so the loop never holds it; e4m3's, converted
            # elsewhere, took 0.997-1.022x the time so (H200, docs/lab/2026-11-30.md) and keeps one loop
            peeled = 0 if E4M3 else 1
            for j in range(n_tiles - peeled):
                following = _ticket(work, n_tiles, j + 1, following, items, STAGES_)
                _copy_kv(k_desc, v_desc, k_bufs, v_bufs, v8_bufs, bars, j, done + j, kv_len, kv_rows, table,
                         col, last_partial, v_cache_ptr, v_stride_row, E4M3)
            if not E4M3 and n_tiles > 0:
                following = _ticket(work, n_tiles, n_tiles, following, items, STAGES_)
                _copy_kv(k_desc, v_desc, k_bufs, v_bufs, v8_bufs, bars, n_tiles - 1, done + n_tiles - 1,
                         kv_len, kv_rows, table, col, last_partial, v_cache_ptr, v_stride_row, True)
        done += n_tiles
        w = following
    _leave(work)
    _hand_on(info, q_desc, qh_desc, q_smem, q_bar, q_empty, n, 0, 0, 0, 0, 0, 0, -1, 0, 0, TOKEN_ITEMS,
             False)  # no items left


@gluon.jit
def _convert_v(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
               q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t,
               out_stride_h, v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2, work):
    _convert_tiles(info, v_bufs, v8_bufs, q_bar, q_empty, v_ready, v_empty, v8_ready, v8_empty, CONVERT_ROWS)


@gluon.jit
def _convert_v_tokens(q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar,
                      q_empty, k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t,
                      out_stride_h, v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2,
                      work):
    _convert_tiles(info, v_bufs, v8_bufs, q_bar, q_empty, v_ready, v_empty, v8_ready, v8_empty,
                   TOKEN_CONVERT_ROWS)


@gluon.jit
def _convert_tiles(info, v_bufs, v8_bufs, q_bar, q_empty, v_ready, v_empty, v8_ready, v8_empty,
                   ROWS: gl.constexpr):
    """An e4m3 V tile from its staging buffer into its stage in fp16, for P V (wgmma takes an 8-bit B
    only K-major, and V's rows are keys): a warpgroup of its own, so that neither the consumers' loop
    nor the loader's copies wait on it. Keys past the last one are written as zeros: the cache block
    holding it has stale rows after it, which a zero of P would not cancel if not finite. ROWS a pass."""
    STAGES_: gl.constexpr = v_bufs.type.shape[0]
    TILE_: gl.constexpr = v_bufs.type.shape[1]
    SLOTS: gl.constexpr = v8_bufs.type.shape[0]
    # [16, 128] a rep, 16 bytes a thread; a warp's lanes down 8 rows, then across 4 column groups: each
    # quarter warp's 16-byte accesses (one row each) then meet 8 bank groups of the 128-byte swizzle, e4m3
    # read and fp16 written. Lanes across a row first wrote each quarter warp's fp16 into both halves of one
    # row (a row of 256 bytes): 2-way conflicts on all its stores, 8 wavefronts a store for 4 (ncu, NVIDIA
    # H200, 2026-12-02); so placed the e4m3 prefills took 0.96-0.98x the time and the token items 0.96-0.98x
    # (docs/lab/2026-12-02.md)
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [2, 2], [0, 1])
    done = 0
    n = 0
    head, first, count, row, context, kv_len, n_tiles, packed = _next_item(info, q_bar, n)
    while n_tiles >= 0:
        mbarrier.arrive(q_empty, count=1)  # the item's numbers are read
        for j in range(n_tiles):
            t = done + j
            stage = t % STAGES_
            slot = t % SLOTS
            mbarrier.wait(v8_ready.index(slot), (t // SLOTS) & 1)
            mbarrier.wait(v_empty.index(stage), ((t // STAGES_) & 1) ^ 1)
            for c in gl.static_range(TILE_ // ROWS):
                rows = v8_bufs.index(slot).slice(c * ROWS, ROWS)
                values = rows.load(layout).to(v_bufs.dtype)
                if (j + 1) * TILE_ > kv_len:
                    keys = j * TILE_ + c * ROWS + gl.arange(0, ROWS, gl.SliceLayout(1, layout))
                    values = gl.where(gl.expand_dims(keys < kv_len, 1), values, 0.0)
                v_bufs.index(stage).slice(c * ROWS, ROWS).store(values)
            fence_async_shared()  # the stores, before the products read them through the async proxy
            mbarrier.arrive(v8_empty.index(slot), count=1)  # after every warp's reads (the arrival syncs)
            mbarrier.arrive(v_ready.index(stage), count=1)
        done += n_tiles
        n += 1
        head, first, count, row, context, kv_len, n_tiles, packed = _next_item(info, q_bar, n)


@gluon.jit
def ws_prefill_kernel(q_desc, qh_desc, k_desc, v_desc, out_ptr, v_cache_ptr, block_table_ptr,
                      cu_seqlens_q_ptr, seq_lens_ptr, k_scale_ptr, v_scale_ptr, num_seqs, num_tokens,
                      num_q_blocks, num_q_heads, block_table_stride, max_blocks, out_stride_t, out_stride_h,
                      v_stride_row, kv_rows, scale_log2, tickets_ptr, pack_shift, GROUP: gl.constexpr,
                      TILE: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                      LOADER_REGS: gl.constexpr,
                      FP8_PRODUCTS: gl.constexpr = False, CONVERTER_REGS: gl.constexpr = 0,
                      CAUSAL: gl.constexpr = True, Q_PARTS: gl.constexpr = 1,
                      TOKEN_ITEMS: gl.constexpr = False):
    """Work items of num_q_blocks x num_q_heads, program_id(0)'s first, then as drawn from the two int32
    counters at tickets_ptr (zeros, left zeros: `_ticket`, `_leave`; `_item` numbers the items). The
    partition functions are one per warpgroup (`_consume_low`, `_consume_high`), not one taking the half
    as an argument: a constant passed through `gl.warp_specialize` arrives as a tensor (triton 3.6.0), and
    the half's Q buffer and row offsets are then computed at run time.
    q_desc: q as [tokens, query heads x D] in boxes of 64 rows; k_desc, v_desc: the caches as
    [blocks x block size, KV heads x D] rows in boxes of one cache block. FP8_PRODUCTS: the caches
    are OCP e4m3 (its name is the Q-block kernel's for a kernel that takes q through e4m3,
    `perf.measure.check.rounds_q_to_e4m3`); k_scale_ptr and v_scale_ptr are then read. Q_PARTS (e4m3 caches):
    q rounded to one e4m3 part for Q K^T, or split into two whose products add up (`_rows_to_e4m3`): Q K^T
    then as exact as in 16 bits, over the same e4m3 K.
    pack_shift > 0 (16-bit caches: FlashAttention-3's PackGQA for sequences of few queries, `_item`): such a
    sequence's work item is a KV head's, its rows each query's group of heads 2^pack_shift rows apart,
    copied from qh_desc, q as [tokens x query heads, D] in boxes of 2^pack_shift (`token_rows`) rows; 0:
    none, and qh_desc is q_desc, never read.
    TOKEN_ITEMS (a decode over an e4m3 cache): work items of num_tokens x KV heads (`_token_item`), the
    query heads of one KV head at one token as the rows, q_desc then q as [tokens x query heads, D] in boxes
    of `token_rows`; one consumer (`_consume_tokens`), the converter and the loader."""
    D: gl.constexpr = q_desc.block_type.shape[1]
    gl.static_assert((k_desc.dtype != q_desc.dtype) == FP8_PRODUCTS, "FP8_PRODUCTS: the caches are e4m3")
    gl.static_assert(FP8_PRODUCTS or not TOKEN_ITEMS, "TOKEN_ITEMS: written for e4m3 caches only")
    Q_ROWS: gl.constexpr = q_desc.block_type.shape[0]  # 64, or a token item's ROWS heads
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [1 if TOKEN_ITEMS else 2, Q_ROWS, D], q_desc.layout)
    SLOTS: gl.constexpr = TOKEN_SLOTS if TOKEN_ITEMS else E4M3_SLOTS  # V's staging buffers (e4m3)
    CONSUMERS: gl.constexpr = 1 if TOKEN_ITEMS else 2
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, TILE, D], k_desc.layout)
    info = gl.allocate_shared_memory(gl.int32, [INFO], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if FP8_PRODUCTS:
        # q in e4m3 for Q K^T; V staged as stored, then in fp16 (P V's operands: bf16 P would keep 7 bits)
        q8_smem = gl.allocate_shared_memory(k_desc.dtype, [2 * Q_PARTS, Q_ROWS, D], k_desc.layout)
        v8_bufs = gl.allocate_shared_memory(v_desc.dtype, [SLOTS, TILE, D], v_desc.layout)
        v_bufs = gl.allocate_shared_memory(gl.float16, [STAGES, TILE, D], q_desc.layout)
        v8_ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        v8_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(SLOTS):
            mbarrier.init(v8_ready.index(i), count=1)
            mbarrier.init(v8_empty.index(i), count=1)
    else:
        q8_smem = q_smem
        v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, TILE, D], v_desc.layout)
        v8_bufs = v_bufs
        v8_ready = v_ready
        v8_empty = v_empty
    mbarrier.init(q_bar, count=1)
    # the consumers, and the converter, read the item
    mbarrier.init(q_empty, count=CONSUMERS + (1 if FP8_PRODUCTS else 0))
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)  # every consumer reads every tile
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    # what the loader needs to number and place its work items (`_item`)
    work = (num_q_heads, GROUP, cu_seqlens_q_ptr, seq_lens_ptr, num_seqs, num_tokens, num_q_blocks,
            block_table_ptr, block_table_stride, max_blocks, 1 if CAUSAL else 0, tickets_ptr, pack_shift)
    args = (q_desc, qh_desc, k_desc, v_desc, info, q_smem, q8_smem, k_bufs, v_bufs, v8_bufs, q_bar, q_empty,
            k_ready, k_empty, v_ready, v_empty, v8_ready, v8_empty, out_ptr, out_stride_t, out_stride_h,
            v_cache_ptr, v_stride_row, kv_rows, k_scale_ptr, v_scale_ptr, scale_log2, work)
    if TOKEN_ITEMS:
        gl.warp_specialize([(_consume_tokens, args), (_convert_v_tokens, args), (_load_tokens, args)], [4, 1],
                           [CONVERTER_REGS, LOADER_REGS])
    elif FP8_PRODUCTS:  # the converter's warpgroup before the loader's warp: setmaxnreg takes whole ones
        gl.warp_specialize([(_consume_low, args), (_consume_high, args), (_convert_v, args),
                            (_load, args)], [4, 4, 1], [CONSUMER_REGS, CONVERTER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([(_consume_low, args), (_consume_high, args), (_load, args)], [4, 1],
                           [CONSUMER_REGS, LOADER_REGS])


HEAD_SIZES = (64, 128)  # a row of 128 or 256 bytes: the 128-byte swizzle; both compiled for sm_90 on a CPU
E4M3_HEAD_SIZES = (128,)  # an e4m3 row of 64 bytes would need the 64-byte swizzle: not written
BLOCK_SIZES = (16, 32, 64, 128)  # whole cache blocks per tile, each a TMA box of >= 8 rows (1 KiB)


def descriptors(q, k_cache, v_cache, token_items: bool = False, pack_gqa: bool = False):
    """Host TMA descriptors: q as [tokens, query heads x D] in boxes of 64 rows (`token_items`: as
    [tokens x query heads, D], its rows one after another: `planning.token_items_apply`), q again as those
    rows in boxes of `token_rows` for `pack_gqa`'s items (else q's first descriptor, never read;
    `planning.pack_gqa_applies`), each cache as [blocks x block size, KV heads x D] in boxes of one cache
    block (`planning.tma_layout` holds the strides this needs); wgmma's 128-byte swizzle for every tile."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    num_tokens, num_q_heads, head_size = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    q_layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8 * q.element_size(), rank=2)
    cache_layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8 * k_cache.element_size(),
                                        rank=2)
    rows_desc = None
    if token_items or pack_gqa:
        rows_desc = TensorDescriptor(q, [num_tokens * num_q_heads, head_size], [q.stride(1), 1],
                                     [token_rows(num_q_heads // num_kv_heads), head_size], q_layout)
    q_desc = rows_desc if token_items else TensorDescriptor(
        q, [num_tokens, num_q_heads * head_size], [q.stride(0), 1], [HALF.value, head_size], q_layout)
    rows = [num_blocks * block_size, num_kv_heads * head_size]
    return (q_desc, rows_desc if pack_gqa else q_desc,
            TensorDescriptor(k_cache, rows, [k_cache.stride(1), 1], [block_size, head_size], cache_layout),
            TensorDescriptor(v_cache, rows, [v_cache.stride(1), 1], [block_size, head_size], cache_layout))


def token_rows(group: int) -> int:
    """A token item's rows (wgmma's N of its transposed products, `_consume_tokens`): the group's query heads
    and up to a power of two after them, at least 8 (wgmma's least N, and an 8-row swizzle atom). A packed
    item's rows a query (`_item`) the same: each query's box of rows then starts on a swizzle atom."""
    return max(8, next_pow2(group))


def pack_shift(group: int) -> int:
    """`ws_prefill_kernel`'s pack_shift for `Config.ws_pack_gqa`: log2 of a packed item's rows a query."""
    return token_rows(group).bit_length() - 1


def launch_constants(e4m3: bool, q_parts: int = 1, token_items: bool = False) -> tuple[dict, int]:
    """(the kernel's stages, register split and q's e4m3 parts, the launch's MAXNREG) for a 16-bit cache or
    an e4m3 one (q rounded to one e4m3 part, or split into two: `ws_prefill_kernel`'s Q_PARTS), and for an
    e4m3 decode's token items (TOKEN_ITEMS)."""
    if token_items:
        return dict(STAGES=TOKEN_STAGES, Q_PARTS=q_parts, TOKEN_ITEMS=True, **TOKEN_REGS), E4M3_MAXNREG
    if e4m3:
        stages = E4M3_STAGES if q_parts == 1 else E4M3_TWO_PART_STAGES
        return dict(STAGES=stages, Q_PARTS=q_parts, **E4M3_REGS), E4M3_MAXNREG
    return dict(STAGES=STAGES, CONSUMER_REGS=CONSUMER_REGS, LOADER_REGS=LOADER_REGS), MAXNREG


def programs(items: int, num_sms: int) -> int:
    """The grid: a program per SM (shared memory holds one), each drawing work items in turn (`_ticket`),
    so that a program's copies for its next item run under its epilogue; never more than the items."""
    return max(1, min(items, num_sms))


def q_blocks(num_tokens: int, num_seqs: int) -> int:
    """The grid's Q-blocks: `common.find_seq_idx`'s bound, one more per sequence for its partial block. On
    a batch of chunks where its gaps are a fifth of the items, taking them out three ways (numbered
    without them, trimmed at the end, skipped a Q-block at a time) gained nothing (NVIDIA H200,
    docs/lab/2026-11-30.md)."""
    return num_tokens // BLOCK_M.value + num_seqs
