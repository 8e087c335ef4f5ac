"""Count Triton's compiles in a GPU test session: how many kernels each test compiled on this
machine and how many it loaded from Triton's cache (a precompiled one, `perf grid
--compile-cache`, or an earlier run's).

Each test's counts travel on its report (`user_properties`, so also from xdist workers), and the
session's summary adds them up in one line: a cache built under another Triton or for other
specializations shows as compiles, never goes unnoticed. Triton's own hook
(`knobs.compilation.listener`) reports every compile with whether it was a cache hit; in the
interpreter nothing compiles and this plugin stays off.
"""

from __future__ import annotations

import contextlib
import json
import os

import pytest

PROPERTY = "triton_compiles"  # (compiled here, loaded from the cache) of one test
_counts = {"compiled": 0, "loaded": 0}


def _listener(*, cache_hit: bool, **_) -> None:
    _counts["loaded" if cache_hit else "compiled"] += 1


def install(relocate_cache: bool = True) -> None:
    """Listen to Triton's compiles (a GPU session; conftest calls it), and with `relocate_cache`
    (the xdist controller, or a run without xdist: before any worker starts) point a precompiled
    cache in TRITON_CACHE_DIR at where it lies now (`relocate`)."""
    from triton import knobs

    knobs.compilation.listener = _listener
    if relocate_cache and os.environ.get("TRITON_CACHE_DIR"):
        relocate(os.environ["TRITON_CACHE_DIR"])


def relocate(cache_dir: str) -> int:
    """Point every kernel group of a Triton file cache at the files beside it; the number of
    groups rewritten. Triton records a kernel's files by absolute path (its FileCacheManager's
    `__grp__*.json`, each next to the files it names), so a cache compiled in another folder (the
    `grid-compile` jobs' workspace is not the GPU runner's) would find none of them and compile
    everything again. Rewritten atomically: another session may be reading the same cache. A group file Triton
    could not read (cut short, not its format) is removed: Triton's lookup would raise on it and
    fail the test; without it, that kernel compiles here."""
    count = 0
    for folder, _, names in os.walk(cache_dir):
        for name in names:
            if not (name.startswith("__grp__") and name.endswith(".json")):
                continue
            path = os.path.join(folder, name)
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
            except OSError:
                continue  # gone meanwhile, or not ours to read: Triton meets it as it is
            except ValueError:
                doc = None
            children = doc.get("child_paths") if isinstance(doc, dict) else None
            if not isinstance(children, dict):
                with contextlib.suppress(FileNotFoundError):  # another worker's removal
                    os.remove(path)
                continue
            moved = {child: os.path.join(folder, os.path.basename(str(p))) for child, p in children.items()}
            if moved == children:
                continue
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({**doc, "child_paths": moved}, f)
            os.replace(tmp, path)
            count += 1
    return count


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = dict(_counts)
    yield
    item.user_properties.append((PROPERTY, (_counts["compiled"] - before["compiled"],
                                            _counts["loaded"] - before["loaded"])))


def keyed(nodeid: str) -> bool:
    """Whether a test id is one of the grid's keyed cases (tests/grid_cases.py), whose kernels a
    precompiled cache holds."""
    from grid_cases import FORCED, MATCHES, MODULE

    return nodeid.startswith((f"{MODULE}::{MATCHES}[", f"{MODULE}::{FORCED}["))


def pytest_terminal_summary(terminalreporter):
    compiled = loaded = in_keyed = 0
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == PROPERTY and getattr(report, "when", "") == "call":
                    compiled, loaded = compiled + value[0], loaded + value[1]
                    in_keyed += value[0] if keyed(report.nodeid) else 0
    if compiled or loaded:
        where = os.environ.get("TRITON_CACHE_DIR", "Triton's default cache")
        terminalreporter.write_line(
            f"Triton kernels: {compiled} compiled in this session ({in_keyed} of them in the grid's keyed "
            f"cases), {loaded} loaded from the cache ({where})")
