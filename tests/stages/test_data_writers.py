"""The writers of measured data: one locked writer per output, no resume across commits or
kernel trees, measured data never replaced by another machine's without --force, outputs
checked before any work and only written files named, and no run that can measure nothing.

Commands run in-process (`perf.cli.main`, Triton's interpreter on a CPU); the other writer of
the concurrency tests is a thread or a second Python process holding the same output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from interpreter_support import needs_interpreter
from throwaway_repo import git, harness_repo

from perf import cli, files, results
from perf.errors import ConfigError, NothingMeasured
from perf.latency import ab
from perf.measure.timing import Samples
from perf.verdicts import Finding, Verdict

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
TINY = "tiny/decode/batch1-kv16/block16"
WINDOW = "tiny/prefill/batch2-kv24-var-chunk4/block16/window8"  # naive lacks the sliding window
HEADER = {"environment": {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "interpreter": False,
                          "commit": "a" * 40}, "suite": "pr", "samples": 5}


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    _, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if line.strip()]


def one_line(code: int, err: list[str], *needles: str) -> str:
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), (code, err)
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


def _record(w: results.ResultsWriter, variant: str, repeat: int) -> None:
    w.record(variant=variant, scenario="s", metric="eager", repeat=repeat, samples=Samples((0.1,)), config=[],
             digest="d")


# --- one writer per output ----------------------------------------------------------------------

def test_two_writers_in_threads_one_wins_the_file_stays_whole(tmp_path):
    path = str(tmp_path / "r.jsonl")
    start, tried = threading.Barrier(2), threading.Barrier(2, timeout=30)
    outcome: dict[str, str] = {}

    def writer(name: str) -> None:
        start.wait()
        try:
            w = results.ResultsWriter(path, HEADER)
        except ConfigError as e:
            outcome[name] = f"refused: {e}"
            tried.wait()
            return
        outcome[name] = "won"
        tried.wait()  # the other has tried while this one holds the file
        with w:
            for r in range(20):
                _record(w, name, r)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(v.split(":")[0] for v in outcome.values()) == ["refused", "won"], outcome
    winner = next(n for n, v in outcome.items() if v == "won")
    refused = next(v for v in outcome.values() if v != "won")
    assert "r.jsonl: being written by pid" in refused and "write to another path" in refused
    res = results.load(path)
    assert [r["variant"] for r in res.measurements()] == [winner] * 20
    assert Path(path).read_bytes().endswith(b"\n")


HOLDER = """
import sys
from perf import results
from perf.measure.timing import Samples
w = results.ResultsWriter(sys.argv[1], {"environment": {"vendor": "cpu", "commit": None}, "suite": "smoke"})
print("holding", flush=True)
sys.stdin.readline()
for r in range(5):
    w.record(variant="held", scenario="s", metric="eager", repeat=r, samples=Samples((0.1,)), config=[],
             digest="d")
w.close()
"""


@needs_interpreter
def test_a_second_run_into_a_file_another_process_writes_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "holding"
        line = one_line(*run_cli(["run", "--suite", "smoke", "--variants", "naive", "--scenarios", TINY,
                                  "--metrics", "eager", "--out", str(path)], capsys),
                        "r.jsonl: being written by", f"pid {holder.pid}")
        assert "wait for it to end" in line
        holder.stdin.write("\n")
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    res = results.load(str(path))  # nothing lost, no fragment: the holder's lines only
    assert [r["repeat"] for r in res.measurements()] == list(range(5)) and res.truncated is None


def test_a_refusal_names_a_holder_that_has_locked_but_not_yet_signed(tmp_path):
    """The holder writes its name just after taking the lock; a refusal in between waits for
    the name instead of calling the holder anonymous (a CI run caught that window)."""
    import fcntl
    path = str(tmp_path / "r.jsonl")
    lp = files.lock_path(path)
    os.makedirs(os.path.dirname(lp), exist_ok=True)
    with open(lp, "w", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        signer = threading.Timer(0.3, lambda: (held.write("pid 4242 since 12:00:00"), held.flush()))
        signer.start()
        with pytest.raises(ConfigError, match="being written by pid 4242"), files.lock(path):
            pass
        signer.join()


def test_the_gpu_lock_names_its_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(ab.tempfile, "gettempdir", lambda: str(tmp_path))
    with ab.gpu_lock("gpu0"):
        with pytest.raises(ConfigError, match="GPU gpu0 is locked by pid .*; wait for that run to end or "
                                              "pass --lock-timeout"):
            with ab.gpu_lock("gpu0"):
                pass
    with ab.gpu_lock("gpu0"):  # released
        pass


# --- no resume across commits or kernel trees ---------------------------------------------------

def test_resume_is_refused_across_a_commit_and_a_kernel_tree(tmp_path):
    repo = harness_repo(tmp_path / "repo")
    header = lambda: {"environment": results.environment(str(repo)), "suite": "smoke"}  # noqa: E731
    path = str(tmp_path / "r.jsonl")
    first = header()
    with results.ResultsWriter(path, first, resume=False) as w:
        _record(w, "v", 0)
    assert results.load(path).measurements()[0]["commit"] == first["environment"]["commit"]
    with results.ResultsWriter(path, header()) as w:  # the same checkout resumes
        _record(w, "v", 1)
    (repo / "NOTES.md").write_text("another commit\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "another")
    second = header()
    with pytest.raises(ConfigError, match=f"written at commit {first['environment']['commit'][:10]}, this "
                                          f"checkout is {second['environment']['commit'][:10]}; write to a "
                                          f"new --out or pass --no-resume"):
        results.ResultsWriter(path, second)
    with results.ResultsWriter(path, second, resume=False) as w:  # --no-resume starts over, same machine
        _record(w, "v", 0)
    init = repo / "kernels" / "__init__.py"
    init.write_text(init.read_text() + "\n# an uncommitted change\n")
    dirty = header()
    assert dirty["environment"]["dirty"] and dirty["environment"]["kernels_tree"]
    with pytest.raises(ConfigError, match="kernels/ as digest"):
        results.ResultsWriter(path, dirty)  # written clean, resumed dirty: another kernel tree
    with results.ResultsWriter(path, dirty, resume=False) as w:
        _record(w, "v", 0)
    assert results.load(path).measurements()[0]["kernels_tree"] == dirty["environment"]["kernels_tree"]
    init.write_text(init.read_text() + "# and another one\n")
    with pytest.raises(ConfigError, match="uncommitted changes differ"):
        results.ResultsWriter(path, header())


@needs_interpreter
def test_run_refuses_to_resume_a_file_of_another_commit(tmp_path, capsys):
    env = {**results.environment(str(ROOT)), "commit": "0" * 40}
    path = tmp_path / "r.jsonl"
    with results.ResultsWriter(str(path), {"environment": env, "suite": "smoke", "metrics": ["eager"],
                                           "samples": 1}, resume=False):
        pass
    one_line(*run_cli(["run", "--suite", "smoke", "--variants", "naive", "--scenarios", TINY, "--metrics",
                       "eager", "--repeats", "1", "--samples", "1", "--out", str(path)], capsys),
             "written at commit 0000000000", "--no-resume")


def test_a_gate_resumes_only_its_own_commits(tmp_path):
    """The ledger's identity holds both commits and the head's kernel tree: another commit, or
    other uncommitted kernels, starts over instead of mixing two codes' processes."""
    from argparse import Namespace

    args = Namespace(allow_dirty=True, suite="smoke", variants=None, scenarios=None, metrics="eager",
                     processes=2, repeats=2, samples=3, seed=0, toolchain=None)
    machine = {"vendor": "cpu", "gpu": "Triton interpreter", "interpreter": True}
    repo = harness_repo(tmp_path / "repo")
    a = ab._identity(str(repo), args, "b" * 40, "h" * 40, machine)
    assert a["base"] == "b" * 40 and a["head"] == "h" * 40 and a["machine"] == machine
    init = repo / "kernels" / "__init__.py"
    init.write_text(init.read_text() + "# dirty\n")
    dirty = ab._identity(str(repo), args, "b" * 40, "h" * 40, machine)
    assert dirty != a
    (repo / "kernels" / "new_untracked.py").write_text("x = 1\n")  # git diff HEAD misses it; the digest not
    untracked = ab._identity(str(repo), args, "b" * 40, "h" * 40, machine)
    assert untracked["head_diff"] == dirty["head_diff"] and untracked["head_kernels"] != dirty["head_kernels"]
    other_gpu = ab._identity(str(repo), args, "b" * 40, "h" * 40, {**machine, "interpreter": False})
    assert other_gpu != untracked


# --- measured data never replaced by another machine's without --force --------------------------

def test_another_machines_results_are_replaced_only_with_force(tmp_path):
    path = str(tmp_path / "r.jsonl")
    with results.ResultsWriter(path, HEADER) as w:
        _record(w, "h100", 0)
    interp = {**HEADER, "environment": {**HEADER["environment"], "interpreter": True,
                                        "gpu": "Triton interpreter", "vendor": "cpu"}}
    with pytest.raises(ConfigError, match="holds data measured with vendor 'nvidia'.*pass --force"):
        results.ResultsWriter(path, interp, resume=False)
    with pytest.raises(ConfigError, match="environment.vendor is 'nvidia', this machine has 'cpu'"):
        results.ResultsWriter(path, interp)  # resuming it: never, force or not
    assert [r["variant"] for r in results.load(path).measurements()] == ["h100"]
    interp_only = {**HEADER, "environment": {**HEADER["environment"], "interpreter": True}}
    with pytest.raises(ConfigError, match="interpreter"):  # the interpreter alone is another machine
        results.ResultsWriter(path, interp_only)
    with results.ResultsWriter(path, interp, resume=False, force=True) as w:
        _record(w, "cpu", 0)
    assert [r["variant"] for r in results.load(path).measurements()] == ["cpu"]
    static = {"environment": {**HEADER["environment"], "gate": "static"}}  # compile metrics: no machine's
    with results.ResultsWriter(path, static, resume=False) as w:
        _record(w, "static", 0)


@needs_interpreter
def test_run_no_resume_over_another_gpus_file_needs_force(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    with results.ResultsWriter(str(path), {**HEADER, "suite": "smoke"}) as w:
        _record(w, "h100", 0)
    argv = ["run", "--suite", "smoke", "--variants", "flex_tile", "--scenarios", TINY, "--metrics", "eager",
            "--repeats", "1", "--samples", "1", "--out", str(path), "--no-resume"]
    one_line(*run_cli(argv, capsys), "vendor 'nvidia'", "--force")
    assert run_cli([*argv, "--force"], capsys)[0] == 0
    assert {r["variant"] for r in results.load(str(path)).measurements()} == {"flex_tile"}


# --- outputs: checked before any work, written whole, only written ones named ------------------

@pytest.mark.parametrize("argv, needle", [
    (lambda t: ["run", "--suite", "smoke", "--out", str(t)], "--out"),
    (lambda t: ["run", "--suite", "smoke", "--out", "/proc/perf-nope/r.jsonl"], "not writable"),
    (lambda t: ["run", "--suite", "smoke", "--out", str(t / "f" / "r.jsonl")], "is a file, not a directory"),
    (lambda t: ["table", str(t / "r.jsonl"), "--out", str(t)], "--out"),
    (lambda t: ["compare", str(t / "r.jsonl"), str(t / "r.jsonl"), "--out", str(t / "f")], "--out"),
    (lambda t: ["report", str(t / "nope.json"), "--plot", str(t)], "--plot"),
    (lambda t: ["host-cost", "--out", str(t)], "--out"),
    (lambda t: ["host-cost", "--md", str(t / "f" / "x.md")], "--md"),
    (lambda t: ["alert", "--out", str(t / "f")], "--out"),
    (lambda t: ["nightly", "report", "--out", str(t / "f")], "--out"),
    (lambda t: ["bisect", "HEAD~1", "HEAD", "--scenario", TINY, "--metric", "eager", "--out", str(t / "f")],
     "--out"),
])
def test_an_unwritable_output_is_refused_before_any_work(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(ROOT)
    (tmp_path / "f").write_text("a file")
    with results.ResultsWriter(str(tmp_path / "r.jsonl"), HEADER) as w:
        _record(w, "v", 0)
    one_line(*run_cli(argv(tmp_path), capsys), needle)


def _finding(ratio: float | None) -> Finding:
    note = "" if ratio else "skipped on both sides: x"
    head = ratio and 0.1 * ratio
    return Finding("latency", "nvidia", "GPU", "qblock", "s", "graph", 0.1, head, ratio, None, None, None,
                   "warn > 1.03, fail > 1.05", Verdict.OK, note)


def test_the_gate_names_only_the_files_it_wrote(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = str(tmp_path)
    assert ab._finish(out, [_finding(1.0)], "t", [], {}, {}, publish_report=False) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"artifacts in {out}: findings.json, report.md, ratios.png"
    with pytest.raises(NothingMeasured, match=f"the report says per case why: {out}/report.md"):
        ab._finish(out, [_finding(None)], "t", [], {}, {}, publish_report=False)
    assert "ratios.png" not in capsys.readouterr().err
    assert not (tmp_path / "ratios.png").exists()  # the earlier plot is not left to pass for this one
    assert json.loads((tmp_path / "findings.json").read_text())["findings"][0]["ratio"] is None
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["findings.json",
                                                                                       "report.md"]


def test_an_unwritable_job_summary_is_said_not_fatal(tmp_path, monkeypatch, capsys):
    from perf.ci import gpu_job
    from perf.report import publish

    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a directory: appending fails
    publish("## report")
    gpu_job.summary("runner")
    out, err = capsys.readouterr()
    assert "## report" in out and err.count("warning: $GITHUB_STEP_SUMMARY") == 2


def test_outputs_are_written_whole_under_their_lock(tmp_path):
    from perf.nightly import alert

    with files.lock(str(tmp_path / "alert.json")):
        with pytest.raises(ConfigError, match="alert.json: being written by"):
            alert.write(str(tmp_path), [])
    json_path, md_path = alert.write(str(tmp_path), [])
    assert json.loads(Path(json_path).read_text()) == {"alert": False, "machines": []}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# --- no run that can measure nothing -------------------------------------------------------------

@needs_interpreter
def test_a_run_that_can_measure_nothing_never_starts_and_one_that_did_is_not_a_pass(tmp_path, capsys,
                                                                                    monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "r.jsonl"
    one_line(*run_cli(["run", "--suite", "smoke", "--metrics", "graph", "--out", str(out)], capsys),
             "nothing was measured", "--metrics graph", "needs a GPU")
    assert not out.exists()  # refused before anything was written
    one_line(*run_cli(["gate", "--suite", "smoke", "--metrics", "graph", "--base-ref", "HEAD", "--out",
                       str(tmp_path / "ab")], capsys), "nothing was measured", "graph replay needs a GPU")
    one_line(*run_cli(["run", "--suite", "smoke", "--variants", "naive", "--scenarios", WINDOW, "--metrics",
                       "eager", "--repeats", "1", "--samples", "1", "--out", str(out)], capsys),
             "nothing was measured", "every case was skipped or failed")
    res = results.load(str(out))
    assert not res.measurements() and "sliding_window" in res.skips()[0]["reason"]
    one_line(*run_cli(["table", str(out)], capsys), "nothing was measured")
    (tmp_path / "st").mkdir()
    one_line(*run_cli(["selftest", "--summarize", "--out", str(tmp_path / "st")], capsys),
             "nothing was measured", "no gate run")


def test_compare_against_a_head_without_records_is_nothing_measured(tmp_path, capsys):
    base, head = str(tmp_path / "b.jsonl"), str(tmp_path / "h.jsonl")
    with results.ResultsWriter(base, HEADER) as w:
        _record(w, "v", 0)
    with results.ResultsWriter(head, HEADER) as w:
        w.skip(variant="v", scenario="s", reason="broke", kind="skip")
    one_line(*run_cli(["compare", base, head, "--out", str(tmp_path / "cmp")], capsys),
             "nothing was measured", "(1 not measured on head);")
    assert "**nothing measured**" in (tmp_path / "cmp" / "report.md").read_text()
