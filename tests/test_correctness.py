"""Every registered variant against the fp32 reference over a grid of awkward shapes.

The whole grid runs on a GPU; on CPU, Triton's interpreter runs the cases marked
`cpu_subset` (small head counts, fp16) within CI's budget. A variant that lacks a feature
raises NotImplementedError, and the case is skipped with that message as its reason.
Tolerances: fp16 outputs carry the rounding of P to fp16 before the P·V product (as on the
tensor cores, ~1e-3 relative), hence 3e-3; bf16 has 8 bits of mantissa, hence 1.5e-2 /
1e-2. fp8 caches are dequantized identically by the reference, so they need no extra
allowance.

Every batch here is poisoned (`build_batch(poison=True)`): each cache slot no sequence owns
(the tail of a sequence's last block, the spare blocks that block-table padding names)
holds NaN, the fp8 formats' NaN bytes included, as recycled memory of a serving engine may;
a kernel that lets one into a sequence's arithmetic (a masked-out key's 0 times a NaN V)
outputs NaN for it. The output buffer is NaN too, so an unwritten element fails as well.

fp8 caches come in both formats of `kernels.inputs.FP8_FORMATS` on every device: OCP e4m3
(features `fp8_kv`, `all`) and FNUZ e4m3 (`fp8_fnuz`, `all_fnuz`). A variant reads FNUZ the
way its target does: AMD converts it natively (an AMD GPU runs that path here; Triton 3.6's
interpreter cannot hold fp8e4b8, see interpreter_support.py), NVIDIA and the interpreter
run the kernels' own exact decoder (`common.decode_fnuz_e4m3`, checked on all 256 bytes).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import subprocess
import sys
import zlib

import pytest
import torch
import triton
import triton.language as tl
from interpreter_support import (
    INTERPRETER_FNUZ_REASON,
    interpreter_reads_fnuz,
    interpreter_reads_ocp_nan,
    needs_interpreter,
)

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import FNUZ_E4M3, OCP_E4M3, is_fp8
from kernels.paged_attention import heuristics, planning
from kernels.paged_attention.common import kv_to, locate_q_block
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure.check import TOLERANCES  # dtype -> (atol, rtol), the gate's too

# pytest-xdist registers the xdist_group mark; without it (CPU CI) the mark is not added.
HAS_XDIST = importlib.util.find_spec("xdist") is not None

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


def _params():
    base = itertools.product(MODELS, HEAD_SIZES, BLOCK_SIZES, CASES, ["bfloat16"], ["none"])
    fp16 = itertools.product(MODELS, (64, 96, 128), (16, 544), CASES, ["float16"], ["none"])
    # Features: every path of the heuristics (prefill, short prefill, decode with segments),
    # padded and unpadded heads, both block kinds, in bf16; fp16 on the Llama-3-8B shape.
    feats = itertools.chain(
        itertools.product(["llama3_8b", "gqa5"], (64, 96, 128), (16, 544),
                          ["mixed", "chunked_33_97", "decode_batch"], ["bfloat16"], FEATURES),
        itertools.product(["llama3_8b"], (128,), (16, 544), ["mixed", "decode_batch"], ["float16"],
                          FEATURES))
    seen = set()
    for case in itertools.chain(base, fp16, feats, sorted(CPU_SUBSET)):
        if case in seen:
            continue
        seen.add(case)
        marks = [pytest.mark.grid] + ([pytest.mark.cpu_subset] if case in CPU_SUBSET else [])
        if HAS_XDIST:  # cases compiling the same kernels share a worker under --dist loadgroup
            model, head_size, block_size, _, dtype, feature = case
            ratio = MODELS[model][0] // MODELS[model][1]
            marks.append(pytest.mark.xdist_group(f"r{ratio}-h{head_size}-b{block_size}-{dtype}-{feature}"))
        yield pytest.param(*case, marks=marks, id="-".join(str(x) for x in case))


def make_spec(model, head_size, block_size, case, dtype, feature, seed=0) -> BatchSpec:
    num_q, num_kv = MODELS[model]
    q_lens, kv_lens = CASES[case]
    return BatchSpec(q_lens, kv_lens, num_q_heads=num_q, num_kv_heads=num_kv,
                     head_size=head_size, block_size=block_size, dtype=dtype, seed=seed,
                     **FEATURES.get(feature, {}))


def make_batch(spec: BatchSpec, feature: str, device):
    return poisoned_batch(spec, device, fp8_dtype=FP8_DTYPE.get(feature, OCP_E4M3))


def poisoned_batch(spec: BatchSpec, device, **kwargs):
    """`build_batch` as every test here uses it: the cache slots no sequence owns hold NaN."""
    return build_batch(spec, device, poison=True, **kwargs)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("model,head_size,block_size,case,dtype,feature", list(_params()))
def test_matches_reference(variant, model, head_size, block_size, case, dtype, feature, device):
    seed = zlib.crc32(repr((model, head_size, block_size, case, dtype, feature)).encode())
    batch = make_batch(make_spec(model, head_size, block_size, case, dtype, feature, seed), feature, device)
    assert batch.k_cache.dtype == (FP8_DTYPE.get(feature, OCP_E4M3) if batch.spec.fp8_kv else batch.q.dtype)
    out = batch.new_output()  # NaN-poisoned: an unwritten element fails below
    try:
        VARIANTS[variant](*batch.args(), out=out, **batch.options)
    except NotImplementedError as exc:
        pytest.skip(str(exc))
    expected = paged_attention_reference(*batch.args(), **batch.options)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@needs_interpreter
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_runs_in_interpreter(variant):
    """Kernels must stay interpreter-compatible: run each once on CPU tensors."""
    code = (
        "import torch; from kernels import VARIANTS; from kernels.batch import BatchSpec, build_batch;"
        "from kernels.reference import paged_attention_reference as ref;"
        "b = build_batch(BatchSpec((3, 1), (9, 21), num_q_heads=4, num_kv_heads=2, head_size=64),"
        " poison=True);"
        f"o = VARIANTS[{variant!r}](*b.args(), **b.options);"
        "torch.testing.assert_close(o, ref(*b.args(), **b.options), atol=3e-3, rtol=3e-3)"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


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
}


@pytest.mark.parametrize("variant", ["parallel", "flex_tile", "static_grid"])
@pytest.mark.parametrize("config_name", list(FORCED_CONFIGS))
@pytest.mark.parametrize("feature", ["none", "all"])
def test_forced_config_matches_reference(variant, config_name, feature, device):
    config, block_size = FORCED_CONFIGS[config_name]
    seed = zlib.crc32(repr((config_name, feature)).encode())
    spec = make_spec("gqa4", 64, block_size, "mixed_small", "float16", feature, seed)
    batch = make_batch(spec, feature, device)
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("config", [
    None, Config(256, 64, 1, num_warps=8, num_stages=2, read_ahead=True),
    Config(256, 64, 1, num_warps=8, num_stages=3, read_ahead=True, block_vector=True, offsets_32=True,
           edge_tile=16)], ids=["heuristics", "rows256_tile64", "rows256_tile64_edge16"])
def test_head_group_that_does_not_divide_the_q_block(variant, config, device):
    """Falcon-7b's 71 query heads on one KV head: a Q-block of 128 rows holds one token, one of
    256 rows three (the NVIDIA prefill heuristics' choice for it, with its causal edge in tiles
    of 16 keys beyond 1024); rows past the last whole head group stay empty, and a prefill's
    last Q-block holds fewer tokens than BLOCK_Q."""
    spec = BatchSpec((1, 7, 70, 1), (300, 7, 97, 1), num_q_heads=71, num_kv_heads=1, head_size=64,
                     block_size=16, dtype="float16", seed=71)
    batch = poisoned_batch(spec, device)
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("head_size", [128, 256])
def test_short_decodes_split_as_the_heuristics_choose(head_size, device):
    """Few decodes of 129-1024 keys split into up to 16 segments of small tiles (NVIDIA's
    `short_split`, head 256 included): every segment, the empty ones of the shorter sequence
    too, merges into the right output."""
    spec = BatchSpec((1, 1), (700, 150), num_q_heads=4, num_kv_heads=2, head_size=head_size,
                     block_size=16, dtype="float16", seed=head_size)
    features = heuristics.features_from_spec(spec, heuristics.DEFAULT_NUM_SMS["nvidia"])
    assert heuristics.choose("nvidia", features).num_segments == 16  # the branch under test
    batch = poisoned_batch(spec, device)
    out = batch.new_output()
    VARIANTS["static_grid"](*batch.args(), out=out, max_seqlen_q=1, max_seqlen_k=700, vendor="nvidia",
                            num_sms=heuristics.DEFAULT_NUM_SMS["nvidia"], **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("segments", [1, 4])
def test_windowed_decode_segments_split_only_visible_tiles(variant, segments, device):
    """Decodes far past a narrow window: the segments split the window's tiles (the heuristics
    size them by the visible keys), so most segments are empty and must merge as nothing."""
    spec = BatchSpec((1, 1, 1), (700, 300, 20), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", sliding_window=37, sinks=True, seed=7)
    batch = poisoned_batch(spec, device)
    out = batch.new_output()
    config = Config(16, 16, segments, num_warps=4, num_stages=2)
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant,config", [
    ("naive", None), ("qblock", None), ("parallel", None), ("flex_tile", None), ("static_grid", None),
    ("static_grid", Config(16, 16, 3, num_warps=4, num_stages=2)),
    ("static_grid", Config(16, 16, 4, num_warps=4, num_stages=2, seq_items=True, fused_reduce=True)),
], ids=["naive", "qblock", "parallel", "flex_tile", "static_grid", "static_grid_reduce",
        "static_grid_fused_reduce"])
def test_token_offsets_in_int64_match_the_reference(variant, config, monkeypatch, device):
    """Batches of more than 2**31 elements of q (llama3-8b: 524,288 tokens) form their q, out
    and partials offsets in int64 (`planning.token_offsets_32`); in int32 they wrapped and
    the kernels read and wrote out of bounds. Too large for the interpreter: that path,
    forced on a small batch, must give the same outputs (decodes, split and merged too)."""
    monkeypatch.setattr(planning, "token_offsets_32", lambda *_: False)
    planning.release_buffers()  # no plan kept from before the switch
    try:
        decodes = config is not None and config.seq_items
        query_lens, kv_lens = ((1, 1, 1), (300, 40, 1)) if decodes else ((1, 5, 17, 1), (300, 18, 40, 1))
        spec = BatchSpec(query_lens, kv_lens, num_q_heads=8, num_kv_heads=2, head_size=64, block_size=16,
                         dtype="float16", seed=31)
        batch = poisoned_batch(spec, device)
        forced = {} if config is None else {"config": config}  # naive and qblock take none
        _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), **forced,
                                             **batch.options)
        assert all(not launch.constexprs["TOKEN_OFFSETS_32"] for launch in launches)
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, **forced, **batch.options)
        expected = paged_attention_reference(*batch.args(), **batch.options)
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)
    finally:
        planning.release_buffers()


@pytest.mark.gpu
def test_a_batch_past_two_to_the_31_query_elements(device):
    """8,195 sequences of llama3-8b heads, 524,323 tokens: q and out hold more than 2**31
    elements, so the last three sequences' offsets pass int32 (they wrapped negative and the
    kernels faulted: illegal memory access, H100, 2026-11-24); planned in int64, every
    variant's outputs for the last five sequences match the reference (computed for them
    alone), and no row is left unwritten. One test, one batch (13 GB with its output), the
    variants in turn: parallel workers would hold one batch each."""
    spec = BatchSpec((64,) * 8192 + (1, 33, 1), (64,) * 8192 + (300, 97, 1), dtype="float16", seed=3)
    batch = poisoned_batch(spec, device)
    q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens = batch.args()
    assert q.numel() >= 2**31
    first = 8190
    start = int(cu_seqlens_q[first])
    expected = paged_attention_reference(q[start:], k_cache, v_cache, block_table[first:],
                                         cu_seqlens_q[first:] - start, seq_lens[first:], **batch.options)
    for variant in ("naive", "qblock", "parallel", "flex_tile", "static_grid"):
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, **batch.options)
        torch.testing.assert_close(out[start:].float(), expected.float(), atol=3e-3, rtol=3e-3,
                                   msg=lambda m, variant=variant: f"{variant}: {m}")
        assert not out.isnan().any(), variant
        del out


@pytest.mark.parametrize("variant", ["parallel", "flex_tile", "static_grid"])
@pytest.mark.parametrize("segments", [1, 2])
def test_sequence_items_do_every_query_of_a_longer_sequence(variant, segments, device):
    """Items that index sequences (`Config.seq_items`, the NVIDIA decode branch) are planned
    for sequences of one Q-block; a longer sequence (a graph captured for decodes, replayed
    for a prefill) must still come out whole."""
    spec = BatchSpec((1, 9, 1, 2), (40, 60, 5, 33), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", seed=11)
    batch = poisoned_batch(spec, device)
    config = Config(16, 16, segments, num_warps=4, num_stages=2, seq_items=True)  # 4 tokens per Q-block
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert launches[0].constexprs["SEQ_ITEMS"]
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "flex_tile", "static_grid"])
@pytest.mark.parametrize("segments,fused_reduce", [(1, False), (2, False), (3, True)])
def test_decode_layout_items_over_gaps_and_a_prefill(variant, segments, fused_reduce, device):
    """Q-block items that guess a decode batch's layout (`Config.decode_layout`): eleven
    sequences in Q-blocks of 4 tokens leave gaps in the middle and at the end of the bound,
    and a prefill among them misses the guess; a grid of 3 programs takes many items each."""
    spec = BatchSpec((1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 1), (40, 7, 33, 1, 60, 21, 16, 17, 5, 48, 9),
                     num_q_heads=8, num_kv_heads=2, head_size=64, block_size=16, dtype="float16", seed=5)
    batch = poisoned_batch(spec, device)
    config = Config(16, 16, segments, num_warps=4, num_stages=2, decode_layout=True, max_programs=3,
                    fused_reduce=fused_reduce)
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert launches[0].constexprs["DECODE_LAYOUT"] and not launches[0].constexprs["SEQ_ITEMS"]
    out = batch.new_output().fill_(float("nan"))
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("seq_items", [False, True])
def test_fused_reduce_is_one_launch_and_leaves_its_counts_at_zero(variant, seq_items, device):
    """With `Config.fused_reduce` the last segment of each split (sequence, KV head) merges:
    one launch, the right output on every call, and the arrival counts back at 0 after each
    (the next call, or a graph replay, starts from them)."""
    spec = BatchSpec((1, 1, 6, 1), (40, 300, 60, 7), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", seed=13)
    batch = poisoned_batch(spec, device)
    config = Config(16, 16, 3, num_warps=4, num_stages=2, seq_items=seq_items, fused_reduce=True)
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert [launch.name for launch in launches] == ["q_block_kernel"]
    expected = paged_attention_reference(*batch.args(), **batch.options)
    counts = planning.arrival_counts(spec.num_seqs, spec.num_kv_heads, device)
    for _ in range(2):
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)
        assert int(torch.count_nonzero(counts)) == 0


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])  # the two ways plans are kept
@pytest.mark.parametrize("split", [False, True])
def test_every_call_of_a_kept_plan_reads_its_own_tensors(variant, split, device):
    """Calls of one layout reuse the plan made for the first (kernels.paged_attention.planning):
    each batch, with its own values, scales and sinks, must still get its own answer."""
    spec = BatchSpec((1, 1, 1), (100, 40, 7), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", fp8_kv=True, sinks=True, sliding_window=200,
                     softcap=20.0)
    config = Config(16, 16, 3, num_warps=4, num_stages=2) if split else None
    for seed in (1, 2):
        batch = poisoned_batch(dataclasses.replace(spec, seed=seed), device)
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
        expected = paged_attention_reference(*batch.args(), **batch.options)
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


# ---------------------------------------------------------------- fp8 formats

FP8_VARIANTS = [name for name, v in VARIANTS.items() if "fp8_kv" in v.features]


@triton.jit
def _locate_kernel(cu_seqlens_q_ptr, out_ptr, num_seqs, BLOCK_Q: tl.constexpr, DECODE_LAYOUT: tl.constexpr):
    q_block = tl.program_id(0)
    found = locate_q_block(cu_seqlens_q_ptr, q_block, num_seqs, BLOCK_Q, DECODE_LAYOUT)
    for i in tl.static_range(4):
        tl.store(out_ptr + 4 * q_block + i, found[i])


@pytest.mark.parametrize("decode_layout", [False, True])
@pytest.mark.parametrize("block_q", [1, 2, 16])
@pytest.mark.parametrize("query_lens", [
    [1] * 16, [1] * 40, [1], [1, 1, 3, 1, 1], [5, 1, 1, 17, 1, 33, 1], [40, 2, 1, 0, 1, 9], [0, 1, 1],
    [0, 0, 0, 0, 1, 1, 0, 1],  # empty sequences: the guess lands before a block's owner, next to it
])
def test_locate_q_block_finds_every_block_and_only_those(decode_layout, block_q, query_lens, device):
    """Every Q-block of the bound (`find_seq_idx`'s numbering: sequence i's first is
    cu_seqlens_q[i] // BLOCK_Q + i) maps to its sequence, first query, query count and
    index, and every gap to no queries: by the binary search alone, and with the decode-layout
    guess whether it hits, lands next to a gap or falls back to the search (prefills among
    decodes, empty sequences)."""
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    bound = cu[-1] // block_q + len(query_lens)
    want = {}
    for i, n in enumerate(query_lens):
        first = cu[i] // block_q + i
        for j in range(-(-n // block_q)):
            want[first + j] = (i, cu[i], n, j)
    out = torch.full((bound, 4), -7, dtype=torch.int32, device=device)
    _locate_kernel[(bound,)](torch.tensor(cu, dtype=torch.int32, device=device),
                             out, len(query_lens), BLOCK_Q=block_q, DECODE_LAYOUT=decode_layout)
    got = out.cpu().tolist()
    for q_block in range(bound):
        if q_block in want:
            assert tuple(got[q_block]) == want[q_block], (q_block, got[q_block])
        else:
            assert got[q_block][3] * block_q >= got[q_block][2], (q_block, got[q_block])  # no queries
    assert len(want) == sum(-(-n // block_q) for n in query_lens)


@triton.jit
def _convert_kernel(x_ptr, o_ptr, N: tl.constexpr, DECODE_FNUZ: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, kv_to(tl.load(x_ptr + offs), o_ptr.dtype.element_ty, DECODE_FNUZ))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_fnuz_decoder_is_exact_on_every_byte(out_dtype, device):
    """The kernels' FNUZ decoder (NVIDIA, interpreter) against torch's float8_e4m3fnuz, all
    256 bytes: subnormals, 240 (0x7F, NaN in OCP), no negative zero, 0x80 = NaN."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    out = torch.empty(256, dtype=out_dtype, device=device)
    _convert_kernel[(1,)](codes, out, N=256, DECODE_FNUZ=True)
    want = codes.view(FNUZ_E4M3).to(out_dtype)
    torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(out).sum() == 1 and out[0x7F] == 240 and out[0xFF] == -240
    # The same bytes as OCP mean twice the value (or NaN): not what the decoder returned.
    assert not torch.equal(out[1:0x7F].float(), codes[1:0x7F].view(OCP_E4M3).float())


@pytest.mark.parametrize("fp8_dtype, decode", [(OCP_E4M3, False), (FNUZ_E4M3, True)], ids=["ocp", "fnuz"])
def test_the_grids_fp8_poison_is_nan_where_the_kernels_read_it(fp8_dtype, decode, device):
    """The NaN bytes the grid writes into unowned slots of an fp8 cache (`Fp8Format.nan_byte`)
    are NaN as the kernels convert them: FNUZ through their own decoder (interpreter, NVIDIA),
    OCP through Triton's conversion (GPUs; the interpreter reads 480, interpreter_support.py)."""
    if device == "cpu" and not decode and not interpreter_reads_ocp_nan():
        pytest.skip("triton's interpreter converts OCP e4m3 NaN bytes to +-480; GPUs check this")
    batch = poisoned_batch(BatchSpec((1,), (20,), num_q_heads=2, num_kv_heads=1, head_size=16, fp8_kv=True),
                           device, fp8_dtype=fp8_dtype)
    unowned = batch.k_cache[~batch.owned_slots().to(device)].reshape(-1)[:256]
    out = torch.empty(256, dtype=torch.float32, device=device)
    operand = unowned.view(torch.uint8) if decode else unowned
    _convert_kernel[(1,)](operand.contiguous(), out, N=256, DECODE_FNUZ=decode)
    assert out.isnan().all()


@pytest.mark.parametrize("variant", FP8_VARIANTS)
def test_fnuz_bytes_read_as_ocp_fail_the_comparison(variant, device):
    """The check above can fail: the same FNUZ cache handed over as OCP (its bytes viewed as
    float8_e4m3fn, scales unchanged) gives outputs far from the FNUZ reference."""
    spec = make_spec("gqa4", 64, 16, "prefill_5_18", "float16", "fp8_fnuz", seed=11)
    batch = make_batch(spec, "fp8_fnuz", device)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    as_ocp = (batch.q, batch.k_cache.view(OCP_E4M3), batch.v_cache.view(OCP_E4M3), *batch.args()[3:])
    out = batch.new_output()
    VARIANTS[variant](*as_ocp, out=out, **batch.options)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", FP8_VARIANTS)
def test_fnuz_on_amds_native_path(variant, device):
    """vendor="amd": FNUZ caches go to Triton as fp8e4b8 and are converted natively (what an
    MI300 runs), with AMD's launch configurations."""
    if device == "cpu" and not interpreter_reads_fnuz():
        pytest.skip(INTERPRETER_FNUZ_REASON)
    if device != "cpu" and platform.current().vendor != "amd":
        pytest.skip("AMD's native FNUZ path compiles for AMD GPUs only (Triton's CUDA backend has "
                    "no fp8e4b8); this GPU runs the kernels' decoder in the grid above")
    spec = make_spec("gqa5", 80, 16, "mixed_small", "float16", "all_fnuz", seed=5)
    batch = make_batch(spec, "all_fnuz", device)
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, vendor="amd", **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


def test_grid_covers_both_fp8_formats_on_the_cpu_subset():
    """Every fp8-capable variant meets both formats in the interpreter's subset."""
    fp8_features = {f for *_, f in CPU_SUBSET if FEATURES.get(f, {}).get("fp8_kv")}
    formats = {FP8_DTYPE.get(f, OCP_E4M3) for f in fp8_features}
    assert formats == {OCP_E4M3, FNUZ_E4M3} and all(is_fp8(d) for d in formats)
    assert FP8_VARIANTS and "naive" not in FP8_VARIANTS
