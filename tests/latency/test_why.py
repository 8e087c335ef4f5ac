"""The "why" section: two planted changes in a throwaway checkout, each explained on a CPU by
`python -m perf why` (real planning, binding and compiles for sm_90), naming the kernel and the
change; the renderer and the one-line summary on made-up documents; device time per kernel on a
GPU only (skipped here with the reason)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from interpreter_support import NO_GPU

from perf import why
from tests.throwaway_repo import git, harness_repo

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHORT = "llama3-8b/decode/batch128-kv64/block16"  # 64 keys: the NVIDIA tree's short-context branch
DECODE = "llama3-8b/decode/batch32-kv1024/block16"
HEURISTIC = ("SHORT_CONTEXT = 64 ", "SHORT_CONTEXT = 32 ")  # the branch stops at 32 keys
Q_LOAD = """    q = tl.load(q_ptr + token[:, None] * stride_q_token + head[:, None] * stride_q_head
                + dims[None, :], mask=row_mask[:, None] & dim_mask[None, :], other=0.0)
"""
Q_TWICE = Q_LOAD + """    q2 = tl.load(q_ptr + token[:, None] * stride_q_token + head[:, None] * stride_q_head
                 + dims[None, :], mask=row_mask[:, None] & dim_mask[None, :], other=0.0, volatile=True)
    q = tl.maximum(q, q2)  # planted: every Q tile read twice
"""


def _edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path} changed ({old.strip()[:40]!r}): update the planted change"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """commit 0: this checkout; 1: a heuristic branch moved; 2: a kernel edit (Q read twice)."""
    repo = harness_repo(tmp_path_factory.mktemp("why") / "repo")
    _edit(repo / "kernels/paged_attention/heuristics.py", *HEURISTIC)
    git(repo, "commit", "-qam", "planted: short-context branch up to 32 keys only")
    _edit(repo / "kernels/paged_attention/common.py", Q_LOAD, Q_TWICE)
    git(repo, "commit", "-qam", "planted: Q tile read twice")
    return repo


def _why(repo, base: str, head: str, scenario: str, out, *, gpu: bool = False
         ) -> tuple[subprocess.CompletedProcess, dict, str]:
    """`perf why` in a child process: as on a machine without a GPU (static explanations only) unless
    `gpu`, which keeps this machine's GPUs for device time per kernel."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({} if gpu else NO_GPU, PYTHONPATH=str(repo))
    done = subprocess.run([sys.executable, "-m", "perf", "why", "--base-ref", base, "--head-ref", head,
                           "--scenarios", scenario, "--out", str(out),
                           "--cache-dir", os.path.join(ROOT, ".perf-cache", "compile")],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done, json.loads((out / why.WHY_FILE).read_text()), (out / "why.md").read_text()


def test_a_heuristic_branch_change_is_named_with_its_provenance(planted, tmp_path):
    done, doc, md = _why(planted, "HEAD~2", "HEAD~1", SHORT, tmp_path)
    [case] = doc["cases"]
    base, head = case["base"]["config"], case["head"]["config"]
    assert (base["tile_size"], head["tile_size"]) == (16, 64)
    assert "short context" in base["source"] and "short context" not in head["source"]
    assert case["target"] == "sm_90" and case["base"]["launches"][0]["kernel"] == "q_block_kernel"
    summary = why.moved_most(case)
    assert summary.startswith("Moved most: q_block_kernel's ")
    assert "no longer 'short context, tile 16" in summary
    assert "tile_size 16 -> 64" in summary
    assert f"| tile_size | 16 | 64 {why.MARK} |" in md
    assert "| its provenance (heuristics.py) |" in md and "H100 2026-11-23, 2.1x" in md
    row = next(line for line in md.splitlines() if line.startswith("| q_block_kernel |"))
    assert row.count(why.MARK) >= 2  # the static metrics moved with the tile (registers, shared memory, ...)
    assert "Device time per kernel: skipped: no GPU" in md
    assert md in done.stdout


def test_a_kernel_edit_is_named_by_its_instruction_counts(planted, tmp_path):
    _, doc, md = _why(planted, "HEAD~1", "HEAD", DECODE, tmp_path)
    [case] = doc["cases"]
    assert case["base"]["config"] == case["head"]["config"]  # the plan did not change
    [b], [h] = case["base"]["launches"], case["head"]["launches"]
    assert b["kernel"] == h["kernel"] == "q_block_kernel" and b["binary"] != h["binary"]
    assert h["metrics"]["global_loads"] > b["metrics"]["global_loads"]
    summary = why.moved_most(case)
    assert summary.startswith("Moved most: q_block_kernel's global loads, ")
    assert "compiled code changed" in summary
    plan_rows = [line for line in md.splitlines()
                 if line.startswith(("| tile_size", "| launch 0: grid", "| heuristic branch"))]
    assert plan_rows and not any(why.MARK in line for line in plan_rows), plan_rows
    assert f"differs: its source, a function it calls or its constants {why.MARK}" in md


def test_bad_input_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-m", "perf", "why", "--scenarios", DECODE, "--variants", "bogus",
                           "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown variant bogus" in done.stderr


# --------------------------------------------------------------------------- rendering alone

def _launch(kernel="q_block_kernel", binary="a", grid=(132,), **metrics):
    m = {"registers": 128, "spill_stores": 0, "spill_loads": 0, "shared_memory": 16384, "occupancy": 8,
         "global_loads": 40, "global_stores": 8, "shared_loads": 30, "shared_stores": 10, "tensor_ops": 32}
    return {"kernel": kernel, "binary": binary, "grid": list(grid),
            "config": {"num_warps": 4, "num_stages": 2}, "metrics": {**m, **metrics}, "compile_status": "ok"}


def _case(base_launches, head_launches, device_time=None, base_source="nvidia/decode: sweep",
          head_source="nvidia/decode: sweep"):
    return {"variant": "static_grid", "scenario": DECODE, "target": "sm_90", "num_sms": 132,
            "base": {"status": "ok", "config": {"tile_size": 64, "source": base_source},
                     "launches": base_launches},
            "head": {"status": "ok", "config": {"tile_size": 64, "source": head_source},
                     "launches": head_launches},
            "device_time": device_time or {"skipped": "no GPU"}}


def test_measured_device_time_outranks_static_changes():
    case = _case([_launch(), _launch("reduce_segments_kernel", grid=(1024,))],
                 [_launch(registers=160), _launch("reduce_segments_kernel", grid=(1024,))],
                 {"tool": "torch.profiler", "note": "torch's profiler", "rounds": 10,
                  "times": {"base": {"q_block_kernel": 10.0, "reduce_segments_kernel": 2.0},
                            "head": {"q_block_kernel": 10.1, "reduce_segments_kernel": 3.0}}})
    assert why.moved_most(case).startswith(
        "Moved most: reduce_segments_kernel's device time (us), 2 -> 3 (1.50x)")
    md = why.render(case)
    assert "| reduce_segments_kernel | 2 | 3 | 1.500 |" in md and "torch's profiler" in md
    assert f"128 -> 160 {why.MARK}" in md


def test_identical_sides_say_nothing_moved():
    case = _case([_launch()], [_launch()])
    assert why.moved_most(case).startswith("Moved most: nothing: identical launches")
    assert why.render(case).count(why.MARK) == 1  # the legend alone


def test_a_side_that_cannot_plan_says_why():
    case = _case([_launch()], [])
    case["head"] = {"status": "skip", "reason": "sliding window not supported"}
    md = why.render(case)
    assert "- head: skip: sliding window not supported" in md and "nothing to compare" in md


def test_branch_change_in_words():
    base = "nvidia/decode: sweep H200; short context, tile 16, 2 warps: H100 2026-11-23, 2.1x"
    head = "nvidia/decode: sweep H200; many short items, tile 64, 2 warps: H100 2026-11-23, 1.02-1.33x"
    assert why.branch_change(base, head) == ("nvidia/decode, no longer 'short context, tile 16, 2 warps', "
                                            "now 'many short items, tile 64, 2 warps'")
    changed = why.branch_change("nvidia/decode: a", "nvidia/prefill: a")
    assert changed.startswith("nvidia/decode -> nvidia/prefill")


def test_proton_trees_are_read_per_side_and_kernel():
    def node(name, children=(), ns=None):
        metrics = {"time (ns)": ns} if ns else {}
        return {"frame": {"name": name}, "metrics": metrics, "children": list(children)}

    base = node("base", [node("q_block_kernel", ns=40000), node("reduce_segments_kernel", ns=8000)])
    head = node("head", [node("q_block_kernel", ns=90000)])
    tree = [node("ROOT", [base, head, node("other", [node("x", ns=1)])])]
    times = why.proton_kernel_times(tree, {"base": 4, "head": 4})
    assert times == {"base": {"q_block_kernel": 10.0, "reduce_segments_kernel": 2.0},
                     "head": {"q_block_kernel": 22.5}}


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="device time per kernel needs a GPU")
def test_kernel_times_on_a_gpu():
    import torch

    x = torch.randn(1 << 20, device="cuda")
    t = why.kernel_times({"base": lambda: x.mul(2.0), "head": lambda: (x.mul(2.0), x.add(1.0))}, rounds=4)
    assert t["tool"] in ("proton", "torch.profiler") and t["times"]["base"] and t["times"]["head"]
    assert len(t["times"]["head"]) >= len(t["times"]["base"])


# --------------------------------------------------------------------------- the consumers

def _finding(verdict: str, variant="static_grid", scenario=DECODE, metric="graph", ratio=1.2):
    from perf.verdicts import Finding, Verdict

    return Finding("latency", "nvidia", "NVIDIA H100 80GB HBM3", variant, scenario, metric, 1.0, ratio, ratio,
                   None, None, 0.001, "warn > 1.03, fail > 1.05", Verdict(verdict))


def test_red_cases_are_the_failing_and_warning_latency_cases_worst_first():
    findings = [_finding("ok", scenario="a"), _finding("warn", scenario="b", ratio=1.04),
                _finding("fail", scenario="c", ratio=1.3), _finding("fail", scenario="c", metric="eager"),
                _finding("improved", scenario="d", ratio=0.5)]
    assert why.red_cases(findings) == [("static_grid", "c"), ("static_grid", "b")]


def test_the_gate_section_explains_red_cases_and_never_breaks_the_gate(tmp_path, monkeypatch):
    from perf import vendor
    from perf.thresholds import load_thresholds

    monkeypatch.setattr(vendor, "on_gpu", lambda: False)  # as on a machine without a GPU: nothing profiled

    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    roots = {"base": "B", "head": "H"}
    assert why.explain_red([_finding("ok")], roots, th, "nvidia", str(tmp_path)) == ""
    seen = {}

    def fake(base, head, cases, target, num_sms, thresholds_path, out, device_time=False, cache_dir=None,
             source=why.ONE_PROCESS):
        seen.update(cases=cases, target=target.name, device_time=device_time)
        return {"cases": [_case([_launch()], [_launch(global_loads=80)])]}

    monkeypatch.setattr(why, "collect_cases", fake)
    md = why.explain_red([_finding("fail")], roots, th, "nvidia", str(tmp_path))
    assert md.startswith("### Why slower") and "global loads, 40 -> 80" in md
    assert seen == {"cases": [("static_grid", DECODE)], "target": "sm_90", "device_time": []}
    assert (tmp_path / "why.md").read_text() == md

    def broken(*a, **k):
        raise RuntimeError("why: the explaining process exited with code 3")

    monkeypatch.setattr(why, "collect_cases", broken)
    md = why.explain_red([_finding("fail")], roots, th, "nvidia", str(tmp_path))
    assert md == "### Why slower\n\nnot explained: why: the explaining process exited with code 3\n"


def _why_file(folder, case) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / why.WHY_FILE).write_text(json.dumps({"schema": why.SCHEMA, "cases": [case]}))


def test_the_pr_comment_carries_each_red_cases_line_escaped(tmp_path):
    from perf.ci import comment

    case = _case([_launch()], [_launch(global_loads=80)])
    case["variant"] = "static_grid <b>@team</b>"  # the PR's own data: escaped like every cell
    _why_file(tmp_path, case)
    (tmp_path / "findings.json").write_text("{}")
    whys = comment.whys_beside([str(tmp_path / "findings.json")])
    [(key, line)] = whys.items()
    assert line.startswith("Moved most: q_block_kernel's global loads, 40 -> 80")
    row = comment.Row(gate="latency", vendor="nvidia", target="H100", variant=key[0], scenario=key[1],
                      metric="graph", verdict=__import__("perf.verdicts").verdicts.Verdict.FAIL, base=1.0,
                      head=1.2, ratio=1.2, ci_low=1.1, ci_high=1.3, min_detectable=1.01, note="")
    body = comment.render([row], "nvidia", whys=whys)
    assert "Why (report.md has each case's plans" in body and "global loads, 40 -\\> 80" in body
    assert "\n- `static_grid <b>@team</b>` `llama3-8b" in body  # names in code spans, as the table's
    (tmp_path / why.WHY_FILE).write_text("{not json")  # unreadable: left out, the comment still renders
    assert comment.whys_beside([str(tmp_path / "findings.json")]) == {}


def test_the_nightly_issue_and_bisect_read_the_gates_why(tmp_path):
    from perf.nightly import issues

    _why_file(tmp_path, _case([_launch()], [_launch(registers=200)]))
    text = why.case_section(str(tmp_path), "static_grid", DECODE)
    assert text.startswith("#### Why: static_grid on")
    assert why.case_section(str(tmp_path), "naive", DECODE) is None
    item = {"machine": "m", "vendor": "nvidia", "gpu": "H100", "head": "b" * 40, "base": "a" * 40, "repo": "",
            "page": "", "run_url": "", "gate_command": "python -m perf gate", "gate_out": str(tmp_path),
            "commits": 2, "why": [text],
            "cases": [{"variant": "static_grid", "scenario": DECODE, "metric": "graph", "marker": "<!-- -->",
                       "nightly": {"ratio": 1.2, "p_value": 0.001, "note": ""},
                       "remeasure": {"status": "confirmed", "ratio": 1.2, "ci_low": 1.1, "ci_high": 1.3},
                       "plot": "", "plot_file": "p.png"}]}
    _, body = issues.render(item)
    assert "### Why slower" in body and "registers" in body and "128 -> 200" in body


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="device time per kernel needs a GPU")
def test_both_planted_changes_with_device_time_on_a_gpu(planted, tmp_path, capsys):
    """On a GPU: both planted changes explained with device time per kernel, measured in one
    process on the same tensors; then the gate on the branch change, whose failing case's device
    time comes from its re-measure processes' records; the sections are printed (-s)."""
    for name, (base, head, scenario) in {"heuristic": ("HEAD~2", "HEAD~1", SHORT),
                                         "kernel edit": ("HEAD~1", "HEAD", DECODE)}.items():
        _, doc, md = _why(planted, base, head, scenario, tmp_path / name.replace(" ", "-"), gpu=True)
        [case] = doc["cases"]
        dt = case["device_time"]
        assert "skipped" not in dt, dt
        assert dt["tool"] in ("proton", "torch.profiler")
        assert dt["times"]["base"].get("q_block_kernel") and dt["times"]["head"].get("q_block_kernel"), dt
        with capsys.disabled():
            print(f"\n===== planted {name}: {base} -> {head} =====\n{md}")
    # and the latency gate's own report: the planted branch change fails it and is explained there
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(planted)
    out = tmp_path / "gate"
    cmd = [sys.executable, "-m", "perf", "gate", "--base-ref", "HEAD~2", "--head-ref", "HEAD~1",
           "--variants", "static_grid", "--scenarios", SHORT, "--metrics", "graph", "--out", str(out),
           "--lock-timeout", "600"]
    done = subprocess.run(cmd, cwd=planted, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = (out / "report.md").read_text()
    findings = json.loads((out / "findings.json").read_text())["findings"]
    red = [f for f in findings if f["verdict"] in ("fail", "warn")]
    with capsys.disabled():
        print(f"\n===== perf gate on the planted heuristic change: exit {done.returncode}, "
              f"{[(f['metric'], f['verdict'], round(f['ratio'] or 0, 3)) for f in red]} =====\n"
              + (report[report.find("### Why slower"):] if red else "no red case: nothing to explain"))
    assert bool(red) == ("### Why slower" in report) == (out / why.WHY_FILE).exists()
    # a failing case was re-measured in fresh processes, which profiled it per kernel on what they timed
    failed = {(f["variant"], f["scenario"]) for f in findings if f["verdict"] == "fail"}
    for case in why.read(str(out / why.WHY_FILE))["cases"] if red else []:
        dt = case["device_time"]
        if (case["variant"], case["scenario"]) in failed:
            assert dt.get("source") == why.IN_GATE and dt["processes"] >= 1, dt
            assert dt["times"]["base"].get("q_block_kernel") and dt["times"]["head"].get("q_block_kernel"), dt
        else:
            assert dt.get("source") == why.AFTER_GATE, dt


# --------------------------------------------------------------------------- the gate's re-measure records

def _gate_records(folder, profiled: dict) -> None:
    """base.jsonl and head.jsonl as a gate's workers write them: per process, rounds of one case
    (static_grid on DECODE, graph); the last round's records carry `kernel_times` where `profiled`
    (process -> {side: us by kernel}, or a {"skipped"} field) says."""
    from perf import results
    from perf.measure.timing import Samples

    writers = {s: results.ResultsWriter(str(folder / f"{s}.jsonl"), {"environment": {"vendor": "nvidia"},
                                                                     "side": s}, resume=False)
               for s in ("base", "head")}
    for p, (process, field) in enumerate(profiled.items()):
        for r in range(3):
            for s, w in writers.items():
                extra = {}
                if r == 2 and field is not None:
                    proton = {"tool": "proton", "note": "Triton's Proton profiler", "rounds": 10}
                    extra["kernel_times"] = field if "skipped" in field else {**proton, "us": field[s]}
                w.record(variant="static_grid", scenario=DECODE, metric="graph", repeat=p * 3 + r,
                         samples=Samples((0.1,)), config=[], digest="d", process=process, **extra)
    for w in writers.values():
        w.close()


def _as_if_on_a_gpu(monkeypatch) -> None:
    """explain_red as on an H100: on_gpu, and the runner's target the one sm_90 would be."""
    from perf import vendor
    from perf.change import side

    real = side.runner_target
    monkeypatch.setattr(vendor, "on_gpu", lambda: True)
    monkeypatch.setattr(side, "runner_target", lambda th, v, on_gpu: real(th, v, False))


def test_the_gate_section_reads_device_time_from_the_re_measure_records(tmp_path, monkeypatch):
    from perf.thresholds import load_thresholds

    reduce = {"reduce_segments_kernel": 2.0}
    _gate_records(tmp_path, {
        "p1": {"base": {"q_block_kernel": 10.0, **reduce}, "head": {"q_block_kernel": 14.0}},
        "p2": {"base": {"q_block_kernel": 12.0, **reduce}, "head": {"q_block_kernel": 16.0}},
        "p3": None,  # a first-attempt process: no profile
    })
    recorded = why.recorded_kernel_times(str(tmp_path), [("static_grid", DECODE), ("naive", DECODE)])
    [(key, dt)] = recorded.items()
    assert key == ("static_grid", DECODE) and dt["processes"] == 2 and dt["source"] == why.IN_GATE
    assert dt["times"] == {"base": {"q_block_kernel": 11.0, "reduce_segments_kernel": 2.0},
                           "head": {"q_block_kernel": 15.0}}
    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    seen = {}

    def fake(base, head, cases, target, num_sms, thresholds_path, out, device_time=False, cache_dir=None,
             source=why.ONE_PROCESS):
        seen.update(device_time=device_time, source=source)
        return {"schema": why.SCHEMA, "cases": [_case([_launch()], [_launch()])]}

    monkeypatch.setattr(why, "collect_cases", fake)
    _as_if_on_a_gpu(monkeypatch)  # on a GPU: the records still win over profiling
    md = why.explain_red([_finding("fail")], {"base": "B", "head": "H"}, th, "nvidia", str(tmp_path))
    assert seen["device_time"] == []  # nothing profiled after the gate
    assert f"Device time per kernel, {why.IN_GATE}: mean us per call over 2 processes" in md
    assert "| q_block_kernel | 11 | 15 | 1.364 |" in md and "| reduce_segments_kernel | 2 | – | – |" in md
    assert md.count(why.AFTER_GATE) == 0
    assert why.read(str(tmp_path / why.WHY_FILE))["cases"][0]["device_time"]["processes"] == 2


def test_without_recorded_times_the_gate_profiles_after_it(tmp_path, monkeypatch):
    from perf.thresholds import load_thresholds

    _gate_records(tmp_path, {"p1": {"skipped": "no GPU in this process: no device time per kernel"}})
    assert why.recorded_kernel_times(str(tmp_path), [("static_grid", DECODE)]) == {}
    assert why.recorded_kernel_times(str(tmp_path / "none"), [("static_grid", DECODE)]) == {}
    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    seen = {}
    one = {"tool": "torch.profiler", "note": "torch's profiler (kineto)", "rounds": 10,
           "times": {"base": {"q_block_kernel": 10.0}, "head": {"q_block_kernel": 12.0}}}

    def fake(base, head, cases, target, num_sms, thresholds_path, out, device_time=False, cache_dir=None,
             source=why.ONE_PROCESS):
        seen.update(device_time=device_time, source=source)
        return {"cases": [_case([_launch()], [_launch()], {**one, "source": source})]}

    monkeypatch.setattr(why, "collect_cases", fake)
    _as_if_on_a_gpu(monkeypatch)
    md = why.explain_red([_finding("warn")], {"base": "B", "head": "H"}, th, "nvidia", str(tmp_path))
    assert seen == {"device_time": [("static_grid", DECODE)], "source": why.AFTER_GATE}
    assert f"Device time per kernel, {why.AFTER_GATE}: mean us per call over 10 calls per side" in md
    assert why.IN_GATE not in md and "| q_block_kernel | 10 | 12 | 1.200 |" in md
    older = _case([_launch()], [_launch()], one)  # a why.json from before sources: one process
    assert f"Device time per kernel, {why.ONE_PROCESS}: " in why.render(older)


def test_kernel_times_off_a_gpu_says_why(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert why.kernel_times({"base": lambda: None, "head": lambda: None}) == {
        "skipped": "Triton's interpreter runs no kernel on a device: no device time per kernel"}
    assert why.side_field({"skipped": "x"}, "head") == {"skipped": "x"}
    assert why.side_field({"tool": "proton", "note": "n", "rounds": 4, "times": {"head": {"k": 1.0}}},
                          "head") == {"tool": "proton", "note": "n", "rounds": 4, "us": {"k": 1.0}}


def test_alternation_is_the_measuring_loops_abba():
    seen = []
    why.alternate(["base", "head"], 4, seen.append)
    assert seen == ["base", "head", "head", "base", "base", "head", "head", "base"]


def test_an_sm90_prefill_is_explained_with_the_kernel_the_runner_launches(planted, tmp_path):
    """From a CPU, the prefill an sm_90 runner sends through the Gluon kernel is explained with that kernel
    on both sides (its platform stood in, as the change plan's), not with the Q-block kernel a CPU plans."""
    _, doc, _ = _why(planted, "HEAD~2", "HEAD~1", "llama3-8b/prefill/batch2-kv2048/block16", tmp_path)
    [case] = doc["cases"]
    for side in ("base", "head"):
        assert [launch["kernel"] for launch in case[side]["launches"]] == ["ws_prefill_kernel"], case[side]
        assert case[side]["launches"][0]["compile_status"] == "ok", case[side]["launches"][0]
