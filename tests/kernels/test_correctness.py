"""Every registered variant against the fp32 reference over a grid of awkward shapes.

The whole grid runs on a GPU; on CPU, Triton's interpreter runs the cases marked
`cpu_subset` (small head counts, fp16) within CI's budget. A variant that lacks a feature
raises NotImplementedError, and the case is skipped with that message as its reason.
Tolerances: fp16 outputs carry the rounding of P to fp16 before the P·V product (as on the
tensor cores, ~1e-3 relative), hence 3e-3; bf16 has 8 bits of mantissa, hence 1.5e-2 /
1e-2. fp8 caches are dequantized identically by the reference, so they need no extra
allowance.

Every batch here is poisoned (`build_batch(poison=True)`): each cache slot no sequence owns
(the tail of a sequence's last block, the spare blocks that block-table padding names)
holds NaN, the fp8 formats' NaN bytes included, as recycled memory of a serving engine may;
a kernel that lets one into a sequence's arithmetic (a masked-out key's 0 times a NaN V)
outputs NaN for it. The output buffer is NaN too, so an unwritten element fails as well.

fp8 caches come in both formats of `kernels.inputs.FP8_FORMATS` on every device: OCP e4m3
(features `fp8_kv`, `all`) and FNUZ e4m3 (`fp8_fnuz`, `all_fnuz`). A variant reads FNUZ the
way its target does: AMD converts it natively (an AMD GPU runs that path here; Triton 3.6's
interpreter cannot hold fp8e4b8, see interpreter_support.py), NVIDIA and the interpreter
run the kernels' own exact decoder (`common.decode_fnuz_e4m3`, checked on all 256 bytes).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from grid_cases import (
    CPU_SUBSET,
    FEATURES,
    FORCED_CONFIGS,
    FORCED_FEATURES,
    FORCED_VARIANTS,
    MODELS,
    forced_spec,
    fp8_dtype,
    grid_params,
    make_spec,
    matches_spec,
    seed,
)
from interpreter_support import (
    INTERPRETER_FNUZ_REASON,
    interpreter_reads_fnuz,
    interpreter_reads_ocp_nan,
    needs_interpreter,
    planned_check,
)

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import FNUZ_E4M3, OCP_E4M3, is_fp8
from kernels.paged_attention import heuristics, planning
from kernels.paged_attention.common import kv_to, locate_q_block
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure.check import TOLERANCES  # dtype -> (atol, rtol), the gate's too

pytestmark = pytest.mark.slow  # starts processes

# pytest-xdist registers the xdist_group mark; without it (CPU CI) the mark is not added.
HAS_XDIST = importlib.util.find_spec("xdist") is not None


def _params():
    for case in grid_params():
        marks = [pytest.mark.grid] + ([pytest.mark.cpu_subset] if case in CPU_SUBSET else [])
        if HAS_XDIST:  # cases compiling the same kernels share a worker under --dist loadgroup
            model, head_size, block_size, _, dtype, feature = case
            ratio = MODELS[model][0] // MODELS[model][1]
            marks.append(pytest.mark.xdist_group(f"r{ratio}-h{head_size}-b{block_size}-{dtype}-{feature}"))
        yield pytest.param(*case, marks=marks, id="-".join(str(x) for x in case))


def make_batch(spec: BatchSpec, feature: str, device):
    return poisoned_batch(spec, device, fp8_dtype=fp8_dtype(feature))


def poisoned_batch(spec: BatchSpec, device, **kwargs):
    """`build_batch` as every test here uses it: the cache slots no sequence owns hold NaN."""
    return build_batch(spec, device, poison=True, **kwargs)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("model,head_size,block_size,case,dtype,feature", list(_params()))
def test_matches_reference(variant, model, head_size, block_size, case, dtype, feature, device):
    batch = make_batch(matches_spec(model, head_size, block_size, case, dtype, feature), feature, device)
    assert batch.k_cache.dtype == (fp8_dtype(feature) if batch.spec.fp8_kv else batch.q.dtype)
    out = batch.new_output()  # NaN-poisoned: an unwritten element fails below
    expected, (atol, rtol) = planned_check(VARIANTS[variant], batch, out)
    try:
        VARIANTS[variant](*batch.args(), out=out, **batch.options)
    except NotImplementedError as exc:
        pytest.skip(str(exc))
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@needs_interpreter
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_runs_in_interpreter(variant):
    """Kernels must stay interpreter-compatible: run each once on CPU tensors."""
    code = (
        "import torch; from kernels import VARIANTS; from kernels.batch import BatchSpec, build_batch;"
        "from kernels.reference import paged_attention_reference as ref;"
        "b = build_batch(BatchSpec((3, 1), (9, 21), num_q_heads=4, num_kv_heads=2, head_size=64),"
        " poison=True);"
        f"o = VARIANTS[{variant!r}](*b.args(), **b.options);"
        "torch.testing.assert_close(o, ref(*b.args(), **b.options), atol=3e-3, rtol=3e-3)"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


# Launch configurations the heuristics may not pick for the grid's shapes: grid_cases.FORCED_CONFIGS.
@pytest.mark.parametrize("variant", FORCED_VARIANTS)
@pytest.mark.parametrize("config_name", list(FORCED_CONFIGS))
@pytest.mark.parametrize("feature", FORCED_FEATURES)
def test_forced_config_matches_reference(variant, config_name, feature, device):
    config = FORCED_CONFIGS[config_name][0]
    batch = make_batch(forced_spec(config_name, feature), feature, device)
    out = batch.new_output()
    expected, (atol, rtol) = planned_check(VARIANTS[variant], batch, out, config=config)
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("config", [
    None, Config(256, 64, 1, num_warps=8, num_stages=2, read_ahead=True),
    Config(256, 64, 1, num_warps=8, num_stages=3, read_ahead=True, block_vector=True, offsets_32=True,
           edge_tile=16)], ids=["heuristics", "rows256_tile64", "rows256_tile64_edge16"])
def test_head_group_that_does_not_divide_the_q_block(variant, config, device):
    """Falcon-7b's 71 query heads on one KV head: a Q-block of 128 rows holds one token, one of
    256 rows three (the NVIDIA prefill heuristics' choice for it, with its causal edge in tiles
    of 16 keys beyond 1024); rows past the last whole head group stay empty, and a prefill's
    last Q-block holds fewer tokens than BLOCK_Q."""
    spec = BatchSpec((1, 7, 70, 1), (300, 7, 97, 1), num_q_heads=71, num_kv_heads=1, head_size=64,
                     block_size=16, dtype="float16", seed=71)
    batch = poisoned_batch(spec, device)
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("head_size", [128, 256])
def test_short_decodes_split_as_the_heuristics_choose(head_size, device):
    """Few decodes of 129-1024 keys split into up to 16 segments of small tiles (NVIDIA's
    `short_split`, head 256 included): every segment, the empty ones of the shorter sequence
    too, merges into the right output."""
    spec = BatchSpec((1, 1), (700, 150), num_q_heads=4, num_kv_heads=2, head_size=head_size,
                     block_size=16, dtype="float16", seed=head_size)
    features = heuristics.features_from_spec(spec, heuristics.DEFAULT_NUM_SMS["nvidia"])
    assert heuristics.choose("nvidia", features).num_segments == 16  # the branch under test
    batch = poisoned_batch(spec, device)
    out = batch.new_output()
    VARIANTS["static_grid"](*batch.args(), out=out, max_seqlen_q=1, max_seqlen_k=700, vendor="nvidia",
                            num_sms=heuristics.DEFAULT_NUM_SMS["nvidia"], **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("segments", [1, 4])
def test_windowed_decode_segments_split_only_visible_tiles(variant, segments, device):
    """Decodes far past a narrow window: the segments split the window's tiles (the heuristics
    size them by the visible keys), so most segments are empty and must merge as nothing."""
    spec = BatchSpec((1, 1, 1), (700, 300, 20), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", sliding_window=37, sinks=True, seed=7)
    batch = poisoned_batch(spec, device)
    out = batch.new_output()
    config = Config(16, 16, segments, num_warps=4, num_stages=2)
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant,config", [
    ("naive", None), ("qblock", None), ("parallel", None), ("flex_tile", None), ("static_grid", None),
    ("static_grid", Config(16, 16, 3, num_warps=4, num_stages=2)),
    ("static_grid", Config(16, 16, 4, num_warps=4, num_stages=2, seq_items=True, fused_reduce=True)),
], ids=["naive", "qblock", "parallel", "flex_tile", "static_grid", "static_grid_reduce",
        "static_grid_fused_reduce"])
def test_token_offsets_in_int64_match_the_reference(variant, config, monkeypatch, device):
    """Batches of more than 2**31 elements of q (llama3-8b: 524,288 tokens) form their q, out
    and partials offsets in int64 (`planning.token_offsets_32`); in int32 they wrapped and
    the kernels read and wrote out of bounds. Too large for the interpreter: that path,
    forced on a small batch, must give the same outputs (decodes, split and merged too)."""
    monkeypatch.setattr(planning, "token_offsets_32", lambda *_: False)
    planning.release_buffers()  # no plan kept from before the switch
    try:
        decodes = config is not None and config.seq_items
        query_lens, kv_lens = ((1, 1, 1), (300, 40, 1)) if decodes else ((1, 5, 17, 1), (300, 18, 40, 1))
        spec = BatchSpec(query_lens, kv_lens, num_q_heads=8, num_kv_heads=2, head_size=64, block_size=16,
                         dtype="float16", seed=31)
        batch = poisoned_batch(spec, device)
        forced = {} if config is None else {"config": config}  # naive and qblock take none
        _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), **forced,
                                             **batch.options)
        assert all(not launch.constexprs["TOKEN_OFFSETS_32"] for launch in launches)
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, **forced, **batch.options)
        expected = paged_attention_reference(*batch.args(), **batch.options)
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)
    finally:
        planning.release_buffers()


@pytest.mark.parametrize("field", ["pv_fp16", "qk_fp16"])
def test_fp16_products_only_for_bf16_queries_over_an_ocp_cache(field):
    """`Config.pv_fp16` and `.qk_fp16` reach the kernel (PV_FP16, QK_FP16) only where they are
    exact and cheap: bf16 queries over an OCP e4m3 cache; fp16 queries already multiply in fp16,
    FNUZ reaches fp16 through f32 on gfx942, and a bf16 cache is q's dtype."""
    config = Config(128, 128, 1, num_warps=8, num_stages=3)
    for dtype, fp8, expected in (("bfloat16", OCP_E4M3, True), ("float16", OCP_E4M3, False),
                                 ("bfloat16", FNUZ_E4M3, False), ("bfloat16", None, False)):
        spec = make_spec("gqa4", 128, 16, "mixed_small", dtype, "fp8_kv" if fp8 else "none")
        batch = build_batch(spec, "cpu", fill=False, **({"fp8_dtype": fp8} if fp8 else {}))
        for knob in (True, False):
            _, launches = VARIANTS["static_grid"].plan(
                *batch.args(), out=batch.new_output(), config=dataclasses.replace(config, **{field: knob}),
                **batch.options)
            assert launches[0].constexprs[field.upper()] is (expected and knob), (dtype, fp8, knob)


# `Config.pv_fp16`'s shapes: a prefill per vendor and a split one. NVIDIA: the bf16 prefill's shape,
# which the fp8 sweep tries with it (3 stages, block ids per cache block, edges of 32; 128 KiB of
# shared memory on sm_90, 96 KiB compiled for gfx942, more than an MI300's 64 KiB of LDS); AMD:
# heuristics._amd's fp8 prefill (grid_cases.FORCED_CONFIGS).
PV_FP16_CONFIGS = {
    "prefill": {"nvidia": Config(128, 128, 1, num_warps=8, num_stages=3, programs_per_sm=0, read_ahead=True,
                                 block_vector=True, offsets_32=True, edge_tile=32, pv_fp16=True),
                "amd": dataclasses.replace(FORCED_CONFIGS["amd_fp8_prefill_bm64_tile32"][0], pv_fp16=True)},
    "split_tile64": dict.fromkeys(("nvidia", "amd"),
                                  Config(16, 64, 3, num_warps=4, num_stages=2, pv_fp16=True)),
}


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["parallel", "flex_tile", "static_grid"])
@pytest.mark.parametrize("feature", ["fp8_kv", "all"])
@pytest.mark.parametrize("shape", list(PV_FP16_CONFIGS))
@pytest.mark.parametrize("field", ["pv_fp16", "qk_fp16"])
@pytest.mark.parametrize("q_scale", [1.0, 1e5, 1e-5])
def test_fp16_products_match_reference(variant, feature, shape, field, q_scale, device):
    """bf16 queries over an OCP e4m3 cache with the P V product in fp16 (`Config.pv_fp16`) or
    both products (`Config.qk_fp16`, q divided by a power of two into fp16's range), this
    vendor's fp8 prefill shape and a split one, over a mixed batch, poisoned, against the fp32
    reference at bf16's tolerance; queries scaled past fp16's largest value (1e5) and into its
    subnormals (1e-5). GPU only: Triton's interpreter cannot compute in bf16."""
    if field == "pv_fp16" and q_scale != 1.0:
        pytest.skip("pv_fp16 leaves q as it is: its scale is qk_fp16's question")
    config = dataclasses.replace(PV_FP16_CONFIGS[shape][platform.current().vendor],
                                 **{"pv_fp16": False, "qk_fp16": False, field: True})
    spec = make_spec("gqa4", 128, 16, "mixed", "bfloat16", feature, seed=seed("pv_fp16", feature))
    batch = make_batch(spec, feature, device)
    batch.q.mul_(q_scale)
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert launches[0].constexprs[field.upper()]
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    atol, rtol = TOLERANCES["bfloat16"]
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@pytest.mark.gpu
def test_a_batch_past_two_to_the_31_query_elements(device):
    """8,195 sequences of llama3-8b heads, 524,323 tokens: q and out hold more than 2**31
    elements, so the last three sequences' offsets pass int32 (they wrapped negative and the
    kernels faulted: illegal memory access, H100, 2026-11-24); planned in int64, every
    variant's outputs for the last five sequences match the reference (computed for them
    alone), and no row is left unwritten. One test, one batch (13 GB with its output), the
    variants in turn: parallel workers would hold one batch each."""
    spec = BatchSpec((64,) * 8192 + (1, 33, 1), (64,) * 8192 + (300, 97, 1), dtype="float16", seed=3)
    batch = poisoned_batch(spec, device)
    q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens = batch.args()
    assert q.numel() >= 2**31
    first = 8190
    start = int(cu_seqlens_q[first])
    expected = paged_attention_reference(q[start:], k_cache, v_cache, block_table[first:],
                                         cu_seqlens_q[first:] - start, seq_lens[first:], **batch.options)
    for variant in ("naive", "qblock", "parallel", "flex_tile", "static_grid"):
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, **batch.options)
        torch.testing.assert_close(out[start:].float(), expected.float(), atol=3e-3, rtol=3e-3,
                                   msg=lambda m, variant=variant: f"{variant}: {m}")
        assert not out.isnan().any(), variant
        del out


@pytest.mark.parametrize("variant", ["parallel", "flex_tile", "static_grid"])
@pytest.mark.parametrize("segments", [1, 2])
def test_sequence_items_do_every_query_of_a_longer_sequence(variant, segments, device):
    """Items that index sequences (`Config.seq_items`, the NVIDIA decode branch) are planned
    for sequences of one Q-block; a longer sequence (a graph captured for decodes, replayed
    for a prefill) must still come out whole."""
    spec = BatchSpec((1, 9, 1, 2), (40, 60, 5, 33), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", seed=11)
    batch = poisoned_batch(spec, device)
    config = Config(16, 16, segments, num_warps=4, num_stages=2, seq_items=True)  # 4 tokens per Q-block
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert launches[0].constexprs["SEQ_ITEMS"]
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "flex_tile", "static_grid"])
@pytest.mark.parametrize("segments,fused_reduce", [(1, False), (2, False), (3, True)])
def test_decode_layout_items_over_gaps_and_a_prefill(variant, segments, fused_reduce, device):
    """Q-block items that guess a decode batch's layout (`Config.decode_layout`): eleven
    sequences in Q-blocks of 4 tokens leave gaps in the middle and at the end of the bound,
    and a prefill among them misses the guess; a grid of 3 programs takes many items each."""
    spec = BatchSpec((1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 1), (40, 7, 33, 1, 60, 21, 16, 17, 5, 48, 9),
                     num_q_heads=8, num_kv_heads=2, head_size=64, block_size=16, dtype="float16", seed=5)
    batch = poisoned_batch(spec, device)
    config = Config(16, 16, segments, num_warps=4, num_stages=2, decode_layout=True, max_programs=3,
                    fused_reduce=fused_reduce)
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert launches[0].constexprs["DECODE_LAYOUT"] and not launches[0].constexprs["SEQ_ITEMS"]
    out = batch.new_output().fill_(float("nan"))
    VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("seq_items", [False, True])
def test_fused_reduce_is_one_launch_and_leaves_its_counts_at_zero(variant, seq_items, device):
    """With `Config.fused_reduce` the last segment of each split (sequence, KV head) merges:
    one launch, the right output on every call, and the arrival counts back at 0 after each
    (the next call, or a graph replay, starts from them)."""
    spec = BatchSpec((1, 1, 6, 1), (40, 300, 60, 7), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", seed=13)
    batch = poisoned_batch(spec, device)
    config = Config(16, 16, 3, num_warps=4, num_stages=2, seq_items=seq_items, fused_reduce=True)
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), config=config,
                                         **batch.options)
    assert [launch.name for launch in launches] == ["q_block_kernel"]
    expected = paged_attention_reference(*batch.args(), **batch.options)
    counts = planning.arrival_counts(spec.num_seqs, spec.num_kv_heads, device)
    for _ in range(2):
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)
        assert int(torch.count_nonzero(counts)) == 0


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])  # the two ways plans are kept
@pytest.mark.parametrize("split", [False, True])
def test_every_call_of_a_kept_plan_reads_its_own_tensors(variant, split, device):
    """Calls of one layout reuse the plan made for the first (kernels.paged_attention.planning):
    each batch, with its own values, scales and sinks, must still get its own answer."""
    spec = BatchSpec((1, 1, 1), (100, 40, 7), num_q_heads=8, num_kv_heads=2, head_size=64,
                     block_size=16, dtype="float16", fp8_kv=True, sinks=True, sliding_window=200,
                     softcap=20.0)
    config = Config(16, 16, 3, num_warps=4, num_stages=2) if split else None
    for batch_seed in (1, 2):
        batch = poisoned_batch(dataclasses.replace(spec, seed=batch_seed), device)
        out = batch.new_output()
        VARIANTS[variant](*batch.args(), out=out, config=config, **batch.options)
        expected = paged_attention_reference(*batch.args(), **batch.options)
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


# ---------------------------------------------------------------- fp8 formats

FP8_VARIANTS = [name for name, v in VARIANTS.items() if "fp8_kv" in v.features]


# as the kernels take them (common.NO_SPECIALIZE): a count of 1 made a constant has no `.to` (sm_90 compile)
@triton.jit(do_not_specialize=["num_seqs", "num_tokens"])
def _locate_kernel(cu_seqlens_q_ptr, out_ptr, num_seqs, num_tokens, BLOCK_Q: tl.constexpr,
                   DECODE_LAYOUT: tl.constexpr):
    q_block = tl.program_id(0)
    found = locate_q_block(cu_seqlens_q_ptr, q_block, num_seqs, num_tokens, BLOCK_Q, DECODE_LAYOUT)
    for i in tl.static_range(4):
        tl.store(out_ptr + 4 * q_block + i, found[i])


@pytest.mark.parametrize("decode_layout", [False, True])
@pytest.mark.parametrize("block_q", [1, 2, 16])
@pytest.mark.parametrize("query_lens", [
    [1] * 16, [1] * 40, [1], [1, 1, 3, 1, 1], [5, 1, 1, 17, 1, 33, 1], [40, 2, 1, 0, 1, 9], [0, 1, 1],
    [0, 0, 0, 0, 1, 1, 0, 1],  # empty sequences: the guess lands before a block's owner, next to it
])
def test_locate_q_block_finds_every_block_and_only_those(decode_layout, block_q, query_lens, device):
    """Every Q-block of the bound (`find_seq_idx`'s numbering: sequence i's first is
    cu_seqlens_q[i] // BLOCK_Q + i) maps to its sequence, first query, query count and
    index, and every gap to no queries: by the binary search alone, and with the decode-layout
    guess whether it hits, lands next to a gap or falls back to the search (prefills among
    decodes, empty sequences)."""
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    bound = cu[-1] // block_q + len(query_lens)
    want = {}
    for i, n in enumerate(query_lens):
        first = cu[i] // block_q + i
        for j in range(-(-n // block_q)):
            want[first + j] = (i, cu[i], n, j)
    out = torch.full((bound, 4), -7, dtype=torch.int32, device=device)
    _locate_kernel[(bound,)](torch.tensor(cu, dtype=torch.int32, device=device),
                             out, len(query_lens), cu[-1], BLOCK_Q=block_q, DECODE_LAYOUT=decode_layout)
    got = out.cpu().tolist()
    for q_block in range(bound):
        if q_block in want:
            assert tuple(got[q_block]) == want[q_block], (q_block, got[q_block])
        else:
            assert got[q_block][3] * block_q >= got[q_block][2], (q_block, got[q_block])  # no queries
    assert len(want) == sum(-(-n // block_q) for n in query_lens)


@triton.jit
def _convert_kernel(x_ptr, o_ptr, N: tl.constexpr, DECODE_FNUZ: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, kv_to(tl.load(x_ptr + offs), o_ptr.dtype.element_ty, DECODE_FNUZ))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_fnuz_decoder_is_exact_on_every_byte(out_dtype, device):
    """The kernels' FNUZ decoder (NVIDIA, interpreter) against torch's float8_e4m3fnuz, all
    256 bytes: subnormals, 240 (0x7F, NaN in OCP), no negative zero, 0x80 = NaN."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    out = torch.empty(256, dtype=out_dtype, device=device)
    _convert_kernel[(1,)](codes, out, N=256, DECODE_FNUZ=True)
    want = codes.view(FNUZ_E4M3).to(out_dtype)
    torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(out).sum() == 1 and out[0x7F] == 240 and out[0xFF] == -240
    # The same bytes as OCP mean twice the value (or NaN): not what the decoder returned.
    assert not torch.equal(out[1:0x7F].float(), codes[1:0x7F].view(OCP_E4M3).float())


@pytest.mark.parametrize("fp8_dtype, decode", [(OCP_E4M3, False), (FNUZ_E4M3, True)], ids=["ocp", "fnuz"])
def test_the_grids_fp8_poison_is_nan_where_the_kernels_read_it(fp8_dtype, decode, device):
    """The NaN bytes the grid writes into unowned slots of an fp8 cache (`Fp8Format.nan_byte`)
    are NaN as the kernels convert them: FNUZ through their own decoder (interpreter, NVIDIA),
    OCP through Triton's conversion (GPUs; the interpreter reads 480, interpreter_support.py)."""
    if device == "cpu" and not decode and not interpreter_reads_ocp_nan():
        pytest.skip("triton's interpreter converts OCP e4m3 NaN bytes to +-480; GPUs check this")
    batch = poisoned_batch(BatchSpec((1,), (20,), num_q_heads=2, num_kv_heads=1, head_size=16, fp8_kv=True),
                           device, fp8_dtype=fp8_dtype)
    unowned = batch.k_cache[~batch.owned_slots().to(device)].reshape(-1)[:256]
    out = torch.empty(256, dtype=torch.float32, device=device)
    operand = unowned.view(torch.uint8) if decode else unowned
    _convert_kernel[(1,)](operand.contiguous(), out, N=256, DECODE_FNUZ=decode)
    assert out.isnan().all()


@pytest.mark.parametrize("variant", FP8_VARIANTS)
def test_fnuz_bytes_read_as_ocp_fail_the_comparison(variant, device):
    """The check above can fail: the same FNUZ cache handed over as OCP (its bytes viewed as
    float8_e4m3fn, scales unchanged) gives outputs far from the FNUZ reference."""
    spec = make_spec("gqa4", 64, 16, "prefill_5_18", "float16", "fp8_fnuz", seed=11)
    batch = make_batch(spec, "fp8_fnuz", device)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    as_ocp = (batch.q, batch.k_cache.view(OCP_E4M3), batch.v_cache.view(OCP_E4M3), *batch.args()[3:])
    out = batch.new_output()
    VARIANTS[variant](*as_ocp, out=out, **batch.options)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("variant", FP8_VARIANTS)
def test_fnuz_on_amds_native_path(variant, device):
    """vendor="amd": FNUZ caches go to Triton as fp8e4b8 and are converted natively (what an
    MI300 runs), with AMD's launch configurations."""
    if device == "cpu" and not interpreter_reads_fnuz():
        pytest.skip(INTERPRETER_FNUZ_REASON)
    if device != "cpu" and platform.current().vendor != "amd":
        pytest.skip("AMD's native FNUZ path compiles for AMD GPUs only (Triton's CUDA backend has "
                    "no fp8e4b8); this GPU runs the kernels' decoder in the grid above")
    spec = make_spec("gqa5", 80, 16, "mixed_small", "float16", "all_fnuz", seed=5)
    batch = make_batch(spec, "all_fnuz", device)
    out = batch.new_output()
    VARIANTS[variant](*batch.args(), out=out, vendor="amd", **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)


def test_grid_covers_both_fp8_formats_on_the_cpu_subset():
    """Every fp8-capable variant meets both formats in the interpreter's subset."""
    fp8_features = {f for *_, f in CPU_SUBSET if FEATURES.get(f, {}).get("fp8_kv")}
    formats = {fp8_dtype(f) for f in fp8_features}
    assert formats == {OCP_E4M3, FNUZ_E4M3} and all(is_fp8(d) for d in formats)
    assert FP8_VARIANTS and "naive" not in FP8_VARIANTS


def _padded_view(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values in a view whose last dimension is padded to twice its size: other strides."""
    wide = torch.full((*t.shape[:-1], 2 * t.shape[-1]), float("nan"), dtype=t.dtype, device=t.device)
    wide[..., :t.shape[-1]] = t
    return wide[..., :t.shape[-1]]


@pytest.mark.parametrize("variant", ["parallel", "static_grid"])
@pytest.mark.parametrize("own", ["none", "v_cache", "out", "both"])
def test_amd_plans_share_strides_only_where_they_are_equal(variant, own, device):
    """AMD's plans address V with K's strides and out with q's where the host sees them equal
    (`common.shared_strides`); a V cache or an output laid out otherwise keeps its own strides,
    and both give the reference's output."""
    if device != "cpu" and platform.current().vendor != "amd":
        pytest.skip("AMD's plans compile for AMD GPUs only; NVIDIA's never share strides")
    spec = BatchSpec((1, 7, 1), (40, 30, 17), num_q_heads=4, num_kv_heads=2, head_size=32, block_size=16,
                     dtype="float16", seed=7)
    batch = poisoned_batch(spec, device)
    q, k_cache, v_cache, *meta = batch.args()
    if own in ("v_cache", "both"):
        v_cache = _padded_view(v_cache)
    out = _padded_view(batch.new_output()) if own in ("out", "both") else batch.new_output()
    args = (q, k_cache, v_cache, *meta)
    _, launches = VARIANTS[variant].plan(*args, out=out, vendor="amd", **batch.options)
    attention = next(launch for launch in launches if launch.name.startswith("q_block"))
    assert attention.constexprs["V_STRIDES_OF_K"] == (own in ("none", "out"))
    assert attention.constexprs["OUT_STRIDES_OF_Q"] == (own in ("none", "v_cache"))
    _, nvidia = VARIANTS[variant].plan(*args, out=out, vendor="nvidia", **batch.options)
    assert not any(launch.constexprs.get(name) for launch in nvidia
                   for name in ("V_STRIDES_OF_K", "OUT_STRIDES_OF_Q"))
    VARIANTS[variant](*args, out=out, vendor="amd", **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-3, rtol=3e-3)
