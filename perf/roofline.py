"""How far a case is from the hardware: its bytes and flops, and the GPU's measured limits.

A case's floor is the larger of two times: the bytes it must move through device memory
(`hbm_bytes`: every sequence's K and V read once, the queries read and the output written
once, the block-table entries and the sequence metadata read once) over the copy bandwidth,
and its flops (`attention_flops`: the two products over the visible query-key pairs) over the
bf16 matmul peak. Both limits are measured on the GPU itself (`measure_limits`: a
device-to-device copy, counting bytes read and written, and a large bf16 matmul on random
data), not read from a datasheet: on an H200 (2026-11-28) 4.27 TB/s and 699 TFLOP/s.

Where a case stands against that floor is its `Share` of each limit at a measured time:
bytes / (bandwidth x time) and flops / (peak x time); the larger names the case's bound
(memory or compute) and is what every report shows ("62 % memory"). Each timed record carries
its `work` (bytes, flops: perf/measure/), each run's results environment the `limits` its GPU
measured or its fingerprint cache held (perf/fingerprint.py `limits`); without a GPU (Triton's
interpreter) there are none, and every cell says "–": a percentage is never made up.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

COPY_BYTES = 2 * 1024 ** 3  # per copy: many times any L2 (H100/H200 50-60 MB, MI300X 256 MB)
MATMUL_N = 8192  # n x n x n bf16: large enough to reach the peak (H100, H200: about 0.8-1.6 ms)
REPEATS = 10  # timed copies / products after 3 warm-ups; the median is kept


@dataclasses.dataclass(frozen=True)
class Limits:
    copy_tb_s: float  # device-to-device copy, bytes read + written per second / 1e12
    matmul_tflop_s: float  # bf16 n x n x n matmul on random data, 2 n^3 / s / 1e12


def kv_read_bytes(spec) -> int:
    """Every sequence's K and V read once (a kernels.batch.BatchSpec): the keys some query sees,
    which under a sliding window are the last q + window - 1 of them (the H200's gate of 2026-11-29
    showed a windowed decode at 188 % of the copy bandwidth while every key was counted)."""
    item = 1 if spec.fp8_kv else spec.torch_dtype.itemsize
    w = spec.sliding_window
    keys = sum(min(kv, q + w - 1) if w else kv for q, kv in zip(spec.query_lens, spec.kv_lens))
    return keys * spec.num_kv_heads * spec.head_size * 2 * item


def hbm_bytes(spec) -> int:
    """The fewest bytes a call moves: K and V once, q read and out written once, the
    block-table entries of every sequence's blocks and the int32 metadata read once."""
    tokens = sum(spec.query_lens)
    q_and_out = 2 * tokens * spec.num_q_heads * spec.head_size * spec.torch_dtype.itemsize
    blocks = sum(-(-kv // spec.block_size) for kv in spec.kv_lens)
    metadata = 4 * (blocks + 2 * len(spec.kv_lens) + 1)
    return kv_read_bytes(spec) + q_and_out + metadata


def attention_flops(spec) -> int:
    """4 x head_size x query heads x the (query, key) pairs the causal mask (and the sliding
    window) leave visible: two matrix products of 2 flops per multiply-add."""
    pairs = 0
    for q, kv in zip(spec.query_lens, spec.kv_lens):
        # The queries sit at positions kv - q .. kv - 1 and see pos + 1 keys each, at most `window`:
        # the sum of min(x, window) for x = kv - q + 1 .. kv.
        lo, hi = kv - q + 1, kv
        w = spec.sliding_window or hi
        top = min(hi, w)
        pairs += (lo + top) * (top - lo + 1) // 2 if top >= lo else 0
        pairs += w * (hi - max(lo, w + 1) + 1) if hi > w else 0
    return 4 * spec.head_size * spec.num_q_heads * pairs


def work(spec) -> dict:
    """What a results record carries of its case's batch: {"bytes": hbm_bytes, "flops": attention_flops}."""
    return {"bytes": hbm_bytes(spec), "flops": attention_flops(spec)}


def limit_ms(spec, limits: Limits) -> float:
    """The case's floor in ms: the larger of its memory time and its compute time."""
    memory = hbm_bytes(spec) / (limits.copy_tb_s * 1e12)
    compute = attention_flops(spec) / (limits.matmul_tflop_s * 1e12)
    return 1e3 * max(memory, compute)


def measure_limits(device: str = "cuda") -> Limits:
    """Copy bandwidth and bf16 matmul peak of this GPU, timed with device events (about 4.4 GiB
    for a moment, handed back to the device before it returns)."""
    import torch

    try:
        return Limits(copy_tb_s=_copy_tb_s(torch, device), matmul_tflop_s=_matmul_tflop_s(torch, device))
    finally:
        torch.cuda.empty_cache()  # the caller measures next: its batches get the memory back


def _median_ms(torch, fn) -> float:
    """Median device time of `fn` over REPEATS calls after 3 warm-ups (one call per event pair)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _copy_tb_s(torch, device: str) -> float:
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    return 2 * COPY_BYTES / (_median_ms(torch, lambda: dst.copy_(src)) * 1e-3) / 1e12


def _matmul_tflop_s(torch, device: str) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
    b = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
    return 2 * MATMUL_N ** 3 / (_median_ms(torch, lambda: a @ b) * 1e-3) / 1e12


# --- a measured time against the limits: what the reports show ----------------------------------


@dataclasses.dataclass(frozen=True)
class Share:
    """A case's time against the hardware: the fraction of each limit it reaches (1.0 = at it)."""

    memory: float  # bytes / (copy bandwidth x time)
    compute: float  # flops / (matmul peak x time)

    @property
    def bound(self) -> str:
        """The limit the case is nearer: "memory" or "compute" (memory on a tie)."""
        return "memory" if self.memory >= self.compute else "compute"

    @property
    def fraction(self) -> float:
        return max(self.memory, self.compute)


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def share(nbytes, flops, ms, limits: Limits | None) -> Share | None:
    """The case's share of each limit at `ms`; None without limits, work or a positive time."""
    if limits is None or not _positive(ms) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
            for x in (nbytes, flops)):
        return None
    seconds = ms * 1e-3
    return Share(memory=nbytes / (limits.copy_tb_s * 1e12 * seconds),
                 compute=flops / (limits.matmul_tflop_s * 1e12 * seconds))


def cell(found: Share | None) -> str:
    """A report's cell: "62 % memory" (the larger share, named), "–" without one."""
    if found is None:
        return "–"
    return f"{100 * found.fraction:.0f} % {found.bound}"


def limits_from(env: dict | None) -> Limits | None:
    """The limits a results environment holds (`limits`, perf/fingerprint.py), None where it holds
    none (the interpreter, files written before they were measured) or not two positive numbers."""
    doc = (env or {}).get("limits")
    if not isinstance(doc, dict) or not (_positive(doc.get("copy_tb_s"))
                                         and _positive(doc.get("matmul_tflop_s"))):
        return None
    return Limits(copy_tb_s=float(doc["copy_tb_s"]), matmul_tflop_s=float(doc["matmul_tflop_s"]))


def describe(limits: Limits | None, why: str | None = None, measured: str | None = None) -> str:
    """One line under a table: the limits and when they were measured, or why there are none."""
    if limits is None:
        return f"% of the hardware limit: – ({why or 'these results record no measured limits'})"
    return (f"% of the hardware limit: the larger of bytes / (copy bandwidth x time) and flops / (matmul "
            f"peak x time), named by its bound; this GPU's copy {limits.copy_tb_s:.3g} TB/s and bf16 matmul "
            f"{limits.matmul_tflop_s:.4g} TFLOP/s, measured {str(measured or '?')[:10]} (perf/roofline.py)")


def describe_env(env: dict | None) -> str:
    """`describe` of a results environment (its `limits`, or its fingerprint's reason for none)."""
    env = env or {}
    why = (env.get("fingerprint_why") or {}).get("limits")
    return describe(limits_from(env), str(why) if why else None, (env.get("limits") or {}).get("measured"))


def record_work(records) -> dict[str, tuple[int, int]]:
    """scenario -> (bytes, flops) of the first measurement of each scenario that carries them."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        if r.get("kind", "record") == "record" and "bytes" in r and "flops" in r:
            out.setdefault(r["scenario"], (r["bytes"], r["flops"]))
    return out


def section(res) -> dict:
    """What a findings file keeps to show "% of limit" again (`perf report`, the PR comment): the
    head results' limits (or why there are none) and each scenario's work."""
    env = res.environment
    limits = limits_from(env)
    why = (env.get("fingerprint_why") or {}).get("limits")
    return {"limits": None if limits is None else dataclasses.asdict(limits),
            "measured": (env.get("limits") or {}).get("measured") if limits else None,
            "why": None if limits is not None else (str(why) if why else None),
            "work": {s: list(w) for s, w in record_work(res.measurements()).items()}}


@dataclasses.dataclass(frozen=True)
class Sheet:
    """A findings file's `roofline` section read back: the limits, each scenario's work, the note."""

    limits: Limits | None
    work: dict[str, tuple[int, int]]
    note: str

    def cell(self, scenario: str, ms) -> str:
        """One finding's cell: its head time against the limits, by its scenario's work."""
        w = self.work.get(scenario)
        return cell(share(w[0], w[1], ms, self.limits) if w is not None else None)


def read_section(doc, path: str) -> Sheet | None:
    """A findings file's `roofline` section (`section`) read back; None for files without one;
    ConfigError naming the field of a malformed one."""
    from perf.errors import ConfigError

    if doc is None:
        return None
    fix = "it is written by the latency gate (findings.json); run the gate again"
    if not isinstance(doc, dict) or not isinstance(doc.get("work", {}), dict):
        raise ConfigError(f"{path}: roofline is {str(doc)[:40]}, expected an object with `limits` and "
                          f"`work`; {fix}")
    raw = doc.get("limits")
    limits = None if raw is None else limits_from({"limits": raw})
    if raw is not None and limits is None:
        raise ConfigError(f"{path}: roofline.limits is {str(raw)[:60]}, expected copy_tb_s and "
                          f"matmul_tflop_s > 0; {fix}")
    work = {}
    for scenario, w in doc.get("work", {}).items():
        if not (isinstance(w, list) and len(w) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in w)):
            raise ConfigError(f"{path}: roofline.work[{str(scenario)[:60]!r}] is {str(w)[:40]}, expected "
                              f"[bytes, flops]; {fix}")
        work[scenario] = (w[0], w[1])
    why, measured = doc.get("why"), doc.get("measured")
    return Sheet(limits, work, describe(limits, why if isinstance(why, str) else None,
                                        measured if isinstance(measured, str) else None))
