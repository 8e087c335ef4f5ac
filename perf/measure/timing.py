"""Time one callable's device time: device events, L2 flush, no host time in any sample.

A sample is: zero a 256 MB buffer (flushes L2, as `triton.testing.do_bench` does), queue
a spin kernel long enough to cover the host's work for the sample, record the start event,
call `fn` `reps` times, record the end event. Nothing synchronizes the host between the
flush and the end event, so while the GPU runs the flush and the spin the host has already
queued the call's launches: the GPU goes from the start event straight into the kernels,
and the host's launch latency (Python, Triton's launcher, `cudaGraphLaunch`) is never inside
a sample. nvbench hides it the same way (a blocking kernel before the start event). The
spin is sized from the host's measured enqueue time of `fn` (`Plan.spin_ms`), and checked:
an event recorded at the spin's end must still be pending once the host has queued the
sample's calls, else the host was late (a stalled VM host), the sample may hold its time,
and it is timed again with a longer spin (`Samples.redone` counts those).

Calls shorter than MIN_SAMPLE_MS are timed `reps` at a time, back to back after one flush
(the first call reads a cold L2, the others a warm one); a sample is the time per call.
A lone call after the flush and the spin pays a fixed start-up on the device (measured on
an H100: about 3.3 us on a 6.7 us graph replay, docs/latency.md) that back-to-back calls
overlap with the previous call; spread over `reps` calls it shrinks to a few percent, and
the timer's 0.5 us resolution with it. `plan` fixes `reps` and the spin once per case, so
both sides of an A/B are timed the same way. The spin is capped at MAX_SPIN_MS: a call
whose host work would need more (an eager call of 0.3 ms of Python) gets fewer calls per
sample.

Two metrics use it: `eager` (the public entry called from Python; its host cost is what
`nox -s launch-cost` gates, here it is hidden) and `graph` (one CUDA/HIP-graph replay of the
same call). The callable must already hold its inputs (built outside the timed region);
warm-up calls, compilation included, are not recorded.

Without a GPU (Triton's interpreter) `time_eager` falls back to wall-clock time, good only
for smoke-testing the harness; `time_graph` raises `GraphUnavailable`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from perf.vendor import on_gpu

# triton's get_empty_cache_for_benchmark size: more than the H100's 50 MB L2; the MI300X's
# 256 MB Infinity Cache is flushed only in part (the same as triton.testing.do_bench there).
# Zeroed, so L2 is left dirty: a memory-bound call pays up to 37 MB of write-back (up to 5 %
# of a decode); a read after it would spare that but slowed L2-held prefills up to 2 % (H200,
# 2026-12-03, docs/lab/2026-12-03.md): neither is neutral, and zeroing is do_bench's.
L2_FLUSH_BYTES = 256 * 1024 * 1024
MIN_SAMPLES = 5  # per repeat, however long the call
# Shortest sample. Measured on an H100 (2026-11-22, perf/measure/timing_check.py): a lone
# graph replay of a 6.7 us decode reads 10.0 us, 7 back to back (0.05 ms samples) 7.2 us,
# 1.07-1.08 x the 200-replay figure; 0.2 ms samples (30 calls) bring that to about 1.02 x.
# CUDA events resolve about 0.5 us (cudaEventElapsedTime), 0.25 % of a 0.2 ms sample.
MIN_SAMPLE_MS = 0.2
MAX_REPS = 64  # calls per sample at most
MAX_SPIN_MS = 1.0  # unmeasured default: GPU time a sample may spend spinning; bounds reps of slow-host calls
# The spin before the start event covers SPIN_FACTOR x the host's measured enqueue time of
# the sample's calls, plus SPIN_MARGIN_MS for the event records and a descheduled host
# thread (unmeasured defaults: margins, not fitted values; too long only costs GPU time).
SPIN_FACTOR = 2.0
SPIN_MARGIN_MS = 0.02
# A sample whose spin ended before the host had queued its calls is timed again with twice
# the spin, at most this many times (the host of a shared VM stalls now and then: on the
# H100 VM, 2026-11-23, one process's enqueue time of the same eager call ranged 0.09-0.20
# ms between processes, and an A/A gate there warned on 6 eager cases at ratios up to 1.12).
MAX_REDOS = 3
# The longest spin a redo may reach (unmeasured default, a bound on wasted GPU time): a call
# that synchronizes the host inside (a library doing so, metadata value checks) is late
# whatever the spin, so redoing stops there and the sample keeps what it holds.
MAX_REDO_SPIN_MS = 4 * MAX_SPIN_MS


class GraphUnavailable(RuntimeError):
    """Graph replay needs a CUDA or HIP device."""


@dataclass(frozen=True)
class Samples:
    values: tuple[float, ...]  # milliseconds per call, in measurement order
    clock: str = "device-events"  # or "wall-clock" (interpreter)
    reps: int = 1  # calls per sample
    redone: int = 0  # samples timed again because the host had not queued them in time

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
        return {"median": self.median, "p20": self.p20, "p80": self.p80, "n": len(self.values),
                "reps": self.reps, "redone": self.redone}


@dataclass(frozen=True)
class Plan:
    """How one case is timed: fixed once, the same for both sides of an A/B."""

    reps: int  # calls per sample
    spin_ms: float  # spin before each sample's start event
    estimate_ms: float  # device time per call measured while planning
    host_ms: float = 0.0  # host enqueue time per call measured while planning


def make_plan(estimate_ms: float, host_ms: float) -> Plan:
    """Calls per sample for a call of `estimate_ms` on the device and `host_ms` on the host."""
    per_call = SPIN_FACTOR * max(host_ms, 0.0)
    cap = max(1, int((MAX_SPIN_MS - SPIN_MARGIN_MS) / per_call)) if per_call > 0 else MAX_REPS
    reps = min(reps_for(estimate_ms), cap)
    return Plan(reps=reps, spin_ms=per_call * reps + SPIN_MARGIN_MS, estimate_ms=estimate_ms, host_ms=host_ms)


def merge_plans(a: Plan | None, b: Plan | None) -> Plan | None:
    """One plan for both sides of an A/B: the faster side's device time (so neither gets
    fewer calls per sample than it needs), the slower side's host time (so the spin covers both)."""
    if a is None or b is None:
        return a or b
    return make_plan(min(a.estimate_ms, b.estimate_ms), max(a.host_ms, b.host_ms))


_flush_buffers: dict[str, torch.Tensor] = {}
_cycles_per_ms: list[float] = []


def _flush_buffer(device: str) -> torch.Tensor:
    if device not in _flush_buffers:
        _flush_buffers[device] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    return _flush_buffers[device]


def _spin_cycles_per_ms() -> float:
    """Clock cycles of torch.cuda._sleep per millisecond on this GPU (measured once)."""
    if not _cycles_per_ms:
        cycles = 2_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles // 10)  # first launch loads the kernel
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        _cycles_per_ms.append(cycles / max(start.elapsed_time(end), 1e-3))
    return _cycles_per_ms[0]


def _spin(ms: float) -> None:
    if ms > 0:
        torch.cuda._sleep(max(1, int(ms * _spin_cycles_per_ms())))


def _count(estimate_ms: float, samples: int, budget_ms: float | None) -> int:
    """Samples for one repeat: `samples`, fewer for long calls so one repeat stays near
    `budget_ms` (never fewer than MIN_SAMPLES). Long kernels vary little (0.02-0.07 % within
    a repeat for 25-170 ms calls, H200, 2026-11-21), so their medians need few samples."""
    if budget_ms is None or estimate_ms <= 0:
        return samples
    return max(min(MIN_SAMPLES, samples), min(samples, int(budget_ms / estimate_ms)))


def reps_for(estimate_ms: float) -> int:
    """Calls per sample so that a sample lasts at least MIN_SAMPLE_MS."""
    if estimate_ms <= 0:
        return 1
    return max(1, min(MAX_REPS, math.ceil(MIN_SAMPLE_MS / estimate_ms)))


def plan(fn: Callable[[], object], warmup: int = 3) -> Plan:
    """Warm `fn` up and measure it: host enqueue time (for the spin) and device time (for reps)."""
    for _ in range(max(1, warmup)):
        fn()
    torch.cuda.synchronize()
    n = max(1, warmup)
    t0 = time.perf_counter()
    for _ in range(n):  # the GPU is idle: this is the host's enqueue time alone
        fn()
    host_ms = (time.perf_counter() - t0) * 1e3 / n
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _spin(SPIN_FACTOR * host_ms * n + SPIN_MARGIN_MS)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return make_plan(start.elapsed_time(end) / n, host_ms)


def _time_wall(fn: Callable[[], object], samples: int, warmup: int) -> Samples:
    for _ in range(warmup):
        fn()
    values = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        values.append((time.perf_counter() - t0) * 1e3)
    return Samples(tuple(values), clock="wall-clock")


def _time_events(fn: Callable[[], object], samples: int, p: Plan, flush: bool,
                 budget_ms: float | None) -> Samples:
    cache = _flush_buffer("cuda") if flush else None
    samples = _count(p.estimate_ms * p.reps, samples, budget_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    spun = torch.cuda.Event()  # the spin's end: still pending once every call is queued, or redo
    spin_ms, redone = p.spin_ms, 0
    for i in range(samples):  # no host sync inside: see the module docstring
        for attempt in range(MAX_REDOS + 1):
            if cache is not None:
                cache.zero_()
            _spin(spin_ms)
            spun.record()
            starts[i].record()
            for _ in range(p.reps):
                fn()
            ends[i].record()
            if not spun.query() or attempt == MAX_REDOS or spin_ms >= MAX_REDO_SPIN_MS:
                break
            # The GPU finished spinning before the host finished queueing: it may have idled
            # between the calls, host time in the sample. Time it again, spinning longer.
            redone += 1
            spin_ms = min(2 * spin_ms, MAX_REDO_SPIN_MS)
    torch.cuda.synchronize()
    return Samples(tuple(s.elapsed_time(e) / p.reps for s, e in zip(starts, ends)), reps=p.reps,
                   redone=redone)


def time_eager(fn: Callable[[], object], *, samples: int = 25, warmup: int = 3,
               flush: bool = True, budget_ms: float | None = None, plan_: Plan | None = None) -> Samples:
    """Device time of `fn()` per call, in ms, the host's launch cost hidden (module docstring)."""
    if not on_gpu():
        return _time_wall(fn, samples, warmup)
    return _time_events(fn, samples, plan_ or plan(fn, warmup), flush, budget_ms)


def capture_graph(fn: Callable[[], object], warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Capture one call of `fn` (warmed up on a side stream first, as torch requires)."""
    if not on_gpu():
        raise GraphUnavailable("graph replay needs a CUDA or HIP GPU")
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
               graph: torch.cuda.CUDAGraph | None = None, plan_: Plan | None = None) -> Samples:
    """Device time of one CUDA/HIP-graph replay of `fn`, in ms (module docstring)."""
    graph = graph or capture_graph(fn)
    return _time_events(graph.replay, samples, plan_ or plan(graph.replay, warmup), flush, budget_ms)


def many_replays_ms(graph: torch.cuda.CUDAGraph, replays: int = 200, runs: int = 5) -> float:
    """Median over `runs` of (time of `replays` back-to-back replays) / replays: the reference
    a sample of `time_graph` is checked against (docs/latency.md); warm L2, no flush."""
    values = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(runs):
        torch.cuda.synchronize()
        _spin(1.0)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        values.append(start.elapsed_time(end) / replays)
    return float(np.median(values))
