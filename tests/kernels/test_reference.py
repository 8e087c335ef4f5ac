"""The fp32 reference is checked against an independent computation, not trusted blindly.

Independent path: each sequence's K/V are reassembled block by block in a Python loop,
then attention is computed in float64 by torch's scaled_dot_product_attention with an
explicit boolean mask. Sinks are added analytically: with a sink logit z and the row's
log-sum-exp L of the visible scores, out_with_sink = out * sigmoid(L - z).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.batch import BatchSpec, PagedBatch, build_batch
from kernels.inputs import FNUZ_E4M3, FP8_FORMATS, OCP_E4M3
from kernels.reference import paged_attention_reference


def dense_attention(batch: PagedBatch) -> torch.Tensor:
    spec, opts = batch.spec, batch.options
    outs = []
    cu = batch.cu_seqlens_q.tolist()
    for s, (q_len, kv_len) in enumerate(zip(spec.query_lens, spec.kv_lens)):
        blocks = [batch.block_table[s, j].item() for j in range(math.ceil(kv_len / spec.block_size))]
        k = torch.cat([batch.k_cache[b] for b in blocks])[:kv_len].double()  # [kv, Hkv, D]
        v = torch.cat([batch.v_cache[b] for b in blocks])[:kv_len].double()
        if spec.fp8_kv:
            k, v = k * opts["k_scale"].double(), v * opts["v_scale"].double()
        q = batch.q[cu[s]:cu[s + 1]].double().transpose(0, 1)  # [Hq, q_len, D]
        group = spec.num_q_heads // spec.num_kv_heads
        k = k.transpose(0, 1).repeat_interleave(group, 0)  # [Hq, kv, D]
        v = v.transpose(0, 1).repeat_interleave(group, 0)
        q_pos = torch.arange(kv_len - q_len, kv_len)[:, None]
        k_pos = torch.arange(kv_len)[None, :]
        mask = k_pos <= q_pos
        if spec.sliding_window:
            mask &= q_pos - k_pos < spec.sliding_window
        scale = opts["scale"]
        if spec.softcap:
            scores = q @ k.transpose(1, 2) * scale
            scores = spec.softcap * torch.tanh(scores / spec.softcap)
            out = torch.softmax(scores.masked_fill(~mask, -math.inf), -1) @ v
            lse = torch.logsumexp(scores.masked_fill(~mask, -math.inf), -1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
            lse = torch.logsumexp((q @ k.transpose(1, 2) * scale).masked_fill(~mask, -math.inf), -1)
        if spec.sinks:
            out = out * torch.sigmoid(lse - opts["sinks"].double()[:, None])[..., None]
        outs.append(out.transpose(0, 1))
    return torch.cat(outs)


SPECS = [
    BatchSpec((1,), (1,), num_q_heads=4, num_kv_heads=4, head_size=64),
    BatchSpec((5, 1, 129), (18, 1328, 463), num_q_heads=10, num_kv_heads=2, head_size=80),
    BatchSpec((7, 3), (7, 600), num_q_heads=8, num_kv_heads=1, head_size=64, block_size=544),
    BatchSpec((9, 2), (40, 77), num_q_heads=8, num_kv_heads=2, head_size=64, sliding_window=13),
    BatchSpec((9, 2), (40, 77), num_q_heads=8, num_kv_heads=2, head_size=64, softcap=5.0),
    BatchSpec((9, 2), (40, 77), num_q_heads=8, num_kv_heads=2, head_size=64, sinks=True),
    BatchSpec((9, 2), (40, 77), num_q_heads=8, num_kv_heads=2, head_size=64, fp8_kv=True),
    BatchSpec((9, 2), (40, 77), num_q_heads=8, num_kv_heads=2, head_size=64, sinks=True,
              softcap=5.0, sliding_window=20, dtype="bfloat16"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.digest())
def test_reference_matches_dense_float64(spec):
    batch = build_batch(spec)
    got = paged_attention_reference(*batch.args(), **batch.options).float()
    expected = dense_attention(batch).float()
    # The reference rounds its fp32 result to the batch dtype; allow one rounding step.
    tol = 1e-2 if spec.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


FP8_SPECS = [
    BatchSpec((9, 2), (40, 77), num_q_heads=8, num_kv_heads=2, head_size=64, fp8_kv=True),
    BatchSpec((1, 5, 1), (300, 18, 1), num_q_heads=10, num_kv_heads=2, head_size=80, block_size=544,
              fp8_kv=True, sinks=True, softcap=5.0, sliding_window=20),
]


@pytest.mark.parametrize("fp8_dtype", list(FP8_FORMATS), ids=str)
@pytest.mark.parametrize("spec", FP8_SPECS, ids=lambda s: s.digest())
def test_reference_matches_dense_float64_in_both_fp8_formats(spec, fp8_dtype):
    batch = build_batch(spec, fp8_dtype=fp8_dtype)
    assert batch.k_cache.dtype == batch.v_cache.dtype == fp8_dtype
    got = paged_attention_reference(*batch.args(), **batch.options).float()
    torch.testing.assert_close(got, dense_attention(batch).float(), atol=2e-3, rtol=2e-3)


def _e4m3_by_hand(code: int, bias: int, fnuz: bool) -> float:
    """One e4m3 byte decoded from its definition (OCP spec; AMD HIP "FP8 Numbers" for FNUZ)."""
    sign, exponent, mantissa = code >> 7, (code >> 3) & 0xF, code & 0x7
    if fnuz and code == 0x80:
        return math.nan  # FNUZ: the only NaN, no negative zero
    if not fnuz and exponent == 0xF and mantissa == 0x7:
        return math.nan  # OCP: S.1111.111
    if exponent == 0:
        magnitude = mantissa / 8 * 2.0 ** (1 - bias)
    else:
        magnitude = (1 + mantissa / 8) * 2.0 ** (exponent - bias)
    return -magnitude if sign else magnitude


@pytest.mark.parametrize("fp8_dtype, bias, fnuz", [(OCP_E4M3, 7, False), (FNUZ_E4M3, 8, True)], ids=str)
def test_torch_decodes_both_formats_as_their_definitions(fp8_dtype, bias, fnuz):
    """What the reference reads fp8 bytes with (torch's conversion) is each format's definition
    on all 256 bytes, and the formats' largest finite values are FP8_FORMATS' maxima."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    got = codes.view(fp8_dtype).double()
    want = torch.tensor([_e4m3_by_hand(c, bias, fnuz) for c in range(256)], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert got.nan_to_num(0).abs().max() == FP8_FORMATS[fp8_dtype].max == torch.finfo(fp8_dtype).max


def test_fnuz_cache_read_as_ocp_is_a_different_answer():
    """The format matters: the same bytes read as the other format change the output far
    beyond any tolerance (twice the values, and 240 becomes NaN), so a test that hands one
    format to a kernel reading the other fails."""
    batch = build_batch(FP8_SPECS[0], fp8_dtype=FNUZ_E4M3)
    right = paged_attention_reference(*batch.args(), **batch.options)
    wrong = paged_attention_reference(batch.q, batch.k_cache.view(OCP_E4M3), batch.v_cache.view(OCP_E4M3),
                                      *batch.args()[3:], **batch.options)
    assert not torch.allclose(wrong.float(), right.float(), atol=0.1, rtol=0.1)


OWNED_CASES = [(s, None) for s in SPECS if not s.fp8_kv] + [
    (s, f) for s in SPECS + FP8_SPECS if s.fp8_kv for f in FP8_FORMATS]


@pytest.mark.parametrize("spec, fp8_dtype", OWNED_CASES,
                         ids=[f"{s.digest()}-{f if f is not None else '16-bit'}" for s, f in OWNED_CASES])
def test_reference_reads_only_owned_slots(spec, fp8_dtype):
    """NaN in every slot no sequence owns (poison=True: last blocks' tails, spare blocks, the
    spare that block-table padding names) changes nothing: the reference gathers owned slots only."""
    kwargs = {} if fp8_dtype is None else {"fp8_dtype": fp8_dtype}
    clean, poisoned = build_batch(spec, **kwargs), build_batch(spec, poison=True, **kwargs)
    assert poisoned.k_cache.float().isnan().any() and poisoned.v_cache.float().isnan().any()
    got = paged_attention_reference(*poisoned.args(), **poisoned.options)
    assert not got.isnan().any()
    torch.testing.assert_close(got, paged_attention_reference(*clean.args(), **clean.options), rtol=0, atol=0)


def test_reference_ignores_scales_of_caches_in_q_dtype():
    """k_scale / v_scale apply to fp8 caches only (the kernels refuse them with others; the
    reference checks nothing)."""
    batch = build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64))
    scaled = dict(batch.options, k_scale=torch.tensor([3.0]), v_scale=torch.tensor([0.5]))
    torch.testing.assert_close(paged_attention_reference(*batch.args(), **scaled),
                               paged_attention_reference(*batch.args(), **batch.options))


def test_reference_ignores_physical_block_placement():
    """Moving the same logical blocks to other physical slots must not change the result."""
    batch = build_batch(BatchSpec((3, 1), (40, 70), num_q_heads=4, num_kv_heads=2, head_size=64))
    perm = torch.randperm(batch.k_cache.shape[0], generator=torch.Generator().manual_seed(7))
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    moved = PagedBatch(batch.spec, batch.q, batch.k_cache[perm], batch.v_cache[perm],
                       inverse[batch.block_table.long()].to(torch.int32), batch.cu_seqlens_q,
                       batch.seq_lens, batch.options)
    torch.testing.assert_close(paged_attention_reference(*moved.args(), **moved.options),
                               paged_attention_reference(*batch.args(), **batch.options))


def test_sink_lowers_attention_mass():
    """A very large sink soaks up the softmax: outputs shrink towards zero."""
    batch = build_batch(BatchSpec((2,), (30,), num_q_heads=4, num_kv_heads=4, head_size=64,
                                  sinks=True, dtype="float32"))
    opts = dict(batch.options, sinks=torch.full((4,), 50.0))
    out = paged_attention_reference(*batch.args(), **opts)
    assert out.abs().max() < 1e-10
