"""`python -m perf compile-calibrate`: the static gate's compile-time noise, on this CPU.

The gate compiles each side once, cold, the two sides side by side (perf/static/gate.py),
and judges the CPU seconds a variant's specializations take on a target, head / base
(perf.verdicts.compile_time_finding). How far that ratio strays when nothing changed is
measured here, the way the gate measures it: every specialization of this checkout is
compiled twice at the same time in two compile processes (an A/A pair), cold (a fresh Triton
cache, TRITON_ALWAYS_COMPILE), `--repeats` times. Per variant and target the noise is the
root mean square of log(A / A') over the repeats (an A/A ratio is 1 in expectation), the
standard deviation of one gate run's log ratio; thresholds.yaml's compile.compile_time then
sets warn/fail to max(floor, exp(k x noise)). Written to calibration/compile-time.yaml with the
machine, date, Triton and commit; a file measured on another machine is replaced only with
`--force` (perf.files.guard_measured). Only this command repeats compiles; the gate never does.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
import time

from perf import files, git, validate
from perf.errors import ConfigError, NothingMeasured
from perf.static import build, plan, report
from perf.thresholds import (
    COMPILE_CALIBRATION_FIX,
    compile_calibration_path,
    load_compile_calibration,
    load_thresholds,
    parse_compile_calibration,
    render_calibration_text,
)

DEFAULT_REPEATS = 5  # A/A pairs: the noise gets 5 degrees of freedom (unmeasured default, as calibrate's 6)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="pr", help="suite of perf/suites.yaml (default: pr, the gate's)")
    p.add_argument("--variants", default=None,
                   help="comma-separated variants (default: what the gate compiles per target)")
    p.add_argument("--scenarios", default=None, help="comma-separated fnmatch globs over scenario names")
    p.add_argument("--targets", default=None,
                   help="comma-separated targets (default: all of thresholds.yaml)")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help=f"A/A pairs of cold compiles (default {DEFAULT_REPEATS}; at least 2)")
    p.add_argument("--jobs", type=int, default=2,
                   help="compile processes (default 2: the two copies of a pair side by side, as the gate's "
                        "two sides on CI's 2 cores)")
    p.add_argument("--write", default=None, metavar="PATH",
                   help="calibration file (default: calibration/compile-time.yaml beside the thresholds)")
    p.add_argument("--force", action="store_true",
                   help="replace a calibration measured on another machine (refused without it)")
    p.add_argument("--quiet", action="store_true", help="no progress")


def machine() -> str:
    """This CPU, as the calibration names it: model and logical CPUs."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        import platform

        model = platform.processor() or model
    return f"{model} ({os.cpu_count() or 1} CPUs)"


def refuse_replacing(path: str, this: str, force: bool) -> None:
    """ConfigError where `path` holds another machine's calibration (unless `force`)."""
    if not os.path.exists(path):
        return
    try:
        old = load_compile_calibration(path).machine
    except ConfigError:
        if not force:
            raise
        return
    files.guard_measured(path, {"machine": old}, {"machine": this}, force)


def noise_cases(pairs: list[tuple[dict, dict]]) -> list[dict]:
    """Per (variant, target), from the compile times (perf.static.report.compile_times) of each
    A/A pair: the RMS of log(A / A'), the median CPU seconds, the specializations."""
    keys = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs)))
    cases = []
    for variant, target in keys:
        logs = [math.log(a[(variant, target)]["cpu_s"] / b[(variant, target)]["cpu_s"]) for a, b in pairs
                if a[(variant, target)]["cpu_s"] > 0 and b[(variant, target)]["cpu_s"] > 0]
        if len(logs) < 2:
            continue
        sums = sorted(x[(variant, target)]["cpu_s"] for pair in pairs for x in pair)
        cases.append({"variant": variant, "target": target,
                      "noise": round(math.sqrt(sum(v * v for v in logs) / len(logs)), 5),
                      "repeats": len(logs), "cpu_s": round(sums[len(sums) // 2], 3),
                      "specializations": pairs[0][0][(variant, target)]["count"]})
    return cases


HEADER = ("# Compile-time noise of the static gate on one machine: written by `python -m perf\n"
          "# compile-calibrate` (perf/static/calibrate.py), read by perf/thresholds.py. Do not edit by\n"
          "# hand; rerun it. noise: RMS over A/A pairs of log(cold compile CPU s of copy A / copy A'),\n"
          "# both copies compiled side by side as the gate's two sides (natural-log units);\n"
          "# cpu_s: median CPU seconds of the variant's specializations on the target.\n")


def write(path: str, doc: dict, force: bool) -> None:
    """Under the file's lock, atomically; never a file the gate could not read."""
    def make() -> str:
        refuse_replacing(path, doc["machine"], force)
        text = render_calibration_text(HEADER, doc)
        parse_compile_calibration(files.parse_yaml(text, path, COMPILE_CALIBRATION_FIX), path)
        return text

    files.rewrite(path, make)


def _doc(entries: list[dict], results: dict) -> dict:
    """A side document of `entries` compiled into `results` (what report.compile_times reads)."""
    return {"entries": [{**e, **{k: results[e["key"]][k] for k in ("status", "metrics")}, "cached": False}
                        for e in entries if "key" in e]}


def main(args: argparse.Namespace) -> int:
    th = load_thresholds(args.thresholds)
    if args.repeats < 2:
        raise ConfigError(f"--repeats {args.repeats}: at least 2 (a noise needs two A/A pairs)")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise ConfigError("TRITON_INTERPRET=1 is set: compile-calibrate compiles real kernels; unset it")
    path = args.write or compile_calibration_path(th.path)
    files.check_output(path, "--write" if args.write else "calibration")
    import triton

    import kernels

    # every argument checked before the file's machine, so that a bad one is refused alike on any CPU
    targets = plan.load_targets(th, args.targets, kernels.VARIANTS)
    scenarios = validate.scenarios(args.suite, args.scenarios)
    variants = validate.variants(args.variants, kernels.VARIANTS)
    this = machine()
    refuse_replacing(path, this, args.force)  # before minutes of compiling
    cannot = build.probe_targets(targets, build.DiskCache(None))
    for name, why in cannot.items():
        print(report.cannot_compile_line(name, triton.__version__, why) + "; not calibrated", file=sys.stderr)
    compilable = [t for t in targets if t.name not in cannot]
    entries, jobs = plan.plan_side(variants, scenarios, compilable, named=bool(args.variants))
    if not jobs:
        raise NothingMeasured("nothing to compile: no variant plans a launch on these targets and scenarios")
    start = time.monotonic()
    pairs = []
    for r in range(args.repeats):
        label = f"A/A pair {r + 1}/{args.repeats}"
        a, b = build.compile_pairs(jobs, args.jobs, quiet=args.quiet, label=label)
        pairs.append((report.compile_times(_doc(entries, a)), report.compile_times(_doc(entries, b))))
    cases = noise_cases(pairs)
    if not cases:
        raise NothingMeasured(f"no variant compiled on any target in every pair; {path} is left as it is")
    root = git.repo_root(os.getcwd())
    info = git.commit_info(root)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    doc = {"version": 1, "machine": this,
           "meta": {"date": _dt.date.today().isoformat(), "triton": triton.__version__,
                    "commit": info["commit"], "dirty": info["dirty"], "suite": args.suite,
                    "scenarios": args.scenarios or "*",
                    "repeats": args.repeats, "jobs": args.jobs,
                    "load_average": None if load is None else round(load, 2),
                    "minutes": round((time.monotonic() - start) / 60, 1)},
           "cases": cases}
    write(path, doc, args.force)
    for c in cases:
        print(f"{c['variant']:12} {c['target']:8} {c['specializations']:4} specializations  "
              f"{c['cpu_s']:8.2f} CPU s  noise {100 * c['noise']:.2f} %")
    print(f"wrote {path} ({len(cases)} variant x target cases, {doc['meta']['minutes']} minutes)")
    return 0


if __name__ == "__main__":
    from perf import cli

    cli.command("compile-calibrate")
