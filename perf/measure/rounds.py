"""Rounds: every ready case and metric timed once per round, in a shuffled order.

A `Side` is this process's kernels set up for a list of scenarios (perf/measure/cases.py);
a round times every selected case and metric once, in a shuffled order, and appends one
record per (variant, scenario, metric) to a results writer (perf/results.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from perf import vendor as vendor_mod
from perf.measure.cases import Case, make_case, time_case, usable_metrics


class Side:
    """This process's kernels set up for a list of scenarios; measures rounds."""

    def __init__(self, kernels, variants: list[str], scenarios: list, metrics: list[str],
                 samples: int, writer, warmup: int = 3, budget_ms: float | None = None):
        self.kernels = kernels
        self.variants = variants
        self.scenarios = scenarios
        self.metrics = usable_metrics(metrics)
        self.samples = samples
        self.budget_ms = budget_ms
        self.warmup = warmup
        self.writer = writer
        self.device = "cuda" if vendor_mod.on_gpu() else "cpu"
        self.cases: dict[tuple[str, str], Case] = {}

    def prepare(self, scenario, progress: Callable[[str], None] | None = None) -> list[Case]:
        cases = []
        batch = None
        for v in self.variants:
            key = (v, scenario.name)
            if key not in self.cases:
                if batch is None:
                    batch = self._build(scenario)
                case = make_case(self.kernels, v, scenario, self.device, batch)
                self.cases[key] = case
                if case.skip is not None and self.writer is not None:
                    self.writer.skip(variant=v, scenario=scenario.name, reason=case.skip, kind=case.kind)
                if progress:
                    progress(f"{v} {scenario.name}")
            cases.append(self.cases[key])
        return cases

    def _build(self, scenario):
        try:
            from kernels.batch import build_batch

            return build_batch(scenario.spec(), self.device)
        except Exception:  # make_case records the reason per variant
            return None

    def release(self, scenario) -> None:
        for v in self.variants:
            self.cases.pop((v, scenario.name), None)

    def keys(self) -> list[tuple[str, str, str]]:
        return [(c.variant, c.scenario, m) for c in self.cases.values() if c.fn is not None
                for m in self.metrics if m not in c.broken]

    def measure(self, case: Case, metric: str, repeat: int) -> float:
        samples = time_case(case, metric, self.samples, self.budget_ms, self.warmup)
        self.writer.record(variant=case.variant, scenario=case.scenario, metric=metric, repeat=repeat,
                           samples=samples, config=case.config, digest=case.digest)
        return samples.median

    def round(self, repeat: int, seed: int, only: set | None = None, done: set | None = None,
              step: Callable[[str], None] | None = None) -> int:
        """Time every ready case and metric once, in a shuffled order; returns how many."""
        keys = [k for k in self.keys() if (only is None or k in only)
                and (done is None or (*k, repeat) not in done)]
        random.Random(seed).shuffle(keys)
        for variant, scenario, metric in keys:
            case = self.cases[(variant, scenario)]
            try:
                self.measure(case, metric, repeat)
            except Exception as e:  # e.g. graph capture unsupported by this variant
                msg = f"{metric}: {type(e).__name__}: {e}".splitlines()[0][:300]
                self.writer.skip(variant=variant, scenario=scenario, reason=msg, kind="error")
                case.broken.add(metric)
            if step:
                step(f"{variant} {scenario} {metric}")
        return len(keys)
