"""Every timed output checked: against the fp32 reference, and head's against base's.

A case is checked outside the timed region but on the very tensors it is timed on: its
output buffer is poisoned with NaN (an element the call leaves unwritten cannot pass), the
timed call (or the captured graph's replay) runs once, and the output is compared with
`kernels.reference.paged_attention_reference` on the same batch, with the correctness
grid's tolerances (`TOLERANCES`; tests/kernels/test_correctness.py reads them from here). The
measuring stage checks before timing (a wrong case is never timed: it is recorded as an
error whose reason starts with `WRONG`) and after timing (the output of the last call,
recorded the same way); the latency gate also compares head's output with base's.
perf/verdicts.py turns such a record into the verdict `wrong`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# dtype of q/out -> (atol, rtol) of |out - expected| <= atol + rtol * |expected| (torch.testing's
# rule). float16 and bfloat16: the correctness grid's since it was written (tests/kernels/test_correctness.py,
# met by every variant on H100 and in the interpreter). float32 has no grid entry: float16's, a
# default chosen by reasoning (Triton's fp32 dot runs as tf32 on NVIDIA: 10 mantissa bits, as fp16).
TOLERANCES = {"float16": (3e-3, 3e-3), "bfloat16": (1.5e-2, 1e-2), "float32": (3e-3, 3e-3)}
WRONG = "wrong output"  # the start of every reason recorded for a wrong output
# Scores of one chunk of the reference: heads x queries x keys fp32 values (a causal prefill of
# 8192 tokens at once would need 8.6 GB per tensor for 32 heads). Unmeasured default: 2**28
# values (1 GiB per tensor; the reference holds a few at a time).
REFERENCE_CHUNK_VALUES = 2 ** 28


@dataclass(frozen=True)
class Check:
    """One comparison: whether `out` is close to `expected`, and by how much it is not."""

    ok: bool
    max_error: float  # max |out - expected|; inf where either holds a NaN, or an Inf the other lacks
    atol: float
    rtol: float

    def describe(self, against: str = "the fp32 reference") -> str:
        return (f"max error {self.max_error:.3g} against {against} (atol {self.atol:g}, "
                f"rtol {self.rtol:g})")


def tolerance(dtype) -> tuple[float, float]:
    """(atol, rtol) for an output of `dtype` (a torch dtype or its name, e.g. "float16")."""
    name = str(dtype).removeprefix("torch.")
    if name not in TOLERANCES:
        raise ValueError(f"no tolerance for outputs of {name}; known: {', '.join(TOLERANCES)}")
    return TOLERANCES[name]


def compare(out, expected, atol: float, rtol: float) -> Check:
    """`out` against `expected` with torch.testing.assert_close's rule (equal, or
    |out - expected| <= atol + rtol * |expected|; NaN never close), both read as float32."""
    import torch

    a, e = out.float(), expected.float()
    if a.shape != e.shape:
        return Check(False, math.inf, atol, rtol)
    diff = (a - e).abs()
    close = (a == e) | (diff <= atol + rtol * e.abs())
    ok = bool(close.all())
    if not diff.numel():
        return Check(ok, 0.0, atol, rtol)
    finite = torch.isfinite(diff)
    if bool(finite.all()):
        return Check(ok, float(diff.max()), atol, rtol)
    beyond = ~finite & ~(a == e)  # NaN, or an Inf the reference does not have
    worst = math.inf if bool(beyond.any()) else (float(diff[finite].max()) if bool(finite.any()) else 0.0)
    return Check(ok, worst, atol, rtol)


def check_call(call: Callable[[], object], out, expected, sync: Callable[[], object] | None = None) -> Check:
    """Poison `out` with NaN, run `call` (which writes `out`) once, compare with `expected`."""
    out.fill_(float("nan"))
    call()
    if sync is not None:
        sync()
    return compare(out, expected, *tolerance(out.dtype))


def wrong_reason(check: Check, when: str, metric: str | None = None,
                 against: str = "the fp32 reference") -> str:
    """The reason recorded for a wrong output ("graph: wrong output after timing: max error ...")."""
    text = f"{WRONG} {when}: {check.describe(against)}"
    return f"{metric}: {text}" if metric else text


def is_wrong(reason: str, metric: str | None = None) -> bool:
    """Whether a recorded reason says an output was wrong (for `metric`: one naming no metric,
    or naming that one)."""
    head, _, rest = reason.partition(": ")
    if head in ("eager", "graph"):
        return rest.startswith(WRONG) and (metric is None or head == metric)
    return reason.startswith(WRONG)


def reference_output(reference: Callable, batch):
    """The fp32 reference's output for `batch`, computed in chunks of queries so that no
    chunk's scores exceed REFERENCE_CHUNK_VALUES: a chunk of the last queries of a sequence is
    a sequence of its own (the queries of a sequence are its last positions, so cutting it at
    query b gives a sequence of kv_len - q_len + b keys whose last queries are those)."""
    import torch

    q = batch.q
    args, options = batch.args(), dict(batch.options)
    _, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens = args
    heads = q.shape[1]
    out = torch.empty_like(q)
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for s, kv_len in enumerate(lens):
        start, end = cu[s], cu[s + 1]
        q_len = end - start
        rows = max(1, REFERENCE_CHUNK_VALUES // max(1, heads * kv_len))
        for a in range(0, q_len, rows):
            b = min(q_len, a + rows)
            sub_len = torch.tensor([kv_len - q_len + b], dtype=seq_lens.dtype, device=seq_lens.device)
            sub_cu = torch.tensor([0, b - a], dtype=cu_seqlens_q.dtype, device=cu_seqlens_q.device)
            rows_q = q[start + a:start + b]
            table = block_table[s:s + 1]
            out[start + a:start + b] = reference(rows_q, k_cache, v_cache, table, sub_cu, sub_len, **options)
    return out
