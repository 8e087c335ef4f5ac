"""Vendor-library peers: the same batches run by other attention libraries ("% of SOTA").

A peer is measured beside the variants, in the same interleaved rounds, as a case named
"peer:<name>" (`PREFIX`); perf/measure/peer_cases.py makes those cases from `setup_for_batch`.
`perf run --peers` and the nightly both go through `resolve` (auto | none | a,b).

Two kinds of peers:
- Batch peers read a scenario's own batch. flashinfer (its paged wrappers, and for decodes
  TensorRT-LLM's XQA kernel it ships), FlashAttention-3 (its Hopper kernels, sm_90 only) and
  vLLM's Triton unified attention read the very cache tensors and block table the kernels read
  (no copy); flash_attn 2
  reads a copy paged at 256 tokens (its minimum page size); aiter reads dense varlen
  copies. A library that is not installed is left out with a note.
- Dense PyTorch SDPA (cuDNN, flash, memory-efficient backends) on contiguous copies, "dense,
  not paged" in its label: a uniform batch is one call, a batch with two groups of equal
  (query, KV) lengths (a decode and a prefill half) is two calls back to back; a batch of
  many lengths is refused (it would time launches, not attention). Grouped-query
  attention: `enable_gqa=True` first; a backend that refuses it gets, for decode (one query
  per sequence, nothing to mask), the query heads of each KV head packed into the
  query-length axis ([B, Hkv, G, D] against [B, Hkv, L, D], the same arithmetic and the
  same KV bytes), and for prefill the KV heads repeated G times (named in the note).

A peer that cannot run a batch here (no GPU, a feature it lacks, a shape it refuses)
raises `PeerUnavailable` with the reason, recorded as a skip instead of a number. This
module imports torch only when a peer is set up (asv's lookup processes import it).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perf.errors import ConfigError

PREFIX = "peer:"  # results files name a vendor library's series "peer:<name>"
MAX_DENSE_GROUPS = 2
FLASH_ATTN_PAGE = 256  # flash_attn 2's paged KV needs a page size that is a multiple of 256 (its docstring)
FLASHINFER_WORKSPACE_BYTES = 128 * 1024 * 1024  # the size flashinfer's docstrings recommend
# flashinfer decode: tensor cores (its prefill kernels) from this many query heads per KV head
# on. flashinfer's docstring says only "faster for large group size"; SGLang's mini-sglang
# FlashInfer backend uses >= 4. Unmeasured here.
FLASHINFER_TENSOR_CORE_MIN_GROUP = 4
XQA_PAGE_SIZES = (16, 32, 64, 128)  # the page sizes flashinfer 0.7.4's `xqa` docstring allows
# Where vLLM keeps its Triton unified attention, newest first (it moved into v1/).
VLLM_UNIFIED_MODULES = ("vllm.v1.attention.ops.triton_unified_attention",
                        "vllm.attention.ops.triton_unified_attention")
# How vLLM's Triton backend (vllm/v1/attention/backends/triton_attn.py, vllm 0.19.1) sets up
# the split-KV ("3D") decode path: partial buffers for up to 128 // num_kv_heads decoding
# sequences (its MIN_LAUNCH_GRID_SIZE_2D), 16 segments each (NUM_PAR_SOFTMAX_SEGMENTS),
# allocated once when the backend is built. Larger batches, prefills and (its source through
# 0.33: `max_seqlen_q > 1`) multi-token decodes run the 2D kernel.
VLLM_MIN_LAUNCH_GRID_2D = 128
VLLM_SOFTMAX_SEGMENTS = 16
# vLLM's KVQuantMode.FP8_PER_TENSOR (vllm/v1/kv_cache_interface.py): since its `unified_attention`
# took `kv_quant_mode` (0.2x; 0.33.0 has it), an fp8 cache is dequantized by k/v_descale only
# when told so; without it the kernel reads the fp8 values unscaled. 0.19.1 scaled by dtype.
VLLM_FP8_PER_TENSOR = 1
# The package (distribution) names the peers' versions are read under (`library_version`).
DISTRIBUTIONS = {"flashinfer": ("flashinfer-python", "flashinfer"), "vllm": ("vllm",),
                 "flash_attn": ("flash-attn", "flash_attn"), "aiter": ("amd-aiter", "aiter"),
                 "flash_attn_interface": ("flash_attn_3", "flash-attn-3")}


class PeerUnavailable(Exception):
    """The peer cannot run this batch here; the message says why."""


@dataclass(frozen=True)
class DenseShape:
    batch: int
    query_len: int  # per sequence; 1 = decode
    kv_len: int  # per sequence, the queries' own positions included
    num_q_heads: int
    num_kv_heads: int
    head_size: int
    dtype: Any  # torch.dtype

    @property
    def group(self) -> int:
        return self.num_q_heads // self.num_kv_heads


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    module: str  # the package it needs; absent -> not measured, with a note
    # Batch peers: (PagedBatch, device) -> (fn, note). Dense peers: (DenseShape, device) -> (fn, layout).
    setup: Callable[[Any, str], tuple[Callable[[], object], str]]
    dense: bool = False
    # The setup's call returns its output in the kernels' layout ([num_tokens, num_q_heads,
    # head_size]) for the batch it was given, so it can be checked against the fp32 reference
    # (perf/measure/peer_cases.py); dense peers run copies of other tensors and are not checked.
    checked: bool = False
    # Over an OCP e4m3 cache it rounds q and P to e4m3 for its products (FlashAttention-3's fp8 path,
    # TensorRT-LLM's XQA): held to the fp8 products' tolerance against q itself, as a launch of ours
    # that rounds P is (perf/measure/check.py FP8_PRODUCTS_TOLERANCE), not to the output dtype's.
    e4m3_products: bool = False


PEERS: dict[str, Peer] = {}

# The libraries `--peers auto` measures per vendor ("% of SOTA": the fastest of them).
VENDOR_PEERS = {
    "nvidia": ("sdpa_cudnn", "sdpa_flash", "flash_attn_paged", "flash_attn_3", "flashinfer_paged",
               "flashinfer_xqa", "vllm_unified"),
    "amd": ("sdpa_flash", "sdpa_efficient", "aiter_varlen", "vllm_unified"),
}


def register(name: str, label: str, module: str, dense: bool = False, e4m3_products: bool = False):
    def wrap(setup):
        PEERS[name] = Peer(name, label, module, setup, dense, checked=not dense, e4m3_products=e4m3_products)
        return setup
    return wrap


# --- choosing peers ---------------------------------------------------------------------------


def peer_label(name: str) -> str:
    return PEERS[name].label if name in PEERS else name


def absent_reason(name: str) -> str | None:
    """Why `name` cannot be measured here at all (not registered, package missing), or None."""
    if name not in PEERS:
        return f"{name!r} is not a registered peer (known: {', '.join(PEERS)})"
    module = PEERS[name].module
    try:
        found = importlib.util.find_spec(module) is not None
    except ValueError:  # a module in sys.modules without a spec (tests' stand-ins)
        found = True
    return None if found else f"{module} is not installed"


def peers_for(vendor: str) -> list[str]:
    """The vendor's libraries that are installed here (none without a GPU)."""
    return [n for n in VENDOR_PEERS.get(vendor, ()) if absent_reason(n) is None]


def absent_for(vendor: str) -> dict[str, str]:
    """The vendor's libraries that are not installed here, with the reason (for the report)."""
    return {n: r for n in VENDOR_PEERS.get(vendor, ()) if (r := absent_reason(n)) is not None}


def resolve(text: str, vendor: str | None, option: str = "--peers") -> tuple[tuple[str, ...], dict[str, str]]:
    """(peers to measure, {absent peer: why}) for `auto` (this vendor's installed libraries),
    `none`, or a comma list (unknown names: ConfigError; not installed: left out, noted)."""
    if text == "auto":
        if vendor is None:
            return (), {}
        return tuple(peers_for(vendor)), absent_for(vendor)
    if text == "none":
        return (), {}
    wanted = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PEERS]
    if unknown or not wanted:
        raise ConfigError(f"{option}: unknown peer {', '.join(unknown) or repr(text)}; use auto, none or a "
                          f"comma list of: {', '.join(PEERS)}")
    absent = {p: r for p in wanted if (r := absent_reason(p))}
    return tuple(p for p in wanted if p not in absent), absent


# --- a peer on a batch --------------------------------------------------------------------------


def setup_for_batch(name: str, spec, device: str, batch=None) -> tuple[Callable[[], object], str, str]:
    """(fn, label, note) running peer `name` on the batch `spec` describes (`batch`, when
    given, is that batch already on the device: batch peers read it); PeerUnavailable if not."""
    reason = absent_reason(name)
    if reason:
        raise PeerUnavailable(reason)
    peer = PEERS[name]
    if not peer.dense:
        if batch is None:
            from kernels.batch import build_batch

            batch = build_batch(spec, device)
        fn, note = peer.setup(batch, device)
        return fn, peer.label, note
    fns, notes = [], []
    for shape in dense_groups(spec):
        fn, layout = peer.setup(shape, device)
        fns.append(fn)
        notes.append(f"{shape.batch} x (q {shape.query_len}, kv {shape.kv_len}): {layout}")

    def run(fns=tuple(fns)):
        for f in fns:
            f()
    return run, peer.label, "; ".join(notes)


def library_version(module: str) -> str:
    """The version of a peer's library, for the notes the benchmark table prints: its package
    metadata, else the module's `__version__`, else "version unknown" (a copy without either,
    such as vLLM's kernel file with stand-ins for the vllm modules it imports)."""
    import sys
    from importlib import metadata

    top = module.split(".")[0]
    for dist in DISTRIBUTIONS.get(top, (top,)):
        try:
            return metadata.version(dist)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    version = getattr(sys.modules.get(top), "__version__", None)
    return str(version) if version else "version unknown"


# --- dense PyTorch SDPA --------------------------------------------------------------------------


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
                              f"calls; variable-length batches need flash_attn, flashinfer or vllm")
    return [DenseShape(n, q, kv, spec.num_q_heads, spec.num_kv_heads, spec.head_size, spec.torch_dtype)
            for (q, kv), n in groups.items()]


def _sdpa(backend_name: str):
    def setup(shape: DenseShape, device: str):
        import torch

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


register("sdpa_cudnn", "SDPA cuDNN (dense, not paged)", "torch", dense=True)(_sdpa("CUDNN_ATTENTION"))
register("sdpa_flash", "SDPA flash (dense, not paged)", "torch", dense=True)(_sdpa("FLASH_ATTENTION"))
register("sdpa_efficient", "SDPA memory-efficient (dense, not paged)", "torch",
         dense=True)(_sdpa("EFFICIENT_ATTENTION"))


# --- libraries reading the batch ---------------------------------------------------------------


def _cu(lengths, device: str):
    import torch

    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0).to(torch.int32)
    return cu.to(device)


def _batch_checks(spec, library: str, unsupported: dict[str, Any]) -> None:
    """A GPU, and none of the features `library` lacks (value: truthy when the batch uses the
    feature; a string says why the library cannot)."""
    import torch

    if not torch.cuda.is_available():
        raise PeerUnavailable("needs a CUDA/ROCm GPU")
    missing = [f"{f} ({why})" if isinstance(why, str) else f for f, why in unsupported.items() if why]
    if missing:
        raise PeerUnavailable(f"{library} has no {', '.join(missing)} here")


def _refused(library: str, fn: Callable[[], object]) -> None:
    """First call: a shape or option the library rejects is a note, not a failure."""
    import torch

    try:
        fn()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError, TypeError, NotImplementedError, AssertionError) as exc:
        why = (str(exc) or type(exc).__name__).splitlines()[0][:160]
        raise PeerUnavailable(f"{library} refused: {why}") from exc


def _window(spec) -> tuple[int, int]:
    # kernels.batch masks keys with pos - key_pos >= window: a query sees `window` keys, its own
    # included; flash_attn and vLLM keep window_size[0] keys before the query.
    return (spec.sliding_window - 1, 0) if spec.sliding_window else (-1, -1)


def repaged(batch, page: int):
    """(k_cache, v_cache, block_table): the batch's keys and values copied into pages of `page`
    tokens, each sequence's in consecutive pages: the same data under a library's page size."""
    import torch

    spec = batch.spec
    heads, size = spec.num_kv_heads, spec.head_size
    pages = [-(-kv // page) for kv in spec.kv_lens]
    caches = [c.new_zeros((sum(pages), page, heads, size)) for c in (batch.k_cache, batch.v_cache)]
    table = torch.zeros(spec.num_seqs, max(pages), dtype=torch.int32, device=batch.block_table.device)
    first = 0
    for i, (n, kv) in enumerate(zip(pages, spec.kv_lens)):
        pos = torch.arange(kv, device=batch.block_table.device)
        physical = batch.block_table[i, pos // spec.block_size].long()
        for new, old in zip(caches, (batch.k_cache, batch.v_cache)):
            new.view(-1, heads, size)[first * page:first * page + kv] = old[physical, pos % spec.block_size]
        table[i, :n] = torch.arange(first, first + n, dtype=torch.int32)
        first += n
    return caches[0], caches[1], table


@register("flash_attn_paged", "flash_attn varlen (paged, block table)", "flash_attn")
def _flash_attn_paged(batch, device: str):
    spec = batch.spec
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError as exc:
        raise PeerUnavailable(f"flash_attn does not import: {exc}") from exc
    _batch_checks(spec, "flash_attn 2", {"fp8 KV cache": spec.fp8_kv, "sinks": spec.sinks})
    b = batch
    k_cache, v_cache, block_table = repaged(batch, FLASH_ATTN_PAGE)  # its own pages: a copy
    cu_k = _cu(spec.kv_lens, device)

    def run():
        return flash_attn_varlen_func(b.q, k_cache, v_cache, b.cu_seqlens_q, cu_k, max(spec.query_lens),
                                      max(spec.kv_lens), softmax_scale=b.options["scale"], causal=True,
                                      window_size=_window(spec), softcap=spec.softcap or 0.0,
                                      block_table=block_table)
    _refused("flash_attn", run)
    return run, f"paged copy, page size {FLASH_ATTN_PAGE} (flash_attn 2 needs a multiple of 256)"


def flashinfer_wrapper(flashinfer, spec, workspace) -> tuple[Any, bool, str]:
    """(wrapper, is_decode, note): the decode wrapper when every sequence has one query (with
    tensor cores from FLASHINFER_TENSOR_CORE_MIN_GROUP query heads per KV head), else prefill."""
    if all(q == 1 for q in spec.query_lens):
        cores = spec.num_q_heads // spec.num_kv_heads >= FLASHINFER_TENSOR_CORE_MIN_GROUP
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=cores)
        return wrapper, True, "BatchDecodeWithPagedKVCacheWrapper" + (", tensor cores" if cores else "")
    return flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD"), False, \
        "BatchPrefillWithPagedKVCacheWrapper, causal"


@register("flashinfer_paged", "flashinfer (paged, block table)", "flashinfer")
def _flashinfer_paged(batch, device: str):
    import torch

    spec = batch.spec
    try:
        import flashinfer
    except ImportError as exc:
        raise PeerUnavailable(f"flashinfer does not import: {exc}") from exc
    _batch_checks(spec, "flashinfer", {"sinks": spec.sinks and "its paged wrappers take no sink logits"})
    b = batch  # the kernels' cache and block table, read in place (NHD = our cache layout)
    blocks = spec.blocks_per_seq()
    indptr = _cu(blocks, device)  # the block table's rows in flashinfer's CSR form
    indices = torch.cat([b.block_table[i, :n] for i, n in enumerate(blocks)])
    last = torch.tensor([kv - (n - 1) * spec.block_size for kv, n in zip(spec.kv_lens, blocks)],
                        dtype=torch.int32, device=device)
    workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    wrapper, decode, note = flashinfer_wrapper(flashinfer, spec, workspace)
    options = dict(window_left=_window(spec)[0], logits_soft_cap=spec.softcap, sm_scale=b.options["scale"],
                   q_data_type=spec.torch_dtype, kv_data_type=b.k_cache.dtype)
    scales = {}
    if spec.fp8_kv:  # per-tensor scales as floats, read once here: k_scale folds into the score
        # scale, v_scale into the output (flashinfer's `run(..., k_scale=, v_scale=)`)
        if not {"k_scale", "v_scale"} <= set(inspect.signature(wrapper.run).parameters):
            raise PeerUnavailable("flashinfer has no fp8 KV cache (its run() takes no k_scale/v_scale here)")
        scales = dict(k_scale=float(b.options["k_scale"]), v_scale=float(b.options["v_scale"]))
    heads = (spec.num_q_heads, spec.num_kv_heads, spec.head_size, spec.block_size)
    try:  # planning (host work, a device copy of the plan) stays outside the timed region
        if decode:
            wrapper.plan(indptr, indices, last, *heads, pos_encoding_mode="NONE", **options)
        else:
            wrapper.plan(b.cu_seqlens_q, indptr, indices, last, *heads, causal=True, **options)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
        raise PeerUnavailable(f"flashinfer refused: {str(exc).splitlines()[0][:160]}") from exc

    def run(keep=(workspace, indptr, indices, last)):
        return wrapper.run(b.q, (b.k_cache, b.v_cache), **scales)
    _refused("flashinfer", run)
    return run, (f"flashinfer {library_version('flashinfer')}: {note}"
                 + (", fp8 cache with per-tensor k/v scales" if scales else "")
                 + f"; the kernels' cache in place, page size {spec.block_size}, NHD")


def queries_dtype_or_ocp_e4m3(batch) -> dict[str, Any]:
    """`_batch_checks`' entry for a library whose caches are the queries' dtype or OCP e4m3 (XQA,
    FlashAttention-3): an FNUZ cache's bytes would be read as another format."""
    import torch

    cache = batch.k_cache.dtype
    return {f"{cache} cache": cache not in (batch.q.dtype, torch.float8_e4m3fn)
            and "its caches are the queries' dtype or OCP e4m3"}


@register("flashinfer_xqa", "flashinfer XQA decode (TensorRT-LLM's, paged, block table)", "flashinfer",
          e4m3_products=True)
def _flashinfer_xqa(batch, device: str):
    """TensorRT-LLM's XQA decode as FlashInfer ships it (`xqa_batch_decode_with_kv_cache`): on
    sm_90 over an OCP e4m3 cache its Hopper kernel (wgmma, TMA, split sequences merged in the
    kernel), the decode serving engines built on TensorRT-LLM run; one query per sequence here."""
    import torch

    spec = batch.spec
    try:
        from flashinfer.decode import xqa_batch_decode_with_kv_cache
    except ImportError as exc:
        raise PeerUnavailable(f"flashinfer has no XQA decode here: {exc}") from exc
    b = batch
    _batch_checks(spec, "flashinfer XQA", {
        "prefill or multi-token decode": any(q != 1 for q in spec.query_lens)
        and "one query per sequence is what this peer times",
        "softcap": spec.softcap and "its kernel caps no logits",
        "sliding window": spec.sliding_window and "this peer passes none on",
        "sinks": spec.sinks and "this peer passes none on",
        **queries_dtype_or_ocp_e4m3(b),
        f"page size {spec.block_size}": spec.block_size not in XQA_PAGE_SIZES
        and f"pages of {XQA_PAGE_SIZES}",
        "strided caches": not (b.k_cache.is_contiguous() and b.v_cache.is_contiguous())
        and "it reads the NHD layout dense"})
    # zeros before its first use: the semaphores of its split sequences
    workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    seq_lens = b.seq_lens.to(torch.uint32)  # its kernel's type, made once as an engine keeps it
    k_scale, v_scale = ((float(b.options["k_scale"]), float(b.options["v_scale"])) if spec.fp8_kv
                        else (1.0, 1.0))
    score_scale, longest = b.options["scale"] * k_scale, max(spec.kv_lens)  # once, not per timed call

    def run():
        return xqa_batch_decode_with_kv_cache(
            b.q, (b.k_cache, b.v_cache), workspace, b.block_table, seq_lens, longest,
            bmm1_scale=score_scale, bmm2_scale=v_scale, kv_layout="NHD")
    _refused("flashinfer XQA", run)
    return run, (f"flashinfer {library_version('flashinfer')}: XQA decode"
                 + (", fp8 cache with per-tensor k/v scales, q and P rounded to e4m3" if spec.fp8_kv else "")
                 + f"; the kernels' cache in place, page size {spec.block_size}, NHD")


def e4m3_q_scale(q) -> float:
    """A static per-tensor scale that puts q within OCP e4m3's range: 1 (vLLM's default `q_scale`, the
    rounding one cast) where it fits, else the power of two that brings its largest value under
    e4m3's. Chosen once per batch, as an engine's calibrated scale is."""
    import torch

    top = torch.finfo(torch.float8_e4m3fn).max
    largest = float(q.abs().amax())
    return 1.0 if largest <= top else 2.0 ** math.ceil(math.log2(largest / top))


def flash_attn_3_build_lacks(spec) -> dict[str, Any]:
    """What the installed FlashAttention-3 was built without (`flash_attn_config.CONFIG`, which its
    setup.py writes from FLASH_ATTENTION_DISABLE_*) that `spec` needs: a build without a feature
    would run the batch without it (no softcap, no window), not refuse it. Nothing where the build
    wrote no config."""
    try:
        from flash_attn_config import CONFIG
        off = {k.removeprefix("FLASHATTENTION_DISABLE_"): bool(v) for k, v in CONFIG["build_flags"].items()}
    except (ImportError, KeyError, TypeError, AttributeError):
        return {}
    why = "this build has none"
    dims = [d for d in (64, 96, 128, 192, 256) if not off.get(f"HDIM{d}") and d >= spec.head_size]
    return {"softcap": spec.softcap and off.get("SOFTCAP") and why,
            "sliding window": spec.sliding_window and off.get("LOCAL") and why,
            "fp8 cache": spec.fp8_kv and off.get("FP8") and why,
            "fp16": spec.dtype == "float16" and not spec.fp8_kv and off.get("FP16") and why,
            f"head size {spec.head_size}": not dims and why}


def flash_attn_3_call(batch, device: str, num_splits: int = 0):
    """(call, round_q) for FlashAttention-3 on `batch`: `call(q)` runs `flash_attn_with_kvcache` on
    queries as `round_q(batch.q)` makes them (over an OCP e4m3 cache its kernels take q in e4m3 too:
    rounded with `e4m3_q_scale`, the scales passed on as its descales; else q itself). Its
    scheduler metadata is made here, once (an engine makes it once a step for all its layers);
    `num_splits` 0 is its own heuristic's choice. PeerUnavailable where it cannot run the batch."""
    import torch

    spec = batch.spec
    try:
        import flash_attn_interface as fa3
    except ImportError as exc:
        raise PeerUnavailable(f"flash_attn_3 does not import: {exc}") from exc
    b = batch
    cache = b.k_cache.dtype
    _batch_checks(spec, "FlashAttention-3", {
        "sinks": spec.sinks and "its kvcache entry takes no sink logits",
        **queries_dtype_or_ocp_e4m3(b), **flash_attn_3_build_lacks(spec)})
    per_head = (spec.num_seqs, spec.num_kv_heads)  # its descales' shape
    q_scale = e4m3_q_scale(b.q) if spec.fp8_kv else 1.0
    descales = {}
    if spec.fp8_kv:
        descales = dict(q_descale=torch.full(per_head, q_scale, dtype=torch.float32, device=device),
                        k_descale=b.options["k_scale"].float().expand(per_head),
                        v_descale=b.options["v_scale"].float().expand(per_head))
    longest_q, longest_kv = max(spec.query_lens), max(spec.kv_lens)
    shared = dict(cache_seqlens=b.seq_lens, page_table=b.block_table, cu_seqlens_q=b.cu_seqlens_q,
                  max_seqlen_q=longest_q, causal=True, window_size=_window(spec), softcap=spec.softcap or 0.0,
                  num_splits=num_splits)
    try:  # planning: host work and a small kernel, outside the timed region
        metadata = fa3.get_scheduler_metadata(
            spec.num_seqs, longest_q, longest_kv, spec.num_q_heads, spec.num_kv_heads, spec.head_size,
            b.seq_lens, qkv_dtype=cache if spec.fp8_kv else b.q.dtype, cu_seqlens_q=b.cu_seqlens_q,
            page_size=spec.block_size, causal=True, window_size=shared["window_size"],
            has_softcap=bool(spec.softcap), num_splits=num_splits)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
        raise PeerUnavailable(f"FlashAttention-3 refused: {str(exc).splitlines()[0][:160]}") from exc

    def round_q(q):
        if not spec.fp8_kv:
            return q
        return (q if q_scale == 1.0 else q * (1.0 / q_scale)).to(torch.float8_e4m3fn)

    def call(q):
        return fa3.flash_attn_with_kvcache(q, b.k_cache, b.v_cache, softmax_scale=b.options["scale"],
                                           scheduler_metadata=metadata, **shared, **descales)
    return call, round_q


@register("flash_attn_3", "FlashAttention-3 (paged, page table)", "flash_attn_interface", e4m3_products=True)
def _flash_attn_3(batch, device: str):
    """FlashAttention-3's Hopper kernels as a serving engine calls them (vLLM's FlashAttention
    backend): `flash_attn_with_kvcache` over the kernels' cache in place, the queries varlen
    (`cu_seqlens_q`), causal, its scheduler metadata made outside the timed call; over an e4m3
    cache each call rounds q to e4m3 first, as that backend does (`flash_attn_3_call`)."""
    call, round_q = flash_attn_3_call(batch, device)

    def run():
        return call(round_q(batch.q))
    _refused("FlashAttention-3", run)
    return run, (f"flash_attn_3 {library_version('flash_attn_interface')}: flash_attn_with_kvcache"
                 + (", fp8 cache with per-tensor k/v scales, q rounded to e4m3 in the call"
                    if batch.spec.fp8_kv else "")
                 + f"; the kernels' cache in place, page size {batch.spec.block_size}, NHD")


@register("vllm_unified", "vLLM Triton unified attention (paged, block table)", "vllm")
def _vllm_unified(batch, device: str):
    import torch

    from kernels.paged_attention.common import next_pow2

    spec = batch.spec
    errors = []
    for path in VLLM_UNIFIED_MODULES:
        try:
            module = importlib.import_module(path)
            unified_attention = module.unified_attention
            break
        except (ImportError, AttributeError) as exc:  # vllm present but broken, or moved again
            errors.append(f"{path}: {str(exc).splitlines()[0][:120]}")
    else:
        raise PeerUnavailable("vllm's Triton unified attention does not import: " + "; ".join(errors))
    _batch_checks(spec, "vllm", {})
    b = batch  # the same cache layout as kernels/ (vLLM's): read in place
    out = torch.empty_like(b.q)
    descale = (spec.num_seqs, spec.num_kv_heads)
    args = dict(q=b.q, k=b.k_cache, v=b.v_cache, out=out, cu_seqlens_q=b.cu_seqlens_q,
                max_seqlen_q=max(spec.query_lens), seqused_k=b.seq_lens, max_seqlen_k=max(spec.kv_lens),
                softmax_scale=b.options["scale"], causal=True, window_size=_window(spec),
                block_table=b.block_table, softcap=float(spec.softcap or 0.0), q_descale=None,
                k_descale=b.options["k_scale"].expand(descale) if spec.fp8_kv else None,
                v_descale=b.options["v_scale"].expand(descale) if spec.fp8_kv else None)
    params = inspect.signature(unified_attention).parameters
    if "seq_threshold_3D" in params:  # the split-KV decode path, set up as vLLM's backend does
        threshold = VLLM_MIN_LAUNCH_GRID_2D // spec.num_kv_heads
        partials = (threshold, spec.num_q_heads, VLLM_SOFTMAX_SEGMENTS)
        args.update(seq_threshold_3D=threshold, num_par_softmax_segments=VLLM_SOFTMAX_SEGMENTS,
                    softmax_segm_output=torch.empty(*partials, next_pow2(spec.head_size),
                                                    dtype=torch.float32, device=b.q.device),
                    softmax_segm_max=torch.empty(partials, dtype=torch.float32, device=b.q.device),
                    softmax_segm_expsum=torch.empty(partials, dtype=torch.float32, device=b.q.device))
    quant = ""
    if spec.fp8_kv and "kv_quant_mode" in params:  # vLLM >= 0.2x: the scales apply only when told
        mode = getattr(module, "KVQuantMode", None)
        args["kv_quant_mode"] = mode.FP8_PER_TENSOR if mode is not None else VLLM_FP8_PER_TENSOR
        quant = ", fp8 cache as kv_quant_mode FP8_PER_TENSOR"
    if spec.sinks:
        if "sinks" not in params:
            raise PeerUnavailable("this vllm's unified_attention has no sinks argument")
        args["sinks"] = b.options["sinks"]
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in args]
    if required:
        raise PeerUnavailable(f"this vllm's unified_attention also needs {', '.join(required)}")

    def run():
        unified_attention(**{k: v for k, v in args.items() if k in params})
        return out
    _refused("vllm", run)
    return run, f"vllm {library_version('vllm')}: the kernels' cache in place (vLLM's layout){quant}"


@register("aiter_varlen", "aiter varlen flash (dense, not paged)", "aiter")
def _aiter_varlen(batch, device: str):
    import torch

    spec = batch.spec
    try:
        import aiter
    except ImportError as exc:
        raise PeerUnavailable(f"aiter does not import: {exc}") from exc
    _batch_checks(spec, "aiter", {"fp8 KV cache": spec.fp8_kv, "sinks": spec.sinks, "softcap": spec.softcap})
    b = batch
    hkv, d = spec.num_kv_heads, spec.head_size

    def dense(cache):  # each sequence's blocks gathered into one contiguous [total_k, Hkv, D]
        return torch.cat([cache[b.block_table[i, :n].long()].reshape(-1, hkv, d)[:kv]
                          for i, (n, kv) in enumerate(zip(spec.blocks_per_seq(), spec.kv_lens))])
    k, v = dense(b.k_cache), dense(b.v_cache)
    cu_k = _cu(spec.kv_lens, device)

    def run():
        out = aiter.flash_attn_varlen_func(b.q, k, v, b.cu_seqlens_q, cu_k, max(spec.query_lens),
                                           max(spec.kv_lens), softmax_scale=b.options["scale"], causal=True,
                                           window_size=_window(spec))
        return out[0] if isinstance(out, tuple) else out  # some aiter versions add the softmax LSE
    _refused("aiter", run)
    return run, "dense varlen copies of the paged cache"
