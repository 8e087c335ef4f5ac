"""How far a case is from the hardware: its bytes and flops, and the GPU's measured limits.

A case's floor is the larger of two times: the bytes it must move through device memory
(`hbm_bytes`: every sequence's K and V read once, the queries read and the output written
once, the block-table entries and the sequence metadata read once) over the copy bandwidth,
and its flops (`attention_flops`: the two products over the visible query-key pairs) over the
bf16 matmul peak. Both limits are measured on the GPU itself (`measure_limits`: a
device-to-device copy, counting bytes read and written, and a large bf16 matmul on random
data), not read from a datasheet: on an H200 (2026-11-28) 4.27 TB/s and 699 TFLOP/s.
"""

from __future__ import annotations

import dataclasses
import statistics

COPY_BYTES = 2 * 1024 ** 3  # per copy: many times any L2 (H100/H200 50-60 MB, MI300X 256 MB)
MATMUL_N = 8192  # n x n x n bf16: large enough to reach the peak (H100, H200: about 0.8-1.6 ms)
REPEATS = 10  # timed copies / products after 3 warm-ups; the median is kept


@dataclasses.dataclass(frozen=True)
class Limits:
    copy_tb_s: float  # device-to-device copy, bytes read + written per second / 1e12
    matmul_tflop_s: float  # bf16 n x n x n matmul on random data, 2 n^3 / s / 1e12


def kv_read_bytes(spec) -> int:
    """Every sequence's K and V read once (a kernels.batch.BatchSpec)."""
    item = 1 if spec.fp8_kv else spec.torch_dtype.itemsize
    return sum(spec.kv_lens) * spec.num_kv_heads * spec.head_size * 2 * item


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


def limit_ms(spec, limits: Limits) -> float:
    """The case's floor in ms: the larger of its memory time and its compute time."""
    memory = hbm_bytes(spec) / (limits.copy_tb_s * 1e12)
    compute = attention_flops(spec) / (limits.matmul_tflop_s * 1e12)
    return 1e3 * max(memory, compute)


def measure_limits(device: str = "cuda") -> Limits:
    """Copy bandwidth and bf16 matmul peak of this GPU, timed with device events."""
    import torch

    def median_ms(fn) -> float:
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

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src))
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
    b = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
    mm_ms = median_ms(lambda: a @ b)
    return Limits(copy_tb_s=2 * COPY_BYTES / (copy_ms * 1e-3) / 1e12,
                  matmul_tflop_s=2 * MATMUL_N ** 3 / (mm_ms * 1e-3) / 1e12)
