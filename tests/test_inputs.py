"""Bad input ends in a ValueError naming the argument, before anything is launched."""

from __future__ import annotations

import pytest
import torch

from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch
from kernels.launch import KernelLaunch


@pytest.fixture
def batch():
    return build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64))


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def forbidden(self):
        raise AssertionError("a kernel was launched despite bad input")
    monkeypatch.setattr(KernelLaunch, "__call__", forbidden)


def _args(batch, **replace):
    names = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens")
    return [replace.get(n, getattr(batch, n)) for n in names]


BAD = {
    "q": lambda b: dict(q=b.q[:, 0]),  # 2-D instead of [tokens, heads, head_size]
    "v_cache": lambda b: dict(v_cache=b.v_cache.to(torch.float32)),
    "k_cache": lambda b: dict(k_cache=b.k_cache[..., :32], v_cache=b.v_cache[..., :32]),  # head size
    "seq_lens": lambda b: dict(seq_lens=torch.tensor([2, 40], dtype=torch.int32)),  # 2 < q_len 3
    "block_table": lambda b: dict(block_table=b.block_table[:, :1].contiguous()),  # too small
    "cu_seqlens_q": lambda b: dict(cu_seqlens_q=torch.tensor([0, 3, 5], dtype=torch.int32)),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("arg", list(BAD))
def test_bad_argument_is_named(batch, variant, arg):
    with pytest.raises(ValueError, match=f"^{arg}:"):
        VARIANTS[variant](*_args(batch, **BAD[arg](batch)), **batch.options)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_non_contiguous_head_dim(batch, variant):
    q = batch.q.transpose(1, 2).contiguous().transpose(1, 2)  # same shape, head dim strided
    assert q.stride(-1) != 1
    with pytest.raises(ValueError, match="^q: head dimension must be contiguous"):
        VARIANTS[variant](*_args(batch, q=q), **batch.options)


def test_block_table_dtype(batch):
    with pytest.raises(ValueError, match="^block_table:"):
        VARIANTS["qblock"](*_args(batch, block_table=batch.block_table.long()), **batch.options)


def test_missing_fp8_scale():
    b = build_batch(BatchSpec((1,), (20,), fp8_kv=True))
    opts = dict(b.options, k_scale=None)
    with pytest.raises(ValueError, match="^k_scale:"):
        VARIANTS["qblock"](*b.args(), **opts)


def test_unsupported_feature_names_it(batch):
    with pytest.raises(NotImplementedError, match="naive.*softcap"):
        VARIANTS["naive"](*batch.args(), softcap=10.0, **batch.options)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("hint, value", [("vendor", "cpu"), ("vendor", "intel"), ("num_sms", 0),
                                         ("num_sms", 13.5)])
def test_bad_target_hint(batch, variant, hint, value):
    with pytest.raises(ValueError, match=f"^{hint}:"):
        VARIANTS[variant](*batch.args(), **{hint: value}, **batch.options)
