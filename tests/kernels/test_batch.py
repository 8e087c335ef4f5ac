"""PagedBatch builder: deterministic, shuffled block tables, cache sized from the batch."""

from __future__ import annotations

import pytest
import torch

from kernels import batch as kbatch
from kernels import platform
from kernels.batch import SPARE_BLOCKS, BatchSpec, build_batch
from kernels.inputs import FNUZ_E4M3, FP8_FORMATS, OCP_E4M3


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
    assert batch.k_cache.dtype == torch.float8_e4m3fn  # the interpreter's native format: OCP
    assert batch.options["k_scale"].numel() == 1 and batch.options["v_scale"].numel() == 1


@pytest.mark.parametrize("fp8_dtype", list(FP8_FORMATS), ids=str)
def test_fp8_batch_in_either_format_spans_its_range(fp8_dtype):
    """Scales are amax / the format's max: the largest byte is the format's max, none is NaN,
    and the dequantized cache is the fp32 draw within the format's precision (3 mantissa bits)."""
    spec = BatchSpec((2, 1), (40, 30), num_q_heads=4, num_kv_heads=2, head_size=64, fp8_kv=True, seed=3)
    batch = build_batch(spec, fp8_dtype=fp8_dtype)
    fmax = FP8_FORMATS[fp8_dtype].max
    for cache in (batch.k_cache, batch.v_cache):
        assert cache.dtype == fp8_dtype
        values = cache.float()
        assert not torch.isnan(values).any() and values.abs().max() == fmax
    ocp = build_batch(spec, fp8_dtype=OCP_E4M3)
    dequant = batch.k_cache.float() * batch.options["k_scale"]
    torch.testing.assert_close(dequant, ocp.k_cache.float() * ocp.options["k_scale"], rtol=0.13, atol=2e-2)


def test_fp8_format_follows_the_device(monkeypatch):
    """Without fp8_dtype the cache takes the device's native format: FNUZ on an MI300."""
    spec = BatchSpec((1,), (20,), fp8_kv=True)
    mi300 = platform.Platform("amd", "gfx942", "AMD Instinct MI300X", 64, 304)
    monkeypatch.setattr(kbatch.platform, "current", lambda: mi300)
    assert build_batch(spec).k_cache.dtype == FNUZ_E4M3
    assert build_batch(spec, fill=False).k_cache.dtype == FNUZ_E4M3
    assert build_batch(spec, fp8_dtype=OCP_E4M3).k_cache.dtype == OCP_E4M3  # asked for: wins
    mi350 = platform.Platform("amd", "gfx950", "AMD Instinct MI350X", 64, 256)
    monkeypatch.setattr(kbatch.platform, "current", lambda: mi350)
    assert build_batch(spec).k_cache.dtype == OCP_E4M3


def test_fp8_dtype_must_be_an_fp8_format():
    with pytest.raises(ValueError, match="^fp8_dtype must be one of torch.float8_e4m3fn, "
                                         "torch.float8_e4m3fnuz, got torch.float8_e5m2$"):
        build_batch(BatchSpec((1,), (20,), fp8_kv=True), fp8_dtype=torch.float8_e5m2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(query_lens=(2,), kv_lens=(1,)), "query_len <= kv_len"),
    (dict(query_lens=(1, 1), kv_lens=(1,)), "equal length"),
    (dict(query_lens=(1,), kv_lens=(1,), num_q_heads=6, num_kv_heads=4), "multiple"),
    (dict(query_lens=(1,), kv_lens=(1,), dtype="float64"), "dtype"),
])
def test_bad_spec(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchSpec(**kwargs)


@pytest.mark.parametrize("fp8_dtype", [None, *FP8_FORMATS], ids=["float16", "ocp", "fnuz"])
def test_poison_leaves_nan_in_every_slot_no_sequence_owns(fp8_dtype):
    """poison=True: NaN (fp8: the format's NaN byte, 0x7F OCP, 0x80 FNUZ) in the tails of the
    last blocks and in the spare blocks, which the block table's padding names; every owned
    slot is what poison=False gives, scales too."""
    spec = BatchSpec((1, 5, 2), (20, 5, 33), num_q_heads=4, num_kv_heads=2, head_size=64,
                     block_size=16, fp8_kv=fp8_dtype is not None, seed=9)
    kwargs = {} if fp8_dtype is None else {"fp8_dtype": fp8_dtype}
    clean, batch = build_batch(spec, **kwargs), build_batch(spec, poison=True, **kwargs)
    owned = batch.owned_slots()
    assert owned.shape == (batch.k_cache.shape[0], 16)
    # 20 + 5 + 33 keys own 58 slots; 2 + 1 + 3 blocks used of 6 + SPARE_BLOCKS
    assert int(owned.sum()) == 58 and batch.k_cache.shape[0] == 6 + SPARE_BLOCKS
    table = batch.block_table
    for i, n in enumerate(spec.kv_lens):
        last = table[i, (n - 1) // 16]
        assert owned[last, :(n - 1) % 16 + 1].all() and not owned[last, (n - 1) % 16 + 1:].any()
        for padding in table[i, -(-n // 16):].tolist():  # entries past the last block: a spare
            assert not owned[padding].any()
    assert (owned.sum(1) == 0).sum() == SPARE_BLOCKS
    for poisoned, plain in ((batch.k_cache, clean.k_cache), (batch.v_cache, clean.v_cache)):
        values = poisoned.float()
        assert values[~owned].isnan().all() and not values[owned].isnan().any()
        assert torch.equal(poisoned.view(torch.uint8)[owned], plain.view(torch.uint8)[owned])
        if fp8_dtype is not None:
            assert (poisoned.view(torch.uint8)[~owned] == FP8_FORMATS[fp8_dtype].nan_byte).all()
    for name in ("k_scale", "v_scale"):
        if fp8_dtype is not None:
            assert torch.equal(batch.options[name], clean.options[name])
    for i, n in enumerate(spec.kv_lens):  # the blocks each sequence uses are unchanged
        assert torch.equal(table[i, :-(-n // 16)], clean.block_table[i, :-(-n // 16)])


def test_fp8_nan_bytes_are_nan_in_torch():
    for dtype, fmt in FP8_FORMATS.items():
        assert torch.tensor([fmt.nan_byte], dtype=torch.uint8).view(dtype).float().isnan().all()
