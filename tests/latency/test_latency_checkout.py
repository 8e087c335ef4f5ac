"""perf/checkout.py's side-by-side loader: two copies of a package under aliases, one process.

The latency gate measures base and head in the same process; their `kernels` packages must
coexist, each with its own module objects, and a function that imports `kernels...` when it
runs must see the side that is active. Two tiny packages stand in for two checkouts.
"""

from __future__ import annotations

import sys

import pytest

from perf import checkout


def _package(root, tag: str) -> str:
    pkg = root / "kernels"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"TAG = {tag!r}\n"
        "from kernels.data import VALUE\n"
        "def lazy():\n"
        "    from kernels.data import VALUE as v  # imported when called\n"
        "    return v\n"
        "def later():\n"
        "    import kernels.late  # a module nobody imported before\n"
        "    return kernels.late.WHO\n")
    (pkg / "data.py").write_text(f"VALUE = {tag!r} + '-data'\n")
    (pkg / "late.py").write_text(f"WHO = {tag!r}\n")
    (pkg / "sub" / "__init__.py").write_text("from kernels import TAG as PARENT\n")
    return str(root)


@pytest.fixture
def two_checkouts(tmp_path):
    return _package(tmp_path / "a", "a"), _package(tmp_path / "b", "b")


def test_two_checkouts_coexist_under_aliases(two_checkouts):
    before = {n: m for n, m in sys.modules.items() if n == "kernels" or n.startswith("kernels.")}
    a = checkout.load_side(two_checkouts[0], "kernels_a")
    b = checkout.load_side(two_checkouts[1], "kernels_b")
    try:
        assert a.kernels is not b.kernels
        assert (a.kernels.TAG, b.kernels.TAG) == ("a", "b")
        assert a.kernels.VALUE == "a-data" and b.kernels.VALUE == "b-data"  # bound at import time
        assert sys.modules["kernels_a.sub"].PARENT == "a" and sys.modules["kernels_b.sub"].PARENT == "b"
        # outside any side, sys.modules holds what it held before loading
        now = {n: m for n, m in sys.modules.items() if n == "kernels" or n.startswith("kernels.")}
        assert now == before
        # function-level imports resolve to the active side, back and forth
        for side, tag in ((a, "a"), (b, "b"), (a, "a")):
            with side.active() as k:
                assert k is side.kernels and sys.modules["kernels"] is side.kernels
                assert a.kernels.lazy() == f"{tag}-data"  # a's function, b's modules when b is active
        assert {n: m for n, m in sys.modules.items() if n == "kernels" or n.startswith("kernels.")} == before
    finally:
        for name in [n for n in sys.modules if n.startswith(("kernels_a", "kernels_b"))]:
            del sys.modules[name]


def test_modules_first_imported_while_active_stay_with_their_side(two_checkouts, tmp_path):
    (tmp_path / "a" / "kernels" / "late2.py").write_text("WHO = 'late a'\n")
    a = checkout.load_side(two_checkouts[0], "kernels_a")
    b = checkout.load_side(two_checkouts[1], "kernels_b")
    try:
        assert "kernels.late" in a.modules  # every module is imported up front
        del a.modules["kernels.late2"]  # as if it had been added after loading
        with a.active():
            import kernels.late2  # noqa: F401  (found through a's package path)
        assert a.modules["kernels.late2"].WHO == "late a" and "kernels.late2" not in b.modules
        with b.active():
            assert b.kernels.later() == "b"
        assert "kernels.late2" not in sys.modules
    finally:
        for name in [n for n in sys.modules if n.startswith(("kernels_a", "kernels_b"))]:
            del sys.modules[name]


def test_bad_alias_is_refused(two_checkouts):
    with pytest.raises(ValueError, match="alias"):
        checkout.load_side(two_checkouts[0], "kernels")


def test_the_real_kernels_load_twice_and_run_side_by_side():
    """This checkout's kernels as both sides: separate module objects, separate Triton
    functions, each usable (the A/A of the gate)."""
    base = checkout.load_side(checkout.ROOT, "kernels_base_t")
    head = checkout.load_side(checkout.ROOT, "kernels_head_t")
    try:
        assert not base.broken and not head.broken
        vb, vh = base.kernels.VARIANTS["static_grid"], head.kernels.VARIANTS["static_grid"]
        assert vb is not vh and vb.planner is not vh.planner
        with head.active():
            from kernels.batch import BatchSpec
        assert BatchSpec is head.modules["kernels.batch"].BatchSpec
    finally:
        for name in [n for n in sys.modules if n.startswith(("kernels_base_t", "kernels_head_t"))]:
            del sys.modules[name]


def test_variant_names_are_the_registry_read_without_importing_it(tmp_path):
    """`--variants` checks read the names from kernels/__init__.py's literal; a checkout whose
    literal is gone is imported instead (or gives None when asked not to import)."""
    import kernels

    assert checkout.variant_names() == tuple(kernels.VARIANTS)
    other = tmp_path / "other" / "kernels"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("VARIANTS: dict = {'alpha': 1, 'beta': 2}\n")
    assert checkout.variant_names(str(tmp_path / "other")) == ("alpha", "beta")
    (other / "__init__.py").write_text("VARIANTS = dict(alpha=1)\n")  # no literal to read
    assert checkout.variant_names(str(tmp_path / "other"), imported=False) is None
