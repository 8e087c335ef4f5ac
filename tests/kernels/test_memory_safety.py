"""No metadata, however inconsistent, makes a kernel read or write outside the tensors it was given.

Without the value checks (the serving path: no host sync), nothing on the host sees a block id
outside the cache, a `seq_lens` entry the block-table row cannot hold or shorter than the
sequence's queries, or `cu_seqlens_q` that does not rise from 0 to at most num_tokens. The
kernels bound every load and store by what the shapes give for free (`common.shape_bounds`):
q's rows, the keys a block-table row holds, the cache's last block.

In Triton's interpreter every load, store and atomic of a launch is checked here against the
byte ranges of that launch's tensor arguments (`bounded_memory`): an address outside all of
them fails the test, whether or not it would fault (the checker's own test plants one). On a
GPU the same cases run unchecked here and under `compute-sanitizer --tool memcheck` (docs/kernels.md
gives the command and its last run).

Hypothesis draws small batches, a variant with one of its configurations and features, and one to
three corruptions of the metadata. Beyond "nothing outside": a sequence the corruptions did not
touch matches the fp32 reference, and a sequence whose key count its row cannot hold (or that is
shorter than its queries) gets rows of zeros.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from grid_cases import FORCED_CONFIGS
from interpreter_support import NUMPY_BREAKS_INTERPRETER, needs_interpreter, planned_check

from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch

pytestmark = pytest.mark.slow  # the interpreter runs every case

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (the project's `test` "
                                 "extra has it: pip install -e .[test])")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# on a GPU the cases run compiled (and under compute-sanitizer), whatever NumPy the image has
runs_here = pytest.mark.skipif(INTERPRETED and NUMPY_BREAKS_INTERPRETER,
                               reason=needs_interpreter.kwargs["reason"])

# The corruptions, by what they change: a block id of a sequence's used blocks, a sequence's
# key count, an entry of cu_seqlens_q (each its own sample of values past every bound).
BAD_BLOCK_IDS = (-1, -(2**31), 2**31 - 1)  # and num_blocks, num_blocks + 5: made per batch
BAD_SEQ_LENS = ("capacity+1", "q_len-1", 0, -1, 2**31 - 1, -(2**31))
BAD_CU = ("past_tokens", "max", "before_previous", "negative", "first_not_0")


@contextlib.contextmanager
def bounded_memory():
    """Check every memory access of the interpreted launches in the block against the launch's
    tensor arguments (each a byte range: its view's first to last element); yields the list of
    violations found (empty: every access was inside)."""
    from triton.runtime import interpreter

    violations: list[str] = []
    ranges: list[tuple[int, int]] = []
    builder = interpreter.InterpreterBuilder
    originals = {name: getattr(builder, name) for name in
                 ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")}
    init_args = interpreter.GridExecutor._init_args_hst

    def record_ranges(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        ranges.clear()
        for arg in [*args_hst, *kwargs_hst.values()]:
            if isinstance(arg, torch.Tensor) and arg.numel():
                span = sum((size - 1) * stride for size, stride in zip(arg.shape, arg.stride())) + 1
                ranges.append((arg.data_ptr(), arg.data_ptr() + span * arg.element_size()))
        return args_hst, kwargs_hst

    def check(what, ptrs, mask):
        addresses = np.asarray(ptrs.data, dtype=np.uint64).ravel()
        enabled = np.ones_like(addresses, dtype=bool) if mask is None else np.asarray(mask.data).ravel()
        width = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
        inside = np.zeros_like(enabled)
        for lo, hi in ranges:
            inside |= (addresses >= lo) & (addresses + width <= hi)
        outside = enabled & ~inside
        if outside.any():
            violations.append(f"{what} of {int(outside.sum())} element(s) outside every argument, "
                              f"e.g. address {int(addresses[outside][0]):#x}")

    def load(self, ptrs, mask, other, *rest):
        check("load", ptrs, mask)
        return originals["create_masked_load"](self, ptrs, mask, other, *rest)

    def store(self, ptrs, value, mask, *rest):
        check("store", ptrs, mask)
        return originals["create_masked_store"](self, ptrs, value, mask, *rest)

    def rmw(self, op, ptr, val, mask, *rest):
        check("atomic", ptr, mask)
        return originals["create_atomic_rmw"](self, op, ptr, val, mask, *rest)

    def cas(self, ptr, cmp, val, *rest):
        check("atomic", ptr, None)
        return originals["create_atomic_cas"](self, ptr, cmp, val, *rest)

    patched = {"create_masked_load": load, "create_masked_store": store, "create_atomic_rmw": rmw,
               "create_atomic_cas": cas}
    try:
        for name, fn in patched.items():
            setattr(builder, name, fn)
        interpreter.GridExecutor._init_args_hst = record_ranges
        yield violations
    finally:
        for name, fn in originals.items():
            setattr(builder, name, fn)
        interpreter.GridExecutor._init_args_hst = init_args


@triton.jit
def _read_at_kernel(x_ptr, out_ptr, index):
    tl.store(out_ptr, tl.load(x_ptr + index))


@needs_interpreter
@pytest.mark.skipif(not INTERPRETED, reason="the address check is the interpreter's (a GPU runs "
                    "compute-sanitizer instead)")
def test_the_check_finds_an_access_past_a_tensor():
    """One element past the end, and one before the start, are found; the last element is not."""
    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(1)
    for index, found in ((7, False), (8, True), (-1, True)):
        with bounded_memory() as violations:
            try:
                _read_at_kernel[(1,)](x, out, index)
            except Exception:  # the interpreter may also fault on it: the check found it first
                pass
        assert bool(violations) == found, (index, violations)


def _configs(variant: str):
    """A variant's configuration hints to draw from: None (its heuristics) and, for those taking
    one, every forced configuration of the correctness grid (segments, fused reductions, sequence
    items, read-ahead, block vectors, 32-bit offsets, edges, fp8 products, persistent grids)."""
    if variant in ("parallel", "flex_tile", "static_grid"):
        return [None, *FORCED_CONFIGS]
    return [None]


@st.composite
def corrupted_calls(draw, variant: str):
    """(spec, config name, corruptions): a small batch, one of the variant's configurations and
    features, and the metadata changes to make in it."""
    features = VARIANTS[variant].features
    config = draw(st.sampled_from(_configs(variant)))
    block_size = FORCED_CONFIGS[config][1] if config else draw(st.sampled_from([16, 32]))
    num_seqs = draw(st.integers(1, 4))
    decode = draw(st.booleans())
    query_lens = [1 if decode else draw(st.integers(1, 20)) for _ in range(num_seqs)]
    kv_lens = [q + draw(st.integers(0, 60)) for q in query_lens]
    feature = draw(st.sampled_from(["none", *sorted(features & {"sliding_window", "softcap", "sinks",
                                                                  "fp8_kv"})]))
    spec = BatchSpec(tuple(query_lens), tuple(kv_lens), num_q_heads=4, num_kv_heads=2, head_size=32,
                     block_size=block_size, dtype="float16", fp8_kv=feature == "fp8_kv",
                     sliding_window=24 if feature == "sliding_window" else None,
                     softcap=20.0 if feature == "softcap" else None, sinks=feature == "sinks",
                     seed=draw(st.integers(0, 1000)))
    kinds = st.one_of(
        st.tuples(st.just("block"), st.integers(0, num_seqs - 1),
                  st.sampled_from([*BAD_BLOCK_IDS, "num_blocks", "num_blocks+5"])),
        st.tuples(st.just("seq_len"), st.integers(0, num_seqs - 1), st.sampled_from(BAD_SEQ_LENS)),
        st.tuples(st.just("cu"), st.integers(0, num_seqs), st.sampled_from(BAD_CU)),
    )
    return spec, config, draw(st.lists(kinds, min_size=1, max_size=3))


def corrupt(batch, corruptions) -> tuple[set[int], set[int], set[int]]:
    """Make `corruptions` in the batch's metadata (in place). Returns (touched, moved, keyless):
    the sequences any corruption changed, those whose query range it changed, and those whose key
    count their row cannot hold or that is shorter than their queries (`common.keys_ok`)."""
    cu, seq_lens, table = batch.cu_seqlens_q, batch.seq_lens, batch.block_table
    num_tokens, num_blocks, block_size = batch.q.shape[0], batch.k_cache.shape[0], batch.k_cache.shape[1]
    capacity = table.shape[1] * block_size
    touched, moved = set(), set()
    for kind, i, value in corruptions:
        if kind == "block":
            used = max(1, -(-int(seq_lens[i]) // block_size)) if int(seq_lens[i]) > 0 else 1
            j = min(used - 1, table.shape[1] - 1)
            table[i, j] = {"num_blocks": num_blocks, "num_blocks+5": num_blocks + 5}.get(value, value)
            touched.add(i)
        elif kind == "seq_len":
            q_len = int(cu[i + 1]) - int(cu[i])
            seq_lens[i] = {"capacity+1": capacity + 1, "q_len-1": q_len - 1}.get(value, value)
            touched.add(i)
        else:
            new = {"past_tokens": num_tokens + 3, "max": 2**31 - 1, "negative": -5,
                   "before_previous": int(cu[max(i - 1, 0)]) - 1, "first_not_0": 3}[value]
            if value == "first_not_0":
                i = 0
            cu[i] = new
            moved.update({i - 1, i} & set(range(len(seq_lens))))
            touched.update(moved)
    keyless = set()
    for i in range(len(seq_lens)):
        q_len = int(cu[i + 1]) - int(cu[i])
        if not q_len <= int(seq_lens[i]) <= capacity:
            keyless.add(i)
    return touched, moved, keyless


def run_corrupted(variant: str, spec: BatchSpec, config: str | None, corruptions, device) -> None:
    batch = build_batch(spec, device, poison=True)
    hints = {"config": FORCED_CONFIGS[config][0]} if config else {}
    out = batch.new_output()
    want, (atol, rtol) = planned_check(VARIANTS[variant], batch, out, **hints)
    touched, moved, keyless = corrupt(batch, corruptions)
    with bounded_memory() if INTERPRETED else contextlib.nullcontext([]) as violations:
        VARIANTS[variant](*batch.args(), out=out, check_values=False, **batch.options, **hints)
    assert not violations, violations
    if device != "cpu":
        torch.cuda.synchronize()
    cu = batch.cu_seqlens_q.cpu().tolist()
    num_tokens = batch.q.shape[0]
    clamped = [min(max(x, 0), num_tokens) for x in cu]
    if any(b < a for a, b in zip(clamped, clamped[1:])):
        return  # rows of no defined sequence: only "nothing outside" holds
    for i in range(len(spec.query_lens)):
        rows = slice(cu[i], cu[i + 1])
        if i in keyless and i not in moved:
            torch.testing.assert_close(out[rows], torch.zeros_like(out[rows]), msg=f"sequence {i} keyless")
        elif i not in touched:
            torch.testing.assert_close(out[rows].float(), want[rows].float(), atol=atol, rtol=rtol,
                                       msg=lambda m, i=i: f"untouched sequence {i}: {m}")


@runs_here
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_corrupted_metadata_stays_inside_the_tensors(variant, device):
    @settings(max_examples=int(os.environ.get("MEMORY_SAFETY_EXAMPLES", "25")), deadline=None,
              derandomize=True, suppress_health_check=list(HealthCheck), database=None)
    @given(corrupted_calls(variant))
    def check(case):
        spec, config, corruptions = case
        run_corrupted(variant, spec, config, corruptions, device)

    check()


@runs_here
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("corruption", [
    ("block", 0, 2**31 - 1), ("block", 1, -1), ("seq_len", 0, 2**31 - 1), ("seq_len", 1, "capacity+1"),
    ("seq_len", 1, "q_len-1"), ("cu", 2, "past_tokens"), ("cu", 2, "max"), ("cu", 1, "before_previous"),
    ("cu", 0, "first_not_0"),
], ids=str)
def test_each_corruption_of_the_issue_stays_inside(variant, corruption, device):
    """The faults seen before the bounds, one by one, on a mixed batch (a decode and a prefill)."""
    features = VARIANTS[variant].features
    spec = BatchSpec((1, 9), (40, 30), num_q_heads=4, num_kv_heads=2, head_size=32, block_size=16,
                     sinks="sinks" in features)
    run_corrupted(variant, spec, None, [corruption], device)


if __name__ == "__main__":  # the GPU run under compute-sanitizer: python tests/kernels/test_memory_safety.py
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
