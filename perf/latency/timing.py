"""Time one callable honestly (DESIGN 5): device events, L2 flush, every sample kept.

`time_eager` follows `triton.testing.do_bench` (device events around each call, the
driver's 256 MB buffer zeroed before each sample to flush L2) with one difference: it
synchronizes after the flush, so the host-side launch cost of the call lands inside the
sample instead of hiding behind the flush kernel. That is the cost the paper shows
dominating short sequences, and what `time_graph` removes: it captures the call in a
CUDA/HIP graph once and times its replays the same way. The callable must already hold its
inputs and launch plan (built outside the timed region); warm-up calls, which include
compilation, are not recorded.

Without a GPU (Triton's interpreter) `time_eager` falls back to wall-clock time, good only
for smoke-testing the harness; `time_graph` raises `GraphUnavailable`.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from perf.vendor import on_gpu

# triton's get_empty_cache_for_benchmark size: more than the H100's 50 MB L2; the MI300X's
# 256 MB Infinity Cache is flushed only in part (the same as triton.testing.do_bench there).
L2_FLUSH_BYTES = 256 * 1024 * 1024
MIN_SAMPLES = 5  # per repeat, however long the call


class GraphUnavailable(RuntimeError):
    """Graph replay needs a CUDA or HIP device."""


@dataclass(frozen=True)
class Samples:
    values: tuple[float, ...]  # milliseconds, in measurement order
    clock: str = "device-events"  # or "wall-clock" (interpreter)

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def p20(self) -> float:
        return float(np.percentile(self.values, 20))

    @property
    def p80(self) -> float:
        return float(np.percentile(self.values, 80))

    @property
    def cv(self) -> float:
        """Coefficient of variation (stdev / mean) of the samples."""
        if len(self.values) < 2:
            return 0.0
        return statistics.stdev(self.values) / statistics.fmean(self.values)

    def summary(self) -> dict:
        return {"median": self.median, "p20": self.p20, "p80": self.p80, "n": len(self.values)}


_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_buffer(device: str) -> torch.Tensor:
    if device not in _flush_buffers:
        _flush_buffers[device] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    return _flush_buffers[device]


def _trusted():
    """kernels.inputs.trusted_metadata() where the kernels under test have it (an older
    base commit may not), so timed calls skip host-syncing value checks."""
    try:
        from kernels.inputs import trusted_metadata
    except ImportError:
        return contextlib.nullcontext()
    return trusted_metadata()


def _time_wall(fn: Callable[[], object], samples: int, warmup: int) -> Samples:
    for _ in range(warmup):
        fn()
    values = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        values.append((time.perf_counter() - t0) * 1e3)
    return Samples(tuple(values), clock="wall-clock")


def _count(estimate_ms: float, samples: int, budget_ms: float | None) -> int:
    """Samples for one repeat: `samples`, fewer for long calls so one repeat stays near
    `budget_ms` (never fewer than MIN_SAMPLES). Long kernels vary little (0.02-0.07 % within
    a repeat for 25-170 ms calls, H200, 2026-11-21), so their medians need few samples."""
    if budget_ms is None or estimate_ms <= 0:
        return samples
    return max(min(MIN_SAMPLES, samples), min(samples, int(budget_ms / estimate_ms)))


def _time_events(fn: Callable[[], object], samples: int, warmup: int, flush: bool,
                 budget_ms: float | None = None) -> Samples:
    cache = _flush_buffer("cuda") if flush else None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(max(1, warmup)):
        fn()
    end.record()
    torch.cuda.synchronize()
    samples = _count(start.elapsed_time(end) / max(1, warmup), samples, budget_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for i in range(samples):
        if cache is not None:
            cache.zero_()
        torch.cuda.synchronize()  # host launch cost lands inside the sample (see docstring)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return Samples(tuple(s.elapsed_time(e) for s, e in zip(starts, ends)))


def time_eager(fn: Callable[[], object], *, samples: int = 25, warmup: int = 3,
               flush: bool = True, budget_ms: float | None = None) -> Samples:
    """Latency of `fn()` per call, in ms; warm-up calls (compilation included) are untimed."""
    with _trusted():
        if not on_gpu():
            return _time_wall(fn, samples, warmup)
        return _time_events(fn, samples, warmup, flush, budget_ms)


def capture_graph(fn: Callable[[], object], warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Capture one call of `fn` (warmed up on a side stream first, as torch requires)."""
    if not on_gpu():
        raise GraphUnavailable("graph replay needs a CUDA or HIP GPU")
    with _trusted():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
    return graph


def time_graph(fn: Callable[[], object], *, samples: int = 25, warmup: int = 3,
               flush: bool = True, budget_ms: float | None = None,
               graph: torch.cuda.CUDAGraph | None = None) -> Samples:
    """Latency of one CUDA/HIP-graph replay of `fn`, in ms (launch overhead removed)."""
    graph = graph or capture_graph(fn)
    return _time_events(graph.replay, samples, warmup, flush, budget_ms)
