"""`Config.v_pairs` and `.k_pairs`: an OCP e4m3 cache's V and K read as 16-bit pairs of dims and
split into the even and the odd dims' fp16 tiles (`common.split_e4m3_pairs`, `attend_tiles`).

Where the planner applies them (plans only, every vendor, format, query dtype and layout that
decides it), then the kernels against the fp32 reference over awkward shapes, outputs and unowned
cache slots poisoned: in Triton's interpreter the split runs in Triton's integer ops (fp16
queries: it cannot compute in bf16), on a GPU in PTX (bf16 queries too, as the NVIDIA tree plans
them). What the split compiles to on sm_90: test_fp8_pv_compile.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from grid_cases import make_spec, seed
from interpreter_support import planned_check

from kernels import VARIANTS, platform
from kernels.batch import build_batch
from kernels.inputs import FNUZ_E4M3, OCP_E4M3
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference

BOTH = dict(v_pairs=True, k_pairs=True)


def _attention(batch, config: Config, vendor: str = "nvidia"):
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=config,
                                               vendor=vendor, num_sms=132, **batch.options)
    return launches[0].constexprs


@pytest.mark.parametrize("dtype,fp8,vendor,flags,v,k", [
    ("float16", OCP_E4M3, "nvidia", {}, True, True),
    ("bfloat16", OCP_E4M3, "nvidia", {}, False, False),  # both products in bf16: no fp16 tile to make
    ("bfloat16", OCP_E4M3, "nvidia", {"pv_fp16": True}, True, False),
    ("bfloat16", OCP_E4M3, "nvidia", {"pv_fp16": True, "qk_fp16": True}, True, True),
    ("bfloat16", OCP_E4M3, "nvidia", {"qk_e4m3": True}, True, False),  # Q K^T on e4m3: K as loaded
    ("bfloat16", OCP_E4M3, "nvidia", {"fp8_products": True}, False, False),  # both on e4m3
    ("float16", FNUZ_E4M3, "nvidia", {}, False, False),  # FNUZ bytes decoded in the kernel
    ("float16", OCP_E4M3, "amd", {}, False, False),  # unmeasured there
    ("float16", None, "nvidia", {}, False, False),  # a 16-bit cache: nothing to split
])
def test_the_pairs_reach_the_kernel_only_where_they_make_fp16_tiles(dtype, fp8, vendor, flags, v, k):
    spec = make_spec("gqa4", 128, 16, "mixed_small", dtype, "fp8_kv" if fp8 else "none")
    batch = build_batch(spec, "cpu", fill=False, **({"fp8_dtype": fp8} if fp8 else {}))
    base = Config(16, 64, 1, num_warps=2, num_stages=3, **flags)
    off = _attention(batch, base, vendor)
    on = _attention(batch, dataclasses.replace(base, **BOTH), vendor)
    assert not off["V_PAIRS"] and not off["K_PAIRS"]
    assert (on["V_PAIRS"], on["K_PAIRS"]) == (v, k)
    pairs = ("V_PAIRS", "K_PAIRS")
    assert {n: x for n, x in on.items() if n not in pairs} == {n: x for n, x in off.items() if n not in pairs}


def test_padded_heads_odd_offsets_and_prefill_sized_q_blocks_keep_the_bytes():
    """A padded head (80 -> 128) has no whole pair past its last dim; a cache whose element offsets
    can be odd (a view starting one byte in, or an odd stride) has no int16 to read; Q-blocks of
    more than 32 rows (wgmma products) were slower with the pairs and once wrong on an H200."""
    spec = make_spec("gqa4", 80, 16, "mixed_small", "float16", "fp8_kv")
    assert not _attention(build_batch(spec, "cpu", fill=False, fp8_dtype=OCP_E4M3),
                          Config(16, 64, 1, num_warps=2, num_stages=3, **BOTH))["V_PAIRS"]
    batch = build_batch(make_spec("gqa4", 128, 16, "mixed_small", "float16", "fp8_kv"), "cpu", fill=False,
                        fp8_dtype=OCP_E4M3)
    for rows, applies in ((16, True), (32, True), (64, False), (128, False)):
        planned = _attention(batch, Config(rows, 64, 1, num_warps=4, num_stages=2, **BOTH))
        assert planned["V_PAIRS"] is planned["K_PAIRS"] is applies
    shifted = torch.empty(batch.v_cache.numel() + 1, dtype=OCP_E4M3)[1:].view(batch.v_cache.shape)
    assert not planning.pairs_apply(batch.k_cache, shifted, "nvidia", 128, 16)
    odd = torch.empty(batch.k_cache.shape[:3] + (129,), dtype=OCP_E4M3)[..., :128]
    assert not planning.pairs_apply(odd, batch.v_cache, "nvidia", 128, 16)
    assert planning.pairs_apply(batch.k_cache, batch.v_cache, "nvidia", 128, 16)


def test_a_cache_one_byte_in_is_planned_anew_without_pairs():
    """Plans are kept by layout, which reads no address: a call whose caches start one byte in (the
    same shapes and strides) must not reuse the plan of aligned ones, whose int16 reads it cannot
    take; an aligned call after it gets the pairs again."""
    planning.release_buffers()
    batch = build_batch(make_spec("gqa4", 64, 16, "mixed_small", "float16", "fp8_kv"), "cpu", fill=False,
                        fp8_dtype=OCP_E4M3)
    config = Config(16, 32, 1, num_warps=2, num_stages=2, **BOTH)

    def one_byte_in(cache):
        flat = torch.empty(cache.numel() + 1, dtype=OCP_E4M3)
        return flat[1:].as_strided(cache.shape, cache.stride())

    args = list(batch.args())
    shifted = [*args[:1], one_byte_in(args[1]), one_byte_in(args[2]), *args[3:]]
    planned = []
    for call in (args, shifted, args):
        _, launches = VARIANTS["static_grid"].plan(*call, out=batch.new_output(), config=config,
                                                   vendor="nvidia", num_sms=132, **batch.options)
        planned.append((launches[0].constexprs["V_PAIRS"], launches[0].constexprs["K_PAIRS"]))
    assert planned == [(True, True), (False, False), (True, True)]


@pytest.mark.parametrize("arch,applies", [("sm_80", False), ("sm_89", True), ("sm_90", True),
                                          ("sm_100", True)])
def test_nvidia_gpus_before_sm89_keep_the_bytes(monkeypatch, arch, applies):
    """`cvt.rn.f16x2.e4m3x2` is sm_89's: planned on an older NVIDIA GPU (an A100), the caches are read
    as bytes, as before."""
    gpu = platform.Platform("nvidia", arch, arch, 32, 108)
    monkeypatch.setattr(platform, "current", lambda: gpu)
    planning.release_buffers()
    batch = build_batch(make_spec("gqa4", 64, 16, "mixed_small", "float16", "fp8_kv"), "cpu", fill=False,
                        fp8_dtype=OCP_E4M3)
    planned = _attention(batch, Config(16, 32, 1, num_warps=2, num_stages=2, **BOTH))
    assert planned["V_PAIRS"] is planned["K_PAIRS"] is applies


@pytest.mark.parametrize("interpreted", [False, True])
def test_the_split_is_ptx_unless_interpreted(monkeypatch, interpreted):
    monkeypatch.setattr(platform, "interpreter_active", lambda: interpreted)
    planning.release_buffers()  # plans are kept by shapes and config, not by the interpreter's state
    batch = build_batch(make_spec("gqa4", 64, 16, "mixed_small", "float16", "fp8_kv"), "cpu", fill=False,
                        fp8_dtype=OCP_E4M3)
    planned = _attention(batch, Config(16, 32, 1, num_warps=2, num_stages=2, **BOTH))
    assert planned["PAIRS_PTX"] is not interpreted


# The paths of attend_tiles the pairs take: the fp8 decode's shape (tile 64, 2 warps) split into 3
# segments, tiles of 32 over blocks of 16 (ids per position) with a 16-key causal edge, a tile not
# dividing blocks of 544, and 32-row Q-blocks of prefills in tiles of 128; V alone and with K too.
PAIRS_CONFIGS = {
    "tile64_seg3": Config(16, 64, 3, num_warps=2, num_stages=3, **BOTH),
    "tile32_edge16_v": Config(16, 32, 1, num_warps=4, num_stages=2, edge_tile=16, v_pairs=True),
    "tile64_block544_seg2": Config(16, 64, 2, num_warps=4, num_stages=2, read_ahead=True, **BOTH),
    "bm32_tile128_v": Config(32, 128, 1, num_warps=4, num_stages=2, v_pairs=True),
}
# (config, model, head, block, case, feature): each path with GQA 4:1 or 5:1 or MQA, heads of 64 or
# 128, decodes, prefills and mixed batches of no power-of-two length, every feature at once.
PAIRS_CASES = [
    ("tile64_seg3", "gqa4", 64, 16, "mixed_small", "fp8_kv"),
    ("tile64_seg3", "gqa5", 128, 16, "decode_1328", "all"),
    ("tile32_edge16_v", "gqa4", 64, 16, "mixed_small", "fp8_kv"),
    ("tile32_edge16_v", "mqa", 64, 32, "chunked_33_97", "fp8_kv"),
    ("tile64_block544_seg2", "gqa4", 64, 544, "mixed_small", "fp8_kv"),
    ("tile64_block544_seg2", "gqa5", 128, 544, "decode_1328", "all"),
    ("bm32_tile128_v", "mqa", 64, 32, "chunked_33_97", "fp8_kv"),
    ("bm32_tile128_v", "gqa5", 128, 16, "decode_1328", "all"),
]


@pytest.mark.parametrize("config_name,model,head_size,block_size,case,feature", PAIRS_CASES)
def test_pairs_match_the_reference(config_name, model, head_size, block_size, case, feature, device):
    config = PAIRS_CONFIGS[config_name]
    spec = make_spec(model, head_size, block_size, case, "float16", feature,
                     seed=seed("e4m3_pairs", model, head_size, block_size, case, feature))
    batch = build_batch(spec, device, poison=True, fp8_dtype=OCP_E4M3)
    planned = _attention(batch, config, vendor=None)
    assert planned["V_PAIRS"] and planned["K_PAIRS"] is config.k_pairs
    out = batch.new_output()  # NaN: an unwritten element fails
    VARIANTS["static_grid"](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options).float()
    torch.testing.assert_close(out.float(), expected, atol=2e-3, rtol=2e-3)
    # the same products as the bytes read one by one: only the order of fp32 sums differs
    without = batch.new_output()
    VARIANTS["static_grid"](*batch.args(), out=without, config=dataclasses.replace(config, v_pairs=False,
                                                                                     k_pairs=False),
                            **batch.options)
    torch.testing.assert_close(out.float(), without.float(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("case", ["decode_batch", "mixed"])
def test_the_nvidia_trees_fp8_decodes_with_bf16_queries_match_the_reference(case, device):
    """As a serving engine calls it: bf16 queries over an OCP e4m3 cache, the NVIDIA tree's own
    choice, on a GPU (the interpreter cannot compute in bf16): the decodes' Q-blocks read V as pairs
    ([e4m3-pairs]), a mixed batch's prefill-sized ones the bytes."""
    if device == "cpu":
        pytest.skip("bf16 runs on GPUs; the interpreter checks the split in fp16 "
                    "(test_pairs_match_the_reference)")
    spec = make_spec("llama3_8b", 128, 16, case, "bfloat16", "fp8_kv", seed=seed("e4m3_pairs_tree", case))
    batch = build_batch(spec, device, poison=True, fp8_dtype=OCP_E4M3)
    out = batch.new_output()
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, **batch.options)
    planned = launches[0].constexprs
    decode_sized = planned["BLOCK_M"] <= planning.PAIRS_MAX_BLOCK_M
    assert planned["V_PAIRS"] is decode_sized is (case == "decode_batch")
    # as the plan calls for: a prefill row's Q K^T on e4m3 ([fp8-qk-e4m3]) against the reference of q
    # rounded to e4m3 (`check.Reference.of`, `check.tolerance`)
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out)
    VARIANTS["static_grid"](*batch.args(), out=out, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)
