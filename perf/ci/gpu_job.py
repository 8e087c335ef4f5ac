"""The PR GPU job on this machine: what `nox -s ci -- --vendor nvidia|amd` runs.

It runs `perf.ci.jobs.PR_GPU_COMMANDS`, the list pr.yml's GPU jobs were generated from, in
order with this interpreter (no virtualenv, like the job, so the vendor's torch is kept),
stops at the first failure and prints a table of the steps. Its `--verify-torch` mode is
the job's first step: exit 2 with one line unless torch is the vendor's build and sees a
GPU.

    python -m perf.ci.gpu_job --vendor nvidia [--base-ref REF] [--dry-run] [--whole-grid] [--grid-plan FILE]
                              [--compile-cache DIR]
    python -m perf.ci.gpu_job --verify-torch --vendor nvidia
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf.ci.jobs import GRID_STEP, NOX, PR_GPU_COMMANDS, Command
from perf.errors import EXIT_BAD_INPUT, EXIT_OK, ConfigError
from perf.thresholds import DEFAULT_PATH, load_thresholds
from perf.vendor import VENDORS, built_for


def verify_torch(vendor: str) -> int:
    """Exit 0 when this interpreter's torch is `vendor`'s build and sees its GPU, else 2."""
    import torch

    from kernels import platform

    gpu_steps = ", ".join(f"'{c.title(vendor)}'" for c in PR_GPU_COMMANDS if c.gpu and c.id != "verify")
    built = built_for(torch)
    build = (f"{VENDORS[built].runtime} {getattr(torch.version, VENDORS[built].backend)}" if built else
             "CPU-only")
    problem = None
    if built != vendor:
        problem = f"torch {torch.__version__} is the {build} build, not a {VENDORS[vendor].runtime} build"
    elif not torch.cuda.is_available():
        problem = f"torch {torch.__version__} ({build}) sees no GPU"
    elif platform.interpreter_active():
        problem = "TRITON_INTERPRET is set, so Triton would run on the CPU; unset it"
    if problem:
        line = (f"{vendor} GPU job: {problem}; the steps {gpu_steps} need an {vendor} GPU and the vendor's "
                f"torch build (run them on such a machine; `nox -s tests` runs the CPU subset here)")
        print(line, file=sys.stderr)
        summary(f"**{vendor} GPU job: wrong environment.** {line}")
        return EXIT_BAD_INPUT
    import triton

    p = platform.current()
    line = (f"{vendor}: torch {torch.__version__} ({build}), triton {triton.__version__}, "
            f"{p.device_name} ({p.arch}, {p.num_sms} SMs/CUs)")
    print(line)
    summary(f"**Runner:** {line}; runner `{os.environ.get('RUNNER_NAME', '?')}`")
    return EXIT_OK


def summary(markdown: str) -> None:
    """Append to the GitHub job summary when running in a job (never fatal: perf.report.step_summary)."""
    from perf.report import step_summary

    step_summary(markdown + "\n\n")


def ci_commands(vendor: str, base_ref: str | None,
                grid_plan: str | None = None) -> list[tuple[Command, list[str]]]:
    """The PR GPU job's commands for `vendor`, as argv lists for this interpreter; `grid_plan`: the
    grid plan the grid's step is given (`perf grid --cases`, as the job's `changes` job makes it)."""
    out = []
    for c in PR_GPU_COMMANDS:
        argv = c.words(vendor)
        if argv[0] == "python":
            argv[0] = sys.executable
        if c.base_flag and base_ref:
            argv += [c.base_flag, base_ref]
        if c.plan_flag and grid_plan:
            argv += [c.plan_flag, grid_plan]
        out.append((c, argv))
    return out


def grid_runs(root: Path, base_ref: str | None, whole_grid: bool) -> bool:
    """The `changes` job's decision for the correctness grid, here (printed): the same rule over
    the files changed from the merge base, uncommitted and untracked ones included."""
    from perf.ci import grid

    if whole_grid:
        print("correctness grid: runs (--whole-grid)")
        return True
    base, d = grid.decision(str(root), base_ref)
    print(f"correctness grid against {base}: {'runs' if d.run else 'skipped'}; {d.reason}")
    return d.run


def step_env(c: Command, compile_cache: str | None) -> dict[str, str]:
    """What a step's environment adds: the grid reads the precompiled Triton cache where one is
    given (`perf grid --compile-cache DIR`, as pr.yml's grid step sets TRITON_CACHE_DIR)."""
    return {"TRITON_CACHE_DIR": compile_cache} if c.id == GRID_STEP and compile_cache else {}


def shown(argv: list[str], extra: dict[str, str]) -> str:
    """A step as a shell line, its added environment first."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in extra.items()), shlex.join(argv)])


def run_ci(vendor: str, base_ref: str | None, dry_run: bool, root: Path, whole_grid: bool = False,
           grid_plan: str | None = None, compile_cache: str | None = None) -> int:
    """Run the GPU job's commands in order, as the job does; stop at the first failure."""
    plan = ci_commands(vendor, base_ref, grid_plan)
    if not grid_runs(root, base_ref, whole_grid):
        plan = [(c, argv) for c, argv in plan if c.id != GRID_STEP]
    if dry_run:
        for c, argv in plan:
            print(shown(argv, step_env(c, compile_cache)))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False)
    rows, rc = [], EXIT_OK
    with tempfile.TemporaryDirectory() as shim:
        env = _python_on_path(Path(shim))
        for i, (c, argv) in enumerate(plan):
            if argv[1:3] == ["-m", "nox"] and not _has_nox(argv[0]):
                raise ConfigError(f"{argv[0]}: nox is not installed for this interpreter; "
                                  f"`{argv[0]} -m pip install {NOX}`")
            console.rule(f"[bold]{i + 1}/{len(plan)} {c.title(vendor)}")
            extra = step_env(c, compile_cache)
            console.print(f"$ {shown(argv, extra)}", highlight=False)
            start = time.monotonic()
            rc = subprocess.call(argv, cwd=root, env={**env, **extra})
            rows.append((c, rc, time.monotonic() - start))
            if rc:
                break
    table = Table(title=f"nox -s ci -- --vendor {vendor}: the {vendor} GPU job's steps")
    for col in ("step", "exit", "seconds"):
        table.add_column(col)
    for c, code, secs in rows:
        table.add_row(c.title(vendor), str(code), f"{secs:.0f}")
    for c, _ in plan[len(rows):]:
        table.add_row(c.title(vendor), "not run", "")
    console.print(table)
    return rc


def _python_on_path(shim: Path) -> dict[str, str]:
    """The environment for the steps: nox sessions run `python`, which some images lack."""
    env = dict(os.environ)
    if shutil.which("python") is None:
        (shim / "python").symlink_to(sys.executable)
        env["PATH"] = os.pathsep.join([str(shim), env.get("PATH", "")])
    return env


def _has_nox(python: str) -> bool:
    return subprocess.call([python, "-c", "import nox"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) == 0


# --- Command line ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--thresholds", default=DEFAULT_PATH, metavar="PATH",
                        help=f"thresholds file (default: ./{DEFAULT_PATH})")
    parser.add_argument("--root", default=".", help="repository root the steps run in (default: .)")
    parser.add_argument("--vendor", choices=VENDORS, help="whose GPU job: nvidia | amd (required)")
    parser.add_argument("--verify-torch", action="store_true",
                        help="only the job's first step: exit 2 unless torch is the --vendor build "
                             "and sees a GPU")
    parser.add_argument("--base-ref", default=None,
                        help="base commit of the latency gate and of the grid's decision (default: the "
                             "merge base with origin/main or main)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--whole-grid", action="store_true",
                        help="run the correctness grid even where no input of it changed (perf grid)")
    parser.add_argument("--grid-plan", default=None, metavar="FILE",
                        help="the grid plan of `python -m perf grid --cases` (the changes job's): the grid's "
                             "step deselects the keyed cases it finds unchanged")
    parser.add_argument("--compile-cache", default=None, metavar="DIR",
                        help="a Triton cache `python -m perf grid --compile-cache DIR` filled (the grid "
                             "compile job's): the grid's step reads it as TRITON_CACHE_DIR")


def main(args: argparse.Namespace) -> int:
    try:
        if not args.vendor:
            raise ConfigError(f"--vendor: which GPU job? add --vendor {'|'.join(VENDORS)} "
                              f"(e.g. `nox -s ci -- --vendor nvidia`)")
        if args.verify_torch:
            return verify_torch(args.vendor)
        th = load_thresholds(args.thresholds)
        if args.vendor not in th.vendors:
            raise ConfigError(f"{args.thresholds}: no `{args.vendor}:` section, so no {args.vendor} GPU job; "
                              f"add one or pick --vendor {'|'.join(sorted(th.vendors))}")
        grid_plan = None
        if args.grid_plan:
            from perf.change.grid_plan import read_plan

            read_plan(args.grid_plan)  # a bad file: one line before any step runs
            grid_plan = os.path.abspath(args.grid_plan)
        compile_cache = None
        if args.compile_cache:
            if not os.path.isdir(args.compile_cache):
                raise ConfigError(f"--compile-cache {args.compile_cache}: no such folder; fill it with "
                                  f"`python -m perf grid --compile-cache {args.compile_cache} --vendor "
                                  f"{args.vendor}` first")
            compile_cache = os.path.abspath(args.compile_cache)
        return run_ci(args.vendor, args.base_ref, args.dry_run, Path(args.root), args.whole_grid, grid_plan,
                      compile_cache)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.ci.gpu_job", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    from perf.cli import command

    command("gpu-job")
