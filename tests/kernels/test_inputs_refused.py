"""Host-checkable mistakes that would let a kernel corrupt memory or compute NaN are refused in one line.

`out` overlapping an input's memory (data pointers and byte ranges, no device read) or its own
rows; non-finite sinks and non-positive scales (values inside device tensors: the value checks);
an unknown value of the PAGED_ATTENTION_CHECK_VALUES switch; every `Config` field typed and
bounded. tests/kernels/test_inputs.py holds the rest of the argument checks and the property
test that fuzzes them all.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import CHECK_VALUES_ENV, ArgumentTypeError
from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics
from kernels.paged_attention.heuristics import MAX_SEGMENTS, Config

NAMES = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens")


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def forbidden(self):
        raise AssertionError("a kernel was launched despite bad input")
    monkeypatch.setattr(KernelLaunch, "__call__", forbidden)


@pytest.fixture
def batch():
    return build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64, sinks=True))


@pytest.fixture
def fp8_batch():
    return build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64, fp8_kv=True))


def _inside(t: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(an out shaped and typed as `like`, a copy of `t` in its first bytes): the two overlap."""
    out = torch.empty_like(like)
    nbytes = t.numel() * t.element_size()
    assert nbytes <= out.numel() * out.element_size()
    copy = out.view(-1).view(torch.uint8)[:nbytes].view(t.dtype).view(t.shape)
    copy.copy_(t)
    return out, copy


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", NAMES)
def test_out_overlapping_an_input_is_refused(batch, variant, name):
    args = dict(zip(NAMES, batch.args()))
    options = {k: v for k, v in batch.options.items() if k != "sinks"}  # naive has no sinks
    if name in ("k_cache", "v_cache", "q"):  # out a view of a tensor at least as large
        source = args[name]
        out = source.view(-1).view(torch.uint8)[:batch.q.numel() * 2].view(batch.q.dtype).view(batch.q.shape)
    else:  # the metadata inside out's first bytes
        out, args[name] = _inside(args[name], batch.q)
    with pytest.raises(ValueError, match=f"^out: overlaps {name}'s memory"):
        VARIANTS[variant](*args.values(), out=out, **options)


@pytest.mark.parametrize("name", ["sinks", "k_scale", "v_scale"])
def test_out_overlapping_sinks_or_scales_is_refused(batch, fp8_batch, name):
    b = batch if name == "sinks" else fp8_batch
    out, inside = _inside(b.options[name], b.q)
    with pytest.raises(ValueError, match=f"^out: overlaps {name}'s memory"):
        VARIANTS["static_grid"](*b.args(), out=out, **{**b.options, name: inside})


def test_out_beside_an_input_in_one_buffer_is_accepted(batch):
    """Byte ranges that touch but do not overlap: q and out halves of one allocation."""
    both = torch.empty(2, *batch.q.shape, dtype=batch.q.dtype)
    both[0] = batch.q
    _, launches = VARIANTS["static_grid"].plan(both[0], *batch.args()[1:], out=both[1], **batch.options)
    assert launches


def test_out_that_is_q_is_refused(batch):
    with pytest.raises(ValueError, match="^out: overlaps q's memory"):
        VARIANTS["static_grid"](*batch.args(), out=batch.q, **batch.options)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_out_whose_rows_alias_each_other_is_refused(batch, variant):
    out = torch.empty(1, *batch.q.shape[1:], dtype=batch.q.dtype).expand(batch.q.shape)
    options = {k: v for k, v in batch.options.items() if k != "sinks"}
    with pytest.raises(ValueError, match=r"^out: its elements overlap each other \(strides \(0, 64, 1\)"):
        VARIANTS[variant](*batch.args(), out=out, **options)


def test_the_overlap_check_reads_no_device_memory(batch, monkeypatch):
    """Pointers and shapes only: every way of reading values raises (a sync on a GPU)."""
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    out = batch.new_output()
    for method in ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, method, lambda *a, **k: pytest.fail("a value was read"))
    assert VARIANTS["static_grid"].plan(*batch.args(), out=out, **batch.options)[1]


# ---------------------------------------------------------------- values of sinks and scales (value checks)

@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_sink_that_makes_every_output_nan_is_refused_by_the_value_checks(batch, value):
    sinks = batch.options["sinks"].clone()
    sinks[1] = value
    with pytest.raises(ValueError, match=f"^sinks: head 1 holds {value}; a sink must be finite"):
        VARIANTS["static_grid"](*batch.args(), **{**batch.options, "sinks": sinks}, check_values=True)


def test_a_sink_of_minus_infinity_is_no_sink(batch):
    sinks = torch.full_like(batch.options["sinks"], -math.inf)
    call = {**batch.options, "sinks": sinks}
    assert VARIANTS["static_grid"].plan(*batch.args(), **call, check_values=True)[1]


@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("value", [math.inf, math.nan, 0.0, -1.0])
def test_a_scale_that_is_not_finite_and_positive_is_refused_by_the_value_checks(fp8_batch, which, value):
    scale = torch.full_like(fp8_batch.options[which], value)
    call = {**fp8_batch.options, which: scale}
    with pytest.raises(ValueError, match=f"^{which}: must be finite and > 0, got {value}"):
        VARIANTS["qblock"](*fp8_batch.args(), **call, check_values=True)
    assert VARIANTS["qblock"].plan(*fp8_batch.args(), **call, check_values=False)[1]  # no read unasked


# ---------------------------------------------------------------- the environment switch

@pytest.mark.parametrize("value", ["2", "maybe", "tru", "-1", "enabled", "1 0"])
def test_an_unknown_value_of_the_switch_is_refused(batch, monkeypatch, value):
    monkeypatch.setenv(CHECK_VALUES_ENV, value)
    with pytest.raises(ValueError, match=f"^{CHECK_VALUES_ENV}: unknown value {value!r}; expected one of"):
        VARIANTS["static_grid"].plan(*batch.args(), **batch.options)
    assert VARIANTS["static_grid"].plan(*batch.args(), check_values=False, **batch.options)[1]  # hint wins


@pytest.mark.parametrize("value", ["", "0", "1", "TRUE", " on ", "No", "off", "yes", "false"])
def test_the_known_values_of_the_switch_are_accepted(batch, monkeypatch, value):
    monkeypatch.setenv(CHECK_VALUES_ENV, value)
    assert VARIANTS["static_grid"].plan(*batch.args(), **batch.options)[1]


# ---------------------------------------------------------------- Config: typed and bounded

BASE = dict(block_m=16, tile_size=16, num_segments=1, num_warps=4, num_stages=2)


@pytest.mark.parametrize("field, value, exc", [
    ("num_segments", 4096, ValueError), ("num_segments", MAX_SEGMENTS + 1, ValueError),
    ("block_m", 2048, ValueError), ("tile_size", 2048, ValueError), ("num_warps", 64, ValueError),
    ("num_stages", 9, ValueError), ("programs_per_sm", 33, ValueError), ("max_programs", 2**31, ValueError),
    ("waves_per_eu", 9, ValueError), ("matrix_instr_nonkdim", 8, ValueError), ("edge_tile", 2048, ValueError),
    ("num_stages", True, ArgumentTypeError), ("num_segments", np.int64(4), ArgumentTypeError),
    ("num_warps", 4.0, ArgumentTypeError), ("pv_fp16", "yes", ArgumentTypeError),
    ("read_ahead", 1, ArgumentTypeError), ("block_vector", None, ArgumentTypeError),
    ("offsets_32", np.bool_(True), ArgumentTypeError), ("seq_items", "False", ArgumentTypeError),
    ("decode_layout", 0, ArgumentTypeError), ("fused_reduce", 1.0, ArgumentTypeError),
    ("qk_fp16", [True], ArgumentTypeError), ("fp8_products", "on", ArgumentTypeError),
    ("source", 3, ArgumentTypeError),
])
def test_a_config_field_of_the_wrong_type_or_past_its_bound_is_refused(field, value, exc):
    with pytest.raises(exc, match=f"^{field}: must be"):
        Config(**{**BASE, field: value})


def test_the_bounds_themselves_are_accepted():
    top = Config(block_m=1024, tile_size=1024, num_segments=MAX_SEGMENTS, num_warps=32, num_stages=8,
                 programs_per_sm=32, max_programs=2**31 - 1, waves_per_eu=8, matrix_instr_nonkdim=32,
                 edge_tile=1024, read_ahead=True)
    assert dataclasses.replace(top, matrix_instr_nonkdim=4).matrix_instr_nonkdim == 4


@pytest.mark.parametrize("num_sms", [132, 304, 10_000])
def test_the_trees_never_choose_more_segments_than_a_config_takes(num_sms):
    """A multi-token decode of one item splits into 2 programs per SM, at most MAX_SEGMENTS."""
    f = heuristics.Features(num_seqs=1, num_tokens=4, max_query_len=4, max_kv_len=1 << 20, avg_kv_len=1 << 20,
                            decode_share=0.0, queries_per_kv=4, num_kv_heads=1, head_size=128, block_size=16,
                            dtype="bfloat16", fp8_kv=False, num_sms=num_sms)
    assert heuristics.choose("nvidia", f).num_segments <= MAX_SEGMENTS
