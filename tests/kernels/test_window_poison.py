"""No kernel reads a cache block released from behind a sliding window.

A serving engine (vLLM) frees the blocks of a sequence that lie wholly before the sliding
window of every one of its queries and points their block-table entries at a null block,
whose content is anything (NaN, Inf). `build_batch(poison=True)` does the same with a window
(`kernels.batch.released_blocks`): those entries name a NaN spare block and the blocks they
named are NaN too. A kernel that loads such a block, even to mask its scores afterwards
(p = 0 times a NaN V is NaN), outputs NaN for the sequence; one that loads a tile reaching
into one must mask the K and V loads by the window's lower bound.

Every variant with `sliding_window` runs here against the fp32 reference (which gathers from
the first key the sequence's first query sees), on decodes, prefills and mixed batches,
windows narrower than a block and not a multiple of it, several released blocks, blocks of 16
and 32, with the variant's own configuration and with forced tiles larger than the block
(positions gathered one by one, one id per block, the causal edge in smaller tiles, decode
segments). The cases marked `cpu_subset` are interpreter-sized; the others run on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from kernels import VARIANTS
from kernels.batch import BatchSpec, PagedBatch, build_batch, owned_slots, released_blocks
from kernels.inputs import FNUZ_E4M3
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference

WINDOW_VARIANTS = [name for name, v in VARIANTS.items() if "sliding_window" in v.features]
Q_BLOCK_VARIANTS = [name for name in ("parallel", "flex_tile", "static_grid") if name in WINDOW_VARIANTS]

CASES = {  # name -> (query_lens, kv_lens, window)
    # decodes: a window not a multiple of the block, ten blocks released; one that releases none
    "decode_w37": ((1, 1, 1), (200, 45, 7), 37),
    # a window narrower than a block
    "decode_w5": ((1, 1), (130, 40), 5),
    # a prefill chunk whose first queries' windows reach back past its Q-blocks
    "prefill_w37": ((20,), (150,), 37),
    # mixed, with a window of 50 (not a multiple of 16 or 32)
    "mixed_w50": ((1, 9, 1, 30), (170, 90, 33, 120), 50),
}
CPU_CASES = {  # (case, block_size) the interpreter runs
    ("decode_w37", 16), ("decode_w5", 16), ("prefill_w37", 16), ("mixed_w50", 16),
    ("decode_w37", 32), ("mixed_w50", 32),
}
GPU_CASES = {  # name -> (query_lens, kv_lens, window): production-sized, run on a GPU only
    "gpu_decode_w128": ((1,) * 16, (4096,) * 8 + (700, 129, 128, 127, 33, 17, 2, 1), 128),
    "gpu_prefill_w1024": ((2048,), (6144,), 1024),
    "gpu_mixed_w300": ((1, 5, 129, 17, 1, 40, 513), (1328, 18, 463, 17, 1, 97, 2000), 300),
}
# Tiles larger than the cache block, where the Q-block kernel's masked tiles reach into blocks
# released before the window: per-position gathers, one id per block, edges of a smaller tile,
# decode segments (config, block_size).
FORCED = {
    "tile64_over_block16_seg3": (Config(16, 64, 3, num_warps=4, num_stages=2), 16),
    "tile64_block_vector_over_block16_edge16": (
        Config(16, 64, 1, num_warps=4, num_stages=2, read_ahead=True, block_vector=True, offsets_32=True,
               edge_tile=16), 16),
    "tile64_over_block32_seq_items_seg2": (Config(16, 64, 2, num_warps=4, num_stages=2, seq_items=True), 32),
    "tile32_over_block16_bm32": (Config(32, 32, 1, num_warps=4, num_stages=2, read_ahead=True), 16),
}
SMALL = dict(num_q_heads=4, num_kv_heads=2, head_size=32, dtype="float16")


def window_batch(case: str, block_size: int, device, seed: int = 0, **fields) -> PagedBatch:
    query_lens, kv_lens, window = {**CASES, **GPU_CASES}[case]
    shape = SMALL if case in CASES else dict(num_q_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")
    spec = BatchSpec(query_lens, kv_lens, block_size=block_size, sliding_window=window, seed=seed,
                     **{**shape, **fields})
    return build_batch(spec, device, poison=True,
                       **({"fp8_dtype": FNUZ_E4M3} if spec.fp8_kv else {}))


def check(variant: str, batch: PagedBatch, **hints) -> None:
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, **hints, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    assert not expected.isnan().any()
    tol = 1.5e-2 if batch.q.dtype == torch.bfloat16 else 3e-3
    torch.testing.assert_close(out.float(), expected.float(), atol=tol, rtol=tol)


def _cases():
    for case in CASES:
        for block_size in (16, 32):
            marks = [pytest.mark.grid] + ([pytest.mark.cpu_subset] if (case, block_size) in CPU_CASES else [])
            yield pytest.param(case, block_size, marks=marks, id=f"{case}-b{block_size}")
    for case in GPU_CASES:
        for block_size in (16, 32):
            yield pytest.param(case, block_size, marks=pytest.mark.grid, id=f"{case}-b{block_size}")


# ---------------------------------------------------------------- the batches and the reference


def test_poison_releases_the_blocks_wholly_before_every_querys_window():
    """poison=True with a window: each sequence's leading blocks whose keys no query sees point
    at a NaN spare block and the blocks they named hold NaN; the block with the first key some
    query sees, and everything after it, is what poison=False gives."""
    spec = BatchSpec((1, 9, 1, 30), (170, 90, 33, 120), sliding_window=50, block_size=16, **SMALL)
    clean, batch = build_batch(spec), build_batch(spec, poison=True)
    released = released_blocks(spec.query_lens, spec.kv_lens, 16, 50)
    # first keys seen: 120, 32, 0, 41 -> 7, 2, 0 and 2 blocks before them
    assert released == [7, 2, 0, 2]
    table, clean_table = batch.block_table, clean.block_table
    k, v = batch.k_cache.float(), batch.v_cache.float()
    for i, n in enumerate(released):
        for logical in range(n):
            assert k[table[i, logical]].isnan().all() and v[table[i, logical]].isnan().all()
            assert k[clean_table[i, logical]].isnan().all()  # the block it named: released, NaN
        kept = clean_table[i, n:-(-spec.kv_lens[i] // 16)]
        assert torch.equal(table[i, n:n + len(kept)], kept)
        first = spec.kv_lens[i] - spec.query_lens[i] - 50 + 1
        for pos in range(max(first, 0), spec.kv_lens[i]):  # every key some query sees: intact
            block, slot = table[i, pos // 16], pos % 16
            assert torch.equal(batch.k_cache[block, slot], clean.k_cache[block, slot])
            assert torch.equal(batch.v_cache[block, slot], clean.v_cache[block, slot])
    owned = batch.owned_slots()
    assert torch.equal(owned, owned_slots(table, batch.seq_lens, k.shape[0], 16, released))
    assert not k[owned].isnan().any() and k[~owned].isnan().all() and v[~owned].isnan().all()
    # without a window nothing is released
    assert released_blocks(spec.query_lens, spec.kv_lens, 16, None) == [0] * 4


@pytest.mark.parametrize("case", list(CASES))
def test_reference_reads_nothing_before_the_window(case):
    """The reference gathers from the first key the sequence's first query sees: the released
    blocks change nothing (bit for bit)."""
    poisoned = window_batch(case, 16, "cpu")
    query_lens, kv_lens, window = CASES[case]
    clean = build_batch(BatchSpec(query_lens, kv_lens, block_size=16, sliding_window=window, **SMALL))
    assert poisoned.k_cache.float().isnan().any()
    got = paged_attention_reference(*poisoned.args(), **poisoned.options)
    assert not got.isnan().any()
    torch.testing.assert_close(got, paged_attention_reference(*clean.args(), **clean.options), rtol=0, atol=0)


# ---------------------------------------------------------------- the kernels


@pytest.mark.parametrize("variant", WINDOW_VARIANTS)
@pytest.mark.parametrize("case,block_size", list(_cases()))
def test_window_kernels_never_read_released_blocks(variant, case, block_size, device):
    check(variant, window_batch(case, block_size, device, seed=block_size))


@pytest.mark.parametrize("variant", Q_BLOCK_VARIANTS)
@pytest.mark.parametrize("config_name", list(FORCED))
@pytest.mark.parametrize("case", ["decode_w37", "mixed_w50"])
def test_tiles_larger_than_a_block_mask_the_released_ones(variant, config_name, case, device):
    config, block_size = FORCED[config_name]
    check(variant, window_batch(case, block_size, device, seed=3), config=config)


@pytest.mark.parametrize("variant", WINDOW_VARIANTS)
def test_fnuz_nan_bytes_before_the_window_with_every_feature(variant, device):
    """FNUZ fp8 (the interpreter decodes its NaN byte 0x80 as NaN), softcap and sinks."""
    check(variant, window_batch("mixed_w50", 16, device, seed=5, fp8_kv=True, softcap=20.0, sinks=True))
