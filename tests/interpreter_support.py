"""When Triton's interpreter can run here: a skip marker for tests that need it on any machine,
and whether it can run AMD's native FNUZ fp8 path.

triton 3.6's interpreter fails on tensor-valued loop bounds under NumPy >= 2.4 ("only
0-dimensional arrays can be converted to Python scalars"; seen with NumPy 2.4.6 here and
2.5.2 on the H200 device image, 2026-11-21). The nox sessions pin numpy<2.4; GPU images
that ship a newer NumPy skip the interpreter-only tests with this reason.

FNUZ e4m3 caches (torch.float8_e4m3fnuz) are Triton's fp8e4b8. triton 3.6.0's interpreter
has no IR type for it (its `_patch_lang_core` maps fp8e5, fp8e4nv and fp8e4b15 only:
"fail to convert fp8e4b8 to ir type"), so the kernels' AMD path, which hands FNUZ caches to
Triton as fp8e4b8, cannot run on CPU; the kernels' own FNUZ decoder (the NVIDIA path, the
one the interpreter plans by default) runs there, and the AMD path is compiled for gfx942
by the static gate (tests/test_compile*.py).

OCP e4m3's NaN bytes (0x7F, 0xFF) convert to +-480 in triton 3.6.0's interpreter, not NaN
(seen here, 2026-11-24, numpy 2.3.5): the correctness grid's NaN poison in unowned slots of an
OCP fp8 cache is then a large finite value on CPU. The interpreter still meets NaN poison in
fp8 through FNUZ caches (the kernels' own decoder reads 0x80 as NaN); GPUs convert OCP NaN.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

# A child process run as on a machine without a GPU, on any machine: the GPUs hidden from torch
# (`perf.vendor.on_gpu` then says no), and with CPU_ONLY Triton's interpreter on.
NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
CPU_ONLY = {**NO_GPU, "TRITON_INTERPRET": "1"}

NUMPY_BREAKS_INTERPRETER = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 4)

needs_interpreter = pytest.mark.skipif(
    NUMPY_BREAKS_INTERPRETER,
    reason=f"NumPy {np.__version__}: triton 3.6's interpreter breaks on loop bounds under "
    "NumPy >= 2.4 (the nox sessions pin numpy<2.4)",
)

INTERPRETER_FNUZ_REASON = (
    "Triton's interpreter cannot hold fp8e4b8 (FNUZ) values (triton 3.6.0: 'fail to convert "
    "fp8e4b8 to ir type'): AMD's native FNUZ path runs on an AMD GPU and is compiled for gfx942 "
    "by the static gate; the interpreter runs the kernels' FNUZ decoder instead")


@functools.cache
def interpreter_reads_fnuz() -> bool:
    """Whether the active interpreter loads and converts a float8_e4m3fnuz tensor (probed, so
    a Triton that gains fp8e4b8 runs the AMD path's tests on CPU without an edit here)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _convert(x_ptr, o_ptr):  # a tile, as the kernels load (a scalar load alone passes)
        offs = tl.arange(0, 16)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))

    values = torch.linspace(-240, 240, 16)
    out = torch.zeros(16)
    try:
        _convert[(1,)](values.to(torch.float8_e4m3fnuz), out)
    except Exception:
        return False
    return torch.equal(out, values.to(torch.float8_e4m3fnuz).float())


@functools.cache
def interpreter_reads_ocp_nan() -> bool:
    """Whether the active interpreter converts OCP e4m3's NaN byte (0x7F) to NaN (probed, as above)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _convert(x_ptr, o_ptr):
        offs = tl.arange(0, 16)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))

    out = torch.zeros(16)
    _convert[(1,)](torch.full((16,), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn), out)
    return bool(out.isnan().all())


def round_e4m3_like_gpus() -> bool:
    """Make the interpreter's conversions to OCP e4m3 (fp8e4nv) round as GPUs do (to nearest
    even, saturating at +-448: sm_90's cvt.rn.satfinite.e4m3x2.f32), through torch's conversion.

    triton 3.6.0's interpreter rounds them wrongly (`_convert_float`, seen here 2026-11-28,
    numpy 2.3.5): the carry of a mantissa rounded up from 7 is ORed into the exponent, not
    added, so 31.3 became 16.0; subnormals flushed to 0 (0.0018 -> 0, not 2^-9); 12 % of 65,536
    random values of e4m3's range converted wrongly. The kernels convert to e4m3 only with
    `Config.fp8_products` (queries and P). Installed once per process, and only where a probe
    finds the conversion wrong (a Triton that fixes it runs as it is); returns whether it is."""
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_fp_to_fp, "_e4m3", False):
        return True
    probe = np.array([31.3, 0.0018, 1.0], dtype=np.float32)
    handle = interpreter.TensorHandle(probe, tl.float32)
    wrong = interpreter.interpreter_builder.create_fp_to_fp(handle, tl.float8e4nv, None).data
    if np.array_equal(wrong.view(np.uint8), torch.from_numpy(probe).to(torch.float8_e4m3fn).view(torch.uint8)
                      .numpy()):
        return False
    real = builder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        source = src.dtype.scalar
        if dst_type.scalar != tl.float8e4nv or source not in (tl.float32, tl.float16, tl.bfloat16):
            return real(self, src, dst_type, rounding_mode)
        data = src.data
        if source == tl.bfloat16:  # stored as uint16: the high half of a float32
            data = (data.astype(np.uint32) << 16).view(np.float32)
        values = torch.from_numpy(np.array(data, dtype=np.float32)).clamp(-448.0, 448.0)
        e4m3 = values.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        return interpreter.TensorHandle(e4m3, tl.float8e4nv)

    create_fp_to_fp._e4m3 = True
    builder.create_fp_to_fp = create_fp_to_fp
    return True


def planned_check(variant, batch, out, **hints) -> tuple:
    """(the reference output, (atol, rtol)) a call of `variant` on `batch` (with `hints`, e.g. a
    `config`) is held to as the variant plans it (`perf.measure.check.Reference.of`, `.tolerance`: the
    reference of q rounded to e4m3 where the heuristics or the `config` round it, `Config.qk_e4m3`, and
    the tolerance of its operands); the interpreter then rounds to e4m3 as GPUs do. Called before the
    call, while the batch holds the values it reads."""
    from kernels import platform
    from kernels.reference import paged_attention_reference
    from perf.measure import check

    launches = []
    if hasattr(variant, "plan"):
        try:
            _, planned = variant.plan(*batch.args(), out=out, **batch.options, **hints)
        except NotImplementedError:
            planned = []  # the call raises it again, and the test skips
        launches = [launch.config() for launch in planned]
    q, *rest = batch.args()
    if check.rounds_q_to_e4m3(launches):
        if platform.interpreter_active():
            round_e4m3_like_gpus()
        q = check.e4m3_rounded(q, batch.k_cache.dtype)
    expected = paged_attention_reference(q, *rest, **batch.options)
    return expected, check.tolerance(batch.q.dtype, launches)
