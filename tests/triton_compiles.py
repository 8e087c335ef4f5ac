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

import pytest

PROPERTY = "triton_compiles"  # (compiled here, loaded from the cache) of one test
_counts = {"compiled": 0, "loaded": 0}


def _listener(*, cache_hit: bool, **_) -> None:
    _counts["loaded" if cache_hit else "compiled"] += 1


def install() -> None:
    """Listen to Triton's compiles (a GPU session; conftest calls it)."""
    from triton import knobs

    knobs.compilation.listener = _listener


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = dict(_counts)
    yield
    item.user_properties.append((PROPERTY, (_counts["compiled"] - before["compiled"],
                                            _counts["loaded"] - before["loaded"])))


def pytest_terminal_summary(terminalreporter):
    compiled = loaded = 0
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == PROPERTY and getattr(report, "when", "") == "call":
                    compiled, loaded = compiled + value[0], loaded + value[1]
    if compiled or loaded:
        import os

        where = os.environ.get("TRITON_CACHE_DIR", "Triton's default cache")
        terminalreporter.write_line(f"Triton kernels: {compiled} compiled in this session, {loaded} loaded "
                                    f"from the cache ({where})")
