"""The planning process: for which runner a plan is made, how its process is started, what it writes.

Planning binds real Triton kernels and loads both checkouts' kernels side by side (perf/checkout.py),
so it runs in a process of its own, without TRITON_INTERPRET and without the kernels' value checks
(an unfilled batch has no values to check): `python -m perf.change --kind KIND` (internal,
perf/change/__main__.py), whose one parser is `plan_parser`:

    python -m perf.change --kind latency --base DIR --head DIR --target T --num-sms N --thresholds FILE
                          --suite S [--variants V] [--scenarios GLOBS] --out FILE
    python -m perf.change --kind grid --base DIR --head DIR --target T --num-sms N --thresholds FILE
                          [--only GLOBS] [--processes N] --out FILE
    python -m perf.change --kind compile --target T --num-sms N --thresholds FILE --cache-dir DIR
                          [--nodes FILE] [--only GLOBS] [--shard I/N] [--processes N] --out FILE

It writes one JSON document for its parent (`write`: `schema` SCHEMA, `kind`, `target`, `num_sms`
and the kind's answer: the latency gate's and the grid's `rows`, each a case's fields and `why`,
None where both sides' launches are identical; the compile cache's counts), which `plan` runs and
reads back. perf/why.py's explaining process is started the same way (`parser`, `argv`, `run`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from perf import files
from perf.errors import EXIT_BAD_INPUT, ConfigError

SCHEMA = "perf-change-side/1"  # what the planning process writes for its parent
KINDS = ("latency", "grid", "compile")
NEEDS = {"latency": ("base", "head", "suite"), "grid": ("base", "head"), "compile": ("cache_dir",)}
WHAT = {"latency": "change plan", "grid": "grid plan", "compile": "grid compile"}  # in a parent's message


# --------------------------------------------------------------------------- the runner's target


@dataclasses.dataclass(frozen=True)
class Runner:
    """The GPU a plan is made for: its compile target of thresholds.yaml (None when no target is
    its architecture: then every case is timed), SM/CU count, architecture name and a note."""

    target: Any
    num_sms: int
    arch: str
    note: str


def runner_target(thresholds, vendor: str, on_gpu: bool) -> Runner:
    """The runner a plan is made for: this GPU (the compile target of thresholds.yaml that is its
    architecture, with its SM/CU count); without a GPU, the vendor's first target with its
    product's count (`perf gate --plan-only` and `perf grid --cases` on a hosted runner)."""
    from perf.static import plan

    targets = [t for t in plan.load_targets(thresholds) if t.vendor == vendor]
    if not on_gpu:
        if not targets:
            raise ConfigError(f"{thresholds.path}: {vendor}.compile.targets is empty; the change plan needs "
                              f"the runner's target; add one")
        t = targets[0]
        return Runner(t, t.facts.num_sms, t.name,
                      f"{t.name} ({t.facts.device_name}, {t.facts.num_sms} SMs/CUs; no GPU here)")
    from perf.vendor import gpu_arch

    found, num_sms, device = gpu_arch(vendor)
    match = [t for t in targets if str(t.arch) == found and (vendor == "amd" or t.backend == "cuda")]
    arch = found if vendor == "amd" else f"sm_{found}"
    if not match:
        return Runner(None, num_sms, arch,
                      f"no compile target of {thresholds.path} is this GPU's architecture ({arch}): every "
                      f"case is timed")
    t = match[0]
    return Runner(t, num_sms, t.name, f"{t.name} ({device}, {num_sms} SMs/CUs)")


def as_if_on(platform, target, num_sms: int):
    """Make `platform.current()` (a side's kernels/platform.py module) the runner's GPU, and return the
    `current` it replaces. A planner that asks the platform (the Gluon kernel is sm_90's, planned only
    where `current()` is an sm_90 GPU) then plans on this CPU what the runner plans: a plan made as from
    a CPU would compare kernels the runner never launches and call its own changes identical. The same
    on both sides, outside what a change may move."""
    here = platform.Platform(target.vendor, target.name, target.facts.device_name, target.warp_size, num_sms)
    previous = platform.current
    platform.current = lambda: here
    return previous


# --------------------------------------------------------------------------- the parent's side


def argv(module: str, **options) -> list[str]:
    """`python -m module --name value ...` for this interpreter; None left out."""
    cmd = [sys.executable, "-m", module]
    for name, value in options.items():
        if value is not None:
            cmd += [f"--{name.replace('_', '-')}", str(value)]
    return cmd


def run(cmd: list[str], out: str, what: str, process: str = "planning") -> None:
    """Run a side process (`cmd`, which writes `out`) from this harness, without the interpreter
    (binding needs real `JITFunction`s) and without the value checks (the gate's call skips them;
    an unfilled batch has no values to check). Its bad input is the one line it printed."""
    from perf.checkout import ROOT
    from perf.process import child_env, run_child

    env = child_env(ROOT, drop=("TRITON_INTERPRET",), PAGED_ATTENTION_CHECK_VALUES="0")
    done = run_child(cmd, cwd=ROOT, env=env)
    if done.returncode == EXIT_BAD_INPUT:
        raise ConfigError(f"{what}: bad input (see the line above)")
    if done.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"{what}: the {process} process exited with code {done.returncode}")


def plan(kind: str, out: str, *, target, num_sms: int, thresholds: str, **options) -> dict:
    """The planning process's document for `kind` (module docstring), run for `target` with
    `num_sms` SMs/CUs; `options` are its flags (`cache_dir` -> `--cache-dir`, None left out)."""
    cmd = argv("perf.change", kind=kind, target=target.name, num_sms=num_sms,
               thresholds=os.path.abspath(thresholds), out=out, **options)
    run(cmd, out, WHAT[kind])
    doc = files.load_json(out, f"the {WHAT[kind]}'s answer", "plan again", expect=dict)
    if doc.get("schema") != SCHEMA or doc.get("kind") != kind:
        raise RuntimeError(f"{out}: schema {doc.get('schema')!r} of kind {doc.get('kind')!r}, expected "
                           f"{SCHEMA!r} of kind {kind!r}")
    return doc


# --------------------------------------------------------------------------- the process's side


def parser(prog: str, description: str, sides_required: bool = False) -> argparse.ArgumentParser:
    """What every side process takes: both checkouts (`sides_required`: always), the runner's
    target and SM/CU count, the thresholds that name it, and the file for the parent."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--base", required=sides_required, help="checkout whose kernels/ is the base side")
    p.add_argument("--head", required=sides_required,
                   help="checkout whose kernels/ (and tests/) are the head side")
    p.add_argument("--target", required=True, help="compile target of thresholds.yaml (the runner's)")
    p.add_argument("--num-sms", type=int, required=True, help="SMs/CUs of the runner's GPU")
    p.add_argument("--thresholds", required=True)
    p.add_argument("--out", required=True, help="JSON file for the parent")
    return p


def plan_parser() -> argparse.ArgumentParser:
    """`python -m perf.change`'s arguments (module docstring)."""
    p = parser("python -m perf.change", "internal: plan base and head (or compile) for a change plan")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--suite", default=None, help="latency: the suite of the gate's cases")
    p.add_argument("--variants", default=None, help="latency: comma-separated variants")
    p.add_argument("--scenarios", default=None, help="latency: comma-separated fnmatch globs")
    p.add_argument("--only", default=None, help="grid, compile: comma-separated fnmatch globs over node ids")
    p.add_argument("--processes", type=int, default=0, help="grid, compile: processes (0: one per CPU)")
    p.add_argument("--nodes", default=None, help="compile: JSON list of node ids (default: every keyed case)")
    p.add_argument("--shard", default=None, help="compile: I/N, this shard's kernels only")
    p.add_argument("--cache-dir", default=None, help="compile: the Triton cache to fill")
    return p


def parse(argv_: list[str] | None = None) -> argparse.Namespace:
    """`plan_parser`'s arguments, with those the kind needs (NEEDS) given."""
    p = plan_parser()
    args = p.parse_args(argv_)
    missing = [f"--{n.replace('_', '-')}" for n in NEEDS[args.kind] if getattr(args, n) is None]
    if missing:
        p.error(f"--kind {args.kind} needs {', '.join(missing)}")
    return args


def refuse_interpreter(what: str) -> None:
    """ConfigError under TRITON_INTERPRET=1: `what` needs Triton's real kernels."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise ConfigError(f"TRITON_INTERPRET=1 is set: {what}; unset it")


def target_of(args: argparse.Namespace):
    """The compile target `--target` names in `--thresholds`."""
    from perf.static.plan import load_targets
    from perf.thresholds import load_thresholds

    (target,) = [t for t in load_targets(load_thresholds(args.thresholds)) if t.name == args.target]
    return target


def _worker_start() -> None:
    """A pool worker ends quietly when its parent stops it (not with the parent's SIGTERM handler)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the pool


def forked(fn, items, processes: int = 0) -> list:
    """[fn(item) for item in items], in `processes` workers forked from this process (0: one per
    CPU), so they share what it has loaded (both checkouts' kernels, the planned cases); here when
    one process would do."""
    items = list(items)
    processes = max(1, min(processes or os.cpu_count() or 1, len(items) or 1))
    if processes == 1:
        return [fn(item) for item in items]
    # not multiprocessing.Pool: a worker that dies (killed, a crash in a native library) would leave it
    # waiting forever; this pool raises BrokenProcessPool
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from perf.static.build import stop_pool

    pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                               initializer=_worker_start)
    futures = [pool.submit(fn, item) for item in items]
    try:
        results = [future.result() for future in futures]
    except BaseException:  # an error or interrupt: stop the workers
        stop_pool(pool, futures)
        raise
    pool.shutdown(wait=True)
    return results


def write(args: argparse.Namespace, **answer) -> None:
    """The document for the parent (module docstring)."""
    files.write_text(args.out, json.dumps({"schema": SCHEMA, "kind": args.kind, "target": args.target,
                                           "num_sms": args.num_sms, **answer}))
