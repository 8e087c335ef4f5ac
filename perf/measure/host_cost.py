"""`python -m perf host-cost`: the host time of a call, ours beside the peers, alternated call by call.

A serving engine that runs attention eagerly (piecewise CUDA graphs) pays every call's host
work: validation, planning, Triton's launcher. The launch-cost suite (tests/benchmarks,
pytest-benchmark) gates our own host cost from commit to commit; it times each entry in a
test of its own, seconds apart. Beside a peer that is not enough: on the H100 VM the host's
speed varies up to 2x between processes and drifts within one (docs/lab/2026-11-23.md, "Host cost
beside vLLM"), so ratios of such medians put 0-4 of the 17 anchor rows above vLLM's kernel per
run while their geometric mean was 0.66-0.81.

Here the comparison is paired. `--processes` fresh processes run one after another (one
untimed process first: the first after compiling measures the host path slower). In each,
scenario by scenario, every entry (the variants, then the peers as `perf run` sets them up:
perf/peers.py, their planning outside the call) is called once untimed (compilation, library
initialization; ours with its metadata values checked), then `--rounds` rounds call each
entry once, in an order rotated every round, timing the call alone with the host clock; the
GPU is synchronized after every round, outside the timed calls, so the launch queue never
fills and the host never waits for the device. Ours is called as a serving loop calls it:
preallocated `out=`, the host hints, value checks off, `max_seqlen_k` one larger every call
(`serving_options`), so its configurations are chosen again as often as in a decode loop.

Each process's calls are records of the results file (perf/results.py; metric "host", repeat
= process, samples in ms in call order), appended scenario by scenario: an interrupted run
resumes where it stopped. The ratio of a row is `perf.stats.paired` over the per-round log
ratios ours / peer, processes as the unit (as the latency gate): the geometric mean, its
bootstrap interval, and "slower" / "faster" where the process-level test says so at 5 %
(`perf.report.paired_verdict`, as `perf table --against` judges device time).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import numpy as np

from perf import files
from perf import vendor as vendor_mod
from perf.errors import ConfigError, NothingMeasured
from perf.process import child_env

METRIC = "host"
DEFAULT_ROUNDS = 200  # as the launch-cost suite's single-scenario test
DEFAULT_PROCESSES = 4  # unmeasured default; 3 are the fewest the process-level test needs
WARMUP_ROUNDS = 10  # untimed rounds before the timed ones, in every process (as the launch-cost suite's)


def serving_options(options: dict):
    """The options of successive calls, as a decode loop passes them: `max_seqlen_k` one larger
    every call (an upper bound on the keys stays a correct hint), the rest unchanged."""
    if "max_seqlen_k" not in options:
        return itertools.repeat(options)
    return (dict(options, max_seqlen_k=options["max_seqlen_k"] + i) for i in itertools.count())


def alternate(calls: dict[str, Callable[[], object]], rounds: int, warmup: int = WARMUP_ROUNDS,
              sync: Callable[[], object] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Host milliseconds of each entry's call, `rounds` per entry in round order: each round
    calls every entry once, the order rotated by one entry every round (no entry always
    first), `sync` (the GPU) after every round, untimed."""
    from perf.measure.rounds import interleave

    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}

    def rotated(i: int, items: list) -> list:  # round i (warm-up rounds first) starts at entry i + warmup
        return [items[(i + warmup + k) % len(items)] for k in range(len(items))]

    def time_one(name: str, side, position: int, i: int) -> None:
        start = clock()
        calls[name]()
        elapsed = clock() - start
        if i >= 0:
            times[name].append(elapsed * 1e3)
    interleave(names, rounds, time_one, order=rotated, warmup=warmup,
               after_round=(lambda i: sync()) if sync is not None else None)
    return times


def paired_ratios(res, ours: str, peer: str) -> dict[str, object]:
    """scenario -> perf.stats.Paired of ours / peer over the processes that timed both."""
    from perf import stats

    calls: dict[tuple[str, str], dict[int, list[float]]] = {}
    for (name, scenario, process), r in _latest(res).items():
        calls.setdefault((name, scenario), {})[process] = r["samples"]
    out = {}
    for (name, scenario), mine in calls.items():
        theirs = calls.get((peer, scenario))
        if name != ours or not theirs:
            continue
        groups = [stats.log_ratios(theirs[p], mine[p]) for p in sorted(mine.keys() & theirs.keys())
                  if len(mine[p]) == len(theirs[p]) and mine[p]]
        if groups:
            out[scenario] = stats.paired(groups)
    return out


def _latest(res) -> dict[tuple[str, str, int], dict]:
    """(entry, scenario, process) -> its record; the last one where a resumed process measured a
    scenario again (an interrupted one had written part of its entries)."""
    return {(r["variant"], r["scenario"], r["repeat"]): r for r in res.measurements()
            if r["metric"] == METRIC}


def _median_us(latest: dict, name: str, scenario: str) -> float | None:
    medians = [r["median"] for (n, s, _), r in latest.items() if n == name and s == scenario]
    return float(np.median(medians)) * 1e3 if medians else None


def render(res, ours: str) -> str:
    """Markdown: per scenario the median host time of every entry, then ours / each peer."""
    from perf.peers import PREFIX
    from perf.report import MIN_PROCESSES, PAIRED_ALPHA, geomean, paired_verdict, verdict_cell

    head, env = res.header, res.environment
    names = list(dict.fromkeys(r["variant"] for r in res.measurements() if r["metric"] == METRIC))
    scenarios = list(dict.fromkeys(r["scenario"] for r in res.measurements() if r["metric"] == METRIC))
    peers = [n for n in names if n.startswith(PREFIX)]
    processes = sorted({r["repeat"] for r in res.measurements() if r["metric"] == METRIC})
    lines = [f"Host time of one eager call, measured on {env.get('gpu')} (driver {env.get('driver') or '–'}, "
             f"{env.get('host')}), torch {env.get('torch')}, triton {env.get('triton')}, "
             f"{str(env.get('time', ''))[:10]}, commit {str(env.get('commit') or '–')[:8]}; suite "
             f"`{head.get('suite')}`, {len(processes)} processes x {head.get('rounds')} rounds, every entry "
             f"once per round in rotated order (perf/measure/host_cost.py). Cells: microseconds, the median "
             f"of the processes' medians.", "",
             "| scenario | " + " | ".join(n.removeprefix(PREFIX) for n in names) + " |",
             "|---" * (len(names) + 1) + "|"]
    latest = _latest(res)
    for s in scenarios:
        cells = [_us(_median_us(latest, n, s)) for n in names]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    for peer in peers:
        ratios = paired_ratios(res, ours, peer)
        if not ratios:
            continue
        label = peer.removeprefix(PREFIX)
        lines += ["", f"`{ours}` / `{label}`, paired per round (geometric mean over the processes, 95 % "
                      f"interval; < 1: less host time; verdict: one-sided test over the processes at "
                      f"{PAIRED_ALPHA:g}):", "",
                  "| scenario | ratio | interval | verdict |", "|---|---|---|---|"]
        for s in scenarios:
            if s in ratios:
                p = ratios[s]
                lines.append(f"| {s} | {p.ratio:.2f} | {p.ci_low:.2f}-{p.ci_high:.2f} | {verdict_cell(p)} |")
        slower = [s for s in scenarios if s in ratios and paired_verdict(ratios[s]) == "slower"]
        worst = max(ratios, key=lambda s: ratios[s].ratio)
        mean = geomean(p.ratio for p in ratios.values())
        lines += ["", f"Against `{label}`: geometric mean **{mean:.2f}** over {len(ratios)} scenarios; "
                      f"largest {ratios[worst].ratio:.2f} ({worst}); "
                      f"{len(slower)} slower" + (f" ({', '.join(slower)})" if slower else "") + "."]
        if len(processes) < MIN_PROCESSES:
            lines.append(f"With {len(processes)} process(es) there is no verdict: the test needs "
                         f"{MIN_PROCESSES} or more.")
    skipped = sorted({(r["variant"].removeprefix(PREFIX), r["reason"]) for r in res.skips()})
    if skipped:
        lines += ["", "Not measured: " + "; ".join(f"`{n}` ({why})" for n, why in skipped) + "."]
    return "\n".join(lines) + "\n"


def _us(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.1f}"


# --- the processes ------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="anchor", help="suite of perf/suites.yaml (default: anchor)")
    p.add_argument("--scenarios", default=None, help="comma-separated fnmatch globs over scenario names")
    p.add_argument("--variants", default="static_grid",
                   help="comma-separated variants (default: static_grid)")
    p.add_argument("--peers", default="auto",
                   help="auto (this GPU's installed ones; default), none, or a comma list (perf/peers.py)")
    p.add_argument("--ours", default=None, help="the variant whose ratios are shown (default: the first)")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help=f"timed rounds per scenario and "
                                                                       f"process (default {DEFAULT_ROUNDS})")
    p.add_argument("--processes", type=int, default=DEFAULT_PROCESSES,
                   help=f"fresh processes, one after another (default {DEFAULT_PROCESSES})")
    p.add_argument("--out", default="results/host-cost.jsonl", help="results file (JSON Lines; resumed)")
    p.add_argument("--md", default=None, help="also write the table as Markdown to this file")
    p.add_argument("--no-resume", action="store_true", help="overwrite --out instead of resuming it")
    p.add_argument("--force", action="store_true",
                   help="with --no-resume: replace an --out measured on another GPU, vendor or the "
                        "interpreter")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # process index; -1: warm-up


def _header(args, variants: list[str], peers: tuple[str, ...], absent: dict) -> dict:
    from perf import checkout, results

    return {"suite": args.suite, "metrics": METRIC, "samples": args.rounds, "rounds": args.rounds,
            "variants": variants, "peers": list(peers), "peers_absent": absent, "gate": "host-cost",
            "environment": results.environment(checkout.ROOT)}


def main(args: argparse.Namespace) -> int:
    from perf import checkout, results, validate
    from perf import peers as peers_mod

    if args.rounds < 1 or args.processes < 1:
        raise ConfigError(f"--rounds {args.rounds} --processes {args.processes}: both must be at least 1")
    files.check_output(args.out, "--out")
    if args.md:
        files.check_output(args.md, "--md")
    if not vendor_mod.on_gpu():
        raise ConfigError("no GPU: the host cost of a call is measured beside a GPU that runs it (in "
                          "Triton's interpreter a call costs the interpreter's time); run it on a GPU "
                          "machine")
    vendor = vendor_mod.resolve(None)
    kernels = checkout.import_kernels(checkout.ROOT)
    chosen = validate.scenarios(args.suite, args.scenarios)
    variants = validate.variants(args.variants, kernels.VARIANTS)
    peers, absent = peers_mod.resolve(args.peers, vendor)
    names = [*variants, *(peers_mod.PREFIX + p for p in peers)]
    if args.worker is not None:
        return _worker(args, kernels, chosen, variants, peers, absent)
    for p, reason in absent.items():
        print(f"note: peer {p} is not measured here: {reason}", flush=True)
    with results.ResultsWriter(args.out, _header(args, variants, peers, absent),
                               resume=not args.no_resume, force=args.force) as writer:
        done = writer.done()
        skips = writer.existing.skips() if writer.existing else []
        refused = {(r["variant"], r["scenario"]) for r in skips}
    todo = {i: [s.name for s in chosen
                if any((n, s.name, METRIC, i) not in done and (n, s.name) not in refused for n in names)]
            for i in range(args.processes)}
    todo = {i: s for i, s in todo.items() if s}
    if todo and not done:
        _spawn(args, -1, [s.name for s in chosen], "warm-up process (untimed)")
    for i, scenarios in todo.items():
        _spawn(args, i, scenarios, f"process {i + 1}/{args.processes}")
    res = results.load(args.out)
    if not res.measurements():
        raise NothingMeasured(f"every entry was skipped or failed; {args.out} holds only the lines saying "
                              f"why")
    markdown = render(res, args.ours or variants[0])
    if args.md:
        files.write_text(args.md, markdown)
    print(markdown, end="", flush=True)
    print(f"wrote {args.out}" + (f" and {args.md}" if args.md else ""), flush=True)
    return 0


def _spawn(args, index: int, scenarios: list[str], what: str) -> None:
    print(f"perf host-cost: {what}, {len(scenarios)} scenarios", file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "perf", "host-cost", "--worker", str(index), "--suite", args.suite,
           "--scenarios", ",".join(scenarios), "--variants", args.variants, "--peers", args.peers,
           "--rounds", str(args.rounds if index >= 0 else 2), "--out", args.out,
           "--thresholds", args.thresholds]
    from perf import checkout

    # this checkout first; the rest of PYTHONPATH stays, where a peer may be installed
    rc = subprocess.call(cmd, cwd=checkout.ROOT, env=child_env(checkout.ROOT, PYTHONUNBUFFERED="1"))
    if rc:
        raise ConfigError(f"perf host-cost: the {what} exited with {rc}; its output above says why "
                          f"(finished scenarios are kept in {args.out})")


def _worker(args, kernels, chosen, variants: list[str], peers, absent: dict) -> int:
    """One process: every scenario's entries set up, then alternated (module docstring)."""
    import torch

    from kernels.batch import build_batch
    from kernels.inputs import CHECK_VALUES_ENV
    from perf import peers as peers_mod
    from perf import results
    from perf.measure.cases import host_hints, takes
    from perf.measure.timing import Samples

    os.environ[CHECK_VALUES_ENV] = "0"  # as in production; a test session's switch must not leak in
    # `main` refuses to measure without a GPU; the worker also runs in Triton's interpreter,
    # where the unit tests check what it records (its times there mean nothing)
    device = "cuda" if vendor_mod.on_gpu() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else None
    writer = None
    process = uuid.uuid4().hex[:12]  # a resumed process index measures its scenarios again: a new id
    if args.worker >= 0:
        writer = results.ResultsWriter(args.out, _header(args, variants, peers, absent), resume=True)
    try:
        for j, scenario in enumerate(chosen, 1):
            spec = scenario.spec()
            batch = build_batch(spec, device)
            tensors = batch.args()
            calls, skipped = {}, {}
            for v in variants:
                fn, out = kernels.VARIANTS[v], batch.new_output()
                options = dict(batch.options, **host_hints(fn, spec))
                check = {"check_values": True} if takes(fn, "check_values") else {}
                try:
                    fn(*tensors, out=out, **options, **check)  # compile; metadata values checked once
                except NotImplementedError as e:
                    skipped[v] = ("skip", str(e))
                    continue
                except Exception as e:  # a broken entry is a finding, not the end of the run
                    skipped[v] = ("error", f"{type(e).__name__}: {e}".splitlines()[0][:300])
                    continue
                steps = serving_options(options)
                calls[v] = lambda fn=fn, t=tensors, out=out, steps=steps: fn(*t, out=out, **next(steps))
            for p in peers:
                try:
                    call, _, _ = peers_mod.setup_for_batch(p, spec, device, batch)
                    call()  # library initialization, JIT compilation: not timed
                except peers_mod.PeerUnavailable as e:
                    skipped[peers_mod.PREFIX + p] = ("skip", str(e))
                    continue
                except Exception as e:
                    message = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                    skipped[peers_mod.PREFIX + p] = ("error", message)
                    continue
                calls[peers_mod.PREFIX + p] = call
            if sync is not None:
                sync()
            times = alternate(calls, args.rounds, sync=sync)
            print(f"perf host-cost: {j}/{len(chosen)} {scenario.name}: "
                  + ", ".join(f"{n.removeprefix(peers_mod.PREFIX)} {np.median(t) * 1e3:.1f} us"
                              for n, t in times.items()), file=sys.stderr, flush=True)
            if writer is not None:
                digest = batch.spec.digest()
                for name, (kind, reason) in skipped.items():
                    writer.skip(variant=name, scenario=scenario.name, reason=reason, kind=kind)
                for name, t in times.items():
                    writer.record(variant=name, scenario=scenario.name, metric=METRIC, repeat=args.worker,
                                  samples=Samples(tuple(t), clock="host"), config=[], digest=digest,
                                  process=process)
            calls = tensors = batch = None  # this scenario's memory, before the next one's
    finally:
        if writer is not None:
            writer.close()
    return 0
