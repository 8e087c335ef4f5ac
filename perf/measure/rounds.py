"""Rounds: the one measuring loop, and a side's cases timed in it.

`interleave` is the loop every measurement runs in: rounds, each visiting every item once
in an order of the caller's (shuffled per round, one shuffled stream, rotated), each item's
sides in the round's order (one side, or base and head in a balanced ABBA order), warm-up
rounds that are not recorded, a failure recorded once and the item not timed again. Its
callers: `Side` below (`perf run`, the nightly's collect), the A/B gate's worker
(perf/latency/worker.py), `perf host-cost`'s alternation (perf/measure/host_cost.py) and
`perf tune`'s sweep (perf/tune.py); each passes its own order, sides, warm-up and what
timing one item means (device time of a case's call or graph replay, a host clock).

A `Side` is this process's kernels set up for a list of scenarios (perf/measure/cases.py);
its rounds time every selected case and metric once per round, in a shuffled order, and
append one record per (variant, scenario, metric) to a results writer (perf/results.py).
After its rounds, `recheck` checks every timed output again (perf/measure/check.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence

from perf import vendor as vendor_mod
from perf.measure import check
from perf.measure.cases import Case, make_case, recheck, reference_for, time_case
from perf.validate import usable_metrics


def interleave(items: Sequence[Hashable], rounds: int, time: Callable[[Hashable, object, int, int], object],
               *,
               order: Callable[[int, list], list], sides: Callable[[int], Sequence] = lambda i: (None,),
               warmup: int = 0, failed: Callable[[Hashable, object, Exception], None] | None = None,
               broken: set | None = None, after_item: Callable[[Hashable, int], None] | None = None,
               after_round: Callable[[int], None] | None = None) -> int:
    """`warmup` untimed rounds, then `rounds` timed ones (round index i < 0 while warming up).
    Round i visits `order(i, items)`; an item's sides run in `sides(i)`'s order, each as
    `time(item, side, position, i)`. An exception is `failed(item, side, exc)`'s to record (the
    item's other sides skip that round, and it is not timed again: `broken`, which may hold
    items broken before the loop); without `failed` it propagates. Returns how many items
    timed rounds visited."""
    broken = set() if broken is None else broken
    visited = 0
    for i in range(-warmup, rounds):
        for item in order(i, list(items)):
            if item in broken:
                continue
            for position, side in enumerate(sides(i)):
                try:
                    time(item, side, position, i)
                except Exception as e:
                    if failed is None:
                        raise
                    failed(item, side, e)
                    broken.add(item)
                    break
            visited += i >= 0
            if after_item is not None:
                after_item(item, i)
        if after_round is not None:
            after_round(i)
    return visited


def shuffled(seed: int, items: list) -> list:
    """`items` in the order random.Random(seed) shuffles them to."""
    random.Random(seed).shuffle(items)
    return items


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
        batch = expected = None
        for v in self.variants:
            key = (v, scenario.name)
            if key not in self.cases:
                if batch is None:
                    batch = self._build(scenario)
                    expected = self._reference(batch)
                case = make_case(self.kernels, v, scenario, self.device, batch, expected)
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

    @staticmethod
    def _reference(batch):
        try:
            return reference_for(batch)
        except Exception:  # make_case computes it again and records why it failed
            return None

    def recheck(self, scenario) -> list[tuple[Case, str, check.Check]]:
        """After the scenario's rounds: every timed output checked again (perf/measure/check.py);
        a wrong one is recorded as an error naming the metric and the max error. Returns those."""
        wrong = []
        for case in [c for c in self.cases.values() if c.scenario == scenario.name]:
            for metric, found in recheck(case, [m for m in self.metrics if m not in case.broken]):
                if not found.ok:
                    wrong.append((case, metric, found))
                    if self.writer is not None:
                        self.writer.skip(variant=case.variant, scenario=case.scenario, kind="error",
                                         reason=check.wrong_reason(found, "after timing", metric))
        return wrong

    def release(self, scenario) -> None:
        for v in self.variants:
            self.cases.pop((v, scenario.name), None)

    def keys(self) -> list[tuple[str, str, str]]:
        return [(c.variant, c.scenario, m) for c in self.cases.values() if c.fn is not None
                for m in self.metrics if m not in c.broken]

    def measure(self, case: Case, metric: str, repeat: int) -> float:
        samples = time_case(case, metric, self.samples, self.budget_ms, self.warmup)
        self.writer.record(variant=case.variant, scenario=case.scenario, metric=metric, repeat=repeat,
                           samples=samples, config=case.config, digest=case.digest, **case.work)
        return samples.median

    def rounds(self, repeats: Sequence[int], seed: Callable[[int], int], only: set | None = None,
               done: set | None = None, step: Callable[[int, str], None] | None = None) -> int:
        """Rounds numbered `repeats`: each times every ready case and metric once (those in
        `only`, not yet `done` for that repeat), shuffled by `seed(repeat)`; returns how many."""
        keys = [k for k in self.keys() if only is None or k in only]

        def order(i: int, items: list) -> list:
            todo = [k for k in items if done is None or (*k, repeats[i]) not in done]
            return shuffled(seed(repeats[i]), todo)

        def time(key, side, position: int, i: int) -> None:
            self.measure(self.cases[key[:2]], key[2], repeats[i])

        def failed(key, side, e: Exception) -> None:  # e.g. graph capture unsupported by this variant
            variant, scenario, metric = key
            msg = f"{metric}: {type(e).__name__}: {e}".splitlines()[0][:300]
            self.writer.skip(variant=variant, scenario=scenario, reason=msg, kind="error")
            self.cases[key[:2]].broken.add(metric)

        def after(key, i: int) -> None:
            if step:
                step(repeats[i], " ".join(key))
        return interleave(keys, len(repeats), time, order=order, failed=failed, after_item=after)

    def round(self, repeat: int, seed: int, only: set | None = None, done: set | None = None,
              step: Callable[[str], None] | None = None) -> int:
        """One round (`rounds`) numbered `repeat`, shuffled by `seed`."""
        told = (lambda r, what: step(what)) if step else None
        return self.rounds([repeat], lambda r: seed, only, done, told)
