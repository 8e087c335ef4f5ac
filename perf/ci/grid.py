"""The GPU correctness grid's inputs: a change that touches none of them skips the grid's step.

The grid's outcome on a given runner is a function of what it runs: the kernels package, the
reference, its test modules and what they import and read, pytest's and the toolchain's
configuration, the image (thresholds.yaml pins it) and the GPU job's own commands. When no
file changed between the merge base and the head is one of those, the grid would run the very
same code on the very same inputs, so its step is skipped with the reason "unchanged
inputs: ...". A changed kernels/*.py that parses to the same program (`same_program`:
only comments, blank lines, docstrings or the order of definitions moved) is no change of
what runs, so it alone skips the grid too, and the reason names it. tests/ci/test_grid_inputs.py
keeps `INPUTS` equal to an import trace of the grid (every repository file its modules load, at
any depth), so the list cannot drift; what the
rule cannot see (a driver or image change outside the repository) is the nightly's
(docs/latency.md, "What it costs"). Stdlib only: pr.yml's `changes` job runs it with the
hosted runner's python3.

With `--cases` it also plans the grid's keyed cases on base and head (perf/change/grid.py,
needs torch and triton: the `changes` job runs it in `nox -s cli`), when the grid runs and every
changed input is one perf/change/grid_plan.py lets a per-case plan select; the GPU job then
deselects the cases whose launches are identical (`pytest --grid-plan`). With `--compile-cache DIR`
it compiles the keyed cases' kernels (those of a `--grid-plan`, or all) on this CPU into a Triton
cache the GPU job's grid loads instead of compiling (perf/change/grid_cache.py).

    python -m perf grid [--base-ref REF] [--github-output]
    python -m perf grid --cases --vendor V --out DIR [--base-ref REF] [--only GLOBS] [--github-output]
    python -m perf grid --compile-cache DIR --vendor V [--grid-plan FILE] [--shard I/N] [--only GLOBS]
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass

from perf.ci.github import github_output

# The grid: the kernels' test modules, those that import nothing of the harness at any depth
# beyond the few files listed in IMPORTED (the GPU pool conftest pins xdist workers with, the
# tolerances the latency gate shares). The harness's own tests run on the CPU job.
TESTS = tuple(f"tests/kernels/test_{name}.py" for name in (
    "batch", "correctness", "graph_replay", "inputs", "multi_token_decode", "planning", "platform",
    "reference", "warp_specialize", "window_poison", "inputs_refused", "fp8_products", "memory_safety",
    "pdl", "e4m3_pairs", "warp_specialized", "interpreter"))
# Repository files the grid's modules import (tests/ci/test_grid_inputs.py traces them).
IMPORTED = ("kernels/*", "tests/conftest.py", "tests/interpreter_support.py", "tests/grid_cases.py",
            "tests/triton_compiles.py", "perf/__init__.py", "perf/devices.py", "perf/vendor.py",
            "perf/errors.py", "perf/measure/__init__.py", "perf/measure/check.py",
            "perf/change/__init__.py", "perf/change/plan.py", "perf/change/grid_plan.py", "perf/files.py",
            "perf/git.py", "perf/process.py", "perf/names.py", "perf/schema.py")
# Files pytest, nox and the job read to decide what runs and with which toolchain: the test
# data, pytest's configuration wherever it may live, the pins, the image, the job's commands.
CONFIGURATION = ("tests/data/*", "pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "conftest.py",
                 "tests/__init__.py", "noxfile.py", "thresholds.yaml", "perf/ci/grid.py", "perf/ci/jobs.py",
                 "perf/ci/gpu_job.py", ".github/workflows/pr.yml")
# fnmatch globs over `git diff --name-only` paths; `*` also matches `/` (as in bash `case`).
INPUTS = (*IMPORTED, *TESTS, *CONFIGURATION)
# Inputs whose change is no change when the file parses to the same program (`same_program`): the
# kernels' Python, which the grid runs only by importing it.
SAME_PROGRAM = ("kernels/*.py",)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Decision:
    """Whether the grid must run for a change, and why, in one line."""

    run: bool
    reason: str
    changed: tuple[str, ...]  # the changed inputs (empty when skipped)


def is_input(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in INPUTS)


def decide(changed: Iterable[str], same: Iterable[str] = ()) -> Decision:
    """Run the grid iff some changed path is an input, other than those of `same` (changed files
    that parse to the same program, `same_program`); nothing changed proves nothing (run)."""
    paths, same = sorted(set(changed)), sorted(set(same))
    if not paths:
        return Decision(True, "no changed file found: the whole grid runs", ())
    hits = tuple(p for p in paths if is_input(p) and p not in same)
    if hits:
        more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
        return Decision(True, f"changed inputs: {', '.join(hits[:3])}{more}", hits)
    moved = [p for p in same if p in paths]
    if moved:
        more = f" and {len(moved) - 3} more" if len(moved) > 3 else ""
        return Decision(False, f"unchanged inputs: {', '.join(moved[:3])}{more} changed only in comments, "
                               f"blank lines, docstrings or the order of definitions (the same program); "
                               f"none of the other {len(paths) - len(moved)} changed files is an input", ())
    return Decision(False, f"unchanged inputs: {', '.join(INPUTS)} ({len(paths)} changed files, none of "
                           f"them an input)", ())


def same_program(old: str | None, new: str | None) -> bool:
    """Whether two texts of a Python module run as the same program: equal syntax trees once
    docstrings are dropped (comments and blank lines are not in them), each run of consecutive
    top-level definitions compared as a name -> definition mapping where their order cannot matter
    (`_program`). A file added, removed or that does not parse is not the same."""
    if old is None or new is None:
        return False
    before, after = _program(old), _program(new)
    return before is not None and before == after


def _program(text: str) -> list | None:
    """The statements of a module as `same_program` compares them; None when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, *_DEFINITIONS)) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:]  # a docstring: the program never reads it
    program, run = [], []
    for statement in [*tree.body, None]:
        if isinstance(statement, _DEFINITIONS):
            run.append(statement)
            continue
        if run:
            program.append(_definitions(run))
            run = []
        if statement is not None:
            program.append(ast.dump(statement))
    return program


def _definitions(run: list) -> tuple:
    """A run of consecutive top-level definitions, by name in any order: each with what it reads,
    while it is defined (decorators, defaults, annotations, base classes, a class's body), of the
    names the run binds, split into those bound before it and those after (so a move that changes
    what a definition finds is a change); in their order when a name is defined twice."""
    names = [d.name for d in run]
    if len(set(names)) < len(names):
        return ("in order", [ast.dump(d) for d in run])
    entries = []
    for i, d in enumerate(run):
        now = [*d.decorator_list]
        if isinstance(d, ast.ClassDef):
            now += [*d.bases, *d.keywords, *d.body]
        else:
            a = d.args
            params = (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
            now += [*a.defaults, *a.kw_defaults, d.returns, *[p.annotation for p in params if p is not None]]
        read = {n.id for x in now if x is not None for n in ast.walk(x) if isinstance(n, ast.Name)}
        before, after = set(names[:i]), set(names[i + 1:])
        entries.append((d.name, ast.dump(d), sorted(read & before), sorted(read & after)))
    return ("by name", sorted(entries))


def changed_files(root: str, base_ref: str | None) -> tuple[str, str, list[str]]:
    """(description of the base, the merge base, paths changed from it to the working tree): the
    committed change, as CI sees it, plus uncommitted and untracked files on a developer's
    machine. Renames count as a deletion and an addition (both paths)."""
    from perf import git

    base, what = git.resolve_base(root, base_ref)
    merge_base = git.git(root, "merge-base", base, "HEAD", check=True)
    diff = git.git(root, "diff", "-z", "--no-renames", "--name-only", merge_base, check=True) or ""
    untracked = git.git(root, "ls-files", "-z", "--others", "--exclude-standard", check=True) or ""
    paths = [p for p in (diff + "\0" + untracked).split("\0") if p]
    return f"{what} ({merge_base[:12]})", merge_base, paths


def _same_programs(root: str, merge_base: str, paths: list[str]) -> list[str]:
    """The changed `SAME_PROGRAM` inputs whose working-tree text parses to the merge base's program."""
    from perf import git

    same = []
    for path in paths:
        if not any(fnmatch.fnmatchcase(path, g) for g in SAME_PROGRAM):
            continue
        old = git.run(root, "show", f"{merge_base}:{path}")
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                new = f.read()
        except (OSError, UnicodeDecodeError):
            new = None
        if old is not None and old.returncode == 0 and same_program(old.stdout, new):
            same.append(path)
    return same


def decision(root: str, base_ref: str | None) -> tuple[str, Decision]:
    base, merge_base, paths = changed_files(root, base_ref)
    return base, decide(paths, _same_programs(root, merge_base, paths))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default=".", help="repository root (default: .)")
    parser.add_argument("--base-ref", default=None,
                        help="compare with the merge base of REF and HEAD (default: origin/main or main)")
    parser.add_argument("--github-output", action="store_true",
                        help="also append `correctness=true|false` (with --cases: `grid_plan=true|false`) to "
                             "$GITHUB_OUTPUT")
    cases = parser.add_argument_group("per-case plan (--cases)")
    cases.add_argument("--cases", action="store_true",
                       help="plan the grid's keyed cases on base and head; write DIR/grid-plan.json")
    cases.add_argument("--vendor", default=None, help="the runner's vendor (nvidia | amd)")
    cases.add_argument("--out", default=None, help="folder for grid-plan.json")
    cases.add_argument("--only", default=None,
                       help="only the keyed cases whose node ids match these comma-separated fnmatch globs "
                            "(write [ as [[])")
    cases.add_argument("--processes", type=int, default=0, help="planning processes (default: one per CPU)")
    cases.add_argument("--thresholds", default="thresholds.yaml",
                       help="the compile targets (default: %(default)s)")
    cases.add_argument("--allow-dirty", action="store_true",
                       help="plan although the working tree has uncommitted changes (the plan names HEAD)")
    ahead = parser.add_argument_group("compiled on CPUs (--compile-cache; --vendor, --only, --processes)")
    ahead.add_argument("--compile-cache", metavar="DIR", default=None,
                       help="compile the keyed cases' kernels for the runner's target into DIR, a Triton "
                            "cache for the GPU job (perf/change/grid_cache.py)")
    ahead.add_argument("--grid-plan", metavar="FILE", default=None,
                       help="with --compile-cache: only the plan's cases to run")
    ahead.add_argument("--shard", metavar="I/N", default=None,
                       help="with --compile-cache: only shard I of N of the distinct kernels")


def main(args: argparse.Namespace) -> int:
    if getattr(args, "cases", False) and getattr(args, "compile_cache", None):
        from perf.errors import ConfigError

        raise ConfigError("--cases and --compile-cache are two steps: run them one after the other")
    if getattr(args, "cases", False):
        from perf.change import grid as keyed

        planned = keyed.plan_command(args, decision)
        if args.github_output:
            github_output("grid_plan", "true" if planned else "false")
        return 0
    if getattr(args, "compile_cache", None):
        from perf.change import grid_cache

        return grid_cache.main(args)
    base, d = decision(args.root, args.base_ref)
    line = f"correctness grid against {base}: {'runs' if d.run else 'skipped'}; {d.reason}"
    print(line)
    if args.github_output:
        from perf.report import step_summary

        step_summary(f"**{line}**\n\n")
        github_output("correctness", "true" if d.run else "false")
    return 0


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.ci.grid", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    from perf.cli import command

    command("grid")
