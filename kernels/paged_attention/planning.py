"""Host-side planning of the Q-block kernel, shared by `parallel`, `flex_tile` and `static_grid`.

The three variants launch the same kernels (`common.q_block_kernel` and
`common.reduce_segments_kernel`); they differ only in how they choose a `heuristics.Config`
and in whether the grid is persistent. Everything else is planned here, once: the vendor
and SM count to plan for, the batch features, how the caches are read (`kv_operands`: an
fp8 format the vendor's Triton lacks is decoded in the kernel), runtime arguments,
compile-time constants, segment buffers and the reduction.

Planning reads shapes and host-side hints only, never device memory: no host sync, it
works inside CUDA/HIP-graph capture, and the hints `vendor` / `num_sms` plan exactly what
another vendor's GPU would run from any machine (the static gate cross-compiles that way).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernels import inputs, platform
from kernels.launch import CompiledLaunches, KernelLaunch
from kernels.paged_attention import heuristics
from kernels.paged_attention.common import (
    LOG2E,
    layout_strides,
    next_pow2,
    placeholder,
    q_block_kernel,
    reduce_segments_kernel,
    shape_bounds,
    shared_strides,
)

# What the Q-block kernel supports: every feature of the contract.
# Blocks below 16 positions are gathered per position into tiles of >= 16 (`parallel.block_tile`).
FEATURES = frozenset({"sliding_window", "softcap", "sinks", "fp8_kv", "head_size_non_pow2",
                      "block_size_non_pow2", "block_size_below_16"})
REDUCE_PROGRAMS_PER_SM = 4  # persistent reduction: its items are tiny; unmeasured default

# (vendor, features) -> Config: `heuristics.choose`, or a variant's own rule.
Chooser = Callable[[str, heuristics.Features], heuristics.Config]


def resolve_target(vendor: str | None = None, num_sms: int | None = None) -> tuple[str, int]:
    """(vendor, SMs or CUs) to plan for: the hints when given, else this process's device.

    Triton's interpreter (vendor "cpu") plans NVIDIA's choices. Without a `num_sms` hint,
    the device's count is used when it is the planned vendor's, else the product default
    of `heuristics.DEFAULT_NUM_SMS` (H100 SXM, MI300X).
    """
    here = platform.current()
    vendor = vendor or ("nvidia" if here.vendor == "cpu" else here.vendor)
    if num_sms is None:
        num_sms = (here.num_sms if here.vendor == vendor else 0) or heuristics.DEFAULT_NUM_SMS[vendor]
    return vendor, num_sms


def kv_operands(k_cache, v_cache, vendor: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The caches as `vendor`'s kernels read them: as they are, or, for an fp8 format that
    vendor's Triton cannot convert (`inputs.fp8_decoded_in_kernel`: FNUZ on NVIDIA), their
    bytes (uint8 views, same shape and strides), which the kernels decode (DECODE_FNUZ)."""
    if inputs.fp8_decoded_in_kernel(k_cache.dtype, vendor):
        return k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    return k_cache, v_cache


def batch_features(q, k_cache, block_table, *, max_seqlen_q=None, max_seqlen_k=None,
                   vendor: str | None = None, num_sms: int | None = None,
                   sliding_window: int | None = None) -> heuristics.Features:
    """The heuristics' features of a call, for the target the hints (or the device) name."""
    vendor, num_sms = resolve_target(vendor, num_sms)
    return heuristics.features_from_call(q, k_cache, block_table, max_seqlen_q=max_seqlen_q,
                                        max_seqlen_k=max_seqlen_k, num_sms=num_sms, vendor=vendor,
                                        sliding_window=sliding_window)


def plan_q_blocks(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out,
                  choose: Chooser, persistent: bool, max_seqlen_q=None, max_seqlen_k=None,
                  config: heuristics.Config | None = None, vendor: str | None = None,
                  num_sms: int | None = None, layout: int | None = None,
                  **options) -> list[KernelLaunch]:
    """The Q-block kernel's launch and, if decode sequences are split, the reduction's.

    `choose` picks the configuration unless the `config` hint forces one. Not persistent:
    grid (Q-blocks, KV heads, segments) and fresh segment buffers. Persistent: about
    `config.programs_per_sm` programs per SM and buffers kept per shape, so the launches
    depend on shapes only and one captured graph serves every composition.

    The configuration is kept per (layout, target, hints): the call's `layout` key
    (`inputs.layout_key`), and of `max_seqlen_k`, which grows from step to step, only what
    the choosers read (`heuristics.kv_len_class`). What follows from it and the layout (grids,
    compile-time constants, strides, scalars, kept buffers) is planned once per (layout,
    configuration, target) and reused with each call's tensors.
    """
    vendor, num_sms = resolve_target(vendor, num_sms)
    if config is not None and config.block_m < q.shape[1] // k_cache.shape[2]:
        raise ValueError(f"config: block_m {config.block_m} holds no whole group of the "
                         f"{q.shape[1] // k_cache.shape[2]} query heads per KV head")
    if config is None:
        choice = None
        if layout is not None:
            max_q, max_k = heuristics.call_lengths(q, k_cache, block_table, max_seqlen_q, max_seqlen_k)
            window = options.get("sliding_window") or 0
            choice = (layout, choose, vendor, num_sms, max_q, heuristics.kv_len_class(max_k, max_q, window))
            config = _CHOICES.get(choice)
        if config is None:
            config = choose(vendor, batch_features(q, k_cache, block_table, max_seqlen_q=max_seqlen_q,
                                                   max_seqlen_k=max_seqlen_k, vendor=vendor,
                                                   num_sms=num_sms,
                                                   sliding_window=options.get("sliding_window")))
            if choice is not None:
                inputs.keep(_CHOICES, choice, config)
    key = None if layout is None else (layout, config, persistent, vendor, num_sms,
                                       pairs_parity(k_cache, v_cache, config),
                                       config.warp_specialized and tma_aligned(q, k_cache, v_cache))
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        if warp_specialized_applies(q, k_cache, v_cache, block_table, out, config, vendor, options):
            plan = WarpSpecializedPlan(q, k_cache, block_table, options, num_sms, config)
        else:
            plan = _plan(q, k_cache, v_cache, block_table, out, config, persistent, vendor, num_sms,
                         **options)
        if key is not None:
            inputs.keep(_PLANS, key, plan)
    return plan.launches(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out, options)


# Configurations by (layout key, chooser, vendor, SMs, longest query, KV length class), and
# plans by (layout key, configuration, persistent, vendor, SMs, `pairs_parity`), both filled by `inputs.keep`.
# A serving engine needs a handful of plans; its max_seqlen_k hint grows by one each decode
# step, and one step in KV_GRANULE enters a new class and chooses again (H100 host,
# 2026-11-23: a choice cost about 30 us of a 60-120 us call, docs/lab/2026-11-23.md).
_CHOICES: dict[tuple, heuristics.Config] = {}
_PLANS: dict[tuple, _Plan] = {}


class _Plan:
    """What a call's layout and configuration fix of its launches. It holds no tensor of the
    call it was planned for (a cache would outlive its engine): `launches` completes it with
    each call's tensors, and with fresh segment buffers where the grid is not persistent."""

    def __init__(self, attention: KernelLaunch, reduce: KernelLaunch | None, vendor: str,
                 options: dict, fresh_buffers: tuple | None):
        self.vendor = vendor
        self.optional = [name for name in _OPTIONAL_TENSORS if options.get(name) is not None]
        self.fresh_buffers = fresh_buffers  # segment_buffers' arguments when not persistent
        per_call = {*_CALL_TENSORS, *(name + "_ptr" for name in self.optional),
                    *(_SEGMENT_BUFFERS if fresh_buffers is not None else ())}
        self.templates = [(launch, [name for name in launch.args if name in per_call])
                          for launch in (attention, reduce) if launch is not None]
        for launch, names in self.templates:
            launch.args.update(dict.fromkeys(names, None))
            # kept with the plan: every call of it makes the same launches
            launch.compiled = CompiledLaunches(launch, names) if CompiledLaunches.available() else None

    def launches(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out,
                 options) -> list[KernelLaunch]:
        k_operand, v_operand = kv_operands(k_cache, v_cache, self.vendor)
        tensors = dict(out_ptr=out, q_ptr=q, k_cache_ptr=k_operand, v_cache_ptr=v_operand,
                       block_table_ptr=block_table, cu_seqlens_q_ptr=cu_seqlens_q,
                       seq_lens_ptr=seq_lens)
        for name in self.optional:
            tensors[name + "_ptr"] = options[name]
        if self.fresh_buffers is not None:
            tensors.update(zip(_SEGMENT_BUFFERS, segment_buffers(*self.fresh_buffers)))
        launches = []
        for t, names in self.templates:
            args = t.args.copy()  # then this call's tensors: about 0.4 us less than {**a, **b}
            for name in names:
                args[name] = tensors[name]
            launches.append(KernelLaunch(t.kernel, t.grid, args, t.constexprs, t.num_warps, t.num_stages,
                                         t.vendor_options, t.compiled))
        return launches


class WarpSpecializedPlan:
    """The launch of `warp_specialized.ws_prefill_kernel` for a call's layout: its grid (a program per SM,
    persistent over query heads x the shapes' bound on Q-blocks, as the Q-block kernel's, drawing work
    items from the device's `ticket_counters`), scalars and constants;
    `launches` adds each call's tensors and the TMA descriptors made from them (host objects, a few us).
    Launched through Triton's JIT dispatch: the Q-block kernel's `CompiledLaunches` binds tensors, not
    descriptors."""

    def __init__(self, q, k_cache, block_table, options: dict, num_sms: int, config: heuristics.Config):
        from kernels.paged_attention import warp_specialized as ws

        self.ws = ws
        num_tokens, num_q_heads, head_size = q.shape
        num_seqs, max_blocks = block_table.shape
        num_blocks, block_size, num_kv_heads, _ = k_cache.shape
        scale = options.get("scale")
        q_blocks = ws.q_blocks(num_tokens, num_seqs)
        self.token_items = config.ws_token_items  # `warp_specialized_applies` checked they apply
        items = num_tokens * num_kv_heads if self.token_items else q_blocks * num_q_heads
        self.grid = (ws.programs(items, num_sms),)
        self.args = dict(num_seqs=num_seqs, num_tokens=num_tokens, num_q_blocks=q_blocks,
                         num_q_heads=num_q_heads, tickets_ptr=ticket_counters(q.device),
                         block_table_stride=block_table.stride(0), max_blocks=max_blocks,
                         kv_rows=num_blocks * block_size,
                         scale_log2=(head_size ** -0.5 if scale is None else float(scale)) * LOG2E.value)
        e4m3 = inputs.is_fp8(k_cache.dtype)
        # Q K^T over e4m3 on q rounded once (`Config.qk_e4m3`, `.ws_q_rounded`), else on q in two e4m3
        # parts (bf16's 8 bits)
        rounded = config.qk_e4m3 or config.ws_q_rounded
        constants, self.maxnreg = ws.launch_constants(e4m3, q_parts=1 if rounded else 2,
                                                      token_items=self.token_items)
        self.constexprs = dict(GROUP=num_q_heads // num_kv_heads, TILE=ws.TILE, **constants,
                               FP8_PRODUCTS=e4m3)
        # `Config.ws_pack_gqa`: over a 16-bit cache (token items are e4m3's), where `pack_gqa_applies`
        self.pack_gqa = config.ws_pack_gqa and not e4m3 and pack_gqa_applies(q, num_kv_heads)
        self.args["pack_shift"] = ws.pack_shift(num_q_heads // num_kv_heads) if self.pack_gqa else 0

    def launches(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out,
                 options) -> list[KernelLaunch]:
        q_desc, qh_desc, k_desc, v_desc = self.ws.descriptors(q, k_cache, v_cache, self.token_items,
                                                              self.pack_gqa)
        dummy = placeholder(q.device)  # the scales of a 16-bit cache, never read
        scales = {name: options.get(name) if options.get(name) is not None else dummy
                  for name in ("k_scale", "v_scale")}
        args = dict(q_desc=q_desc, qh_desc=qh_desc, k_desc=k_desc, v_desc=v_desc, out_ptr=out,
                    v_cache_ptr=v_cache, block_table_ptr=block_table, cu_seqlens_q_ptr=cu_seqlens_q,
                    seq_lens_ptr=seq_lens,
                    k_scale_ptr=scales["k_scale"], v_scale_ptr=scales["v_scale"], **self.args,
                    out_stride_t=out.stride(0), out_stride_h=out.stride(1), v_stride_row=v_cache.stride(1))
        return [KernelLaunch(self.ws.ws_prefill_kernel, self.grid, args, self.constexprs, num_warps=4,
                             num_stages=1, vendor_options={"maxnreg": self.maxnreg})]


# Gluon's kernels need an sm_90 GPU: wgmma, TMA and setmaxnreg are Hopper's (sm_100 has no wgmma)
WARP_SPECIALIZED_ARCH = "sm_90"
MAX_ITEMS = 2 ** 31 - 1  # the warp-specialized kernel numbers its work items (Q-blocks x heads) in int32


def warp_specialized_applies(q, k_cache, v_cache, block_table, out, config: heuristics.Config, vendor: str,
                             options: dict) -> bool:
    """Where `Config.warp_specialized` plans the Gluon kernel: an sm_90 GPU in this process, or one stood in
    for it (the latency gate's change plan on a CPU; the static gate plans from a CPU without it: its
    compile is tests/kernels/test_warp_specialized.py's)
    with Triton's Gluon, 16-bit q and output of one dtype, caches of that dtype or OCP e4m3 (heads of
    `warp_specialized.E4M3_HEAD_SIZES`), none of softcap, window and sinks, heads and cache blocks the
    kernel takes (`warp_specialized.HEAD_SIZES`, `.BLOCK_SIZES`), layouts TMA reads (`tma_layout`) and work
    items it can number (MAX_ITEMS)."""
    if not (config.warp_specialized and vendor == "nvidia"
            and platform.current().arch == WARP_SPECIALIZED_ARCH and gluon_available()):
        return False
    from kernels.paged_attention import warp_specialized as ws

    if options.get("softcap") or options.get("sliding_window") or options.get("sinks") is not None:
        return False
    e4m3 = k_cache.dtype == inputs.OCP_E4M3 and q.shape[2] in ws.E4M3_HEAD_SIZES
    if config.ws_token_items and not token_items_apply(q, k_cache, e4m3):
        return False
    return (q.dtype in (torch.bfloat16, torch.float16) and out.dtype == q.dtype
            and k_cache.dtype == v_cache.dtype and (k_cache.dtype == q.dtype or e4m3)
            and q.shape[2] in ws.HEAD_SIZES and k_cache.shape[1] in ws.BLOCK_SIZES
            and tma_layout(q, k_cache, v_cache, block_table, out)
            and ws.q_blocks(q.shape[0], block_table.shape[0]) * q.shape[1] <= MAX_ITEMS)


def token_items_apply(q, k_cache, e4m3: bool) -> bool:
    """Where the Gluon kernel can take `Config.ws_token_items`: an e4m3 cache it takes, a KV head's query
    heads within `warp_specialized.TOKEN_MAX_GROUP` (its shared memory's bound), q's tokens one after another
    (its rows then one TMA tensor of [tokens x query heads, D]: `warp_specialized.descriptors`), and work
    items it can number (MAX_ITEMS)."""
    from kernels.paged_attention import warp_specialized as ws

    num_tokens, num_q_heads, head_size = q.shape
    return (e4m3 and num_q_heads // k_cache.shape[2] <= ws.TOKEN_MAX_GROUP
            and q.stride(0) == num_q_heads * head_size and num_tokens * k_cache.shape[2] <= MAX_ITEMS)


def pack_gqa_applies(q, num_kv_heads: int) -> bool:
    """Where the Gluon kernel over a 16-bit cache can take `Config.ws_pack_gqa`: a KV head's query heads in at
    most half a work item's rows (`warp_specialized.token_rows`, a consumer's 64) and q's tokens one after
    another (a packed item's rows then come from one TMA tensor of [tokens x query heads, D])."""
    from kernels.paged_attention import warp_specialized as ws

    num_tokens, num_q_heads, head_size = q.shape
    return (ws.token_rows(num_q_heads // num_kv_heads) <= ws.HALF.value
            and q.stride(0) == num_q_heads * head_size and num_tokens * num_q_heads <= MAX_ITEMS)


def tma_layout(q, k_cache, v_cache, block_table, out) -> bool:
    """Whether TMA can read q as [tokens, query heads x D] rows and each cache as [blocks x block size,
    KV heads x D] rows (heads and dims contiguous, blocks one after another, 16-byte aligned rows and
    first bytes: the copy engine's rule), and the kernel store out's rows and read the table's."""
    head_size, block_size = q.shape[2], k_cache.shape[1]
    rows = (q.stride(2) == 1 and q.stride(1) == head_size and q.stride(0) * q.element_size() % 16 == 0
            and out.stride(2) == 1 and block_table.stride(1) == 1)
    return rows and tma_aligned(q, k_cache, v_cache) and all(
        c.stride(3) == 1 and c.stride(2) == head_size and c.stride(0) == block_size * c.stride(1)
        and c.stride(1) * c.element_size() % 16 == 0 for c in (k_cache, v_cache))


def tma_aligned(q, k_cache, v_cache) -> bool:
    """Whether q's and the caches' first bytes are 16-byte aligned, as TMA's descriptors need: part of
    a plan's key, since the layout key reads no address."""
    return (q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr()) % 16 == 0


def gluon_available() -> bool:
    """Whether this Triton has Gluon's warp specialization (`triton.experimental.gluon`, 3.6 and later)."""
    try:
        from triton.experimental.gluon import language as gl
    except ImportError:
        return False
    return hasattr(gl, "warp_specialize")


# The arguments that are a call's tensors, by the kernels' parameter names.
_CALL_TENSORS = ("out_ptr", "q_ptr", "k_cache_ptr", "v_cache_ptr", "block_table_ptr",
                 "cu_seqlens_q_ptr", "seq_lens_ptr")
_OPTIONAL_TENSORS = ("sinks", "k_scale", "v_scale")  # options; absent ones stay placeholders
_SEGMENT_BUFFERS = ("segm_out_ptr", "segm_max_ptr", "segm_sum_ptr")


def _plan(q, k_cache, v_cache, block_table, out, config: heuristics.Config, persistent: bool,
          vendor: str, num_sms: int, **options) -> _Plan:
    num_tokens, num_q_heads, head_size = q.shape
    num_seqs, num_kv_heads = block_table.shape[0], k_cache.shape[2]
    block_q = config.block_q(num_q_heads // num_kv_heads)
    # items per KV head and segment: sequences, or an upper bound on Q-blocks (each sequence
    # may leave a partial block)
    q_blocks = num_seqs if config.seq_items else num_tokens // block_q + num_seqs
    buffers = arrivals = fresh = None
    if config.num_segments > 1:
        shape = (num_tokens, num_q_heads, config.num_segments, next_pow2(head_size), q.device)
        buffers = persistent_buffers(*shape) if persistent else segment_buffers(*shape)
        fresh = None if persistent else shape
        if config.fused_reduce:
            arrivals = arrival_counts(num_seqs, num_kv_heads, q.device)
    if persistent:
        grid = (num_programs(config, num_sms, q_blocks * num_kv_heads * config.num_segments),)
    else:
        grid = (q_blocks, num_kv_heads, config.num_segments)
    attention = KernelLaunch(
        kernel=q_block_kernel,
        grid=grid,
        args=kernel_args(q, *kv_operands(k_cache, v_cache, vendor), block_table, None, None,
                         out, buffers, arrivals, split_max_q=block_q,
                         num_segments=config.num_segments, **options),
        constexprs=kernel_constexprs(q, k_cache, v_cache, out, config, persistent, vendor,
                                     sliding_window=options.get("sliding_window"),
                                     softcap=options.get("softcap"), sinks=options.get("sinks")),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        vendor_options=config.vendor_options(vendor),
    )
    reduce = None
    if buffers is not None and arrivals is None:
        queries = block_q if config.reduce_by_query else 1  # items per (sequence, query head)
        items = num_seqs * num_q_heads * queries
        reduce_grid = ((max(1, min(REDUCE_PROGRAMS_PER_SM * num_sms, items)),) if persistent
                       else (num_seqs, num_q_heads, queries))
        reduce = reduce_launch(reduce_grid, q, None, out, buffers, config, block_q, num_seqs,
                               persistent, vendor)
    return _Plan(attention, reduce, vendor, options, fresh)


def num_programs(config: heuristics.Config, num_sms: int, max_items: int) -> int:
    """The persistent grid: programs_per_sm per SM, never more than the shapes' item bound
    (programs_per_sm 0: exactly that bound, one program per item)."""
    programs = max_items if config.programs_per_sm == 0 else min(config.programs_per_sm * num_sms, max_items)
    if config.max_programs:
        programs = min(programs, config.max_programs)
    return max(1, programs)


def kernel_args(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, out, buffers, arrivals=None,
                *, split_max_q: int, num_segments: int, scale=None, sliding_window=None,
                softcap=None, sinks=None, k_scale=None, v_scale=None) -> dict:
    """Runtime arguments of `q_block_kernel` (the caches as `kv_operands` hands them over)."""
    dummy = placeholder(q.device)  # stands in for absent optional tensors
    segm_out, segm_max, segm_sum = buffers if buffers is not None else (dummy, dummy, dummy)
    return dict(
        out_ptr=out, q_ptr=q, k_cache_ptr=k_cache, v_cache_ptr=v_cache,
        block_table_ptr=block_table, cu_seqlens_q_ptr=cu_seqlens_q, seq_lens_ptr=seq_lens,
        sinks_ptr=sinks if sinks is not None else dummy,
        k_scale_ptr=k_scale if k_scale is not None else dummy,
        v_scale_ptr=v_scale if v_scale is not None else dummy,
        segm_out_ptr=segm_out, segm_max_ptr=segm_max, segm_sum_ptr=segm_sum,
        arrivals_ptr=arrivals if arrivals is not None else dummy,
        scale=q.shape[2] ** -0.5 if scale is None else float(scale),
        softcap=float(softcap or 0.0),
        window=int(sliding_window or 0),
        num_seqs=block_table.shape[0],
        split_max_q=split_max_q,
        num_q_heads=q.shape[1],
        num_segments=num_segments,
        **shape_bounds(q, k_cache, block_table),
        **layout_strides(q, k_cache, v_cache, block_table, out),
    )


def kernel_constexprs(q, k_cache, v_cache, out, config: heuristics.Config, persistent: bool, vendor: str,
                      *, sliding_window=None, softcap=None, sinks=None) -> dict:
    """Compile-time constants of `q_block_kernel` for `vendor`'s kernels."""
    num_q_heads, head_size = q.shape[1], q.shape[2]
    queries_per_kv = num_q_heads // k_cache.shape[2]
    # e4m3 operands: both products (`fp8_products`: then no fp16 product), or Q K^T alone (`qk_e4m3`:
    # P V in fp16, whatever q's dtype, since q reaches the products as e4m3)
    fp8 = config.e4m3_operands and fp8_products_applies(k_cache, vendor, head_size)
    qk_only = fp8 and not config.fp8_products
    pv_fp16 = (config.pv_fp16 and pv_fp16_applies(q, k_cache) and not fp8) or qk_only
    qk_fp16 = config.qk_fp16 and pv_fp16_applies(q, k_cache) and not fp8
    return dict(
        QUERIES_PER_KV=queries_per_kv,
        BLOCK_SIZE=k_cache.shape[1],
        TILE_SIZE=config.tile_size,
        HEAD_SIZE=head_size,
        HEAD_SIZE_PADDED=next_pow2(head_size),
        BLOCK_M=config.block_m,
        BLOCK_Q=config.block_q(queries_per_kv),
        USE_SOFTCAP=bool(softcap),
        USE_SLIDING_WINDOW=bool(sliding_window),
        USE_SINKS=sinks is not None,
        USE_FP8=inputs.is_fp8(k_cache.dtype),
        DECODE_FNUZ=inputs.fp8_decoded_in_kernel(k_cache.dtype, vendor),
        READ_AHEAD=config.read_ahead,
        EDGE_TILE=config.edge_tile or config.tile_size,
        BLOCK_VECTOR=config.block_vector,
        OFFSETS_32=config.offsets_32 and offsets_32(k_cache, v_cache, head_size=head_size),
        TOKEN_OFFSETS_32=token_offsets_32(q, out, config.num_segments),
        PV_FP16=pv_fp16,
        QK_FP16=qk_fp16,
        FP8_PRODUCTS=fp8,
        SEQ_ITEMS=config.seq_items,
        DECODE_LAYOUT=config.decode_layout,
        FUSED_REDUCE=config.fused_reduce and config.num_segments > 1,
        SEGMENTS_PADDED=next_pow2(config.num_segments),
        PERSISTENT=persistent,
        **shared_strides(q, k_cache, v_cache, out, vendor),
        LAUNCH_DEPENDENTS=pdl_applies(config, vendor),
        **pairs_constexprs(q, k_cache, v_cache, config, vendor, pv_fp16, qk_fp16, fp8),
    )


def pairs_constexprs(q, k_cache, v_cache, config: heuristics.Config, vendor: str, pv_fp16: bool,
                     qk_fp16: bool, fp8: bool) -> dict:
    """V_PAIRS, K_PAIRS and PAIRS_PTX of `q_block_kernel`: `Config.v_pairs` where P V is an fp16
    product, `.k_pairs` where Q K^T is (q reaches the tiles in fp16: fp16 queries, or bf16 ones
    under QK_FP16), both where `pairs_apply`; the split in PTX unless in the interpreter."""
    fits = pairs_apply(k_cache, v_cache, vendor, q.shape[2], config.block_m)
    q_fp16 = not fp8 and (q.dtype == torch.float16 or qk_fp16)
    return dict(V_PAIRS=config.v_pairs and fits and (pv_fp16 or q_fp16),
                K_PAIRS=config.k_pairs and fits and q_fp16, PAIRS_PTX=not platform.interpreter_active())


def pairs_parity(k_cache: torch.Tensor, v_cache: torch.Tensor, config: heuristics.Config) -> int:
    """The address bit `pairs_apply` reads, where it can decide (an OCP e4m3 cache under `v_pairs` or
    `k_pairs`), else 0: part of a plan's key, since a layout key reads no address, and a cache view
    one byte in has the same shape and strides but no int16 to read."""
    if (config.v_pairs or config.k_pairs) and k_cache.dtype == inputs.OCP_E4M3:
        return (k_cache.data_ptr() | v_cache.data_ptr()) & 1
    return 0


# Q-blocks of more rows keep the bytes: 64-row Q-blocks (wgmma products on sm_90) lost 1.15-1.17x with
# the pairs on the fp16-query fp8 prefills and mixed batches, and with heads of 64 (two products of 32
# columns) on one warpgroup per 64 rows and tiles of >= 64 keys the odd dims' product came out wrong, in
# every form of the split, which the interpreter does not reproduce, nor do cut-down kernels on the GPU
# (NVIDIA H200, 2026-11-30; docs/lab/2026-11-30.md)
PAIRS_MAX_BLOCK_M = 32


# PTX ISA: `cvt.rn.f16x2.e4m3x2` (the pairs' split, `common.split_e4m3_pairs`) needs sm_89 or later
PAIRS_MIN_ARCH = 89


def pairs_apply(k_cache: torch.Tensor, v_cache: torch.Tensor, vendor: str, head_size: int,
                block_m: int) -> bool:
    """Where the caches can be read as 16-bit pairs of dims (`Config.v_pairs`, `.k_pairs`): OCP e4m3
    (FNUZ on NVIDIA is decoded from bytes) on NVIDIA from sm_89 (PAIRS_MIN_ARCH, `nvidia_gpu_before`),
    the only vendor measured (H200, docs/kernels.md), Q-blocks of at most PAIRS_MAX_BLOCK_M rows, a
    head of a power of two (no padded dims), and every element offset even: the caches' strides and
    their first bytes' addresses."""
    return (vendor == "nvidia" and not nvidia_gpu_before(PAIRS_MIN_ARCH) and block_m <= PAIRS_MAX_BLOCK_M
            and k_cache.dtype == inputs.OCP_E4M3 and v_cache.dtype == inputs.OCP_E4M3
            and head_size >= 2 and next_pow2(head_size) == head_size
            and all(stride % 2 == 0 for c in (k_cache, v_cache) for stride in c.stride()[:3])
            and k_cache.data_ptr() % 2 == 0 and v_cache.data_ptr() % 2 == 0)


# PTX ISA: `griddepcontrol` (programmatic dependent launch) needs sm_90 or later
PDL_MIN_ARCH = 90


def pdl_applies(config: heuristics.Config, vendor: str) -> bool:
    """Where `Config.pdl_reduce` changes the launches: a reduction launched after the attention kernel
    (split, not fused) on NVIDIA's GPUs, whose programmatic dependent launch Triton's CUDA launcher
    sets (`launch_pdl`); never in the interpreter, which runs no inline assembly, nor on an NVIDIA GPU
    older than sm_90 (an A100's PTX has no `griddepcontrol`: `nvidia_gpu_before`)."""
    return (config.pdl_reduce and config.num_segments > 1 and not config.fused_reduce and vendor == "nvidia"
            and not platform.interpreter_active() and not nvidia_gpu_before(PDL_MIN_ARCH))


def nvidia_gpu_before(min_arch: int) -> bool:
    """Whether this process runs on an NVIDIA GPU older than sm_`min_arch`, whose PTX lacks an
    instruction a knob needs. Planned from a CPU for another vendor's target (the static gate), the
    target is taken to be recent enough, as every NVIDIA target of thresholds.yaml (sm_90, sm_100) is."""
    here = platform.current()
    return here.vendor == "nvidia" and int(here.arch.removeprefix("sm_")) < min_arch


def pv_fp16_applies(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Where `Config.pv_fp16` and `.qk_fp16` change the kernel: bf16 queries over an OCP e4m3 cache (FNUZ
    reaches fp16 through f32 one value at a time on gfx942, and other caches are q's dtype)."""
    return q.dtype == torch.bfloat16 and k_cache.dtype == inputs.OCP_E4M3


def fp8_products_applies(k_cache: torch.Tensor, vendor: str, head_size: int) -> bool:
    """Where `Config.fp8_products` changes the kernel: an fp8 cache in a format `vendor`'s Triton
    converts (OCP on NVIDIA; OCP or FNUZ on AMD), whose loaded tiles are `tl.dot` operands as
    they are, and a padded head of at least `heuristics.MIN_FP8_TILE` (Q K^T's K). FNUZ on
    NVIDIA reaches the kernel as bytes to decode (`kv_operands`): no e4m3 type to multiply in,
    and reading them as OCP would misread 0x7F (FNUZ 240, the scale's largest value; OCP NaN);
    other caches are q's dtype."""
    return (inputs.is_fp8(k_cache.dtype) and not inputs.fp8_decoded_in_kernel(k_cache.dtype, vendor)
            and next_pow2(head_size) >= heuristics.MIN_FP8_TILE)


def offsets_32(*tensors: torch.Tensor, head_size: int) -> bool:
    """Whether every element offset the kernel forms into these tensors (caches, or q and out)
    fits in int32: their largest element's, and past it the lanes that pad a head to a power
    of two (masked, but their offsets are formed)."""
    extent = max(sum((n - 1) * stride for n, stride in zip(t.shape, t.stride())) for t in tensors)
    return extent + next_pow2(head_size) - head_size < 2**31


def token_offsets_32(q, out, num_segments: int) -> bool:
    """Whether the offsets formed from token indices fit in int32: into q, out and, when split,
    the float32 partials (tokens x query heads x segments x padded head; `segment_buffers`).
    Past 2**31 (llama3-8b: 524,288 tokens of 32 heads x 128) an int32 offset wraps negative,
    and the kernels read and write out of bounds: they then compute them in int64."""
    num_tokens, num_q_heads, head_size = q.shape
    partials = num_tokens * num_q_heads * num_segments * next_pow2(head_size) if num_segments > 1 else 0
    return offsets_32(q, out, head_size=head_size) and partials < 2**31


def reduce_launch(grid, q, cu_seqlens_q, out, buffers, config: heuristics.Config, split_max_q: int,
                  num_seqs: int, persistent: bool, vendor: str) -> KernelLaunch:
    """The launch of `reduce_segments_kernel` merging the segments in `buffers`."""
    segm_out, segm_max, segm_sum = buffers
    pdl = pdl_applies(config, vendor)
    return KernelLaunch(
        kernel=reduce_segments_kernel,
        grid=grid,
        args=dict(out_ptr=out, segm_out_ptr=segm_out, segm_max_ptr=segm_max, segm_sum_ptr=segm_sum,
                  cu_seqlens_q_ptr=cu_seqlens_q, split_max_q=split_max_q, num_q_heads=q.shape[1],
                  num_segments=config.num_segments, stride_o_token=out.stride(0),
                  stride_o_head=out.stride(1), num_seqs=num_seqs, num_tokens=q.shape[0]),
        constexprs=dict(SEGMENTS_PADDED=next_pow2(config.num_segments), HEAD_SIZE=q.shape[2],
                        HEAD_SIZE_PADDED=next_pow2(q.shape[2]), PERSISTENT=persistent,
                        TOKEN_OFFSETS_32=token_offsets_32(q, out, config.num_segments),
                        BY_QUERY=config.reduce_by_query, WAIT_PRIMARY=pdl),
        num_warps=config.reduce_warps,
        num_stages=1,
        vendor_options={"launch_pdl": True} if pdl else {},
    )


def segment_buffers(num_tokens: int, num_q_heads: int, segments: int, head_size_padded: int,
                    device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(partial outputs, maxima, exp-sums), float32, for `segments` segments per query."""
    out = torch.empty(num_tokens, num_q_heads, segments, head_size_padded, dtype=torch.float32,
                      device=device)
    stats = torch.empty(2, num_tokens, num_q_heads, segments, dtype=torch.float32, device=device)
    return out, stats[0], stats[1]


# Segment buffers of the persistent grid by (device, tokens, heads, segments, padded head
# size), allocated on the first call of a shape and kept: a captured graph holds their
# addresses, so they must outlive it; every later call (and every replay) reuses them.
_BUFFERS: dict[tuple, tuple[torch.Tensor, ...] | torch.Tensor] = {}


def _kept(key: tuple, make):
    """`_BUFFERS[key]`, made by `make()` on the first call: kept for the graphs that capture it."""
    if key not in _BUFFERS:
        _BUFFERS[key] = make()
    return _BUFFERS[key]


def persistent_buffers(num_tokens: int, num_q_heads: int, segments: int, head_size_padded: int,
                       device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _kept((str(torch.device(device)), num_tokens, num_q_heads, segments, head_size_padded),
                 lambda: segment_buffers(num_tokens, num_q_heads, segments, head_size_padded, device))


def arrival_counts(num_seqs: int, num_kv_heads: int, device) -> torch.Tensor:
    """Per (sequence, KV head) counts of the segments done (`common.merge_if_last`), int32,
    zeroed on the first call of a shape and kept: each launch leaves them at 0 again, so a
    captured graph replays on them. Launches of one shape on concurrent streams would share
    them (as they share `persistent_buffers`): run such batches on one stream."""
    return _kept(("arrivals", str(torch.device(device)), num_seqs, num_kv_heads),
                 lambda: torch.zeros(num_seqs * num_kv_heads, dtype=torch.int32, device=device))


def ticket_counters(device) -> torch.Tensor:
    """The warp-specialized kernel's two int32 counters (the next work item's ticket, the programs done
    drawing: `warp_specialized._ticket`), zeroed once per device and kept: each launch leaves them at 0
    again (its last program zeroes them), so a captured graph replays on them. As with `arrival_counts`,
    launches on concurrent streams would share them: run them on one stream."""
    return _kept(("tickets", str(torch.device(device))),
                 lambda: torch.zeros(2, dtype=torch.int32, device=device))


def release_buffers() -> None:
    """Drop the persistent grid's segment buffers, arrival counts and ticket counters (only once no
    captured graph uses them), and the plans that hold them."""
    _BUFFERS.clear()
    _PLANS.clear()
