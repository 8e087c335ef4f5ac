"""One process of the A/B gate: base and head side by side, in pairs, on the same tensors.

`python -m perf.latency.worker` (started by perf/latency/ab.py, one process after another)
loads the base checkout's `kernels` and the head's under two aliases (perf/checkout.py),
then scenario by scenario:

1. builds the batch once, with the head's `kernels.batch`: both sides get the very same
   input tensors (each its own output buffer);
2. prepares every variant on each side with that side's modules active: each side is the
   measuring stage's `Side` (perf/measure/rounds.py; `make_case` of perf/measure/cases.py:
   validated once, compiled once, checked against the reference, a case it cannot run
   recorded) given the pair's batch and reference instead of building its own;
3. fixes, per (variant, metric), one timing plan for both sides (calls per sample, spin:
   perf/measure/timing.py), so both are timed identically;
4. runs `repeats` rounds; a round times every (variant, metric) pair once per side, the
   pairs in a shuffled order and the two sides in alternating order (base first in half of
   the rounds, head first in the other half: ABBA across rounds), so drift and order
   effects cancel in the paired ratio. Each side's modules are swapped in around its half,
   outside the timed region. The rounds are the measuring stage's one loop
   (perf/measure/rounds.py `interleave`), each half one repeat of `time_case`.
5. checks every output (perf/measure/check.py): each side's before timing (a wrong side is
   not timed) and after its rounds, against the fp32 reference on the same tensors, and
   head's against base's; a wrong one is recorded in that side's file as an error whose
   reason starts with "wrong output", which the gate's verdict turns into `wrong`.

With `--kernel-times` (the gate's re-measures) each case's last round is followed, outside
its timed region, by a per-kernel profile of both sides' timed callables on the same tensors
(perf/why.py `kernel_times`), written on that round's records (field `kernel_times`, each
side's own times) for the why section.

With `--compile-only` (the gate's compile-ahead phase, perf/latency/ab.py `compile_ahead`) the
process prepares every case of its scenarios on both sides (step 2: each kernel compiled into
Triton's disk cache by the very call the timed processes make, the output checked) and records
nothing: several such processes run at once before the first timed one, so its compiles are
spread over the runner's CPUs instead of paid one after another.

With `--side base|head` (the toolchain A/B, perf/latency/ab.py) the process loads and
measures that one side only: two Tritons cannot share a process, so each process runs one
side under its own Triton and the rounds are that side's alone (position 0).

The worker's command line is `Job` (its flags written by `Job.argv`, read by `_parser`).
Records are appended to the gate's two results files (`base.jsonl`, `head.jsonl` in the
gate's --out; perf/results.py), each measurement tagged with its round (`repeat`, numbered
from `--first-repeat` so rounds of all processes are distinct), its position in the pair and
this process's id, by which perf/latency/ab.py pairs them. The last protocol line, `done`,
tells the gate the process is complete; rounds of a process that never said so are ignored
(the gate measures that process again when resumed).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import json
import os
import random
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field, fields

from perf import checkout, validate
from perf import files as files_mod
from perf import vendor as vendor_mod
from perf.errors import ConfigError
from perf.measure import cases as measure
from perf.measure import check, rounds

PROTOCOL = "@@perf "  # prefix of a worker's protocol lines on stdout (perf/latency/ab.py reads them)
SIDES = ("base", "head")
ALIASES = {"base": "kernels_base", "head": "kernels_head"}
PROGRESS_EVERY_S = 10.0  # a protocol line at least this often (the parent prints progress)


@dataclass(frozen=True)
class Job:
    """What one measuring process is asked to do: the worker's options (`_parser`), which
    `argv` writes as its command line (the gate builds one per process, perf/latency/ab.py)."""

    base_from: str  # checkout whose kernels/ is the base side
    head_from: str  # checkout whose kernels/ is the head side
    out_dir: str  # the gate's --out: appends to base.jsonl, head.jsonl
    suite: str
    repeats: int  # paired rounds
    samples: int
    first_repeat: int = 0  # number of this process's first round
    scenarios: str | None = None
    variants: str | None = None
    metrics: str = "eager,graph"
    budget_ms: float | None = None
    warmup: int = 3
    seed: int = 0
    batch_cache: str | None = None  # directory of saved batches shared by the processes
    keys: str | None = None  # JSON file: [[variant, scenario, metric], ...] to measure
    header: dict = field(default_factory=dict)  # added to both results headers
    kernel_times: bool = False
    compile_only: bool = False
    side: str | None = None  # base | head: this side only (a toolchain A/B)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Job:
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        return cls(**{**values, "header": json.loads(values["header"])})

    def argv(self) -> list[str]:
        """`python -m perf.latency.worker` with every option of this job spelled."""
        from perf.latency.request import options_argv

        every = tuple(f.name for f in fields(self))
        return [sys.executable, "-m", "perf.latency.worker", *options_argv(self, every)]


def emit(event: dict) -> None:
    sys.stdout.write(PROTOCOL + json.dumps(event) + "\n")
    sys.stdout.flush()


def files(out_dir: str) -> dict[str, str]:
    return {s: os.path.join(out_dir, f"{s}.jsonl") for s in SIDES}


def load_keys(path: str) -> set[tuple[str, str, str]]:
    """A keys file of the gate (retry<N>-keys.json): the (variant, scenario, metric) cases a
    re-measure measures; ConfigError naming the file and entry when it is not one."""
    doc = files_mod.load_json(path, "a keys file", "remove the gate's --out folder and run the gate again",
                              expect=list)
    for i, k in enumerate(doc):
        if not (isinstance(k, list) and len(k) == 3 and all(isinstance(x, str) for x in k)):
            raise ConfigError(f"{path}: entry {i} is {str(k)[:60]}, expected [variant, scenario, metric]; "
                              f"remove "
                              f"the gate's --out folder and run the gate again")
    return {tuple(k) for k in doc}


def side_order(repeats: int, seed: int) -> list[tuple[str, str]]:
    """Which side goes first in each round: half base first, half head first, shuffled
    (balanced within every process, so an order effect cancels in the mean)."""
    orders = [SIDES] * ((repeats + 1) // 2) + [SIDES[::-1]] * (repeats // 2)
    random.Random(seed).shuffle(orders)
    return orders


class PairedSide(rounds.Side):
    """One side of a paired process: the measuring stage's Side, on the pair's batch and
    reference output (both sides read the very same tensors) instead of its own."""

    def __init__(self, kernels, variants: list[str], scenario, job: Job, writer, shared: tuple):
        super().__init__(kernels, variants, [scenario], job.metrics.split(","), job.samples, writer,
                         job.warmup, job.budget_ms)
        self.shared = shared  # (batch, expected): the scenario's, built once for both sides

    def _build(self, scenario):
        return self.shared[0]

    def _reference(self, batch):
        return self.shared[1]


class Pairs:
    """Both sides of one process, scenario by scenario (module docstring)."""

    def __init__(self, job: Job, process: str, keys: set | None):
        self.job = job
        self.writers: dict = {}  # side -> its results writer (none in a compile-only process)
        self.process = process
        self.keys = keys  # (variant, scenario, metric) to measure; None: all
        self.measured = (job.side,) if job.side else SIDES  # one side: a toolchain A/B's process
        self.sides = {s: checkout.load_side(getattr(job, f"{s}_from"), ALIASES[s]) for s in self.measured}
        self.batch_side = "head" if "head" in self.sides else self.measured[0]
        self.device = "cuda" if vendor_mod.on_gpu() else "cpu"
        self.metrics = validate.usable_metrics(job.metrics.split(","))
        self.last_emit = 0.0

    def variants(self) -> list[str]:
        if self.job.variants:
            return [v.strip() for v in self.job.variants.split(",") if v.strip()]
        seen: list[str] = []
        for s in ("head", "base"):
            for v in getattr(self.sides[s].kernels, "VARIANTS", {}) if s in self.sides else ():
                if v not in seen:
                    seen.append(v)
        return seen

    def _batch(self, scenario):
        """The scenario's batch, built by the head's kernels.batch, or loaded from the gate's
        batch cache (the same tensors, saved by an earlier process: building on the CPU from
        the seed is the slowest part of preparing a process)."""
        with self.sides[self.batch_side].active():
            from kernels import batch as kb

            try:
                spec = scenario.spec()
                path = None
                if self.job.batch_cache:
                    source = hashlib.sha256(inspect.getsource(kb).encode()).hexdigest()[:12]
                    path = os.path.join(self.job.batch_cache, f"{spec.digest()}-{source}.pt")
                    if os.path.exists(path):
                        import torch

                        saved = torch.load(path, map_location=self.device, weights_only=False)
                        return kb.PagedBatch(spec, *saved["args"], options=saved["options"])
                batch = kb.build_batch(spec, self.device)
                if path:
                    import torch

                    buffer = io.BytesIO()
                    torch.save({"args": list(batch.args()), "options": batch.options}, buffer)
                    files_mod.write_bytes(path, buffer.getvalue())
                return batch
            except Exception:  # make_case records the reason per variant
                return None

    def prepare(self, scenario, variants: list[str]) -> dict[str, dict]:
        """Both sides' cases of the scenario's variants, those the keys name when there are keys
        (a plan's or a re-measure's: the others are not timed, so not compiled either)."""
        if self.keys is not None:
            variants = [v for v in variants if any(k[0] == v and k[1] == scenario.name for k in self.keys)]
        batch = self._batch(scenario)
        expected = None
        if batch is not None:
            with self.sides[self.batch_side].active():
                try:
                    expected = measure.reference_for(batch)
                except Exception:  # make_case computes it again per side and records why it failed
                    expected = None
        cases: dict[str, dict] = {}
        for s in self.measured:
            side = PairedSide(self.sides[s].kernels, variants, scenario, self.job, self.writers.get(s),
                              (batch, expected))
            with self.sides[s].active():
                cases[s] = {case.variant: case for case in side.prepare(scenario)}
        self._head_against_base(cases, scenario.name, "before timing")
        return cases

    def _head_against_base(self, cases: dict, scenario: str, when: str, metric: str | None = None,
                           timed: set | None = None) -> None:
        """Head's output against base's (both on the same tensors, their last calls; after timing
        those of `metric` in `timed` only): beyond the tolerances, an error on head's side. Not where
        one side rounds q to e4m3 and the other does not: they then differ by that rounding, which no
        fixed tolerance holds (perf/measure/check.py), and each was checked against its reference."""
        if len(self.measured) != 2 or "head" not in self.writers:
            return
        for v, head in cases["head"].items():
            if timed is not None and (v, metric) not in timed:
                continue
            base = cases["base"][v]
            if head.out is None or base.out is None or head.fn is None or base.fn is None:
                continue
            if check.rounds_q_to_e4m3(head.config) != check.rounds_q_to_e4m3(base.config):
                continue  # q rounded to e4m3 on one side only: each was held to its own reference
            # e4m3 operands on either side (its plan): as far from the other side as from the reference
            tolerance = check.tolerance(base.out.dtype, [*head.config, *base.config])
            found = check.compare(head.out, base.out, *tolerance)
            if not found.ok:
                self.writers["head"].skip(variant=v, scenario=scenario, kind="error",
                                          reason=check.wrong_reason(found, when, metric, "base's output"))

    def recheck(self, cases: dict, scenario: str, timed: set) -> None:
        """After the rounds: every timed (variant, metric) output checked again, metric by metric
        (a case's output buffer holds its last call's), each metric's then head against base."""
        for metric in self.metrics:
            for s in self.measured:
                with self.sides[s].active():
                    for v, case in cases[s].items():
                        if metric in case.broken or (v, metric) not in timed:
                            continue
                        for m, found in measure.recheck(case, [metric]):
                            if not found.ok:
                                self.writers[s].skip(variant=v, scenario=scenario, kind="error",
                                                     reason=check.wrong_reason(found, "after timing", m))
            self._head_against_base(cases, scenario, "after timing", metric, timed)

    def _plan(self, cases: dict, variant: str, scenario: str, metric: str):
        plans = []
        for s in self.measured:
            try:
                with self.sides[s].active():
                    plans.append(measure.plan_case(cases[s][variant], metric, self.job.warmup))
            except Exception as e:  # e.g. graph capture unsupported on one side
                self._fail(cases, s, variant, scenario, metric, e)
                return None
        from perf.measure import timing

        return timing.merge_plans(*plans) if len(plans) == 2 else plans[0]

    def _fail(self, cases: dict, side: str, variant: str, scenario: str, metric: str, e: Exception) -> None:
        msg = f"{metric}: {type(e).__name__}: {e}".splitlines()[0][:300]
        self.writers[side].skip(variant=variant, scenario=scenario, reason=msg, kind="error")
        for s in self.measured:
            cases[s][variant].broken.add(metric)

    def _write_profiled(self, cases: dict, item: tuple[str, str], records: dict) -> None:
        """An item's last-round records, each with its side's device time per kernel (field
        `kernel_times`, perf/why.py `side_field`): both sides' timed callables profiled on the
        tensors they were timed on, after the scenario's timed rounds, outside any timed region.
        A side that failed this round leaves no profile: its records are written as they are."""
        from perf import why

        v, m = item
        result = None
        if len(records) == 2 and all(m not in cases[s][v].broken for s in self.measured):
            calls = {}
            for s in SIDES:
                fn = measure.timed_callable(cases[s][v], m)

                def call(side=self.sides[s], fn=fn):
                    with side.active():
                        fn()

                calls[s] = call
            try:
                result = why.kernel_times(calls)
            except Exception as e:  # a profiler that breaks is said, never a failure of the measurement
                result = {"skipped": f"profiling failed: {type(e).__name__}: {e}".splitlines()[0][:300]}
        for s, record in records.items():
            extra = {"kernel_times": why.side_field(result, s)} if result is not None else {}
            self.writers[s].record(**record, **extra)

    def _release(self, cases: dict) -> None:
        """This scenario's batch and outputs, before the next one's."""
        cases.clear()
        if self.device == "cuda":
            import torch

            torch.cuda.empty_cache()

    def compile_only(self, scenario, variants: list[str]) -> None:
        """Prepare the scenario's cases on both sides (each kernel compiled, each output checked)
        and drop them: the compile-ahead phase of the gate."""
        self._release(self.prepare(scenario, variants))

    def scenario(self, scenario, variants: list[str]) -> int:
        """The scenario's rounds: every timed (variant, metric) once per side and round; then its
        profiles (re-measures) and the check of every timed output. Returns the items timed."""
        cases = self.prepare(scenario, variants)
        items = [(v, m) for v in variants for m in self.metrics
                 if (self.keys is None or (v, scenario.name, m) in self.keys)
                 and all(cases[s][v].fn is not None for s in self.measured)]
        plans = {(v, m): self._plan(cases, v, scenario.name, m) for v, m in items}
        # item -> its last round's records, written once its kernels are profiled after the scenario's
        # rounds (never between two timed items: a profiler's session is not left inside the rounds)
        held: dict = {}
        measured = self._rounds(cases, scenario.name, items, plans, held)
        for item, records in held.items():
            self._write_profiled(cases, item, records)
        self.recheck(cases, scenario.name, set(items))
        self._release(cases)
        return measured

    def _rounds(self, cases: dict, scenario: str, items: list, plans: dict, held: dict) -> int:
        """`repeats` rounds of the items (perf/measure/rounds.py `interleave`): shuffled from one
        stream per process and scenario, both sides in each round in the balanced order."""
        job = self.job
        rng = random.Random(zlib.crc32(f"{job.seed} {self.process} {scenario}".encode()))
        orders = side_order(job.repeats, job.seed) if len(self.measured) == 2 else \
            [self.measured] * job.repeats
        profiling = job.kernel_times and len(self.measured) == 2

        def order(r: int, pairs: list) -> list:  # one stream of shuffles, round after round
            rng.shuffle(pairs)
            return pairs

        def time_one(item, s: str, position: int, r: int) -> None:
            v, m = item
            case = cases[s][v]
            with self.sides[s].active():
                samples = measure.time_case(case, m, job.samples, job.budget_ms, job.warmup,
                                            plans.get((v, m)))
            record = dict(variant=v, scenario=scenario, metric=m, repeat=job.first_repeat + r,
                          samples=samples, config=case.config, digest=case.digest, position=position,
                          process=self.process, **case.work)
            if profiling and r == job.repeats - 1:
                held.setdefault(item, {})[s] = record
            else:
                self.writers[s].record(**record)

        def progress(item, r: int) -> None:
            now = time.monotonic()
            if now - self.last_emit > PROGRESS_EVERY_S:
                emit({"event": "step", "what": f"{scenario} round {r + 1}/{job.repeats}"})
                self.last_emit = now

        broken = {(v, m) for v, m in items if m in cases[self.measured[-1]][v].broken}  # planning failed
        return rounds.interleave(
            items, job.repeats, time_one, order=order, sides=lambda r: orders[r], broken=broken,
            failed=lambda item, s, e: self._fail(cases, s, item[0], scenario, item[1], e),
            after_item=progress)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m perf.latency.worker",
                                description="internal: one process of the latency A/B gate")
    p.add_argument("--base-from", required=True, help="checkout whose kernels/ is the base side")
    p.add_argument("--head-from", required=True, help="checkout whose kernels/ is the head side")
    p.add_argument("--out-dir", required=True, help="the gate's --out: appends to base.jsonl, head.jsonl")
    p.add_argument("--first-repeat", type=int, default=0, help="number of this process's first round")
    p.add_argument("--suite", required=True)
    p.add_argument("--scenarios", default=None)
    p.add_argument("--variants", default=None)
    p.add_argument("--metrics", default="eager,graph")
    p.add_argument("--repeats", type=int, required=True, help="paired rounds")
    p.add_argument("--samples", type=int, required=True)
    p.add_argument("--budget-ms", type=float, default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-cache", default=None, help="directory of saved batches shared by the processes")
    p.add_argument("--keys", default=None, help="JSON file: [[variant, scenario, metric], ...] to measure")
    p.add_argument("--header", default="{}", help="JSON object added to both results headers")
    p.add_argument("--kernel-times", action="store_true",
                   help="after a scenario's timed rounds, profile both sides per kernel (perf/why.py "
                        "kernel_times) onto each case's last-round records (the gate's re-measures)")
    p.add_argument("--compile-only", action="store_true",
                   help="prepare (compile) each case on both sides, record nothing (compile-ahead)")
    p.add_argument("--side", default=None, choices=SIDES,
                   help="measure this side only (a toolchain A/B: one Triton per process)")
    return p


def _scenarios(job: Job, keys: set | None) -> list:
    """The job's scenarios (those the keys name, when there are keys), each within the batch budget."""
    from perf import scenarios

    chosen = scenarios.select(scenarios.suite(job.suite), job.scenarios)
    if keys is not None:
        chosen = [s for s in chosen if any(k[1] == s.name for k in keys)]
    footprint = max((s.footprint_bytes() for s in chosen), default=0)
    if footprint > measure.BATCH_BUDGET_BYTES:
        raise ConfigError(f"a batch of suite {job.suite!r} needs {footprint / 2**30:.1f} GiB, more than "
                          f"PERF_BATCH_BUDGET_GB; narrow it with --scenarios or raise the budget")
    return chosen


def _open_writers(pairs: Pairs, job: Job, chosen: list) -> None:
    """Each measured side's results file, its header naming the side, suite and settings."""
    from perf import results

    for s in pairs.measured:
        with pairs.sides[s].active():
            header = {"environment": results.environment(pairs.sides[s].root), "suite": job.suite,
                      "side": s, "scenarios": {sc.name: sc.spec().digest() for sc in chosen},
                      "metrics": job.metrics.split(","), "repeats": job.repeats,
                      "samples": job.samples, **job.header}
        pairs.writers[s] = results.ResultsWriter(files(job.out_dir)[s], header, resume=True)


def main(argv: list[str] | None = None) -> int:
    job = Job.from_args(_parser().parse_args(argv))
    vendor_mod.interpreter_without_gpu()
    keys = load_keys(job.keys) if job.keys else None
    chosen = _scenarios(job, keys)
    process = uuid.uuid4().hex[:12]
    pairs = Pairs(job, process, keys)
    try:
        if not job.compile_only:  # a compile-only process records nothing
            _open_writers(pairs, job, chosen)
        variants = pairs.variants()
        emit({"event": "ready", "process": process, "variants": variants,
              "scenarios": [s.name for s in chosen]})
        total = 0
        for i, scenario in enumerate(chosen):
            if job.compile_only:
                pairs.compile_only(scenario, variants)
            else:
                total += pairs.scenario(scenario, variants)
            emit({"event": "scenario", "done": i + 1, "of": len(chosen), "what": scenario.name})
        emit({"event": "done", "process": process, "pairs": total})
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    finally:
        for w in pairs.writers.values():
            w.close()
    return 0


if __name__ == "__main__":  # a process of the latency gate: its parent reports an interrupt
    from perf.process import entry

    entry(main, internal=True)
