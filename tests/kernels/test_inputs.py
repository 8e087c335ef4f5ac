"""Bad input ends in an exception naming the argument, before anything is launched.

ValueError for a wrong value, `inputs.ArgumentTypeError` (a TypeError and a ValueError) for a
wrong type, TypeError for a keyword the variant does not take, NotImplementedError for a
feature it lacks (kernels/inputs.py says which is which). The property test at the end draws
mutations of every argument and hint and holds every call to that.

Metadata value checks (a host sync) run because tests/conftest.py turns
PAGED_ATTENTION_CHECK_VALUES on for the session; the tests of the default path turn it off.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import re
from unittest import mock

import numpy as np
import pytest
import torch

from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import (
    CHECK_VALUES_ENV,
    FNUZ_E4M3,
    FP8_FORMATS,
    OCP_E4M3,
    ArgumentTypeError,
    fp8_decoded_in_kernel,
    fp8_dtype_for,
    is_fp8,
)
from kernels.launch import KernelLaunch
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference

_REAL_LAUNCH = KernelLaunch.__call__  # before any test's `no_launch` replaces it


@pytest.fixture
def batch():
    return build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64))


@pytest.fixture(autouse=True)
def no_launch(request, monkeypatch):
    if getattr(request.function, "launches", False):  # the property test runs the good calls
        return
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


_SCALE_TENSOR = "expected a float32 tensor on cpu, got "
BAD_SCALES = {  # name -> (value, what the one-line error says)
    "missing": (None, "need a one-element scale tensor, got NoneType"),
    "host_float": (0.5, "expected a torch.Tensor, got float"),
    "two_elements": (torch.ones(2), r"need a one-element scale tensor, got shape \(2,\)"),
    "integer": (torch.ones(1, dtype=torch.int32), _SCALE_TENSOR + "torch.int32"),
    "float64": (torch.ones(1, dtype=torch.float64), _SCALE_TENSOR + "torch.float64"),
    "other_device": (torch.ones(1, device="meta"), _SCALE_TENSOR + ".* on meta"),
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


# ---------------------------------------------------------------- every argument, every kind of mistake

_META = torch.device("meta")

# name -> (call changes from the batch's (positional tensors, options, hints), the exception, the
# message's start). The variant-independent mistakes of the kernel API; docs/bad-input.md lists them.
KERNEL_API_MISTAKES = {
    "q_list": (lambda b: dict(q=b.q.tolist()), ArgumentTypeError, r"q: expected a torch.Tensor, got list"),
    "q_no_heads": (lambda b: dict(q=b.q[:, :0]), ValueError, r"q: num_q_heads and head_size must be > 0"),
    "q_float64": (lambda b: dict(q=b.q.double()), ValueError, r"q: dtype torch.float64 is not"),
    "k_cache_none": (lambda b: dict(k_cache=None), ArgumentTypeError,
                     r"k_cache: expected a torch.Tensor, got NoneType"),
    "k_cache_no_kv_heads": (lambda b: dict(k_cache=b.k_cache[:, :, :0], v_cache=b.v_cache[:, :, :0]),
                            ValueError, r"k_cache: block_size and num_kv_heads must be > 0"),
    "v_cache_other_dtype": (lambda b: dict(v_cache=b.v_cache.float()), ValueError, r"v_cache: dtype"),
    "block_table_numpy": (lambda b: dict(block_table=b.block_table.numpy()), ArgumentTypeError,
                          r"block_table: expected a torch.Tensor, got ndarray"),
    "cu_seqlens_q_list": (lambda b: dict(cu_seqlens_q=[0, 3, 4]), ArgumentTypeError,
                          r"cu_seqlens_q: expected a torch.Tensor, got list"),
    "seq_lens_int64": (lambda b: dict(seq_lens=b.seq_lens.long()), ValueError, r"seq_lens: expected int32"),
    "seq_lens_other_device": (lambda b: dict(seq_lens=b.seq_lens.to(_META)), ValueError,
                              r"seq_lens: on meta, q on"),
    "scale_str": (lambda b: dict(scale="0.125"), ArgumentTypeError, r"scale: must be a host number"),
    "scale_nan": (lambda b: dict(scale=float("nan")), ValueError, r"scale: must be finite and > 0"),
    "scale_past_float32": (lambda b: dict(scale=1e39), ValueError, r"scale: must be finite and > 0"),
    "scale_tensor": (lambda b: dict(scale=torch.tensor(0.125)), ArgumentTypeError,
                     r"scale: must be a host number \(int or float\), got Tensor"),
    "sliding_window_str": (lambda b: dict(sliding_window="8"), ArgumentTypeError,
                           r"sliding_window: must be an int \(None: no window\), got str"),
    "sliding_window_float": (lambda b: dict(sliding_window=4.5), ArgumentTypeError,
                             r"sliding_window: must be an int \(None: no window\), got float"),
    "sliding_window_bool": (lambda b: dict(sliding_window=True), ArgumentTypeError,
                            r"sliding_window: must be an int"),
    "sliding_window_zero": (lambda b: dict(sliding_window=0), ValueError,
                            r"sliding_window: must be in \[1, 2\*\*31 - 1\] \(None: no window\), got 0"),
    "sliding_window_negative": (lambda b: dict(sliding_window=-1), ValueError, r"sliding_window: must be in"),
    "sliding_window_past_int32": (lambda b: dict(sliding_window=2**31), ValueError,
                                  r"sliding_window: must be in"),
    "softcap_negative": (lambda b: dict(softcap=-1.0), ValueError, r"softcap: must be 0 \(off\) or in"),
    "softcap_str": (lambda b: dict(softcap="20"), ArgumentTypeError, r"softcap: must be a host number"),
    "softcap_past_accuracy": (lambda b: dict(softcap=2.0**31), ValueError,
                              r"softcap: must be 0 \(off\) or in \[1.175e-38, 1000\], got 2147483648.0"),
    "sinks_list": (lambda b: dict(sinks=[0.0] * 4), ArgumentTypeError,
                   r"sinks: expected a torch.Tensor, got list"),
    "sinks_int": (lambda b: dict(sinks=torch.zeros(4, dtype=torch.int32)), ValueError,
                  r"sinks: expected float16, bfloat16 or float32, got torch.int32"),
    "sinks_shape": (lambda b: dict(sinks=torch.zeros(3)), ValueError, r"sinks: expected \[4\], got \(3,\)"),
    "sinks_strided": (lambda b: dict(sinks=torch.zeros(8)[::2]), ValueError, r"sinks: must be contiguous"),
    "sinks_other_device": (lambda b: dict(sinks=torch.zeros(4, device=_META)), ValueError,
                           r"sinks: on meta, q on"),
    "k_scale_with_16_bit_cache": (lambda b: dict(k_scale=torch.ones(1)), ValueError,
                                  r"k_scale: only fp8 caches take scales; this cache is torch.float16"),
    "v_scale_with_16_bit_cache": (lambda b: dict(v_scale=torch.ones(1)), ValueError,
                                  r"v_scale: only fp8 caches take scales"),
    "out_list": (lambda b: dict(out=[0.0]), ArgumentTypeError, r"out: expected a torch.Tensor, got list"),
    "out_other_device": (lambda b: dict(out=torch.empty_like(b.q, device=_META)), ValueError,
                         r"out: on meta, q on"),
    "out_other_dtype": (lambda b: dict(out=b.q.float()), ValueError,
                        r"out: expected \(4, 4, 64\) torch.float16"),
    "max_seqlen_q_str": (lambda b: dict(max_seqlen_q="3"), ArgumentTypeError,
                         r"max_seqlen_q: must be a host int \(None: bounds from shapes\), got str"),
    "max_seqlen_q_float": (lambda b: dict(max_seqlen_q=3.0), ArgumentTypeError,
                           r"max_seqlen_q: must be a host int"),
    "max_seqlen_q_negative": (lambda b: dict(max_seqlen_q=-1), ValueError,
                              r"max_seqlen_q: must be >= 0, got -1"),
    "max_seqlen_k_list": (lambda b: dict(max_seqlen_k=[40]), ArgumentTypeError,
                          r"max_seqlen_k: must be a host int"),
    "max_seqlen_k_tensor": (lambda b: dict(max_seqlen_k=torch.tensor(40)), ArgumentTypeError,
                            r"max_seqlen_k: must be a host int"),
    "vendor_int": (lambda b: dict(vendor=1), ArgumentTypeError, r"vendor: must be a str"),
    "vendor_unknown": (lambda b: dict(vendor="NVIDIA"), ValueError, r"vendor: unknown 'NVIDIA'"),
    "num_sms_str": (lambda b: dict(num_sms="132"), ArgumentTypeError, r"num_sms: must be a positive int"),
    "num_sms_bool": (lambda b: dict(num_sms=True), ArgumentTypeError, r"num_sms: must be a positive int"),
    "check_values_str": (lambda b: dict(check_values="yes"), ArgumentTypeError,
                         r"check_values: must be True, False or None"),
    "unknown_keyword": (lambda b: dict(window=8), TypeError, r"window: not a keyword argument of variant"),
}


def _changed(batch, changes):
    """The call's positional tensors and keywords, `changes` applied."""
    names = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens")
    args = [changes.get(n, getattr(batch, n)) for n in names]
    return args, {**batch.options, **{k: v for k, v in changes.items() if k not in names}}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mistake", list(KERNEL_API_MISTAKES))
def test_each_kernel_api_mistake_raises_naming_its_argument(batch, variant, mistake):
    change, exc, message = KERNEL_API_MISTAKES[mistake]
    args, kwargs = _changed(batch, change(batch))
    with pytest.raises(exc, match=f"^{message}") as raised:
        VARIANTS[variant](*args, **kwargs)
    if exc is ArgumentTypeError:  # a wrong type: a TypeError, and the ValueError callers caught before
        assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_config_must_be_a_config_and_only_where_a_variant_takes_one(batch, variant):
    if "config" in VARIANTS[variant].hints:
        with pytest.raises(ArgumentTypeError, match=r"^config: expected a kernels.paged_attention.heuristics"
                                                     r".Config, got str"):
            VARIANTS[variant](*batch.args(), config="fast", **batch.options)
    else:
        with pytest.raises(TypeError, match=f"^config: not a keyword argument of variant '{variant}'"):
            VARIANTS[variant](*batch.args(), config=Config(16, 16, 1, 4, 2), **batch.options)


def test_a_config_whose_q_block_holds_no_head_group_is_refused():
    b = build_batch(BatchSpec((1,), (20,), num_q_heads=32, num_kv_heads=1, head_size=64))
    with pytest.raises(ValueError, match="^config: block_m 16 holds no whole group of the 32 query heads"):
        VARIANTS["static_grid"](*b.args(), config=Config(16, 16, 1, 4, 2), **b.options)


@pytest.mark.parametrize("field, value", [("block_m", 24), ("block_m", 8), ("tile_size", 0), ("num_warps", 3),
                                          ("num_segments", 0), ("num_stages", 1.5), ("programs_per_sm", -1)])
def test_a_config_the_kernels_cannot_compile_is_refused_when_made(field, value):
    fields = {**dict(block_m=16, tile_size=16, num_segments=1, num_warps=4, num_stages=2), field: value}
    with pytest.raises(ValueError, match=f"^{field}: must be"):
        Config(**fields)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("value, window", [(None, False), (8, True), (np.int64(8), True)])
def test_no_window_is_none_and_a_window_is_a_positive_int(batch, variant, value, window):
    """vLLM's convention: None, no window; W > 0, keys less than W positions back (a NumPy int
    too). A variant without windows refuses only a window."""
    call = VARIANTS[variant].plan
    if window and "sliding_window" not in VARIANTS[variant].features:
        with pytest.raises(NotImplementedError, match=f"variant '{variant}' does not support sliding_window"):
            call(*batch.args(), sliding_window=value, **batch.options)
    else:
        assert call(*batch.args(), sliding_window=value, **batch.options)[1]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_scales_of_an_fp8_cache_may_be_zero_dimensional(fp8_batch, variant):
    if variant in FP8_VARIANTS:
        scales = {k: fp8_batch.options[k].reshape(()) for k in ("k_scale", "v_scale")}
        assert VARIANTS[variant].plan(*fp8_batch.args(), **{**fp8_batch.options, **scales})[1]


def test_tensors_a_launch_cannot_read_are_refused_before_it(batch, monkeypatch):
    """Planning takes any device (the static gate plans CPU tensors for GPU targets); launching
    needs a GPU, or the CPU under Triton's interpreter."""
    monkeypatch.setattr(KernelLaunch, "__call__", _REAL_LAUNCH)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert VARIANTS["static_grid"].plan(*batch.args(), **batch.options)[1]
    with pytest.raises(ValueError, match=r"^q: on cpu; the kernels run on a CUDA/ROCm GPU, or on the CPU "
                                         r"under Triton's interpreter"):
        VARIANTS["static_grid"](*batch.args(), **batch.options)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("shape", ["head8", "block8"])
def test_shapes_below_the_dot_minimum_run_or_are_refused_as_features(variant, shape, device):
    """tl.dot's reduction dimension is at least 16 on NVIDIA: a head of 8 (Q K^T) and qblock's
    blocks of 8 (P V, tile = block) did not compile for sm_90 (CompilationError); they are
    refused as features before any launch. Where supported they match the reference (naive
    has no tl.dot; the Q-block kernel gathers small blocks into tiles of 16)."""
    kw = dict(head_size=8, block_size=16) if shape == "head8" else dict(head_size=32, block_size=8)
    b = build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, dtype="float16", seed=4, **kw),
                    device, poison=True)
    feature = "head_size_below_16" if shape == "head8" else "block_size_below_16"
    if feature not in VARIANTS[variant].features:
        with pytest.raises(NotImplementedError, match=f"^variant '{variant}' does not support {feature}$"):
            VARIANTS[variant](*b.args(), **b.options)
        return
    with mock.patch.object(KernelLaunch, "__call__", _REAL_LAUNCH):
        out = VARIANTS[variant](*b.args(), out=b.new_output(), **b.options)
    torch.testing.assert_close(out.float(), paged_attention_reference(*b.args(), **b.options).float(),
                               atol=3e-3, rtol=3e-3)


test_shapes_below_the_dot_minimum_run_or_are_refused_as_features.launches = True


# ---------------------------------------------------------------- property: only named errors, or success

ARGUMENT_NAMES = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens", "scale",
                  "sliding_window", "softcap", "sinks", "k_scale", "v_scale", "out", "max_seqlen_q",
                  "max_seqlen_k", "vendor", "num_sms", "config", "check_values")
_TENSOR_ARGS = ARGUMENT_NAMES[:6] + ("sinks", "k_scale", "v_scale", "out")
_SCALARS = (None, 0, 1, -1, 8, 4.5, 0.0, 1e-45, 1e39, math.nan, math.inf, -math.inf, True, False, "8",
            [8], np.int64(8), np.float32(0.5), np.bool_(True), torch.tensor(8), torch.tensor(0.5), 2**31,
            2**40, 1j)
_HINT_VALUES = {
    "vendor": (None, "nvidia", "amd", "cpu", "NVIDIA", "", 1, ["nvidia"], b"nvidia"),
    "config": (None, "fast", {}, 1, Config(16, 16, 1, 4, 2), Config(64, 64, 2, 4, 2, read_ahead=True)),
    # check_values=False is left out: with it, bad metadata values (drawn below) read out of
    # bounds, which no host check can see (kernels/inputs.py)
    "check_values": (None, True, "yes", 1, 0, np.bool_(True)),
}
_TOLERANCES = {torch.float16: (3e-3, 3e-3), torch.bfloat16: (1.5e-2, 1e-2), torch.float32: (3e-3, 3e-3)}


def _property_bases(device):
    """Tiny batches (the interpreter runs the calls that pass): 16-bit, and fp8 with every feature."""
    plain = BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=16, seed=2)
    fp8 = BatchSpec((1, 2), (9, 30), num_q_heads=4, num_kv_heads=2, head_size=16, fp8_kv=True, sinks=True,
                    sliding_window=8, softcap=20.0, seed=3)
    return [build_batch(spec, device, poison=True) for spec in (plain, fp8)]


def _tensor_variants(t: torch.Tensor):
    """(label, value): other types, dtypes, devices, shapes, strides and values for a tensor."""
    host = t.cpu()
    yield "absent", None
    yield "list", host.float().tolist()
    yield "numpy", host.float().numpy()
    yield "float", 1.0
    yield "str", "x"
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64,
                  torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        if dtype != t.dtype:
            try:
                yield f"as {dtype}", t.to(dtype)
            except (RuntimeError, TypeError):
                pass
    yield "on meta", t.to("meta")
    if t.dim():
        yield "first row", t[0]
    yield "extra dim", t[None]
    for d in range(t.dim()):
        yield f"dim {d} empty", t.narrow(d, 0, 0)
        if t.shape[d] > 1:
            yield f"dim {d} cut to 1", t.narrow(d, 0, 1)
        yield f"dim {d} doubled", torch.cat([t, t], d)
        yield f"dim {d} strided", torch.stack([t, t], d + 1).select(d + 1, 0)
    for i, j in itertools.combinations(range(t.dim()), 2):
        yield f"dims {i},{j} swapped", t.transpose(i, j)
    if t.is_floating_point():
        yield "NaN", torch.full(t.shape, math.nan, device=t.device).to(t.dtype)
        yield "zero-d", t.reshape(-1)[0]


def _metadata_values(batch):
    """Bad values of the metadata (the value checks, on here, catch them)."""
    table, lens, cu = batch.block_table, batch.seq_lens, batch.cu_seqlens_q
    num_blocks = batch.k_cache.shape[0]
    for label, value in (("-1", -1), ("num_blocks", num_blocks), ("int32 max", 2**31 - 1)):
        bad = table.clone()
        bad[0, 0] = value
        yield "block_table", f"id {label}", bad
    yield "seq_lens", "zeros", torch.zeros_like(lens)
    yield "seq_lens", "past the table", lens + table.shape[1] * batch.k_cache.shape[1]
    yield "seq_lens", "negative", -lens
    yield "cu_seqlens_q", "reversed", cu.flip(0).contiguous()
    yield "cu_seqlens_q", "shifted", cu + 1
    yield "cu_seqlens_q", "zeros", torch.zeros_like(cu)


def _candidates(batch):
    """Every (argument, label, value) the property draws from, for one base batch."""
    dev = batch.q.device
    templates = {"sinks": torch.zeros(4, device=dev), "k_scale": torch.ones(1, device=dev),
                 "v_scale": torch.ones(1, device=dev), "out": batch.new_output()}
    out = []
    for name in _TENSOR_ARGS:
        base = getattr(batch, name, None) if name in ARGUMENT_NAMES[:6] else batch.options.get(name)
        if base is None and name in templates:
            out.append((name, "given", templates[name]))
        out += [(name, label, value) for label, value in _tensor_variants(templates.get(name) if base is None
                                                                          else base)]
    out += list(_metadata_values(batch))
    for name in ("scale", "sliding_window", "softcap", "max_seqlen_q", "max_seqlen_k", "num_sms"):
        out += [(name, repr(v), v) for v in _SCALARS]
    for name, values in _HINT_VALUES.items():
        out += [(name, repr(v), v) for v in values]
    out.append(("window", "unknown keyword", 8))
    q = batch.q  # outputs that alias an input's memory or their own rows (test_inputs_refused.py)
    cache_bytes = batch.k_cache.reshape(-1).view(torch.uint8)[:q.numel() * q.element_size()]
    out += [("out", "q itself", q), ("out", "a view of k_cache", cache_bytes.view(q.dtype).view(q.shape)),
            ("out", "rows aliased", torch.empty(1, *q.shape[1:], dtype=q.dtype, device=dev).expand(q.shape))]
    return out


_NAMED = r"^(?:" + "|".join(ARGUMENT_NAMES) + r"|window): "


def _check_call(variant, batch, changes):
    """The property: the call returns the reference's answer or raises ValueError / TypeError
    naming an argument (or NotImplementedError naming the variant's missing feature) before any
    launch; never any other exception."""
    args = list(batch.args())
    kwargs = {**batch.options, "check_values": True}
    for name, _, value in changes:
        if name in ARGUMENT_NAMES[:6]:
            args[ARGUMENT_NAMES.index(name)] = value
        elif value is None:
            kwargs.pop(name, None)
        else:
            kwargs[name] = value
    launched = []

    def launch(self):
        launched.append(self.name)
        return _REAL_LAUNCH(self)

    with mock.patch.object(KernelLaunch, "__call__", launch):
        try:
            out = VARIANTS[variant](*args, **kwargs)
        except NotImplementedError as e:
            assert str(e).startswith(f"variant '{variant}' does not support "), e
            assert not launched
            return
        except (ValueError, TypeError) as e:
            assert re.match(_NAMED, str(e)), f"{type(e).__name__} names no argument: {e}"
            assert not launched, f"raised after launching {launched}: {e}"
            return
    q = args[0]
    assert isinstance(out, torch.Tensor) and out.shape == q.shape and out.dtype == q.dtype
    if q.device.type == "cpu" and (q.dtype == torch.bfloat16 or any(
            label == "NaN" and args[ARGUMENT_NAMES.index(name)].dtype == OCP_E4M3
            for name, label, _ in changes if name in ("k_cache", "v_cache"))):
        # triton 3.6's interpreter computes bf16 wrongly (README: bf16 is covered on GPUs) and
        # reads OCP e4m3's NaN bytes as +-480 (interpreter_support.py)
        return
    contract = {k: v for k, v in kwargs.items() if k in ("scale", "sliding_window", "softcap", "sinks",
                                                           "k_scale", "v_scale")}
    expected = paged_attention_reference(*args, **contract)
    atol, rtol = _TOLERANCES[q.dtype]
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol, equal_nan=True)


if importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    _CANDIDATES: dict = {}

    @pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's exp
    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_any_argument_mutation_succeeds_or_raises_a_named_error(device, data):
        """Drawn mutations (one or two) of every argument and hint of the kernel API: wrong types,
        dtypes, devices, shapes, strides, values, NaN/inf and out-of-range scalars. Tiny batches
        on the session's device (the CPU runs the good calls in Triton's interpreter)."""
        if device not in _CANDIDATES:
            _CANDIDATES[device] = [(b, _candidates(b)) for b in _property_bases(device)]
        batch, candidates = data.draw(st.sampled_from(_CANDIDATES[device]), label="base")
        variant = data.draw(st.sampled_from(list(VARIANTS)), label="variant")
        picks = data.draw(st.lists(st.integers(0, len(candidates) - 1), min_size=1, max_size=2, unique=True),
                          label="mutations")
        changes = [candidates[i] for i in picks]
        data.draw(st.just([(name, label) for name, label, _ in changes]), label="changes")
        _check_call(variant, batch, changes)

    test_any_argument_mutation_succeeds_or_raises_a_named_error.launches = True
else:
    @pytest.mark.skip(reason="hypothesis is not installed (the project's `test` extra has it: "
                             "pip install -e .[test])")
    def test_any_argument_mutation_succeeds_or_raises_a_named_error():
        pass
