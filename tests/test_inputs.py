"""Bad input ends in a ValueError naming the argument, before anything is launched.

Metadata value checks (a host sync) run because tests/conftest.py turns
PAGED_ATTENTION_CHECK_VALUES on for the session; the tests of the default path turn it off.
"""

from __future__ import annotations

import pytest
import torch

from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import (
    CHECK_VALUES_ENV,
    FNUZ_E4M3,
    FP8_FORMATS,
    OCP_E4M3,
    fp8_decoded_in_kernel,
    fp8_dtype_for,
    is_fp8,
)
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


# ---------------------------------------------------------------- fp8 caches: both formats

FP8_VARIANTS = [name for name, v in VARIANTS.items() if "fp8_kv" in v.features]
FP8_DTYPES = list(FP8_FORMATS)


@pytest.fixture(params=FP8_DTYPES, ids=str)
def fp8_batch(request):
    return build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64,
                                 fp8_kv=True), fp8_dtype=request.param)


@pytest.mark.parametrize("variant", FP8_VARIANTS)
def test_both_fp8_formats_are_accepted(fp8_batch, variant):
    _, launches = VARIANTS[variant].plan(*fp8_batch.args(), **fp8_batch.options)
    assert launches


def test_fp8_is_a_feature_naive_refuses_in_both_formats(fp8_batch):
    with pytest.raises(NotImplementedError, match="naive.*fp8_kv"):
        VARIANTS["naive"](*fp8_batch.args(), **fp8_batch.options)


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.float8_e5m2fnuz, torch.uint8, torch.int8,
                                   torch.float32])
def test_other_cache_dtypes_are_refused_naming_the_fp8_formats(batch, dtype):
    """Same-width bytes that are not an e4m3 format (e5m2, raw bytes) and q-dtype mismatches."""
    k, v = batch.k_cache.to(dtype), batch.v_cache.to(dtype)
    with pytest.raises(ValueError, match=r"^k_cache: dtype .* must equal q's \(torch.float16\) or be an fp8 "
                                         r"format: torch.float8_e4m3fn, torch.float8_e4m3fnuz$"):
        VARIANTS["static_grid"](*_args(batch, k_cache=k, v_cache=v), **batch.options)


def test_k_and_v_in_different_fp8_formats_are_refused(fp8_batch):
    other = next(d for d in FP8_DTYPES if d != fp8_batch.k_cache.dtype)
    v = fp8_batch.v_cache.view(other)  # the same bytes, declared the other format
    with pytest.raises(ValueError, match="^v_cache: dtype"):
        VARIANTS["qblock"](*_args(fp8_batch, v_cache=v), **fp8_batch.options)


BAD_SCALES = {  # name -> (value, what the one-line error says)
    "missing": (None, "need a one-element scale tensor, got NoneType"),
    "host_float": (0.5, "need a one-element scale tensor, got float"),
    "two_elements": (torch.ones(2), r"need a one-element scale tensor, got shape \(2,\)"),
    "integer": (torch.ones(1, dtype=torch.int32), "expected a floating-point tensor on cpu, got torch.int32"),
    "other_device": (torch.ones(1, device="meta"), "expected a floating-point tensor on cpu, got .* on meta"),
}


@pytest.mark.parametrize("variant", FP8_VARIANTS)
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("bad", list(BAD_SCALES))
def test_bad_fp8_scale_is_named(fp8_batch, variant, which, bad):
    value, message = BAD_SCALES[bad]
    with pytest.raises(ValueError, match=f"^{which}: .*{message}"):
        VARIANTS[variant](*fp8_batch.args(), **dict(fp8_batch.options, **{which: value}))


def test_fp8_format_table_matches_torch():
    """FP8_FORMATS' maxima are torch's, and only e4m3 formats are fp8 caches."""
    assert set(FP8_FORMATS) == {OCP_E4M3, FNUZ_E4M3}
    for dtype, fmt in FP8_FORMATS.items():
        assert fmt.max == torch.finfo(dtype).max and is_fp8(dtype)
    assert (FP8_FORMATS[OCP_E4M3].max, FP8_FORMATS[FNUZ_E4M3].max) == (448.0, 240.0)
    assert not any(is_fp8(d) for d in (torch.float8_e5m2, torch.float16, torch.uint8))


@pytest.mark.parametrize("arch, expected", [("gfx942", FNUZ_E4M3), ("gfx950", OCP_E4M3), ("gfx90a", OCP_E4M3),
                                            ("sm_90", OCP_E4M3), ("interpreter", OCP_E4M3)])
def test_native_fp8_format_per_architecture(arch, expected):
    assert fp8_dtype_for(arch) == expected


def test_only_fnuz_on_nvidia_is_decoded_in_the_kernel():
    """The kernels have one software decoder, for FNUZ; every other pair converts natively."""
    decoded = {(d, v) for d in FP8_DTYPES for v in ("nvidia", "amd") if fp8_decoded_in_kernel(d, v)}
    assert decoded == {(FNUZ_E4M3, "nvidia")}
    assert not fp8_decoded_in_kernel(torch.float16, "nvidia")


@pytest.mark.parametrize("vendor, dtype, decode", [("nvidia", "uint8", True),
                                                   ("amd", "float8_e4m3fnuz", False)])
def test_fnuz_cache_is_handed_to_triton_as_the_vendor_reads_it(vendor, dtype, decode):
    """FNUZ on NVIDIA goes in as its bytes with DECODE_FNUZ; on AMD as fp8e4b8, converted natively."""
    b = build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64, fp8_kv=True),
                    fp8_dtype=FNUZ_E4M3)
    for variant in FP8_VARIANTS:
        _, launches = VARIANTS[variant].plan(*b.args(), vendor=vendor, **b.options)
        main = launches[0]
        assert str(main.args["k_cache_ptr"].dtype) == str(main.args["v_cache_ptr"].dtype) == f"torch.{dtype}"
        assert main.args["k_cache_ptr"].stride() == b.k_cache.stride()
        assert main.constexprs["DECODE_FNUZ"] is decode and main.constexprs["USE_FP8"] is True


def test_unsupported_feature_names_it(batch):
    with pytest.raises(NotImplementedError, match="naive.*softcap"):
        VARIANTS["naive"](*batch.args(), softcap=10.0, **batch.options)


# ---------------------------------------------------------------- value checks: opt-in

def _read_forbidden(monkeypatch):
    """Make every way of reading a tensor's values on the host raise (a sync on a GPU)."""
    def forbidden(*_a, **_k):
        raise AssertionError("metadata values were read on the host (a device sync on a GPU)")
    for name in ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_default_call_reads_no_metadata_values(batch, variant, monkeypatch):
    monkeypatch.delenv(CHECK_VALUES_ENV, raising=False)
    launched = []
    monkeypatch.setattr(KernelLaunch, "__call__", lambda self: launched.append(self.name))
    _read_forbidden(monkeypatch)
    VARIANTS[variant](*batch.args(), max_seqlen_q=3, max_seqlen_k=40, **batch.options)
    assert launched  # the call got as far as its launches


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_bad_values_pass_unchecked_by_default(batch, variant, monkeypatch):
    """Off by default: bad metadata is the caller's responsibility (and reaches the planner)."""
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    _, launches = VARIANTS[variant].plan(*_args(batch, **BAD["seq_lens"](batch)), **batch.options)
    assert launches


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_switch_and_hint_catch_bad_values(batch, variant, monkeypatch):
    bad = _args(batch, **BAD["cu_seqlens_q"](batch))
    monkeypatch.setenv(CHECK_VALUES_ENV, "1")
    with pytest.raises(ValueError, match="^cu_seqlens_q:"):
        VARIANTS[variant].plan(*bad, **batch.options)
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    with pytest.raises(ValueError, match="^cu_seqlens_q:"):
        VARIANTS[variant].plan(*bad, check_values=True, **batch.options)
    monkeypatch.setenv(CHECK_VALUES_ENV, "1")
    VARIANTS[variant].plan(*bad, check_values=False, **batch.options)  # the hint wins


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("block_id", [-1, "num_blocks"])
def test_block_id_outside_the_cache(batch, variant, block_id):
    table = batch.block_table.clone()
    table[1, 2] = batch.k_cache.shape[0] if block_id == "num_blocks" else block_id  # seq 1 reads 3 blocks
    with pytest.raises(ValueError, match=r"^block_table: sequence 1, logical block 2 holds block id"):
        VARIANTS[variant](*_args(batch, block_table=table), **batch.options)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_unused_block_table_entries_may_hold_anything(batch, variant, device):
    """Entries past a sequence's last block are never read: padding such as -1 is fine."""
    table = torch.full((2, 8), -1, dtype=torch.int32)
    table[:, :batch.block_table.shape[1]] = batch.block_table
    table[0, 2] = -1  # sequence 0 has 20 positions: blocks 0 and 1 only
    _, launches = VARIANTS[variant].plan(*_args(batch, block_table=table), **batch.options)
    assert launches


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cu_seqlens_q_must_be_monotone(batch, variant):
    cu = torch.tensor([0, 5, 4], dtype=torch.int32)  # ends at num_tokens = 4, decreasing
    seq_lens = torch.tensor([20, 40], dtype=torch.int32)
    with pytest.raises(ValueError, match="^cu_seqlens_q: decreases at sequence 1"):
        VARIANTS[variant](*_args(batch, cu_seqlens_q=cu, seq_lens=seq_lens), **batch.options)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cu_seqlens_q_must_start_at_zero(batch, variant):
    cu = torch.tensor([1, 3, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="^cu_seqlens_q: must start at 0"):
        VARIANTS[variant](*_args(batch, cu_seqlens_q=cu), **batch.options)


# ---------------------------------------------------------------- host scalars: always

@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -0.125])
def test_bad_scale(batch, variant, value, monkeypatch):
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")  # free checks: on whatever the switch says
    with pytest.raises(ValueError, match="^scale:"):
        VARIANTS[variant](*batch.args(), **dict(batch.options, scale=value))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_bad_softcap(batch, variant, value, monkeypatch):
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    with pytest.raises(ValueError, match="^softcap:"):
        VARIANTS[variant](*batch.args(), softcap=value, **batch.options)


def test_scale_must_be_a_host_number(batch):
    with pytest.raises(ValueError, match="^scale: must be a host number"):
        VARIANTS["static_grid"](*batch.args(), **dict(batch.options, scale=torch.tensor(0.125)))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("hint, value", [("vendor", "cpu"), ("vendor", "intel"), ("num_sms", 0),
                                         ("num_sms", 13.5)])
def test_bad_target_hint(batch, variant, hint, value):
    with pytest.raises(ValueError, match=f"^{hint}:"):
        VARIANTS[variant](*batch.args(), **{hint: value}, **batch.options)


# ---------------------------------------------------------------- empty batches

def _empty(batch, num_seqs: int):
    """No query tokens; `num_seqs` sequences with KV but nothing new to attend."""
    q = batch.q[:0]
    table = batch.block_table[:num_seqs]
    cu = torch.zeros(num_seqs + 1, dtype=torch.int32)
    return _args(batch, q=q, block_table=table, cu_seqlens_q=cu, seq_lens=batch.seq_lens[:num_seqs])


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("num_seqs", [0, 2], ids=["no-sequences", "no-tokens"])
def test_empty_batch_returns_empty_output_without_launching(batch, variant, num_seqs):
    args = _empty(batch, num_seqs)
    out = VARIANTS[variant](*args, **batch.options)  # no_launch: a launch would fail here
    assert out.shape == (0, *batch.q.shape[1:]) and out.dtype == batch.q.dtype
    _, launches = VARIANTS[variant].plan(*args, max_seqlen_q=1, **batch.options)
    assert launches == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_no_sequences_leaves_padding_tokens_untouched(batch, variant):
    """Tokens but no sequences (a padded, empty step): all padding, nothing to launch."""
    args = _args(batch, block_table=batch.block_table[:0], seq_lens=batch.seq_lens[:0],
                 cu_seqlens_q=torch.zeros(1, dtype=torch.int32))
    out = batch.new_output()
    VARIANTS[variant](*args, out=out, check_values=False, **batch.options)
    assert torch.isnan(out).all()


# ---------------------------------------------------------------- checks kept per layout

def test_layout_key_names_what_the_checks_read(batch):
    from kernels.inputs import layout_key

    key = layout_key(*batch.args(), **batch.options)
    again = build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64, seed=7))
    assert layout_key(*again.args(), **again.options) == key  # other values, same layout
    q_strided = torch.empty(batch.q.shape[0], batch.q.shape[1] + 1, batch.q.shape[2])[:, 1:]
    others = [
        layout_key(*_args(batch, q=q_strided), **batch.options),
        layout_key(*_args(batch, q=batch.q.to(torch.bfloat16)), **batch.options),
        layout_key(*batch.args(), out=batch.new_output(), **batch.options),
        layout_key(*batch.args(), **dict(batch.options, scale=0.5)),
        layout_key(*batch.args(), **dict(batch.options, softcap=1)),
        layout_key(*batch.args(), **dict(batch.options, softcap=True)),  # == 1, but not a number
    ]
    assert len({key, *others}) == 1 + len(others)
    assert layout_key(*batch.args(), **dict(batch.options, scale=[0.5])) is None  # unhashable


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_known_layout_is_still_checked(batch, variant, monkeypatch):
    """The layout's checks passed once; values (when asked) and other layouts are checked anew."""
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    VARIANTS[variant].plan(*batch.args(), **batch.options)
    with pytest.raises(ValueError, match="^cu_seqlens_q: must start at 0"):
        VARIANTS[variant].plan(*_args(batch, cu_seqlens_q=torch.tensor([1, 3, 4], dtype=torch.int32)),
                               check_values=True, **batch.options)
    with pytest.raises(ValueError, match="^softcap: must be a host number"):
        VARIANTS[variant].plan(*batch.args(), **dict(batch.options, softcap=True))
    with pytest.raises(ValueError, match="^scale: must be a host number"):
        VARIANTS[variant].plan(*batch.args(), **dict(batch.options, scale=[0.5]))


@pytest.mark.parametrize("name", ["seq_lens", "cu_seqlens_q", "block_table"])
def test_strided_metadata_is_refused(batch, name):
    """The kernels index metadata by position alone: a strided view would be misread."""
    packed = getattr(batch, name)
    spread = torch.zeros(*packed.shape[:-1], 2 * packed.shape[-1], dtype=packed.dtype)
    spread[..., ::2] = packed
    with pytest.raises(ValueError, match=f"^{name}: last dimension must be contiguous"):
        VARIANTS["static_grid"](*_args(batch, **{name: spread[..., ::2]}), **batch.options)
