"""Vendor-library peers for "% of SOTA": the same shapes, laid out densely, not paged.

Each peer registers a setup function that takes a uniform batch (every sequence with the
same query and KV length), allocates its own dense inputs and returns a closure, so timing
never includes allocation (tritonbench's pattern). A peer that cannot run here (backend
absent, shape refused) raises `PeerUnavailable` with the reason, which the benchmark
prints as a note instead of a number. Every peer's label says "dense, not paged": the
paged kernels read KV through a block table, these read contiguous tensors.

PyTorch SDPA, cuDNN and flash backends. Grouped-query attention: `enable_gqa=True` first;
a backend that refuses it gets, for decode (one query per sequence, nothing to mask), the
query heads of each KV head packed into the query-length axis ([B, Hkv, G, D] against
[B, Hkv, L, D], the same arithmetic and the same KV bytes), and for prefill the KV heads
repeated G times (prefill is compute bound; the layout is named in the note).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


class PeerUnavailable(Exception):
    """The peer cannot run this shape here; the message says why."""


@dataclass(frozen=True)
class DenseShape:
    batch: int
    query_len: int  # per sequence; 1 = decode
    kv_len: int  # per sequence, the queries' own positions included
    num_q_heads: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype

    @property
    def group(self) -> int:
        return self.num_q_heads // self.num_kv_heads


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    setup: Callable[[DenseShape, str], tuple[Callable[[], torch.Tensor], str]]  # -> (fn, layout note)


PEERS: dict[str, Peer] = {}


def register(name: str, label: str):
    def wrap(setup):
        PEERS[name] = Peer(name, label, setup)
        return setup
    return wrap


def _sdpa(backend_name: str):
    def setup(shape: DenseShape, device: str):
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError as exc:  # torch too old
            raise PeerUnavailable(f"torch.nn.attention unavailable: {exc}") from exc
        if not torch.cuda.is_available():
            raise PeerUnavailable("needs a CUDA/ROCm GPU")
        backend = getattr(SDPBackend, backend_name)
        gen = torch.Generator(device=device).manual_seed(0)

        def randn(*s):
            return torch.randn(*s, generator=gen, device=device, dtype=shape.dtype)

        b, lq, lk, d = shape.batch, shape.query_len, shape.kv_len, shape.head_size
        q = randn(b, shape.num_q_heads, lq, d)
        k = randn(b, shape.num_kv_heads, lk, d)
        v = randn(b, shape.num_kv_heads, lk, d)
        causal = lq > 1  # decode: the single query is the last position and sees every key
        if causal and lq != lk:
            raise PeerUnavailable("SDPA's causal mask is top-left aligned; needs query_len == kv_len")
        sdpa = torch.nn.functional.scaled_dot_product_attention
        attempts = [("enable_gqa", lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=True))]
        if lq == 1:
            qp = q.reshape(b, shape.num_kv_heads, shape.group, d)  # heads of a group as queries
            attempts.append(("query heads packed per KV head", lambda: sdpa(qp, k, v)))
        else:
            ke = k.repeat_interleave(shape.group, dim=1)
            ve = v.repeat_interleave(shape.group, dim=1)
            attempts.append(("KV heads repeated", lambda: sdpa(q, ke, ve, is_causal=causal)))
        errors = []
        for layout, fn in attempts:
            try:
                with sdpa_kernel([backend]):
                    fn()
                torch.cuda.synchronize()
            except Exception as exc:  # the backend refused this layout: try the next one
                errors.append(f"{layout}: {str(exc).splitlines()[0][:120]}")
                continue

            def run(fn=fn):
                with sdpa_kernel([backend]):
                    return fn()
            return run, layout
        raise PeerUnavailable(f"SDPA {backend_name} refused: " + "; ".join(errors))
    return setup


register("sdpa_cudnn", "SDPA cuDNN (dense, not paged)")(_sdpa("CUDNN_ATTENTION"))
register("sdpa_flash", "SDPA flash (dense, not paged)")(_sdpa("FLASH_ATTENTION"))


# --- The nightly's vendor baselines (perf/nightly): a scenario's own batch, per vendor ------
# The dense peers above take one uniform shape; a nightly scenario may mix decode and prefill
# or vary lengths. `setup_for_batch` runs a dense peer once per group of equal (query, KV)
# lengths, back to back, when there are at most MAX_DENSE_GROUPS groups (the decode and the
# prefill half of a batch, as a serving engine without varlen kernels would split it); more
# groups would time launches, not attention. The peers registered below read the scenario's
# own batch: flash_attn and flashinfer through a block table (paged), aiter varlen on dense
# copies. A library that is not installed is left out of the nightly with a note.

import importlib.util  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import Any  # noqa: E402

MAX_DENSE_GROUPS = 2
FLASH_ATTN_PAGE = 256  # flash_attn 2's paged KV needs a page size that is a multiple of 256 (its docstring)
FLASHINFER_WORKSPACE_BYTES = 128 * 1024 * 1024  # the size flashinfer's own examples allocate


@dataclass(frozen=True)
class BatchPeer:
    name: str
    label: str
    module: str  # the package it needs; absent -> not measured, with a note
    setup: Callable[[Any, str], tuple[Callable[[], torch.Tensor], str]]  # (BatchSpec, device) -> (fn, note)


BATCH_PEERS: dict[str, BatchPeer] = {}

# The libraries each vendor's nightly compares against ("% of SOTA": the fastest of them).
VENDOR_PEERS = {
    "nvidia": ("sdpa_cudnn", "sdpa_flash", "flash_attn_paged", "flashinfer_paged"),
    "amd": ("sdpa_flash", "sdpa_efficient", "aiter_varlen"),
}

register("sdpa_efficient", "SDPA memory-efficient (dense, not paged)")(_sdpa("EFFICIENT_ATTENTION"))


def register_batch(name: str, label: str, module: str):
    def wrap(setup):
        BATCH_PEERS[name] = BatchPeer(name, label, module, setup)
        return setup
    return wrap


def peer_label(name: str) -> str:
    if name in BATCH_PEERS:
        return BATCH_PEERS[name].label
    return PEERS[name].label if name in PEERS else name


def absent_reason(name: str) -> str | None:
    """Why `name` cannot be measured here at all (not registered, package missing), or None."""
    module = BATCH_PEERS[name].module if name in BATCH_PEERS else ("torch" if name in PEERS else None)
    if module is None:
        return f"{name!r} is not a registered peer (known: {', '.join([*PEERS, *BATCH_PEERS])})"
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    return None


def peers_for(vendor: str) -> list[str]:
    """The vendor's libraries that are installed here (none without a GPU)."""
    return [n for n in VENDOR_PEERS.get(vendor, ()) if absent_reason(n) is None]


def absent_for(vendor: str) -> dict[str, str]:
    """The vendor's libraries that are not installed here, with the reason (for the report)."""
    return {n: r for n in VENDOR_PEERS.get(vendor, ()) if (r := absent_reason(n)) is not None}


def dense_groups(spec) -> list[DenseShape]:
    """One DenseShape per group of equal (query, KV) lengths of a kernels.batch.BatchSpec."""
    missing = [f for f, on in (("fp8 KV cache", spec.fp8_kv), ("sinks", spec.sinks),
                               ("sliding window", spec.sliding_window), ("softcap", spec.softcap)) if on]
    if missing:
        raise PeerUnavailable(f"SDPA has no {', '.join(missing)}: not the same computation")
    groups: dict[tuple[int, int], int] = {}
    for q, kv in zip(spec.query_lens, spec.kv_lens):
        groups[(q, kv)] = groups.get((q, kv), 0) + 1
    if len(groups) > MAX_DENSE_GROUPS:
        raise PeerUnavailable(f"{len(groups)} distinct (query, KV) lengths: dense SDPA would need as many "
                              f"calls; variable-length batches need flash_attn or flashinfer")
    return [DenseShape(n, q, kv, spec.num_q_heads, spec.num_kv_heads, spec.head_size, spec.torch_dtype)
            for (q, kv), n in groups.items()]


def setup_for_batch(name: str, spec, device: str) -> tuple[Callable[[], object], str, str]:
    """(fn, label, note) running peer `name` on the batch `spec` describes; PeerUnavailable if not."""
    reason = absent_reason(name)
    if reason:
        raise PeerUnavailable(reason)
    if name in BATCH_PEERS:
        fn, note = BATCH_PEERS[name].setup(spec, device)
        return fn, BATCH_PEERS[name].label, note
    shapes = dense_groups(spec)
    fns, notes = [], []
    for shape in shapes:
        fn, layout = PEERS[name].setup(shape, device)
        fns.append(fn)
        notes.append(f"{shape.batch} x (q {shape.query_len}, kv {shape.kv_len}): {layout}")

    def run(fns=tuple(fns)):
        for f in fns:
            f()
    return run, PEERS[name].label, "; ".join(notes)


def _cu(lengths, device: str) -> torch.Tensor:
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0).to(torch.int32)
    return cu.to(device)


def _batch_checks(spec, library: str, unsupported: dict[str, bool]) -> None:
    if not torch.cuda.is_available():
        raise PeerUnavailable("needs a CUDA/ROCm GPU")
    missing = [f for f, on in unsupported.items() if on]
    if missing:
        raise PeerUnavailable(f"{library} has no {', '.join(missing)} here")


def _refused(library: str, fn: Callable[[], object]) -> None:
    """First call: a shape or option the library rejects is a note, not a failure."""
    try:
        fn()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
        raise PeerUnavailable(f"{library} refused: {str(exc).splitlines()[0][:160]}") from exc


@register_batch("flash_attn_paged", "flash_attn varlen (paged, block table)", "flash_attn")
def _flash_attn_paged(spec, device: str):
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError as exc:
        raise PeerUnavailable(f"flash_attn does not import: {exc}") from exc
    _batch_checks(spec, "flash_attn 2", {"fp8 KV cache": spec.fp8_kv, "sinks": spec.sinks})
    from kernels.batch import build_batch

    b = build_batch(replace(spec, block_size=FLASH_ATTN_PAGE), device)
    cu_k = _cu(spec.kv_lens, device)
    # kernels.batch: keys with pos - key_pos >= window are masked; flash_attn keeps window_size[0] keys back.
    window = (spec.sliding_window - 1, 0) if spec.sliding_window else (-1, -1)

    def run():
        return flash_attn_varlen_func(b.q, b.k_cache, b.v_cache, b.cu_seqlens_q, cu_k, max(spec.query_lens),
                                      max(spec.kv_lens), softmax_scale=b.options["scale"], causal=True,
                                      window_size=window, softcap=spec.softcap or 0.0,
                                      block_table=b.block_table)
    _refused("flash_attn", run)
    return run, f"paged, page size {FLASH_ATTN_PAGE} (flash_attn 2 needs a multiple of 256)"


@register_batch("flashinfer_paged", "flashinfer batch prefill (paged, block table)", "flashinfer")
def _flashinfer_paged(spec, device: str):
    try:
        import flashinfer
    except ImportError as exc:
        raise PeerUnavailable(f"flashinfer does not import: {exc}") from exc
    _batch_checks(spec, "flashinfer", {"fp8 KV cache": spec.fp8_kv, "sinks": spec.sinks})
    from kernels.batch import build_batch

    b = build_batch(spec, device)
    blocks = spec.blocks_per_seq()
    indptr = _cu(blocks, device)  # page-table rows in flashinfer's CSR form
    indices = torch.cat([b.block_table[i, :n] for i, n in enumerate(blocks)])
    last = torch.tensor([kv - (n - 1) * spec.block_size for kv, n in zip(spec.kv_lens, blocks)],
                        dtype=torch.int32, device=device)
    workspace = torch.empty(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")  # NHD = our cache layout
    try:
        wrapper.plan(b.cu_seqlens_q, indptr, indices, last, spec.num_q_heads, spec.num_kv_heads,
                     spec.head_size, spec.block_size, causal=True, sm_scale=b.options["scale"],
                     logits_soft_cap=spec.softcap,
                     window_left=(spec.sliding_window - 1) if spec.sliding_window else -1,
                     q_data_type=spec.torch_dtype, kv_data_type=spec.torch_dtype)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
        raise PeerUnavailable(f"flashinfer refused: {str(exc).splitlines()[0][:160]}") from exc

    def run(keep=(workspace,)):
        return wrapper.run(b.q, (b.k_cache, b.v_cache))
    _refused("flashinfer", run)
    return run, f"paged, page size {spec.block_size}, NHD"


@register_batch("aiter_varlen", "aiter varlen flash (dense, not paged)", "aiter")
def _aiter_varlen(spec, device: str):
    try:
        import aiter
    except ImportError as exc:
        raise PeerUnavailable(f"aiter does not import: {exc}") from exc
    _batch_checks(spec, "aiter", {"fp8 KV cache": spec.fp8_kv, "sinks": spec.sinks, "softcap": spec.softcap})
    from kernels.batch import build_batch

    b = build_batch(spec, device)
    hkv, d = spec.num_kv_heads, spec.head_size

    def dense(cache):  # each sequence's blocks gathered into one contiguous [total_k, Hkv, D]
        return torch.cat([cache[b.block_table[i, :n].long()].reshape(-1, hkv, d)[:kv]
                          for i, (n, kv) in enumerate(zip(spec.blocks_per_seq(), spec.kv_lens))])
    k, v = dense(b.k_cache), dense(b.v_cache)
    cu_k = _cu(spec.kv_lens, device)
    window = (spec.sliding_window - 1, 0) if spec.sliding_window else (-1, -1)

    def run():
        return aiter.flash_attn_varlen_func(b.q, k, v, b.cu_seqlens_q, cu_k, max(spec.query_lens),
                                            max(spec.kv_lens), softmax_scale=b.options["scale"], causal=True,
                                            window_size=window)
    _refused("aiter", run)
    return run, "dense varlen copies of the paged cache"
