"""The per-vendor decision trees are pure functions of (vendor, features): test them directly."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.batch import BatchSpec, build_batch
from kernels.paged_attention import heuristics
from kernels.paged_attention.heuristics import (
    Config,
    Features,
    choose,
    features_from_call,
    features_from_spec,
)


def _features(num_seqs, query_len, kv_len, *, queries_per_kv=4, head_size=128, num_sms=132,
              block_size=16, dtype="bfloat16", window=0) -> Features:
    return Features(
        num_seqs=num_seqs, num_tokens=num_seqs * query_len, max_query_len=query_len,
        max_kv_len=kv_len, avg_kv_len=float(kv_len), decode_share=float(query_len == 1),
        queries_per_kv=queries_per_kv, num_kv_heads=8, head_size=head_size,
        block_size=block_size, dtype=dtype, fp8_kv=False, num_sms=num_sms, window=window,
    )


GRID = list(itertools.product(
    ["nvidia", "amd"],
    [1, 8, 128],  # sequences
    [1, 2, 17, 2048],  # query length
    [1, 1024, 32768],  # KV length
    [1, 5, 8],  # GQA ratio
    [64, 96, 128, 256],  # head size
))


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@pytest.mark.parametrize("vendor,seqs,q_len,kv_len,qpk,head", GRID)
def test_configs_are_launchable(vendor, seqs, q_len, kv_len, qpk, head):
    f = _features(seqs, q_len, max(kv_len, q_len), queries_per_kv=qpk, head_size=head)
    c = choose(vendor, f)
    assert _is_pow2(c.block_m) and c.block_m >= 16 and c.block_m >= qpk  # whole head groups
    assert c.block_q(qpk) >= 1
    assert _is_pow2(c.tile_size) and c.tile_size >= 16
    assert _is_pow2(c.num_segments) and c.num_segments >= 1
    assert c.num_warps in (1, 2, 4, 8, 16) and c.num_stages >= 1 and c.programs_per_sm >= 0
    assert c.source.startswith(vendor)
    if not heuristics.is_decode_batch(f):
        assert c.num_segments == 1  # prefill has parallelism from its Q-blocks: never split


def test_every_branch_states_its_provenance():
    for vendor, f in itertools.product(["nvidia", "amd"], [
            _features(1, 1, 32768), _features(128, 1, 1024), _features(4, 32, 2048),
            _features(1, 8192, 8192), _features(1, 2048, 2048, head_size=256)]):
        source = choose(vendor, f).source
        assert "sweep" in source or "unmeasured" in source, source
        if vendor == "amd":
            assert "unmeasured" in source


def test_few_long_decodes_are_split_and_many_are_not():
    few_long = choose("nvidia", _features(1, 1, 32768))
    many_short = choose("nvidia", _features(128, 1, 1024))
    assert few_long.num_segments >= 8
    assert many_short.num_segments == 1


def test_segments_fill_the_gpu_but_keep_segments_long():
    f = _features(1, 1, 32768)
    tile = 64
    s = heuristics.num_segments(f, tile)
    assert s * f.num_seqs * f.num_kv_heads >= f.num_sms  # enough programs for every SM
    assert f.max_kv_len / tile / s >= 4  # each segment keeps at least 4 tiles
    short = _features(1, 1, 100)
    assert heuristics.num_segments(short, tile) == 1  # 2 tiles: nothing to split


def test_launch_bound_decodes_spread_their_tiles_over_the_sms():
    """Fewer programs than half the SMs: segments down to one tile, up to one program per SM."""
    def segments(seqs, kv, fill_sms=True):
        return heuristics.num_segments(_features(seqs, 1, kv), 128, fill_sms=fill_sms)
    assert segments(1, 1024) == 8  # 8 tiles, 8 KV heads
    assert segments(1, 8192) == 32  # 8 x 32 programs >= 132
    assert segments(8, 1024) == 4
    assert segments(1, 100) == 1  # one tile: nothing to split
    assert (segments(1, 1024, False), segments(1, 8192, False)) == (1, 8)  # the rule without it
    for seqs, kv in ((32, 1024), (128, 1024), (8, 8192), (1, 32768)):  # enough programs: unchanged
        assert segments(seqs, kv) == segments(seqs, kv, False)
    assert choose("nvidia", _features(1, 1, 8192)).num_segments == 32
    amd = choose("amd", _features(1, 1, 1024))  # AMD: unmeasured there, off
    assert amd.num_segments == heuristics.num_segments(_features(1, 1, 1024), amd.tile_size) == 2


def test_nvidia_prefills_read_block_ids_per_block_and_pipeline_long_ones_deeper():
    """Block ids per cache block with int32 offsets, one program per item, and a third stage
    beyond LONG_PREFILL_KEYS keys per Q-block (H100 labs); Q-blocks seeing up to
    SHORT_PREFILL_KEYS keys take 64 rows, 4 warps, tile 64 and 3 stages (H200 lab); head 256 and
    the 256-row branch take the addressing and the third stage with their own program counts;
    fp8 takes the bf16 rule's addressing, 3 stages and both products in fp16 (H200 lab)."""
    for seqs, q, kv, rows in ((1, 8192, 8192, 128), (1, 16384, 16384, 128), (4, 2048, 8192, 128),
                              (4, 2048, 2048, 64), (8, 1024, 1024, 64), (1, 512, 512, 64),
                              (32, 256, 256, 64)):
        config = choose("nvidia", _features(seqs, q, kv))
        assert (config.block_m, config.num_stages, config.block_vector, config.offsets_32,
                config.programs_per_sm, config.read_ahead) == (rows, 3, True, True, 0, True), (seqs, q, kv)
        assert config.num_warps == (4 if rows == 64 else 8) and config.tile_size == rows
    at = heuristics.SHORT_PREFILL_KEYS
    assert choose("nvidia", _features(1, at, at)).block_m == 64
    assert (choose("nvidia", _features(1, at + 16, at + 16)).block_m,
            choose("nvidia", _features(1, at + 16, at + 16)).num_stages) == (128, 3)
    # a window bounds the keys of a Q-block, however long the prompt: 2 stages, and the
    # persistent grid's 2 programs per SM (H100 lab: both faster under windows of 128 and 1024)
    for q in (512, 8192):
        windowed = choose("nvidia", _features(1, q, 8192, window=1024))
        assert (windowed.num_stages, windowed.programs_per_sm, windowed.block_vector) == (2, 2, True)
    assert heuristics.prefill_q_block_keys(_features(1, 8192, 8192, window=1024), 128) == 1024 + 32 - 1
    assert heuristics.prefill_q_block_keys(_features(1, 8192, 8192, window=4096), 128) == 4096 + 32 - 1
    assert heuristics.prefill_q_block_keys(_features(1, 8192, 8192), 128) == 8192
    assert choose("nvidia", _features(1, 8192, 8192, window=4096)).num_stages == 3
    def picked(config):
        return (config.block_m, config.num_stages, config.programs_per_sm, config.block_vector,
                config.offsets_32)
    assert picked(choose("nvidia", _features(1, 8192, 8192, head_size=256))) == (64, 3, 1, True, True)
    assert picked(choose("nvidia", _features(4, 2048, 2048, head_size=256))) == (64, 2, 0, True, True)
    falcon = dict(queries_per_kv=71, head_size=64)
    assert picked(choose("nvidia", _features(1, 8192, 8192, **falcon))) == (256, 3, 2, True, True)
    assert picked(choose("nvidia", _features(8, 1024, 1024, **falcon))) == (256, 2, 2, True, True)
    assert not choose("amd", _features(1, 8192, 8192)).block_vector
    for shape in ((8, 1024, 1024), (1, 8192, 8192)):  # fp8 under bf16 queries: [fp8-prefill]
        fp8 = dataclasses.replace(_features(*shape), fp8_kv=True)
        assert picked(choose("nvidia", fp8)) == (128, 3, 0, True, True) and choose("nvidia", fp8).qk_fp16
        fp16 = dataclasses.replace(fp8, dtype="float16")  # fp16 queries: new spills with it, the old choice
        assert picked(choose("nvidia", fp16)) == (128, 2, 2, False, False)
        assert not choose("nvidia", fp16).edge_tile
        wide = dataclasses.replace(_features(*shape, head_size=256), fp8_kv=True)
        assert picked(choose("nvidia", wide)) == (64, 2, 1, False, False)


def test_sequence_items_only_for_nvidia_decodes():
    """Sequence work items where they paid (NVIDIA decode batches of several sequences and
    query heads per KV head); AMD's static gate found new SGPR spills with them."""
    assert choose("nvidia", _features(8, 1, 1024)).seq_items
    assert not choose("nvidia", _features(1, 1, 1024)).seq_items
    assert not choose("nvidia", _features(16, 1, 1024, queries_per_kv=1)).seq_items
    assert not choose("nvidia", _features(16, 32, 1024)).seq_items
    assert not choose("nvidia", _features(4, 2048, 2048)).seq_items
    assert not choose("amd", _features(8, 1, 1024)).seq_items


def test_decode_layout_where_decode_items_stay_q_blocks():
    """NVIDIA decode batches whose items are Q-blocks (one query head per KV head) guess the
    decode layout; one sequence has a search of one step (it lost there), sequence items need
    none, prefills never match the layout, and AMD is unmeasured."""
    assert choose("nvidia", _features(16, 1, 1024, queries_per_kv=1)).decode_layout
    assert choose("nvidia", _features(64, 1, 512, queries_per_kv=1)).decode_layout
    assert not choose("nvidia", _features(1, 1, 1024, queries_per_kv=1)).decode_layout
    assert not choose("nvidia", _features(1, 1, 512, queries_per_kv=5)).decode_layout
    assert not choose("nvidia", _features(8, 1, 1024)).decode_layout  # sequence items
    assert not choose("nvidia", _features(16, 32, 1024)).decode_layout
    assert not choose("nvidia", _features(4, 2048, 2048)).decode_layout
    assert not choose("amd", _features(16, 1, 1024, queries_per_kv=1)).decode_layout


def test_narrow_window_decodes_take_small_tiles_and_a_program_per_item():
    """H100 lab: gpt-oss-20b 64x4k under a 128 window 14.8 -> 10.7 us; a 1024 window kept tile 128."""
    narrow = choose("nvidia", _features(16, 1, 8192, queries_per_kv=8, window=128))
    assert (narrow.tile_size, narrow.programs_per_sm) == (64, 0)
    crowded = choose("nvidia", _features(64, 1, 4096, queries_per_kv=8, window=256))  # 512 items
    assert (crowded.tile_size, crowded.programs_per_sm) == (32, 0)  # H100: 40.13 -> 33.41 us
    assert choose("nvidia", _features(64, 1, 4096, head_size=256, window=128)).tile_size == 64
    wide_window = choose("nvidia", _features(16, 1, 4096, window=1024))
    assert (wide_window.tile_size, wide_window.programs_per_sm) == (128, 2)
    assert choose("nvidia", _features(64, 1, 4096, queries_per_kv=8)).tile_size == 128


def test_short_contexts_take_tiles_of_their_length():
    """H100 labs: a 128 x 64-key decode 33.4 -> 16.2 us with tile 16, 2 warps, 4 programs per SM
    (128 and 256 keys kept tile 128 for 8 sequences); short prefills take the keys' power of
    two (8 x 16: 10.44 -> 5.25 us)."""
    short = choose("nvidia", _features(128, 1, 64))
    assert (short.tile_size, short.num_warps, short.programs_per_sm) == (16, 2, 4)
    for kv_len in (128, 256):
        assert (choose("nvidia", _features(8, 1, kv_len)).tile_size,
                choose("nvidia", _features(8, 1, kv_len)).programs_per_sm) == (128, 2)
    assert choose("nvidia", _features(8, 16, 16)).tile_size == 16
    assert choose("nvidia", _features(16, 32, 32)).tile_size == 32
    assert choose("nvidia", _features(16, 32, 4096)).tile_size == 128
    assert choose("amd", _features(128, 1, 64)).tile_size == choose("amd", _features(128, 1, 4096)).tile_size


def test_few_short_decodes_split_into_segments_of_two_tiles():
    """H100 lab: 1-4 sequences (<= a quarter of the SMs in items) of 129-1024 keys split into
    up to 16 segments with a tile of half a segment (1x512 12.09 -> 8.00 us); one tile of 128
    or 64 items stay whole (8x256 lost 7 % split)."""
    def tile_segments(seqs, kv, **kw):
        c = choose("nvidia", _features(seqs, 1, kv, **kw))
        return c.tile_size, c.num_segments
    assert tile_segments(1, 256) == (16, 16)
    assert tile_segments(1, 512) == (16, 16)
    assert tile_segments(1, 1024) == (32, 16)
    assert tile_segments(2, 1024) == (32, 16)
    assert tile_segments(4, 512) == (32, 8)
    assert tile_segments(4, 1024) == (64, 8)
    assert tile_segments(1, 128) == (128, 1)  # one tile of 128: whole
    assert tile_segments(8, 256) == (128, 1)  # 64 items: whole
    assert tile_segments(1, 1025) == (128, 8)  # longer: the fill_sms rule of num_segments
    assert tile_segments(1, 8192) == (128, 32)
    for kv in range(129, 1025):  # every answer a launchable split of the visible tiles
        tile, segments = tile_segments(1, kv)
        assert 16 <= tile <= 128 and segments <= -(-kv // 16) and tile * segments <= 2 * 16 * -(-kv // 16)
    # head 256 (gemma2-9b's 8 KV heads), H100 lab: the split chose the best of five
    # configurations in all five shapes measured (1x256 12.78 -> 7.90 us)
    assert tile_segments(1, 256, head_size=256) == (16, 16)
    assert tile_segments(1, 512, head_size=256) == (16, 16)
    assert tile_segments(1, 1024, head_size=256) == (32, 16)
    assert tile_segments(2, 512, head_size=256) == (16, 16)
    assert tile_segments(4, 1024, head_size=256) == (64, 8)
    assert "unmeasured" not in choose("nvidia", _features(1, 1, 512, head_size=256)).source
    assert heuristics.short_split(_features(1, 1, 512, num_sms=304)) is not None  # MI300's count:
    amd = choose("amd", _features(1, 1, 512))  # but AMD (unmeasured) keeps its tree
    assert amd.tile_size == choose("amd", _features(1, 1, 4096)).tile_size


def test_split_launches_merge_in_one_warp_where_it_was_measured_faster():
    """[reduce-one-warp], H200 lab: the reduction's programs in one warp (0.92-1.00x of 4 on 20 split
    decodes); 4 for heads over 128 and for fewer merges than SMs over segments in tiles of 16 keys (1 x 512
    1.03-1.19x slower with one; 16 x 512 of falcon-7b's 71 query heads 0.97x); AMD keeps Triton's default."""
    def warps(seqs, q, kv, vendor="nvidia", **kw):
        return choose(vendor, _features(seqs, q, kv, **kw)).reduce_warps
    assert warps(32, 1, 4096) == 1  # 2 segments
    assert warps(4, 5, 1024) == 1 and warps(1, 8, 8192) == 1  # multi-token decodes, merged by query
    assert warps(1, 1, 4096) == 1  # 32 segments in tiles of 128
    assert warps(1, 1, 512) == 4  # 16 segments in tiles of 16, 32 merges
    assert warps(16, 1, 512, queries_per_kv=8) == 1  # tiles of 16, 1024 merges
    assert warps(1, 1, 4096, head_size=256) == 4
    assert warps(32, 1, 4096, vendor="amd") == 4
    for seqs, q, kv in itertools.product([1, 4, 32], [1, 2, 8], [256, 512, 4096]):
        c = choose("nvidia", _features(seqs, q, kv))
        assert c.reduce_warps in (1, 4)


def test_many_short_decodes_take_tile_64_two_warps_four_programs_per_sm():
    """H100 lab: 64-128 sequences of 128-2048 keys (>= 3 work items per SM), 1.02-1.33x with
    tile 64, 2 warps, 4 programs per SM, one segment each (2 segments lost 1.5-4 % at 2048
    keys under 4 items per SM); 32 x 256 (256 items) and longer sequences keep the decode
    default."""
    def knobs(seqs, kv, **kw):
        c = choose("nvidia", _features(seqs, 1, kv, **kw))
        return c.tile_size, c.num_warps, c.programs_per_sm, c.num_segments
    assert knobs(64, 128) == (64, 2, 4, 1)
    assert knobs(128, 1024) == (64, 2, 4, 1)
    assert knobs(64, 1024) == (64, 2, 4, 1)
    assert knobs(64, 2048) == (64, 2, 4, 1)  # 512 items: tile 128's rule would split in two
    assert knobs(64, 2048, queries_per_kv=1) == (64, 2, 4, 1)  # one query head per KV head
    assert heuristics.num_segments(_features(64, 1, 2048), 128, fill_sms=True) == 2
    assert knobs(32, 256)[:3] == knobs(64, 4096)[:3] == knobs(128, 8192)[:3] == (128, 4, 2)
    assert knobs(64, 1024, head_size=256)[1:3] == (4, 2)  # head 256: unmeasured, unchanged
    assert knobs(128, 64)[:3] == (16, 2, 4)  # short contexts keep their own branch


def test_fp8_decodes_of_many_items_take_that_shape_at_any_length():
    """H200 lab 2026-11-29: fp8 caches take tile 64, 2 warps, 4 programs per SM, one segment from
    FP8_MANY_ITEMS_PER_SM (64 x 8k, 128 x 4k 1.04-1.05x) where [fp8-wide-tiles] (up to 3 items per
    SM) does not take them; bf16 caches of 4k keys keep the decode default."""
    def knobs(seqs, kv, fp8=True, **kw):
        f = dataclasses.replace(_features(seqs, 1, kv, **kw), fp8_kv=fp8)
        c = choose("nvidia", f)
        return c.tile_size, c.num_warps, c.programs_per_sm, c.num_segments, c.qk_fp16
    assert knobs(64, 8192) == knobs(128, 4096) == knobs(56, 4096) == (64, 2, 4, 1, True)
    assert knobs(64, 4096, block_size=32) == (64, 2, 4, 1, True)
    assert knobs(48, 1024) == (64, 2, 4, 1, True)  # 2.9 per SM of fewer keys than [fp8-wide-tiles]' 2k
    assert knobs(64, 4096, fp8=False)[:3] == (128, 4, 2)  # bf16: [many-items] stops at 2048 keys
    assert knobs(64, 4096, head_size=256)[1:3] == (4, 2)  # head 256 keeps its own branch
    f8 = dataclasses.replace(_features(16, 8, 8192), fp8_kv=True)  # multi-token: unmeasured, unchanged
    assert choose("nvidia", f8).num_warps == 4 and not choose("nvidia", f8).read_ahead


def test_fp8_decodes_read_the_block_table_ahead_in_three_stages():
    """H200 lab 2026-11-29: fp8-cache decodes of heads of 128 read the block table a tile ahead in 3
    stages (1.09-1.28x on 16-128 sequences of 1k-8k keys, blocks 16 and 32, bf16 and fp16 queries);
    from 1.9 items per SM and 2k keys below FP8_MANY_ITEMS_PER_SM, the many-items shape in 2 segments
    (1.06-1.12x over the read-ahead alone). A window of 128 lost with it (1.10x); multi-token, short,
    split, other heads and AMD are unmeasured and keep their choice."""
    def knobs(seqs, kv, fp8=True, vendor="nvidia", q=1, **kw):
        c = choose(vendor, dataclasses.replace(_features(seqs, q, kv, **kw), fp8_kv=fp8))
        return c.read_ahead, c.num_stages, c.tile_size, c.num_warps, c.programs_per_sm, c.num_segments
    for seqs, kv in ((64, 4096), (64, 8192), (128, 4096)):
        assert knobs(seqs, kv) == (True, 3, 64, 2, 4, 1)
        assert knobs(seqs, kv, block_size=32) == knobs(seqs, kv, dtype="float16") == (True, 3, 64, 2, 4, 1)
    for kv in (2048, 4096, 8192):  # 256 items: 1.94 per SM, [fp8-wide-tiles]
        assert knobs(32, kv) == (True, 3, 128, 4, 3, 1)
    assert knobs(32, 1024)[:4] == (True, 3, 128, 4)  # below FP8_WIDE_MIN_KEYS: one program each
    assert knobs(16, 1024)[:4] == (True, 3, 128, 4)
    assert knobs(64, 4096, fp8=False)[:2] == (False, 2)  # bf16 caches: unchanged
    assert knobs(16, 4096, window=128)[:2] == (False, 2)  # narrow window: lost
    assert knobs(16, 8192, q=8)[:2] == (False, 2)  # multi-token: unmeasured
    assert knobs(64, 4096, head_size=64)[:2] == knobs(64, 4096, head_size=256)[:2] == (False, 2)
    assert knobs(128, 64)[:2] == (False, 2)  # short context
    assert knobs(1, 1024)[:2] == (False, 2)  # launch-bound, split
    assert knobs(64, 4096, vendor="amd")[:2] == (False, 2)


@pytest.mark.parametrize("seqs,kv,segments", [
    (16, 8192, 2), (16, 4096, 2), (24, 4096, 2), (32, 2048, 1), (32, 4096, 1), (32, 32768, 1), (40, 4096, 1),
    (48, 4096, 1), (8, 8192, 4), (12, 8192, 4), (8, 16384, 4), (4, 32768, 8), (2, 65536, 16)])
def test_fp8_decodes_of_up_to_three_items_per_sm_take_wide_tiles(seqs, kv, segments):
    """[fp8-wide-tiles]: fp8 decodes of heads of 128 with up to FP8_WIDE_PROGRAMS_PER_SM items per SM
    (396 on 132 SMs): tiles of 128, 4 warps, 3 stages read ahead, as many segments (a power of two) as
    fit the GPU at once where each keeps >= 2k keys (H200 2026-11-30: 32 x 4k 0.956x, 16 x 8k 0.82x,
    8 x 8k in 4 segments 0.85x, 4 x 32k in 8 0.83x, 48 x 4k 0.986x)."""
    f = dataclasses.replace(_features(seqs, 1, kv), fp8_kv=True)
    c = choose("nvidia", f)
    assert (c.tile_size, c.num_warps, c.num_stages, c.read_ahead) == (128, 4, 3, True)
    assert (c.num_segments, c.programs_per_sm) == (segments, heuristics.FP8_WIDE_PROGRAMS_PER_SM)
    assert "tiles of 128, 4 warps, 3 programs per SM" in c.source
    assert choose("nvidia", dataclasses.replace(f, block_size=32)).num_segments == segments


@pytest.mark.parametrize("case", ["short-segments", "few-keys", "many", "short", "head64", "bf16", "amd",
                                  "multi-token"])
def test_fp8_wide_tiles_leave_what_they_were_not_measured_on(case):
    """Segments of fewer than 2k keys (8 x 4k in 4 segments: 1.01x, in 2: 1.12x; 16 x 2k), more than 3
    items per SM (64 x 4k lost 1.28x), short contexts, other heads, bf16 caches, AMD and multi-token
    decodes keep their rules."""
    seqs, kv, q, vendor = {"short-segments": (8, 4096, 1, "nvidia"), "few-keys": (16, 2048, 1, "nvidia"),
                           "many": (64, 4096, 1, "nvidia"), "short": (32, 1024, 1, "nvidia"),
                           "multi-token": (32, 4096, 8, "nvidia"),
                           "amd": (32, 4096, 1, "amd")}.get(case, (32, 4096, 1, "nvidia"))
    kw = {"head64": dict(head_size=64)}.get(case, {})
    f = dataclasses.replace(_features(seqs, q, kv, **kw), fp8_kv=case != "bf16")
    assert "tiles of 128, 4 warps, 3 programs per SM" not in choose(vendor, f).source


def test_fp8_wide_tiles_fit_the_gpu_at_once_with_segments_of_2k_keys():
    """Over decodes of 1-512 sequences of 1k-128k keys, 1-8 KV heads, 16-148 SMs: wherever the rule takes a
    decode, every program runs at once (items x segments <= 3 per SM), each segment keeps >= 2k keys,
    the segments are a power of two, and twice as many would break one of the two."""
    taken = 0
    for seqs, kv, heads, sms in itertools.product((1, 2, 3, 8, 12, 16, 24, 32, 48, 64, 96, 512),
                                                   (1024, 2048, 3000, 4096, 8192, 32768, 131072),
                                                   (1, 2, 4, 8), (16, 132, 148)):
        f = dataclasses.replace(_features(seqs, 1, kv, num_sms=sms), fp8_kv=True, num_kv_heads=heads)
        c = choose("nvidia", f)
        if "tiles of 128, 4 warps, 3 programs per SM" not in c.source:
            continue
        taken += 1
        s = c.num_segments
        assert s & (s - 1) == 0 and f.kv_items * s <= heuristics.FP8_WIDE_PROGRAMS_PER_SM * sms
        assert kv >= heuristics.FP8_WIDE_MIN_KEYS * s
        assert (f.kv_items * 2 * s > heuristics.FP8_WIDE_PROGRAMS_PER_SM * sms
                or kv < heuristics.FP8_WIDE_MIN_KEYS * 2 * s or 2 * s > heuristics.MAX_SEGMENTS)
    assert taken >= 50


@pytest.mark.parametrize("seqs,q,kv,heads,ahead", [
    (64, 2, 8192, 8, True), (64, 8, 8192, 8, True), (64, 5, 8192, 8, True),
    (64, 2, 8192, 4, False),  # qwen2.5-7b's 256 items: lost 0.4-1.3 %
    (64, 2, 4096, 8, False), (32, 2, 8192, 8, False), (64, 1, 8192, 8, False)])
def test_multi_token_segments_of_8k_keys_filling_the_sms_read_ahead(seqs, q, kv, heads, ahead):
    """[filled-segment-ahead]: 2-8 queries a sequence, segments of >= 8k keys and >= 3 items x segments per
    SM: the block table a tile ahead, 3 stages (H200 2026-11-30, latency gate 0.991-0.997 on seven 64 x 8k
    rows). Fewer items, fewer keys and one-query decodes keep 2 stages."""
    f = dataclasses.replace(_features(seqs, q, kv), num_kv_heads=heads)
    c = choose("nvidia", f)
    assert (c.read_ahead, c.num_stages) == ((True, 3) if ahead else (False, 2))
    assert ("segments of >= 8k keys, 3 items per SM" in c.source) == ahead


def test_decodes_of_narrow_heads_in_tiles_of_128_take_a_third_stage():
    """H200 lab 2026-11-29: bf16 decodes with heads of 64 (gpt-oss-20b: 8 query heads per KV head),
    Q-blocks of at most 32 rows and tiles of 128 won 1.03-1.07x with 3 stages on 11 rows (1-64
    sequences, 1k-32k keys, 1, 2 and 4 queries); falcon-7b's 128-row Q-blocks lost 1.04-1.07x, heads
    of 128 went both ways, fp8 caches are unmeasured: all three keep 2 stages."""
    def stages(seqs, q, kv, fp8=False, **kw):
        f = dataclasses.replace(_features(seqs, q, kv, **kw), fp8_kv=fp8)
        c = choose("nvidia", f)
        return c.tile_size, c.block_m, c.num_stages
    narrow = {"queries_per_kv": 8, "head_size": 64}
    assert stages(16, 1, 8192, **narrow) == (128, 16, 3)
    assert stages(64, 2, 8192, **narrow) == (128, 16, 3)  # 2 queries: 16 rows
    assert stages(16, 4, 8192, **narrow) == (128, 32, 3)  # 4 queries: 32 rows
    assert stages(1, 1, 32768, **narrow) == (128, 16, 3)
    assert stages(16, 1, 8192, queries_per_kv=71, head_size=64)[1:] == (128, 2)  # falcon-7b (MQA)
    assert stages(16, 1, 8192, queries_per_kv=8, head_size=128)[2] == 2
    assert stages(16, 1, 8192, fp8=True, **narrow)[2] == 2
    assert stages(16, 8, 8192, **narrow)[1:] == (64, 3)  # 64 rows: [multi-token-deep]'s own stages
    assert stages(128, 1, 64, **narrow)[0] == 16  # short contexts keep their own branch
    assert stages(16, 1, 8192, **narrow, window=128)[0] < 128  # narrow windows too


def test_multi_token_decodes_of_narrow_heads_read_the_block_table_a_tile_ahead():
    """[narrow-read-ahead], H200 round 17 (2026-11-29): gpt-oss-20b's 2- and 4-query decodes in 3
    stages ran 1.05-1.21x faster reading the block table a tile ahead; one-query decodes are
    unmeasured with it and keep reading in step, as do heads of 128 and fp8 caches."""
    def ahead(seqs, q, kv, fp8=False, **kw):
        f = dataclasses.replace(_features(seqs, q, kv, **kw), fp8_kv=fp8)
        c = choose("nvidia", f)
        return c.read_ahead, c.num_stages, c.block_vector
    narrow = {"queries_per_kv": 8, "head_size": 64}
    assert ahead(64, 2, 8192, **narrow) == (True, 3, False)
    assert ahead(16, 4, 8192, **narrow) == (True, 3, False)
    assert ahead(4, 2, 8192, **narrow) == (True, 3, False)
    assert ahead(16, 1, 8192, **narrow) == (False, 3, False)  # one query: [narrow-head-stages] alone
    assert ahead(16, 2, 8192, queries_per_kv=8, head_size=128)[0] is False
    assert ahead(16, 2, 8192, fp8=True, **narrow)[0] is False
    assert "read the block table a tile ahead" in choose("nvidia", _features(64, 2, 8192, **narrow)).source
    assert "a tile ahead" not in choose("nvidia", _features(16, 1, 8192, **narrow)).source


def test_prefill_of_many_query_heads_per_kv_head_takes_256_rows():
    """H100 lab: falcon-7b (71 query heads on one KV head, head 64) fills 71 of 128 rows, one
    token per Q-block; 256 rows (three tokens) and tile 64 ran its prefills and mixed batches
    1.7-2.1x faster. Head groups that fill 128 rows, and larger heads, keep the default."""
    falcon = choose("nvidia", _features(16, 512, 4096, queries_per_kv=71, head_size=64))
    assert (falcon.block_m, falcon.tile_size, falcon.num_warps) == (256, 64, 8)
    assert falcon.block_q(71) == 3 and heuristics.prefill_row_use(71, 128) < heuristics.MIN_PREFILL_ROW_USE
    for qpk in (1, 2, 4, 5, 8, 16, 32):
        assert heuristics.prefill_row_use(qpk, 128) >= heuristics.MIN_PREFILL_ROW_USE
        assert choose("nvidia", _features(16, 512, 4096, queries_per_kv=qpk, head_size=64)).block_m == 128
    assert choose("nvidia", _features(16, 512, 4096, queries_per_kv=71, head_size=128)).block_m == 128
    assert choose("nvidia", _features(16, 1, 4096, queries_per_kv=71, head_size=64)).block_m == 128  # decode
    assert choose("amd", _features(16, 512, 4096, queries_per_kv=71, head_size=64)).block_m != 256


def test_causal_edge_tiles_of_the_nvidia_prefill():
    """H100 labs: the NVIDIA prefill (128 rows with tiles of 128, 256 rows with tiles of 64)
    cuts its causal edge into half tiles up to EDGE_HALF_MAX_KEYS keys per Q-block and into
    quarter tiles beyond (1.02-1.09x); under a window (the edge then spans the window's
    tiles), for head 256, in decodes and on AMD the edge keeps whole tiles."""
    limit, short = heuristics.EDGE_HALF_MAX_KEYS, heuristics.SHORT_PREFILL_KEYS
    assert heuristics.causal_edge_tile(_features(1, limit, limit), 128, 128) == 64
    assert heuristics.causal_edge_tile(_features(1, limit + 16, limit + 16), 128, 128) == 32
    for kv, rows, edge in ((512, 64, 32), (short, 64, 32), (short + 16, 128, 32), (8192, 128, 32)):
        config = choose("nvidia", _features(1, kv, kv))  # up to SHORT_PREFILL_KEYS: [short-prefill-rows]
        assert (config.block_m, config.tile_size, config.edge_tile) == (rows, rows, edge), kv
    assert choose("nvidia", _features(4, 512, 4096)).edge_tile == 32  # chunks after a context
    for kv, edge in ((512, 32), (4096, 16)):  # falcon-7b: 71 query heads on one KV head, head 64
        config = choose("nvidia", _features(16, 512, kv, queries_per_kv=71, head_size=64))
        assert (config.block_m, config.tile_size, config.edge_tile) == (256, 64, edge), kv
    fp8 = dataclasses.replace(_features(1, 8192, 8192), fp8_kv=True)
    assert choose("nvidia", fp8).edge_tile == 32  # [fp8-prefill]
    for features in (_features(1, 8192, 8192, window=1024), _features(8, 1, 1024),
                     _features(16, 512, 4096, queries_per_kv=71, head_size=64, window=1024),
                     _features(4, 2048, 2048, head_size=256)):
        assert choose("nvidia", features).edge_tile == 0
    for features in (_features(8, 1024, 1024), _features(1, 8192, 8192), _features(16, 32, 1024)):
        assert choose("amd", features).edge_tile == 0


def test_int32_offsets_in_the_nvidia_decodes_where_measured():
    """H100 lab (paired, 3 processes): int32 cache offsets made 11 of 15 decodes 0.6-8.8 %
    faster and none of the longer ones slower; off for short contexts (128 x 64 keys lost
    2.2 %), sliding windows (unmeasured), heads padded to a power of two (new spills on
    sm_100), and on AMD; fp8 caches on since the H200 lab (1.08x, with both products in fp16)."""
    fp8 = dataclasses.replace(_features(8, 1, 1024), fp8_kv=True)
    for features in (_features(1, 1, 512), _features(8, 1, 1024), _features(32, 1, 8192),
                     _features(128, 1, 1024), _features(16, 1, 1024, queries_per_kv=1),
                     _features(1, 1, 512, head_size=256), fp8):
        assert choose("nvidia", features).offsets_32, features
    for features in (_features(128, 1, 64), _features(64, 1, 4096, window=128),
                     _features(16, 1, 4096, window=1024),
                     _features(16, 1, 1024, queries_per_kv=1, head_size=80)):
        assert not choose("nvidia", features).offsets_32, features
    assert not choose("amd", _features(8, 1, 1024)).offsets_32


@pytest.mark.parametrize("edge", [8, 48, 256])
def test_an_edge_tile_that_does_not_divide_the_tile_is_refused(edge):
    with pytest.raises(ValueError, match="edge_tile"):
        Config(128, 128, 1, num_warps=8, num_stages=2, edge_tile=edge)


def test_fused_reduce_is_off_where_it_lost():
    """H100 lab: merging in the attention kernel saved 25-50 us of host time per call but cost
    device time (llama3-8b 1 x 1k 10.0 -> 13.6 us graph, falcon-7b 14.9 -> 72.2): off."""
    for features in (_features(1, 1, 1024), _features(8, 1, 1024), _features(1, 1, 32768)):
        config = choose("nvidia", features)
        assert config.num_segments > 1 and not config.fused_reduce


def test_block_table_read_ahead_only_where_measured():
    """On in the NVIDIA prefill branch (H100 lab: 1.2-1.3x); off for decodes (no gain, new
    spills) and wherever unmeasured (AMD, head 256, short prefill chunks)."""
    assert choose("nvidia", _features(4, 2048, 2048)).read_ahead
    assert not choose("nvidia", _features(8, 1, 1024)).read_ahead
    assert not choose("nvidia", _features(16, 32, 1024)).read_ahead
    assert not choose("nvidia", _features(1, 8192, 8192, head_size=256)).read_ahead
    assert not choose("amd", _features(4, 2048, 2048)).read_ahead


def test_windowed_decode_is_sized_by_its_visible_keys():
    """A window of 128 keys at 4k context: segments for ~2 tiles, not for 32."""
    full = _features(8, 1, 4096)
    windowed = _features(8, 1, 4096, window=128)
    assert windowed.visible_kv_len == 128 and full.visible_kv_len == 4096
    assert heuristics.visible_tiles(windowed, 128) == 2  # a window straddles at most 2 tiles
    assert heuristics.visible_tiles(full, 128) == 32
    assert heuristics.num_segments(windowed, 128) == 1
    assert heuristics.num_segments(full, 128) > 1
    wide = _features(8, 1, 4096, window=8192)  # a window wider than the context changes nothing
    assert wide.visible_kv_len == 4096
    assert heuristics.num_segments(wide, 128) == heuristics.num_segments(full, 128)
    chunk = _features(4, 17, 4096, window=128)
    assert chunk.visible_kv_len == 128 + 16  # the Q-block's queries see 16 more keys


def test_window_reaches_the_features_from_calls_and_specs():
    spec = BatchSpec((1, 1), (700, 300), num_q_heads=8, num_kv_heads=2, head_size=64, sliding_window=37)
    b = build_batch(spec)
    assert features_from_spec(spec, num_sms=132).window == 37
    assert features_from_call(b.q, b.k_cache, b.block_table, sliding_window=37).window == 37
    assert features_from_call(b.q, b.k_cache, b.block_table).window == 0


def test_decode_uses_the_smallest_q_block_and_prefill_a_large_one():
    for vendor in ("nvidia", "amd"):
        decode = choose(vendor, _features(8, 1, 8192, queries_per_kv=4))
        prefill = choose(vendor, _features(1, 8192, 8192, queries_per_kv=4))
        assert decode.block_m == 16
        assert prefill.block_m >= 64


def test_amd_knobs_only_on_amd():
    f = _features(1, 2048, 2048)
    assert choose("nvidia", f).vendor_options("nvidia") == {}
    amd = choose("amd", f)
    assert amd.vendor_options("nvidia") == {}
    assert set(amd.vendor_options("amd")) <= {"waves_per_eu", "matrix_instr_nonkdim"}


def test_unknown_vendor_is_refused():
    with pytest.raises(ValueError, match="^vendor:"):
        choose("cpu", _features(1, 1, 16))


def test_features_from_shapes_are_bounds_and_hints_make_them_exact():
    spec = BatchSpec((1, 5, 17, 1), (300, 18, 40, 1), num_q_heads=8, num_kv_heads=2, head_size=64)
    b = build_batch(spec)
    exact = features_from_spec(spec, num_sms=132)
    bound = features_from_call(b.q, b.k_cache, b.block_table, num_sms=132)
    assert bound.max_query_len >= exact.max_query_len == 17
    assert bound.max_kv_len >= exact.max_kv_len == 300
    assert bound.decode_share <= exact.decode_share == 0.5
    hinted = features_from_call(b.q, b.k_cache, b.block_table, max_seqlen_q=17, max_seqlen_k=300,
                                num_sms=132)
    assert (hinted.max_query_len, hinted.max_kv_len) == (17, 300)
    assert hinted.queries_per_kv == 4 and hinted.head_size == 64 and hinted.dtype == "float16"


@pytest.mark.parametrize("chooser", ["nvidia", "amd", "parallel"])
def test_choices_read_the_kv_length_only_through_its_class(chooser):
    """Planning keeps a choice per `kv_len_class`, not per KV length (a decode loop's
    max_seqlen_k hint grows by one each step): every length of one class must choose alike.
    Windows of 100 and 890 keys end inside a granule (890: its straddling tile decides a
    1-sequence decode's segments)."""
    from kernels.paged_attention import parallel

    def pick(f):
        return parallel.choose("nvidia", f) if chooser == "parallel" else choose(chooser, f)
    for seqs, q_len, qpk, head, window in itertools.product(
            [1, 128], [1, 17, 200, 512], [1, 8], [128, 256], [0, 100, 890]):
        chosen = {}
        for kv_len in range(q_len, 2100):
            f = _features(seqs, q_len, kv_len, queries_per_kv=qpk, head_size=head, window=window)
            c = pick(f)
            assert chosen.setdefault(heuristics.kv_len_class(kv_len, q_len, window), c) == c, f


@pytest.mark.parametrize("prompts, kv, head, fp8, on", [
    ((512,) * 4, None, 128, False, True),  # 0.935x (H200 2026-12-04)
    ((512,) * 32, None, 128, False, True),  # 0.845x
    ((256,) * 16, None, 128, False, False),  # 0.947x: [ws-large-batches]' (4096 tokens, a mean of 256)
    ((256,) * 64, None, 128, False, False),  # 0.912x: [ws-large-batches]'
    ((256,) * 8, None, 128, False, False),  # lost 1.026x
    ((128,) * 128, None, 128, False, False),  # 0.975x, 128 x 32 lost 1.022x: not taken
    ((512,), None, 128, False, False),  # even
    ((256,) * 32, None, 64, False, False),  # heads of 64 lost 1.21x
    ((256,) * 32, None, 128, True, False),  # fp8 caches: [ws-large-batches]
    ((512,) * 12 + (1,) * 4, (512,) * 12 + (4096,) * 4, 128, False, False),  # decodes of long contexts
    ((512,) * 16, (2048,) * 16, 128, False, False),  # chunks over a context: [ws-large-batches]
    ((512,) * 8 + (128,) * 8, None, 128, False, False),  # unlike lengths: [ws-large-batches]
])
def test_batches_of_short_prompts_take_the_gluon_kernel_where_measured(prompts, kv, head, fp8, on):
    """[ws-short-prompts] as the tree reads a call with vLLM's hints, on the measured points and off
    beyond them (where [ws-large-batches] may take the batch); from shapes alone (no hints) never."""
    spec = BatchSpec(prompts, kv or prompts, num_q_heads=32, num_kv_heads=8, head_size=head, fp8_kv=fp8,
                     dtype="bfloat16")
    batch = build_batch(spec, "cpu", fill=False)
    hinted = features_from_call(batch.q, batch.k_cache, batch.block_table, max_seqlen_q=max(prompts),
                                max_seqlen_k=max(kv or prompts))
    assert heuristics.short_prompts_prefill(hinted) == on
    assert choose("nvidia", hinted).warp_specialized == (
        on or heuristics.long_prefill(hinted) or heuristics.large_prefill_batch(hinted))
    assert not heuristics.short_prompts_prefill(features_from_call(batch.q, batch.k_cache, batch.block_table))


@given(st.lists(st.integers(1, 2048), min_size=1, max_size=64), st.booleans())
@settings(max_examples=200, deadline=None)
def test_short_prompts_never_fire_from_shapes_alone_or_where_decodes_dominate(lengths, hinted):
    """Without `max_seqlen_q` the longest prompt's bound (every token but one a sequence) is far from the
    mean: the rule stays off, whatever the batch; with it, a batch whose mean prompt is under 3/4 of the
    longest stays off."""
    num_tokens = sum(lengths)
    f = Features(num_seqs=len(lengths), num_tokens=num_tokens,
                 max_query_len=max(lengths) if hinted else num_tokens - len(lengths) + 1,
                 max_kv_len=max(lengths), avg_kv_len=float(max(lengths)), decode_share=0.0, queries_per_kv=4,
                 num_kv_heads=8, head_size=128, block_size=16, dtype="bfloat16", fp8_kv=False, num_sms=132)
    if heuristics.short_prompts_prefill(f):
        assert hinted and 4 * num_tokens >= 3 * len(lengths) * max(lengths) and len(lengths) >= 4


@pytest.mark.parametrize("queries, keys, q_heads, kv_heads, head, dtype, fp8, on", [
    # H200 2026-12-04, the Gluon kernel's time over the tree's before the rule
    ((1024,) * 8 + (1,) * 8, (1024,) * 16, 32, 8, 128, "bfloat16", False, True),  # 0.83x
    ((1024,) * 16 + (1,) * 48, (1024,) * 64, 32, 8, 128, "bfloat16", False, True),  # 3 decodes a prompt 0.99x
    ((512,) * 8 + (1,) * 8, (512,) * 16, 32, 8, 128, "bfloat16", False, True),  # 0.98x
    ((1024,) * 16 + (1,) * 16, (1024,) * 32, 28, 4, 128, "bfloat16", False, True),  # qwen2.5-7b 0.84x
    ((256,) * 16, (2048,) * 16, 32, 8, 128, "bfloat16", False, True),  # chunks 0.75x
    ((512,) * 8, (512,) * 8, 32, 8, 128, "bfloat16", True, True),  # e4m3 0.78x
    ((256,) * 32, (256,) * 32, 32, 8, 128, "bfloat16", True, True),  # e4m3 0.88x
    ((256,) * 32, (256,) * 32, 32, 8, 128, "float16", True, True),  # fp16 queries over e4m3 0.70x
    ((256,) * 16 + (1,) * 16, (2048,) * 32, 32, 8, 128, "bfloat16", False, False),  # mean 128: 0.91-1.006x
    ((300,) * 32 + (1,) * 32, (512,) * 64, 32, 8, 128, "float16", False, False),  # mean 159 lost 1.13x
    ((256,) * 8, (256,) * 8, 32, 8, 128, "bfloat16", False, False),  # 2048 tokens: lost 1.026x
    ((128,) * 32, (128,) * 32, 32, 8, 128, "bfloat16", False, False),  # prompts of 128: lost 1.022x
    ((256,) * 32, (256,) * 32, 64, 8, 64, "bfloat16", False, False),  # heads of 64: lost 1.21x
])
def test_large_batches_take_the_gluon_kernel_where_measured(queries, keys, q_heads, kv_heads, head, dtype,
                                                            fp8, on):
    """[ws-large-batches] on at the measured points (decodes beside prompts, chunks, e4m3 caches), off
    where the Gluon kernel lost or was not measured; alike with vLLM's hints and from shapes alone, since it
    reads only counts the shapes hold."""
    spec = BatchSpec(queries, keys, num_q_heads=q_heads, num_kv_heads=kv_heads, head_size=head, fp8_kv=fp8,
                     dtype=dtype)
    batch = build_batch(spec, "cpu", fill=False)
    hinted = features_from_call(batch.q, batch.k_cache, batch.block_table, max_seqlen_q=max(queries),
                                max_seqlen_k=max(keys))
    assert heuristics.large_prefill_batch(hinted) == on
    assert heuristics.large_prefill_batch(features_from_call(batch.q, batch.k_cache, batch.block_table)) == on
    if on:
        assert choose("nvidia", hinted).warp_specialized


@given(st.lists(st.integers(1, 4096), min_size=1, max_size=96), st.booleans(), st.integers(1, 8192))
@settings(max_examples=300, deadline=None)
def test_large_batches_read_only_what_the_shapes_hold(lengths, fp8, context):
    """The rule's answer is the same with vLLM's hints and without (the longest lengths only bound from
    shapes), whatever the contexts; where it fires, the batch has >= WS_BATCH_TOKENS tokens and its prompts
    hold >= WS_BATCH_MEAN_QUERIES queries per sequence, decodes counted."""
    num_tokens, kv = sum(lengths), max(max(lengths), context)

    def features(hinted: bool) -> Features:
        return Features(num_seqs=len(lengths), num_tokens=num_tokens,
                        max_query_len=max(lengths) if hinted else num_tokens - len(lengths) + 1,
                        max_kv_len=kv if hinted else 16 * -(-kv // 16) * 2, avg_kv_len=float(kv),
                        decode_share=0.0, queries_per_kv=4, num_kv_heads=8, head_size=128, block_size=16,
                        dtype="bfloat16", fp8_kv=fp8, num_sms=132)
    on = heuristics.large_prefill_batch(features(True))
    assert heuristics.large_prefill_batch(features(False)) == on
    if on:
        assert num_tokens >= heuristics.WS_BATCH_TOKENS
        assert num_tokens >= heuristics.WS_BATCH_MEAN_QUERIES * len(lengths)
        assert choose("nvidia", features(True)).warp_specialized


@pytest.mark.parametrize("prompts", [(128,) * 3, (100, 200, 37)])
def test_short_prompts_in_tiles_of_32_match_the_reference(prompts, device):
    """[short-prompt-tile]: the NVIDIA tree's choice for bf16 prompts of <= 256 keys (64 rows, tiles of 32,
    the causal edge of 32), poisoned, against the fp32 reference: on a GPU in bf16 as chosen, in the
    interpreter (which has no bf16) the same launch configuration over fp16."""
    from interpreter_support import planned_check

    from kernels import VARIANTS

    dtype = "float16" if device == "cpu" else "bfloat16"
    spec = BatchSpec(prompts, prompts, num_q_heads=8, num_kv_heads=2, head_size=128, dtype=dtype, seed=5)
    chosen = choose("nvidia", features_from_spec(dataclasses.replace(spec, dtype="bfloat16"), 132))
    assert chosen.tile_size == 32 and chosen.block_m == 64 and not chosen.warp_specialized
    batch = build_batch(spec, device, poison=True)
    out = batch.new_output()  # NaN: an unwritten element fails
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=chosen)
    VARIANTS["static_grid"](*batch.args(), out=out, config=chosen, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


def test_decode_only_batch_is_recognised_from_shapes():
    b = build_batch(BatchSpec((1, 1, 1), (40, 9, 300), num_q_heads=8, num_kv_heads=2, head_size=64))
    f = features_from_call(b.q, b.k_cache, b.block_table)
    assert f.decode_only and f.decode_share == 1.0 and heuristics.is_decode_batch(f)


def test_features_never_read_device_values(monkeypatch):
    b = build_batch(BatchSpec((2, 3), (10, 20), num_q_heads=4, num_kv_heads=2, head_size=64))

    def forbidden(*_a, **_k):
        raise AssertionError("features read tensor values (a host sync on a GPU)")
    monkeypatch.setattr(torch.Tensor, "tolist", forbidden)
    monkeypatch.setattr(torch.Tensor, "item", forbidden)
    features_from_call(b.q, b.k_cache, b.block_table)


@pytest.mark.parametrize("variant", ["flex_tile", "static_grid"])
def test_planning_for_another_vendor_uses_its_tree(variant):
    """The `vendor` hint plans with that vendor's tree and knobs (the static gate's path)."""
    from kernels import VARIANTS
    b = build_batch(BatchSpec((1, 1), (3000, 40), num_q_heads=8, num_kv_heads=2, head_size=64))
    plans = {}
    for vendor in ("nvidia", "amd"):
        _, launches = VARIANTS[variant].plan(*b.args(), vendor=vendor, **b.options)
        f = features_from_call(b.q, b.k_cache, b.block_table, vendor=vendor)
        plans[vendor] = (launches[0], choose(vendor, f))
    for vendor, (launch, config) in plans.items():
        assert launch.constexprs["TILE_SIZE"] == config.tile_size
        assert launch.num_warps == config.num_warps and launch.num_stages == config.num_stages
        assert launch.vendor_options == config.vendor_options(vendor)
    assert plans["amd"][0].vendor_options and not plans["nvidia"][0].vendor_options


_RULE = re.compile(r"#.*\[([a-z0-9-]+)\] (H100|H200) (2026-\d\d-\d\d)")
_RERUN = re.compile(r"tune (?:--suite ([\w-]+) )?--scenarios '([^']+)'")


def test_every_nvidia_rule_has_one_line_of_provenance_that_resolves():
    """Each rule's line in `_nvidia` (and the branches it wraps) names its lab ([id], in
    docs/kernels.md), the GPU, the date and a re-run whose glob selects a scenario of its suite: a
    line that rots fails here."""
    from perf import scenarios

    source = inspect.getsource(heuristics._nvidia) + inspect.getsource(heuristics._nvidia_branches)
    docs = (Path(__file__).parents[2] / "docs" / "kernels.md").read_text()
    lines = [line for line in source.splitlines() if _RULE.search(line)]
    assert len(lines) >= 15, "the NVIDIA tree lost its provenance lines"
    for line in lines:
        lab = _RULE.search(line).group(1)
        assert f"[{lab}]" in docs, f"docs/kernels.md has no lab notes for [{lab}]"
        rerun = _RERUN.search(line)
        assert rerun, f"no re-run in: {line.strip()}"
        suite, glob = rerun.group(1) or "heuristics", rerun.group(2)
        assert any(scenarios.glob_matches(s.name, glob) for s in scenarios.suite(suite)), (suite, glob)
    comments = [line for line in source.splitlines() if line.strip().startswith("#")]
    assert len(comments) <= len(lines) + 8, "lab notes belong in docs/kernels.md, not in the tree"


@pytest.mark.parametrize("seqs,q,kv,head,expected", [
    (8, 1, 8192, 128, 4), (16, 2, 8192, 128, 2), (4, 1, 4096, 128, 8), (4, 4, 32768, 128, 8),
    (1, 1, 8192, 128, 32),  # few items: as many segments as before
])
def test_decode_segments_fill_about_two_programs_per_sm(seqs, q, kv, head, expected):
    """[decode-segments]: a bf16 decode that [segments] splits takes the largest power of two keeping
    items x segments within DECODE_PROGRAMS_PER_SM programs per SM (8 x 8k: 64 items, 4 segments)."""
    f = _features(seqs, q, kv, head_size=head)
    config = heuristics.choose("nvidia", f)
    assert config.num_segments == expected
    assert expected == heuristics.multi_token_segments(f, config.tile_size, heuristics.DECODE_PROGRAMS_PER_SM)
    assert f.kv_items * expected <= heuristics.DECODE_PROGRAMS_PER_SM * f.num_sms or expected == 32
    assert heuristics.num_segments(f, config.tile_size, fill_sms=True) > 1


@pytest.mark.parametrize("case", ["head256", "fp8", "window", "whole"])
def test_decode_segments_leave_what_they_were_not_measured_on(case):
    """Heads of 256 (gemma2-9b 16 x 4k lost 1.085x), fp8 caches and windows (unmeasured) keep
    [segments]; a decode [segments] keeps whole stays whole."""
    kw = {"head256": dict(head_size=256), "window": dict(window=2048)}.get(case, {})
    f = _features(16, 1, 1024 if case == "whole" else 4096, **kw)
    f = dataclasses.replace(f, fp8_kv=case == "fp8")
    config = heuristics.choose("nvidia", f)
    assert "2 programs per SM" not in config.source
    if case == "whole":
        assert config.num_segments == heuristics.num_segments(f, config.tile_size, fill_sms=True) == 1


def test_a_decode_source_names_the_reduction_by_query_only_where_it_splits():
    """[reduce-by-query] sets the knob for every decode of more than one query, but a sequence kept
    whole has no reduction: its source line says so only where segments are more than one."""
    seen = {True: 0, False: 0}
    for seqs, q, kv in itertools.product((1, 4, 16, 64, 256), (2, 4), (1024, 8192, 32768)):
        c = choose("nvidia", _features(seqs, q, kv, queries_per_kv=8, head_size=128))
        assert c.reduce_by_query
        assert ("the reduction an item per query" in c.source) == (c.num_segments > 1), (seqs, q, kv)
        seen[c.num_segments > 1] += 1
    assert seen[True] and seen[False]  # both kinds met
