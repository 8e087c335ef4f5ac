"""The test suite's own layout, as CI runs it: folders that mirror the code, and the `slow` mark.

Tests live in tests/<folder>/ (one folder per part of the code: docs/architecture.md's table),
never flat in tests/, and their basenames are unique (there are no __init__.py files, so pytest
imports each module by its basename). Every module that starts processes (a `python -m perf`
child, a throwaway repository's git, a subprocess of any kind) carries `pytest.mark.slow`, so
`pytest -m "not slow"` is a quick local run of the rest; CI runs everything.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = {"kernels", "measure", "change", "static", "latency", "nightly", "ci", "cli", "lab", "stages",
           "benchmarks"}
STARTS_PROCESSES = re.compile(r"subprocess\.|Popen|run_child|harness_repo|_perf\(")


def _modules() -> list[Path]:
    return sorted(TESTS.glob("**/test_*.py"))


def test_every_test_module_lives_in_a_folder_of_the_code_with_a_unique_name():
    assert not list(TESTS.glob("test_*.py")), "a test module belongs in the folder of the code it tests"
    modules = _modules()
    assert {p.parent.name for p in modules} <= FOLDERS
    names = [p.name for p in modules]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def _marks_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return "mark.slow" in ast.unparse(node.value)
    return False


def test_modules_that_start_processes_are_marked_slow():
    unmarked = []
    for p in _modules():
        if p.parent.name == "benchmarks" or p == Path(__file__).resolve():  # benchmarks: GPU only
            continue
        text = p.read_text(encoding="utf-8")
        if STARTS_PROCESSES.search(text) and not _marks_slow(ast.parse(text)):
            unmarked.append(p.relative_to(TESTS).as_posix())
    assert not unmarked, f"start processes but are not marked `pytest.mark.slow`: {unmarked}"
