"""The correctness grid compiled on CPUs: the kernels of its keyed cases, into a Triton cache that
the GPU job's grid reads instead of compiling.

On a GPU runner the grid is compile-bound: on an NVIDIA H100 80GB HBM3 with 16 CPUs (2026-11-26),
85 % of its worker time went to Triton's compiler (3,161 compiles), the CPUs 98 % busy and the
GPU idle nearly throughout. `python -m perf grid --compile-cache DIR --vendor V [--grid-plan FILE]
[--shard I/N]` plans the grid's keyed cases (tests/grid_cases.py: all of them, or the plan's `run`
list) on this checkout as the tests call them, the grid plan's way (perf/change/grid.py: each
case's batch and `config` hint, the platform answering as the runner's GPU, the first call and the
kept plan's), and compiles each distinct kernel (this shard's, by compile key) into DIR with
perf/static/build.py `precompile`: binaries and metadata under the key Triton's JIT computes for
that launch. The GPU job merges the shards' folders and points TRITON_CACHE_DIR at them. A launch
whose key is there loads the binary; one whose key is not (another Triton build, a specialization
the CPU did not foresee) compiles on the GPU as before, so the cache moves time, never a result:
the key names the kernel's source and every function it calls, the specialization, the options,
the target and the Triton build. It pays only when it runs under the GPU job's own Triton (its
image: the `grid-compile` jobs of pr.yml run in it, on CPU runners); `pytest` prints how many
kernels the grid compiled and how many it loaded (tests/triton_compiles.py). The compiling runs in
the planning process (`python -m perf.change --kind compile`, perf/change/side.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from perf import files
from perf.change import grid, plan, side
from perf.errors import ConfigError


def shard_of(key: str, count: int) -> int:
    """The shard a compile key falls in: a stable split of the distinct kernels."""
    return int(key[:8], 16) % count


def parse_shard(text: str | None) -> tuple[int, int]:
    """`I/N` (1 <= I <= N) -> (I - 1, N); None -> (0, 1)."""
    if text is None:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise ConfigError(f"--shard {text!r}: write I/N with 1 <= I <= N (e.g. 2/8)")
    return i - 1, n


# --------------------------------------------------------------------------- in the planning process


def compile_cases(args: argparse.Namespace) -> dict:
    """Plan the cases on this checkout's kernels (imported as `kernels`, so each job's module is
    importable by the compile workers), then compile this shard's distinct kernels into
    `--cache-dir`; what was planned and compiled, in counts and seconds."""
    import kernels
    from kernels import platform
    from perf.checkout import ROOT
    from perf.static import build

    index, count = parse_shard(args.shard)
    target = side.target_of(args)
    side.as_if_on(platform, target, args.num_sms)  # the tests call unhinted: as the grid plan
    cases_mod = grid.cases_module(ROOT)
    pristine = grid.Pristine([m for n, m in sys.modules.items() if n.split(".")[0] == "kernels"])
    cases = cases_mod.keyed_cases(list(kernels.VARIANTS))
    if args.nodes:
        wanted = set(files.load_json(args.nodes, "the node ids to compile", "plan again", expect=list))
        cases = [c for c in cases if c.node in wanted]
    cases = grid.only(cases, args.only)
    started = time.monotonic()
    jobs, planned = _jobs(cases, cases_mod, pristine, target, index, count)
    seconds = time.monotonic() - started
    results = build.precompile(list(jobs.values()), args.cache_dir, args.processes or os.cpu_count() or 1,
                               label="grid compile")
    errors = [r["error"] for r in results.values() if r["status"] != "ok"]
    return {"cases": len(cases), **planned, "kernels": len(jobs), "errors": len(errors),
            "first_error": errors[0] if errors else "", "plan_seconds": seconds,
            "compile_seconds": time.monotonic() - started - seconds,
            "compile_cpu_seconds": sum(r["seconds"] for r in results.values())}


def _jobs(cases: list, cases_mod, pristine, target, index: int, count: int) -> tuple[dict, dict]:
    """(compile key -> job of shard `index` of `count`, what planning skipped and failed) of every
    launch the cases' first and kept-plan calls make, as their tests make them."""
    import torch

    import kernels
    from perf.static.plan import job_of

    jobs: dict = {}
    planned = {"skipped": 0, "plan_failed": 0, "first_plan_error": ""}
    batches: dict = {}
    for case in cases:
        key = (case.spec, case.feature)
        variant = kernels.VARIANTS[case.variant]
        pristine.restore()  # the first call as a test's first (grid.Pristine)
        try:
            if key not in batches:
                batches = {key: grid.case_batch(cases_mod, case)}
            batch = batches[key]
            out = torch.empty_like(batch.q)
            # the first call and the kept plan's, as the test makes them (they may launch otherwise)
            launches = [launch for _ in range(2) for launch in
                        variant.plan(*batch.args(), out=out, **batch.options, **case.call_kwargs())[1]]
            for launch in launches:
                job = job_of(launch, target)
                if shard_of(job.key, count) == index:
                    jobs.setdefault(job.key, job)
        except NotImplementedError:
            planned["skipped"] += 1
        except Exception as e:  # the GPU run meets it too, and reports it on its test
            planned["plan_failed"] += 1
            if not planned["first_plan_error"]:
                planned["first_plan_error"] = f"{case.node}: {type(e).__name__}: {e}"[:300]
    return jobs, planned


# --------------------------------------------------------------------------- `perf grid --compile-cache`


def main(args: argparse.Namespace) -> int:
    """`perf grid --compile-cache DIR`: one line with what it compiled."""
    import tempfile

    from perf import vendor as vendor_mod
    from perf.change import grid_plan
    from perf.thresholds import load_thresholds

    if not args.vendor:
        raise ConfigError("--compile-cache needs --vendor nvidia|amd: it compiles for that runner's target")
    parse_shard(args.shard)
    cache_dir = files.check_output(os.path.abspath(args.compile_cache), "--compile-cache", directory=True)
    vendor = vendor_mod.resolve(args.vendor)
    runner = side.runner_target(load_thresholds(args.thresholds), vendor, on_gpu=False)
    nodes = None
    if args.grid_plan:
        doc = grid_plan.read_plan(args.grid_plan)
        if doc["vendor"] != vendor:
            raise ConfigError(f"--grid-plan {args.grid_plan}: planned for {doc['vendor']}, not {vendor}")
        nodes = [node for (node,) in plan.cases(doc, "run")]
    with tempfile.TemporaryDirectory(prefix="perf-grid-compile-") as tmp:
        listed = files.write_json(os.path.join(tmp, "nodes.json"), nodes) if nodes is not None else None
        done = side.plan("compile", os.path.join(tmp, "done.json"), target=runner.target,
                         num_sms=runner.num_sms, thresholds=args.thresholds, cache_dir=cache_dir,
                         processes=args.processes, nodes=listed, only=args.only, shard=args.shard)
    print(f"grid compile for {runner.note}: {done['cases']} keyed cases"
          f"{' (the grid plan)' if nodes is not None else ''}, {done['kernels']} distinct kernels"
          f"{f' in shard {args.shard}' if args.shard else ''} compiled into {cache_dir} in "
          f"{done['compile_seconds']:.0f} s ({done['compile_cpu_seconds']:.0f} CPU-s; planned in "
          f"{done['plan_seconds']:.0f} s); {done['errors']} failed to compile"
          + (f" (first: {done['first_error']})" if done["errors"] else "")
          + (f"; {done['plan_failed']} cases failed to plan, their tests compile on the GPU (first: "
             f"{done['first_plan_error']})" if done["plan_failed"] else ""), flush=True)
    return 0
