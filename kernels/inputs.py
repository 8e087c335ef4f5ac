"""Input checks and feature detection shared by every variant's entry point, and the fp8
KV-cache formats (`FP8_FORMATS`: OCP and FNUZ e4m3) with the choice of one per architecture.

Bad input ends, before any launch, in an exception whose message starts with the name of
the argument ("sliding_window: ..."): `ArgumentTypeError` (a `TypeError` and a
`ValueError`) for a wrong type (a list for a tensor, a float for an int, a bool for a
number), `ValueError` for a wrong value (shape, dtype, device, stride, range, a scale with
a 16-bit cache), `TypeError` for a keyword the variant does not take, and
`NotImplementedError` ("variant 'naive' does not support softcap") for a feature the
variant lacks. Checks of types, shapes, dtypes, strides, devices and host scalars read no
device memory and always run; `kernels.variant` keeps the `layout_key`s that passed them,
so a serving loop pays for them once (the hints that change every step, `max_seqlen_q`,
`max_seqlen_k`, `check_values`, are checked on every call: a type test each).

Checks of metadata *values* (cu_seqlens_q, seq_lens, block ids) read device memory, a host
sync a serving loop cannot afford on every call, so they run only when asked: the per-call
hint `check_values=True`, or `PAGED_ATTENTION_CHECK_VALUES=1` in the environment (the test
session sets it). They never run while a CUDA/HIP graph is being captured. Without them,
nothing on the host can see a block id outside the cache, a `seq_lens` entry longer than
the block table holds or shorter than its queries, or `cu_seqlens_q` that does not start
at 0, end at num_tokens or rise: the kernels then bound every read and write by the shapes
(`kernels.paged_attention.common.shape_bounds`): query ranges clamped into q's rows, rows of
zeros for a sequence its block-table row cannot hold, a block id outside the cache read
clamped into it. The value
checks also refuse a NaN or +inf sink and a scale that is not finite and > 0; nothing sees a
`max_seqlen_*` hint below the batch's true lengths (the hints only steer the heuristics: a
wrong one costs speed, never correctness). `out` must be apart from every input's memory
(`check_out_apart`: pointers and byte ranges, every call, no device read).

Conventions (vLLM's): `sliding_window=None` is no window; a window is a positive int W
(keys less than W positions back are seen), 0 and negatives are refused (vLLM's attention
layers pass None, never 0). `softcap=None` or `0` is no soft-capping (vLLM's backends map
`logits_soft_cap=None` to 0 and treat 0 as off). `k_scale`/`v_scale` belong to fp8 caches
only: given with a 16-bit cache they are refused instead of ignored (a scale the caller
believes applied would silently not be).
"""

from __future__ import annotations

import itertools
import numbers
import os
from dataclasses import dataclass

import numpy as np
import torch

from kernels import platform
from kernels.platform import interpreter_active

CHECK_VALUES_ENV = "PAGED_ATTENTION_CHECK_VALUES"  # "1": check metadata values on every call
# Vendors the planners can plan for (the `vendor` hint): the GPU vendors kernels/platform.py
# detects, each with its decision tree in paged_attention/heuristics.py. perf/vendor.py's records
# name these (tests/stages/test_vendor.py keeps them in agreement).
VENDORS = tuple(v for v in platform.VENDORS if v != "cpu")

FEATURES = (
    "sliding_window",  # keys more than window-1 positions back are masked
    "softcap",  # tanh soft-capping of scores (Gemma 2)
    "sinks",  # one extra softmax logit per query head (gpt-oss)
    "fp8_kv",  # fp8 KV cache (a format of FP8_FORMATS) with per-tensor k_scale / v_scale
    "head_size_non_pow2",  # e.g. 80, 96: padded to the next power of two
    "block_size_non_pow2",  # e.g. 544 (hybrid attention/SSM models)
    # Below tl.dot's minimum reduction dimension, 16 on NVIDIA (triton 3.6.0
    # backends/nvidia/compiler.py min_dot_size; compiling for sm_90 from a CPU failed with "Input
    # shapes should have M >= 1, N >= 1 and K >= 16", 2026-11-24):
    "head_size_below_16",  # padded head size below 16 (head sizes up to 8): Q K^T's K
    "block_size_below_16",  # cache blocks of fewer than 16 positions: qblock's P V (tile = block)
)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# What the kernels take their host floats as: scale and softcap must be normal float32 numbers.
_F32_MIN, _F32_MAX = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max
_INT32_MAX = 2**31 - 1  # the kernels take sliding_window as an int32 argument
# The kernels' tanh, cap * (1 - 2 / (exp(2 s / cap) + 1)) in float32 (`common.apply_softcap`,
# as vLLM's kernel computes it), loses about cap * 1.5e-7 of a score to cancellation once s / cap
# is small: max error over |s| <= 30, NumPy float32 against float64 tanh (2026-11-24): 1.5e-4 at
# cap 1000, 1.5e-3 at 1e4, 0.13 at 1e6, the whole score at 2**31 (every score 0). Models cap at
# 30-50 (Gemma 2); larger caps are refused rather than computed wrong.
SOFTCAP_MAX = 1000.0
CONTRACT_OPTIONS = frozenset({"scale", "sliding_window", "softcap", "sinks", "k_scale", "v_scale"})


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type. A TypeError, as Python's convention has it, and a
    ValueError, so that callers catching the ValueError every bad input raised before
    (`except ValueError`) still catch it. Its message starts with the argument's name."""


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


# What the switch may say (case and surrounding blanks aside); anything else is refused, not off.
_SWITCH_ON, _SWITCH_OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


_SWITCH_READ: dict[str, bool] = {}  # the switch's raw values seen, read (every call reads it)


def check_values_enabled() -> bool:
    """Whether the environment asks for value checks on calls that do not say; a value that is
    neither on nor off is refused (a typo must not silently mean off)."""
    raw = os.environ.get(CHECK_VALUES_ENV, "")
    known = _SWITCH_READ.get(raw)
    if known is not None:
        return known
    value = raw.strip().lower()
    if value not in _SWITCH_ON and value not in _SWITCH_OFF:
        raise ValueError(f"{CHECK_VALUES_ENV}: unknown value {raw!r}; expected one of 1, true, yes, on "
                         "(check metadata values) or empty, 0, false, no, off (do not)")
    return keep(_SWITCH_READ, raw, value in _SWITCH_ON)


def is_empty(q, block_table) -> bool:
    """No tokens or no sequences: nothing to compute, nothing to launch."""
    return q.shape[0] == 0 or block_table.shape[0] == 0


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def required_features(q, k_cache, *, sliding_window=None, softcap=None, sinks=None,
                      k_scale=None, v_scale=None, **_) -> set[str]:
    """The features a call needs; a variant lacking one raises NotImplementedError."""
    needed = set()
    if sliding_window is not None:
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
    if q.shape[-1] <= 8:
        needed.add("head_size_below_16")
    if k_cache.shape[1] < 16:
        needed.add("block_size_below_16")
    return needed


def _require(cond: bool, arg: str, msg) -> None:
    """Raise ValueError("arg: msg") unless `cond`. `msg` may be a function that builds it:
    validation runs on every call's host path, and formatting a message only to drop it cost
    most of that path's time."""
    if not cond:
        raise ValueError(f"{arg}: {msg() if callable(msg) else msg}")


def _require_type(cond: bool, arg: str, msg) -> None:
    """`_require` for a wrong type: raises ArgumentTypeError."""
    if not cond:
        raise ArgumentTypeError(f"{arg}: {msg() if callable(msg) else msg}")


def _is_int(value) -> bool:
    """A host integer (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _host_number(value, arg: str) -> float:
    # A tensor here would be read with a host sync on every call: the contract is a number.
    _require_type(isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)), arg,
                  lambda: f"must be a host number (int or float), got {type(value).__name__}")
    return float(value)


def _tensor(value, arg: str) -> None:
    _require_type(isinstance(value, torch.Tensor), arg,
                  lambda: f"expected a torch.Tensor, got {type(value).__name__}")


def validate_hints(vendor=None, num_sms=None, max_seqlen_q=None, max_seqlen_k=None,
                   check_values=None) -> None:
    """The host hints, when given: `vendor` one of VENDORS, `num_sms` a positive int,
    `max_seqlen_q` / `max_seqlen_k` ints >= 0, `check_values` a bool."""
    validate_target(vendor, num_sms)
    validate_step_hints(max_seqlen_q, max_seqlen_k, check_values)


def validate_step_hints(max_seqlen_q=None, max_seqlen_k=None, check_values=None) -> None:
    """The hints a serving loop may change on every call (checked on every call: type tests)."""
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if value is not None:
            _require_type(_is_int(value), name,
                          lambda value=value: f"must be a host int (None: bounds from shapes), got "
                          f"{type(value).__name__}")
            _require(value >= 0, name, lambda value=value: f"must be >= 0, got {value}")
    if check_values is not None:
        _require_type(isinstance(check_values, bool), "check_values",
                      lambda: f"must be True, False or None (the environment switch), got "
                      f"{type(check_values).__name__}")


def validate_target(vendor=None, num_sms=None) -> None:
    """The planning hints `vendor` and `num_sms`, when given."""
    if vendor is not None:
        _require_type(isinstance(vendor, str), "vendor",
                      lambda: f"must be a str, one of {VENDORS}, got {type(vendor).__name__}")
        _require(vendor in VENDORS, "vendor", lambda: f"unknown {vendor!r}; expected one of {VENDORS}")
    if num_sms is not None:
        _require_type(_is_int(num_sms), "num_sms", lambda: f"must be a positive int, got {num_sms!r}")
        _require(num_sms > 0, "num_sms", lambda: f"must be a positive int, got {num_sms!r}")


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
    """Raise, naming the first bad argument (see the module's docstring); launches nothing,
    reads no values."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_table", block_table),
                    ("cu_seqlens_q", cu_seqlens_q), ("seq_lens", seq_lens)):
        _tensor(t, name)
    for name, t in (("sinks", sinks), ("k_scale", k_scale), ("v_scale", v_scale), ("out", out)):
        if t is not None:
            _tensor(t, name)
    _require(q.dim() == 3, "q",
             lambda: f"expected [num_tokens, num_q_heads, head_size], got {tuple(q.shape)}")
    _require(q.dtype in _FLOAT_DTYPES, "q", lambda: f"dtype {q.dtype} is not float16/bfloat16/float32")
    _require(q.shape[1] > 0 and q.shape[2] > 0, "q",
             lambda: f"num_q_heads and head_size must be > 0, got {tuple(q.shape)}")
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
    _require(k_cache.shape[1] > 0 and k_cache.shape[2] > 0, "k_cache",
             lambda: f"block_size and num_kv_heads must be > 0, got {tuple(k_cache.shape)}")
    # the kernels read a block id outside the cache as its last block (`common.cache_block`)
    _require(k_cache.shape[0] > 0, "k_cache", lambda: f"no blocks, got {tuple(k_cache.shape)}")
    _require(q.shape[1] % k_cache.shape[2] == 0, "q",
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
            _require(t is not None, name,
                     lambda: f"fp8 caches ({k_cache.dtype}) need a one-element scale tensor, got NoneType")
            _require(t.numel() == 1, name,
                     lambda t=t: f"fp8 caches ({k_cache.dtype}) need a one-element scale tensor, got "
                     f"shape {tuple(t.shape)}")
            _require(t.dtype == torch.float32 and t.device == q.device, name,
                     lambda t=t: f"expected a float32 tensor on {q.device}, got {t.dtype} on {t.device}")
    else:
        for name, t in (("k_scale", k_scale), ("v_scale", v_scale)):
            _require(t is None, name,
                     lambda: f"only fp8 caches take scales; this cache is {k_cache.dtype} (pass None: "
                     "a scale here would be ignored)")
    if sinks is not None:
        _require(sinks.shape == (q.shape[1],), "sinks",
                 lambda: f"expected [{q.shape[1]}], got {tuple(sinks.shape)}")
        _require(sinks.dtype in _FLOAT_DTYPES, "sinks",
                 lambda: f"expected float16, bfloat16 or float32, got {sinks.dtype}")
        _require(sinks.numel() <= 1 or sinks.stride(0) == 1, "sinks",  # read by position alone
                 lambda: f"must be contiguous (stride 1), got strides {sinks.stride()}")
        _require(sinks.device == q.device, "sinks", lambda: f"on {sinks.device}, q on {q.device}")
    if out is not None:
        _require(out.shape == q.shape and out.dtype == q.dtype, "out",
                 lambda: f"expected {tuple(q.shape)} {q.dtype}, got {tuple(out.shape)} {out.dtype}")
        _require(out.stride(-1) == 1, "out", "head dimension must be contiguous (stride 1)")
        _require(out.device == q.device, "out", lambda: f"on {out.device}, q on {q.device}")
        _require(not _self_overlapping(out), "out",
                 lambda: f"its elements overlap each other (strides {out.stride()}, e.g. an expanded view): "
                 "the rows of one query would overwrite another's")
    if scale is not None:
        s = _host_number(scale, "scale")
        _require(_F32_MIN <= s <= _F32_MAX, "scale",
                 lambda: f"must be finite and > 0 (a normal float32), got {s}")
    if softcap is not None:
        c = _host_number(softcap, "softcap")
        _require(c == 0 or _F32_MIN <= c <= SOFTCAP_MAX, "softcap",
                 lambda: f"must be 0 (off) or in [{_F32_MIN:.4g}, {SOFTCAP_MAX:g}], got {c}")
    if sliding_window is not None:
        _require_type(_is_int(sliding_window), "sliding_window",
                      lambda: f"must be an int (None: no window), got {type(sliding_window).__name__}")
        _require(1 <= sliding_window <= _INT32_MAX, "sliding_window",
                 lambda: f"must be in [1, 2**31 - 1] (None: no window), got {sliding_window}")


def _self_overlapping(t: torch.Tensor) -> bool:
    """Whether two indices of `t` name one element (a stride of 0, or strides that interleave):
    its dimensions of more than one element, by stride, each past the reach of those before."""
    reach = 0  # the largest offset the dimensions so far address
    for stride, n in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if stride <= reach:
            return True
        reach += stride * (n - 1)
    return False


def _extent(t: torch.Tensor | None) -> int:
    """Bytes from `t`'s first element to the end of its last (strides are >= 0 in torch)."""
    if t is None or t.numel() == 0:
        return 0
    return (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()


# Per layout key (`check_out_apart`; `keep` fills it): out's byte extent and, for each input of
# some extent, (its position among the call's tensors or its option name, its name, its extent).
_EXTENTS: dict[int, tuple] = {}
_POSITIONAL = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens")
_OPTIONAL_TENSORS = ("sinks", "k_scale", "v_scale")


def check_out_apart(out, args: tuple, options: dict, layout: int | None = None) -> None:
    """out: refused when its memory overlaps an input's (q, the caches, the metadata: `args` in
    the call's order; sinks and scales among `options`): the kernels write rows of out while
    other programs still read the inputs, so an aliased out corrupts them mid-call. Compares
    data pointers and byte ranges, no device read; the extents are shapes and strides, kept per
    `layout` (`layout_key`), so a call pays for its pointers only (about 1 us, CPU, 2026-11-29).
    A range test: views that interleave without sharing an element are refused too."""
    extents = _EXTENTS.get(layout) if layout is not None else None
    if extents is None:
        inputs = [(i, name, _extent(t)) for i, (name, t) in enumerate(zip(_POSITIONAL, args))]
        inputs += [(name, name, _extent(options.get(name))) for name in _OPTIONAL_TENSORS]
        # no memory to overlap on the meta device (planning meta tensors)
        size = 0 if out.device.type == "meta" else _extent(out)
        extents = (size, tuple(entry for entry in inputs if entry[2]))
        if layout is not None:
            keep(_EXTENTS, layout, extents)
    size, inputs = extents
    if not size:
        return
    lo = out.data_ptr()
    hi = lo + size
    for key, name, extent in inputs:
        start = (args[key] if key.__class__ is int else options[key]).data_ptr()
        if start < hi and lo < start + extent:
            raise ValueError(f"out: overlaps {name}'s memory (bytes {start:#x}..{start + extent:#x} "
                             f"against out's {lo:#x}..{hi:#x}); pass an output tensor of its own")


def check_launchable(out) -> None:
    """The call's tensors (all on q's device, which `out` shares) are where a Triton launch can
    read them: a GPU, or the CPU under Triton's interpreter. Planning alone takes any device
    (the static gate plans CPU tensors for GPU targets), so `KernelLaunch` asks this before it
    launches through Triton's JIT (the compiled fast path holds only plans of GPU tensors)."""
    if not out.is_cuda and not (out.device.type == "cpu" and interpreter_active()):
        raise ValueError(f"q: on {out.device}; the kernels run on a CUDA/ROCm GPU, or on the CPU "
                         "under Triton's interpreter (TRITON_INTERPRET=1)")


def check_values_if_asked(check_values: bool | None, q, k_cache, v_cache, block_table, cu_seqlens_q,
                          seq_lens, options: dict | None = None) -> None:
    """`validate_values` when asked: `check_values`, or (None) the environment switch
    CHECK_VALUES_ENV; never during graph capture, where reading device memory is illegal.
    `options`: the call's, whose sinks and scales are checked too."""
    if check_values is None:
        check_values = check_values_enabled()
    if check_values and not (q.is_cuda and torch.cuda.is_current_stream_capturing()):
        optional = {name: (options or {}).get(name) for name in _OPTIONAL_TENSORS}
        validate_values(q, k_cache, block_table, cu_seqlens_q, seq_lens, **optional)


def validate_values(q, k_cache, block_table, cu_seqlens_q, seq_lens, *, sinks=None, k_scale=None,
                    v_scale=None, **_) -> None:
    """The checks that read metadata values (and the values of sinks and scales): computed on
    the device, one host sync. Sinks must not be NaN or +inf (every output NaN); -inf is no
    sink. Scales must be finite and > 0."""
    num_tokens = q.shape[0]
    num_blocks, block_size = k_cache.shape[0], k_cache.shape[1]
    width = block_table.shape[1]
    capacity = width * block_size
    cu, lens = cu_seqlens_q.long(), seq_lens.long()
    q_lens = cu[1:] - cu[:-1]
    used = (lens.clamp(0, capacity) + block_size - 1) // block_size  # blocks each sequence reads
    in_use = torch.arange(width, device=block_table.device)[None, :] < used[:, None]
    bad_ids = in_use & ((block_table < 0) | (block_table >= num_blocks))
    no = torch.zeros((), dtype=torch.bool, device=q.device)
    flags = torch.stack([
        (cu[0] != 0) | (cu[-1] != num_tokens), (q_lens < 0).any(), (lens < q_lens).any(),
        (lens > capacity).any(), bad_ids.any(),
        no if sinks is None else (sinks.float().isnan() | (sinks.float() == float("inf"))).any(),
        no if k_scale is None else ~(torch.isfinite(k_scale.float()) & (k_scale.float() > 0)).all(),
        no if v_scale is None else ~(torch.isfinite(v_scale.float()) & (v_scale.float() > 0)).all(),
    ]).tolist()
    if not any(flags):
        return
    # Failing: reading more to name the culprit costs nothing that matters now.
    bounds, decreasing, too_short, too_long, bad_block, bad_sink, bad_k_scale, bad_v_scale = flags
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
    if bad_sink:
        i = _first(sinks.float().isnan() | (sinks.float() == float("inf")))
        raise ValueError(f"sinks: head {i} holds {float(sinks[i])}; a sink must be finite (or -inf: none)")
    for name, t, bad in (("k_scale", k_scale, bad_k_scale), ("v_scale", v_scale, bad_v_scale)):
        if bad:
            raise ValueError(f"{name}: must be finite and > 0, got {float(t.reshape(-1)[0])}")


def _first(mask: torch.Tensor) -> int:
    return int(mask.nonzero()[0, 0])
