"""The correctness grid's plan: when one may select the keyed cases at all, and pytest applying it.

`perf grid --cases` (perf/change/grid.py) plans every case of the grid's two parametrized
correctness tests (tests/grid_cases.py) on base and head, as if on the runner's GPU, and writes a
plan of kind "grid" (perf/change/plan.py): the cases whose launches differ (`run`) and those whose
launches are identical (`unchanged`). tests/conftest.py's `--grid-plan FILE` deselects the
unchanged ones on the GPU; every other test of the grid runs whole. Why that is sound, and only
when every changed grid input is one of `SELECTABLE`: docs/latency.md, "The correctness grid's
share". This module is what pytest loads (the reader, the rule, the check against this GPU and
checkout): the harness files it imports are grid inputs (perf/ci/grid.py IMPORTED).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from perf.change import plan
from perf.errors import ConfigError

PLAN_FILE = plan.KINDS[plan.GRID].file
# Changed grid inputs whose whole effect on a keyed case is what its launch keys see: the variants'
# kernels, host planning and decision trees (perf/change/keys.py keys their launches, the call path
# and the torch operations of the call). Anything else a test reads (the tests, the reference,
# batch building, input checks, kernels/launch.py, conftest, pins, image, workflows) runs the
# whole grid. fnmatch globs, `*` also matching `/` (as perf/ci/grid.py's).
SELECTABLE = ("kernels/paged_attention/*",)
# Where a new, untracked file changes what the grid runs: its packages and tests, pytest's configuration.
_LOADED_NEW = ("kernels", "tests", "conftest.py", "pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml")


def read_plan(path: str) -> dict:
    """A grid plan, every field checked (perf/change/plan.py)."""
    return plan.read_plan(path, plan.GRID)


def selectable(changed: Iterable[str]) -> tuple[bool, str]:
    """(whether a per-case plan may select the keyed cases, why) for the changed grid inputs
    (perf/ci/grid.py `decide(...).changed`). Nothing changed proves nothing: no selection."""
    paths = sorted(set(changed))
    if not paths:
        return False, "no changed grid input to plan for: the whole grid runs"
    other = [p for p in paths if not any(fnmatch.fnmatchcase(p, g) for g in SELECTABLE)]
    if other:
        more = f" and {len(other) - 3} more" if len(other) > 3 else ""
        return False, (f"changed grid inputs outside {', '.join(SELECTABLE)}: {', '.join(other[:3])}{more}; "
                       f"the whole grid runs")
    return True, f"every changed grid input is in {', '.join(SELECTABLE)} ({len(paths)} files)"


def not_applicable(doc: dict, root: str) -> str | None:
    """Why the plan must not deselect anything in the checkout at `root` on this machine (then
    every case runs: sound), or None: a GPU of the plan's vendor, architecture and SM/CU count
    (the heuristics size launches by it), and the plan's head checked out, unmodified."""
    from perf import git, vendor

    found = vendor.detect()
    if found is None:
        return "no GPU here (the plan keys launches for a GPU target)"
    if found != doc["vendor"]:
        return f"planned for {doc['vendor']}, this GPU is {found}"
    arch, num_sms, name = vendor.gpu_arch(found)
    if arch != doc["arch"] or num_sms != doc["num_sms"]:
        return (f"planned for {doc['target']} with {doc['num_sms']} SMs/CUs, this GPU ({name}) is {arch} "
                f"with {num_sms}")
    head = git.head(root)
    if head != doc["head"]:
        return f"planned for commit {doc['head'][:12]}, this checkout is at {(head or 'no commit')[:12]}"
    # Tracked files changed anywhere, or new files where pytest would load them (not a test run's
    # own leftovers elsewhere, such as .hypothesis/, which every worker must see alike).
    dirty = (git.git(root, "status", "--porcelain", "--untracked-files=no")
             or git.git(root, "status", "--porcelain", "--untracked-files=all", "--", *_LOADED_NEW))
    if dirty:
        return f"the working tree differs from {head[:12]} ({dirty.splitlines()[0].split(None, 1)[-1]})"
    return None


def deselected(doc: dict, path: str, collected: Iterable[str]) -> set[str]:
    """The collected node ids the plan finds unchanged. ConfigError for a plan naming a keyed case
    this collection lacks (a stale plan, or one of another checkout)."""
    have = set(collected)
    for key in ("run", "unchanged"):
        missing = [n for (n,) in plan.cases(doc, key) if n not in have]
        if missing:
            raise ConfigError(f"--grid-plan {path}: {key} names {missing[0]}, which this run did not collect "
                              f"({len(missing)} such); run the grid's test modules whole with the plan made "
                              f"for this commit, or drop --grid-plan")
    return {n for (n,) in plan.cases(doc, "unchanged")}
