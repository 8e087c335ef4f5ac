"""`python -m perf run`: measure one side, kernels over a suite, into a results file.

One process, rounds back to back (perf/measure/rounds.py), resumable; with `--peers` the
vendor libraries are cases of the same rounds (perf/measure/peer_cases.py).
"""

from __future__ import annotations

import argparse
import time
import zlib

from perf import checkout, files, validate
from perf import vendor as vendor_mod
from perf.errors import ConfigError, NothingMeasured
from perf.measure import check
from perf.measure.rounds import Side

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
    from perf.measure import peer_cases

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
                peer_cases.attach(side, scenario, peers, cases)
                keys = {(n, scenario.name, m) for n in names for m in side.metrics}
                where = f"scenario {i}/{len(chosen)}, repeat"
                side.rounds(range(repeats), seed=lambda r, s=scenario.name: zlib.crc32(f"{r} {s}".encode()),
                            only=keys, done=done, step=lambda r, what, at=where: step(f"{at} {r + 1}", what))
                for case, metric, found in side.recheck(scenario):
                    print(f"perf run: {case.variant} {scenario.name} {metric}: "
                          f"{check.wrong_reason(found, 'after timing')}", flush=True)
                progress.advance(task, len(names) * len(side.metrics) * repeats)
                side.release(scenario)
                peer_cases.detach(side, scenario, peers)
        measured = writer.count()
    if not measured:
        raise NothingMeasured(f"every case was skipped or failed; {args.out} holds only the lines saying why")
    print(f"wrote {args.out} ({measured} measurements)")
    return 0
