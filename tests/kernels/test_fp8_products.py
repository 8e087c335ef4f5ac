"""`Config.fp8_products`: both products on e4m3 operands (common.attend_rows, attend_tiles).

Where the planner applies the knob, the fp8 kernels against the fp32 reference over awkward
shapes in Triton's interpreter, and the quantization's own math. The interpreter multiplies
fp8 operands exactly (it widens them to fp16, products in fp32) and, with
`interpreter_support.round_e4m3_like_gpus`, rounds to e4m3 as GPUs do; fp16 queries only (it
cannot compute in bf16; the kernel quantizes either to e4m3 the same way). What the knob
compiles to on sm_90, gfx942 and gfx950: tests/kernels/test_fp8_pv_compile.py.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch
import triton
import triton.language as tl
from grid_cases import FP8_PRODUCTS_TOLERANCE, make_spec, seed
from interpreter_support import needs_interpreter, planned_check, round_e4m3_like_gpus

from kernels import VARIANTS, platform
from kernels.batch import build_batch
from kernels.inputs import FNUZ_E4M3, OCP_E4M3
from kernels.paged_attention.common import e4m3_top, to_range
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure import check


@pytest.fixture(autouse=True)
def _gpu_rounding():
    if platform.interpreter_active():
        round_e4m3_like_gpus()


def _constexprs(dtype, fp8, vendor, config):
    spec = make_spec("gqa4", 128, 16, "mixed_small", dtype, "fp8_kv" if fp8 else "none")
    batch = build_batch(spec, "cpu", fill=False, **({"fp8_dtype": fp8} if fp8 else {}))
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=config,
                                               vendor=vendor, num_sms=132, **batch.options)
    return launches[0].constexprs


@pytest.mark.parametrize("dtype,fp8,vendor,applies", [
    ("bfloat16", OCP_E4M3, "nvidia", True), ("float16", OCP_E4M3, "nvidia", True),
    ("bfloat16", OCP_E4M3, "amd", True), ("bfloat16", FNUZ_E4M3, "amd", True),
    # FNUZ on NVIDIA arrives as bytes to decode: no e4m3 type to multiply in
    ("bfloat16", FNUZ_E4M3, "nvidia", False),
    ("bfloat16", None, "nvidia", False),  # a bf16 cache: nothing to multiply in fp8
])
def test_the_knob_reaches_the_kernel_only_for_a_format_the_target_converts(dtype, fp8, vendor, applies):
    config = Config(128, 128, 1, num_warps=8, num_stages=3, pv_fp16=True, qk_fp16=True)
    off = _constexprs(dtype, fp8, vendor, config)
    on = _constexprs(dtype, fp8, vendor, dataclasses.replace(config, fp8_products=True))
    assert not off["FP8_PRODUCTS"] and on["FP8_PRODUCTS"] is applies
    if applies:  # it replaces the fp16 products where both are asked for
        assert not on["PV_FP16"] and not on["QK_FP16"]
    else:  # ignored: the kernel is what it was without it
        assert on == off
    # Q K^T alone on e4m3: FP8_PRODUCTS with P V in fp16 (whatever q's dtype), where the same formats apply
    qk = _constexprs(dtype, fp8, vendor, dataclasses.replace(config, qk_e4m3=True))
    if applies:
        assert qk["FP8_PRODUCTS"] and qk["PV_FP16"] and not qk["QK_FP16"]
    else:
        assert qk == off


def test_both_products_and_q_kt_alone_on_e4m3_are_refused_together():
    """`fp8_products` puts P V on e4m3, `qk_e4m3` keeps it in fp16: a Config asking both is refused."""
    with pytest.raises(ValueError, match="^qk_e4m3: Q K.T alone on e4m3 contradicts fp8_products"):
        Config(16, 32, 1, num_warps=4, num_stages=2, fp8_products=True, qk_e4m3=True)
    # tiles of 16 are taken: P V stays in fp16
    assert Config(16, 16, 1, num_warps=4, num_stages=2, qk_e4m3=True).e4m3_operands


@pytest.mark.parametrize("tile_size,edge_tile", [(16, 0), (64, 16)])
def test_tiles_shorter_than_an_fp8_dot_takes_are_refused(tile_size, edge_tile):
    """P V's K is the tile (or the causal edge's): an 8-bit tl.dot needs K >= 32 on NVIDIA, so
    the Config refuses the knob there, not the compiler; the head (Q K^T's K) is the planner's
    question: a padded head under 32 leaves the knob unapplied."""
    with pytest.raises(ValueError, match="^fp8_products: needs tiles of >= 32 keys"):
        Config(16, tile_size, 1, num_warps=4, num_stages=2, edge_tile=edge_tile, fp8_products=True)
    assert Config(16, 32, 1, num_warps=4, num_stages=2, fp8_products=True).fp8_products
    spec = dataclasses.replace(make_spec("gqa4", 16, 16, "mixed_small", "float16", "fp8_kv"), head_size=16)
    batch = build_batch(spec, "cpu", fill=False, fp8_dtype=OCP_E4M3)
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(),
                                               config=Config(16, 32, 1, num_warps=4, num_stages=2,
                                                             fp8_products=True), **batch.options)
    assert not launches[0].constexprs["FP8_PRODUCTS"]


# Shapes of the Q-block kernel with the knob, each a path of attend_tiles: AMD's fp8 prefill
# (64 rows, tile 32 over blocks of 16: ids per position); NVIDIA's fp8 prefill (128 rows, tile
# 128, block ids per cache block, 3 stages, the causal edge in tiles of 32: the folded softmax);
# a decode split into 3 segments and merged (partials carry P's scale); a tile not dividing 544.
FP8_CONFIGS = {
    "bm64_tile32": Config(64, 32, 1, num_warps=8, num_stages=2, fp8_products=True),
    "bm128_tile128_vector_edge32": Config(128, 128, 1, num_warps=8, num_stages=3, programs_per_sm=0,
                                          read_ahead=True, block_vector=True, offsets_32=True, edge_tile=32,
                                          fp8_products=True),
    "split_tile32_seg3": Config(16, 32, 3, num_warps=4, num_stages=2, fp8_products=True),
    "tile64_over_block544_seg2": Config(16, 64, 2, num_warps=4, num_stages=2, fp8_products=True),
    # Q K^T alone on e4m3 (`Config.qk_e4m3`): P V in fp16, so tiles of 16 keys too
    "qk_e4m3_bm64_tile16": Config(64, 16, 1, num_warps=4, num_stages=2, qk_e4m3=True),
    "qk_e4m3_bm128_tile128_vector_edge32": Config(128, 128, 1, num_warps=8, num_stages=3, programs_per_sm=0,
                                                  read_ahead=True, block_vector=True, offsets_32=True,
                                                  edge_tile=32, qk_e4m3=True),
}
# (model, head size, block size, case, feature): GQA 4:1 and 5:1 and MQA, heads of 64, 80 (padded
# to 128) and 128, prefill and mixed batches of lengths no power of two, every feature at once.
FP8_SHAPES = [
    ("gqa4", 64, 16, "mixed_small", "fp8_kv"),
    ("gqa5", 80, 16, "prefill_5_18", "fp8_kv"),
    ("mqa", 128, 16, "chunked_33_97", "fp8_kv"),
    ("gqa4", 128, 16, "mixed_small", "all"),
]


@needs_interpreter
@pytest.mark.parametrize("config_name", list(FP8_CONFIGS))
@pytest.mark.parametrize("model,head_size,block_size,case,feature", FP8_SHAPES)
def test_fp8_products_match_the_reference(config_name, model, head_size, block_size, case, feature,
                                          device):
    config = FP8_CONFIGS[config_name]
    if config_name == "tile64_over_block544_seg2":
        block_size = 544
    spec = make_spec(model, head_size, block_size, case, "float16", feature,
                     seed=seed("fp8_products", model, head_size, case, feature))
    batch = build_batch(spec, device, poison=True, fp8_dtype=OCP_E4M3)
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=config,
                                               **batch.options)
    assert launches[0].constexprs["FP8_PRODUCTS"]
    # P V in fp16 exactly where Q K^T alone is on e4m3
    assert launches[0].constexprs["PV_FP16"] is config.qk_e4m3
    out = batch.new_output()  # NaN: an unwritten element fails
    # against the reference of q rounded to e4m3, as the kernel rounds it; P on e4m3 within
    # FP8_PRODUCTS_TOLERANCE, P in fp16 (`qk_e4m3`) within 16-bit products' tolerance
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=config)
    assert (atol, rtol) == (FP8_PRODUCTS_TOLERANCE if config.fp8_products else check.TOLERANCES["bfloat16"])
    VARIANTS["static_grid"](*batch.args(), out=out, config=config, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)
    # the same kernel without the knob, against the reference of q itself: the rounding is the difference
    exact, of_q = batch.new_output(), paged_attention_reference(*batch.args(), **batch.options).float()
    without = dataclasses.replace(config, fp8_products=False, qk_e4m3=False)
    VARIANTS["static_grid"](*batch.args(), out=exact, config=without, **batch.options)
    assert (out.float() - of_q).abs().max() > (exact.float() - of_q).abs().max()


@needs_interpreter
@pytest.mark.parametrize("model,head_size,case", [("gqa4", 64, "chunked_129_463"),
                                                   ("gqa5", 80, "chunked_129_463")])
def test_the_nvidia_trees_fp8_prefill_puts_q_kt_on_e4m3_and_matches_the_reference(model, head_size, case,
                                                                                   device):
    """The production path as a serving engine calls it (NVIDIA's tree, bf16 queries over an OCP
    e4m3 cache, a prefill past the short-prefill branch): [fp8-qk-e4m3] plans Q K^T on e4m3 and
    P V in fp16, and the output is checked as its plan calls for: against the reference of q rounded to
    e4m3, with bf16's tolerance (`check.Reference.of`, `check.tolerance`).
    The interpreter runs it in bf16 here: q reaches the products as e4m3, P and V as fp16."""
    spec = make_spec(model, head_size, 16, case, "bfloat16", "fp8_kv", seed=seed("qk_e4m3", model, case))
    batch = build_batch(spec, device, poison=True, fp8_dtype=OCP_E4M3)
    hints = dict(vendor="nvidia", num_sms=132)
    out = batch.new_output()  # NaN: an unwritten element fails
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, **hints, **batch.options)
    attention = launches[0].constexprs
    assert attention["FP8_PRODUCTS"] and attention["PV_FP16"] and not attention["QK_FP16"]
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, **hints)
    assert (atol, rtol) == check.TOLERANCES["bfloat16"]  # q rounded as the reference rounds it, P in fp16
    VARIANTS["static_grid"](*batch.args(), out=out, **hints, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@triton.jit
def _quantize(x_ptr, y_ptr, s_ptr, M: tl.constexpr, D: tl.constexpr):
    r = tl.arange(0, M)[:, None] * D + tl.arange(0, D)[None, :]
    y, s = to_range(tl.load(x_ptr + r), y_ptr.dtype.element_ty, e4m3_top(y_ptr.dtype.element_ty))
    tl.store(y_ptr + r, y)
    tl.store(s_ptr, s)


@needs_interpreter
@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e4, 0.0])
def test_queries_reach_e4m3_scaled_by_a_power_of_two(scale):
    """A Q-block of any magnitude goes to OCP e4m3 divided by 2^shift, its largest magnitude in
    (128, 256] (within 448, the format's largest); each element then rounds to e4m3's grid: within
    2^-4 of itself (3 mantissa bits, to nearest) unless it lies below e4m3's normals (2^-6), where
    the absolute error is at most half the smallest subnormal (2^-10). An all-zero block keeps
    shift 0. FNUZ (largest 240) would take (64, 128]: `e4m3_top`."""
    x = (torch.randn(16, 64, generator=torch.Generator().manual_seed(5)) * scale).half()
    y, s = torch.empty(16, 64, dtype=OCP_E4M3), torch.empty(1)
    _quantize[(1,)](x, y, s, 16, 64)
    shift = s.item()
    back = y.float() * 2.0 ** shift
    if scale == 0.0:
        assert shift == 0.0 and not back.any()
        return
    scaled = x.float() / 2.0 ** shift
    assert shift == int(shift) and 128 < scaled.abs().max() <= 256
    bound = torch.maximum(scaled.abs() * 2.0 ** -4, torch.full_like(scaled, 2.0 ** -10))
    assert ((y.float() - scaled).abs() <= bound).all()
    assert e4m3_top(tl.float8e4b8) == 7.0 and e4m3_top(tl.float8e4nv) == 8.0


def _block_rounded(x, fp8_dtype):
    """q rounded as `common.to_range` rounds a Q-block, in torch: one power of two for the whole block."""
    top = e4m3_top(tl.float8e4b8 if fp8_dtype == FNUZ_E4M3 else tl.float8e4nv)
    big = x.float().abs().max()
    shift = torch.ceil(torch.log2(big)) - top if big > 0 else torch.tensor(0.0)
    return (x.float() * 2.0 ** -shift).to(fp8_dtype).float() * 2.0 ** shift, shift


def _same_but_in_the_blocks_subnormals(reference, kernel, x, shift, fp8_dtype):
    """`check.e4m3_rounded` (`reference`, a power of two per row) is the kernels' q (`kernel`, one per
    block, 2^shift) wherever the block's scale keeps an element among e4m3's normals; below, the two
    differ by at most half the kernel's smallest subnormal step."""
    normal = 2.0 ** (-6 if fp8_dtype == OCP_E4M3 else -7)  # e4m3's smallest normal: OCP 2^-6, FNUZ 2^-7
    subnormal_step = normal * 2.0 ** -3
    scaled = x.float().abs() * 2.0 ** -shift
    among_normals = scaled >= normal
    assert torch.equal(reference.float()[among_normals], kernel[among_normals])
    assert ((reference.float() - kernel).abs()[~among_normals] <= subnormal_step * 2.0 ** shift).all()


if importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    _BLOCKS = dict(rows=st.integers(1, 16), exponent=st.integers(-20, 12), spread=st.integers(0, 24),
                   seed=st.integers(0, 2**31 - 1), dtype=st.sampled_from([torch.float16, torch.bfloat16]))

    def _block(rows, exponent, spread, seed, dtype, cols=64):
        """Rows of unit-variance values times 2^exponent, each row's magnitude 2^-(0..spread) of that."""
        gen = torch.Generator().manual_seed(seed)
        row_scale = 2.0 ** -torch.randint(0, spread + 1, (rows, 1), generator=gen).float()
        return (torch.randn(rows, cols, generator=gen) * row_scale * 2.0 ** exponent).to(dtype)

    @settings(max_examples=60, deadline=None, database=None, derandomize=True)
    @given(fnuz=st.booleans(), **_BLOCKS)
    def test_the_checks_rounded_q_is_the_kernels_whatever_rows_share_a_power(fnuz, rows, exponent, spread,
                                                                             seed, dtype):
        """The reference of q rounded to e4m3 (`check.e4m3_rounded`, one power of two per row) against
        q as the Q-block kernel rounds it (one power of two per Q-block, `common.to_range`, here in
        torch), in either e4m3 format, over blocks whose rows differ in magnitude by up to 2^24."""
        fp8_dtype = FNUZ_E4M3 if fnuz else OCP_E4M3
        x = _block(rows, exponent, spread, seed, dtype)
        kernel, shift = _block_rounded(x, fp8_dtype)
        reference = check.e4m3_rounded(x, fp8_dtype)
        assert reference.dtype == x.dtype
        _same_but_in_the_blocks_subnormals(reference, kernel, x, shift, fp8_dtype)

    @needs_interpreter
    @settings(max_examples=25, deadline=None, database=None, derandomize=True)
    @given(**_BLOCKS)
    def test_the_checks_rounded_q_is_what_the_kernels_to_range_makes(rows, exponent, spread, seed, dtype):
        """The same against the kernels' own `to_range` and conversion, run in Triton's interpreter
        (OCP e4m3, rounding as GPUs do; fp16 blocks: the interpreter cannot hold bf16 tensors here)."""
        x = _block(rows, exponent, spread, seed, torch.float16)
        padded = torch.zeros(16, 64, dtype=torch.float16)
        padded[:rows] = x
        y, s = torch.empty(16, 64, dtype=OCP_E4M3), torch.empty(1)
        _quantize[(1,)](padded, y, s, 16, 64)
        kernel = y.float()[:rows] * 2.0 ** s.item()
        _same_but_in_the_blocks_subnormals(check.e4m3_rounded(x, OCP_E4M3), kernel, x, s.item(), OCP_E4M3)
else:
    @pytest.mark.skip(reason="hypothesis is not installed (the project's `test` extra has it: "
                             "pip install -e .[test])")
    def test_the_checks_rounded_q_is_the_kernels_whatever_rows_share_a_power():
        pass
