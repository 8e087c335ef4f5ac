"""Multi-token decode (speculative decoding's verify step: 2-8 queries per sequence on a long
context) and the NVIDIA tree's switch for it (`heuristics.MULTI_TOKEN_SPLIT`, on since an H100 measured
it, 2026-11-26): off, such batches keep the short-prefill choices; on, those past one decode
Q-block take a Q-block holding each sequence's queries, split over KV segments into about two
programs per SM (`multi_token_segments`), in tiles of 64 for Q-blocks of more than
MULTI_TOKEN_TILE64_ROWS rows of heads of 128. Either way every variant's output must match the
fp32 reference, which Triton's interpreter checks here for q_len 2-8."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch
from kernels.paged_attention import heuristics, planning
from kernels.paged_attention.heuristics import Config, Features
from kernels.reference import paged_attention_reference

NUM_SMS = heuristics.DEFAULT_NUM_SMS["nvidia"]


def _switch(monkeypatch, on: bool):
    """The switch set for one test; the kept choices of either setting dropped on both sides."""
    def clear():
        heuristics.choose.cache_clear()
        planning._CHOICES.clear()
    clear()
    monkeypatch.setattr(heuristics, "MULTI_TOKEN_SPLIT", on)
    yield
    monkeypatch.undo()
    clear()


@pytest.fixture
def split_on(monkeypatch):
    yield from _switch(monkeypatch, True)


@pytest.fixture
def split_off(monkeypatch):
    yield from _switch(monkeypatch, False)


def _features(num_seqs, query_len, kv_len, queries_per_kv=4, num_kv_heads=8, head_size=128, **kw) -> Features:
    return Features(num_seqs=num_seqs, num_tokens=num_seqs * query_len, max_query_len=query_len,
                    max_kv_len=kv_len, avg_kv_len=float(kv_len), decode_share=0.0,
                    queries_per_kv=queries_per_kv, num_kv_heads=num_kv_heads, head_size=head_size,
                    block_size=16, dtype="bfloat16", fp8_kv=False, num_sms=NUM_SMS, **kw)


SHAPES = [(seqs, q, kv, qpk) for seqs in (1, 8, 64, 256) for q in range(1, 10) for kv in (1024, 8192, 32768)
          for qpk in (1, 4, 7, 8, 71)]


def test_shipped_on():
    assert heuristics.MULTI_TOKEN_SPLIT is True  # [multi-token-split] H100 2026-11-26 (heuristics.py)


def test_off_the_switch_is_not_read_and_nothing_splits_past_a_decode_q_block(split_off):
    for seqs, q, kv, qpk in SHAPES:
        f = _features(seqs, q, kv, qpk, num_kv_heads=1 if qpk == 71 else 8)
        assert heuristics.multi_token_rows(f) == 0
        c = heuristics.choose("nvidia", f)
        if not heuristics.is_decode_batch(f):
            assert c.num_segments == 1 and "multi-token" not in c.source


def test_on_multi_token_decodes_hold_their_queries_in_one_q_block_and_split(split_on):
    changed = 0
    for seqs, q, kv, qpk in SHAPES:
        f = _features(seqs, q, kv, qpk, num_kv_heads=1 if qpk == 71 else 8)
        c, rows = heuristics.choose("nvidia", f), heuristics.multi_token_rows(f)
        if heuristics.is_decode_batch(f) or q > heuristics.MULTI_TOKEN_MAX_QUERIES or \
                q * qpk > heuristics.MULTI_TOKEN_MAX_ROWS:
            assert rows == 0 and "multi-token" not in c.source  # as with the switch off
            continue
        changed += 1
        assert c.block_m == rows >= q * qpk and c.block_q(qpk) >= q  # a sequence's queries in one Q-block
        assert f"multi-token split, {rows} rows: H100 2026-11-26, 1.06-9.0x" in c.source
        assert c.seq_items == (seqs > 1)  # items are sequences: no search, no empty Q-blocks
        if rows > heuristics.MULTI_TOKEN_TILE64_ROWS and f.head_size >= 128:
            assert c.tile_size <= 64
        deep = rows > heuristics.MULTI_TOKEN_TILE64_ROWS  # [multi-token-deep] (bf16 caches here)
        # [long-segment-ahead]: the others whose segments hold >= 16k keys read the block table ahead,
        # [filled-segment-ahead] from 8k keys where items x segments reach 3 per SM (heads <= 64: their own)
        filled = (kv >= heuristics.MULTI_TOKEN_FILLED_SEGMENT_KEYS * c.num_segments and f.head_size > 64
                  and f.kv_items * c.num_segments >= heuristics.MULTI_TOKEN_FILLED_ITEMS_PER_SM * NUM_SMS)
        long = not deep and (kv >= heuristics.MULTI_TOKEN_LONG_SEGMENT_KEYS * c.num_segments or filled)
        knobs = (c.read_ahead, c.block_vector, c.num_stages)
        assert knobs == ((True, True, 3) if deep else (True, False, 3) if long else (False, False, 2))
        if "short decode, split" not in c.source:  # [multi-token-segments], else [short-split]'s
            per_sm = (heuristics.MULTI_TOKEN_DEEP_PROGRAMS_PER_SM if deep
                      else heuristics.MULTI_TOKEN_PROGRAMS_PER_SM)
            assert c.num_segments == heuristics.multi_token_segments(f, c.tile_size, per_sm)
            assert seqs * f.num_kv_heads * c.num_segments <= per_sm * NUM_SMS or c.num_segments == 1
        if seqs == 1 and kv >= 8192:  # one long sequence: the SMs filled by segments, as a decode's
            assert c.num_segments >= 16
    assert changed >= 50
    amd = heuristics.choose("amd", _features(1, 8, 8192))
    assert amd.num_segments == 1 and "multi-token" not in amd.source  # AMD: unchanged, unmeasured


@pytest.mark.parametrize("seqs,q,kv,ahead", [
    (16, 2, 32768, True), (16, 5, 32768, True), (16, 8, 32768, True), (32, 4, 32768, True),
    (8, 2, 65536, True), (32, 2, 16384, True),
    (32, 2, 8192, False), (16, 4, 8192, False), (4, 2, 32768, False), (16, 1, 32768, False)])
def test_multi_token_segments_of_16k_keys_read_the_block_table_a_tile_ahead(split_on, seqs, q, kv, ahead):
    """[long-segment-ahead]: 2-8 queries a sequence whose KV segments hold >= 16k keys, including the
    decode-sized Q-blocks of 2-4 queries, read the block table a tile ahead in 3 stages; fewer keys a
    segment and one query keep 2 stages, and so do the unmeasured fp8 and fp32 caches and heads of 256."""
    f = _features(seqs, q, kv)
    c = heuristics.choose("nvidia", f)
    assert (c.read_ahead, c.num_stages) == ((True, 3) if ahead else (False, 2))
    assert ahead == (q > 1 and kv >= heuristics.MULTI_TOKEN_LONG_SEGMENT_KEYS * c.num_segments)
    assert ("segments of >= 16k keys" in c.source) == ahead
    for other in (dict(fp8_kv=True), dict(dtype="float32"), dict(head_size=256)):  # unmeasured: as before
        unmeasured = heuristics.choose("nvidia", dataclasses.replace(f, **other))
        assert "segments of >= 16k keys" not in unmeasured.source


def test_on_the_decode_rules_are_unchanged_for_one_query(split_on):
    for seqs, q, kv, qpk in SHAPES:
        f = _features(seqs, q, kv, qpk, num_kv_heads=1 if qpk == 71 else 8)
        if heuristics.is_decode_batch(f):
            assert heuristics.choose("nvidia", f) == heuristics._nvidia(dataclasses.replace(f))
            assert "multi-token" not in heuristics.choose("nvidia", f).source


# Interpreter-sized multi-token decodes: few heads, head 64, several sequences of different
# lengths (segments empty for the shorter ones), blocks of 16 and 32.
CASES = {  # name -> (query_lens, kv_lens, num_q_heads, num_kv_heads, block_size)
    "gqa4_q2_q3": ((2, 3, 2), (300, 47, 130), 8, 2, 16),
    "gqa4_q5_q8": ((5, 8, 6, 7), (700, 40, 300, 129), 8, 2, 16),
    "gqa4_q8_long": ((8,), (1328,), 4, 1, 32),
    "gqa7_q4": ((4, 4), (400, 90), 7, 1, 16),
    "gqa8_q8": ((8, 3), (260, 33), 8, 1, 32),
}


def _batch(name: str, device, **features):
    q_lens, kv_lens, hq, hkv, block = CASES[name]
    spec = BatchSpec(q_lens, kv_lens, num_q_heads=hq, num_kv_heads=hkv, head_size=64, block_size=block,
                     dtype="float16", seed=len(name), **features)
    return build_batch(spec, device, poison=True)


def _check(batch, out):
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("switch", [False, True], ids=["off", "on"])
def test_production_path_matches_the_reference(name, switch, request, device):
    """`kernels.paged_attention` as a serving engine calls it (hints, NVIDIA's tree), either setting."""
    request.getfixturevalue("split_on" if switch else "split_off")
    batch = _batch(name, device)
    spec = batch.spec
    hints = dict(max_seqlen_q=max(spec.query_lens), max_seqlen_k=max(spec.kv_lens), vendor="nvidia",
                 num_sms=NUM_SMS)
    f = heuristics.features_from_spec(spec, NUM_SMS)
    config = heuristics.choose("nvidia", f)
    # on, every case but the one of <= 4 queries on 4 heads per KV head (an ordinary decode
    # Q-block) takes the switch's branch
    assert bool(heuristics.multi_token_rows(f)) == (switch and name != "gqa4_q2_q3")
    assert config.block_q(f.queries_per_kv) >= max(spec.query_lens) or not switch
    out = batch.new_output()
    VARIANTS["static_grid"](*batch.args(), out=out, **hints, **batch.options)  # kernels.paged_attention
    _check(batch, out)


FORCED = {  # the switch's configurations with a split forced, small tiles: many segments, causal edges
    "rows32_tile16_seg4_seq_items": Config(32, 16, 4, num_warps=4, num_stages=2, seq_items=True),
    "rows32_tile32_seg3": Config(32, 32, 3, num_warps=4, num_stages=2),
    "rows64_tile16_seg8_seq_items_int32": Config(64, 16, 8, num_warps=4, num_stages=2, seq_items=True,
                                                 offsets_32=True),
    "rows32_tile16_seg2_fused": Config(32, 16, 2, num_warps=4, num_stages=2, seq_items=True,
                                       fused_reduce=True),
    # the reduction an item per query: sequences of fewer queries than BLOCK_Q leave items empty
    "rows32_tile16_seg4_by_query": Config(32, 16, 4, num_warps=4, num_stages=2, reduce_by_query=True),
    "rows16_tile32_seg3_by_query_3_programs": Config(16, 32, 3, num_warps=4, num_stages=2, seq_items=True,
                                                     reduce_by_query=True, max_programs=3),
}


@pytest.mark.parametrize("variant", ["flex_tile", "static_grid"])  # a 3-D grid, a persistent one
@pytest.mark.parametrize("config_name,name,feature", [  # each configuration once, CI's budget
    ("rows32_tile16_seg4_seq_items", "gqa4_q5_q8", {}),
    ("rows32_tile32_seg3", "gqa4_q2_q3", {"sliding_window": 37, "sinks": True}),
    ("rows64_tile16_seg8_seq_items_int32", "gqa8_q8", {}),
    ("rows32_tile16_seg2_fused", "gqa4_q5_q8", {"sliding_window": 300, "softcap": 20.0}),
    ("rows32_tile16_seg4_by_query", "gqa4_q5_q8", {}),
    ("rows16_tile32_seg3_by_query_3_programs", "gqa4_q2_q3", {"sinks": True}),
])
def test_split_multi_token_decodes_match_the_reference(variant, config_name, name, feature, device):
    batch = _batch(name, device, **feature)
    config = FORCED[config_name]
    qpk = batch.spec.num_q_heads // batch.spec.num_kv_heads
    if config.block_m < qpk * max(batch.spec.query_lens):
        config = dataclasses.replace(config, block_m=64)  # a Q-block of the sequence's queries
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert launches[0].args["split_max_q"] >= max(batch.spec.query_lens)  # every sequence is split
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    _check(batch, out)
