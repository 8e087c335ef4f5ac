"""Static gate, end to end: a planted regression fails, an A/A run passes (real compiles).

A throwaway git repository holds this checkout's kernels/ and thresholds.yaml (commit 1)
and the same with a planted regression in qblock (commit 2: Q-blocks of 64 rows instead
of 16 and 4 pipeline stages instead of 2, the kind of change one tunes on an H100; with
Triton 3.6 it needs 72 KiB of LDS on gfx942, more than a CU has, and spills SGPRs).
`python -m perf compile` from this checkout's perf/ then gates it exactly as CI does: the
base in a git worktree, each side compiled in its own process for every target of
thresholds.yaml. One variant and one scenario keep a cold run to about 25 s; .perf-cache
makes reruns faster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from perf.static import gate
from perf.thresholds import load_thresholds
from perf.verdicts import Verdict

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# every target of thresholds.yaml (sm_90, sm_100, gfx942, gfx950 today)
TARGETS = {t.name for v in load_thresholds(os.path.join(ROOT, "thresholds.yaml")).vendors.values()
           for t in v.targets}
SCENARIO = "llama3-8b/mixed50/batch32-kv1024/block64"  # a pr-suite scenario: BLOCK_SIZE 64, GQA 4:1
PLANT = [("block_m = decode_block_m(queries_per_kv)", "block_m = 64"),  # qblock's Q-block: 16 -> 64 rows
         ("num_stages=2,", "num_stages=4,")]  # and software pipelining 2 -> 4 stages


def _git(repo, *args):
    subprocess.run(["git", "-C", repo, "-c", "user.name=test", "-c", "user.email=test@example.com",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def _make_repo(path: str, plant: bool) -> str:
    """This checkout's kernels/ and thresholds.yaml as commit 1; the planted change as commit 2."""
    shutil.copytree(os.path.join(ROOT, "kernels"), os.path.join(path, "kernels"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "thresholds.yaml"), path)
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "base")
    if plant:
        qblock = os.path.join(path, "kernels", "paged_attention", "qblock.py")
        with open(qblock) as f:
            text = f.read()
        for old, new in PLANT:
            assert text.count(old) == 1, f"qblock.py changed ({old!r}): update the planted regression"
            text = text.replace(old, new)
        with open(qblock, "w") as f:
            f.write(text)
        _git(path, "commit", "-q", "-am", "planted regression: 64-row Q-blocks, 4 stages")
    return path


@pytest.fixture(scope="module")
def planted_repo(tmp_path_factory):
    return _make_repo(str(tmp_path_factory.mktemp("static-gate") / "repo"), plant=True)


def _gate(repo, base_ref, out):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    cmd = [sys.executable, "-m", "perf", "compile", "--base-ref", base_ref, "--variants", "qblock",
           "--scenarios", SCENARIO, "--out", out, "--quiet",
           "--cache-dir", os.path.join(ROOT, ".perf-cache", "compile")]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, "findings.json")) as f:
        findings = json.load(f)["findings"]
    return done, findings


def test_planted_regression_fails_naming_the_target(planted_repo, tmp_path):
    done, findings = _gate(planted_repo, "HEAD~1", str(tmp_path))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = {(f["target"], f["metric"].split("/")[-1]): f for f in findings if f["verdict"] == "fail"}
    lds = failed[("gfx942", "shared_memory")]  # 72 KiB of LDS with Triton 3.6
    assert lds["head"] > 65536 >= lds["base"] and "cannot launch on gfx942" in lds["note"]
    assert ("gfx942", "sgpr_spills") in failed, failed
    # the same LDS fits gfx950's 160 KiB: each target is held to its own limit
    heads = {(f["target"], f["metric"].split("/")[-1]): f["head"] for f in findings}
    assert 65536 < heads[("gfx950", "shared_memory")] <= 163840, heads
    assert ("gfx950", "shared_memory") not in failed
    report = open(tmp_path / "report.md").read()
    assert "**FAIL**" in report and "cannot launch on gfx942" in report and SCENARIO in report
    # the terminal: one screen with the counts, the failing rows and where the report is
    lines = done.stdout.splitlines()
    assert lines[0].startswith("base ") and "(HEAD~1) vs head" in lines[0], lines[:3]
    assert lines[1].startswith("static gate: FAIL: ") and "cannot launch on gfx942" in done.stdout
    assert os.path.join(str(tmp_path), "report.md") in lines[-1] and len(lines) < 70, done.stdout


def test_aa_run_passes(tmp_path):
    repo = _make_repo(str(tmp_path / "repo"), plant=False)
    done, findings = _gate(repo, "HEAD", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert findings and all(f["verdict"] == "ok" for f in findings)
    assert done.stdout.splitlines()[0] == ("nothing to compare: HEAD is its own base (A/A); "
                                           "static metrics of HEAD below"), done.stdout
    # the two sides were compiled side by side and agree exactly (compile times are measurements,
    # left out here; an A/A run shares every specialization, so its compile-time ratios are 1)
    base, head = (json.load(open(tmp_path / f"{side}.json")) for side in ("base", "head"))
    times = [f for f in findings if f["metric"] == "compile_time"]
    assert {f["target"] for f in times} == TARGETS
    assert all(f["ratio"] == 1.0 and f["verdict"] == "ok" for f in times), times

    def metrics(doc):
        return [(e["target"], e["kernel"], {k: v for k, v in e["metrics"].items()
                                            if k not in ("compile_time_s", "compile_cpu_s")})
                for e in doc["entries"]]

    assert metrics(base) == metrics(head) and len(metrics(head)) == len(TARGETS)
    # every target of thresholds.yaml compiled, its metrics read
    read = {target: m for target, _, m in metrics(head)}
    assert set(read) == TARGETS and not head["cannot_compile"]
    for target, m in read.items():
        assert m["registers"] > 0 and m["occupancy"] > 0 and m["shared_memory"] > 0, (target, m)
        assert {"spill_stores", "spill_loads"} <= m.keys() if target.startswith("sm_") else "vgpr_spills" in m
    assert not [f for f in gate.compare(head, head, load_thresholds(os.path.join(ROOT, "thresholds.yaml")))
                if f.verdict is not Verdict.OK]


def test_missing_base_ref_is_one_line_exit_2(planted_repo, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-m", "perf", "compile", "--base-ref", "no-such-ref"],
                          cwd=planted_repo, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--base-ref no-such-ref" in done.stderr, done.stderr


def test_base_without_target_hints_is_not_comparable(tmp_path):
    """A base whose variants cannot be planned for another vendor (no vendor=/num_sms= hints):
    noted, head checked against the limits only."""
    repo = str(tmp_path / "repo")
    os.makedirs(os.path.join(repo, "kernels"))
    with open(os.path.join(repo, "kernels", "__init__.py"), "w") as f:
        f.write('"""An old kernel package: its variants take no target hints."""\n'
                'class _Old:\n    hints = frozenset({"max_seqlen_q"})\n\n'
                'VARIANTS = {"qblock": _Old()}\n')
    shutil.copy(os.path.join(ROOT, "thresholds.yaml"), repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "old")
    shutil.rmtree(os.path.join(repo, "kernels"))
    shutil.copytree(os.path.join(ROOT, "kernels"), os.path.join(repo, "kernels"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "new")
    done, findings = _gate(repo, "HEAD~1", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert findings and all(f["base"] is None for f in findings)
    assert "base not comparable" in open(tmp_path / "out" / "report.md").read()


def test_gfx942_compiles_fp8_scenarios_with_fnuz_caches(tmp_path):
    """gfx942's fp8 scenarios are planned with FNUZ caches (its native fp8e4b8; the
    signature is checked in test_compile.py) and compile without spills. With OCP caches,
    converted in software there, parallel's decode kernel spilled 23 SGPRs (triton 3.6.0,
    2026-11-22)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    out = str(tmp_path / "head.json")
    cmd = [sys.executable, "-m", "perf", "compile", "--emit-json", out, "--variants", "qblock,parallel",
           "--scenarios", "llama3-8b/decode/batch32-kv2048/block16/fp8", "--targets", "gfx942", "--quiet",
           "--cache-dir", os.path.join(ROOT, ".perf-cache", "compile")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = json.load(open(out))["entries"]
    assert {(e["variant"], e["kernel"]) for e in entries} == {
        ("qblock", "_qblock_kernel"), ("parallel", "q_block_kernel"), ("parallel", "reduce_segments_kernel")}
    for e in entries:
        assert e["status"] == "ok" and e["target"] == "gfx942", e
        assert e["metrics"]["vgpr_spills"] == e["metrics"]["sgpr_spills"] == 0, e


def _compile_metrics(tmp_path, name: str, targets: str) -> dict:
    """`perf compile --jobs 1` of the fp8-cache prefill over `targets`, cold: target -> metrics."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    out = str(tmp_path / f"{name}.json")
    cmd = [sys.executable, "-m", "perf", "compile", "--emit-json", out, "--suite", "anchor",
           "--variants", "static_grid", "--scenarios", "llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16",
           "--targets", targets, "--jobs", "1", "--quiet", "--cache-dir", str(tmp_path / f"{name}-cache")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = json.load(open(out))["entries"]
    assert entries and all(e["status"] == "ok" for e in entries), entries
    return {e["target"]: {k: v for k, v in e["metrics"].items() if not k.endswith("_s")}  # not the times
            for e in entries}


def test_a_targets_metrics_do_not_depend_on_what_was_compiled_before(tmp_path):
    """gfx950 compiled after gfx942 in one process lowered its OCP fp8 conversions in software
    (168 VGPRs against 170 alone, Triton 3.6.0, 2026-11-27): the compiles of each target run in
    processes of their own (perf/static/build.py TargetPools), whatever --jobs says."""
    together = _compile_metrics(tmp_path, "together", "gfx942,gfx950")
    alone = _compile_metrics(tmp_path, "alone", "gfx950")
    assert together["gfx950"] == alone["gfx950"], (together["gfx950"], alone["gfx950"])


# A target the installed Triton refuses: gfx9999 (no such processor in its LLVM). The gate's
# side process is run with hardware facts for it (copied from gfx942), as a new record of
# perf/vendor.py TARGETS would give; its probe fails, nothing else is compiled for it, and every
# output says so.
FAKE = {"name": "gfx9999", "backend": "hip", "arch": "gfx9999", "warp_size": 64,
        "max_shared_memory_bytes": 65536, "max_registers_per_thread": 512}
WITH_FAKE_FACTS = ("import runpy, sys; from perf.static import metrics as sm; "
                   "sm.TARGET_FACTS['gfx9999'] = sm.TARGET_FACTS['gfx942']; "
                   "sys.argv[0] = 'perf.static.gate'; "
                   "runpy.run_module('perf.static.gate', run_name='__main__')")


def test_a_target_triton_cannot_compile_for_is_reported(tmp_path, capsys):
    from perf.static import report
    from perf.thresholds import parse_thresholds

    with open(os.path.join(ROOT, "thresholds.yaml")) as f:
        raw = yaml.safe_load(f)
    raw["amd"]["compile"]["targets"].append(FAKE)
    path = tmp_path / "thresholds.yaml"
    path.write_text(yaml.safe_dump(raw))
    side = str(tmp_path / "side.json")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", WITH_FAKE_FACTS, "--thresholds", str(path),
                           "--emit-json", side, "--variants", "qblock", "--scenarios", SCENARIO,
                           "--targets", "gfx942,gfx9999", "--quiet", "--cache-dir", str(tmp_path / "cache")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = gate.read_doc(side)
    [(name, why)] = doc["cannot_compile"].items()
    assert name == "gfx9999" and why == "RuntimeError: unsupported target: 'gfx9999'", why
    line = f"target gfx9999: Triton {doc['triton']} cannot compile for it: {why}"
    assert line in done.stdout  # --emit-json alone prints it under the summary
    # nothing was planned for it; gfx942 was compiled as usual
    assert {e["target"] for e in doc["entries"]} == {"gfx942"}
    assert all(e["status"] == "ok" for e in doc["entries"])

    # the gate's outputs, as `python -m perf compile` writes them from the two side documents
    thresholds = parse_thresholds(raw, str(path))
    findings = gate.compare(doc, doc, thresholds)
    [f] = [f for f in findings if f.target == "gfx9999"]
    assert f.verdict is Verdict.WARN and f.note == line  # target_not_compilable: warn
    assert all(f.verdict is Verdict.OK for f in findings if f.target != "gfx9999")
    notes = gate._notes("b" * 40, "main", False, doc, doc, 1.0)
    assert any(n.startswith(line) for n in notes)
    markdown = report.markdown(findings, doc, notes)
    assert "**pass with warnings**" in markdown and markdown.count(line) == 2  # the finding and the note
    report.terminal(findings, doc, notes[0], notes[1:], ["out/report.md"])
    shown = capsys.readouterr().out
    assert f"WARN gfx9999 * * compiles: – -> –; {line}" in shown
    assert "static gate: pass with warnings" in shown
    results = str(tmp_path / "static.jsonl")
    report.write_results(results, doc, ROOT)
    with open(results) as f:
        skips = [json.loads(r) for r in f if '"kind": "error"' in r]
    assert {(r["variant"], r["scenario"], r["reason"]) for r in skips} == {
        (v, "*", line) for v in doc["variants"]}


PRECOMPILE_CHECK = r'''
import os, sys, triton
from triton import knobs
from triton.compiler import ASTSource
from perf import scenarios
from perf.static import build, plan
from perf.thresholds import load_thresholds

cache = sys.argv[1]
(target,) = plan.load_targets(load_thresholds("thresholds.yaml"), only="sm_90")
scenario = scenarios.select(scenarios.suite("smoke"), "tiny/decode*")
_, jobs = plan.plan_side(["naive"], scenario, [target], named=True)
results = build.precompile(jobs, cache, workers=1, quiet=True)
assert results and all(r["status"] == "ok" for r in results.values()), results
kept = {name.rsplit(".", 1)[-1] for _, _, names in os.walk(cache) for name in names}
assert kept <= {"cubin", "json", "source"}, kept  # binaries, metadata, the kernel source; no IR
# moved elsewhere, as the GPU job's download puts it, and pointed at its new folder (Triton's
# groups name their files by absolute path)
import shutil
sys.path.insert(0, "tests")
import triton_compiles
moved = cache + "-moved"
shutil.move(cache, moved)
assert triton_compiles.relocate(moved) == len(jobs)
# the JIT's own lookup, as a launch on the GPU makes it: every job a cache hit, nothing compiled
hits = []
knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
os.environ["TRITON_CACHE_DIR"] = moved
for job in jobs:
    kernel = getattr(__import__(job.module, fromlist=[job.qualname]), job.qualname)
    src = ASTSource(kernel, job.signature, job.constexprs, job.attrs)
    triton.compile(src, target=job.target.gpu_target(), options=job.options)
assert hits == [True] * len(jobs), hits
print("precompiled", len(jobs))
'''


def test_precompiled_binaries_are_what_the_jit_looks_up(tmp_path):
    """`build.precompile` on a CPU fills a Triton cache (cubin and metadata only) under the very
    keys a launch computes: moved to another folder and relocated (tests/triton_compiles.py), then
    looked up again as the JIT does, every job is a hit. (The GPU job's
    grid uses such a cache; that the GPU's launcher binds what `plan.bind` binds is
    tests/kernels/test_planning.py's.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    done = subprocess.run([sys.executable, "-c", PRECOMPILE_CHECK, str(tmp_path / "cache")], cwd=ROOT,
                          env=dict(env, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("precompiled "), done.stdout
