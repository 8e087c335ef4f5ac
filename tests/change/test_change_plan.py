"""The change plan (perf/change/): a case is unchanged exactly when its launches are.

The decision is a pure function of both sides' planned launches (keys.py `difference`), proven
over generated plans; the one plan document (plan.py) of both kinds round-trips and refuses what
is malformed in one line; the planning itself runs on commits of a throwaway repository (a
docs-only commit, one heuristic branch changed, a kernel-wide edit), and the interpreter gate of
the heuristic change times only the cases the plan names and reports the others unchanged.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interpreter_support import CPU_ONLY, needs_interpreter

from perf.change import keys, latency, plan, side
from perf.errors import ConfigError, NothingMeasured
from perf.latency import plant
from perf.verdicts import Finding, Verdict, exit_code
from tests.throwaway_repo import git, harness_repo

pytestmark = pytest.mark.slow  # starts processes

# --- the decision, over generated plans ----------------------------------------------------

_small = st.sampled_from([0, 1, 2])
_launch = st.fixed_dictionaries({
    "kernel": st.sampled_from(["q_block_kernel", "reduce_segments_kernel"]),
    "binary": st.sampled_from(["a" * 64, "b" * 64]),
    "grid": st.lists(_small, min_size=1, max_size=3),
    "config": st.fixed_dictionaries({"num_warps": st.sampled_from([4, 8]),
                                     "BLOCK_M": st.sampled_from([16, 64])}),
    "scalars": st.dictionaries(st.sampled_from(["num_seqs", "scale"]), _small, max_size=2),
    "tensors": st.dictionaries(st.sampled_from(["q_ptr", "out_ptr"]),
                               st.tuples(st.sampled_from(["q", "out", "scratch0"]),
                                         st.lists(_small, max_size=2)).map(list), max_size=2),
})
_ok = st.fixed_dictionaries({"status": st.just("ok"), "launches": st.lists(_launch, max_size=3),
                             "call": st.sampled_from(["c1", "c2"]),
                             "ops": st.lists(st.lists(st.sampled_from(["aten.zero_", "aten.empty"]),
                                                      max_size=1), max_size=1)})
_other = st.fixed_dictionaries({"status": st.sampled_from(["skip", "missing", "error"]),
                                "reason": st.sampled_from(["no softcap", "no window"])})
_side = st.one_of(_ok, _ok, _other)


def _mutate(data, side: dict) -> dict:
    """`side` again, equal or with one part changed (how a real change looks: mostly alike)."""
    side = json.loads(json.dumps(side))
    if side["status"] != "ok" or not side["launches"] or data.draw(st.booleans()):
        return side
    i = data.draw(st.integers(0, len(side["launches"]) - 1))
    part = data.draw(st.sampled_from(["binary", "grid", "scalars", "tensors", "config", "order", "ops",
                                      "call"]))
    launch = side["launches"][i]
    if part == "binary":
        launch["binary"] = "c" * 64
    elif part == "grid":
        launch["grid"] = [*launch["grid"], 7]
    elif part == "scalars":
        launch["scalars"]["num_seqs"] = 99
    elif part == "tensors":
        launch["tensors"]["q_ptr"] = ["q", [5, 5]]
    elif part == "config":
        launch["config"]["num_warps"] = 2
    elif part == "call":
        side["call"] = "c3"
    elif part == "order":
        side["launches"].append(side["launches"].pop(i))
    else:
        side["ops"] = [*side["ops"], ["aten.fill_"]]
    return side


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_case_is_unchanged_iff_every_launch_key_is_equal(data):
    base = data.draw(_side)
    head = data.draw(st.one_of(st.just(None), _side))
    head = _mutate(data, base) if head is None else head
    why = keys.difference(base, head)
    identical = base == head and base["status"] != "error"  # a planning error is timed: the gate reports it
    assert (why is None) == identical, (why, base, head)
    if why is not None:
        assert isinstance(why, str) and why  # every timed case says why
    doc = plan.document(plan.LATENCY, [{"variant": "v", "scenario": "s", "why": why}], vendor="nvidia",
                        target="sm_90", base="a" * 40, head="b" * 40)
    assert doc["counts"] == {"measure": int(not identical), "unchanged": int(identical)}


def test_why_names_the_first_difference():
    launch = {"kernel": "k", "binary": "a", "grid": [1], "config": {"num_warps": 4}, "scalars": {},
              "tensors": {}}
    ok = {"status": "ok", "launches": [launch], "ops": []}
    warps = {**ok, "launches": [{**launch, "config": {"num_warps": 8}, "binary": "b"}]}
    assert keys.difference(ok, warps) == "launch 0 (k): num_warps 4 -> 8"
    assert keys.difference(ok, {**ok, "launches": [{**launch, "binary": "b"}]}).endswith(
        "compiled kernel differs (Triton compile key: its source or a function it calls)")
    grid = keys.difference(ok, {**ok, "launches": [{**launch, "grid": [2]}]})
    assert grid == "launch 0 (k): grid [1] -> [2]"
    assert keys.difference(ok, {**ok, "launches": []}) == "1 launches on the base, 0 on the head"
    assert "torch operations" in keys.difference(ok, {**ok, "ops": [["aten.zero_", []]]})
    assert "call path after planning" in keys.difference({**ok, "call": "x"}, {**ok, "call": "y"})
    assert keys.difference({"status": "missing"}, ok).startswith("the base lacks the variant")
    error = {"status": "error", "reason": "plan failed: boom"}
    assert keys.difference(error, error) == "planning failed on both sides: plan failed: boom"
    assert keys.difference(ok, error) == "planning failed on the head: plan failed: boom"


def test_a_first_call_that_differs_runs_the_case():
    """A test calls once: a head whose first call plans other launches than its kept plan runs."""
    launch = {"kernel": "k", "binary": "b", "grid": [1], "config": {}, "scalars": {}, "tensors": {}}
    side_ = {"status": "ok", "launches": [launch], "ops": [], "call": "c",
             "first": {"launches": [dict(launch)], "ops": []}}
    assert keys.difference(side_, copy.deepcopy(side_)) is None
    head = copy.deepcopy(side_)
    head["first"]["launches"][0]["grid"] = [2]
    assert "first call" in keys.difference(side_, head)
    head = copy.deepcopy(side_)
    head["first"]["ops"] = [["aten.zero_", []]]
    assert "first call" in keys.difference(side_, head)


# --- the one plan document, both kinds --------------------------------------------------------

def _doc(measure=(("v", "s1"),), unchanged=(("v", "s2"),)) -> dict:
    rows = [{"variant": v, "scenario": s, "why": "w"} for v, s in measure]
    rows += [{"variant": v, "scenario": s, "why": None} for v, s in unchanged]
    return plan.document(plan.LATENCY, rows, vendor="nvidia", target="sm_90", base="a" * 40, head="b" * 40)


def _grid_doc(**edits) -> dict:
    rows = [{"node": "tests/t.py::test_a[y]", "why": None}, {"node": "tests/t.py::test_a[x]", "why": "w"},
            {"node": "tests/t.py::test_b", "why": None}]
    doc = plan.document(plan.GRID, rows, vendor="nvidia", target="sm_90", arch="90", num_sms=132,
                        base="a" * 40, head="b" * 40)
    doc.update(edits)
    return doc


def test_plan_file_round_trips_and_says_its_counts(tmp_path):
    doc = _doc()
    assert set(doc) == {"schema", "kind", "vendor", "target", "base", "head", "measure", "unchanged",
                        "counts"}
    assert doc["kind"] == "latency" and doc["measure"] == [{"variant": "v", "scenario": "s1", "why": "w"}]
    assert latency.summary(doc) == "1 of 2 cases to time; 1 unchanged (identical launches)"
    path = latency.write_plan(str(tmp_path), doc)
    assert path == str(tmp_path / "plan.json") and latency.read_plan(path) == doc
    checked = latency.check_plan(doc, path, vendor="nvidia", target="sm_90", base="a" * 40, head="b" * 40,
                                 cases=[("v", "s1"), ("v", "s2")])
    assert checked is doc


def test_a_grid_plan_round_trips_in_the_same_document(tmp_path):
    from perf.change import grid_plan

    doc = _grid_doc()
    assert set(doc) == {"schema", "kind", "vendor", "target", "arch", "num_sms", "base", "head", "run",
                        "unchanged", "counts"}
    assert doc["run"] == [{"node": "tests/t.py::test_a[x]", "why": "w"}] and doc["counts"] == {"run": 1,
                                                                                             "unchanged": 2}
    path = plan.write_plan(str(tmp_path / "out"), doc)
    assert path.endswith(grid_plan.PLAN_FILE) and grid_plan.read_plan(path) == doc
    assert plan.summary(doc) == ("grid: 1 of 3 keyed cases to run; 2 unchanged (identical launches); "
                                 "the other grid tests run whole")


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(schema=1), "schema 1, expected 2; write it again with `python -m perf gate "
                                   "--plan-only"),
    (lambda d: d.update(kind="grid"), "`kind` 'grid', expected 'latency'"),
    (lambda d: d.update(counts={"measure": 5, "unchanged": 1}), "does not count"),
    (lambda d: (d["measure"].append({"variant": "v", "scenario": "s2", "why": "w"}),
                d.update(counts={"measure": 2, "unchanged": 1})), "both to measure and"),
    (lambda d: d["unchanged"].append({"variant": 3}), r"unchanged\[1\] needs text fields"),
    (lambda d: d["measure"][0].pop("why"), r"measure\[0\] needs text fields variant, scenario, why"),
    (lambda d: d.pop("target"), "`target` is not"),
])
def test_a_bad_plan_file_is_one_line_naming_the_field(tmp_path, edit, match):
    doc = _doc()
    edit(doc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=match):
        latency.read_plan(str(path))


_MUTATIONS = {
    "schema": [1, "2", None], "kind": ["latency", None], "vendor": ["", 3, None], "target": ["", []],
    "arch": [90, ""], "num_sms": [0, -1, "132", 1.5, True, None], "base": ["", None], "head": [7],
    "run": ["x", [3], [{"node": "no-node-id", "why": "w"}], [{"node": "tests/t.py::test_a[x]"}],
            [{"node": "tests/t.py::test_a[x]", "why": "w"}] * 2,
            [{"node": "tests/t.py::test_b", "why": "w"}]],
    "unchanged": [None, {}, [None]], "counts": [{"run": 2, "unchanged": 2}, None, {"run": 1}],
}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(_MUTATIONS)).flatmap(
    lambda k: st.tuples(st.just(k), st.sampled_from(_MUTATIONS[k]))), st.booleans())
def test_a_malformed_grid_plan_is_one_line_naming_the_file_and_field(tmp_path_factory, mutation, drop):
    from perf.change import grid_plan

    key, value = mutation
    doc = copy.deepcopy(_grid_doc())
    if drop:
        del doc[key]
    else:
        doc[key] = value
    path = tmp_path_factory.mktemp("plan") / "grid-plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as e:
        grid_plan.read_plan(str(path))
    text = str(e.value)
    assert str(path) in text and "\n" not in text and text.endswith("or drop --grid-plan")
    assert key in text or (key in ("run", "unchanged") and "counts" in text) or "tests/t.py::test_b" in text


@pytest.mark.parametrize("kind", [plan.LATENCY, plan.GRID])
def test_not_json_or_not_an_object_is_refused(tmp_path, kind):
    for text in ("{", "[]", ""):
        (tmp_path / "p.json").write_text(text)
        with pytest.raises(ConfigError, match="p.json"):
            plan.read_plan(str(tmp_path / "p.json"), kind)


def test_a_plan_of_another_gate_is_refused():
    doc = _doc()
    same = dict(vendor="nvidia", target="sm_90", base="a" * 40, head="b" * 40,
                cases=[("v", "s1"), ("v", "s2")])
    with pytest.raises(ConfigError, match="planned for head bbbbbbbbbbbb, this gate's is cccccccccccc"):
        latency.check_plan(doc, "p.json", **{**same, "head": "c" * 40})
    with pytest.raises(ConfigError, match="planned for target sm_90, this gate's is gfx942"):
        latency.check_plan(doc, "p.json", **{**same, "target": "gfx942"})
    with pytest.raises(ConfigError, match="has no case w s3"):
        latency.check_plan(doc, "p.json", **{**same, "cases": [("v", "s1"), ("v", "s2"), ("w", "s3")]})
    # a case the gate does not select must still name a registered variant and a real scenario
    for extra, says in ((("nave", "llama3-8b/decode/batch1-kv16/block16"), "names no registered variant"),
                        (("static_grid", "llama3-8b/decode/nope/block16"), "shape 'nope' does not match"),
                        (("static_grid", "../../x"), "does not match")):
        with pytest.raises(ConfigError, match=f"case {re.escape(' '.join(extra))}.*{says}"):
            latency.check_plan(_doc(unchanged=(("v", "s2"), extra)), "p.json", **same)
    wider = _doc(unchanged=(("v", "s2"), ("static_grid", "llama3-8b/decode/batch1-kv16/block16")))
    assert latency.check_plan(wider, "p.json", **same) is wider  # a plan of more cases serves a narrower gate


# --- the planning process's arguments ---------------------------------------------------------

def test_the_planning_process_takes_what_its_kind_needs(capsys):
    common = ["--target", "sm_90", "--num-sms", "132", "--thresholds", "t.yaml", "--out", "o.json"]
    args = side.parse(["--kind", "grid", "--base", "B", "--head", "H", *common])
    assert (args.kind, args.base, args.num_sms, args.processes) == ("grid", "B", 132, 0)
    for kind, lacking in (("latency", "--suite"), ("grid", "--base, --head"), ("compile", "--cache-dir")):
        with pytest.raises(SystemExit) as e:
            sides = ["--base", "B", "--head", "H"] if kind == "latency" else []
            side.parse(["--kind", kind, *sides, *common])
        assert e.value.code == 2 and f"--kind {kind} needs {lacking}" in capsys.readouterr().err
    cmd = side.argv("perf.change", kind="grid", num_sms=132, only=None, cache_dir="/c")
    assert cmd == [sys.executable, "-m", "perf.change", "--kind", "grid", "--num-sms", "132", "--cache-dir",
                   "/c"]


# --- unchanged is evidence; nothing compared is not ------------------------------------------

def _finding(verdict: Verdict, ratio=None, note="") -> Finding:
    return Finding("latency", "nvidia", "GPU", "v", "s", "graph", None, None, ratio, None, None, None, "",
                   verdict, note)


def test_every_case_unchanged_passes_but_nothing_compared_is_nothing_measured():
    same = _finding(Verdict.UNCHANGED, note="identical launches")
    skipped = _finding(Verdict.OK, note="skipped on both sides: no softcap")
    assert exit_code([same, same]) == 0  # a verdict with evidence: launches compared, identical
    assert exit_code([same, skipped]) == 0
    with pytest.raises(NothingMeasured):
        exit_code([skipped])  # compared nothing, proves nothing
    with pytest.raises(NothingMeasured):
        exit_code([])
    assert exit_code([same, _finding(Verdict.FAIL, 1.2)]) == 1


def test_the_report_and_the_pr_comment_show_unchanged_cases_as_unchanged(tmp_path):
    from perf.ci import comment
    from perf.report import render_markdown

    same = _finding(Verdict.UNCHANGED, note="identical launches on sm_90")
    timed = _finding(Verdict.OK, 1.001)
    timed.scenario = "t"
    md = render_markdown([same, timed], "Latency")
    assert "1 ok, 0 improved, 1 unchanged (identical launches, not timed)" in md
    assert "<summary>1 unchanged: identical launches on both sides, not timed</summary>" in md
    assert "**pass: nothing to time**" in render_markdown([same], "Latency")
    path = tmp_path / "findings.json"
    path.write_text(json.dumps({"kind": "findings", "findings": [same.to_dict()]}))
    body = comment.render(comment.load(str(path)), "nvidia")
    assert "**pass: nothing to time (identical launches)**" in body
    assert "1 unchanged (identical launches, not timed)" in body


# --- planning commits of a throwaway repository ----------------------------------------------

VARIANTS = ("naive", "qblock", "parallel", "flex_tile", "static_grid")
SMOKE = ("tiny/mixed50/batch2-kv16/block16", "tiny/decode/batch1-kv16/block16",
         "tiny/prefill/batch2-kv24-var-chunk4/block16/window8")


def _commit(repo, edit, message: str) -> str:
    edit(str(repo))
    git(repo, "commit", "-qam", message)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """c0; c1 docs only; c2 one heuristic branch (NVIDIA's short prefills: 8 warps); c3 kernel-wide
    (LOG2E, a constant every attention kernel reads): the edits perf/latency/plant.py plants."""
    repo = harness_repo(tmp_path_factory.mktemp("changes") / "repo")
    (repo / "README.md").write_text("a readme\n")
    git(repo, "add", "README.md")
    shas = [_commit(repo, lambda root: None, "readme")]
    shas.append(_commit(repo, plant.plant_docs, "docs"))
    shas.append(_commit(repo, plant.plant_heuristic, "one heuristic branch"))
    shas.append(_commit(repo, plant.plant_kernel_wide, "kernel-wide"))
    return repo, shas


def _plan_only(repo, base: str, head: str, out) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "perf", "gate", "--plan-only", "--suite", "smoke",
                           "--vendor", "nvidia", "--base-ref", base, "--head-ref", head, "--out", str(out)],
                          cwd=repo, env=dict(env, PYTHONPATH=str(repo)), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "plan.json").read_text()), done.stdout.strip()


def _cases(rows) -> set[tuple[str, str]]:
    return {(r["variant"], r["scenario"]) for r in rows}


def test_a_docs_only_commit_plans_nothing_to_time(history, tmp_path):
    repo, (c0, c1, _, _) = history
    doc, line = _plan_only(repo, c0, c1, tmp_path)
    assert line == f"0 of {len(VARIANTS) * len(SMOKE)} cases to time; 15 unchanged (identical launches)"
    assert (doc["vendor"], doc["target"], doc["base"], doc["head"]) == ("nvidia", "sm_90", c0, c1)
    assert doc["counts"] == {"measure": 0, "unchanged": 15}


def test_one_heuristic_branch_times_only_the_cases_it_changed(history, tmp_path):
    repo, (_, c1, c2, _) = history
    doc, _ = _plan_only(repo, c1, c2, tmp_path)
    measured = _cases(doc["measure"])
    # the branch decides the Q-block kernel's configuration of short prefills on NVIDIA: variants with
    # heuristics, scenarios with short prefills; naive, qblock (fixed configurations) and the pure
    # decode batch keep their launches
    assert measured and all(v in ("parallel", "flex_tile", "static_grid") for v, _ in measured)
    assert not any(s == "tiny/decode/batch1-kv16/block16" for _, s in measured)
    assert all("num_warps 4 -> 8" in r["why"] for r in doc["measure"])
    assert _cases(doc["unchanged"]) == {(v, s) for v in VARIANTS for s in SMOKE} - measured


def test_a_kernel_wide_edit_times_everything_that_launches(history, tmp_path):
    repo, (_, _, c2, c3) = history
    doc, _ = _plan_only(repo, c2, c3, tmp_path)
    # naive lacks sliding windows: that case launches nothing on either side
    assert _cases(doc["unchanged"]) == {("naive", SMOKE[2])}
    assert len(doc["measure"]) == 14
    assert all("compiled kernel differs" in r["why"] for r in doc["measure"])


@needs_interpreter
def test_the_interpreter_gate_times_only_the_planned_cases(history, tmp_path):
    repo, (_, c1, c2, _) = history
    plan, _ = _plan_only(repo, c1, c2, tmp_path / "plan")
    out = tmp_path / "gate"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the interpreter's gate on any machine: on a GPU this planted change is timed for real and may FAIL
    done = subprocess.run([sys.executable, "-m", "perf", "gate", "--suite", "smoke", "--metrics", "eager",
                           "--variants", "qblock,static_grid", "--base-ref", c1, "--head-ref", c2, "--out",
                           str(out), "--plan", str(tmp_path / "plan" / "plan.json"), "--samples", "1",
                           "--lock-timeout", "600"],  # other interpreter gates of this machine
                          cwd=repo, env=dict(env, **CPU_ONLY, PYTHONPATH=str(repo)), capture_output=True,
                          text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    findings = json.loads((out / "findings.json").read_text())
    by_case = {(f["variant"], f["scenario"]): f for f in findings["findings"]}
    planned = {c for c in _cases(plan["measure"]) if c[0] in ("qblock", "static_grid")}
    assert planned  # static_grid's short prefills
    for case, f in by_case.items():
        if case in planned:
            assert f["verdict"] != "unchanged" and f["ratio"] is not None, f  # timed
        else:
            assert f["verdict"] == "unchanged" and f["ratio"] is None and "identical launches" in f["note"], f
    assert set(by_case) == {(v, s) for v in ("qblock", "static_grid") for s in SMOKE}
    timed = json.loads((out / "plan-keys.json").read_text())
    assert {(v, s) for v, s, _ in timed} == planned  # the workers were given only these
    report = (out / "report.md").read_text()
    assert "unchanged: identical launches on both sides, not timed" in report
    assert findings["plan"]["unchanged"] == 6 - len(planned)


def test_a_gate_whose_every_case_is_unchanged_passes_without_timing(history, tmp_path):
    repo, (c0, c1, _, _) = history
    out = tmp_path / "gate"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "perf", "gate", "--suite", "smoke", "--metrics", "eager",
                           "--base-ref", c0, "--head-ref", c1, "--out", str(out), "--lock-timeout", "600"],
                          cwd=repo, env=dict(env, PYTHONPATH=str(repo)), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "nothing to time: every case has identical launches" in done.stderr
    doc = json.loads((out / "findings.json").read_text())
    assert {f["verdict"] for f in doc["findings"]} == {"unchanged"} and len(doc["findings"]) == 15
    assert not (out / "base.jsonl").exists() and not (out / "gate.json").read_text().count('"process"')
    assert json.loads((out / "plan.json").read_text())["counts"] == {"measure": 0, "unchanged": 15}
    assert "**pass: nothing to time**" in (out / "report.md").read_text()


def test_the_planted_commits_for_the_gpu_checks(tmp_path):
    made = plant.make_commits(str(tmp_path / "p"), 10, "nvidia")
    repo = str(tmp_path / "p" / "repo")
    assert list(made) == ["plan-base", "plan-docs", "plan-heuristic", "plan-kernel", "plan-slow"]

    def changed(branch: str) -> list[str]:
        out = subprocess.run(["git", "-C", repo, "diff", "--name-only", "plan-base", branch],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    assert changed("plan-docs") == ["README.md"] and changed("plan-heuristic") == [plant.HEURISTICS]
    assert changed("plan-kernel") == changed("plan-slow") == [plant.TARGET]
    with pytest.raises(ConfigError, match="exists"):
        plant.make_commits(str(tmp_path / "p"))


def test_compare_fails_names_the_cases_one_gate_fails_alone(tmp_path):
    def findings(name, *failing):
        rows = [_finding(Verdict.FAIL if s in failing else Verdict.OK, 1.0) for s in ("a", "b")]
        for f, s in zip(rows, ("a", "b")):
            f.scenario = s
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"kind": "findings", "findings": [f.to_dict() for f in rows]}))
        return str(path)

    same = plant.compare_fails(findings("x", "a"), findings("y", "a"))
    assert same == ({("v", "a", "graph")}, set(), set())
    assert plant.main(["--compare-fails", findings("x", "a"), findings("z", "a", "b")]) == 1
    assert plant.main(["--compare-fails", findings("x", "a"), findings("y", "a")]) == 0


def test_recompute_keeps_the_cases_the_gate_did_not_time(tmp_path):
    from perf.latency import ab
    from tests.latency.test_perf_gate import TH, _write_pair

    _write_pair(tmp_path, {("static_grid", "timed", "graph"): (1.0, 0.0005, 0.002)})
    (tmp_path / "gate.json").write_text(json.dumps({"identity": {}, "processes": [
        {"attempt": 0, "index": p, "process": f"proc{p}", "first_repeat": 0, "pairs": 1} for p in range(3)]}))
    doc = plan.document(plan.LATENCY, [{"variant": "static_grid", "scenario": "timed", "why": "w"},
                                       {"variant": "static_grid", "scenario": "same", "why": None}],
                        vendor="nvidia", target="sm_90", base="a" * 40, head="b" * 40)
    latency.write_plan(str(tmp_path), doc)
    by = {f.scenario: f for f in ab.recompute(str(tmp_path), TH, "nvidia", None)}
    assert by["timed"].ratio is not None and by["same"].verdict is Verdict.UNCHANGED


KEY_DESCRIPTORS = """
import json
from kernels import platform
platform.current = lambda: platform.Platform("nvidia", "sm_90", "H200", 32, 132)
import kernels
from kernels.batch import BatchSpec, build_batch
from perf.change import keys
from perf.static import plan
from perf.thresholds import load_thresholds

target = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
seen = {}
for name, spec in (("q_block", BatchSpec((1, 7), (40, 23))),  # the Q-block kernel: tensors
                   ("warp_specialized", BatchSpec((2048,), (2048,), dtype="bfloat16"))):  # TMA descriptors
    batch = build_batch(spec, "cpu", fill=False)
    key = keys.case_key(kernels, "static_grid", batch, target, 132, {})
    seen[name] = {"status": key["status"], "reason": key.get("reason"),
                  "tensors": key["status"] == "ok" and key["launches"][0]["tensors"]}
print(json.dumps(seen))
"""


def test_launch_keys_describe_tma_descriptors_by_their_tensors_role(tmp_path):
    """A TMA descriptor (the warp-specialized prefill's, planned as if on an sm_90 GPU) is keyed by its
    tensor's role, shape, strides and box, as a tensor argument is by its role: never by the values."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # binding needs real JITFunctions
    env.update(PYTHONPATH=root, TRITON_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", KEY_DESCRIPTORS], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["q_block"]["status"] == "ok", seen
    assert seen["q_block"]["tensors"]["q_ptr"][0] == "q", seen
    assert seen["warp_specialized"]["status"] == "ok", seen
    q_desc = seen["warp_specialized"]["tensors"]["q_desc"]
    assert q_desc[0] == "q" and q_desc[-1] == [64, 128], seen  # q's role, then its box of 64 rows
