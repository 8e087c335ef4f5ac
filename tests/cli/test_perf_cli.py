"""`python -m perf` end to end on CPU: bad input exits 2 with one line; a tiny A/A A/B passes.

The A/B runs in a throwaway git repository holding a copy of kernels/, perf/ and
thresholds.yaml: base and head are the same commit, measured by two worker processes in
Triton's interpreter (`--suite smoke`, one scenario, one variant: about ten seconds).
Wall-clock numbers of the interpreter mean nothing; the test checks the machinery
(worktree, interleaved rounds, results, findings, report), not the latency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from interpreter_support import CPU_ONLY, needs_interpreter
from throwaway_repo import harness_repo

from perf import results, scenarios
from perf.errors import ConfigError, context_lost

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# These tests exercise the CPU path (interpreter, no GPU: CPU_ONLY) on every machine, GPU runners too.

def _perf(*args: str, cwd: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, **CPU_ONLY, **(env or {}), PYTHONPATH=cwd)
    return subprocess.run([sys.executable, "-m", "perf", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return harness_repo(tmp_path_factory.mktemp("repo"))


def _one_line_exit_2(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], lines[0]


def test_gate_without_gpu_exits_2_or_0_when_allowed(repo):
    _one_line_exit_2(_perf("gate", "--suite", "pr", cwd=str(repo)), "no GPU", "GPU machine")
    out = _perf("gate", "--no-gpu-ok", cwd=str(repo))  # the default suite: pr
    assert out.returncode == 0, out.stderr
    assert "latency gate: skipped" in out.stdout and "latency needs a GPU" in out.stdout
    # it says what it checked (one run for both: the command costs a torch import)
    assert f"checked: suite pr ({len(scenarios.suite('pr'))} scenarios), 5 variants" in out.stdout


def test_missing_base_ref(repo):
    _one_line_exit_2(_perf("gate", "--suite", "smoke", "--base-ref", "no-such-branch", cwd=str(repo)),
                     "--base-ref no-such-branch", "git fetch")


def test_dirty_worktree(repo):
    target = repo / "kernels" / "__init__.py"
    original = target.read_text()
    target.write_text(original + "\n# local edit\n")
    try:
        _one_line_exit_2(_perf("gate", "--suite", "smoke", "--base-ref", "HEAD", cwd=str(repo)),
                         "uncommitted changes", "kernels/__init__.py", "--allow-dirty")
    finally:
        target.write_text(original)


def test_unknown_vendor_and_malformed_thresholds(repo, tmp_path):
    _one_line_exit_2(_perf("gate", "--suite", "smoke", "--vendor", "intel", cwd=str(repo)),
                     "--vendor intel", "nvidia, amd")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nvidia:\n  latency: {warn: 1.03}\n")
    _one_line_exit_2(_perf("gate", "--thresholds", str(bad), cwd=str(repo)), str(bad), "nvidia", "statistics")


def test_registered_commands_dispatch_lazily(monkeypatch, capsys):
    from perf import cli

    ghost = cli.Command("perf.ghost_module", "a command whose module is missing")
    monkeypatch.setitem(cli.COMMANDS, "ghost", ghost)
    assert cli.main(["ghost"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "perf/ghost_module.py" in err
    # a present module gets --thresholds and its own arguments, and its exit code is returned
    monkeypatch.setitem(cli.COMMANDS, "echo", cli.Command("tests.cli.test_perf_cli", "test double"))
    assert cli.main(["echo", "--thresholds", "x.yaml", "--value", "7"]) == 7
    assert cli.main(["echo", "--thresholds", "x.yaml", "--value", "seven"]) == 2  # argparse: one line too
    assert capsys.readouterr().err.count("\n") == 1


def add_arguments(parser):  # the module interface of `python -m perf <external command>`
    parser.add_argument("--value", type=int, default=0)


def main(args):
    assert args.thresholds == "x.yaml" and args.command == "echo"
    return args.value


def test_compare_refuses_interpreter_results_without_vendor(repo, tmp_path):
    from perf import results

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for p in (a, b):
        with results.ResultsWriter(str(p), {"environment": {"vendor": "cpu", "gpu": "Triton interpreter"}}):
            pass
    _one_line_exit_2(_perf("compare", str(a), str(b), cwd=str(repo)), "--vendor")


def _results_file(path, **header):
    from perf import results

    env = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", **header.pop("environment", {})}
    with results.ResultsWriter(str(path), {"environment": env, **header}, resume=False):
        pass
    return str(path)


def test_compare_refuses_the_same_file_other_suites_and_other_gates(repo, tmp_path):
    a = _results_file(tmp_path / "a.jsonl", suite="pr", samples=25)
    _one_line_exit_2(_perf("compare", a, a, cwd=str(repo)), "a.jsonl", "the same file")
    b = _results_file(tmp_path / "b.jsonl", suite="nightly", samples=25)
    _one_line_exit_2(_perf("compare", a, b, cwd=str(repo)), "b.jsonl", "suite", "nightly")
    c = _results_file(tmp_path / "c.jsonl", suite="pr", samples=10)
    _one_line_exit_2(_perf("compare", a, c, cwd=str(repo)), "c.jsonl", "samples")
    s = _results_file(tmp_path / "s.jsonl", suite="pr", samples=25, environment={"gate": "static"})
    _one_line_exit_2(_perf("compare", a, s, cwd=str(repo)), "s.jsonl", "static", "latency")


def test_resume_refuses_other_settings_and_reports_a_truncated_record(tmp_path, capsys):
    from perf import results

    env = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3"}
    path = tmp_path / "r.jsonl"
    with results.ResultsWriter(str(path), {"environment": env, "suite": "pr", "samples": 25}) as w:
        w.skip(variant="q", scenario="s", reason="why")
    with open(path, "a") as f:
        f.write('{"kind": "record", "variant": "q", "scen')  # a line cut short by a kill
    assert results.load(str(path)).truncated.startswith('{"kind": "record"')
    with pytest.raises(ConfigError, match="suite is 'pr', this run's is 'nightly'"):
        results.ResultsWriter(str(path), {"environment": env, "suite": "nightly", "samples": 25})
    with results.ResultsWriter(str(path), {"environment": env, "suite": "pr", "samples": 25}) as w:
        w.skip(variant="q", scenario="t", reason="why")
    assert "cut short by an interrupted run" in capsys.readouterr().out
    again = results.load(str(path))
    assert again.truncated is None and [r["scenario"] for r in again.skips()] == ["s", "t"]


@needs_interpreter
def test_run_writes_incrementally_and_resumes(repo, tmp_path):
    out = tmp_path / "run.jsonl"
    args = ("run", "--suite", "smoke", "--variants", "flex_tile,naive", "--scenarios",
            "tiny/prefill/batch2-kv24*", "--repeats", "2", "--samples", "2", "--out", str(out))
    first = _perf(*args, cwd=str(repo))
    assert first.returncode == 0, first.stderr[-2000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["environment"]["vendor"] == "cpu"
    records = [r for r in lines if r["kind"] == "record"]
    assert sorted((r["variant"], r["repeat"]) for r in records) == [("flex_tile", 0), ("flex_tile", 1)]
    assert records[0]["config"] and records[0]["config"][0]["kernel"] and records[0]["batch_digest"]
    assert len(records[0]["samples"]) == 2 and records[0]["p20"] <= records[0]["median"] <= records[0]["p80"]
    (skip,) = [r for r in lines if r["kind"] == "skip"]  # naive lacks the sliding window: said, not dropped
    assert skip["variant"] == "naive" and "sliding_window" in skip["reason"]
    again = _perf(*args, cwd=str(repo))  # everything is done: resuming measures nothing new
    assert again.returncode == 0
    kinds = [json.loads(x)["kind"] for x in out.read_text().splitlines()]
    assert kinds.count("record") == 2 and kinds.count("skip") == 1


@needs_interpreter
def test_run_stops_at_a_fault_that_loses_the_gpu_context(tmp_path, monkeypatch, capsys):
    """After an illegal memory access every later call in the process fails too: `perf run`
    records the fault, keeps what finished and stops in one line, exit 1, instead of recording
    the same error for every case after it (an H100 nightly run did, 2026-11-24)."""
    from perf import peers
    from perf.cli import main

    def setup(batch, device):
        def fault():
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return fault, "faults"

    monkeypatch.setitem(peers.PEERS, "faulty", peers.Peer("faulty", "faults (stand-in)", "torch", setup))
    out = tmp_path / "run.jsonl"
    code = main(["run", "--suite", "smoke", "--variants", "naive", "--peers", "faulty", "--repeats", "1",
                 "--samples", "1", "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "peer:faulty on tiny/mixed50/batch2-kv16/block16 faulted the GPU" in err
    res = results.load(str(out))
    assert [(r["variant"], r["kind"]) for r in res.skips()] == [("peer:faulty", "error")]
    assert not res.measurements()  # the first scenario's round never ran; the other two were not begun
    assert not context_lost("variant 'naive' does not support sliding_window")
    assert context_lost("AcceleratorError: CUDA error: unspecified launch failure")


@needs_interpreter
def test_ab_a_against_a_passes_in_the_interpreter(repo, tmp_path):
    out_dir = tmp_path / "ab"
    out = _perf("gate", "--suite", "smoke", "--variants", "flex_tile", "--scenarios",
                "tiny/decode/batch1-kv16/block16", "--samples", "1", "--repeats", "4", "--base-ref", "HEAD",
                "--head-ref", "HEAD", "--out", str(out_dir), "--lock-timeout", "600",
                "--all-cases", cwd=str(repo))  # an A/A: a change plan would time nothing
    assert out.returncode in (0, 1), out.stderr[-2000:]
    doc = json.loads((out_dir / "findings.json").read_text())
    assert doc["kind"] == "findings" and doc["repeats"] == 4
    assert doc["base"]["commit"] == doc["head"]["commit"] and doc["head"]["ref"] == "HEAD"
    orders = doc["order"]
    assert len(orders) == 4 and all(sorted(o) == ["base", "head"] for o in orders)
    assert len({tuple(o) for o in orders}) == 2  # shuffled, not fixed
    (finding,) = [f for f in doc["findings"] if f["variant"] == "flex_tile"]
    assert finding["scenario"] == "tiny/decode/batch1-kv16/block16" and finding["ratio"] is not None
    for side in ("base", "head"):
        lines = [json.loads(x) for x in (out_dir / f"{side}.jsonl").read_text().splitlines()]
        assert lines[0]["kind"] == "header" and lines[0]["side"] == side
        repeats = sorted(r["repeat"] for r in lines if r["kind"] == "record")
        assert repeats[:4] == list(range(4))
    assert "## Latency A/B on Triton interpreter" in (out_dir / "report.md").read_text()
    assert subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True,
                          text=True).stdout.count("\n") == 1  # the base and head worktrees are gone
    assert json.loads((out_dir / "gate.json").read_text())["complete"] is True
    again = _perf("gate", "--suite", "smoke", "--variants", "flex_tile", "--scenarios",
                  "tiny/decode/batch1-kv16/block16", "--samples", "1", "--repeats", "4", "--base-ref", "HEAD",
                  "--head-ref", "HEAD", "--out", str(out_dir), "--lock-timeout", "600",
                "--all-cases", cwd=str(repo))  # an A/A: a change plan would time nothing
    said = again.stdout + again.stderr
    assert again.returncode == out.returncode, said[-2000:]
    assert "reused from an earlier, complete run" in said and "interrupted" not in said, said[-2000:]


def test_help_lists_suites_and_variants_not_internal_commands():
    out = subprocess.run([sys.executable, "-m", "perf", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0
    assert "suites (perf/suites.yaml): smoke, pr" in out.stdout
    assert "variants (kernels.VARIANTS): naive, qblock" in out.stdout
    assert "worker" not in out.stdout


@pytest.mark.parametrize("args, needles", [
    (("--variants", "nave"), ("--variants nave", "registered: naive")),
    (("--vendor", "intel"), ("--vendor intel", "nvidia, amd")),
    (("--suite", "bogus"), ("no suite 'bogus'",)),
    (("--scenarios", "nothing*"), ("--scenarios 'nothing*' matches no scenario",)),
    (("--base-ref", "nope"), ("--base-ref nope", "no such commit")),
    (("--head-ref", "nope"), ("--head-ref nope", "no such commit")),
    (("--metrics", "graf"), ("--metrics graf", "unknown metric graf")),
    (("--head-ref", "HEAD", "--allow-dirty"), ("--head-ref", "--allow-dirty", "one of them")),
])
def test_gate_without_a_gpu_still_refuses_bad_input(repo, args, needles):
    """`--no-gpu-ok` (what `nox -s perf` passes on a CPU) skips only the measurement."""
    _one_line_exit_2(_perf("gate", "--no-gpu-ok", *args, cwd=str(repo)), *needles)


def test_run_refuses_a_gpu_sized_suite_on_a_cpu(repo, tmp_path):
    _one_line_exit_2(_perf("run", "--out", str(tmp_path / "r.jsonl"), cwd=str(repo)),
                     "--suite pr", "--suite smoke", "--allow-cpu")
