"""The correctness grid's skip rule (perf/ci/grid.py): its inputs are exactly what the grid
loads, and a change skips it iff it touches none of them."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.ci import gpu_job, grid
from perf.ci import jobs as ci_jobs
from perf.errors import ConfigError
from perf.git import git

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ("tests/conftest.py", "tests/interpreter_support.py")  # pytest loads these for every grid module


# --- the inputs are what the grid imports ---------------------------------------------------------


def _module_file(name: str) -> str | None:
    """The repository file of module `name` (a package's __init__.py), or None outside it."""
    parts = name.split(".")
    for base in (ROOT, ROOT / "tests"):  # tests/ is on sys.path under pytest (rootdir conftest)
        path = base.joinpath(*parts)
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate.relative_to(ROOT).as_posix()
    return None


@cache  # every test module's walk reads the same shared helpers: parse each file once
def _imports(path: str) -> frozenset[str]:
    """Repository files `path` imports anywhere in its body (inside functions too: an import at
    call time is an input as much as one at import time), packages' __init__ included."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    package = path.rsplit("/", 1)[0].replace("/", ".")
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__.py and a/b/__init__.py
            file = _module_file(".".join(parts[:i]))
            if file:
                found.add(file)
    return frozenset(found)


@cache
def statically_imported() -> frozenset[str]:
    """Every repository file reachable by import statements from the grid's modules."""
    seen, todo = set(), [*grid.TESTS, *SUPPORT]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += sorted(_imports(path) - seen)
    return frozenset(seen)


@cache
def loaded_at_import() -> frozenset[str]:
    """Repository files in sys.modules after importing conftest and every grid module, as pytest
    does (a fresh interpreter, the interpreter's Triton: no GPU here)."""
    modules = [Path(t).stem for t in grid.TESTS]
    folders = sorted({str(ROOT / Path(t).parent) for t in grid.TESTS})  # pytest puts each on sys.path
    code = (f"import sys, json; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}, *{folders!r}]\n"
            f"import conftest\nfor m in {modules!r}: __import__(m)\n"
            "files = [getattr(m, '__file__', None) or '' for m in list(sys.modules.values())]\n"
            "print(json.dumps(sorted(files)))")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = json.loads(done.stdout.strip().splitlines()[-1])
    inside = {Path(f).resolve().relative_to(ROOT).as_posix() for f in files
              if f and os.path.isabs(f) and Path(f).resolve().is_relative_to(ROOT)}
    return frozenset(inside & repository_files())


@cache
def repository_files() -> frozenset[str]:
    """The repository's own files, tracked or not yet (git's view): a virtualenv made inside the
    checkout (CI's `.nox/cpu`) is ignored, so what it loads is the environment's, not the grid's."""
    listed = git(str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", check=True)
    return frozenset(listed.splitlines())


def test_every_file_the_grid_loads_is_an_input():
    loaded = loaded_at_import() | statically_imported()
    assert set(grid.TESTS) | set(SUPPORT) <= loaded
    assert sorted(f for f in loaded if not grid.is_input(f)) == []


def test_no_listed_input_is_stale():
    """Each imported-file entry names a file the grid loads (a glob: at least one), so the list
    says what the grid reads, no more."""
    loaded = loaded_at_import() | statically_imported()
    for pattern in grid.IMPORTED:
        if "*" in pattern:
            assert any(grid.fnmatch.fnmatchcase(f, pattern) for f in loaded), pattern
        else:
            assert pattern in loaded, pattern
    # outside kernels/, the files loaded are exactly the ones listed by name
    assert {f for f in loaded if not f.startswith("kernels/")} == \
        {p for p in grid.IMPORTED if "*" not in p} | set(grid.TESTS)


def test_every_test_module_free_of_the_harness_is_in_the_grid():
    """A new test of the kernels joins the GPU grid: every tests/kernels/test_*.py (the kernels'
    folder) that imports nothing of perf/ beyond the listed inputs, at any depth, is one of
    grid.TESTS, and no other is (the compile tests there use the harness; the test suite's own
    layout test in tests/ci/ imports nothing of it, and tests no kernel)."""
    for path in sorted(ROOT.glob("tests/*/test_*.py")):
        rel = path.relative_to(ROOT).as_posix()
        seen, todo = set(), [rel]
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                todo += sorted(_imports(f) - seen)
        harness = {f for f in seen if f.startswith("perf/") and f not in grid.IMPORTED}
        kernel_test = rel.startswith("tests/kernels/") and not harness
        assert (rel in grid.TESTS) is kernel_test, (rel, sorted(harness))


def test_data_and_configuration_exist_where_named():
    for pattern in grid.CONFIGURATION:
        if "*" not in pattern and pattern not in ("pytest.ini", "setup.cfg", "tox.ini", "conftest.py",
                                                  "tests/__init__.py"):  # would be read if they existed
            assert (ROOT / pattern).is_file(), pattern
    assert any((ROOT / "tests/data").iterdir())


# --- skipped iff no changed path is an input --------------------------------------------------

_DIRS = ("", "kernels/", "kernels/paged_attention/", "perf/", "perf/ci/", "perf/latency/", "tests/",
         "tests/data/", "docs/", ".github/workflows/", "calibration/", ".ci/")
_NAMES = ("a.py", "x.md", "conftest.py", "grid.py", "jobs.py", "pr.yml", "nightly.yml", "thresholds.yaml",
          "noxfile.py", "pyproject.toml", "test_why.py", "test_correctness.py", "devices.py", "README.md")


def _oracle(path: str) -> bool:
    """An input, said without the rule's globs: under kernels/ or tests/data/, or one of the
    files the trace loads or pytest/nox/the job read."""
    named = ({f for f in loaded_at_import() | statically_imported() if not f.startswith("kernels/")}
             | {"pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "conftest.py", "tests/__init__.py",
                "noxfile.py", "thresholds.yaml", "perf/ci/grid.py", "perf/ci/jobs.py", "perf/ci/gpu_job.py",
                ".github/workflows/pr.yml"})
    return path.startswith(("kernels/", "tests/data/")) or path in named


paths = st.one_of(st.builds(lambda d, n: d + n, st.sampled_from(_DIRS), st.sampled_from(_NAMES)),
                  st.sampled_from(grid.TESTS + SUPPORT),
                  st.from_regex(r"[a-z_./]{1,30}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(st.sets(paths, max_size=8))
def test_skipped_iff_no_changed_path_is_an_input(changed):
    d = grid.decide(changed)
    assert d.run is (not changed or any(_oracle(p) for p in changed))
    assert set(d.changed) == {p for p in changed if _oracle(p)}
    if not d.run:
        assert d.reason.startswith("unchanged inputs: ") and all(p in d.reason for p in grid.INPUTS)


@settings(max_examples=100, deadline=None)
@given(st.sets(paths, min_size=1, max_size=6), st.sets(paths, max_size=6))
def test_more_changes_never_skip_a_grid_that_runs(changed, more):
    if grid.decide(changed).run:
        assert grid.decide(changed | more).run


def test_harness_and_docs_changes_skip_and_kernel_changes_run():
    assert not grid.decide(["perf/latency/ab.py", "perf/change/keys.py", "docs/latency.md",
                            "tests/latency/test_perf_gate.py", ".github/workflows/nightly.yml"]).run
    for path in ("kernels/paged_attention/heuristics.py", "tests/kernels/test_correctness.py",
                 "tests/conftest.py",
                 "perf/devices.py", "thresholds.yaml", "noxfile.py", ".github/workflows/pr.yml"):
        assert grid.decide(["docs/x.md", path]).run, path
    assert grid.decide([]).run  # nothing changed proves nothing


# --- the same decision from git, here and in the changes job --------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = tmp_path / "repo"
    for rel in ("kernels/k.py", "perf/latency/ab.py", "docs/x.md"):
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_text("x = 1\n")
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", "-A")
    _git(r, "commit", "-qm", "base")
    return r


def _change(repo: Path, rel: str, commit: bool = True) -> None:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text("x = 2\n")
    if commit:
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "change")


def test_decision_from_git_reads_the_merge_base_and_the_working_tree(repo):
    base = _git(repo, "rev-parse", "HEAD")
    _change(repo, "perf/latency/ab.py")
    _change(repo, "docs/x.md")
    _, d = grid.decision(str(repo), base)
    assert not d.run and d.reason.startswith("unchanged inputs: kernels/*, ")
    _, d = grid.decision(str(repo), None)  # the merge base with main: HEAD itself, nothing changed
    assert d.run
    _change(repo, "kernels/k.py", commit=False)  # uncommitted, on a developer's machine
    assert grid.decision(str(repo), base)[1].changed == ("kernels/k.py",)
    (repo / "kernels/k.py").write_text("x = 1\n")
    _change(repo, "tests/data/new.json", commit=False)  # untracked
    assert grid.decision(str(repo), base)[1].changed == ("tests/data/new.json",)
    with pytest.raises(ConfigError, match="--base-ref nope"):
        grid.decision(str(repo), "nope")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("change, correctness", [("perf/latency/ab.py", "false"), ("kernels/k.py", "true")])
def test_the_changes_job_step_writes_the_decision(repo, tmp_path, change, correctness):
    import yaml

    base = _git(repo, "rev-parse", "HEAD")
    _change(repo, change)
    job = yaml.safe_load((ROOT / ".github/workflows/pr.yml").read_text())["jobs"]["changes"]
    (step,) = [s for s in job["steps"] if s.get("id") == "grid"]
    assert step["continue-on-error"] is True  # a failed decision: empty output, the grid runs
    assert job["outputs"]["correctness_nvidia"] == job["outputs"]["correctness_amd"] == \
        "${{ steps.grid.outputs.correctness }}"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").symlink_to(sys.executable)
    out, summary = tmp_path / "output", tmp_path / "summary"
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "MERGE_BASE": base, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=repo,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == f"correctness={correctness}\n"
    assert ("unchanged inputs: " in done.stdout) is (correctness == "false")
    assert done.stdout.strip() in summary.read_text()


def test_the_local_gpu_job_prints_and_applies_the_same_decision(repo, capsys):
    base = _git(repo, "rev-parse", "HEAD")
    _change(repo, "perf/latency/ab.py")
    assert gpu_job.run_ci("nvidia", base, True, repo) == 0
    out = capsys.readouterr().out
    assert "correctness grid against " in out and "skipped; unchanged inputs: " in out
    assert not any(" -s tests " in line for line in out.splitlines())  # the grid's command is not run
    assert gpu_job.run_ci("nvidia", base, True, repo, whole_grid=True) == 0
    assert any(" -s tests " in line for line in capsys.readouterr().out.splitlines())
    _change(repo, "kernels/k.py")
    assert gpu_job.run_ci("nvidia", base, True, repo) == 0
    out = capsys.readouterr().out
    assert "runs; changed inputs: kernels/k.py" in out
    assert any(" -s tests " in line for line in out.splitlines())


def test_the_gpu_job_runs_the_grid_on_every_gpu():
    """`-n auto` under loadgroup: conftest's hook gives one worker per CPU, dealt over the GPUs."""
    (step,) = [c for c in ci_jobs.PR_GPU_COMMANDS if c.id == ci_jobs.GRID_STEP]
    words = step.words("nvidia")
    assert words[words.index("-n") + 1] == "auto" and words[words.index("--dist") + 1] == "loadgroup"
    assert [w for w in words if w.startswith("tests/")] == list(grid.TESTS)


# --- a kernels file that parses to the same program is no change ---------------------------------

_MODULE = '''"""The module's docstring."""
import triton
import triton.language as tl

SCALE = 2


@triton.jit
def _helper(x):
    """A docstring."""
    return x * SCALE  # a comment


@triton.jit
def kernel(x_ptr):
    tl.store(x_ptr, _helper(tl.load(x_ptr)))


class Base:
    pass


class Child(Base):
    LIMIT = 4
'''
_HELPER = '''@triton.jit
def _helper(x):
    """A docstring."""
    return x * SCALE  # a comment
'''
_KERNEL = '''@triton.jit
def kernel(x_ptr):
    tl.store(x_ptr, _helper(tl.load(x_ptr)))
'''


@pytest.mark.parametrize("edit, same", [
    (lambda s: s.replace("# a comment", "# another comment\n    # and one more line"), True),
    (lambda s: s.replace("\n\n\n", "\n\n\n\n\n"), True),
    (lambda s: s.replace('"""A docstring."""', '"""Another docstring,\n    on two lines."""'), True),
    (lambda s: s.replace('"""The module\'s docstring."""\n', ""), True),
    (lambda s: s.replace(_HELPER, "").replace(_KERNEL, _KERNEL + "\n\n" + _HELPER), True),  # moved below
    (lambda s: s.replace("x * SCALE", "x * SCALE + 0"), False),  # a literal
    (lambda s: s.replace("SCALE = 2", "SCALE = 3"), False),  # a constant
    (lambda s: s.replace("LIMIT = 4", "LIMIT = 5"), False),  # a class attribute
    (lambda s: s + "\n\n@triton.jit\ndef unused(x):\n    return x\n", False),  # a new function
    (lambda s: s.replace("SCALE = 2\n", "").replace("class Base", "SCALE = 2\n\n\nclass Base"), False),
    (lambda s: s.replace("class Base:\n    pass\n\n\n", "") + "\n\nclass Base:\n    pass\n", False),
    (lambda s: s.replace("tl.store(x_ptr,", "tl.store(x_ptr ,"), True),  # spacing
    (lambda s: s + "\ndef broken(:\n", False),
])
def test_a_kernel_file_is_the_same_program_only_when_python_would_run_the_same(edit, same):
    assert grid.same_program(_MODULE, edit(_MODULE)) is same
    assert grid.same_program(edit(_MODULE), _MODULE) is same  # symmetric


def test_a_file_added_or_removed_is_not_the_same_program():
    assert not grid.same_program(None, _MODULE) and not grid.same_program(_MODULE, None)
    assert grid.same_program(_MODULE, _MODULE)


def test_a_definition_reordered_where_another_reads_it_while_defined_is_a_change():
    text = "def a():\n    pass\n\n\n@a\ndef b():\n    pass\n"
    swapped = "@a\ndef b():\n    pass\n\n\ndef a():\n    pass\n"
    assert not grid.same_program(text, swapped)  # b's decorator would find no a (or another one)
    calls = "def a():\n    return b()\n\n\ndef b():\n    return 1\n"
    assert grid.same_program(calls, "def b():\n    return 1\n\n\ndef a():\n    return b()\n")  # at call time


def test_a_kernel_file_changed_only_in_comments_skips_the_grid_and_says_so(repo):
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "kernels/k.py").write_text('"""A docstring."""\n# a comment\n\nx = 1  # one\n')
    _change(repo, "perf/latency/ab.py")
    _, d = grid.decision(str(repo), base)
    assert not d.run and d.changed == ()
    assert d.reason.startswith("unchanged inputs: kernels/k.py changed only in comments, blank lines, "
                               "docstrings")
    (repo / "kernels/k.py").write_text("x = 2  # one\n")  # uncommitted: what the program computes
    _, d = grid.decision(str(repo), base)
    assert d.run and d.changed == ("kernels/k.py",)
    (repo / "kernels/k.py").write_text("x = 1\n")
    (repo / "tests/kernels").mkdir(parents=True)
    (repo / "tests/kernels/test_correctness.py").write_text("# a comment\n")  # the rule is the kernels'
    assert grid.decision(str(repo), base)[1].changed == ("tests/kernels/test_correctness.py",)
