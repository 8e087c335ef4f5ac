"""Measure one side: kernels over a suite, into a results file.

A `Case` is one (variant, scenario) made ready outside any timed region: the batch built
on the device, the public entry (`VARIANTS[name]`, `kernels.paged_attention` for
static_grid) called once with value checks where the variant takes `check_values`
(validation is not part of what is timed, and an older base without that hint validates
the way it always did), compiled by that call, its output checked for unwritten (NaN)
values, the launch configuration it plans recorded (`Variant.plan`, `KernelLaunch.config()`).
What is timed is exactly what a user calls: the public entry with a preallocated `out=` and
the host-side hints a serving engine passes (`max_seqlen_q`, `max_seqlen_k`, where the
variant takes them), eagerly (`eager`) and as a captured CUDA/HIP graph (`graph`), both as
device time (perf/latency/timing.py). A round times every selected case and metric once, in
a shuffled order, and appends one record per (variant, scenario, metric).

`python -m perf run` uses it in one process (rounds back to back, resumable); the A/B gate
uses `make_case` and `time_case` for both sides in one process (perf/latency/worker.py).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from perf import checkout, files, validate
from perf import vendor as vendor_mod
from perf.errors import ConfigError, NothingMeasured

PROTOCOL = "@@perf "  # prefix of a worker's protocol lines on stdout
BATCH_BUDGET_BYTES = int(float(os.environ.get("PERF_BATCH_BUDGET_GB", "24")) * 2**30)


@dataclass
class Case:
    variant: str
    scenario: str
    digest: str  # BatchSpec.digest() of the batch the case runs on
    fn: Callable[[], object] | None  # the public call; None when skipped
    config: list[dict] = field(default_factory=list)
    skip: str | None = None  # reason the variant cannot run the scenario
    kind: str = "skip"  # "skip" (unsupported feature), "error" (it broke) or "missing"
    graph: object = None  # captured CUDA/HIP graph, made on first use
    broken: set = field(default_factory=set)  # metrics that raised once: recorded, not retried
    keep: tuple = ()  # the batch and output the call points into
    plans: dict = field(default_factory=dict)  # metric -> timing.Plan


def takes(variant, option: str) -> bool:
    """Whether the variant's public entry takes `option` (a hint, or a keyword of `plan`)."""
    if option in getattr(variant, "hints", ()):
        return True
    try:
        return option in inspect.signature(variant.plan).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def host_hints(variant, spec) -> dict:
    """What a serving engine knows on the host and passes (vLLM does), where the variant takes it."""
    known = {"max_seqlen_q": max(spec.query_lens), "max_seqlen_k": max(spec.kv_lens)}
    return {k: v for k, v in known.items() if takes(variant, k)}


def make_case(kernels, variant_name: str, scenario, device: str, batch=None) -> Case:
    """Validate, compile and check one (variant, scenario); `batch` is shared by the variants.

    Call it with the `kernels` of the side being prepared active (perf/checkout.py)."""
    from kernels.batch import build_batch

    spec = scenario.spec()
    digest = spec.digest()
    variants = getattr(kernels, "VARIANTS", {})
    if variant_name not in variants:
        return Case(variant_name, scenario.name, digest, None,
                    skip=f"variant {variant_name!r} is not registered in this checkout", kind="missing")
    variant = variants[variant_name]
    try:
        batch = batch if batch is not None else build_batch(spec, device)
        digest = batch.spec.digest() if hasattr(batch, "spec") else digest
        out = batch.new_output()
        args, options = batch.args(), dict(batch.options, **host_hints(variant, batch.spec))
        check = {"check_values": True} if takes(variant, "check_values") else {}
        variant(*args, out=out, **options, **check)  # validates the batch once, compiles
        config = []
        if hasattr(variant, "plan"):
            _, launches = variant.plan(*args, out=out, **options)
            config = [launch.config() for launch in launches]

        def fn(variant=variant, args=args, out=out, options=options):
            variant(*args, out=out, **options)

        import torch

        if not bool(torch.isfinite(out).all()):
            return Case(variant_name, scenario.name, digest, None,
                        skip="output has NaN/Inf (unwritten or wrong): not timed", kind="error")
    except NotImplementedError as e:
        return Case(variant_name, scenario.name, digest, None, skip=str(e))
    except Exception as e:  # a broken kernel is a finding, not a crash of the harness
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return Case(variant_name, scenario.name, digest, None, skip=msg, kind="error")
    return Case(variant_name, scenario.name, digest, fn, config, keep=(batch, out))


def timed_callable(case: Case, metric: str):
    """What `metric` times of a ready case: the call, or its captured graph's replay."""
    from perf.latency import timing

    if metric == "graph":
        if case.graph is None:
            case.graph = timing.capture_graph(case.fn)
        return case.graph.replay
    return case.fn


def plan_case(case: Case, metric: str, warmup: int = 3):
    """Warm the case's metric up and fix how it is timed (timing.plan); None off the GPU."""
    from perf.latency import timing

    if not vendor_mod.on_gpu():
        return None
    if metric not in case.plans:
        case.plans[metric] = timing.plan(timed_callable(case, metric), warmup)
    return case.plans[metric]


def time_case(case: Case, metric: str, samples: int, budget_ms: float | None, warmup: int = 3,
              plan=None):
    """One repeat of `metric` on a ready case: its Samples."""
    from perf.latency import timing

    fn = timed_callable(case, metric)
    if metric == "graph":
        return timing.time_graph(case.fn, samples=samples, warmup=warmup, budget_ms=budget_ms,
                                 graph=case.graph, plan_=plan or plan_case(case, metric, warmup))
    if not vendor_mod.on_gpu():  # wall clock (interpreter): make_case warmed the call up already
        return timing.time_eager(fn, samples=samples, warmup=1)
    return timing.time_eager(fn, samples=samples, warmup=warmup, budget_ms=budget_ms,
                             plan_=plan or plan_case(case, metric, warmup))


def usable_metrics(metrics: list[str]) -> list[str]:
    """The metrics this machine can measure (graph replay needs a GPU)."""
    return [m for m in metrics if m == "eager" or vendor_mod.on_gpu()]


def require_metrics(metrics: list[str], option: str = "--metrics") -> list[str]:
    """`usable_metrics`, refused when none is left: a run that could measure nothing must not start."""
    usable = usable_metrics(metrics)
    if not usable:
        raise NothingMeasured(f"{option} {','.join(metrics)}: graph replay needs a GPU (found none); pass "
                              f"{option} eager to run in Triton's interpreter")
    return usable


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


# Without a GPU the kernels run in Triton's interpreter, whose wall clock measures nothing:
# a run there is a self-test of the harness, so it takes few repeats and samples unless told.
INTERPRETER_REPEATS, INTERPRETER_SAMPLES = 2, 3


def _settings(args, thresholds, vendor: str | None) -> tuple[int, int]:
    stats = thresholds.vendor(vendor).statistics if vendor else None
    repeats = args.repeats if args.repeats is not None else (stats.repeats if stats else INTERPRETER_REPEATS)
    samples = args.samples if args.samples is not None else (stats.samples if stats else INTERPRETER_SAMPLES)
    if repeats < 1 or samples < 1:
        raise ConfigError("--repeats and --samples must be >= 1")
    return repeats, samples


def _header(args, kernels_root: str, variants, scenarios, repeats, samples, side=None) -> dict:
    from perf import results

    return {"environment": results.environment(kernels_root), "suite": args.suite, "side": side,
            "variants": variants, "scenarios": {s.name: s.spec().digest() for s in scenarios},
            "metrics": args.metrics.split(","), "repeats": repeats, "samples": samples}


def run_command(args: argparse.Namespace) -> int:
    """`python -m perf run`: measure a suite with this checkout's kernels, and with `--peers`
    vendor libraries beside them in the same rounds (perf.peers)."""
    from rich.progress import Progress

    from perf import peers as peers_mod
    from perf import results, thresholds

    files.check_output(args.out, "--out")
    th = thresholds.load_thresholds(args.thresholds)
    vendor = vendor_mod.resolve(args.vendor, cpu_default=None)
    if vendor is not None:
        th.vendor(vendor)
    repeats, samples = _settings(args, th, vendor)
    root = checkout.ROOT
    vendor_mod.interpreter_without_gpu()
    kernels = checkout.import_kernels(root)
    chosen = validate.scenarios(args.suite, args.scenarios)
    variants = validate.variants(args.variants, kernels.VARIANTS)
    args.metrics = ",".join(validate.metrics(args.metrics))
    require_metrics(args.metrics.split(","))
    peers, absent = peers_mod.resolve(args.peers, vendor)
    if args.peers == "auto" and vendor is None:
        print("note: --peers auto: no GPU here, so no vendor library is measured", flush=True)
    for p, reason in absent.items():
        print(f"note: peer {p} is not measured here: {reason}", flush=True)
    header = _header(args, root, variants, chosen, repeats, samples)
    header.update(peers=list(peers), peers_absent=absent)
    names = [*variants, *(peers_mod.PREFIX + p for p in peers)]
    with results.ResultsWriter(args.out, header, resume=not args.no_resume,
                               force=getattr(args, "force", False)) as writer:
        done = writer.done()
        budget = th.vendor(vendor).statistics.sample_budget_ms if vendor else None
        side = Side(kernels, variants, chosen, args.metrics.split(","), samples, writer, budget_ms=budget)
        total = len(chosen) * len(names) * len(side.metrics) * repeats
        with Progress(transient=False) as progress:
            task = progress.add_task(f"{args.suite} on {header['environment'].get('gpu')}", total=total)
            said = [time.monotonic()]

            def step(where: str, what: str, every: float = 10.0) -> None:  # plain lines where rich draws none
                if not progress.console.is_terminal and time.monotonic() - said[0] >= every:
                    print(f"perf run: {where}: {what}", flush=True)
                    said[0] = time.monotonic()
            for i, scenario in enumerate(chosen, 1):
                step(f"scenario {i}/{len(chosen)}", f"{scenario.name}: building the batch, planning", every=0)
                cases = side.prepare(scenario)
                peers_mod.attach(side, scenario, peers, cases)
                keys = {(n, scenario.name, m) for n in names for m in side.metrics}
                for r in range(repeats):
                    side.round(r, seed=zlib.crc32(f"{r} {scenario.name}".encode()), only=keys, done=done,
                               step=functools.partial(step, f"scenario {i}/{len(chosen)}, repeat {r + 1}"))
                progress.advance(task, len(names) * len(side.metrics) * repeats)
                side.release(scenario)
                peers_mod.detach(side, scenario, peers)
        measured = writer.count()
    if not measured:
        raise NothingMeasured(f"every case was skipped or failed; {args.out} holds only the lines saying why")
    print(f"wrote {args.out} ({measured} measurements)")
    return 0
