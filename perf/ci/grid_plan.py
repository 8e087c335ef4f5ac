"""The correctness grid's per-case plan: which keyed cases the GPU job runs, and the rule for when
such a plan may be made at all.

`perf grid --cases` (perf/ci/grid_changes.py) plans every case of the grid's two
parametrized correctness tests (tests/grid_cases.py) on base and head, as if on the runner's
GPU, and writes `grid-plan.json`: the cases whose launches differ (`run`) and those whose
launches are identical (`unchanged`). tests/conftest.py's `--grid-plan FILE` deselects the
unchanged ones on the GPU; every other test of the grid runs whole. Why that is sound, and only
when every changed grid input is one of `SELECTABLE`: docs/latency.md, "The correctness grid's
share". This module is what pytest loads (the reader, the rule, the check against this GPU and
checkout): the harness files it imports are grid inputs (perf/ci/grid.py IMPORTED).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable

from perf import files
from perf.errors import ConfigError

SCHEMA = 1  # grid-plan.json: schema, vendor, target, arch, num_sms, base, head, run, unchanged, counts
PLAN_FILE = "grid-plan.json"
# Changed grid inputs whose whole effect on a keyed case is what its launch keys see: the variants'
# kernels, host planning and decision trees (perf/static/changes.py keys their launches, the
# call path and the torch operations of the call). Anything else a test reads (the tests, the
# reference, batch building, input checks, kernels/launch.py, conftest, pins, image, workflows)
# runs the whole grid. fnmatch globs, `*` also matching `/` (as perf/ci/grid.py's).
SELECTABLE = ("kernels/paged_attention/*",)
# Where a new, untracked file changes what the grid runs: its packages and tests, pytest's configuration.
_LOADED_NEW = ("kernels", "tests", "conftest.py", "pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml")
_FIX = "write it again with `python -m perf grid --cases --vendor V --out DIR`, or drop --grid-plan"


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


def document(*, vendor: str, target: str, arch: str, num_sms: int, base: str, head: str, run: list[str],
             unchanged: list[str]) -> dict:
    """grid-plan.json (schema 1)."""
    return {"schema": SCHEMA, "vendor": vendor, "target": target, "arch": arch, "num_sms": num_sms,
            "base": base, "head": head, "run": run, "unchanged": unchanged,
            "counts": {"run": len(run), "unchanged": len(unchanged)}}


def summary(doc: dict) -> str:
    """The one line `perf grid --cases` prints."""
    n, k = doc["counts"]["run"], doc["counts"]["unchanged"]
    return (f"grid: {n} of {n + k} keyed cases to run; {k} unchanged (identical launches); the other grid "
            f"tests run whole")


def write_plan(out_dir: str, doc: dict) -> str:
    os.makedirs(out_dir, exist_ok=True)
    return files.write_json(os.path.join(out_dir, PLAN_FILE), doc)


def read_plan(path: str) -> dict:
    """A grid-plan.json, every field checked (ConfigError naming the file and the field)."""
    doc = files.load_json(path, "a grid plan", _FIX, expect=dict)
    if doc.get("schema") != SCHEMA:
        raise ConfigError(f"{path}: schema {str(doc.get('schema'))[:20]}, expected {SCHEMA}; {_FIX}")
    for key in ("vendor", "target", "arch", "base", "head"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise ConfigError(f"{path}: `{key}` is not a non-empty text; {_FIX}")
    if type(doc.get("num_sms")) is not int or doc["num_sms"] < 1:
        raise ConfigError(f"{path}: `num_sms` is not a positive integer; {_FIX}")
    for key in ("run", "unchanged"):
        rows = doc.get(key)
        if not isinstance(rows, list):
            raise ConfigError(f"{path}: `{key}` is not a list; {_FIX}")
        for i, node in enumerate(rows):
            if not (isinstance(node, str) and "::" in node):
                raise ConfigError(f"{path}: {key}[{i}] is not a pytest node id (FILE::TEST[ID]); {_FIX}")
        if len(set(rows)) != len(rows):
            raise ConfigError(f"{path}: `{key}` names a node id twice; {_FIX}")
    if doc.get("counts") != {"run": len(doc["run"]), "unchanged": len(doc["unchanged"])}:
        raise ConfigError(f"{path}: `counts` {str(doc.get('counts'))[:60]} does not count its run and "
                          f"unchanged lists; {_FIX}")
    both = set(doc["run"]) & set(doc["unchanged"])
    if both:
        raise ConfigError(f"{path}: {sorted(both)[0]} is both to run and unchanged; {_FIX}")
    return doc


# --------------------------------------------------------------------------- applying it (pytest)


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
        missing = [n for n in doc[key] if n not in have]
        if missing:
            raise ConfigError(f"--grid-plan {path}: {key} names {missing[0]}, which this run did not collect "
                              f"({len(missing)} such); run the grid's test modules whole with the plan made "
                              f"for this commit, or drop --grid-plan")
    return set(doc["unchanged"])
