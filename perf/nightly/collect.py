"""Measure one commit: every variant and vendor library over the selection, into a results file.

One process does all the GPU work (CUDA context, Triton compilation, batches built once per
scenario), with the measuring stage the latency gate uses (perf.measure: cases planned outside the
timed region, rounds in shuffled order; perf.measure.timing: device events, L2 flush, graphs), and
writes the perf results format (perf.results) with every sample: the night the store keeps
(perf/nightly/store.py), from which asv's site is drawn (perf/nightly/asvrun.py) without asv
measuring anything. A vendor library is a case named "peer:<name>" (perf.measure.peer_cases.attach).

A slow case gets fewer samples per repeat (at least MIN_SAMPLES), so that a repeat takes
about the budget: the estimate is the wall-clock time of one synchronized call. A case
whose call takes longer than `max_call_ms` is recorded as a skip with that time instead
(selection.py says why).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

from perf import checkout
from perf import vendor as vendor_mod
from perf.nightly.selection import MIN_SAMPLES, PEER_PREFIX, ROOT, Selection
from perf.vendor import on_gpu

METRICS = ("eager", "graph")


def _call_ms(fn: Callable[[], object]) -> float:
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def samples_for(call_ms: float, budget_ms: float, most: int) -> int:
    """Samples per repeat so that a repeat takes about `budget_ms` (MIN_SAMPLES..most)."""
    if call_ms <= 0:
        return most
    return max(MIN_SAMPLES, min(most, int(budget_ms // call_ms)))


def too_slow(case, call_ms: float, max_call_ms: float, writer) -> None:
    """Record `case` as a skip for its measured call time, and keep it out of the rounds."""
    case.skip = (f"one call takes {call_ms:.0f} ms, over the nightly's {max_call_ms:.0f} ms "
                 f"(--max-call-ms): not timed")
    case.fn = None
    writer.skip(variant=case.variant, scenario=case.scenario, reason=case.skip, kind="skip")


def measure(sel: Selection, out: str, *, header_extra: dict | None = None, resume: bool = False,
            progress: bool = True) -> str:
    """Measure the selection with this checkout's kernels into `out` (JSON Lines); returns it."""
    from perf import results, scenarios
    from perf.measure import peer_cases
    from perf.measure.rounds import Side

    vendor_mod.interpreter_without_gpu()
    kernels = checkout.import_kernels(ROOT)  # before triton: picks the interpreter without a GPU
    import torch


    class NightlySide(Side):
        """perf.measure.rounds.Side with a per-case sample count (see the module docstring)."""

        def measure(self, case, metric, repeat):
            self.samples = self.per_case.get((case.variant, case.scenario), sel.samples)
            try:
                return super().measure(case, metric, repeat)
            finally:
                self.samples = sel.samples

    chosen = [scenarios.Scenario.parse(name) for name in sel.scenarios]
    unknown = [v for v in sel.variants if v not in kernels.VARIANTS]
    if unknown:
        from perf.errors import ConfigError

        raise ConfigError(f"--variants: unknown {', '.join(unknown)} "
                          f"(registered: {', '.join(kernels.VARIANTS)})")
    header = {
        "environment": results.environment(ROOT), "suite": sel.suite, "side": "nightly",
        "variants": list(sel.variants), "peers": list(sel.peers),
        "scenarios": {s.name: s.spec().digest() for s in chosen}, "metrics": list(METRICS),
        "repeats": sel.repeats, "samples": sel.samples, "budget_ms": sel.budget_ms,
        "max_call_ms": sel.max_call_ms,
        **(header_extra or {}),
    }
    with results.ResultsWriter(out, header, resume=resume) as writer:
        done = writer.done()
        side = NightlySide(kernels, list(sel.variants), chosen, list(METRICS), sel.samples, writer)
        side.per_case = {}  # (name, scenario) -> samples per repeat
        names = [*sel.variants, *(PEER_PREFIX + p for p in sel.peers)]
        total = len(chosen) * len(names) * len(side.metrics) * sel.repeats
        bar = _progress(progress, total, f"{sel.suite} on {header['environment'].get('gpu')}")
        with bar:
            for scenario in chosen:
                cases = side.prepare(scenario, progress=None)
                cases += peer_cases.attach(side, scenario, sel.peers, cases)
                for case in cases:
                    if case.fn is not None:
                        call_ms = _call_ms(case.fn)
                        if call_ms > sel.max_call_ms:
                            too_slow(case, call_ms, sel.max_call_ms, writer)
                            continue
                        side.per_case[(case.variant, case.scenario)] = samples_for(
                            call_ms, sel.budget_ms, sel.samples)
                keys = {(n, scenario.name, m) for n in names for m in side.metrics}
                side.rounds(range(sel.repeats), seed=lambda r, name=scenario.name: zlib.crc32(
                    f"nightly {r} {name}".encode()), only=keys, done=done, step=lambda r, what: bar.advance())
                side.recheck(scenario)  # a wrong output is recorded: asv shows the error, not the number
                bar.finish_scenario(len(names) * len(side.metrics) * sel.repeats)
                side.release(scenario)
                peer_cases.detach(side, scenario, sel.peers)
                del cases
                if on_gpu():
                    torch.cuda.empty_cache()
    from perf import fingerprint

    fingerprint.write_end(out, header["environment"])  # clocks as the measuring ends, beside `out`
    return out


class _Bar:
    """rich progress over (case, metric, repeat) steps; quiet when asked (a GPU's worker)."""

    def __init__(self, enabled: bool, total: int, title: str):
        self.enabled, self.total, self.title = enabled, total, title
        self.done_in_scenario = 0

    def __enter__(self):
        if self.enabled:
            from rich.progress import Progress

            self.progress = Progress(transient=False)
            self.progress.__enter__()
            self.task = self.progress.add_task(self.title, total=self.total)
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.__exit__(*exc)

    def advance(self) -> None:
        self.done_in_scenario += 1
        if self.enabled:
            self.progress.advance(self.task)

    def finish_scenario(self, planned: int) -> None:
        """Skipped cases have no steps: advance past them so the bar reaches its total."""
        if self.enabled and planned > self.done_in_scenario:
            self.progress.advance(self.task, planned - self.done_in_scenario)
        self.done_in_scenario = 0


def _progress(enabled: bool, total: int, title: str) -> _Bar:
    return _Bar(enabled, total, title)
