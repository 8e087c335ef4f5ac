"""Launch configurations per vendor: readable decision trees over a batch's features.

`choose(vendor, features) -> Config` is a pure function: tests and the static gate call it
for any vendor from a CPU. `features_from_call` computes the features of a call from
shapes and the host-side hints a serving engine already has (`max_seqlen_q`,
`max_seqlen_k`, as vLLM passes them); it never reads device memory, so planning stays
free of host syncs and works inside CUDA/HIP-graph capture. Without hints the features are
bounds derived from shapes (documented on each field).

Every rule says where it came from in one line: NVIDIA rules name their lab (`[id]`, whose
numbers are in docs/lab/, one page per date, each linked from docs/kernels.md, "Lab notes of
the NVIDIA tree"), GPU, date, gain and the
`python -m perf tune` run that re-measures it; AMD branches are documented defaults,
unmeasured until an MI300 sweep replaces them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace

import torch

from kernels.inputs import ArgumentTypeError, is_fp8
from kernels.paged_attention.common import decode_block_m, next_pow2

MIN_TILE = 16  # tl.dot needs K >= 16 (Triton's minimum on every backend)
# tl.dot on 8-bit operands needs K >= 32 on NVIDIA (triton 3.6.0 nvidia/compiler.py min_dot_size;
# AMD takes any K, and its fp8 MFMA is 16x16x32): `Config.fp8_products` tiles, P V's K
MIN_FP8_TILE = 32
# Thresholds of the NVIDIA tree; each says its lab ([id]: docs/kernels.md, "Lab notes of the NVIDIA
# tree") and where between measured points the boundary is unmeasured.
NARROW_WINDOW = 256  # [narrow-window] H100 2026-11-23: window 128 1.4x, 1024 even; between, unmeasured
SHORT_CONTEXT = 64  # [short-context] H100 2026-11-23: 64 keys 2.1x, 128 and 256 lost 3-4 %; 65-127 unmeasured
MIN_PREFILL_ROW_USE = 0.75  # [few-rows] H100 2026-11-23: rows used 0.55 -> 0.83, 1.7-2.1x; between unmeasured
LONG_PREFILL_KEYS = 2048  # [third-stage] H100 2026-11-24: 1.03-1.11x from 4k keys, even at 2k, lost at 1k
EDGE_HALF_MAX_KEYS = 1024  # [causal-edge] H100 2026-11-24: half won to 1k keys, a quarter from 2k
# [short-prefill-rows] H200 2026-11-28: Q-blocks of 64 rows, 4 warps, tile 64, 3 stages won to 2k keys per
# Q-block (1.05-1.20x, mixed chunks 1.20x) and lost at 8k and 16k (1.08-1.09x slower); 2k-8k unmeasured
SHORT_PREFILL_KEYS = 2048
# [short-prompt-tile] H200 2026-12-04, three processes: those Q-blocks in tiles of 32 where they see <= 256
# keys (bf16, heads of 128, not the Gluon kernel's): 0.958-0.990x on 1 x 256, 8 x 256, 32 / 64 / 128 x 128;
# 512 keys lost 1.01-1.03x, heads of 64 1.01-1.02x; 129-255 keys at 1-16 sequences, fp16, fp8 unmeasured
SHORT_PROMPT_TILE_KEYS = 256
# [fp8-short-prefill] H200 2026-11-29: fp8 prefills (Q K^T on e4m3) of up to this many keys per Q-block take
# the short-prefill shape: 32 x 256 1.18x over 128 rows; 8 x 1k 0.99x, 4 x 2k 0.90x; 257-1023 unmeasured
FP8_SHORT_PREFILL_KEYS = 256
# [warp-specialized] H200 2026-11-30, the kernel's first loop: it won on every 16-bit prefill of >= 4k visible
# keys (prompts, chunks, mixed batches with decodes: 0.89-0.98x) and on prompts of >= 1k queries (1-8 x 1k-2k:
# 0.92-0.97x); batches of shorter prompts lost (16 x 512 1.07x, 64 x 128 1.44x) and so did mixed ones of
# 1k-2k keys (1.11-1.27x); 1 x 512 even (0.98x); between the measured points, and the losing rows with the
# kept loop (0.85-0.95x of the first's time where both ran), unmeasured
WARP_SPECIALIZED_KEYS = 4096
WARP_SPECIALIZED_PROMPT = 1024
# [ws-short-prompts] H200 2026-12-04, three processes: batches of alike whole prompts, heads of 128, 16-bit
# caches, take the Gluon kernel from (queries a prompt, sequences) on: 512 x 4-32 0.85-0.94x, 256 x 16-64
# 0.91-0.95x; lost at 256 x 8 (1.03x), 128 x 32 (1.02x), heads of 64 (1.21x); 1 x 512 even, 128 x 64-128
# 0.98-0.99x; bf16 measured, fp16 (the same bytes), 257-511 queries unmeasured; its second bound, 256 x 16,
# is [ws-large-batches]' since (4096 tokens, a mean of 256), so this one keeps (queries a prompt, sequences)
WS_SHORT_PROMPTS = (512, 4)
# [ws-large-batches] H200 2026-12-04, three processes and the pr / nightly gates: prefill batches, heads of
# 128, of >= 4096 tokens and >= 256 queries a sequence on average take the Gluon kernel: decodes beside
# prompts 0.76-0.99x, chunks of 256-512 after 1k-2k keys 0.74-0.84x, unlike lengths 0.83-0.98x (one 1.013x:
# 64 prompts of up to 512), GQA 1, 5 and 7 0.76-0.98x, e4m3 under bf16 queries 0.73-0.88x, under fp16 (q
# rounded) 0.43-0.70x; means of 79-165 queries beside decodes lost 1.01-1.41x (llama2-7b's GQA 1 won 0.91x),
# 8 x 256 1.026x: below the bounds
WS_BATCH_TOKENS = 4096
WS_BATCH_MEAN_QUERIES = 256
# SMs / CUs of the products the trees are written for (H100 SXM: 132 SMs, MI300X: 304 CUs,
# vendor specifications), used when neither a `num_sms` hint nor a device says otherwise.
# The trees branch on the vendor, never on the architecture: a B200 (sm_100, 148 SMs) takes
# the NVIDIA tree swept on an H200 and an MI355X (gfx950, 256 CUs) the AMD tree written for
# MI300, each sized by its own SM/CU count (the device's, or the static gate's `num_sms`
# hint). Unmeasured defaults there: nobody has swept a B200 or an MI350 yet. One per vendor of
# kernels.inputs.VENDORS; perf/vendor.py's records name the product (Vendor.default_target).
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


# Bounds of `Config`'s integers, (field, lowest, highest, power of two), and where each comes from.
# BLOCK_M and TILE_SIZE are tl.arange extents (powers of two) and tl.dot operands (>= MIN_TILE), at
# most MAX_TILE: a [1024, 1024] tile is Triton's largest tensor (triton.language's
# TRITON_MAX_TENSOR_NUMEL, 2**20 elements, triton 3.6.0).
MAX_TILE = 1024
# The reduction holds [SEGMENTS_PADDED, padded head] float32 partials per program, and the
# partials buffer grows with it: 256 is the most the trees choose (`multi_token_segments`: 2
# programs per SM on 132 SMs for one (sequence, KV head) item; every other rule <= 64), and
# `perf tune` sweeps <= 128; a user's probe of Config(num_segments=4096) never finished.
MAX_SEGMENTS = 256
MAX_WARPS = 32  # 1024 threads per block: CUDA's limit (sm_90) and 16 wavefronts of 64 on AMD
MAX_STAGES = 8  # unmeasured bound against typos: the trees use 2-3, `perf tune` sweeps 1-4
# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (9.0): 32 resident
# blocks per SM; a grid's x dimension up to 2**31 - 1
MAX_PROGRAMS_PER_SM = 32
MAX_PROGRAMS = 2**31 - 1
MAX_WAVES_PER_EU = 8  # the wavefronts one SIMD of CDNA3 (gfx942) holds: AMD's CDNA3 ISA guide
CONFIG_INTS = (
    ("block_m", MIN_TILE, MAX_TILE, True), ("tile_size", MIN_TILE, MAX_TILE, True),
    ("num_segments", 1, MAX_SEGMENTS, False), ("num_warps", 1, MAX_WARPS, True),
    ("num_stages", 1, MAX_STAGES, False), ("programs_per_sm", 0, MAX_PROGRAMS_PER_SM, False),
    ("max_programs", 0, MAX_PROGRAMS, False), ("edge_tile", 0, MAX_TILE, False),
    ("waves_per_eu", 0, MAX_WAVES_PER_EU, False), ("matrix_instr_nonkdim", 0, 32, False),
    ("reduce_warps", 1, MAX_WARPS, True),
)
# AMD's MFMA instruction sizes Triton can be asked for (0: its own choice); triton 3.6.0's AMD
# accelerate-matmul pass takes 4, 16 or 32 ("enforcedNonKDim")
MATRIX_INSTR_NONKDIMS = (0, 4, 16, 32)
CONFIG_FLAGS = ("read_ahead", "block_vector", "offsets_32", "seq_items", "decode_layout", "fused_reduce",
                "reduce_by_query", "pv_fp16", "qk_fp16", "fp8_products", "qk_e4m3", "pdl_reduce",
                "v_pairs", "k_pairs", "warp_specialized", "ws_q_rounded", "ws_token_items",
                "ws_pack_gqa")


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
    # (llama3-8b 1x1k 10.0 -> 13.6 us graph; docs/lab/2026-11-23.md); `perf tune` sweeps it
    fused_reduce: bool = False
    # the reduction takes an item per query of a split sequence (its Q-block's BLOCK_Q of them; an
    # item past the sequence's last query returns at once), not one per (sequence, query head) that
    # merges the queries one after another (BY_QUERY, common.reduce_segments_kernel); [reduce-by-query]
    reduce_by_query: bool = False
    # bf16 queries over an OCP e4m3 cache: the P V product in fp16 (PV_FP16, common.attend_tiles;
    # the planner ignores it elsewhere). No branch sets it: sm_90 compile, triton 3.6.0,
    # 2026-11-27, the fp8 prefill's loop 132 -> 0 B of ptxas spills; speed unmeasured; `perf tune` sweeps it
    pv_fp16: bool = False
    # the same caches: Q K^T in fp16 as well (QK_FP16, common.to_fp16_range: q divided by a power
    # of two into fp16's range, folded back into the score scale), so every e4m3 pair of K and V
    # takes one conversion (cvt.rn.f16x2.e4m3x2) and none to bf16; implies P V in fp16
    qk_fp16: bool = False
    # fp8 caches in a format the target's Triton converts: both products on e4m3 tensor cores
    # (FP8_PRODUCTS, common.attend_rows: q quantized per work item by a power of two, P in
    # [0, 2^top], as FlashAttention-3's fp8 forward; docs/lab/2026-11-28-fp8-products.md); the
    # planner ignores it elsewhere (`planning.fp8_products_applies`). No branch sets it: H200
    # 2026-11-29, the fp8 prefills 1.22-1.29x slower than both products in fp16 (docs/lab/2026-11-29.md)
    fp8_products: bool = False
    # the same caches: Q K^T alone on e4m3 operands (q quantized per work item as above, K from
    # shared memory as loaded: no conversion, no transpose, an e4m3 wgmma's operands are both
    # K-major there) and P V in fp16 (V converted, as `pv_fp16`): FP8_PRODUCTS with PV_FP16
    # (`planning.kernel_constexprs`). Against `fp8_products` it leaves out the e4m3 P V, whose V
    # is MN-major in the cache. The NVIDIA fp8 prefill branch sets it ([fp8-qk-e4m3]: H200 2026-11-29,
    # 1.16-1.43x). The Gluon kernel over e4m3 rounds q to one e4m3 part where it (or `ws_q_rounded`) is
    # set, else to two (`warp_specialized.launch_constants`, Q_PARTS; [ws-e4m3-fp16])
    qk_e4m3: bool = False
    # a split launch's reduction as a programmatic dependent of the attention kernel (NVIDIA's
    # programmatic dependent launch, sm_90 and later: `launch_pdl`): each attention program lets it
    # launch once its items are done, the reduction waits on the device for the whole grid and its
    # writes (`common.q_block_kernel` LAUNCH_DEPENDENTS, `reduce_segments_kernel` WAIT_PRIMARY), so
    # its launch overlaps the attention's last programs instead of following them. The planner
    # ignores it elsewhere (`planning.pdl_applies`); the NVIDIA tree sets it ([pdl-reduce])
    pdl_reduce: bool = False
    # an OCP e4m3 cache's V read as 16-bit pairs of dims and split, one conversion a pair, into the
    # even and the odd dims' fp16 tiles (V_PAIRS, common.split_e4m3_pairs): P V as two products of half
    # the head, whose V comes from shared memory by ldmatrix, where an 8-bit V took one load per
    # byte. `k_pairs`: K the same, Q K^T as q's even dims times K's even plus the odd times the odd.
    # Tiles of keys looked up one by one, Q-blocks of <= 32 rows only; the planner ignores them elsewhere
    # (`planning.pairs_apply`). The NVIDIA tree sets `v_pairs` ([e4m3-pairs]); `k_pairs` gained nothing
    # beside it (H200 2026-11-30, 0.997-1.032x; docs/lab/2026-11-30.md)
    v_pairs: bool = False
    k_pairs: bool = False
    # the prefill on NVIDIA sm_90 through the warp-specialized Gluon kernel
    # (`warp_specialized.ws_prefill_kernel`: a TMA loader warp, two consumer warpgroups of 64 rows,
    # Q-blocks of 128 queries of one query head, tiles of 128 keys) in place of the Q-block kernel; the
    # block_m, tile and pipeline fields above are then that kernel's own. The planner ignores it
    # where that kernel does not apply (`planning.warp_specialized_applies`)
    warp_specialized: bool = False
    # that kernel over e4m3 rounds q to one e4m3 part, as under `qk_e4m3`, which the Q-block kernel would
    # also take (under fp16 queries it spilled there: static gate, sm_90); the Q-block kernel ignores this
    # one. The NVIDIA tree sets it under fp16 queries ([ws-fp16-q-rounded])
    ws_q_rounded: bool = False
    # with `warp_specialized`, a decode over an OCP e4m3 cache: that kernel's work item is one token's query
    # heads of one KV head (a row each, one consumer warpgroup; `warp_specialized._token_item`), not a
    # Q-block of one query head. The planner ignores it where it does not apply (`planning.token_items_apply`)
    ws_token_items: bool = False
    # with `warp_specialized` over a 16-bit cache, FlashAttention-3's PackGQA for a sequence whose queries'
    # groups of heads fit 128 rows (a decode, a few queries): its work item is a KV head's, each query's group
    # its rows (`warp_specialized._item`), where a Q-block of one query head reads the keys once a query head.
    # The planner ignores it where it does not apply (`planning.pack_gqa_applies`); the NVIDIA tree sets it
    # with `warp_specialized` ([ws-pack-gqa])
    ws_pack_gqa: bool = False
    # warps of each program of a split launch's reduction (`common.reduce_segments_kernel`: one item's
    # segments, a few KB); 4 was Triton's default, the NVIDIA tree sets 1 where it won ([reduce-one-warp])
    reduce_warps: int = 4
    waves_per_eu: int = 0  # AMD only; 0 leaves the compiler's choice
    matrix_instr_nonkdim: int = 0  # AMD only; 0 leaves the compiler's choice
    source: str = ""

    def __post_init__(self):
        # What the kernels can be compiled with and run (CONFIG_INTS): every int an int (not a bool)
        # within its bounds, every flag a bool, `source` a str. Wrong types raise ArgumentTypeError
        # (a TypeError and a ValueError), wrong values ValueError, each message starting with the field.
        for name, low, high, pow2 in CONFIG_INTS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ArgumentTypeError(f"{name}: must be an int, got {type(value).__name__} {value!r}")
            if not low <= value <= high or (pow2 and value & (value - 1)):
                raise ValueError(f"{name}: must be {'a power of two' if pow2 else 'an int'} in "
                                 f"[{low}, {high}], got {value!r}")
        for name in CONFIG_FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ArgumentTypeError(f"{name}: must be a bool, got {type(getattr(self, name)).__name__} "
                                        f"{getattr(self, name)!r}")
        if self.matrix_instr_nonkdim not in MATRIX_INSTR_NONKDIMS:
            raise ValueError(f"matrix_instr_nonkdim: must be one of {MATRIX_INSTR_NONKDIMS}, got "
                             f"{self.matrix_instr_nonkdim}")
        if not isinstance(self.source, str):
            raise ArgumentTypeError(f"source: must be a str, got {type(self.source).__name__}")
        # The kernel maps edge tiles onto whole tiles (TILE_SIZE // EDGE_TILE of them each):
        # any other value would skip or repeat keys, so it is refused here.
        edge = self.edge_tile
        if edge and (edge < MIN_TILE or self.tile_size % edge or edge & (edge - 1)):
            raise ValueError(f"edge_tile: {edge} must be 0 or a power of two >= {MIN_TILE} dividing "
                             f"tile_size {self.tile_size}")
        if self.fp8_products and min(self.tile_size, edge or self.tile_size) < MIN_FP8_TILE:
            raise ValueError(f"fp8_products: needs tiles of >= {MIN_FP8_TILE} keys (an 8-bit tl.dot's K on "
                             f"NVIDIA), got tile_size {self.tile_size}, edge_tile {edge}")
        if self.fp8_products and self.qk_e4m3:  # one says P V on e4m3, the other in fp16
            raise ValueError("qk_e4m3: Q K^T alone on e4m3 contradicts fp8_products (both products); set one")

    @property
    def e4m3_operands(self) -> bool:
        """Whether a product rounds q (and with `fp8_products` P) to e4m3: where the planner applies it,
        its outputs are checked against the reference of q so rounded (`perf.measure.check.Reference`)."""
        return self.fp8_products or self.qk_e4m3

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
    this class get the same configuration (tests/kernels/test_heuristics.py walks every length up to
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


def is_decode_batch(f: Features, block_m: int = 0) -> bool:
    """Every sequence fits one decode-sized Q-block (decodes, short speculative steps); with
    `block_m`, one Q-block of that many rows (`multi_token_rows`)."""
    return f.max_query_len <= (block_m or decode_block_m(f.queries_per_kv)) // f.queries_per_kv


# [multi-token-split] Decodes of up to MULTI_TOKEN_MAX_QUERIES queries per sequence that overflow one
# decode Q-block (Llama-3-8B's 4 query heads per KV head: 5-8 queries; 7 or 8 per KV head: 3-8)
# take the decode rules with a Q-block holding a sequence's queries (at most
# MULTI_TOKEN_MAX_ROWS rows), split over KV segments as decodes are, where the short-prefill
# branch ran them unsplit (as vLLM 0.33 does, `max_seqlen_q > 1` taking its 2D kernel).
# H100 2026-11-26, 1.06-9.0x on 38 of 42 changed spec-decode cases (b1 x 32k q5: 0.111x), 2 even, 2
# slower (rows > 32 at 64 sequences: 1.10-1.15x, kept unsplit below): gate --suite spec-decode
# --variants static_grid --metrics graph (docs/lab/2026-11-26.md, "Multi-token decode: the split-KV switch")
MULTI_TOKEN_SPLIT = True
MULTI_TOKEN_MAX_QUERIES = 8  # speculative decoding's verify step (EAGLE, n-gram): drafts + 1, by reasoning
MULTI_TOKEN_MAX_ROWS = 64  # 8 queries x 8 query heads per KV head; unmeasured default (registers)
# [multi-token-segments] H200 2026-11-28: a multi-token decode splits into about two programs per SM
# (`multi_token_segments`), in tiles of 64 where its Q-block has more than 32 rows of heads of 128
# (`MULTI_TOKEN_TILE64_ROWS`): 1.1-1.5x over the decode rule's segments, 1.4-2.1x over the unsplit
# 64-row Q-blocks of more than 4 sequences (slower split at 64 x 8k on an H100, 2026-11-26, in
# tiles of 128 with the decode rule's segments); docs/data/candidates-h200-2026-11-28
MULTI_TOKEN_PROGRAMS_PER_SM = 2
MULTI_TOKEN_TILE64_ROWS = 32
# [multi-token-deep] H200 2026-11-29: Q-blocks of more than 32 rows under bf16 caches read one block id
# per cache block, the block table a tile ahead, in 3 stages (the three together; alone each was within
# -3..+2 %): 1.03-1.12x on 9 qwen2.5 rows in tiles of 64 (64 x 8k 0.287 -> 0.257 ms, 101 % of the copy
# limit), 1.05-1.11x on gpt-oss-20b's in tiles of 128; lost on 32 rows (1.06-1.30x, in tiles of 64);
# fp8 caches unmeasured (docs/data/candidates-h200-2026-11-29/spec-decode*.md); and their segments fill
# one program per SM, not two: 1.02-1.08x on 4-16 sequences (qwen2.5-7b 16 x 8k, 8 queries 0.924x),
# 0.98x on gpt-oss-20b 16 x 8k, 5 queries; a quarter of the segments lost 1.12-1.41x (round3.md). All of it
# against the tree before: 1.05-1.15x on the 15 spec-decode rows it changes (round4-others.md)
MULTI_TOKEN_DEEP_PROGRAMS_PER_SM = 1
# [long-segment-ahead] H200 2026-11-30: the multi-token decodes under 16-bit caches (bf16 measured), heads of
# <= 128, that [multi-token-deep] leaves (Q-blocks of <= 32 rows) read the block table a tile ahead in 3
# stages where their KV segments hold >= 16k keys: 1.01-1.04x on the four llama3-8b 16 x 32k rows (2
# segments), whose ratio to FlashInfer 0.7.4 went from 1.007-1.015 to 0.997-1.002 (2 and 4 queries; `perf
# run`, 2-3 processes), 1.017-1.039x on eight such shapes off the suites (1-4 segments of 16k-32k keys).
# With 8k keys a segment it won 0.2-1.1 % on seven 64 x 8k rows and lost 0.4-1.3 % on qwen2.5-7b's two; 4k:
# 0.999-1.028x (19 rows); fewer: 1.05-1.38x (31 rows) (one process, 5 rounds;
# docs/data/candidates-h200-2026-11-30/multi-token-read-ahead.md)
MULTI_TOKEN_LONG_SEGMENT_KEYS = 16384
# [filled-segment-ahead] H200 2026-11-30: the same from 8k keys a segment where items x segments reach
# MULTI_TOKEN_FILLED_ITEMS_PER_SM per SM: the seven 64 x 8k spec-decode rows of 8 KV heads (512 items),
# latency gate 0.991-0.997 (pass), the nightly's 64 x 8k of lengths drawn 0.977; qwen2.5-7b's (4 KV heads,
# 256 items) lost 0.4-1.3 % above and keep 2 stages (docs/lab/2026-11-30.md)
MULTI_TOKEN_FILLED_SEGMENT_KEYS = 8192
MULTI_TOKEN_FILLED_ITEMS_PER_SM = 3


def multi_token_rows(f: Features) -> int:
    """BLOCK_M of a multi-token decode under MULTI_TOKEN_SPLIT: a power of two holding every
    sequence's queries times the head group; 0 where the switch is off or the batch is an
    ordinary decode, has a longer query, or needs more rows."""
    if not MULTI_TOKEN_SPLIT or is_decode_batch(f) or f.max_query_len > MULTI_TOKEN_MAX_QUERIES:
        return 0
    rows = next_pow2(f.max_query_len * f.queries_per_kv)
    return rows if rows <= MULTI_TOKEN_MAX_ROWS else 0


def multi_token_segments(f: Features, tile_size: int,
                         programs_per_sm: int = MULTI_TOKEN_PROGRAMS_PER_SM) -> int:
    """KV segments of a multi-token decode ([multi-token-segments]): the largest power of two
    keeping work items x segments within `programs_per_sm` programs per SM, at most one segment
    per tile (16 x 4 KV heads on 132 SMs: 4 at 2 programs per SM; 64 x 4: 1)."""
    by_items = _pow2_floor(programs_per_sm * f.num_sms // f.kv_items)
    return max(1, min(by_items, _pow2_floor(visible_tiles(f, tile_size)), MAX_SEGMENTS))


def fp8_wide_segments(f: Features) -> int:
    """[fp8-wide-tiles]: the most segments (a power of two) whose programs all fit at once,
    FP8_WIDE_PROGRAMS_PER_SM per SM; 0 where the items alone do not."""
    fit = FP8_WIDE_PROGRAMS_PER_SM * f.num_sms // max(1, f.kv_items)
    return min(_pow2_floor(fit), MAX_SEGMENTS) if fit else 0


def num_segments(f: Features, tile_size: int, target_programs_per_sm: int = 4,
                 tiles_per_segment: int = 8, max_segments: int = 64, fill_sms: bool = False,
                 block_m: int = 0) -> int:
    """KV segments per decode sequence: enough programs for the GPU, segments of >= 8 tiles.

    Paper 4.5: decode batches of few sequences leave most SMs idle with one program per
    (sequence, KV head); splitting each sequence's tiles into segments restores parallelism at
    the cost of a reduction. The largest power of two keeping `tiles_per_segment` tiles per
    segment, no more than `target_programs_per_sm` programs per SM need, at most
    `max_segments` (bounds the reduction's work and buffers; unmeasured default).
    [segments] H200 2026-11-21: the best count in 3 of 5 sweep scenarios, within 4 % in two.
    `fill_sms` (the NVIDIA tree): below half the SMs busy, sequences of >= 8 tiles split down to
    one tile a segment until every SM has a program; shorter ones stay whole (unmeasured).
    [fill-sms] H100 2026-11-22: 1.10-1.83x (b1x1k 29.4 -> 16.1 us); off for AMD (unmeasured).
    Sliding windows count the visible tiles only (`visible_tiles`), as the kernel splits only
    them. [window-segments] H100 2026-11-22: 1.19-1.62x. `block_m`: the Q-block of a multi-token
    decode (`multi_token_rows`), whose sequences it holds whole.
    """
    if not is_decode_batch(f, block_m):
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


# [short-split] H100 2026-11-23: the visible keys (more than the first, at most the second) and
# segments a launch-bound decode of short sequences is split into, as measured.
SPLIT_KEYS = (128, 1024)
SPLIT_MAX_SEGMENTS = 16
# [many-items] H100 2026-11-23: work items per SM (64 sequences x 8 KV heads on 132 SMs) and
# visible keys of the decodes that take tile 64, 2 warps, 4 programs per SM, as measured.
MANY_ITEMS_PER_SM = 3
MANY_ITEMS_MAX_KEYS = 2048
# [fp8-many-items] H200 2026-11-29: fp8 caches take that shape from this many items per SM, at any
# length: 1.04-1.08x at 2.9-7.8 per SM on 4k-8k keys (round4-others.md: 48 x 4k 1.08x, 64 x 8k
# 1.04x); lost at 1.94 (32 x 8k: 1.55x, even with 2 segments); the bound lies between, unmeasured
FP8_MANY_ITEMS_PER_SM = 2.5
# [narrow-head-stages] H200 2026-11-29: bf16 decodes of heads this small or smaller, Q-blocks of at most
# 32 rows, tiles of 128 take a third stage (3 x 32 KiB of K and V a program at head 64): gpt-oss-20b 1-64
# sequences x 1k-32k, 1, 2 and 4 queries 0.936-0.968x (narrow-head.md, 11 rows); falcon-7b's 128-row
# Q-blocks lost 1.04-1.07x; head 128 went both ways (round5.md: qwen2.5-7b 4 x 8k, 2 queries 0.967x, 4 1.087x)
NARROW_HEAD = 64
NARROW_HEAD_MAX_ROWS = 32  # the largest Q-block that won (gpt-oss-20b, 4 queries); falcon-7b's 128 lost
# [filled-one-segment] H200 2026-11-28: decodes of 256 and 512 items on 132 SMs (1.94 and 3.88 per SM)
# ran fastest whole: bf16 4k-8k keys 1.04-1.05x, fp8 (qk16) 1.08-1.12x over 2-4 segments; 1.0-1.9 unmeasured
FILLED_ITEMS_PER_SM = 1.9
# [decode-segments] H200 2026-11-29: bf16/fp16 decodes (heads <= 128) that `num_segments` splits take the
# largest power of two keeping work items x segments within this many programs per SM, not [segments]' 4-8
# per SM: 26 of 27 changed rows 1.01-1.25x (round15-decode-segments.md); 16 x 4k of lengths drawn 1.01x
# slower, heads of 256 (gemma2-9b, tiles of 64) 1.085x slower: they keep [segments]; fp8, windows unmeasured
DECODE_PROGRAMS_PER_SM = 2
# [fp8-wide-tiles] H200 2026-11-30: fp8 decodes (heads of 128) of up to FP8_WIDE_PROGRAMS_PER_SM items per SM
# in tiles of 128, 4 warps, 3 stages, every program on the GPU at once (`fp8_wide_segments`), where each
# segment keeps >= FP8_WIDE_MIN_KEYS keys: 32 x 2k, 4k (blocks 16, 32), 8k 0.936-0.967x the tiles of 64 in 2
# segments, 16 x 8k 0.82x its 8 segments, 8 x 8k, 12 x 8k, 4 x 32k (4-8 segments) 0.84-0.85x, 48 x 4k 0.99x;
# 64 x 4k (3.9 per SM) 1.28x slower; segments of 1k keys tie or lose (8 x 4k in 4: 1.01x, in 2: 1.12x)
# (docs/lab/2026-11-30.md). 72 KiB of shared memory a program (sm_90 compile) leave room for 3 per SM. It
# replaces [fp8-two-segments] (tiles of 64, 2 warps, 2 segments from 1.9 items per SM)
FP8_WIDE_PROGRAMS_PER_SM = 3
FP8_WIDE_MIN_KEYS = 2048


def short_split(f: Features) -> tuple[int, int] | None:
    """(tile, segments) for a decode batch of few, short sequences, or None where it does not apply.

    Few work items (sequences x KV heads <= a quarter of the SMs) of 129-1024 visible keys
    leave most SMs idle and ran whole (the `fill_sms` rule of `num_segments` needs >= 8 tiles
    of 128). Here the sequence splits into up to 16 segments, about one per SM, and the tile
    shrinks to half a segment's keys (at least 16), so every program has two tiles to pipeline.
    [short-split] H100 2026-11-23, 1.04-1.62x; one tile of 128 and 64 items stay whole.
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


def warp_specialized_prefill(f: Features) -> bool:
    """[warp-specialized]: a prefill of long contexts or of prompts of >= WARP_SPECIALIZED_PROMPT queries
    (`long_prefill`), ([ws-short-prompts]) a batch of shorter alike prompts (`short_prompts_prefill`) or
    ([ws-large-batches]) a batch of many queries, chunks or decodes among them (`large_prefill_batch`), over
    a 16-bit cache or an fp8 one ([warp-specialized-e4m3] under bf16 queries, [ws-e4m3-fp16] and
    [ws-fp16-q-rounded] under fp16 queries: q rounded to one e4m3 part by `Config.ws_q_rounded`, which the
    Q-block kernel ignores), through the Gluon kernel
    (`Config.warp_specialized`; where it applies, the planner's call: an sm_90 GPU, no softcap, window or
    sinks, an OCP e4m3 cache, `planning.warp_specialized_applies`)."""
    return long_prefill(f) or short_prompts_prefill(f) or large_prefill_batch(f)


def long_prefill(f: Features) -> bool:
    """[warp-specialized]'s first bounds: long contexts, or prompts of >= WARP_SPECIALIZED_PROMPT queries."""
    return (not f.window and f.head_size <= 128
            and (f.visible_kv_len >= WARP_SPECIALIZED_KEYS
                 or min(f.visible_kv_len, f.avg_query_len) >= WARP_SPECIALIZED_PROMPT))


def short_prompts_prefill(f: Features) -> bool:
    """[ws-short-prompts]: a batch of whole prompts of alike lengths (no sequence sees more keys than the
    longest prompt has queries, counted in KV granules as `kv_len_class` does; the mean prompt at least 3/4
    of the longest, so decodes are a small share), heads of 128 over a 16-bit cache, of at least
    WS_SHORT_PROMPTS' queries a prompt and sequences (alike prompts of 256 from 16 sequences are
    `large_prefill_batch`'s). Exact where the call passes `max_seqlen_q` and
    `max_seqlen_k` (vLLM does); from shapes alone the bounds leave it off."""
    def granules(n: int) -> int:
        return -(-n // KV_GRANULE)
    return (f.head_size == 128 and not f.fp8_kv and not f.window
            and granules(f.max_kv_len) <= granules(f.max_query_len)
            and 4 * f.avg_query_len >= 3 * f.max_query_len
            and f.avg_query_len >= WS_SHORT_PROMPTS[0] and f.num_seqs >= WS_SHORT_PROMPTS[1])


def large_prefill_batch(f: Features) -> bool:
    """[ws-large-batches]: a prefill batch of heads of 128 (no window) of >= WS_BATCH_TOKENS tokens and >=
    WS_BATCH_MEAN_QUERIES queries a sequence on average, over a 16-bit cache or an e4m3 one (under fp16
    queries q rounded to one e4m3 part, as [ws-fp16-q-rounded] does). Whole prompts, chunks after a context
    and decodes beside them alike: the Gluon kernel's 128-query blocks gain on the prompts' many queries more
    than they spend on the decodes' one (a block each); a low mean is many decodes or short prompts, where
    they spend more. Both counts are exact from shapes."""
    return (f.head_size == 128 and not f.window
            and f.num_tokens >= WS_BATCH_TOKENS and f.avg_query_len >= WS_BATCH_MEAN_QUERIES)


def causal_edge_tile(f: Features, block_m: int, tile_size: int) -> int:
    """The NVIDIA prefill's causal edge (`Config.edge_tile`): half the tile where a Q-block
    sees up to EDGE_HALF_MAX_KEYS keys, a quarter beyond; whole tiles (0) under a sliding
    window. [causal-edge] H100 2026-11-24: a window lost with it (1.01-1.08x slower); fp8 then
    ran even, and with both products in fp16 won (H200 2026-11-28, 1x8k 1.84 -> 1.67 ms)."""
    if f.window:
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


# NVIDIA: one provenance line per rule: GPU, date, gain, and the lab's re-run, where `tune ARGS` is
# `python -m perf tune --suite heuristics ARGS` (perf/suites.yaml: the labs' headline shapes; from the
# rule's choice it times every knob again). The labs behind each [id]: docs/kernels.md, "Lab notes of
# the NVIDIA tree"; a --suite in ARGS replaces `heuristics`.
def _nvidia(f: Features) -> Config:
    # [pdl-reduce] H200 2026-11-29, 1.00-1.05x: tune --suite spec-decode --scenarios '*batch1-kv1024-q8/*'
    # [e4m3-pairs] H200 2026-11-30, fp8 decodes 1.04-1.20x: tune --suite anchor --scenarios '*decode*fp8*'
    # [reduce-one-warp] H200 2026-11-30, 1.00-1.09x: tune --suite spec-decode --scenarios '*4-kv1024-q5/*'
    # [ws-pack-gqa] H200 2026-12-04, 0.85-0.97x: tune --suite pr --scenarios '*/batch16-kv1024-var/*'
    config = _nvidia_branches(f)
    return replace(config, pdl_reduce=True, v_pairs=True, reduce_warps=reduce_warps(f, config),
                   ws_pack_gqa=config.warp_specialized)


def reduce_warps(f: Features, config: Config) -> int:
    """[reduce-one-warp]: warps of the reduction's programs. NVIDIA H200 2026-11-30: one warp, not 4, took
    0.92-1.00x the time of 20 split decodes, as persistent programs and one program per merge alike
    (docs/lab/2026-11-30.md). Kept at 4: heads over 128 (gemma2-9b 1.01x slower with one), and fewer merges
    than SMs over segments in tiles of MIN_TILE keys ([short-split]: 1 x 512, 16-71 merges, 1.03-1.19x
    slower; 1136 merges 0.97x), whose attention programs end too soon to hide a merge by one warp."""
    queries = f.max_query_len if config.reduce_by_query else 1  # merges per (sequence, query head)
    merges = f.num_seqs * f.num_kv_heads * f.queries_per_kv * queries
    if next_pow2(f.head_size) > 128 or (config.tile_size <= MIN_TILE and merges < f.num_sms):
        return 4
    return 1


def _nvidia_branches(f: Features) -> Config:
    wide = f.head_size > 128  # [head-256] its rules halve the tiles to fit shared memory; unmeasured
    # [multi-token-split] H100 2026-11-26, 1.06-9.0x: tune --suite spec-decode --scenarios '*-q[58]/*'
    rows = multi_token_rows(f)
    if is_decode_batch(f) or rows:
        # [decode-tile] H200 2026-11-21, 1.07-1.88x over tile 64: tune --suite tune --scenarios '*decode*'
        # [narrow-window] H100 2026-11-23, 1.4x, tile 32 1.05-1.2x: tune --scenarios 'gpt-oss-20b/decode/*'
        narrow = 0 < f.window and f.visible_kv_len <= NARROW_WINDOW
        # [short-context] H100 2026-11-23, 2.1x: tune --scenarios 'llama3-8b/decode/batch128-kv64/*'
        short = f.visible_kv_len <= SHORT_CONTEXT
        # [short-split] H100 2026-11-23, 1.04-1.62x: tune --scenarios 'llama3-8b/decode/batch1-kv512/*'
        split = None if narrow or short else short_split(f)
        crowded = f.kv_items >= MANY_ITEMS_PER_SM * f.num_sms
        # [many-items] H100 2026-11-23, 1.02-1.33x: tune --scenarios 'llama3-8b/decode/batch64-kv128/*'
        # [fp8-many-items] H200 2026-11-29, 1.04-1.08x: tune --scenarios 'llama3-8b/decode/batch64-kv4096/*'
        crowded_fp8 = f.fp8_kv and not rows and f.kv_items >= FP8_MANY_ITEMS_PER_SM * f.num_sms
        # [fp8-read-ahead] H200 2026-11-29, 1.09-1.28x: tune --scenarios 'llama3-8b/decode/batch64-kv4096/*'
        ahead_fp8 = f.fp8_kv and f.head_size == 128 and not (rows or narrow or short or split)
        # [fp8-wide-tiles] H200 2026-11-30, 1.01-1.24x: tune --suite anchor --scenarios '*decode*fp8*'
        wide_segments = fp8_wide_segments(f) if ahead_fp8 else 0
        wide_fp8 = 0 < wide_segments * FP8_WIDE_MIN_KEYS <= f.visible_kv_len
        many_short = crowded and not (narrow or short or wide) and f.visible_kv_len <= MANY_ITEMS_MAX_KEYS
        many = many_short or crowded_fp8 and not (wide_fp8 or narrow or short or wide)
        # [multi-token-segments] H200 2026-11-28, 1.1-2.1x: tune --suite spec-decode --scenarios 'qwen2.5*'
        wide_rows = rows > MULTI_TOKEN_TILE64_ROWS and f.head_size >= 128
        # [multi-token-deep] H200 2026-11-29, 1.05-1.15x: tune --suite spec-decode --scenarios '*-kv8192-q8/*'
        deep = rows > MULTI_TOKEN_TILE64_ROWS and not f.fp8_kv
        tile = (16 if short else split[0] if split else 32 if narrow and crowded and not wide
                else 64 if wide or narrow or many or wide_rows else 128)
        # [narrow-head-stages] H200 2026-11-29, 1.03-1.07x: tune --suite spec-decode --scenarios 'gpt-oss*'
        block_m = rows or decode_block_m(f.queries_per_kv)
        narrow_head = (tile == 128 and f.head_size <= NARROW_HEAD and block_m <= NARROW_HEAD_MAX_ROWS
                       and not f.fp8_kv)
        # [narrow-read-ahead] H200 2026-11-29, 1.05-1.21x: tune --suite spec-decode --scenarios 'gpt-oss*'
        ahead_narrow = narrow_head and f.max_query_len > 1
        # [many-one-segment] H100 2026-11-24, 1.02-1.04x: tune --scenarios 'llama3-8b/decode/batch64-kv2048/*'
        # [filled-one-segment] H200 2026-11-28, 1.04-1.12x: tune --scenarios '*/batch64-kv4096/*'
        filled = f.kv_items >= FILLED_ITEMS_PER_SM * f.num_sms
        # [decode-segments] H200 2026-11-29, 1.01-1.25x: tune --suite anchor --scenarios '*/batch8-kv8192/*'
        # (a decode [segments] keeps whole stays whole: unmeasured there)
        spread = not (split or rows or many or filled or f.fp8_kv or f.window or narrow or short
                      or wide) and num_segments(f, tile, fill_sms=True) > 1
        segments = (split[1] if split else multi_token_segments(
            f, tile, MULTI_TOKEN_DEEP_PROGRAMS_PER_SM if deep else MULTI_TOKEN_PROGRAMS_PER_SM)
            if rows else wide_segments if wide_fp8 else 1 if many or filled
                    else multi_token_segments(f, tile, DECODE_PROGRAMS_PER_SM) if spread
                    else num_segments(f, tile, fill_sms=True))  # resolved here: the source names what runs
        # [long-segment-ahead] H200 2026-11-30, 1.01-1.04x: tune --suite spec-decode --scenarios '*6-kv32*'
        # [filled-segment-ahead] H200 2026-11-30, 1.00-1.02x: tune --suite spec-decode --scenarios '*64-kv8*'
        ahead_16bit = f.max_query_len > 1 and not (deep or wide or f.fp8_kv) and f.dtype != "float32"
        long_segments = ahead_16bit and f.visible_kv_len >= MULTI_TOKEN_LONG_SEGMENT_KEYS * segments
        filled_segments = (ahead_16bit and not (long_segments or ahead_narrow)
                           and f.visible_kv_len >= MULTI_TOKEN_FILLED_SEGMENT_KEYS * segments
                           and f.kv_items * segments >= MULTI_TOKEN_FILLED_ITEMS_PER_SM * f.num_sms)
        # [int32-offsets] H100 2026-11-24, 1.00-1.10x; fp8 H200 11-28 1.08x: tune --scenarios 'qwen2.5-7b/*'
        int32 = not (short or f.window or f.head_size != next_pow2(f.head_size))
        # [fp8-qk16] H200 2026-11-28, 1.29-1.39x: tune --scenarios 'llama3-8b/decode/batch64-kv4096/*'
        qk16 = f.fp8_kv
        # [reduce-by-query] H200 2026-11-29, 1.02-1.70x: tune --suite spec-decode --scenarios '*/batch1-*'
        by_query = f.max_query_len > 1
        # [seq-items] H100 2026-11-23, 1.03-1.44x: tune --scenarios 'llama3-8b/decode/batch8-kv1024/*'
        seq_items = f.num_seqs > 1 and f.queries_per_kv > 1
        # [decode-layout] H100 2026-11-24, 1.00-1.01x: tune --scenarios 'llama2-7b/decode/*'
        decode_layout = f.num_seqs > 1 and not seq_items
        return _fit(f, block_m, tile, fill_sms=True, segments=segments,
                    num_warps=2 if short or many else 4,
                    num_stages=(3 if deep or narrow_head or ahead_fp8 or long_segments or filled_segments
                                else 2),
                    programs_per_sm=(4 if short or many else 0 if narrow
                                     else FP8_WIDE_PROGRAMS_PER_SM if wide_fp8 else 2),
                    read_ahead=deep or ahead_fp8 or ahead_narrow or long_segments or filled_segments,
                    block_vector=deep,
                    seq_items=seq_items, decode_layout=decode_layout,
                    offsets_32=int32, qk_fp16=qk16, reduce_by_query=by_query,
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
                       if many_short else "")
                    + ("; fp8, many items, tile 64, 2 warps: H200 2026-11-29, 1.04-1.08x"
                       if many and not many_short else "")
                    + ("; fp8, the block table read a tile ahead, 3 stages: H200 2026-11-29, 1.09-1.28x"
                       if ahead_fp8 else "")
                    + ("; fp8, <= 3 items per SM, segments of >= 2k keys, tiles of 128, 4 warps, "
                       "3 programs per SM: H200 2026-11-30, 1.01-1.24x" if wide_fp8 else "")
                    + ("; int32 offsets: H100 2026-11-24, 1.00-1.10x"
                       if int32 else "")
                    + ("; decode layout: H100 2026-11-24, 1.00-1.01x" if decode_layout else "")
                    + (f"; multi-token split, {rows} rows: H100 2026-11-26, 1.06-9.0x" if rows else "")
                    + (f"; about 2 programs per SM{', tile 64' if wide_rows else ''}: H200 2026-11-28, "
                       "1.1-2.1x" if rows and not deep else "")
                    + ("; its 64-row Q-blocks read a block id per block, a tile ahead, in 3 stages, about "
                       "1 program per SM: H200 2026-11-29, 1.05-1.15x" if deep else "")
                    + ("; segments for 2 programs per SM: H200 2026-11-29, 1.01-1.25x" if spread else "")
                    + ("; items fill the SMs, one segment: H200 2026-11-28, 1.04-1.12x"
                       if filled and not (split or rows or many) else "")
                    + ("; fp8, both products in fp16: H200 2026-11-28, 1.29-1.39x" if qk16 else "")
                    + ("; the reduction an item per query: H200 2026-11-29, 1.02-1.70x"
                       if by_query and segments != 1 else "")
                    + ("; heads of 64 or less in tiles of 128: 3 stages, H200 2026-11-29, 1.03-1.07x"
                       if narrow_head else "")
                    + ("; their multi-token Q-blocks read the block table a tile ahead: H200 2026-11-29, "
                       "1.05-1.21x" if ahead_narrow else "")
                    + ("; segments of >= 16k keys read the block table a tile ahead, 3 stages: H200 "
                       "2026-11-30, 1.01-1.04x" if long_segments else "")
                    + ("; segments of >= 8k keys, 3 items per SM, read the block table a tile ahead, "
                       "3 stages: H200 2026-11-30, 1.00-1.02x" if filled_segments else ""))
    if f.max_query_len <= 64:
        # [short-prefill] Q-block 64 unmeasured; tile: H100 2026-11-23, 2x: tune --scenarios '*/batch8-kv16/*'
        return _fit(f, 64, min(64 if wide else 128, max(MIN_TILE, next_pow2(f.visible_kv_len))),
                    num_warps=4, num_stages=2, programs_per_sm=2,
                    source="nvidia/short-prefill: Q-block 64 unmeasured; tile = visible keys: "
                    "H100 2026-11-23, 2x")
    # [fast-addressing] H100 2026-11-24, 1.02-1.43x: tune --scenarios 'llama3-8b/prefill/batch1-kv8192/*'
    fast = not f.fp8_kv
    # [third-stage] H100 2026-11-24, 1.03-1.11x: tune --scenarios 'llama3-8b/prefill/batch1-kv16384/*'
    def long(block_m: int) -> bool:  # the third stage: only for many tiles per Q-block
        return fast and prefill_q_block_keys(f, block_m) > LONG_PREFILL_KEYS
    # [prefill-head-256] unmeasured rows/tile; H100 2026-11-24, 1.25-1.43x: tune --scenarios 'gemma2-9b/*'
    if wide:
        deep = long(64)
        return _fit(f, 64, 64, num_warps=8, num_stages=3 if deep else 2,
                    programs_per_sm=0 if fast and not deep else 1, block_vector=fast, offsets_32=fast,
                    source="nvidia/prefill: head 256, unmeasured rows and tile"
                    + ("; fast addressing" + (", 3 stages" if deep else ", a program per item")
                       + ": H100 2026-11-24, 1.25-1.43x" if fast else ""))
    # [few-rows] H100 2026-11-23, 1.7-2.1x; edge tiles 1.02-1.04x: tune --scenarios 'falcon-7b/prefill/*'
    if f.head_size <= 64 and prefill_row_use(f.queries_per_kv, 128) < MIN_PREFILL_ROW_USE:
        deep = long(256)
        edge = causal_edge_tile(f, 256, 64) if fast else 0  # fp8 ran even with it (H100 2026-11-24)
        return _fit(f, 256, 64, num_warps=8, num_stages=3 if deep else 2, programs_per_sm=2,
                    read_ahead=True, block_vector=fast, offsets_32=fast, edge_tile=edge,
                    source="nvidia/prefill: few rows of 128 used, 256 rows, tile 64: "
                    "H100 2026-11-23, 1.7-2.1x"
                    + ("; fast addressing" + (", 3 stages" if deep else "")
                       + ": H100 2026-11-24, 1.02-1.13x" if fast else "")
                    + (f"; causal edge in tiles of {edge}: H100 2026-11-24, 1.02-1.04x" if edge else ""))
    # [fp8-prefill] H200 2026-11-28, 1.20-1.32x: tune --suite anchor --scenarios '*/fp8/*'
    # [fp8-qk-e4m3] H200 2026-11-29, 1.16-1.43x: tune --suite anchor --scenarios '*/fp8/*'
    # (`qk_fp16` stays for the caches whose e4m3 products do not apply: `planning.kernel_constexprs`)
    # [warp-specialized-e4m3] H200 2026-11-30, 0.65-0.89x: tune --suite anchor --scenarios '*/fp8/*'
    # ([ws-large-batches] over e4m3: H200 2026-12-04, 0.73-0.88x: docs/kernels.md's row names the lab's plan)
    ws = warp_specialized_prefill(f)
    if f.fp8_kv and f.dtype == "bfloat16":  # fp16 queries: new ptxas spills with it (static gate)
        # [fp8-short-prefill] H200 2026-11-29, 1.18x: tune --suite anchor --scenarios '*/batch32-kv256/*'
        if not f.window and prefill_q_block_keys(f, 64) <= FP8_SHORT_PREFILL_KEYS:
            return _fit(f, 64, 64, num_warps=4, num_stages=3, programs_per_sm=0, read_ahead=True,
                        block_vector=True, offsets_32=True, edge_tile=32, qk_fp16=True, qk_e4m3=True,
                        warp_specialized=ws,
                        source="nvidia/prefill fp8: up to 256 keys per Q-block, 64 rows, 4 warps, tile 64, "
                        "3 stages, Q K^T on e4m3: H200 2026-11-29, 1.18x"
                        + ("; the Gluon kernel over e4m3 for a large batch: H200 2026-12-04, 0.88x"
                           if ws else ""))
        edge = causal_edge_tile(f, 128, 128)
        return _fit(f, 128, 128, num_warps=8, num_stages=3, programs_per_sm=0 if not f.window else 2,
                    read_ahead=True, block_vector=True, offsets_32=True, edge_tile=edge, qk_fp16=True,
                    qk_e4m3=True, warp_specialized=ws,
                    source="nvidia/prefill fp8: the bf16 rule's tile and addressing, 3 stages, both "
                    f"products in fp16, causal edge in tiles of {edge}: H200 2026-11-28, 1.20-1.32x; "
                    "Q K^T on e4m3, P V in fp16: H200 2026-11-29, 1.16-1.43x"
                    + ("; the warp-specialized Gluon kernel over e4m3: H200 2026-11-30, 0.65-0.89x"
                       + ("" if long_prefill(f) else "; for a large batch: H200 2026-12-04, 0.73-0.78x")
                       if ws else ""))
    # [warp-specialized] H200 2026-11-30, 1.06-1.33x: tune --suite anchor --scenarios '*/prefill/*'
    # [ws-e4m3-fp16] H200 2026-11-30, 1.37-1.91x: tune --suite nightly --scenarios '*/block16/fp8'
    # [ws-fp16-q-rounded] H200 2026-11-30, 1.12-1.19x: tune --suite nightly --scenarios '*/block16/fp8'
    # [ws-short-prompts] H200 2026-12-04, 0.85-0.95x: tune --suite anchor --scenarios '*/batch16-kv512/*'
    # [ws-large-batches] H200 2026-12-04, 0.74-0.99x: tune --suite pr --scenarios '*/batch16-kv1024-var/*'
    ws_source = "; the warp-specialized Gluon kernel: H200 2026-11-30, 1.06-1.33x" if ws else ""
    if ws and not long_prefill(f):
        ws_source = ("; the Gluon kernel for a batch of short prompts: H200 2026-12-04, 0.85-0.95x"
                     if short_prompts_prefill(f)
                     else "; the Gluon kernel for a large batch: H200 2026-12-04, 0.74-0.99x")
    q_rounded = ws and f.fp8_kv  # fp16 queries: bf16's returned above
    if q_rounded:
        ws_source = ("; the warp-specialized Gluon kernel over e4m3: H200 2026-11-30, 1.37-1.91x; q rounded "
                     "to one e4m3 part: H200 2026-11-30, 1.12-1.19x"
                     + ("" if long_prefill(f) else "; for a large batch: H200 2026-12-04, 0.43-0.70x"))
    # [short-prefill-rows] H200 2026-11-28, 1.05-1.20x: tune --suite anchor --scenarios '*/batch32-kv256/*'
    short_keys = prefill_q_block_keys(f, 64)
    if fast and not f.window and short_keys <= SHORT_PREFILL_KEYS:
        # [short-prompt-tile] H200 2026-12-04, 0.96-0.99x: tune --suite anchor --scenarios '*/batch64-kv128/*'
        short_tile = (not ws and not f.fp8_kv and f.dtype == "bfloat16" and f.head_size == 128
                      and short_keys <= SHORT_PROMPT_TILE_KEYS)
        return _fit(f, 64, 32 if short_tile else 64, num_warps=4, num_stages=3, programs_per_sm=0,
                    read_ahead=True, block_vector=True, offsets_32=True, edge_tile=32, warp_specialized=ws,
                    ws_q_rounded=q_rounded,
                    source="nvidia/prefill: up to 2k keys per Q-block, 64 rows, 4 warps, tile 64, "
                    "3 stages: H200 2026-11-28, 1.05-1.20x" + ws_source
                    + ("; tiles of 32 up to 256 keys: H200 2026-12-04, 0.96-0.99x" if short_tile else ""))
    # [prefill-tile] H200 2026-11-21, 1.13-1.25x: tune --suite tune --scenarios '*prefill*'
    # [read-ahead] H100 2026-11-23, 1.14-1.30x: tune --suite tune --scenarios '*prefill*'
    # [causal-edge] H100 2026-11-24, 1.02-1.09x: tune --scenarios 'llama3-8b/prefill/batch8-kv1024/*'
    # [one-program-per-item] H100 2026-11-24, 1.12x: tune --scenarios 'llama3-8b/prefill/batch4-kv2048/*'
    deep = long(128)
    edge = causal_edge_tile(f, 128, 128) if fast else 0  # fp16 queries over fp8: as measured before
    return _fit(f, 128, 128, num_warps=8, num_stages=3 if deep else 2,
                programs_per_sm=0 if fast and not f.window else 2,
                read_ahead=True, block_vector=fast, offsets_32=fast, edge_tile=edge, warp_specialized=ws,
                ws_q_rounded=q_rounded,
                source="nvidia/prefill: sweep H200 2026-11-21, 1.13-1.25x over tile 64; "
                "read-ahead: H100 2026-11-23, 1.2-1.3x"
                + ("; fast addressing" + ("" if f.window else ", a program per item")
                   + (", 3 stages" if deep else "") + ": H100 2026-11-24, 1.02-1.28x" if fast else "")
                + (f"; causal edge in tiles of {edge}: H100 2026-11-24, 1.02-1.09x" if edge else "")
                + ws_source)


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
