"""Launch configurations per vendor: readable decision trees over a batch's features.

`choose(vendor, features) -> Config` is a pure function: tests and the static gate call it
for any vendor from a CPU. `features_from_call` computes the features of a call from
shapes and the host-side hints a serving engine already has (`max_seqlen_q`,
`max_seqlen_k`, as vLLM passes them); it never reads device memory, so planning stays
free of host syncs and works inside CUDA/HIP-graph capture. Without hints the features are
bounds derived from shapes (documented on each field).

Every branch says where it came from: NVIDIA branches cite the sweep that chose them
(`python -m perf tune`, GPU, date, gain); AMD branches are documented
defaults, unmeasured until an MI300 sweep replaces them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import torch

from kernels.inputs import is_fp8
from kernels.paged_attention.common import decode_block_m, next_pow2

MIN_TILE = 16  # tl.dot needs K >= 16 (Triton's minimum on every backend)
# Visible keys of a decode up to which tiles shrink (the NVIDIA decode branch): between the
# windows measured (H100, 2026-11-23): 128 gained 1.4x, 1024 nothing; the boundary is unmeasured.
NARROW_WINDOW = 256
# Visible keys of a decode up to which it takes 32-key tiles, one program per item: many
# sequences of a few keys (H100, 2026-11-23, llama3-8b 128 x 64 keys: 33.4 -> 21.5 us). Contexts
# of 128 and 256 keys kept tile 128 (tile 64 / a program per item lost 3-4 % at 1 x 128 and
# 8 x 256); the boundary between 64 and 128 is unmeasured.
SHORT_CONTEXT = 64
# Least share of a 128-row Q-block's rows a prefill's head group must fill (tokens x query
# heads per KV head): below it the NVIDIA prefill takes 256 rows. Falcon-7b's 71 query heads
# on one KV head fill 71 of 128 (one token per Q-block) and 213 of 256 (three). H100 lab,
# 2026-11-23 (docs/kernels.md, "Prefill with many query heads per KV head"); between 0.55 and
# 0.83 the boundary is unmeasured.
MIN_PREFILL_ROW_USE = 0.75
# Keys a Q-block sees (`prefill_q_block_keys`) beyond which the NVIDIA prefill (one block id
# per cache block, int32 offsets) takes a third stage. H100 lab, 2026-11-24, llama3-8b, 2 -> 3
# stages: 1 x 8k 1.363 -> 1.238 ms, 1 x 16k 5.26 -> 4.79, 16 mixed up to 4k 1.397 -> 1.357, 4
# chunks of 2k after 6k 2.398 -> 2.161; at 2k even (4 x 2k 418 -> 419 us, 1 x 2k 113.5 ->
# 112.5), at 1k a loss (8 x 1k 274 -> 290). Between 2k and 4k the boundary is unmeasured.
LONG_PREFILL_KEYS = 2048
# Keys a Q-block sees up to which the NVIDIA prefill (128 rows, tile 128; 256 rows, tile 64)
# cuts its causal edge into tiles of half its tile, beyond it a quarter (`causal_edge_tile`).
# H100 labs, 2026-11-24, same process, graph replay, 5 shuffled rounds, whole tile -> half /
# quarter: llama3-8b 1 x 512 18.12 -> 17.27 / 18.45 us, 8 x 1k 265.7 -> 251.5 / 254.4, blocks
# of 64 mixed 32 x 1k 580.5 -> 558.1 / 564.7, falcon-7b prefill 64 up to 512 485.7 -> 471.7 /
# 497.7; llama3-8b 1 x 2k 109.0 -> 104.9 / 102.8, 4 x 2k 404.7 -> 393.6 / 390.3, 1 x 8k
# 1201.5 -> 1198.3 / 1126.7, falcon-7b 16 up to 4k 3051.5 -> 2969.9 / 2920.2 (docs/kernels.md,
# "The causal edge in tiles of 32"). Between 1k and 2k keys (llama3-8b; 32 mixed up to 2k:
# 271.3 -> 264.5 / 267.8) and between 512 and 4k (falcon-7b) the boundary is unmeasured.
EDGE_HALF_MAX_KEYS = 1024
# SMs / CUs of the products the trees are written for (H100 SXM: 132 SMs, MI300X: 304 CUs,
# vendor specifications), used when neither a `num_sms` hint nor a device says otherwise.
# The trees branch on the vendor, never on the architecture: a B200 (sm_100, 148 SMs) takes
# the NVIDIA tree swept on an H200 and an MI355X (gfx950, 256 CUs) the AMD tree written for
# MI300, each sized by its own SM/CU count (the device's, or the static gate's `num_sms`
# hint). Unmeasured defaults there: nobody has swept a B200 or an MI350 yet.
DEFAULT_NUM_SMS = {"nvidia": 132, "amd": 304}


@dataclass(frozen=True)
class Features:
    """What the decision trees look at; exact from a BatchSpec, bounds from shapes alone."""

    num_seqs: int
    num_tokens: int
    max_query_len: int  # shapes only: num_tokens - num_seqs + 1 (every sequence has >= 1 query)
    max_kv_len: int  # shapes only: block_table width * block_size
    avg_kv_len: float  # shapes only: max_kv_len
    decode_share: float  # sequences with one query; shapes only: a lower bound
    queries_per_kv: int  # GQA ratio
    num_kv_heads: int
    head_size: int
    block_size: int
    dtype: str  # float16 | bfloat16 | float32
    fp8_kv: bool
    num_sms: int  # SMs (NVIDIA) or CUs (AMD) of the target
    window: int = 0  # sliding window (keys with pos - key_pos >= window are masked); 0: none

    @property
    def avg_query_len(self) -> float:
        return self.num_tokens / self.num_seqs

    @property
    def visible_kv_len(self) -> int:
        """Keys the queries of one sequence can see: a sliding window bounds them to
        `window + max_query_len - 1` however long the context (tiles before it are pruned)."""
        if self.window:
            return min(self.max_kv_len, self.window + self.max_query_len - 1)
        return self.max_kv_len

    @property
    def decode_only(self) -> bool:
        return self.max_query_len == 1

    @property
    def kv_items(self) -> int:
        """(sequence, KV head) pairs: a decode batch's work items before any split."""
        return self.num_seqs * self.num_kv_heads


@dataclass(frozen=True)
class Config:
    """One launch configuration; `source` names the branch (and its sweep) that chose it."""

    block_m: int  # rows of a Q-block: BLOCK_M // queries_per_kv tokens x their query heads
    tile_size: int  # KV positions per softmax tile (independent of the cache block size)
    num_segments: int  # KV segments per decode sequence (1: no split, no reduce kernel)
    num_warps: int
    num_stages: int
    # static grid: persistent programs per SM / CU (the trees set it); 0: one program per work
    # item of the shapes' bound (the hardware scheduler balances them; still batch-independent)
    programs_per_sm: int = 2
    max_programs: int = 0  # static grid: a cap on its size (0: none); tests, shared GPUs
    # read the block table a tile ahead (common.tile_blocks): the K/V copies pipeline freely,
    # at the cost of carrying the next tile's block ids in registers
    read_ahead: bool = False
    # keys per tile of the masked causal edge (a divisor of tile_size; 0: tile_size): a
    # Q-block's last tiles cut at its last visible key instead of a whole tile's keys. The
    # NVIDIA prefill sets it (`causal_edge_tile`); `perf tune` sweeps it
    edge_tile: int = 0
    # a tile spanning several whole cache blocks (16 in 128) reads one block id per block and
    # copies [blocks, block, D] (common.attend_tiles); off: one id per key position
    block_vector: bool = False
    # cache offsets in int32 where the caches' extents allow it (planning.offsets_32), else int64
    offsets_32: bool = False
    # work items index sequences, not Q-blocks (SEQ_ITEMS, common.attend_q_block): for batches
    # whose sequences fit one Q-block; correct for any batch, fast only for those
    seq_items: bool = False
    # Q-block items find their sequence by guessing a decode batch's layout (one Q-block per
    # sequence) before any binary search, and the persistent loop skips the bound's trailing
    # gaps (DECODE_LAYOUT, common.locate_q_block): for decodes whose items are Q-blocks
    decode_layout: bool = False
    # the last segment of a split sequence merges the segments in the attention kernel
    # (FUSED_REDUCE, common.merge_if_last): one launch instead of two. No branch sets it:
    # H100 lab, 2026-11-23, it saved 25-57 us of host time a call but cost device time
    # (llama3-8b 1x1k 10.0 -> 13.6 us graph; docs/kernels.md); `perf tune` sweeps it
    fused_reduce: bool = False
    waves_per_eu: int = 0  # AMD only; 0 leaves the compiler's choice
    matrix_instr_nonkdim: int = 0  # AMD only; 0 leaves the compiler's choice
    source: str = ""

    def __post_init__(self):
        # What the kernels can be compiled with: BLOCK_M and TILE_SIZE are tl.arange extents
        # (powers of two) and tl.dot operands (>= 16); Triton takes power-of-two warps.
        for name, low, pow2 in (("block_m", MIN_TILE, True), ("tile_size", MIN_TILE, True),
                                ("num_segments", 1, False), ("num_warps", 1, True), ("num_stages", 1, False),
                                ("programs_per_sm", 0, False), ("max_programs", 0, False),
                                ("edge_tile", 0, False), ("waves_per_eu", 0, False),
                                ("matrix_instr_nonkdim", 0, False)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low or (
                    pow2 and value & (value - 1)):
                raise ValueError(f"{name}: must be {'a power of two' if pow2 else 'an int'} >= {low}, "
                                 f"got {value!r}")
        # The kernel maps edge tiles onto whole tiles (TILE_SIZE // EDGE_TILE of them each):
        # any other value would skip or repeat keys, so it is refused here.
        edge = self.edge_tile
        if edge and (edge < MIN_TILE or self.tile_size % edge or edge & (edge - 1)):
            raise ValueError(f"edge_tile: {edge} must be 0 or a power of two >= {MIN_TILE} dividing "
                             f"tile_size {self.tile_size}")

    def block_q(self, queries_per_kv: int) -> int:
        return self.block_m // queries_per_kv

    def vendor_options(self, vendor: str) -> dict:
        if vendor != "amd":
            return {}
        opts = {}
        if self.waves_per_eu:
            opts["waves_per_eu"] = self.waves_per_eu
        if self.matrix_instr_nonkdim:
            opts["matrix_instr_nonkdim"] = self.matrix_instr_nonkdim
        return opts

    def as_dict(self) -> dict:
        return asdict(self)


def features_from_call(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, *,
                       max_seqlen_q: int | None = None, max_seqlen_k: int | None = None,
                       num_sms: int | None = None, vendor: str = "nvidia",
                       sliding_window: int | None = None) -> Features:
    """Features from shapes and host-side hints; never reads device memory.

    An empty batch (no sequences) gets well-defined features, though callers launch nothing.
    """
    num_tokens, num_q_heads, head_size = q.shape
    num_seqs = block_table.shape[0]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    max_q, max_k = call_lengths(q, k_cache, block_table, max_seqlen_q, max_seqlen_k)
    decodes = num_seqs if max_q == 1 else max(0, 2 * num_seqs - num_tokens)
    return Features(
        num_seqs=num_seqs, num_tokens=num_tokens, max_query_len=max_q,
        max_kv_len=max_k, avg_kv_len=float(max_k),
        decode_share=decodes / max(1, num_seqs), queries_per_kv=num_q_heads // num_kv_heads,
        num_kv_heads=num_kv_heads, head_size=head_size, block_size=block_size,
        dtype=str(q.dtype).removeprefix("torch."), fp8_kv=is_fp8(k_cache.dtype),
        num_sms=num_sms or DEFAULT_NUM_SMS.get(vendor, 132), window=int(sliding_window or 0),
    )


def call_lengths(q, k_cache, block_table, max_seqlen_q=None, max_seqlen_k=None) -> tuple[int, int]:
    """(`Features.max_query_len`, `Features.max_kv_len`) of a call: the hints, else bounds
    from shapes."""
    num_seqs = block_table.shape[0]
    max_q = int(max_seqlen_q) if max_seqlen_q is not None else q.shape[0] - num_seqs + 1
    max_k = int(max_seqlen_k) if max_seqlen_k is not None else block_table.shape[1] * k_cache.shape[1]
    return max(1, max_q), max(1, max_k)


# The trees read a KV length only through multiples of this many keys: their thresholds
# (NARROW_WINDOW, SHORT_CONTEXT) are multiples of it, and so is every tile (powers of two
# >= MIN_TILE) whose count `visible_tiles` takes.
KV_GRANULE = MIN_TILE


def kv_len_class(max_kv_len: int, max_query_len: int, window: int) -> tuple[int, bool]:
    """What `choose` and `parallel.choose` read of `Features.max_kv_len`: its multiple of
    KV_GRANULE rounded up, and whether a sliding window hides part of it (the straddling tile
    of `visible_tiles`). Features that differ only in max_kv_len (and avg_kv_len) but share
    this class get the same configuration (tests/test_heuristics.py walks every length up to
    2100). So a decode loop, whose `max_seqlen_k` hint grows by one each step, can keep its
    choice for 15 steps of 16 (`planning.plan_q_blocks`)."""
    granules = -(-max_kv_len // KV_GRANULE)
    return granules * KV_GRANULE, bool(window) and window + max_query_len - 1 < max_kv_len


def features_from_spec(spec, num_sms: int) -> Features:
    """Exact features of a `kernels.batch.BatchSpec` (benchmarks, tests, sweeps)."""
    return Features(
        num_seqs=spec.num_seqs, num_tokens=spec.num_tokens, max_query_len=max(spec.query_lens),
        max_kv_len=max(spec.kv_lens), avg_kv_len=sum(spec.kv_lens) / spec.num_seqs,
        decode_share=sum(q == 1 for q in spec.query_lens) / spec.num_seqs,
        queries_per_kv=spec.num_q_heads // spec.num_kv_heads, num_kv_heads=spec.num_kv_heads,
        head_size=spec.head_size, block_size=spec.block_size, dtype=spec.dtype,
        fp8_kv=spec.fp8_kv, num_sms=num_sms, window=int(spec.sliding_window or 0),
    )


def is_decode_batch(f: Features) -> bool:
    """Every sequence fits one decode-sized Q-block (decodes, short speculative steps)."""
    return f.max_query_len <= decode_block_m(f.queries_per_kv) // f.queries_per_kv


def num_segments(f: Features, tile_size: int, target_programs_per_sm: int = 4,
                 tiles_per_segment: int = 8, max_segments: int = 64, fill_sms: bool = False) -> int:
    """KV segments per decode sequence: enough programs for the GPU, segments of >= 8 tiles.

    Paper 4.5: decode batches of few sequences leave most SMs idle with one program per
    (sequence, KV head); splitting each sequence's tiles into segments restores
    parallelism at the cost of a reduction. The rule and its two constants come from the
    sweep on an NVIDIA H200, 2026-11-21 (what is now `python -m perf tune`, tile 128): the best
    segment count kept about 8 tiles per segment (b1x32k: 32, b8x8k: 8, b32x8k: 8,
    b128x1k: 1) and grew no further once (sequences x KV heads x segments) passed about
    4 programs per SM (b8x32k: 8 at 0.271 ms, 16 at 0.281 ms). This rule picks the best
    measured count in 3 of 5 sweep scenarios and one within 4 % of it in the other two
    (b32x8k: 4, 0.310 vs 0.297 ms; b8x32k: 16, 0.281 vs 0.271 ms). A power of two.
    max_segments = 64 bounds the reduction's work and buffers; unmeasured default.

    `fill_sms` (the NVIDIA tree): where that leaves fewer programs than half the SMs, segments of
    sequences with >= 8 tiles shrink to as little as one tile until every SM has a program
    (shorter ones, unmeasured, stay whole: the reduction would cost more than it saves).
    Sweep on an NVIDIA H100 (graph replay, tile 128, host busy compiling: absolute times
    inflated), 2026-11-22: b1x1k 8 programs -> 8 segments, 29.4 -> 16.1 us; b1x8k 64
    programs -> 32 segments, 41.1 -> 34.1 us; b8x1k 64 -> 4 segments, 38.6 -> 35.1 us;
    batches already at >= 128 programs kept their counts (b16x4k under a 1024 window:
    1 segment, 50.5 us, 2-8 segments 59-60 us). Off for AMD (unmeasured there).

    Sliding windows: the tiles are those of the visible keys (`visible_tiles`), as the
    kernel splits only them. Same H100 sweep: gpt-oss-20b heads, b64x4k, window 128: 2 -> 1
    segment, 54.5 -> 33.6 us; llama3-8b b16x4k, window 1024: 4 -> 1, 59.9 -> 50.5 us.
    """
    if not is_decode_batch(f):
        return 1
    items = f.kv_items
    tiles = visible_tiles(f, tile_size)
    by_length = tiles // tiles_per_segment
    by_occupancy = math.ceil(target_programs_per_sm * f.num_sms / items)
    segments = max(1, min(_pow2_floor(by_length), next_pow2(by_occupancy), max_segments))
    if fill_sms and 2 * items * segments < f.num_sms and tiles >= tiles_per_segment:  # launch bound
        segments = max(segments, min(next_pow2(math.ceil(f.num_sms / items)), _pow2_floor(tiles),
                                     max_segments))
    return segments


def visible_tiles(f: Features, tile_size: int) -> int:
    """Tiles a decode Q-block visits: those of the visible keys (`Features.visible_kv_len`),
    plus one where a sliding window's first key need not start a tile."""
    straddle = 1 if f.visible_kv_len < f.max_kv_len else 0
    return math.ceil(f.visible_kv_len / tile_size) + straddle


# Launch-bound decodes of short sequences (`short_split`): the range of visible keys and the
# share of the SMs the work items may fill, both as measured (H100 lab of 2026-11-23 below).
SPLIT_KEYS = (128, 1024)  # more than the first, at most the second
SPLIT_MAX_SEGMENTS = 16
# Decodes of many short sequences (the `many` rule of `_nvidia`): at least this many work items
# per SM (64 sequences x 8 KV heads on 132 SMs) and at most this many visible keys, as measured.
MANY_ITEMS_PER_SM = 3
MANY_ITEMS_MAX_KEYS = 2048


def short_split(f: Features) -> tuple[int, int] | None:
    """(tile, segments) for a decode batch of few, short sequences, or None where it does not apply.

    Few work items (sequences x KV heads <= a quarter of the SMs) of 129-1024 visible keys
    leave most SMs idle and ran whole (the `fill_sms` rule of `num_segments` needs >= 8 tiles
    of 128). Here the sequence splits into up to 16 segments, about one per SM, and the tile
    shrinks to half a segment's keys (at least 16), so every program has two tiles to pipeline.
    H100 lab, 2026-11-23, graph replay, 5 shuffled rounds, tiles 16-128 x 1-16 segments,
    llama3-8b unless named, before -> chosen (best measured; vLLM 0.19.1's Triton kernel):
    1x256 8.33 -> 7.29 us (7.29; 6.91), 1x512 12.09 -> 8.00 (8.00; 7.91), 1x1k 9.89 -> 8.75
    (8.75; 9.70), 2x256 8.82 -> 7.92 (7.92; 7.57), 2x512 12.54 -> 8.85 (8.85; 8.66), 2x1k
    10.95 -> 10.12 (10.12; 10.79), 4x256 9.19 -> 8.84 (8.75; 9.19), 4x512 12.97 -> 10.15
    (10.15; 10.63), 4x1k 13.12 -> 12.35 (12.35; 13.91), falcon-7b 4x1k 11.04 -> 8.97 (8.97;
    9.88), 16x1k 14.91 -> 13.59 (13.37; 15.06), llama2-7b 1x512 12.28 -> 10.04 (10.04; 9.88).
    Left whole: one tile of 128 (1x128 6.54 us whole, 6.91 split) and 64 items (8x256: 9.35
    whole, 10.03 split; 8x512 would gain, 13.52 -> 12.24, but stays whole with 8x256).
    Lengths are read in tiles of MIN_TILE keys, so a KV-length class (`kv_len_class`) keeps
    one answer."""
    items = f.kv_items
    keys = visible_tiles(f, MIN_TILE)  # visible keys, in tiles of MIN_TILE
    if 4 * items > f.num_sms or not SPLIT_KEYS[0] < keys * MIN_TILE <= SPLIT_KEYS[1]:
        return None
    segments = min(next_pow2(math.ceil(f.num_sms / items)), SPLIT_MAX_SEGMENTS, _pow2_floor(keys))
    # >= 4 segments (items <= SMs / 4) over <= 64 tiles of 16: the tile stays <= 128
    return MIN_TILE * max(1, _pow2_floor(keys // (2 * segments))), segments


def prefill_row_use(queries_per_kv: int, block_m: int) -> float:
    """Share of a Q-block's rows that hold queries: whole tokens' head groups in block_m rows
    (at least one token: `_fit` widens a Q-block to a whole head group)."""
    rows = max(block_m, decode_block_m(queries_per_kv))
    return (rows // queries_per_kv) * queries_per_kv / rows


def prefill_q_block_keys(f: Features, block_m: int) -> int:
    """Keys one Q-block of a prefill can see: every visible key, or under a sliding window at
    most the window plus the block's own tokens (`block_m // queries_per_kv`, at least one)."""
    keys = f.visible_kv_len
    if f.window:
        keys = min(keys, f.window + max(1, block_m // f.queries_per_kv) - 1)
    return keys


def causal_edge_tile(f: Features, block_m: int, tile_size: int) -> int:
    """The NVIDIA prefill's causal edge (`Config.edge_tile`): half the tile where a Q-block
    sees up to EDGE_HALF_MAX_KEYS keys, a quarter beyond; whole tiles (0) under a sliding
    window, whose causal edge then spans the window's tiles (H100 lab, 2026-11-24: llama3-8b
    window 1024 mixed 831.2 -> 841.4 us with a quarter, gpt-oss-20b window 128 2380 -> 2560),
    and for fp8 caches (llama3-8b 8 x 1k 320.6 -> 313.3 us with half, 1 x 8k 1695.5 -> 1687.3,
    mixed 16 up to 4k 1980.6 -> 1992.1: no rule to keep)."""
    if f.window or f.fp8_kv:
        return 0
    half = prefill_q_block_keys(f, block_m) <= EDGE_HALF_MAX_KEYS
    return max(MIN_TILE, tile_size // 2 if half else tile_size // 4)


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n >= 1 else 0


@functools.lru_cache(maxsize=4096)
def choose(vendor: str, f: Features) -> Config:
    """The configuration for `vendor` ("nvidia" or "amd") and a batch's features.

    Pure, so its answers are kept: a serving engine calls with few distinct feature sets, and
    walking the tree cost about a tenth of a call's host time."""
    if vendor == "nvidia":
        return _nvidia(f)
    if vendor == "amd":
        return _amd(f)
    raise ValueError(f"vendor: unknown {vendor!r}; expected 'nvidia' or 'amd'")


def _fit(f: Features, block_m: int, tile_size: int, fill_sms: bool = False, segments: int | None = None,
         **kw) -> Config:
    """Clamp a branch's choice to what the kernel needs: whole head groups, dot minimums.
    Segments: `num_segments` for the tile unless the branch names them."""
    block_m = max(block_m, decode_block_m(f.queries_per_kv))
    tile_size = max(MIN_TILE, tile_size)
    segments = segments or num_segments(f, tile_size, fill_sms=fill_sms)
    return Config(block_m=block_m, tile_size=tile_size, num_segments=segments, **kw)


# NVIDIA: the sweep (now `python -m perf tune`) on an NVIDIA H200 (sm_90, 132
# SMs), triton 3.6.0, torch 2.11, 2026-11-21: static_grid, Llama-3-8B heads, bf16, block 16,
# graph replay, coordinate descent from the previous defaults (tile 64, 3 stages); the gains
# below are previous default -> chosen, median ms. Head size 256 doubles every tile's shared
# memory: its branches halve the tile (128 x 256 x 2 B x 2 tensors x 2 stages would not fit
# the 227 KB an SM offers) and are unmeasured.
def _nvidia(f: Features) -> Config:
    wide = f.head_size > 128
    if is_decode_batch(f):
        # Memory bound: the smallest Q-block, 128-position tiles (fewer, longer KV reads), 4 warps.
        # Sweep: tile 128 beat 64/32/16 in all 5 decode scenarios (b8x32k 0.510 -> 0.271 ms
        # with 8 segments, b8x8k 0.147 -> 0.092, b32x8k 0.438 -> 0.297, b128x1k 0.189 -> 0.157,
        # b1x32k 0.0586 -> 0.0547); 4 warps beat 2 and 8 in all 5; stages 2-4 within 2 %.
        # Items are the sequences (`seq_items`), not Q-blocks found by a binary search, a third
        # of them empty for 8 query heads per KV head. H100 labs, 2026-11-23, graph replay,
        # static_grid, block 16, Q-block -> sequence items: llama3-8b 8x1k 21.8 -> 17.4 us,
        # 32x1k 71.3 -> 55.4, fp8 32x2k 94.8 -> 75.9, 64 up to 4k 259.3 -> 241.5, 16x4k under
        # a 1024 window 42.4 -> 39.2; gpt-oss-20b 64x4k, window 128, sinks 21.3 -> 14.8;
        # falcon-7b 16x1k 15.3 -> 14.8. Not for one sequence (no search to save: llama3-8b
        # 1x1k 9.92 -> 10.26) nor one query head per KV head (Q-blocks of 16 tokens leave few
        # empty: llama2-7b 16x1k 102.6 -> 103.0-104.8, phi-2 78.4 -> 78.6). Not on AMD: the
        # static gate found new SGPR spills with it in gfx942/gfx950 decodes (unmeasured).
        # A narrow sliding window (<= NARROW_WINDOW visible keys: 1-2 tiles of 128 per item):
        # tile 64 and one program per item, so more items run at once instead of in waves.
        # H100 lab, 2026-11-23, graph replay, with sequence items, tile 128 / 2 programs per
        # SM -> tile 64 / one per item: gpt-oss-20b 64x4k, window 128, sinks 14.8 -> 10.7 us
        # (tile 32: 10.4, tile 16: 11.6; tile 128 with one per item 15.8); 16x8k 7.3 -> 7.4
        # (128 items: no waves to save). Wider windows keep tile 128 (llama3-8b 16x4k, window
        # 1024: 38.9 -> 38.5).
        # Short contexts (<= SHORT_CONTEXT keys, window or not): tile 16, 2 warps, 4 programs
        # per SM. Same lab, graph replay, vLLM 0.19.1's Triton kernel beside: llama3-8b 128 x 64
        # keys tile 128 / 2 per SM 33.4 us, tile 64 / 2 per SM 24.1, tile 64 / one per item
        # 26.2, tile 32 / one per item 21.5 (vLLM 17.9); 1 x 128 keys: 6.78 us as it was, 7.00
        # with tile 64 / one per item (vLLM 6.95); 8 x 256: 9.85, 10.23 (vLLM 13.07). Then
        # (H100 lab, 2026-11-23, graph replay, 7 shuffled rounds, vLLM beside), tile 32 / 4
        # warps / one per item -> tile 16 / 2 warps / 4 per SM: 128 x 64 keys 21.40 -> 16.17
        # us (vLLM 17.72; 2 warps alone 18.13), 32 x 64 7.38 -> 7.35 (vLLM 7.76), 8 x 32 5.14
        # -> 5.14 (vLLM 7.87).
        # Launch-bound short decodes (`short_split`): a tile of about half a segment.
        # Many items of short sequences (>= MANY_ITEMS_PER_SM x SMs work items, 65-2048
        # visible keys): tile 64, 2 warps, 4 programs per SM. H100 lab, 2026-11-23, graph
        # replay, 5 shuffled rounds, llama3-8b, tile 128 / 4 warps / 2 per SM -> that (vLLM
        # 0.19.1's Triton kernel): 64x128 18.25 -> 13.73 us (14.76), 64x256 35.61 -> 31.89
        # (31.31), 64x512 58.51 -> 55.31 (55.26), 64x1k 103.08 -> 100.25 (101.41), 64x2k 200.9
        # -> 197.0 (191.74), 128x128 40.28 -> 34.67 (33.45), 128x256 61.14 -> 56.91 (57.49),
        # 128x512 107.78 -> 101.72 (105.29), 128x1k 194.87 -> 191.11 (196.46); 4 per SM or
        # one per item alone, or tile 64 alone, within 2 %; 32x256 (256 items) 14.31 -> 14.50,
        # so not there. One query head per KV head, same lab: llama2-7b 16x1k (512 items)
        # 102.42 -> 100.90, phi-2 16x1k 79.75 -> 75.39; llama2-7b 64 up to 4k lost (857 ->
        # 883 us), outside the range. Longer sequences and fp8 are unmeasured.
        # Head 256 (gemma2-9b: 16 query, 8 KV heads) takes `short_split` too. H100 lab,
        # 2026-11-23, graph replay, 5 shuffled rounds, tile 64 with the SM-filling segments ->
        # the split (vLLM 0.19.1's Triton kernel): 1x256 12.78 -> 7.90 us (7.62), 1x512 10.63
        # -> 8.70 (9.04), 1x1k 11.33 -> 10.39 (11.23), 2x512 11.24 -> 10.15 (10.47); 4x1k
        # splits as before (17.08; 24.47). The split was the best of the five configurations
        # measured (tile 16/32/64 x 8/16 segments, 2 or 4 warps) in all five.
        narrow = 0 < f.window and f.visible_kv_len <= NARROW_WINDOW
        short = f.visible_kv_len <= SHORT_CONTEXT
        split = None if narrow or short else short_split(f)
        crowded = f.kv_items >= MANY_ITEMS_PER_SM * f.num_sms
        many = crowded and not (narrow or short or wide) and f.visible_kv_len <= MANY_ITEMS_MAX_KEYS
        # A narrow window over many items takes tile 32 (H100 lab, 2026-11-23, graph replay, 5
        # shuffled rounds, tile 64 -> 32, one program per item, vLLM 0.19.1 beside): llama3-8b
        # 64x4k, window 256 40.13 -> 33.41 us (vLLM 32.96), gpt-oss-20b 64x4k, window 128,
        # sinks 10.68 -> 10.20 (12.50); fewer items lost with it (gpt-oss 16x8k 7.42 -> 7.68, its
        # fp8 16x4k 6.94 -> 7.40, llama3-8b 8x4k, window 256, 12.20 -> 12.98).
        tile = (16 if short else split[0] if split else 32 if narrow and crowded and not wide
                else 64 if wide or narrow or many else 128)
        # Many items take one segment each: at >= 3 items per SM the split's reduction costs
        # more than the occupancy it adds. H100 lab, 2026-11-24, graph replay, 2 processes x 7
        # shuffled rounds (medians of the first; the second within 0.3 %), 2 segments (what
        # tile 128's rule gave for 1921-2048 keys under 4 items per SM) -> one (vLLM 0.19.1's
        # Triton kernel): llama2-7b 16x2k 192.33 -> 189.49 us (189.69), llama3-8b 64x2k 196.55
        # -> 188.63 (192.20), its 64 up to 2k 119.57 -> 115.81 (139.11), llama2-7b 16 up to 2k
        # 135.30 -> 132.43 (154.22), phi-2 16x2k 144.47 -> 139.83 (153.61); 4 segments lost in
        # all five.
        segments = split[1] if split else 1 if many else None
        # Cache offsets in int32 (`offsets_32`, where the caches allow it). H100 lab, 2026-11-24,
        # graph replay, 3 processes x 7 shuffled rounds, ratio paired per round, default -> int32
        # (us): qwen2.5-7b 64 up to 512 19.70 -> 0.912x, llama3-8b 8x1k 17.82 -> 0.943x, 8x8k
        # 0.980x, 1x32k 0.991x, 32x8k 0.994x, 128x1k 0.997x, llama2-7b 1x512 0.978x, 16x1k
        # 0.992x, gemma2-9b 1x512 0.987x, falcon-7b 16x1k 0.987x, phi-2 16x1k 0.995x; even for
        # llama3-8b 1x512 and 1x1k, qwen2.5-14b 1x512. Not for short contexts (llama3-8b 128 x
        # 64 keys 16.32 us -> 1.022x); sliding windows and fp8 unmeasured; not for a head padded
        # to a power of two (phi-2's 80: 0.995x on the H100, but ptxas spilled 4 bytes for it on
        # sm_100 in the static gate, triton 3.6.0). Block ids per cache block with it (the
        # prefills' pair) lost in 5 of the 15 (up to 1.115x).
        int32 = not (short or f.window or f.fp8_kv or f.head_size != next_pow2(f.head_size))
        # Where a batch's items stay Q-blocks (one query head per KV head), they guess the
        # decode layout before any binary search and skip the bound's trailing gaps
        # (`decode_layout`). H100 lab, 2026-11-24, graph replay, 3 processes x 7 shuffled
        # rounds each, off -> on (vLLM 0.19.1's Triton kernel in the same processes, ratio):
        # llama2-7b 16x1k 100.30 -> 99.67 us (1.006 -> 1.000), 16 up to 1k 65.86 -> 65.31,
        # 24x1k 148.98 -> 147.93, 64 up to 512 118.37 -> 116.86; phi-2 16x1k 75.48 -> 75.38.
        # Not for one sequence (a search of one step; same-process lab, 2 x 9 rounds, off ->
        # on: llama2-7b 1 up to 512 9.78 -> 9.96 us, phi-2 9.62 -> 9.79, qwen2.5-7b 7.86 ->
        # 7.90, gemma2-9b 8.88 -> 8.93, llama3-8b 8.08 -> 8.09; only falcon-7b gained, 7.84 ->
        # 7.62).
        seq_items = f.num_seqs > 1 and f.queries_per_kv > 1
        decode_layout = f.num_seqs > 1 and not seq_items
        return _fit(f, decode_block_m(f.queries_per_kv), tile, fill_sms=True, segments=segments,
                    num_warps=2 if short or many else 4, num_stages=2,
                    programs_per_sm=4 if short or many else 0 if narrow else 2,
                    seq_items=seq_items, decode_layout=decode_layout,
                    offsets_32=int32,
                    source="nvidia/decode: sweep H200 2026-11-21, 1.07-1.88x over tile 64"
                    + (" (head 256: unmeasured tile 64)" if wide and tile == 64 else "")
                    + (f"; narrow window, tile {tile}, a program per item: H100 2026-11-23, "
                       + ("1.05-1.2x over tile 64" if tile == 32 else "1.4x")
                       if narrow and not wide and not short else "")
                    + ("; short context, tile 16, 2 warps: H100 2026-11-23, 2.1x"
                       if short else "")
                    + ("; launch-bound short decode, split: H100 2026-11-23, 1.04-1.62x"
                       if split else "")
                    + ("; many short items, tile 64, 2 warps: H100 2026-11-23, 1.02-1.33x"
                       if many else "")
                    + ("; int32 offsets: H100 2026-11-24, 1.00-1.10x"
                       if int32 else "")
                    + ("; decode layout: H100 2026-11-24, 1.00-1.01x" if decode_layout else ""))
    if f.max_query_len <= 64:
        # Short chunks next to decodes (chunked prefill): a middle-sized Q-block so short
        # sequences waste fewer rows. Unmeasured: no sweep scenario has this shape.
        # Tiles no longer than the visible keys: H100 lab, 2026-11-23, graph replay, tile 128
        # -> the keys' power of two: llama3-8b prefill 8 x 16 10.44 -> 5.25 us (tile 32: 6.12;
        # vLLM 0.19.1's Triton kernel 5.91), 16 x 32 22.37 -> 10.92 (vLLM 11.36).
        return _fit(f, 64, min(64 if wide else 128, max(MIN_TILE, next_pow2(f.visible_kv_len))),
                    num_warps=4, num_stages=2, programs_per_sm=2,
                    source="nvidia/short-prefill: Q-block 64 unmeasured; tile = visible keys: "
                    "H100 2026-11-23, 2x")
    # Compute bound: 128-row Q-blocks (32 tokens x 4 heads for Llama-3-8B), 128-position tiles,
    # 8 warps, 2 stages. Sweep: prefill 1x8k 2.080 -> 1.663 ms, 4x2k 0.663 -> 0.587 ms
    # (BLOCK_M 64 was 1.6-2.4x slower; 4 warps 1.4-1.7x slower; 3 stages +4-8 %).
    # Every prefill branch below: one block id per cache block of a tile and int32 offsets
    # (`Config.block_vector`, `Config.offsets_32`; "fast addressing"), and a third stage
    # beyond LONG_PREFILL_KEYS keys per Q-block. Same-process H100 labs, 2026-11-24, graph
    # replay, 5 shuffled rounds, bf16, block 16, each branch's previous choice -> this
    # (docs/kernels.md, "Block ids per cache block"); not for fp8 caches (below).
    fast = not f.fp8_kv

    def long(block_m: int) -> bool:  # the third stage: only for many tiles per Q-block
        return fast and prefill_q_block_keys(f, block_m) > LONG_PREFILL_KEYS
    # Head 256 (gemma2-9b, 8 query heads per KV head): 4x2k 943.5 -> 697.7 us with one program
    # per item (752.0 with 3 stages), 1x8k 2.950 -> 2.362 ms with 3 stages (2.437 with one
    # program per item, 2 stages), 1x2k 264.0 -> 184.5 us, mixed 16 x 2k 1.918 -> 1.437 ms,
    # with softcap 50 2.650 -> 2.077 (8 bytes of new spills, sm_90); the previous 64 rows,
    # tile 64, 8 warps were never swept. Under a window, unmeasured.
    if wide:
        deep = long(64)
        return _fit(f, 64, 64, num_warps=8, num_stages=3 if deep else 2,
                    programs_per_sm=0 if fast and not deep else 1, block_vector=fast, offsets_32=fast,
                    source="nvidia/prefill: head 256, unmeasured rows and tile"
                    + ("; fast addressing" + (", 3 stages" if deep else ", a program per item")
                       + ": H100 2026-11-24, 1.25-1.43x" if fast else ""))
    # Before the fast addressing: 2 stages, however long the KV loop. Sweep on an NVIDIA H100 (graph
    # replay), 2026-11-23, with the block table read one tile ahead (common.tile_blocks), 2 -> 3
    # stages: 1x8k 1.308 -> 1.428 ms, 1x16k 5.07 -> 5.33, 4 chunks of 2048 after 6144 keys 2.38 ->
    # 2.46, 4x2k 0.474 -> 0.537, 8x1k 0.295 -> 0.344, 16 mixed up to 4096 keys 1.450 -> 1.646; tile
    # 64 with 4 stages (1x8k 1.420 ms) and BLOCK_M 256 with tile 64 (1.780 ms) lost too. (The
    # 3-stage branch for >= 8192 keys of 2026-11-22 measured the loop before that read ahead, whose
    # copies were waited for at every iteration.) The read-ahead itself, same H100, graph replay,
    # llama3-8b bf16, block 16, off -> on: 1x8k 1.700 -> 1.308 ms, 4x2k 0.600 -> 0.474, 8x1k 0.337
    # -> 0.295, 16 mixed up to 4096 keys 1.825 -> 1.450. Here only: decodes gained nothing (1x1k 9.9
    # -> 10.4 us, 8x1k 21.6 -> 22.3 us, longer ones within 2 %) and the static gate (triton 3.6.0)
    # found new ptxas spills with it in decode configurations (sm_90 phi-2 decode 0 -> 56 bytes) and
    # new SGPR spills on gfx942; other head groups keep more registers busy with it (sm_90
    # qwen2.5-14b mixed: spills 16 -> 188 bytes, speed unmeasured: `python -m perf tune` sweeps it).
    # The loop took 255 registers (sm_90) and what added any lost in the H100 lab of 2026-11-23
    # (docs/kernels.md): the FMA-folded score scale +5-12 % (with ids per position), tile 64 with 2
    # stages up to +26 % (with maxnreg 128 for two programs per SM +16-33 %), BLOCK_M 64 1.7-2.2x.
    # A head group that fills few of 128 rows (`prefill_row_use`): 256 rows, tile 64. H100
    # lab, 2026-11-23, graph replay, 5 shuffled rounds, falcon-7b (71 query heads, 1 KV head,
    # head 64), 128 rows / tile 128 -> 256 rows / tile 64 (vLLM 0.19.1's Triton kernel):
    # prefill 16 up to 4k 6.00 -> 3.35 ms (9.20), 1x8k 3.86 -> 2.23 (6.76), 64 up to 512
    # 1.067 -> 0.503 (0.897); mixed 64 up to 4k 11.44 -> 6.28 (17.46), 16 up to 512 0.161 ->
    # 0.088 (0.154). Tile 128 with 256 rows 1-24 % slower than tile 64, tile 32 7-27 %, 3
    # stages -4 to +5 %, 512 rows / tile 32 / 16 warps 0-18 %; no spills (sm_90, 253
    # registers; sm_100, unmeasured, spills 8 bytes where 128 rows spilled none). Head 64
    # only: larger heads with 256 rows are unmeasured. Fast addressing (2026-11-24): 1x8k
    # 2.248 -> 1.986 ms with 3 stages (2.197 with 2), 16 up to 4k 3.885 -> 3.547 (3.795); one
    # program per item gained nothing (2.201, 3.932 with 2 stages).
    # The causal edge in tiles of 32 or 16 keys (`causal_edge_tile`), same lab as the 128-row
    # branch's below: falcon-7b prefill 64 up to 512 485.7 -> 471.7 us (16: 497.7), 16 up to 4k
    # 3051.5 -> 2920.2 (32: 2969.9), 1 x 8k 1963.7 -> 1922.1 (1957.6), mixed 64 up to 4k 5673
    # -> 5471 (5588); the one spill of 4 bytes of the 2-stage loop went (sm_90).
    if f.head_size <= 64 and prefill_row_use(f.queries_per_kv, 128) < MIN_PREFILL_ROW_USE:
        deep = long(256)
        edge = causal_edge_tile(f, 256, 64)
        return _fit(f, 256, 64, num_warps=8, num_stages=3 if deep else 2, programs_per_sm=2,
                    read_ahead=True, block_vector=fast, offsets_32=fast, edge_tile=edge,
                    source="nvidia/prefill: few rows of 128 used, 256 rows, tile 64: "
                    "H100 2026-11-23, 1.7-2.1x"
                    + ("; fast addressing" + (", 3 stages" if deep else "")
                       + ": H100 2026-11-24, 1.02-1.13x" if fast else "")
                    + (f"; causal edge in tiles of {edge}: H100 2026-11-24, 1.02-1.04x" if edge else ""))
    # The 128-row branch, ids per position in int64, 2 programs per SM, 2 stages -> fast
    # addressing, one program per item (llama3-8b): 1x8k 1.336 -> 1.238 ms, 1x16k 5.14 ->
    # 4.79, 4x2k 478 -> 418 us, 8x1k 297.5 -> 274, 1x2k 115.2 -> 113.5, 1x512 19.2 -> 18.2,
    # 16 mixed up to 4k 1.455 -> 1.357, 4 chunks of 2k after 6k 2.363 -> 2.161. Each alone,
    # at 1x8k with 2 stages: block ids 1.367, int32 offsets spill (sm_90, 24 bytes), both
    # 1.343; the third stage needs both (the previous loop lost with it: 1.432). One program
    # per item: 4x2k 470 -> 418 us, within noise elsewhere. A second run (FlashInfer and vLLM
    # beside) agreed and added qwen2.5-14b mixed 16 x 1k 434 -> 419 us, blocks of 64 (mixed
    # 32 x 1k) 676 -> 583, 4 chunks of 512 after 3.5k 350 -> 311 (3 stages with 72 bytes of
    # ptxas spills, sm_90). Not for fp8 caches: the llama3-8b fp8 prefill 8 x 1k ran even
    # (320.7 -> 321.6 us) and spilled 20 bytes (sm_90). Held-out shapes, same day (previous
    # -> this): block 544 mixed 32 x 8k 25.9 -> 22.8 ms, block 32 23.9 -> 21.0, phi-2 (head
    # 80) prefill 16 up to 4k 3.33 -> 2.69, phi-3-mini (head 96) 2.81 -> 2.20, llama2-7b (one
    # query head per KV head) 2.94 -> 2.45, softcap / sinks mixed 1.10x / 1.16x, fp16 chunks
    # 1.11x. Under a sliding window a Q-block sees few tiles (`prefill_q_block_keys`): 2
    # stages and the persistent grid's 2 programs per SM; fast addressing, 3 stages and one
    # program per item -> this: gpt-oss-20b (window 128, sinks) mixed 64 up to 4k 2.894 ->
    # 2.549 ms (previous choice 2.775), prefill 16 up to 4k 1.511 -> 1.349 (1.466), llama3-8b
    # window 1024 mixed 16 up to 4k 1.162 -> 1.055 (1.291), prefill 4 x 8k 2.015 -> 1.842
    # (2.189); 2 stages with one program per item in between (2.691, 1.411, 1.085, 1.883).
    # The causal edge in tiles of 64 or 32 keys (`causal_edge_tile`), cut after the Q-block's
    # last visible key, where the whole tile read up to 127 keys past the diagonal. The lab
    # there (same day, edge 128 -> 32) also ran 16 mixed up to 4k 1325.5 -> 1212.2 us, 4
    # chunks of 2k after 6k 2061.9 -> 2008.5, 4 chunks of 512 after 3.5k 300.0 -> 282.0, 1 x
    # 16k 4.63 -> 4.46 ms, qwen2.5-14b mixed 16 x 1k 395.7 -> 377.4 us, softcap / sinks mixed
    # 1.05x / 1.06x, block 544 mixed 32 x 8k 22.5 -> 21.2 ms, phi-3-mini and llama2-7b prefill
    # 16 up to 4k 1.05x, and the 76 bytes of ptxas spills of the 3-stage loop went (sm_90).
    # Head 256 keeps whole tiles: gemma2-9b 4 x 2k 690.8 -> 689.3 us with 32, 715.8 with 16.
    deep = long(128)
    edge = causal_edge_tile(f, 128, 128)
    return _fit(f, 128, 128, num_warps=8, num_stages=3 if deep else 2,
                programs_per_sm=0 if fast and not f.window else 2,
                read_ahead=True, block_vector=fast, offsets_32=fast, edge_tile=edge,
                source="nvidia/prefill: sweep H200 2026-11-21, 1.13-1.25x over tile 64; "
                "read-ahead: H100 2026-11-23, 1.2-1.3x"
                + ("; fast addressing" + ("" if f.window else ", a program per item")
                   + (", 3 stages" if deep else "") + ": H100 2026-11-24, 1.02-1.28x" if fast else "")
                + (f"; causal edge in tiles of {edge}: H100 2026-11-24, 1.02-1.09x" if edge else ""))


def _amd(f: Features) -> Config:
    # UNMEASURED on MI300: documented defaults, checked only statically (spill-free when
    # cross-compiled for gfx942 with triton 3.6.0, 2026-11-21, except SGPR spills (which land in
    # VGPR lanes) in several pr-suite configs: `nox -s compile` lists them). AMD's Triton guidance (ROCm
    # docs, "Optimizing Triton kernels"; the fused-attention tutorial) uses num_stages=2 with
    # the stream pipeliner and matrix_instr_nonkdim=16 for attention; CDNA3
    # has 64 KB of LDS per CU, so tiles stay at 32-64 positions (tile 128 spilled in decode).
    # CDNA4 (gfx950) has 160 KiB of LDS per CU and takes the same tiles: unmeasured default,
    # spill-checked only statically (`nox -s compile` compiles it beside gfx942).
    # waves_per_eu is left to the compiler: waves_per_eu=2 capped the decode kernel at 256
    # VGPRs and spilled 23-35 of them.
    if is_decode_batch(f):
        return _fit(f, decode_block_m(f.queries_per_kv), 64, num_warps=4, num_stages=2,
                    programs_per_sm=2, matrix_instr_nonkdim=16,
                    source="amd/decode: unmeasured default")
    if f.head_size > 128:  # BLOCK_M 128 spilled 70-163 VGPRs at head 256 on gfx942
        return _fit(f, 64, 32, num_warps=4, num_stages=2, programs_per_sm=1,
                    matrix_instr_nonkdim=16, source="amd/prefill: head 256, unmeasured default")
    if f.fp8_kv:
        # Static gate on gfx942 (triton 3.6.0, 2026-11-21, llama3-8b fp8 prefill): BLOCK_M 128 /
        # tile 32 / 8 warps spilled 63-66 VGPRs and >100 SGPRs; 64/32/4 warps spilled 157 VGPRs
        # in static_grid; 64/32/8 warps: no spills in static_grid or flex_tile, 2 waves/SIMD.
        # Those caches were OCP (converted in software there). Rechecked 2026-11-22 with FNUZ,
        # gfx942's native format and what the batch builder now gives it: 128/32/8 still
        # spills 4 VGPRs in static_grid; 64/32/8: none (136 VGPRs flex_tile, 224 static_grid).
        return _fit(f, 64, 32, num_warps=8, num_stages=2, programs_per_sm=1,
                    matrix_instr_nonkdim=16,
                    source="amd/prefill fp8: no spills (static gate), speed unmeasured")
    return _fit(f, 128, 32, num_warps=8, num_stages=2, programs_per_sm=1,
                matrix_instr_nonkdim=16, source="amd/prefill: unmeasured default")
