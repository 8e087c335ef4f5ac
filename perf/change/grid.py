"""The correctness grid's change plan: which keyed cases can compute something else on the head
than on the base, found on a CPU (`python -m perf grid --cases`).

The keyed cases are those of the grid's two parametrized correctness tests
(tests/grid_cases.py: `test_matches_reference`, `test_forced_config_matches_reference`). Each
is planned on base and head as the latency gate's cases are (perf/change/keys.py `case_key`:
each side's own planner, called as the test calls it with the kernels' platform answering as the
runner's GPU, every launch bound and its binary named by Triton's compile key, the call path, the
torch operations of the call, the bytes of the planner's own tensors (`defined_memory`); the
first call's too, since a test calls once, planned from a fresh worker's state, `Pristine`), on
the batch its test builds (`build_batch(poison=True)` with the test's seed and fp8 format,
unfilled: values decide no launch) and with the `config` hint its test passes, read from the
head's test lists loaded against each side's kernels. A case is `unchanged` exactly when
`keys.difference(base, head)` is None: by Triton's compile key alone, not by machine code as the
latency gate's plan (`keys.Code`), whose compiles over every keyed case would cost CPU-hours on a
kernel-wide change; a change that leaves the kernels the same program skips the grid before
(perf/ci/grid.py `same_program`). Only made when every changed grid input is one of
perf/change/grid_plan.py `SELECTABLE`; docs/latency.md argues it.

Planning runs in the planning process (`python -m perf.change --kind grid`, perf/change/side.py),
its cases spread over a pool of forked workers (both checkouts loaded once, before the fork).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib.util
import os
import sys
from collections.abc import Callable

from perf.change import keys, plan, side
from perf.errors import ConfigError

CASES_FILE = os.path.join("tests", "grid_cases.py")  # the keyed cases, in the head checkout


# --------------------------------------------------------------------------- in the planning process

_STATE: dict = {}  # what the forked workers share: sides, case lists, target (set before the fork)


def cases_module(root: str, checkout_side=None):
    """The head's tests/grid_cases.py, executed against `checkout_side`'s kernels (its Config,
    BatchSpec), or against the `kernels` imported here when it is None (perf/change/grid_cache.py)."""
    path = os.path.join(root, CASES_FILE)
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: missing; the grid plan reads the keyed cases from it (a checkout older "
                          f"than it runs the whole grid)")
    alias = checkout_side.alias if checkout_side is not None else "here"
    spec = importlib.util.spec_from_file_location(f"grid_cases_{alias}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    with checkout_side.active() if checkout_side is not None else contextlib.nullcontext():
        spec.loader.exec_module(module)
    return module


def only(cases: list, globs: str | None) -> list:
    """The cases whose node ids match one of `--only`'s comma-separated fnmatch globs (all without)."""
    patterns = [g.strip() for g in (globs or "").split(",") if g.strip()]
    return [c for c in cases if any(fnmatch.fnmatchcase(c.node, g) for g in patterns)] if patterns else cases


def defined_memory() -> None:
    """New tensors' memory filled with known values (NaN, an integer's maximum) in this process, so
    that the bytes `keys.case_key(contents=True)` reads of a planner's buffers are the same on
    every run and differ only where a planner writes other values."""
    import torch
    import torch.utils.deterministic

    # CPU planning: only the fill matters, which torch does while its deterministic flag is on.
    # torch.use_deterministic_algorithms sets inductor's config beside that flag, importing
    # torch._inductor (and torch._dynamo and sympy with it: 1.4 CPU s a planning process, 2-core
    # CPU, torch 2.13, 2026-12-03) for a compiler this process never runs: the flag is set alone
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        set_flag(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def refuse_device_queries() -> None:
    """Each `torch.cuda` function raises when code under `SELECTABLE` calls it in this process: a
    planner asking the device would read this CPU where the runner has a GPU and plan what the
    runner does not run; its case then fails to plan, so it runs. (kernels/platform.py, outside
    `SELECTABLE`, answers as the runner's GPU: `side.as_if_on`.) A tripwire for direct calls; what it
    cannot see is in docs/latency.md."""
    import functools
    import inspect

    import torch

    from perf.change.grid_plan import SELECTABLE

    def planner_code(filename: str) -> bool:
        path = filename.replace(os.sep, "/")
        at = path.rfind("/kernels/")
        return at >= 0 and any(fnmatch.fnmatchcase(path[at + 1:], g) for g in SELECTABLE)

    def refusing(name, fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if planner_code(sys._getframe(1).f_code.co_filename):
                raise RuntimeError(f"the planner calls torch.cuda.{name}: planned on a CPU, it would read "
                                   f"this machine, not the runner's GPU")
            return fn(*args, **kwargs)
        return call

    for name, fn in list(vars(torch.cuda).items()):
        if inspect.isfunction(fn) and not name.startswith("_"):
            setattr(torch.cuda, name, refusing(name, fn))


def process_settings() -> dict:
    """What code may set for its whole process that changes what every kernel, or the fp32
    reference, computes on the GPU: the environment, Triton's knobs, torch's numeric switches.
    The planning process is one process for both sides and all cases, the GPU's is the head's
    alone: a side that set one of these (at import or while planning) would plan every later
    case under it, both sides alike, and hide itself (`settings_change`)."""
    import torch
    from triton import knobs

    def read(group, name) -> str:
        try:
            return repr(getattr(group, name))
        except Exception as e:  # a knob that looks for a tool this machine lacks (ptxas): as it reads
            return f"unreadable: {type(e).__name__}"

    groups = {name: g for name in dir(knobs) if isinstance(g := getattr(knobs, name), knobs.base_knobs)}
    matmul = torch.backends.cuda.matmul
    return {"environment": dict(os.environ),
            **{f"triton.knobs.{name}": {k: read(g, k) for k in g.knob_descriptors}
               for name, g in groups.items()},
            "torch": {"default dtype": str(torch.get_default_dtype()),
                      "float32 matmul precision": torch.get_float32_matmul_precision(),
                      "cuda matmul tf32": matmul.allow_tf32, "cudnn tf32": torch.backends.cudnn.allow_tf32,
                      "fp16 reduced precision": matmul.allow_fp16_reduced_precision_reduction,
                      "bf16 reduced precision": matmul.allow_bf16_reduced_precision_reduction}}


def settings_change(before: dict) -> str | None:
    """The first process setting that differs from `before` (`process_settings`), in a few words."""
    now = process_settings()
    for group, values in now.items():
        old = before.get(group, {})
        for key in sorted(set(values) | set(old)):
            if values.get(key) != old.get(key):
                return f"{group} {key}: {str(old.get(key))[:40]} -> {str(values.get(key))[:40]}"
    return None


class Pristine:
    """The module-level state of `modules` (a side's `kernels` package) as it was before any case
    was planned: every dict, list and set they hold (the planners' kept plans, choices, buffers,
    checked layouts) and every cache of their functions. `restore()` before a case puts it back, so
    the case's first call plans as a test's first call does in a worker that has run nothing else
    (what this process planned before would otherwise make it a kept plan's call, and the first
    call's own path would go unkeyed)."""

    def __init__(self, modules):
        self.saved, self.caches = [], []
        for module in modules:
            for name, value in vars(module).items():
                if name.startswith("__"):  # __builtins__ is a dict too
                    continue
                if type(value) in (dict, list, set):
                    self.saved.append((value, value.copy()))
                elif callable(getattr(value, "cache_clear", None)):
                    self.caches.append(value)

    def restore(self) -> None:
        for value, saved in self.saved:  # in place: other modules may hold the same object
            value.clear()
            value.extend(saved) if type(value) is list else value.update(saved)
        for function in self.caches:
            function.cache_clear()


def case_batch(module, case):
    """The batch a keyed case's test builds (poisoned, in its fp8 format), unfilled: values decide
    no launch. Call it with the kernels that built `module` active."""
    from kernels.batch import build_batch

    return build_batch(case.spec, "cpu", fill=False, poison=True, fp8_dtype=module.fp8_dtype(case.feature))


def _plan_chunk(indices: list[int]) -> list[dict]:
    """{node, why} of the cases at `indices` (one worker's share; `why` None: unchanged)."""
    s = _STATE
    out, batches = [], {}
    for i in indices:
        case = s["cases"][i]
        key = {}
        spec = (case.spec, case.feature)
        if spec not in batches:
            with s["sides"]["head"].active():
                try:
                    batches = {spec: case_batch(s["modules"]["head"], case)}
                except Exception as e:  # the test meets it too: its case runs and reports it
                    batches = {spec: f"batch failed: {type(e).__name__}: {e}".splitlines()[0][:300]}
        batch = batches[spec]
        for name, checkout_side in s["sides"].items():
            if isinstance(batch, str):
                key[name] = {"status": "error", "reason": batch}
                continue
            with checkout_side.active() as kernels:
                s["pristine"][name].restore()
                hints = case.call_kwargs(s["modules"][name].FORCED_CONFIGS)
                key[name] = keys.case_key(kernels, case.variant, batch, s["target"], s["num_sms"], hints,
                                          first_call=True, target_hints=False, contents=True)
        out.append({"node": case.node, "why": keys.difference(key["base"], key["head"])})
    changed = settings_change(s["settings"])
    if changed:  # this chunk, or one before it in this worker, planned under other settings
        why = f"planning changed the process's settings ({changed}); the GPU runs the head's alone"
        out = [{"node": row["node"], "why": why} for row in out]
    return out


def plan_cases(args: argparse.Namespace) -> list[dict]:
    """{node, why} of every keyed case (`--only`), planned in `--processes` forked workers."""
    import torch

    from perf import checkout

    torch.set_num_threads(1)  # the workers are the parallelism; no thread pools before the fork
    defined_memory()  # before the sides load: a table a module makes at import is known bytes too
    refuse_device_queries()
    settings = process_settings()
    target = side.target_of(args)
    sides = {s: checkout.load_side(getattr(args, s), f"kernels_grid_{s}") for s in ("base", "head")}
    for checkout_side in sides.values():
        platform = checkout_side.modules.get("kernels.platform")
        if platform is None:
            raise ConfigError(f"{checkout_side.root}: kernels/platform.py is missing; the grid plan needs "
                              f"the device's platform to plan as the tests call")
        side.as_if_on(platform, target, args.num_sms)  # the tests call unhinted: they ask the platform
    modules = {s: cases_module(args.head, checkout_side) for s, checkout_side in sides.items()}
    variants = list(getattr(sides["head"].kernels, "VARIANTS", {}))  # the head's tests collect the head's
    cases = only(modules["head"].keyed_cases(variants), args.only)
    changed = settings_change(settings)
    if changed:  # a side's import set it: every later plan would be made under it, on both sides
        return [{"node": c.node, "why": f"importing the kernels changed the process's settings ({changed})"}
                for c in cases]
    _STATE.update(sides=sides, modules=modules, cases=cases, target=target, num_sms=args.num_sms,
                  pristine={name: Pristine(s.modules.values()) for name, s in sides.items()},
                  settings=settings)
    return _in_workers(len(cases), args.processes)


def _in_workers(count: int, processes: int) -> list[dict]:
    """`_plan_chunk` over all `count` cases of _STATE, in `processes` forked workers (0: one per CPU)."""
    # chunks of consecutive cases (the variants of one batch together), a few per worker for balance
    processes = max(1, min(processes or os.cpu_count() or 1, count or 1))
    size = max(1, min(64, count // (processes * 4) or 1))
    chunks = [list(range(i, min(i + size, count))) for i in range(0, count, size)]
    return [row for rows in side.forked(_plan_chunk, chunks, processes) for row in rows]


# --------------------------------------------------------------------------- `perf grid --cases`


def plan_command(args: argparse.Namespace, decision: Callable) -> bool:
    """`perf grid --cases`: a grid plan in --out when the grid runs and per-case selection applies
    (perf/change/grid_plan.py `selectable`); one line either way. `decision(root, base_ref)` is
    perf/ci/grid.py's (the base's description, whether the grid runs). Whether it wrote a plan."""
    from perf import files, git
    from perf import vendor as vendor_mod
    from perf.change import grid_plan
    from perf.thresholds import load_thresholds

    if not args.vendor:
        raise ConfigError("--cases needs --vendor nvidia|amd: the plan keys launches for its runner")
    if not args.out:
        raise ConfigError("--cases needs --out DIR: where grid-plan.json is written")
    vendor = vendor_mod.resolve(args.vendor)
    root = git.repo_root(args.root)
    out_dir = files.check_output(os.path.abspath(args.out), "--out", directory=True)
    if not args.allow_dirty:
        git.check_clean(root)
    base_desc, d = decision(root, args.base_ref)
    if not d.run:
        print(f"grid: skipped, nothing to plan; {d.reason}", flush=True)
        return False
    ok, why = grid_plan.selectable(d.changed)
    if not ok:
        print(f"grid: no per-case plan; {why}", flush=True)
        return False
    runner = side.runner_target(load_thresholds(args.thresholds), vendor, vendor_mod.on_gpu())
    if runner.target is None:
        print(f"grid: no per-case plan; {runner.note}", flush=True)
        return False
    base_sha = git.git(root, "merge-base", git.resolve_base(root, args.base_ref)[0], "HEAD", check=True)
    head_sha = git.head(root)
    print(f"grid plan: {why}; planning base {base_desc} and head {head_sha[:12]} on this CPU "
          f"as if on {runner.note}", file=sys.stderr, flush=True)
    _plan_into(args, out_dir, root, runner, vendor=vendor, base=base_sha, head=head_sha)
    return True


def _plan_into(args: argparse.Namespace, out_dir: str, root: str, runner, **header) -> None:
    """Plan base (`header["base"]`, in a worktree) against this checkout, write the plan, say so."""
    import tempfile
    import time

    from perf import git

    started, cpu = time.monotonic(), _children_cpu()
    with git.worktree(root, header["base"]) as base_root, \
            tempfile.TemporaryDirectory(prefix="perf-grid-plan-") as tmp:
        rows = side.plan(plan.GRID, os.path.join(tmp, "grid-launches.json"), target=runner.target,
                         num_sms=runner.num_sms, thresholds=args.thresholds, base=base_root, head=root,
                         processes=args.processes, only=args.only)["rows"]
    if not rows:
        raise ConfigError(f"--only {args.only}: no keyed case of the grid matches; name some "
                          f"(pytest node ids, fnmatch globs)")
    doc = plan.document(plan.GRID, rows, target=runner.target.name, arch=str(runner.target.arch),
                        num_sms=runner.num_sms, **header)
    path = plan.write_plan(out_dir, doc)
    print(plan.summary(doc), flush=True)
    for row in doc["run"][:3]:
        print(f"  runs {row['node']}: {row['why']}", file=sys.stderr, flush=True)
    print(f"grid plan: {path} ({time.monotonic() - started:.0f} s, "
          f"{_children_cpu() - cpu:.0f} CPU-s)", file=sys.stderr, flush=True)


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the planning process and its pool)."""
    t = os.times()
    return t.children_user + t.children_system
