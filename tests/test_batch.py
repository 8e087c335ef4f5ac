"""PagedBatch builder: deterministic, shuffled block tables, cache sized from the batch."""

from __future__ import annotations

import pytest
import torch

from kernels.batch import SPARE_BLOCKS, BatchSpec, build_batch


def test_same_seed_same_batch_and_digest():
    spec = BatchSpec((3, 1), (20, 50), seed=5)
    a, b = build_batch(spec), build_batch(spec)
    for x, y in zip(a.args(), b.args()):
        assert torch.equal(x, y)
    assert spec.digest() == BatchSpec((3, 1), (20, 50), seed=5).digest()
    assert spec.digest() != BatchSpec((3, 1), (20, 50), seed=6).digest()


def test_block_table_is_shuffled_and_sized_from_batch():
    spec = BatchSpec((1,) * 8, (100,) * 8, block_size=16)
    batch = build_batch(spec)
    needed = 8 * 7  # ceil(100 / 16) blocks per sequence
    assert batch.k_cache.shape[0] == needed + SPARE_BLOCKS
    used = batch.block_table.flatten()
    assert used.unique().numel() == needed  # no physical block shared between sequences
    assert not torch.equal(used, torch.arange(needed, dtype=torch.int32))  # not contiguous


def test_layout_matches_contract():
    spec = BatchSpec((5, 1), (18, 33), num_q_heads=10, num_kv_heads=2, head_size=80,
                     block_size=32, dtype="bfloat16")
    batch = build_batch(spec)
    assert batch.q.shape == (6, 10, 80) and batch.q.dtype == torch.bfloat16
    assert batch.k_cache.shape[1:] == (32, 2, 80)
    assert batch.cu_seqlens_q.tolist() == [0, 5, 6]
    assert batch.seq_lens.tolist() == [18, 33]
    assert batch.block_table.dtype == torch.int32 and batch.block_table.shape == (2, 2)


def test_fp8_batch_has_scales():
    batch = build_batch(BatchSpec((1,), (20,), fp8_kv=True))
    assert batch.k_cache.dtype == torch.float8_e4m3fn
    assert batch.options["k_scale"].numel() == 1 and batch.options["v_scale"].numel() == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(query_lens=(2,), kv_lens=(1,)), "query_len <= kv_len"),
    (dict(query_lens=(1, 1), kv_lens=(1,)), "equal length"),
    (dict(query_lens=(1,), kv_lens=(1,), num_q_heads=6, num_kv_heads=4), "multiple"),
    (dict(query_lens=(1,), kv_lens=(1,), dtype="float64"), "dtype"),
])
def test_bad_spec(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchSpec(**kwargs)
