"""`python -m perf calibrate`: measure the gate's noise on this GPU and commit it.

Runs the latency gate's own measurement A/A (both sides the same checkout, loaded twice
side by side: perf/checkout.py) in `--processes` fresh processes of the gate's rounds and
samples, then writes per (variant, scenario, metric) the round-to-round and
process-to-process noise of the paired log ratio (perf/latency/noise.py) to
calibration/<vendor>.yaml beside thresholds.yaml, with the date, GPU, driver and commit.
The gate then sets each calibrated case's thresholds from that noise (thresholds.yaml:
`latency.floor`, `latency.k`) and tests with it (perf/stats.py); cases the file lacks, or a
GPU other than the file's, use the vendor's defaults and the report says so.

`--launch-cost-runs N` also runs the launch-cost suite (tests/benchmarks, pytest-benchmark)
N times, each in a fresh process after one warm-up process, and stores the threshold
`nox -s launch-cost` fails on: k.fail x sqrt(2) x the largest process-to-process standard
deviation of a variant's median host cost (a comparison has a process on each side), never
below the vendor's floor. The warm-up: on an H100 (2026-11-22) the first benchmark process
after the kernels were compiled measured naive at 115 us and parallel at 220 us, the next
two 62-64 and 139-142 us; `nox -s launch-cost` runs the same warm-up before it measures.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

from perf import files
from perf import vendor as vendor_mod
from perf.checkout import ROOT
from perf.errors import EXIT_INTERRUPTED, ConfigError, NothingMeasured
from perf.git import commit_info, repo_root
from perf.latency import noise
from perf.latency.progress import Reporter
from perf.process import child_env
from perf.thresholds import Thresholds, calibration_path, load_thresholds

DEFAULT_PROCESSES = 6  # A/A processes: tau gets 5 degrees of freedom (the gate's test uses them)
LAUNCH_COST_DEFAULT_PERCENT = 15.0  # unmeasured default, where no calibration covers this GPU


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="pr", help="suite of perf/suites.yaml (default: pr)")
    p.add_argument("--variants", default="static_grid",
                   help="comma-separated variants (default: static_grid, the production entry)")
    p.add_argument("--scenarios", default=None, help="comma-separated fnmatch globs over scenario names")
    p.add_argument("--metrics", default="eager,graph", help="metrics to calibrate (default: eager,graph)")
    p.add_argument("--vendor", default=None, help="nvidia | amd (default: this machine's GPU)")
    p.add_argument("--processes", type=int, default=DEFAULT_PROCESSES,
                   help=f"A/A processes (default {DEFAULT_PROCESSES}; at least 3)")
    p.add_argument("--repeats", type=int, default=None,
                   help="paired rounds per process (default: thresholds)")
    p.add_argument("--samples", type=int, default=None,
                   help="samples per side and round (default: thresholds)")
    p.add_argument("--out", default="results/calibrate", help="directory for the A/A results")
    p.add_argument("--write", default=None, metavar="PATH",
                   help="calibration file (default: this GPU model's beside the thresholds: "
                        "calibration/<vendor>.yaml, or <vendor>-<model>.yaml where that one holds another "
                        "model's)")
    p.add_argument("--force", action="store_true",
                   help="replace a calibration measured on another GPU or vendor (refused without it)")
    p.add_argument("--launch-cost-runs", type=int, default=0,
                   help="also calibrate the launch-cost suite's threshold from this many runs (0: keep it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lock-timeout", type=float, default=0.0)
    p.add_argument("--launch-cost-threshold", action="store_true",
                   help="only print the launch-cost suite's fail percentage on this machine and its source")


def this_environment(vendor: str) -> dict:
    """What this process measures on, in perf.files.guard_measured's terms (as the gate's
    workers record it: perf.results.environment)."""
    from kernels import platform as kplatform

    p = kplatform.current()
    return {"vendor": vendor, "gpu": p.device_name, "interpreter": kplatform.interpreter_active()}


def launch_cost_threshold(medians: dict[str, list[float]], th: Thresholds, vendor: str) -> dict:
    """The launch-cost suite's fail percentage from per-variant medians of separate runs."""
    rule = th.vendor(vendor).noise_rule
    k = rule.k_fail if rule else 4.0
    floor = 100 * ((rule.floor_fail if rule else th.vendor(vendor).latency.fail) - 1)
    sigmas = {v: float(np.std(np.log(m), ddof=1)) for v, m in medians.items() if len(m) >= 2}
    if not sigmas:
        raise ConfigError("--launch-cost-runs: no variant was measured twice (needs a GPU and >= 2 runs)")
    worst = max(sigmas.values())
    percent = max(floor, 100 * (math.exp(k * math.sqrt(2) * worst) - 1))
    return {"fail_percent": round(percent, 1), "runs": min(len(m) for m in medians.values()),
            "sigma_process": {v: round(s, 5) for v, s in sorted(sigmas.items())},
            "rule": f"max(floor {floor:g} %, k.fail {k:g} x sqrt(2) x largest sigma_process)"}


def launch_cost_fail(thresholds_path: str) -> tuple[float, str]:
    """(percent, where it came from): the launch-cost suite's threshold on this machine."""
    from perf.thresholds import calibration_for

    th = load_thresholds(thresholds_path)
    vendor = vendor_mod.detect()
    if vendor is None:
        return LAUNCH_COST_DEFAULT_PERCENT, "unmeasured default (no GPU)"
    import torch

    cal, note = calibration_for(th, vendor, torch.cuda.get_device_name())
    if cal is None or not cal.launch_cost:
        return LAUNCH_COST_DEFAULT_PERCENT, f"unmeasured default ({note})"
    lc = cal.launch_cost
    return float(lc["fail_percent"]), f"{cal.path}: {lc.get('rule', '')}, {lc.get('runs', '?')} runs"


LAUNCH_COST_WARMUP = ["tests/benchmarks", "--benchmark-disable", "-q", "-p", "no:cacheprovider"]


def run_launch_cost(runs: int, out_dir: str) -> dict[str, list[float]]:
    """Median host cost per variant (seconds) of each of `runs` fresh pytest-benchmark runs,
    after one untimed warm-up process (module docstring)."""
    env = child_env(ROOT)
    print("launch cost: warm-up process", file=sys.stderr, flush=True)
    subprocess.call([sys.executable, "-m", "pytest", *LAUNCH_COST_WARMUP], cwd=ROOT, env=env)
    medians: dict[str, list[float]] = {}
    for i in range(runs):
        path = os.path.join(out_dir, f"launch-cost-{i}.json")
        cmd = [sys.executable, "-m", "pytest", "tests/benchmarks", "--benchmark-only", "-q",
               "-p", "no:cacheprovider", f"--benchmark-json={path}"]
        print(f"launch cost run {i + 1}/{runs}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        if subprocess.call(cmd, cwd=ROOT, env=env) not in (0, 5) or not os.path.exists(path):
            raise ConfigError(f"--launch-cost-runs: run {i + 1} failed; run `nox -s launch-cost` to see why")
        for variant, median in read_launch_cost(path):
            medians.setdefault(variant, []).append(median)
    return medians


def read_launch_cost(path: str) -> list[tuple[str, float]]:
    """(variant or benchmark name, median host seconds) of each benchmark of a pytest-benchmark output,
    each checked: a variant by the names rule, a median within perf.schema.SECONDS and above 0, each
    benchmark once (a repeated one would count twice in the spread of the runs)."""
    from perf import names, schema

    fix = "run `nox -s launch-cost` to see why"
    doc = files.load_json(path, "pytest-benchmark's output", fix)
    found, seen = [], {}
    for i, b in enumerate(doc.get("benchmarks") if isinstance(doc.get("benchmarks"), list) else [None]):
        where = f"benchmarks[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("stats"), dict):
            raise ConfigError(f"{path}: {where} is no benchmark with stats; {fix}")
        variant = (b.get("params") or {}).get("variant")
        if variant is not None:
            names.variant(variant, f"{path}: {where}: params.variant")
        else:  # a benchmark of no variant (the anchors): its test's name
            variant = b.get("name")
            if not isinstance(variant, str) or not variant:
                raise ConfigError(f"{path}: {where} has neither params.variant nor a name; {fix}")
        median = b["stats"].get("median")
        if not (schema.within(median, schema.SECONDS) and median > 0):
            raise ConfigError(f"{path}: {where}: stats.median is {schema.shown(median)}, expected seconds "
                              f"within {schema.span(schema.SECONDS)} above 0; {fix}")
        schema.once(path, (variant,), seen, where, "the benchmark", fix)
        found.append((variant, median))
    return found


def main(args: argparse.Namespace) -> int:
    from perf.latency import ab

    if args.launch_cost_threshold:
        percent, source = launch_cost_fail(args.thresholds)
        print(f"{percent:g} ({source})")
        return 0
    th = load_thresholds(args.thresholds)
    if args.processes < 3:
        raise ConfigError(f"--processes {args.processes}: at least 3 (process-to-process noise needs them)")
    out_dir = os.path.abspath(args.out)  # --out and --write: checked by perf/cli.py before main
    if not vendor_mod.on_gpu():
        raise ConfigError("no GPU: calibration measures this GPU's noise; run `python -m perf calibrate` on "
                          "the GPU machine whose gate it calibrates")
    vendor = vendor_mod.resolve(args.vendor)
    s = th.vendor(vendor).statistics
    args.repeats = args.repeats or s.repeats
    args.samples = args.samples or s.samples
    here = this_environment(vendor)  # one calibration file per GPU model (thresholds.calibration_path)
    write = noise.check_write_path(args.write or calibration_path(th.path, vendor, here.get("gpu")), vendor,
                                   "--write" if args.write else "calibration")
    noise.refuse_replacing(write, here, args.force)  # before hours of measuring
    repo = repo_root(os.getcwd())
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.monotonic()
    info = commit_info(repo)
    identity = {"calibrate": info["commit"], "dirty": info["dirty"], "suite": args.suite,
                "variants": args.variants, "scenarios": args.scenarios, "metrics": args.metrics,
                "processes": args.processes,
                "repeats": args.repeats, "samples": args.samples, "seed": args.seed}
    ledger = ab.Ledger(out_dir, identity)
    from rich.console import Console

    console = Console(stderr=True)
    console.print(f"A/A calibration of {args.suite} ({args.variants}): {args.processes} processes x "
                  f"{args.repeats} paired rounds x {args.samples} samples; results in {out_dir}")
    with ab.gpu_lock(ab.gpu_key(), args.lock_timeout), ab.batch_cache(True) as batches:
        settings = ab.Settings(args.suite, args.variants, args.scenarios, args.metrics, args.processes,
                               args.repeats, args.samples, args.seed, s.sample_budget_ms, batches)
        try:
            with Reporter(console, args.processes) as reporter:
                ab.measure(settings, {"base": repo, "head": repo}, out_dir, ledger, 0, None, reporter)
        except KeyboardInterrupt:
            print(f"interrupted: {len(ledger.processes)} finished processes are kept in {out_dir}; run the "
                  f"same command again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED
        except ab.GateCrash as e:
            raise ConfigError(f"calibration: {e}") from None
        launch = None
        if args.launch_cost_runs:
            launch = launch_cost_threshold(run_launch_cost(args.launch_cost_runs, out_dir), th, vendor)
    base, head, processes = noise.load_aa(out_dir)
    rows = noise.noise_rows(base, head, processes, th, vendor, s.processes, s.repeats)
    if not rows:
        raise NothingMeasured(f"{out_dir}: no case was measured in two or more processes; {write} is left as "
                              f"it is")
    minutes = (time.monotonic() - t0) / 60
    doc = noise.calibration_doc(rows, vendor, {**head.environment, "commit": info["commit"]}, {
        "dirty": info["dirty"], "suite": args.suite, "variants": args.variants, "metrics": args.metrics,
        "processes": args.processes, "repeats": args.repeats, "samples": args.samples})
    noise.write_calibration(write, doc, launch, force=args.force)
    noise.print_table(rows, f"A/A noise on {head.environment.get('gpu')}; gate: {s.processes} processes x "
                            f"{s.repeats} rounds")
    if launch:
        print(f"launch cost: fail beyond +{launch['fail_percent']} % ({launch['rule']})")
    print(f"wrote {write} ({len(rows)} cases, {minutes:.1f} minutes)")
    return 0


if __name__ == "__main__":
    from perf import cli, process

    def _calibrate(argv: list[str]) -> int:
        vendor_mod.interpreter_without_gpu()
        return cli.main(["calibrate", *argv])

    process.entry(_calibrate)
