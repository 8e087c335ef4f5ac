"""Planning for a target named by hints: the same launches as on that target, from any machine.

The hints `vendor` and `num_sms` replace the device this process sees; the reference here
is the older way of planning for another vendor (swapping `kernels.platform.current`),
which must give identical launches, and the heuristics' own choice for that vendor.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest
import torch

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.paged_attention import heuristics, planning
from kernels.paged_attention.common import q_block_kernel, reduce_segments_kernel

TARGETS = {"nvidia": ("sm_90", 132, 32), "amd": ("gfx942", 304, 64)}  # H100 SXM, MI300X
BATCHES = {
    "decode": BatchSpec((1, 1), (3000, 40), num_q_heads=8, num_kv_heads=2, head_size=64),
    "prefill": BatchSpec((300,), (300,), num_q_heads=8, num_kv_heads=2, head_size=128),
    "mixed_fp8": BatchSpec((1, 40, 1), (500, 40, 33), num_q_heads=10, num_kv_heads=2, head_size=96,
                           fp8_kv=True, block_size=32),
}
TUNED = ["parallel", "flex_tile", "static_grid"]


def _describe(launches):
    def value(v):
        return (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v
    return [(L.name, L.grid, L.constexprs, L.num_warps, L.num_stages, L.vendor_options,
             {k: value(v) for k, v in L.args.items()}) for L in launches]


def _as_if_on(monkeypatch, vendor):
    arch, num_sms, warp = TARGETS[vendor]
    fake = platform.Platform(vendor, arch, arch, warp, num_sms)
    monkeypatch.setattr(platform, "current", lambda: fake)


@pytest.mark.parametrize("vendor", list(TARGETS))
@pytest.mark.parametrize("batch_name", list(BATCHES))
@pytest.mark.parametrize("variant", TUNED)
def test_hints_plan_what_the_target_plans(monkeypatch, vendor, batch_name, variant):
    b = build_batch(BATCHES[batch_name])
    num_sms = TARGETS[vendor][1]
    with monkeypatch.context() as m:
        _as_if_on(m, vendor)
        _, on_target = VARIANTS[variant].plan(*b.args(), **b.options)
    _, hinted = VARIANTS[variant].plan(*b.args(), vendor=vendor, num_sms=num_sms, **b.options)
    assert _describe(hinted) == _describe(on_target)
    if variant != "parallel":  # parallel keeps Triton's defaults; the others follow the trees
        f = heuristics.features_from_call(b.q, b.k_cache, b.block_table, num_sms=num_sms, vendor=vendor)
        want = heuristics.choose(vendor, f)
        main = hinted[0]
        assert (main.constexprs["BLOCK_M"], main.constexprs["TILE_SIZE"], main.num_warps,
                main.num_stages, main.vendor_options) == (
            want.block_m, want.tile_size, want.num_warps, want.num_stages, want.vendor_options(vendor))
        assert main.args["num_segments"] == want.num_segments


def test_hints_win_over_the_device(monkeypatch):
    b = build_batch(BATCHES["decode"])
    _, nvidia = VARIANTS["static_grid"].plan(*b.args(), **b.options)  # the interpreter plans NVIDIA's
    _as_if_on(monkeypatch, "amd")
    _, hinted = VARIANTS["static_grid"].plan(*b.args(), vendor="nvidia", num_sms=132, **b.options)
    assert _describe(hinted) == _describe(nvidia)
    assert planning.resolve_target() == ("amd", 304)
    assert planning.resolve_target("nvidia") == ("nvidia", 132)  # another vendor: product default
    assert planning.resolve_target("amd", 80) == ("amd", 80)


def test_num_sms_hint_sizes_the_persistent_grid():
    b = build_batch(BATCHES["prefill"])
    for num_sms in (1, 3, 300):
        _, (main,) = VARIANTS["static_grid"].plan(*b.args(), vendor="amd", num_sms=num_sms, **b.options)
        config = heuristics.choose("amd", planning.batch_features(
            b.q, b.k_cache, b.block_table, vendor="amd", num_sms=num_sms))
        q_blocks = b.q.shape[0] // config.block_q(4) + 1
        assert main.grid == (min(config.programs_per_sm * num_sms, q_blocks * 2),)


def test_zero_programs_per_sm_launches_one_program_per_item():
    b = build_batch(BATCHES["prefill"])
    config = heuristics.Config(64, 32, 1, num_warps=4, num_stages=2, programs_per_sm=0)
    _, (main,) = VARIANTS["static_grid"].plan(*b.args(), config=config, num_sms=3, **b.options)
    q_blocks = b.q.shape[0] // config.block_q(4) + 1
    assert main.grid == (q_blocks * 2,)  # every (Q-block, KV head) item of the shapes' bound


def test_window_hint_reaches_the_heuristics():
    """A decode under a narrow window plans the segments of its visible keys."""
    spec = BatchSpec((1, 1), (8192, 8192), num_q_heads=8, num_kv_heads=2, head_size=64)
    b = build_batch(spec)
    _, full = VARIANTS["static_grid"].plan(*b.args(), **b.options)
    _, windowed = VARIANTS["static_grid"].plan(*b.args(), sliding_window=64, **b.options)
    assert full[0].args["num_segments"] > 1 and len(full) == 2  # split + reduction
    assert windowed[0].args["num_segments"] == 1 and len(windowed) == 1  # one kernel, no reduction


@pytest.mark.parametrize("variant", ["naive", "qblock"])
def test_variants_without_heuristics_accept_and_ignore_target_hints(variant):
    b = build_batch(BATCHES["decode"])
    _, plain = VARIANTS[variant].plan(*b.args(), **b.options)
    _, hinted = VARIANTS[variant].plan(*b.args(), vendor="amd", num_sms=304, max_seqlen_q=1,
                                       max_seqlen_k=3000, **b.options)
    assert _describe(hinted) == _describe(plain)


def test_one_kernel_with_and_without_a_persistent_grid():
    b = build_batch(BATCHES["decode"])
    config = heuristics.Config(16, 32, 4, num_warps=4, num_stages=2)
    _, grid3d = VARIANTS["parallel"].plan(*b.args(), config=config, **b.options)
    _, persistent = VARIANTS["static_grid"].plan(*b.args(), config=config, **b.options)
    for launches, flag in ((grid3d, False), (persistent, True)):
        assert [L.kernel for L in launches] == [q_block_kernel, reduce_segments_kernel]
        assert all(L.constexprs["PERSISTENT"] is flag for L in launches)
    q_blocks = b.q.shape[0] // config.block_q(4) + 2
    assert grid3d[0].grid == (q_blocks, 2, 4) and grid3d[1].grid == (2, 8, 1)  # one item per (sequence, head)
    assert len(persistent[0].grid) == 1 and len(persistent[1].grid) == 1


# ---------------------------------------------------------------- plans kept per layout

def _tensor_args(launches):
    return [{k: v for k, v in L.args.items() if isinstance(v, torch.Tensor)} for L in launches]


@pytest.mark.parametrize("batch_name", list(BATCHES))
@pytest.mark.parametrize("variant", TUNED)
def test_a_kept_plan_takes_each_calls_tensors(batch_name, variant):
    """Two calls of one layout: the same launches as planned afresh, each with its own tensors."""
    first = build_batch(BATCHES[batch_name])
    second = build_batch(dataclasses.replace(BATCHES[batch_name], seed=1))
    fn = VARIANTS[variant]
    _, launches_1 = fn.plan(*first.args(), **first.options)
    out_2, launches_2 = fn.plan(*second.args(), **second.options)
    fresh = fn.planner(*second.args(), out=out_2, layout=None, **second.options)
    assert _describe(launches_2) == _describe(fresh)
    mine = {id(t) for t in (*second.args(), out_2, *second.options.values()) if isinstance(t, torch.Tensor)}
    theirs = {id(t) for t in (*first.args(), *first.options.values()) if isinstance(t, torch.Tensor)}
    for args in _tensor_args(launches_2):
        assert not {id(t) for t in args.values()} & theirs
    for name in ("q_ptr", "block_table_ptr", "cu_seqlens_q_ptr", "seq_lens_ptr", "out_ptr"):
        assert id(launches_2[0].args[name]) in mine
    if variant != "static_grid" and "segm_out_ptr" in launches_2[0].args and len(launches_2) > 1:
        # not persistent: every call its own segment buffers
        assert launches_2[0].args["segm_out_ptr"] is not launches_1[0].args["segm_out_ptr"]
        assert launches_2[1].args["segm_out_ptr"] is launches_2[0].args["segm_out_ptr"]


def test_kept_plans_hold_no_tensor_of_a_call():
    """A plan outlives the call it was made for; the call's tensors must not."""
    b = build_batch(BATCHES["mixed_fp8"])
    gone = [weakref.ref(t) for t in (b.q, b.k_cache, b.block_table, b.options["k_scale"])]
    _, launches = VARIANTS["static_grid"].plan(*b.args(), **b.options)
    assert launches
    del b, launches
    gc.collect()
    assert all(ref() is None for ref in gone)


def test_release_buffers_drops_the_plans_holding_them():
    b = build_batch(BATCHES["decode"])
    _, launches = VARIANTS["static_grid"].plan(*b.args(), **b.options)
    assert len(launches) == 2  # split decode: the buffers are the persistent grid's
    kept = launches[0].args["segm_out_ptr"]
    planning.release_buffers()
    _, again = VARIANTS["static_grid"].plan(*b.args(), **b.options)
    assert again[0].args["segm_out_ptr"] is not kept


def test_compiled_launches_only_where_they_are_written_for():
    """Compiled launches skip Triton's JIT only on CUDA with triton 3.6 (kernels.launch); without
    a GPU (CI, the interpreter) a plan's launches carry none and every launch is the JIT's."""
    from kernels.launch import CompiledLaunches

    b = build_batch(BATCHES["decode"])
    _, launches = VARIANTS["static_grid"].plan(*b.args(), **b.options)
    expected = CompiledLaunches.available()
    assert all((launch.compiled is not None) == expected for launch in launches)
    if not torch.cuda.is_available():
        assert not expected


def test_a_compiled_launch_hands_the_launcher_what_the_jit_would_bind(monkeypatch):
    """The fast path orders a kept plan's arguments itself (kernels.launch.CompiledLaunches):
    a later call must pass exactly the values Triton's binding would, in the kernel's
    parameter order, with that call's own tensors. A stand-in driver and compiled kernel
    record what reaches the launcher, so this runs without a GPU."""
    from triton.runtime import driver

    from kernels.launch import CompiledLaunches

    class Driver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 0

    class Compiled:  # what the JIT returns on a GPU: a kernel with its own launcher
        function = packed_metadata = None

        def launch_metadata(self, grid, stream, *args):
            return {"name": "metadata"}

        def run(self, *launcher_args):
            self.hooks = launcher_args[6:9]  # launch metadata, enter hook, exit hook
            self.passed = launcher_args[9:]  # after grid, stream, function, metadata, hooks

    monkeypatch.setattr(driver, "_active", Driver())
    monkeypatch.setattr(CompiledLaunches, "available", staticmethod(lambda: True))
    planning.release_buffers()  # plans kept so far carry no compiled launches
    try:
        first = build_batch(BATCHES["decode"])
        second = build_batch(dataclasses.replace(BATCHES["decode"], seed=1))
        _, launches = VARIANTS["parallel"].plan(*first.args(), **first.options)
        compiled = Compiled()
        for launch in launches:
            launch.compiled.keep(launch, compiled)
        _, again = VARIANTS["parallel"].plan(*second.args(), **second.options)
        assert len(again) == 2  # the attention kernel and the reduction, each its own order
        for launch in again:
            assert launch.compiled.launch(launch)
            bound = {**launch.args, **launch.constexprs}
            expected = [bound[name] for name in launch.kernel.arg_names]
            assert len(compiled.passed) == len(expected)
            assert all(a is b for a, b in zip(compiled.passed, expected))
            assert launch.args["out_ptr"] is not launches[0].args["out_ptr"]  # this call's
        assert again[0].args["q_ptr"] is second.q
        # a call tensor off the 16-byte alignment the kept kernel was specialized for (same
        # layout, so the same plan): not launched by it, but through the JIT's binding
        shifted = torch.empty(second.q.numel() + 1, dtype=second.q.dtype)[1:].view(second.q.shape)
        _, odd = VARIANTS["parallel"].plan(shifted, *second.args()[1:], **second.options)
        assert odd[0].compiled is again[0].compiled and not odd[0].compiled.launch(odd[0])
        # no hook set: the launcher is handed none, and no metadata is built for it
        assert compiled.hooks == (None, None, None)
        # a profiler's hook: called as the JIT calls it, with the launch's metadata
        from triton import knobs

        def hook(metadata):
            pass

        knobs.runtime.launch_enter_hook.add(hook)
        try:
            assert again[0].compiled.launch(again[0])
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        assert compiled.hooks == ({"name": "metadata"}, knobs.runtime.launch_enter_hook,
                                  knobs.runtime.launch_exit_hook)
    finally:
        planning.release_buffers()  # no plan with a stand-in kernel outlives the test


def test_token_offsets_in_int32_only_where_q_out_and_partials_fit():
    """`token_offsets_32`: q and out (`offsets_32`: a padded head's lanes too) and, when split,
    the float32 partials (tokens x heads x segments x padded head) below 2**31 elements; any
    one past it puts every token offset in int64, for the attention and the reduction alike."""
    def q_of(tokens, head_size=128):
        return torch.empty(tokens, 32, head_size, device="meta")
    fits, past = q_of(2**31 // 4096), q_of(2**31 // 4096 + 1)  # llama3-8b: 524,288 tokens fit
    assert planning.token_offsets_32(fits, fits, 1)
    assert not planning.token_offsets_32(past, past, 1)
    assert not planning.token_offsets_32(fits, past, 1)  # out decides too
    decodes = q_of(32768)  # 2**31 partial elements at 16 segments
    assert planning.token_offsets_32(decodes, decodes, 1) and planning.token_offsets_32(decodes, decodes, 8)
    assert not planning.token_offsets_32(decodes, decodes, 16)
    small = torch.empty(64, 16, 8, 128, device="meta")
    whole, split = (heuristics.Config(16, 16, n, num_warps=4, num_stages=2) for n in (1, 16))
    def attention(q, config):
        return planning.kernel_constexprs(q, small, small, q, config, True, "nvidia")["TOKEN_OFFSETS_32"]
    assert attention(fits, whole) and attention(decodes, whole)
    assert not attention(past, whole) and not attention(decodes, split)
    buffers = (small,) * 3  # stand-ins: only shapes matter here
    reduce = planning.reduce_launch((1,), decodes, None, decodes, buffers, split, 1, 32768, True, "nvidia")
    assert not reduce.constexprs["TOKEN_OFFSETS_32"]


def test_int32_offsets_only_where_every_cache_offset_fits():
    """`offsets_32` asks; the plan computes cache offsets in int32 only when the caches'
    largest element offset (plus a padded head's lanes) stays below 2**31."""
    small = torch.empty(1024, 16, 8, 128, device="meta")
    huge = torch.empty(2**17 + 1, 16, 8, 128, device="meta")  # 2**31 + 16384 elements
    last_fits = torch.empty(2**17, 16, 8, 128, device="meta")  # last offset 2**31 - 1
    assert planning.offsets_32(small, small, head_size=128)
    assert planning.offsets_32(last_fits, head_size=128)
    assert not planning.offsets_32(small, huge, head_size=128)  # either cache decides
    # head 80, padded to 128 lanes: a last block starting 100 elements below 2**31 holds its
    # 80 values below it, but the padded lanes' offsets (up to + 127) pass it
    def two_blocks(start_of_second):
        return torch.empty_strided((2, 1, 1, 80), (start_of_second, 80, 80, 1), device="meta")
    assert not planning.offsets_32(two_blocks(2**31 - 100), head_size=80)
    assert planning.offsets_32(two_blocks(2**31 - 128), head_size=80)
    q = torch.empty(4, 32, 128, device="meta")
    config = heuristics.Config(128, 128, 1, num_warps=8, num_stages=3, offsets_32=True, block_vector=True)
    assert planning.kernel_constexprs(q, small, small, q, config, True, "nvidia")["OFFSETS_32"]
    assert not planning.kernel_constexprs(q, huge, huge, q, config, True, "nvidia")["OFFSETS_32"]
    off = dataclasses.replace(config, offsets_32=False)
    assert not planning.kernel_constexprs(q, small, small, q, off, True, "nvidia")["OFFSETS_32"]



@pytest.mark.parametrize("vendor,variant,warps", [
    ("nvidia", "static_grid", 1), ("nvidia", "flex_tile", 1),  # the NVIDIA tree's [reduce-one-warp]
    ("amd", "static_grid", 4), ("nvidia", "parallel", 4),  # the AMD tree's, parallel's: Triton's default
])
def test_the_reduction_runs_with_the_configurations_warps(vendor, variant, warps):
    spec = BatchSpec((1,) * 4, (8192,) * 4, num_q_heads=32, num_kv_heads=8, dtype="bfloat16")
    batch = build_batch(spec, "cpu", fill=False)
    planning.release_buffers()
    _, launches = VARIANTS[variant].plan(*batch.args(), out=batch.new_output(), vendor=vendor, num_sms=132,
                                         **batch.options)
    [reduce] = [launch for launch in launches if launch.kernel is reduce_segments_kernel]
    assert reduce.num_warps == warps
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), num_sms=132,
                                               config=heuristics.Config(16, 128, 4, num_warps=4, num_stages=2,
                                                                        reduce_warps=2), **batch.options)
    assert [launch.num_warps for launch in launches if launch.kernel is reduce_segments_kernel] == [2]
