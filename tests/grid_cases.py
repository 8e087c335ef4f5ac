"""The correctness grid's keyed cases: what each case of `test_matches_reference` and
`test_forced_config_matches_reference` (tests/kernels/test_correctness.py) builds and calls.

The two tests are most of the grid (5,768 of its 6,606 cases on an H100, 2026-11-26). Their
parameter lists, batch specs, fp8 formats and call keywords live here, free of pytest, so that
`perf grid --cases` (perf/change/grid.py) keys each case's launches on base and head from the
very lists the test module parametrizes itself with: a case is planned on the batch its test
builds and with the call its test makes.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

import torch

from kernels.batch import BatchSpec
from kernels.inputs import FNUZ_E4M3, OCP_E4M3
from kernels.paged_attention.heuristics import Config
from perf.measure.check import FP8_PRODUCTS_TOLERANCE  # noqa: F401 (the grid's fp8-products tolerance)

MODULE = "tests/kernels/test_correctness.py"  # the node ids' file, relative to the repository root
MATCHES = "test_matches_reference"
FORCED = "test_forced_config_matches_reference"

MODELS = {  # name -> (num_q_heads, num_kv_heads); head counts kept small, ratios are the point
    "mha": (4, 4),  # 1:1
    "gqa4": (8, 2),  # 4:1
    "gqa5": (10, 2),  # 5:1, not a power of two
    "llama3_8b": (32, 8),  # 8:1
    "mqa": (8, 1),
}
HEAD_SIZES = (64, 80, 96, 128, 256)
BLOCK_SIZES = (16, 32, 544)  # 544: hybrid attention/SSM models, not a power of two
CASES = {  # name -> (query_lens, kv_lens), one entry per sequence
    "q1_kv1": ((1,), (1,)),
    "decode_1328": ((1,), (1328,)),
    "prefill_5_18": ((5,), (18,)),
    "chunked_129_463": ((129,), (463,)),
    "mixed": ((1, 5, 129, 17, 1, 40), (1328, 18, 463, 17, 1, 97)),
    "decode_batch": ((1, 1, 1, 1), (1328, 700, 33, 1)),  # decode only: KV segments + reduction
    # Interpreter-sized versions (the interpreter runs programs one by one, in Python).
    "chunked_33_97": ((33,), (97,)),
    "mixed_small": ((1, 5, 17, 1), (300, 18, 40, 1)),
}
FEATURES = {  # name -> BatchSpec fields
    "sliding_window": {"sliding_window": 37},
    "softcap": {"softcap": 20.0},
    "sinks": {"sinks": True},
    "fp8_kv": {"fp8_kv": True},
    "fp8_fnuz": {"fp8_kv": True},
    "all": {"sliding_window": 300, "softcap": 20.0, "sinks": True, "fp8_kv": True},
    "all_fnuz": {"sliding_window": 300, "softcap": 20.0, "sinks": True, "fp8_kv": True},
}
# The fp8 cache format of each feature: both on every device, whatever its native one is.
FP8_DTYPE = {"fp8_fnuz": FNUZ_E4M3, "all_fnuz": FNUZ_E4M3}  # others: OCP_E4M3

# Interpreter subset: every model ratio, head size, case and feature appears at least once,
# on small head counts and short sequences.
CPU_SUBSET = {
    ("gqa5", 80, 16, "prefill_5_18", "float16", "none"),
    ("mqa", 64, 32, "decode_1328", "float16", "none"),
    ("mha", 128, 16, "q1_kv1", "float16", "none"),
    ("gqa4", 64, 16, "mixed_small", "float16", "none"),
    ("gqa4", 256, 32, "prefill_5_18", "float16", "none"),
    ("mqa", 64, 16, "chunked_33_97", "float16", "none"),
    ("gqa5", 64, 544, "prefill_5_18", "float16", "none"),
    ("gqa4", 64, 16, "mixed_small", "float16", "sliding_window"),
    ("gqa5", 80, 16, "prefill_5_18", "float16", "softcap"),
    ("gqa4", 64, 16, "mixed_small", "float16", "sinks"),
    ("gqa4", 64, 32, "mixed_small", "float16", "fp8_kv"),
    ("gqa4", 96, 544, "mixed_small", "float16", "all"),
    ("gqa5", 96, 16, "decode_1328", "float16", "all"),
    # FNUZ: a padded head and a 5:1 group, a 544 block with every feature, a long decode
    ("gqa5", 80, 16, "prefill_5_18", "float16", "fp8_fnuz"),
    ("gqa4", 96, 544, "mixed_small", "float16", "all_fnuz"),
    ("mqa", 64, 32, "decode_1328", "float16", "fp8_fnuz"),
}

# Launch configurations the heuristics may not pick for the grid's shapes, forced through the
# `config` hint: tiles larger and smaller than the cache block (gather and sub-block reads),
# a tile that does not divide a 544 block, a segment count that is not a power of two, and a
# static grid much smaller than its work (each program loops over many items).
FORCED_CONFIGS = {  # name -> (Config, block_size)
    "tile64_over_block16_seg3": (Config(16, 64, 3, num_warps=4, num_stages=2), 16),
    "tile16_in_block32_bm32": (Config(32, 16, 1, num_warps=4, num_stages=2), 32),
    "tile64_over_block544_seg2": (Config(16, 64, 2, num_warps=4, num_stages=2), 544),
    "grid_of_3_programs_seg4": (Config(16, 32, 4, num_warps=4, num_stages=2, max_programs=3), 16),
    # the AMD fp8-prefill branch of heuristics._amd (BLOCK_M 64, tile 32, 8 warps)
    "amd_fp8_prefill_bm64_tile32": (Config(64, 32, 1, num_warps=8, num_stages=2), 16),
    # the NVIDIA prefill shape (BLOCK_M 128, tile 128, 8 warps) one stage deeper: two tiles in
    # flight ahead of the one computed, with the block table read a tile ahead of its use
    "prefill_bm128_tile128_stages3": (Config(128, 128, 1, num_warps=8, num_stages=3, read_ahead=True), 16),
    # the block table read a tile ahead where the tile lies in one block, and over a block
    # size no power-of-two tile divides, split into segments (the read past the last tile)
    "read_ahead_tile16_in_block32_bm32": (Config(32, 16, 1, num_warps=4, num_stages=2, read_ahead=True), 32),
    "read_ahead_tile64_over_block544_seg2": (Config(16, 64, 2, num_warps=4, num_stages=2, read_ahead=True),
                                             544),
    # the causal edge in smaller tiles than the rest: the NVIDIA prefill shape with edges of
    # 32 keys, and tiles gathered over 544-token blocks split into segments with edges of 16
    "edge32_prefill_bm128_tile128": (Config(128, 128, 1, num_warps=8, num_stages=2, read_ahead=True,
                                            edge_tile=32), 16),
    "edge16_tile64_over_block544_seg2": (Config(16, 64, 2, num_warps=4, num_stages=2, edge_tile=16), 544),
    # a static grid of one program per work item (programs_per_sm 0)
    "one_program_per_item_seg2": (Config(16, 32, 2, num_warps=4, num_stages=2, programs_per_sm=0), 16),
    # the last segment merges in the attention kernel (no reduce launch): items by Q-block,
    # and items by sequence on a grid of 3 programs (each arrives for many sequences)
    # the 2-warp shapes of the NVIDIA decode tree: short decodes split into 16 segments of one
    # tile (sequence items, 4 programs per SM), and many short items on tile 64
    "two_warps_tile16_seg16_seq_items": (Config(16, 16, 16, num_warps=2, num_stages=2, programs_per_sm=4,
                                                seq_items=True), 16),
    "two_warps_tile64_seg2": (Config(16, 64, 2, num_warps=2, num_stages=2, programs_per_sm=4), 16),
    # the NVIDIA fp8 decode's shapes ([fp8-read-ahead]): that one, read a tile ahead in 3 stages, by
    # sequence items ([fp8-many-items]; in 2 segments as [fp8-two-segments] ran it), and tiles of 128,
    # 4 warps, 3 programs per SM, segments, V as pairs ([fp8-wide-tiles])
    "two_warps_tile64_seg2_read_ahead_stages3": (
        Config(16, 64, 2, num_warps=2, num_stages=3, programs_per_sm=4, read_ahead=True, seq_items=True), 16),
    "tile128_seg4_read_ahead_stages3_pairs": (
        Config(16, 128, 4, num_warps=4, num_stages=3, programs_per_sm=3, read_ahead=True, seq_items=True,
               v_pairs=True), 16),
    "fused_reduce_seg3": (Config(16, 32, 3, num_warps=4, num_stages=2, fused_reduce=True), 16),
    # one block id per cache block of a tile ([blocks, block, D] copies) with int32 offsets:
    # the NVIDIA prefill shape with 3 stages; without the read-ahead, in int64, split; blocks
    # of 32 in tiles of 64 whose causal edge (32 keys) lies in one block
    "block_vector_offsets32_prefill_bm128_tile128_stages3": (
        Config(128, 128, 1, num_warps=8, num_stages=3, read_ahead=True, block_vector=True,
               offsets_32=True), 16),
    "block_vector_tile64_over_block16_seg3": (
        Config(16, 64, 3, num_warps=4, num_stages=2, block_vector=True), 16),
    "block_vector_offsets32_tile64_over_block32_edge32": (
        Config(32, 64, 1, num_warps=4, num_stages=2, read_ahead=True, block_vector=True, offsets_32=True,
               edge_tile=32), 32),
    "fused_reduce_seq_items_seg4_grid3": (Config(16, 16, 4, num_warps=4, num_stages=2, seq_items=True,
                                                 fused_reduce=True, max_programs=3), 16),
    # both products on e4m3 operands (`Config.fp8_products`; an fp8 cache: feature `all`, else
    # ignored): the NVIDIA fp8 prefill's shape with edges of 32, and a split decode's
    "fp8_products_prefill_bm128_tile128_edge32": (
        Config(128, 128, 1, num_warps=8, num_stages=3, read_ahead=True, block_vector=True, offsets_32=True,
               edge_tile=32, fp8_products=True), 16),
    "fp8_products_tile32_seg3": (Config(16, 32, 3, num_warps=4, num_stages=2, fp8_products=True), 16),
    # Q K^T alone on e4m3, P V in fp16 (`Config.qk_e4m3`): the same prefill shape
    "qk_e4m3_prefill_bm128_tile128_edge32": (
        Config(128, 128, 1, num_warps=8, num_stages=3, read_ahead=True, block_vector=True, offsets_32=True,
               edge_tile=32, qk_e4m3=True), 16),
}
# The outputs of `Config.fp8_products` against the fp32 reference, (atol, rtol). Both products take
FORCED_VARIANTS = ("parallel", "flex_tile", "static_grid")  # the variants that take a `config` hint
FORCED_FEATURES = ("none", "all")


def grid_params() -> list[tuple]:
    """test_matches_reference's shape cases, in order, each once:
    (model, head_size, block_size, case, dtype, feature)."""
    base = itertools.product(MODELS, HEAD_SIZES, BLOCK_SIZES, CASES, ["bfloat16"], ["none"])
    fp16 = itertools.product(MODELS, (64, 96, 128), (16, 544), CASES, ["float16"], ["none"])
    # Features: every path of the heuristics (prefill, short prefill, decode with segments),
    # padded and unpadded heads, both block kinds, in bf16; fp16 on the Llama-3-8B shape.
    feats = itertools.chain(
        itertools.product(["llama3_8b", "gqa5"], (64, 96, 128), (16, 544),
                          ["mixed", "chunked_33_97", "decode_batch"], ["bfloat16"], FEATURES),
        itertools.product(["llama3_8b"], (128,), (16, 544), ["mixed", "decode_batch"], ["float16"],
                          FEATURES))
    return list(dict.fromkeys(itertools.chain(base, fp16, feats, sorted(CPU_SUBSET))))


def make_spec(model, head_size, block_size, case, dtype, feature, seed=0) -> BatchSpec:
    num_q, num_kv = MODELS[model]
    q_lens, kv_lens = CASES[case]
    return BatchSpec(q_lens, kv_lens, num_q_heads=num_q, num_kv_heads=num_kv,
                     head_size=head_size, block_size=block_size, dtype=dtype, seed=seed,
                     **FEATURES.get(feature, {}))


def fp8_dtype(feature: str) -> torch.dtype:
    return FP8_DTYPE.get(feature, OCP_E4M3)


def seed(*parts) -> int:
    """A case's batch seed: the same values wherever the case runs."""
    return zlib.crc32(repr(tuple(parts)).encode())


def matches_spec(model, head_size, block_size, case, dtype, feature) -> BatchSpec:
    return make_spec(model, head_size, block_size, case, dtype, feature,
                     seed(model, head_size, block_size, case, dtype, feature))


def forced_spec(config_name: str, feature: str) -> BatchSpec:
    return make_spec("gqa4", 64, FORCED_CONFIGS[config_name][1], "mixed_small", "float16", feature,
                     seed(config_name, feature))


@dataclass(frozen=True)
class KeyedCase:
    """One test id of the two tests: its batch (built with `poison=True` and `fp8_dtype`) and the
    `config` hint its call passes (a FORCED_CONFIGS name; None: the heuristics choose)."""

    node: str  # pytest's node id
    variant: str
    spec: BatchSpec
    feature: str
    config: str | None = None

    def call_kwargs(self, configs: dict | None = None) -> dict:
        """The call's keywords besides the batch's options, with `configs` (a FORCED_CONFIGS, by
        default this module's: the side whose kernels built it)."""
        return {} if self.config is None else {"config": (configs or FORCED_CONFIGS)[self.config][0]}


def keyed_cases(variants) -> list[KeyedCase]:
    """Every case of the two tests, in pytest's order, for the registered `variants`."""
    out = []
    for params in grid_params():
        spec = matches_spec(*params)
        ids = "-".join(map(str, params))
        out += [KeyedCase(f"{MODULE}::{MATCHES}[{ids}-{v}]", v, spec, params[5]) for v in variants]
    for feature in FORCED_FEATURES:
        for name in FORCED_CONFIGS:
            for v in FORCED_VARIANTS:
                node = f"{MODULE}::{FORCED}[{feature}-{name}-{v}]"
                out.append(KeyedCase(node, v, forced_spec(name, feature), feature, name))
    return out
