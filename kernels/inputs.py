"""Input checks and feature detection shared by every variant's entry point, and the fp8
KV-cache formats (`FP8_FORMATS`: OCP and FNUZ e4m3) with the choice of one per architecture.

Bad input ends in a `ValueError` naming the argument, raised before any launch. Checks of
shapes, dtypes, strides, devices and host scalars read no device memory and always run;
`kernels.variant` keeps the `layout_key`s that passed them, so a serving loop pays for them
once. Checks of metadata *values* (cu_seqlens_q, seq_lens, block ids) read device memory, a
host sync a serving loop cannot afford on every call, so they run only when asked: the
per-call hint `check_values=True`, or `PAGED_ATTENTION_CHECK_VALUES=1` in the environment
(the test session sets it). They never run while a CUDA/HIP graph is being captured.
"""

from __future__ import annotations

import itertools
import math
import numbers
import os
from dataclasses import dataclass

import torch

CHECK_VALUES_ENV = "PAGED_ATTENTION_CHECK_VALUES"  # "1": check metadata values on every call
VENDORS = ("nvidia", "amd")  # vendors the planners can plan for (the `vendor` hint)

FEATURES = (
    "sliding_window",  # keys more than window-1 positions back are masked
    "softcap",  # tanh soft-capping of scores (Gemma 2)
    "sinks",  # one extra softmax logit per query head (gpt-oss)
    "fp8_kv",  # fp8 KV cache (a format of FP8_FORMATS) with per-tensor k_scale / v_scale
    "head_size_non_pow2",  # e.g. 80, 96: padded to the next power of two
    "block_size_non_pow2",  # e.g. 544 (hybrid attention/SSM models)
)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ------------------------------------------------------------------ fp8 KV-cache formats
# The one place that knows them: validation, the batch builder, the planners and the
# reference ask here (`is_fp8`, `FP8_FORMATS`), never compare against one dtype.


@dataclass(frozen=True)
class Fp8Format:
    """An e4m3 KV-cache format: 1 sign, 4 exponent and 3 mantissa bits; they differ in the rest."""

    name: str  # how docs and reports name it
    max: float  # largest finite value: per-tensor scales are amax / max (as vLLM computes them)
    triton: str  # Triton's name for it (the pointer type a kernel is compiled for)
    # Vendors whose Triton backend converts it (triton 3.6.0: nvidia/compiler.py
    # CUDAOptions.supported_fp8_dtypes has fp8e4nv from sm_89, never fp8e4b8; amd/compiler.py
    # HIPOptions has both, native where the GPU has it, emulated elsewhere). On the others
    # the kernels decode its bytes themselves (`common.decode_fnuz_e4m3`).
    triton_vendors: tuple[str, ...]
    nan_byte: int  # a NaN of the format as a byte (what the correctness grid poisons unowned slots with)


OCP_E4M3, FNUZ_E4M3 = torch.float8_e4m3fn, torch.float8_e4m3fnuz
FP8_FORMATS = {
    # OCP e4m3 ("OFP8", Open Compute Project 8-bit floating point spec, 2023): bias 7,
    # S.1111.111 is NaN, -0 exists. What NVIDIA (sm_89+) and AMD from CDNA4 (gfx950) convert
    # natively, and what vLLM uses on H100.
    OCP_E4M3: Fp8Format("OCP e4m3", 448.0, "fp8e4nv", ("nvidia", "amd"), 0x7F),
    # FNUZ e4m3 (finite, NaN, unsigned zero): bias 8, so a byte means half its OCP value;
    # no negative zero, 0x80 is the only NaN, 0x7F is 240 (OCP: NaN). The native format of
    # MI300 (CDNA3, gfx942), and what vLLM uses there.
    FNUZ_E4M3: Fp8Format("FNUZ e4m3", 240.0, "fp8e4b8", ("amd",), 0x80),
}
# Architectures whose native fp8 is FNUZ: CDNA3. AMD HIP docs, "FP8 Numbers" (ROCm 6.2,
# rocm.docs.amd.com/projects/HIP/en/docs-6.2.0/reference/fp8_numbers.html): gfx940/gfx941/gfx942
# support FNUZ FP8 and not OCP FP8. CDNA4 (gfx950, MI350) and RDNA4 convert OCP natively
# (triton 3.6.0 amd/compiler.py: "native support for OCP fp8 variants since CDNA4/RDNA4";
# "UZ fp8 variants ... natively supported for CDNA3").
FNUZ_ARCHS = frozenset({"gfx940", "gfx941", "gfx942"})


def is_fp8(dtype: torch.dtype) -> bool:
    """Whether a cache of this dtype is an fp8 format the kernels read (with k/v scales)."""
    return dtype in FP8_FORMATS


def fp8_dtype_for(arch: str) -> torch.dtype:
    """The fp8 KV-cache format native to `arch` ("gfx942", "sm_90", "interpreter", ...):
    FNUZ on CDNA3 (MI300), OCP everywhere else. What the batch builder stores a scenario's
    fp8 cache in, for this device or for the target the static gate plans as if on."""
    return FNUZ_E4M3 if arch in FNUZ_ARCHS else OCP_E4M3


def fp8_decoded_in_kernel(dtype: torch.dtype, vendor: str) -> bool:
    """An fp8 cache that `vendor`'s Triton cannot convert (FNUZ on NVIDIA): the kernels then
    read its bytes and decode them exactly in software instead of converting natively."""
    return is_fp8(dtype) and vendor not in FP8_FORMATS[dtype].triton_vendors


def check_values_enabled() -> bool:
    """Whether the environment asks for value checks on calls that do not say."""
    return os.environ.get(CHECK_VALUES_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def is_empty(q, block_table) -> bool:
    """No tokens or no sequences: nothing to compute, nothing to launch."""
    return q.shape[0] == 0 or block_table.shape[0] == 0


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def required_features(q, k_cache, *, sliding_window=None, softcap=None, sinks=None,
                      k_scale=None, v_scale=None, **_) -> set[str]:
    """The features a call needs; a variant lacking one raises NotImplementedError."""
    needed = set()
    if sliding_window is not None and sliding_window > 0:
        needed.add("sliding_window")
    if softcap is not None and softcap > 0:
        needed.add("softcap")
    if sinks is not None:
        needed.add("sinks")
    if is_fp8(k_cache.dtype):
        needed.add("fp8_kv")
    if not _is_pow2(q.shape[-1]):
        needed.add("head_size_non_pow2")
    if not _is_pow2(k_cache.shape[1]):
        needed.add("block_size_non_pow2")
    return needed


def _require(cond: bool, arg: str, msg) -> None:
    """Raise ValueError("arg: msg") unless `cond`. `msg` may be a function that builds it:
    validation runs on every call's host path, and formatting a message only to drop it cost
    most of that path's time."""
    if not cond:
        raise ValueError(f"{arg}: {msg() if callable(msg) else msg}")


def _host_number(value, arg: str) -> float:
    # A tensor here would be read with a host sync on every call: the contract is a number.
    _require(isinstance(value, numbers.Real) and not isinstance(value, bool), arg,
             lambda: f"must be a host number (int or float), got {type(value).__name__}")
    return float(value)


def validate_target(vendor=None, num_sms=None) -> None:
    """The planning hints `vendor` and `num_sms`, when given."""
    if vendor is not None:
        _require(vendor in VENDORS, "vendor", lambda: f"unknown {vendor!r}; expected one of {VENDORS}")
    if num_sms is not None:
        _require(isinstance(num_sms, numbers.Integral) and not isinstance(num_sms, bool)
                 and num_sms > 0, "num_sms", lambda: f"must be a positive int, got {num_sms!r}")


def layout_key(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out=None,
               **options) -> int | None:
    """A number naming everything about a call but its tensors' values: each tensor's shape,
    strides, dtype and device, each host option's type and value. `validate` and the planners
    read nothing else, so calls with equal keys pass the same checks and plan the same
    launches (with their own tensors): they keep their results under it instead of redoing
    them on every call of a serving loop. A number, so that those caches hash an int, not
    the whole description; never reused for another description. None when an option is
    unhashable (a list for a number): callers then run the checks, which name it."""
    # options in the caller's order (a serving loop passes them alike every call; another order
    # is only another key), an absent one as None itself: with a call's 6 options, mostly
    # absent, the key 23 -> 17 us (CPU development machine, 2026-11-23); the six tensors' fields
    # read in one tuple, not one per tensor: 6.3-6.5 -> 5.5 us (same machine, 2026-11-24)
    try:
        tensors = (q.shape, q.stride(), q.dtype, q.device, k_cache.shape, k_cache.stride(),
                   k_cache.dtype, k_cache.device, v_cache.shape, v_cache.stride(), v_cache.dtype,
                   v_cache.device, block_table.shape, block_table.stride(), block_table.dtype,
                   block_table.device, cu_seqlens_q.shape, cu_seqlens_q.stride(), cu_seqlens_q.dtype,
                   cu_seqlens_q.device, seq_lens.shape, seq_lens.stride(), seq_lens.dtype, seq_lens.device)
    except (AttributeError, TypeError):  # not all tensors: described by value, `validate` names them
        tensors = (_meta(q), _meta(k_cache), _meta(v_cache), _meta(block_table), _meta(cu_seqlens_q),
                   _meta(seq_lens))
    layout = (tensors, None if out is None else _meta(out),
              tuple([(name, None if v is None else _meta(v)) for name, v in options.items()]))
    try:
        key = _LAYOUTS.get(layout)
    except TypeError:
        return None
    if key is None:
        key = keep(_LAYOUTS, layout, next(_NEXT_KEY))
    return key


def keep(cache: dict, key, value):
    """`cache[key] = value`, emptying the cache first when it holds KEPT_PER_CACHE entries
    (a serving engine needs a handful; sweeps and test grids many). Every cache kept under
    layout keys fills this way. Returns `value`."""
    if len(cache) >= KEPT_PER_CACHE:
        cache.clear()
    cache[key] = value
    return value


KEPT_PER_CACHE = 4096  # unmeasured bound: entries are small, a few hundred bytes each
# The descriptions seen and their keys: a description seen again after the cache was
# emptied gets a new key, so a key never names two descriptions.
_LAYOUTS: dict[tuple, int] = {}
_NEXT_KEY = itertools.count()


def _meta(value) -> tuple:
    if isinstance(value, torch.Tensor):
        return value.shape, value.stride(), value.dtype, value.device
    return type(value), value  # the type too: True == 1, but only one is a valid softcap


def validate(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, scale=None,
             sliding_window=None, softcap=None, sinks=None, k_scale=None, v_scale=None,
             out=None) -> None:
    """Raise ValueError naming the first bad argument; launches nothing, reads no values."""
    _require(q.dim() == 3, "q",
             lambda: f"expected [num_tokens, num_q_heads, head_size], got {tuple(q.shape)}")
    _require(q.dtype in _FLOAT_DTYPES, "q", lambda: f"dtype {q.dtype} is not float16/bfloat16/float32")
    _require(k_cache.dim() == 4, "k_cache",
             lambda: "expected [num_blocks, block_size, num_kv_heads, head_size], got "
             f"{tuple(k_cache.shape)}")
    _require(v_cache.shape == k_cache.shape, "v_cache",
             lambda: f"shape {tuple(v_cache.shape)} differs from k_cache {tuple(k_cache.shape)}")
    _require(v_cache.dtype == k_cache.dtype, "v_cache",
             lambda: f"dtype {v_cache.dtype} != k_cache {k_cache.dtype}")
    _require(k_cache.dtype == q.dtype or is_fp8(k_cache.dtype), "k_cache",
             lambda: f"dtype {k_cache.dtype} must equal q's ({q.dtype}) or be an fp8 format: "
             + ", ".join(str(d) for d in FP8_FORMATS))
    _require(k_cache.shape[3] == q.shape[2], "k_cache",
             lambda: f"head_size {k_cache.shape[3]} differs from q's {q.shape[2]}")
    _require(k_cache.shape[1] > 0 and k_cache.shape[3] > 0, "k_cache",
             lambda: f"block_size and head_size must be > 0, got {tuple(k_cache.shape)}")
    _require(k_cache.shape[2] > 0 and q.shape[1] % k_cache.shape[2] == 0, "q",
             lambda: f"num_q_heads {q.shape[1]} is not a multiple of num_kv_heads {k_cache.shape[2]}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _require(t.stride(-1) == 1, name, "head dimension must be contiguous (stride 1)")
    _require(block_table.dim() == 2 and block_table.dtype == torch.int32, "block_table",
             lambda: f"expected 2-D int32, got {block_table.dim()}-D {block_table.dtype}")
    num_seqs = block_table.shape[0]
    _require(seq_lens.dim() == 1 and seq_lens.dtype == torch.int32 and seq_lens.numel() == num_seqs,
             "seq_lens", lambda: f"expected int32 [{num_seqs}], got {seq_lens.dtype} {tuple(seq_lens.shape)}")
    _require(cu_seqlens_q.dim() == 1 and cu_seqlens_q.dtype == torch.int32
             and cu_seqlens_q.numel() == num_seqs + 1, "cu_seqlens_q",
             lambda: f"expected int32 [{num_seqs + 1}], got {cu_seqlens_q.dtype} {tuple(cu_seqlens_q.shape)}")
    # The kernels index these by position alone (no stride argument): a strided view would
    # be read as if it were packed.
    for name, t in (("block_table", block_table), ("seq_lens", seq_lens), ("cu_seqlens_q", cu_seqlens_q)):
        _require(t.shape[-1] <= 1 or t.stride(-1) == 1, name,
                 lambda t=t: f"last dimension must be contiguous (stride 1), got strides {t.stride()}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("block_table", block_table),
                    ("cu_seqlens_q", cu_seqlens_q), ("seq_lens", seq_lens)):
        _require(t.device == q.device, name, lambda t=t: f"on {t.device}, q on {q.device}")
    if is_fp8(k_cache.dtype):
        for name, t in (("k_scale", k_scale), ("v_scale", v_scale)):
            _require(isinstance(t, torch.Tensor) and t.numel() == 1, name,
                     lambda t=t: f"fp8 caches ({k_cache.dtype}) need a one-element scale tensor, got "
                     + (f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__))
            _require(t.is_floating_point() and t.device == q.device, name,
                     lambda t=t: f"expected a floating-point tensor on {q.device}, got {t.dtype} on "
                     f"{t.device}")
    if sinks is not None:
        _require(sinks.shape == (q.shape[1],), "sinks",
                 lambda: f"expected [{q.shape[1]}], got {tuple(sinks.shape)}")
    if out is not None:
        _require(out.shape == q.shape and out.dtype == q.dtype, "out",
                 lambda: f"expected {tuple(q.shape)} {q.dtype}, got {tuple(out.shape)} {out.dtype}")
        _require(out.stride(-1) == 1, "out", "head dimension must be contiguous (stride 1)")
    if scale is not None:
        s = _host_number(scale, "scale")
        _require(math.isfinite(s) and s > 0, "scale", lambda: f"must be finite and > 0, got {s}")
    if softcap is not None:
        c = _host_number(softcap, "softcap")
        _require(math.isfinite(c) and c >= 0, "softcap", lambda: f"must be finite and >= 0 (0: off), got {c}")
    if sliding_window is not None:
        _require(sliding_window >= 0, "sliding_window", lambda: f"must be >= 0, got {sliding_window}")


def check_values_if_asked(check_values: bool | None, q, k_cache, block_table, cu_seqlens_q,
                          seq_lens) -> None:
    """`validate_values` when asked: `check_values`, or (None) the environment switch
    CHECK_VALUES_ENV; never during graph capture, where reading device memory is illegal."""
    if check_values is None:
        check_values = check_values_enabled()
    if check_values and not (q.is_cuda and torch.cuda.is_current_stream_capturing()):
        validate_values(q, k_cache, block_table, cu_seqlens_q, seq_lens)


def validate_values(q, k_cache, block_table, cu_seqlens_q, seq_lens) -> None:
    """The checks that read metadata values: computed on the device, one host sync."""
    num_tokens = q.shape[0]
    num_blocks, block_size = k_cache.shape[0], k_cache.shape[1]
    width = block_table.shape[1]
    capacity = width * block_size
    cu, lens = cu_seqlens_q.long(), seq_lens.long()
    q_lens = cu[1:] - cu[:-1]
    used = (lens.clamp(0, capacity) + block_size - 1) // block_size  # blocks each sequence reads
    in_use = torch.arange(width, device=block_table.device)[None, :] < used[:, None]
    bad_ids = in_use & ((block_table < 0) | (block_table >= num_blocks))
    flags = torch.stack([
        (cu[0] != 0) | (cu[-1] != num_tokens), (q_lens < 0).any(), (lens < q_lens).any(),
        (lens > capacity).any(), bad_ids.any(),
    ]).tolist()
    if not any(flags):
        return
    # Failing: reading more to name the culprit costs nothing that matters now.
    bounds, decreasing, too_short, too_long, bad_block = flags
    if bounds:
        raise ValueError(f"cu_seqlens_q: must start at 0 and end at num_tokens={num_tokens}, "
                         f"got {int(cu[0])}..{int(cu[-1])}")
    if decreasing:
        raise ValueError(f"cu_seqlens_q: decreases at sequence {_first(q_lens < 0)}")
    if too_short:
        i = _first(lens < q_lens)
        raise ValueError(f"seq_lens: sequence {i} has seq_len {int(lens[i])} shorter than its "
                         f"query length {int(q_lens[i])}")
    if too_long:
        i = _first(lens > capacity)
        raise ValueError(f"block_table: sequence {i} needs {int(lens[i])} positions but the table "
                         f"holds {width} blocks of {block_size} = {capacity}")
    if bad_block:
        i, j = (int(x) for x in bad_ids.nonzero()[0])
        raise ValueError(f"block_table: sequence {i}, logical block {j} holds block id "
                         f"{int(block_table[i, j])} outside [0, {num_blocks}) (the cache's blocks)")


def _first(mask: torch.Tensor) -> int:
    return int(mask.nonzero()[0, 0])
