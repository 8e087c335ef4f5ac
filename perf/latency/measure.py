"""Measure one side: this process's kernels over a suite, into a results file.

A `Case` is one (variant, scenario) made ready outside any timed region: the batch built
on the device, the launches planned (`Variant.plan`, whose `KernelLaunch.config()` is the
kernel configuration recorded), compiled by a warm-up call, checked for unwritten (NaN)
output, and for the graph metric captured once. A round times every selected case and
metric once, in a shuffled order, and appends one record per (variant, scenario, metric):
its samples are one repeat, and the repeat's median is what the statistics compare.

Two drivers use it: `python -m perf run` (one process, rounds back to back, resumable) and
`python -m perf worker`, one side of the A/B, which measures a round whenever the A/B
driver (perf/latency/ab.py) tells it to over stdin, so base and head rounds interleave.
The worker imports `kernels` from `--kernels-from` (the side's checkout) and the harness
from this checkout, so both sides are measured identically and differ only in the code
under test.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from perf import checkout
from perf import vendor as vendor_mod
from perf.errors import ConfigError

PROTOCOL = "@@perf "  # prefix of the worker's protocol lines on stdout
BATCH_BUDGET_BYTES = int(float(os.environ.get("PERF_BATCH_BUDGET_GB", "24")) * 2**30)  # per side


@dataclass
class Case:
    variant: str
    scenario: str
    digest: str  # BatchSpec.digest(): the batch is the same on both sides
    fn: Callable[[], object] | None  # the planned launches; None when skipped
    config: list[dict] = field(default_factory=list)
    skip: str | None = None  # reason the variant cannot run the scenario
    kind: str = "skip"  # "skip" (unsupported feature) or "error" (it broke)
    graph: object = None  # captured CUDA/HIP graph, made on first use
    broken: set = field(default_factory=set)  # metrics that raised once: recorded, not retried
    keep: tuple = ()  # the batch and output the launches point into


def _variant_names(kernels, wanted: str | None) -> list[str]:
    registered = list(getattr(kernels, "VARIANTS", {}))
    if not wanted:
        return registered
    return [v.strip() for v in wanted.split(",") if v.strip()]


def make_case(kernels, variant_name: str, scenario, device: str, batch=None) -> Case:
    """Plan, compile and check one (variant, scenario); `batch` is shared by the variants."""
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
        out = batch.new_output()
        if hasattr(variant, "plan"):
            out, launches = variant.plan(*batch.args(), out=out, **batch.options)
            config = [launch.config() for launch in launches]

            def fn(launches=launches):
                for launch in launches:
                    launch()
        else:  # an older kernels package without plans: time the whole call
            config = []

            def fn(variant=variant, batch=batch, out=out):
                variant(*batch.args(), out=out, **batch.options)
        fn()  # compiles; excluded from every measurement
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


class Side:
    """This process's kernels set up for a list of scenarios; measures rounds."""

    def __init__(self, kernels, variants: list[str], scenarios: list, metrics: list[str],
                 samples: int, writer, warmup: int = 3, budget_ms: float | None = None):
        from perf.latency import timing

        self.timing = timing
        self.kernels = kernels
        self.variants = variants
        self.scenarios = scenarios
        self.metrics = [m for m in metrics if m == "eager" or vendor_mod.on_gpu()]
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
        if metric == "graph":
            if case.graph is None:
                case.graph = self.timing.capture_graph(case.fn)
            samples = self.timing.time_graph(case.fn, samples=self.samples, warmup=self.warmup,
                                             budget_ms=self.budget_ms, graph=case.graph)
        else:
            samples = self.timing.time_eager(case.fn, samples=self.samples, warmup=self.warmup,
                                             budget_ms=self.budget_ms)
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


def _settings(args, thresholds, vendor: str | None) -> tuple[int, int]:
    stats = thresholds.vendor(vendor).statistics if vendor else None
    repeats = args.repeats if args.repeats is not None else (stats.repeats if stats else 10)
    samples = args.samples if args.samples is not None else (stats.samples if stats else 25)
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
    from perf import results, scenarios, thresholds

    th = thresholds.load_thresholds(args.thresholds)
    vendor = vendor_mod.resolve(args.vendor, cpu_default=None)
    if vendor is not None:
        th.vendor(vendor)
    repeats, samples = _settings(args, th, vendor)
    root = checkout.ROOT
    vendor_mod.interpreter_without_gpu()
    kernels = checkout.import_kernels(root)
    chosen = scenarios.select(scenarios.suite(args.suite), args.scenarios)
    variants = _variant_names(kernels, args.variants)
    unknown = [v for v in variants if v not in kernels.VARIANTS]
    if unknown:
        raise ConfigError(f"--variants: unknown {', '.join(unknown)} "
                          f"(registered: {', '.join(kernels.VARIANTS)})")
    peers, absent = peers_mod.resolve(args.peers, vendor)
    if args.peers == "auto" and vendor is None:
        print("note: --peers auto: no GPU here, so no vendor library is measured", flush=True)
    for p, reason in absent.items():
        print(f"note: peer {p} is not measured here: {reason}", flush=True)
    header = _header(args, root, variants, chosen, repeats, samples)
    header.update(peers=list(peers), peers_absent=absent)
    names = [*variants, *(peers_mod.PREFIX + p for p in peers)]
    with results.ResultsWriter(args.out, header, resume=not args.no_resume) as writer:
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
    print(f"wrote {args.out}")
    return 0


def _emit(event: dict) -> None:
    sys.stdout.write(PROTOCOL + json.dumps(event) + "\n")
    sys.stdout.flush()


def worker_command(args: argparse.Namespace) -> int:
    """`python -m perf worker`: one side of an A/B, measuring rounds on command (stdin)."""
    from perf import results, scenarios

    vendor_mod.interpreter_without_gpu()
    kernels = checkout.import_kernels(args.kernels_from)
    chosen = scenarios.select(scenarios.suite(args.suite), args.scenarios)
    variants = _variant_names(kernels, args.variants)
    repeats, samples = args.repeats, args.samples
    header = _header(args, args.kernels_from, variants, chosen, repeats, samples, side=args.side)
    header["sample_budget_ms"] = args.sample_budget_ms
    footprint = sum(s.footprint_bytes() for s in chosen)
    if footprint > BATCH_BUDGET_BYTES:
        raise ConfigError(f"suite {args.suite!r} needs {footprint / 2**30:.1f} GiB of batches per side, more "
                          f"than PERF_BATCH_BUDGET_GB; narrow it with --scenarios or raise the budget")
    with results.ResultsWriter(args.out, header, resume=False) as writer:
        side = Side(kernels, variants, chosen, args.metrics.split(","), samples, writer,
                    budget_ms=args.sample_budget_ms)
        for scenario in chosen:
            side.prepare(scenario, progress=lambda what: _emit({"event": "prepared", "what": what}))
        _emit({"event": "ready", "variants": variants, "keys": side.keys(),
               "skips": {f"{c.variant} {c.scenario}": c.skip for c in side.cases.values() if c.skip}})
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "quit":
                break
            only = {tuple(k) for k in cmd["keys"]} if cmd.get("keys") is not None else None
            n = side.round(cmd["repeat"], cmd["seed"], only=only,
                           step=lambda what: _emit({"event": "step", "what": what}))
            _emit({"event": "done", "repeat": cmd["repeat"], "measured": n})
    return 0
