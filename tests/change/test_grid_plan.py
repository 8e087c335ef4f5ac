"""The correctness grid's per-case plan (perf/change/grid.py, perf/change/grid_plan.py): which
keyed cases a change can affect, when such a plan may be made, and pytest applying it (the plan's
file, one document for both kinds: tests/change/test_change_plan.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interpreter_support import NO_GPU

from perf.change import grid_plan, plan
from perf.ci import grid
from perf.errors import ConfigError
from perf.latency import plant
from tests.throwaway_repo import git, harness_repo

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
# A few dozen keyed cases (2-core CI): every variant on short prefills, decodes and mixed batches of one
# shape (the heuristic branch moves some of them), and forced configurations.
SUBSET = ("*reference[[]gqa4-64-16-*,*reference[[]llama3_8b-64-16-*-bfloat16-sinks-*,"
          "*[[]none-tile64_over_block16_seg3-*")


def _env() -> dict:
    """This process's environment for a child run of its own: without the interpreter switch, and
    without this run's xdist worker variables (a child pytest is no worker of ours)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "TRITON_INTERPRET") and not k.startswith("PYTEST_XDIST_")}


# --------------------------------------------------------------------------- planning planted commits


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """c0 base; c1 docs only; c2 one heuristic branch (NVIDIA's short prefills: 8 warps);
    c3 kernel-wide (LOG2E): the edits perf/latency/plant.py plants, each on its own branch from c0."""
    repo = tmp_path_factory.mktemp("grid") / "repo"
    repo.mkdir()
    (repo / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "grid_cases.py", repo / "tests" / "grid_cases.py")
    (repo / "README.md").write_text("a readme\n")
    harness_repo(repo)
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    for name, edit in (("docs", plant.plant_docs), ("heuristic", plant.plant_heuristic),
                       ("kernel", plant.plant_kernel_wide), ("unhinted", _plant_unhinted_sms),
                       ("import-setting", _plant_import_setting),
                       ("planning-setting", _plant_planning_setting)):
        git(repo, "checkout", "-q", "-b", name, base)
        edit(str(repo))
        git(repo, "commit", "-qam", name)
    return repo, base


def _plant_unhinted_sms(root: str) -> None:
    """A planner change only a call without the `num_sms=` hint sees (the tests' calls): the
    device's SM count halved."""
    path = Path(root) / "kernels" / "paged_attention" / "planning.py"
    old = "num_sms = (here.num_sms if here.vendor == vendor else 0)"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, "num_sms = (here.num_sms // 2 if here.vendor == vendor else 0)"))


def _plant_import_setting(root: str) -> None:
    """A kernels module that turns Triton's floating-point fusion off for its process when imported:
    every kernel the head's GPU run compiles differs, no launch key does."""
    path = Path(root) / "kernels" / "paged_attention" / "common.py"
    path.write_text(path.read_text() + '\nimport os\n\nos.environ["TRITON_DEFAULT_FP_FUSION"] = "0"\n')


def _plant_planning_setting(root: str) -> None:
    """The same setting made by the planner, on its first call."""
    path = Path(root) / "kernels" / "paged_attention" / "planning.py"
    old = "    vendor, num_sms = resolve_target(vendor, num_sms)\n    if config is not None"
    text = path.read_text()
    assert text.count(old) == 1
    setting = '    __import__("os").environ["TRITON_DEFAULT_FP_FUSION"] = "0"\n'
    path.write_text(text.replace(old, setting + old))


def _plan(repo: Path, branch: str, base: str, out: Path) -> tuple[dict | None, str]:
    git(repo, "checkout", "-q", branch)
    done = subprocess.run([sys.executable, "-m", "perf", "grid", "--cases", "--vendor", "nvidia",
                           "--base-ref", base, "--out", str(out), "--only", SUBSET, "--processes", "2"],
                          cwd=repo, env=dict(_env(), PYTHONPATH=str(repo)), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    path = out / grid_plan.PLAN_FILE
    return (grid_plan.read_plan(str(path)) if path.exists() else None), done.stdout.strip()


def _nodes(doc: dict, key: str) -> set[str]:
    return {node for (node,) in plan.cases(doc, key)}


def _keyed_cases() -> list:
    """Every keyed case of this checkout's lists (tests/grid_cases.py), as the planner reads them."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import grid_cases
    finally:
        sys.path.remove(str(ROOT / "tests"))
    from kernels import VARIANTS

    return grid_cases.keyed_cases(list(VARIANTS))


def _subset_cases() -> list:
    """The subset's keyed cases (the planted repository's lists and kernels are this checkout's)."""
    import fnmatch

    globs = SUBSET.split(",")
    return [c for c in _keyed_cases() if any(fnmatch.fnmatchcase(c.node, g) for g in globs)]


def _skips(case) -> bool:
    """The variant lacks a feature of the case: its test skips (no launch on either side)."""
    import grid_cases

    from kernels import VARIANTS
    from kernels.batch import build_batch

    fp8 = grid_cases.fp8_dtype(case.feature)
    batch = build_batch(case.spec, "cpu", fill=False, poison=True, fp8_dtype=fp8)
    try:
        VARIANTS[case.variant].plan(*batch.args(), **batch.options, **case.call_kwargs())
    except NotImplementedError:
        return True
    return False


def test_a_docs_only_change_skips_the_grid_and_plans_nothing(planted, tmp_path):
    repo, base = planted
    doc, line = _plan(repo, "docs", base, tmp_path)
    assert doc is None and line.startswith("grid: skipped, nothing to plan; unchanged inputs: ")


def test_one_heuristic_branch_runs_exactly_the_cases_it_moves(planted, tmp_path):
    """Changed exactly where the branch decides: the NVIDIA short-prefill configuration of the
    variants that take `heuristics.choose` (flex_tile, static_grid) on cases without a forced config."""
    from kernels.paged_attention import heuristics

    repo, base = planted
    doc, line = _plan(repo, "heuristic", base, tmp_path)
    cases = _subset_cases()
    moved = {c.node for c in cases if c.config is None and c.variant in ("flex_tile", "static_grid")
             and heuristics.choose("nvidia", heuristics.features_from_spec(c.spec, doc["num_sms"])).source
             .startswith("nvidia/short-prefill")}
    assert moved and len(moved) < len(cases)
    assert _nodes(doc, "run") == moved
    assert _nodes(doc, "unchanged") == {c.node for c in cases} - moved
    assert (doc["vendor"], doc["target"], doc["arch"], doc["base"]) == ("nvidia", "sm_90", "90", base)
    assert line == (f"grid: {len(moved)} of {len(cases)} keyed cases to run; {len(cases) - len(moved)} "
                    f"unchanged (identical launches); the other grid tests run whole")


def test_a_kernel_wide_change_runs_every_case_that_launches(planted, tmp_path):
    repo, base = planted
    doc, _ = _plan(repo, "kernel", base, tmp_path)
    cases = _subset_cases()
    skipped = {c.node for c in cases if _skips(c)}
    assert skipped and _nodes(doc, "unchanged") == skipped  # a skipped case launches nothing on either side
    assert _nodes(doc, "run") == {c.node for c in cases} - skipped


def test_a_change_only_the_tests_calls_see_is_found(planted, tmp_path):
    """The tests call without the `vendor=`/`num_sms=` hints: the plan calls as they do, with the
    device's platform made the runner's, so a change to the unhinted path is seen (the static
    grid's size and the decode splits follow the SM count)."""
    repo, base = planted
    doc, _ = _plan(repo, "unhinted", base, tmp_path)
    assert doc["run"] and any(n.endswith("-static_grid]") for n in _nodes(doc, "run"))
    # fixed grids, no SM count
    assert not any(n.endswith(("-naive]", "-qblock]")) for n in _nodes(doc, "run"))


def test_a_setting_the_kernels_make_for_their_process_runs_every_case(planted, tmp_path):
    """Both sides are planned in one process: a setting one side makes for it (an environment
    variable, a Triton knob, a torch switch), at import or while planning, would be every later
    plan's, on both sides, and hide itself; the GPU run is the head's alone."""
    repo, base = planted
    cases = {c.node for c in _subset_cases()}
    for branch, why in (("import-setting", "importing the kernels changed the process's settings"),
                        ("planning-setting", "planning changed the process's settings")):
        git(repo, "checkout", "-q", branch)
        done = subprocess.run([sys.executable, "-m", "perf", "grid", "--cases", "--vendor", "nvidia",
                               "--base-ref", base, "--out", str(tmp_path / branch), "--only", SUBSET,
                               "--processes", "2"], cwd=repo, env=dict(_env(), PYTHONPATH=str(repo)),
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        doc = grid_plan.read_plan(str(tmp_path / branch / grid_plan.PLAN_FILE))
        assert _nodes(doc, "run") == cases and not doc["unchanged"], (branch, doc["counts"])
        assert f"{why} (environment TRITON_DEFAULT_FP_FUSION: None -> 0)" in done.stderr, done.stderr[-2000:]


def test_the_keyed_cases_are_the_collected_test_ids():
    """The plan names cases by the ids pytest collects, in its order (a plan of the head's lists
    is never stale for the head)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/kernels/test_correctness.py",
                           "--collect-only",
                           "-q", "-p", "no:cacheprovider"], cwd=ROOT, env=dict(_env(), PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    collected = [line for line in done.stdout.splitlines()
                 if "::test_matches_reference[" in line or "::test_forced_config_matches_reference[" in line]
    assert [c.node for c in _keyed_cases()] == collected and len(collected) > 5000


# --------------------------------------------------------------------------- when a plan may select

_SELECTABLE = ("kernels/paged_attention/heuristics.py", "kernels/paged_attention/planning.py",
               "kernels/paged_attention/common.py", "kernels/paged_attention/new_variant.py")
_OTHER = ("kernels/reference.py", "kernels/batch.py", "kernels/inputs.py", "kernels/launch.py",
          "kernels/variant.py", "kernels/__init__.py", "tests/kernels/test_correctness.py",
          "tests/grid_cases.py",
          "tests/conftest.py", "tests/data/x.json", "thresholds.yaml", "noxfile.py", "pyproject.toml",
          ".github/workflows/pr.yml", "perf/change/grid_plan.py", "perf/measure/check.py",
          "kernels/paged_attention")


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from(_SELECTABLE + _OTHER), max_size=6))
def test_selection_only_when_every_changed_input_is_selectable(changed):
    ok, why = grid_plan.selectable(changed)
    assert ok is (bool(changed) and all(p in _SELECTABLE for p in changed))
    if not ok and changed:
        assert "the whole grid runs" in why and any(p in why for p in changed if p not in _SELECTABLE)


@settings(max_examples=100, deadline=None)
@given(st.sets(st.sampled_from(_SELECTABLE + _OTHER), min_size=1, max_size=6),
       st.sets(st.sampled_from(_OTHER), min_size=1, max_size=3))
def test_an_unselectable_change_beside_selectable_ones_runs_the_whole_grid(changed, other):
    assert not grid_plan.selectable(changed | other)[0]
    assert grid.decide(changed | other).run  # and the grid itself runs


# --------------------------------------------------------------------------- applying it


def _doc(run=("tests/t.py::test_a[x]",), unchanged=("tests/t.py::test_a[y]", "tests/t.py::test_b"),
         **edits) -> dict:
    rows = [{"node": n, "why": "w"} for n in run] + [{"node": n, "why": None} for n in unchanged]
    doc = plan.document(plan.GRID, rows, vendor="nvidia", target="sm_90", arch="90", num_sms=132,
                        base="a" * 40, head="b" * 40)
    doc.update(edits)
    return doc


def test_a_plan_naming_a_case_the_collection_lacks_is_stale():
    doc = _doc()
    collected = ["tests/t.py::test_a[x]", "tests/t.py::test_a[y]", "tests/t.py::test_b", "tests/t.py::test_c"]
    assert grid_plan.deselected(doc, "p", collected) == {"tests/t.py::test_a[y]", "tests/t.py::test_b"}
    with pytest.raises(ConfigError, match="stale|did not collect"):
        grid_plan.deselected(doc, "p", ["tests/t.py::test_a[x]", "tests/t.py::test_b"])


def test_a_plan_applies_only_on_its_gpu_and_commit(monkeypatch, tmp_path):
    from perf import git as git_mod
    from perf import vendor

    doc = _doc()
    monkeypatch.setattr(vendor, "detect", lambda: None)
    assert "no GPU" in grid_plan.not_applicable(doc, str(tmp_path))
    monkeypatch.setattr(vendor, "detect", lambda: "amd")
    assert "planned for nvidia" in grid_plan.not_applicable(doc, str(tmp_path))
    monkeypatch.setattr(vendor, "detect", lambda: "nvidia")
    monkeypatch.setattr(vendor, "gpu_arch", lambda v: ("90", 114, "NVIDIA H100 PCIe"))
    assert "132 SMs/CUs" in grid_plan.not_applicable(doc, str(tmp_path))  # the heuristics size by SM count
    monkeypatch.setattr(vendor, "gpu_arch", lambda v: ("100", 132, "B200"))
    assert "is 100" in grid_plan.not_applicable(doc, str(tmp_path))
    monkeypatch.setattr(vendor, "gpu_arch", lambda v: ("90", 132, "NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(git_mod, "head", lambda root: "c" * 40)
    assert "planned for commit bbbb" in grid_plan.not_applicable(doc, str(tmp_path))
    monkeypatch.setattr(git_mod, "head", lambda root: "b" * 40)
    monkeypatch.setattr(git_mod, "git", lambda root, *a, **k: " M kernels/paged_attention/heuristics.py")
    assert "working tree differs" in grid_plan.not_applicable(doc, str(tmp_path))
    monkeypatch.setattr(git_mod, "git", lambda root, *a, **k: "")
    assert grid_plan.not_applicable(doc, str(tmp_path)) is None


def test_only_a_change_pytest_would_load_makes_the_plan_inapplicable(tmp_path, monkeypatch):
    """A real checkout at the plan's head: an untracked test module or a modified tracked file
    voids the plan; a test run's leftovers outside the loaded folders (.hypothesis/) do not."""
    from perf import vendor

    repo = tmp_path / "r"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "t.py").write_text("x = 1\n")
    (repo / "README.md").write_text("r\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "c")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    monkeypatch.setattr(vendor, "detect", lambda: "nvidia")
    monkeypatch.setattr(vendor, "gpu_arch", lambda v: ("90", 132, "NVIDIA H100 80GB HBM3"))
    doc = _doc(head=head)
    assert grid_plan.not_applicable(doc, str(repo)) is None
    (repo / ".hypothesis" / "examples").mkdir(parents=True)
    (repo / ".hypothesis" / "examples" / "x").write_text("1")
    assert grid_plan.not_applicable(doc, str(repo)) is None
    (repo / "tests" / "test_new.py").write_text("def test_x(): pass\n")
    assert "tests/test_new.py" in grid_plan.not_applicable(doc, str(repo))
    (repo / "tests" / "test_new.py").unlink()
    (repo / "README.md").write_text("changed\n")
    assert "README.md" in grid_plan.not_applicable(doc, str(repo))


# --------------------------------------------------------------------------- pytest --grid-plan

_FAKE_GPU = """\
from perf.change import grid_plan
grid_plan.not_applicable = lambda doc, root: None  # as if on the plan's GPU and commit
"""


def _pytest(tmp_path: Path, plan: dict, *extra: str) -> subprocess.CompletedProcess:
    """A child pytest collecting the grid under `plan`, as on a machine without a GPU (the GPU a plan
    applies to is `fake_gpu`'s)."""
    path = tmp_path / "grid-plan.json"
    path.write_text(json.dumps(plan))
    (tmp_path / "fake_gpu.py").write_text(_FAKE_GPU)
    return subprocess.run([sys.executable, "-m", "pytest", "tests/kernels/test_correctness.py",
                           "--collect-only",
                           "-q", "-p", "no:cacheprovider", "--grid-plan", str(path), *extra], cwd=ROOT,
                          env=dict(_env(), **NO_GPU, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)])),
                          capture_output=True, text=True, timeout=600)


def _keyed_plan(unchanged: int, run: int, extra: list[str] = ()) -> dict:
    nodes = [c.node for c in _keyed_cases()]
    return _doc(run=nodes[unchanged:unchanged + run] + list(extra), unchanged=nodes[:unchanged])


def test_pytest_deselects_the_unchanged_cases_and_says_so(tmp_path):
    done = _pytest(tmp_path, _keyed_plan(10, 5), "-p", "fake_gpu")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "10 keyed cases deselected (identical launches on base aaaaaaaaaaaa" in done.stdout
    assert "10 deselected" in done.stdout.splitlines()[-1]
    assert "test_matches_reference[mha-64-16-q1_kv1-bfloat16-none-naive]" not in done.stdout  # the first
    assert "test_matches_reference[mha-64-16-prefill_5_18-bfloat16-none-naive]" in done.stdout  # the 11th


def test_pytest_ignores_a_plan_of_another_gpu_or_commit_and_runs_everything(tmp_path):
    done = _pytest(tmp_path, _keyed_plan(10, 5))  # this machine: no GPU
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ignored, every case runs: no GPU here" in done.stdout
    assert "deselected" not in done.stdout.splitlines()[-1]


def test_pytest_refuses_a_stale_or_malformed_plan(tmp_path):
    gone = "tests/kernels/test_correctness.py::test_matches_reference[gone]"
    stale = _pytest(tmp_path, _keyed_plan(3, 1, [gone]), "-p", "fake_gpu")
    assert stale.returncode == 4 and "did not collect" in stale.stderr, stale.stderr[-2000:]
    bad = _pytest(tmp_path, {**_keyed_plan(3, 1), "num_sms": 0}, "-p", "fake_gpu")
    assert bad.returncode == 4 and "`num_sms`" in bad.stderr and "Traceback" not in bad.stderr



_WORKERS_DISAGREE = """\
import os
from perf.change import grid_plan
worker = os.environ.get("PYTEST_XDIST_WORKER")
# the controller finds the plan applicable; a worker deciding alone would not (gw1), as a check
# racing another worker's could: the controller's decision must be the one every worker applies
grid_plan.not_applicable = lambda doc, root: "a worker's own view" if worker == "gw1" else None
"""


def test_xdist_workers_apply_the_controllers_decision_before_loadgroup_renames_ids(tmp_path):
    """Under `-n 2 --dist loadgroup` (the GPU job's grid): the plan's unchanged cases are
    deselected in every worker alike, by node ids as the plan names them, and the rest run. (On
    an H100, workers that matched xdist's "@group" ids, or decided alone, collected otherwise and
    the run crashed.)"""
    one = "mqa-64-32-decode_1328-float16-none"  # one xdist_group: the plan's cases, all pass
    cases = [c.node for c in _keyed_cases() if f"[{one}-" in c.node]
    path = tmp_path / "grid-plan.json"
    path.write_text(json.dumps(_doc(run=cases[:2], unchanged=cases[2:])))
    (tmp_path / "workers_disagree.py").write_text(_WORKERS_DISAGREE)
    # -k: only the plan's cases run (the plan is applied to the whole collection before -k deselects)
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/kernels/test_correctness.py", "-q", "-p",
                           "no:cacheprovider", "-p", "workers_disagree", "-m", "cpu_subset", "-k", one, "-n",
                           "2", "--dist", "loadgroup", "--grid-plan", str(path), "-rA"], cwd=ROOT,
                          env=dict(_env(), PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)])),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    # as loadgroup names them: "<node id>@<group>" (tests/ci/test_xdist_groups.py proves it groups)
    ran = [line.split()[1].removesuffix("@r8-h64-b32-float16-none") for line in done.stdout.splitlines()
           if line.startswith("PASSED ")]
    assert sorted(ran) == sorted(cases[:2]) and len(cases) > 2, (ran, cases)


# --------------------------------------------------------------------------- what a case's key holds

KEYS_CHECK = r'''
import dataclasses, sys, torch
from perf.change import grid, keys, side
from perf.static import plan
from perf.thresholds import load_thresholds
grid.defined_memory()
assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
assert torch.empty(64).isnan().all() and (torch.empty(8, dtype=torch.int32) == 2**31 - 1).all()  # the fill
assert "torch._inductor" not in sys.modules  # a compiler's config nothing here uses (grid.defined_memory)
grid.refuse_device_queries()
import kernels
from kernels import launch, platform
from kernels.paged_attention import planning
sys.path.insert(0, "tests")
import grid_cases

(target,) = plan.load_targets(load_thresholds("thresholds.yaml"), only="sm_90")
side.as_if_on(platform, target, 132)
cases = {(c.config, c.variant): c for c in grid_cases.keyed_cases(list(kernels.VARIANTS))
         if c.feature == "none"}
pristine = grid.Pristine([m for n, m in sys.modules.items() if n.split(".")[0] == "kernels"])


def key(case, contents=True, reset=True):
    if reset:
        pristine.restore()
    batch = grid.case_batch(grid_cases, case)
    return keys.case_key(kernels, case.variant, batch, target, 132, case.call_kwargs(), first_call=True,
                         target_hints=False, contents=contents)


# a table the planner fills from host data (torch.tensor of a list) is keyed by its bytes
fused = cases["fused_reduce_seg3", "parallel"]
real = planning.arrival_counts


def table(value, contents=True):
    planning.arrival_counts = lambda s, h, d: torch.tensor([value] * (s * h), dtype=torch.int32, device=d)
    try:
        return key(fused, contents)
    finally:
        planning.arrival_counts = real


assert keys.difference(table(0), table(0)) is None
assert "arrivals_ptr" in keys.difference(table(0), table(1))
assert keys.difference(table(0, False), table(1, False)) is None  # what shapes and dtypes alone see
# a case's key is its own, whatever this process planned before (its first call is a first call)
case = cases["tile64_over_block16_seg3", "flex_tile"]
alone = key(case)
assert keys.difference(alone, key(case)) is None
assert "first call" in keys.difference(alone, key(case, reset=False))  # kept state: no first call
# a launch that runs otherwise than KernelLaunch runs
plain = planning._Plan.launches


class Extra(launch.KernelLaunch):
    def __call__(self):
        super().__call__()


planning._Plan.launches = lambda self, *a: [
    Extra(**{f.name: getattr(x, f.name) for f in dataclasses.fields(x)}) for x in plain(self, *a)]
try:
    got = key(case)
finally:
    planning._Plan.launches = plain
assert got["status"] == "error" and "Extra, not kernels.launch.KernelLaunch" in got["reason"], got
# a planner that asks torch.cuda itself
real_resolve = planning.resolve_target
scope = {"torch": torch, "real": real_resolve}
exec(compile("def resolve_target(vendor=None, num_sms=None):\n    torch.cuda.is_available()\n"
             "    return real(vendor, num_sms)\n", planning.__file__, "exec"), scope)
planning.resolve_target = scope["resolve_target"]
try:
    got = key(case)
finally:
    planning.resolve_target = real_resolve
assert got["status"] == "error" and "torch.cuda.is_available" in got["reason"], got
assert torch.cuda.is_available() in (True, False)  # asked from elsewhere: answered, on any machine
print("keys ok")
'''


def test_a_cases_key_holds_the_planners_bytes_its_own_first_call_and_what_runs_it():
    """The grid's key of a case (`case_key(contents=True)` in a planning process of
    `grid.defined_memory`): a table the planner fills from host data is keyed by its bytes
    (shapes and dtypes alone saw none of it); a case planned after others keys its own first call
    (`Pristine`); a launch of another class than KernelLaunch, or a planner asking torch.cuda
    itself (`refuse_device_queries`), fails to plan, so the case runs."""
    done = subprocess.run([sys.executable, "-c", KEYS_CHECK], cwd=ROOT,
                          env=dict(_env(), PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "keys ok", done.stderr[-3000:]


DYING_WORKER = r'''
import os, sys
from perf.change import __main__ as planning, grid
real = grid._plan_chunk


def dying(indices):
    if 0 in indices:
        os._exit(9)  # a worker killed (out of memory, a crash in a native library)
    return real(indices)


grid._plan_chunk = dying
sys.exit(planning.main(sys.argv[1:]))
'''


def test_a_planning_worker_that_dies_fails_the_plan_instead_of_hanging(tmp_path):
    """(multiprocessing.Pool waited for it forever: the changes job until its timeout.)"""
    done = subprocess.run([sys.executable, "-c", DYING_WORKER, "--kind", "grid", "--base", str(ROOT),
                           "--head", str(ROOT),
                           "--target", "sm_90", "--num-sms", "132", "--thresholds", "thresholds.yaml",
                           "--processes", "2", "--out", str(tmp_path / "out.json"), "--only",
                           "*reference[[]gqa4-64-16-*"], cwd=ROOT, env=dict(_env(), PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "BrokenProcessPool" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "out.json").exists()


ATTRIBUTE_CHECK = r'''
import importlib, sys
from perf.change import keys
found = []
for side in sys.argv[1:]:
    sys.path.insert(0, side)
    for name in ("consts", "kern"):
        sys.modules.pop(name, None)
    kern = importlib.import_module("kern")
    found.append((kern.k.cache_key, keys.attribute_constants(kern.k)))
    sys.path.remove(side)
(triton_base, base), (triton_head, head) = found
assert triton_base == triton_head  # Triton's own key: the same
assert base == [["consts.SCALE", "constexpr[1.5]"]] and head == [["consts.SCALE", "constexpr[2.5]"]], found
print("attributes ok")
'''

_KERNEL = '''\
import triton
import triton.language as tl
import consts


@triton.jit
def scaled(x):
    return x * consts.SCALE


@triton.jit
def k(x_ptr):
    tl.store(x_ptr, scaled(tl.load(x_ptr)))
'''


def test_a_constant_a_kernel_reads_as_a_modules_attribute_is_in_its_key(tmp_path):
    """Triton compiles `consts.SCALE` as it finds it but leaves it out of its compile key (a bare
    `SCALE` is in it): the launch key holds such values (`keys.attribute_constants`), through
    the @triton.jit functions a kernel calls."""
    for side, value in (("base", "1.5"), ("head", "2.5")):
        (tmp_path / side).mkdir()
        (tmp_path / side / "kern.py").write_text(_KERNEL)
        consts = f"import triton.language as tl\n\nSCALE = tl.constexpr({value})\n"
        (tmp_path / side / "consts.py").write_text(consts)
    sides = [str(tmp_path / "base"), str(tmp_path / "head")]
    done = subprocess.run([sys.executable, "-c", ATTRIBUTE_CHECK, *sides], cwd=ROOT,
                          env=dict(_env(), PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "attributes ok", done.stderr[-3000:]
