"""One measuring process of the gate, end to end in Triton's interpreter (no GPU).

Both sides are this checkout loaded twice (an A/A): the worker must write paired records
(one per side, round and case), alternate which side goes first in a balanced way, tag each
record with its process, and end with the `done` protocol line. About 15 s on a CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from interpreter_support import CPU_ONLY, needs_interpreter

from perf import results
from perf.checkout import ROOT
from perf.latency import analysis, worker
from perf.latency.worker import PROTOCOL

pytestmark = pytest.mark.slow  # starts processes



@needs_interpreter
def test_worker_pairs_both_sides_in_one_process(tmp_path):
    cmd = [sys.executable, "-m", "perf.latency.worker", "--base-from", ROOT, "--head-from", ROOT,
           "--out-dir", str(tmp_path), "--first-repeat", "20", "--suite", "smoke", "--scenarios",
           "tiny_bs16_b1_s16_d100", "--variants", "flex_tile,nonexistent", "--metrics", "eager,graph",
           "--repeats", "4", "--samples", "1", "--seed", "3", "--header", json.dumps({"gate": {"x": 1}}),
           "--kernel-times"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **CPU_ONLY, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    events = [json.loads(x[len(PROTOCOL):]) for x in out.stdout.splitlines() if x.startswith(PROTOCOL)]
    assert events[0]["event"] == "ready" and events[-1]["event"] == "done" and events[-1]["pairs"] == 4
    base, head = (results.load(str(tmp_path / f"{s}.jsonl")) for s in ("base", "head"))
    assert base.header["side"] == "base" and head.header["gate"] == {"x": 1}
    recs = {s: [r for r in res.measurements()] for s, res in (("base", base), ("head", head))}
    assert all(r["metric"] == "eager" and r["process"] == events[-1]["process"] for r in recs["head"])
    assert sorted(r["repeat"] for r in recs["head"]) == [20, 21, 22, 23]  # numbered from --first-repeat
    # each round: base and head once, in positions 0 and 1; base first in half of the rounds
    first = Counter(r["position"] for r in recs["base"])
    assert first == Counter({0: 2, 1: 2})
    order = worker.side_order(4, 3)
    for r in recs["head"]:
        assert order[r["repeat"] - 20][r["position"]] == "head"
    (case,) = analysis.pairs(base, head).values()
    assert case.processes == 1 and len(case.groups()[0]) == 4
    # a re-measure's profile: the interpreter runs no kernel on a device, and the last round says so
    for s in ("base", "head"):
        profiled = {r["repeat"]: r["kernel_times"] for r in recs[s] if "kernel_times" in r}
        assert profiled == {23: {"skipped": "Triton's interpreter runs no kernel on a device: no device time "
                                            "per kernel"}}, profiled
    # the missing variant is recorded on both sides, not dropped
    assert {s["variant"] for s in base.skips()} == {"nonexistent"} == {s["variant"] for s in head.skips()}


@needs_interpreter
def test_a_re_measure_records_each_sides_kernel_times_after_its_rounds(tmp_path, monkeypatch, capsys):
    """In this process, with a fake profiler: it gets both sides' timed callables once per case,
    after that case's last timed round, and each side's last record carries its side's times."""
    from perf import why

    events = []
    real_record = results.ResultsWriter.record

    def record(self, **kw):
        events.append(("record", self.path.rsplit("/", 1)[-1], kw["repeat"]))
        real_record(self, **kw)

    def fake(calls):
        assert set(calls) == {"base", "head"}
        for fn in calls.values():
            fn()  # the very callables timed: they run
        events.append(("profile",))
        return {"tool": "fake", "note": "a fake profiler", "rounds": 1,
                "times": {"base": {"q_block_kernel": 1.0}, "head": {"q_block_kernel": 2.0}}}

    monkeypatch.setattr(results.ResultsWriter, "record", record)
    monkeypatch.setattr(why, "kernel_times", fake)
    monkeypatch.setenv("PAGED_ATTENTION_CHECK_VALUES", "0")
    assert worker.main(["--base-from", ROOT, "--head-from", ROOT, "--out-dir", str(tmp_path), "--suite",
                        "smoke", "--scenarios", "tiny_bs16_b1_s16_d100", "--variants", "flex_tile",
                        "--metrics", "eager", "--repeats", "2", "--samples", "1", "--kernel-times"]) == 0
    # profiled once, after the rounds (the last round's records held until then)
    assert events.index(("profile",)) == 2 and events.count(("profile",)) == 1
    assert sorted(events[3:]) == [("record", "base.jsonl", 1), ("record", "head.jsonl", 1)]
    for s, us in (("base", 1.0), ("head", 2.0)):
        recs = results.load(str(tmp_path / f"{s}.jsonl")).measurements()
        assert [r.get("kernel_times") for r in sorted(recs, key=lambda r: r["repeat"])] == [
            None, {"tool": "fake", "note": "a fake profiler", "rounds": 1, "us": {"q_block_kernel": us}}]
    case = ("flex_tile", recs[0]["scenario"])
    assert why.recorded_kernel_times(str(tmp_path), [case])[case]["times"] == {
        "base": {"q_block_kernel": 1.0}, "head": {"q_block_kernel": 2.0}}


@needs_interpreter
def test_compile_only_prepares_the_keyed_cases_on_both_sides_and_records_nothing(tmp_path, monkeypatch,
                                                                                 capsys):
    """The gate's compile-ahead process: every keyed case made (compiled, checked) on each side,
    the variants outside the keys not even prepared, no results file written, `done` at the end."""
    from perf.measure import rounds

    made = []
    real = rounds.make_case

    def make_case(kernels, name, scenario, *a, **k):
        made.append((name, scenario.name))
        return real(kernels, name, scenario, *a, **k)

    monkeypatch.setattr(rounds, "make_case", make_case)  # each side is a perf.measure.rounds.Side
    monkeypatch.setenv("PAGED_ATTENTION_CHECK_VALUES", "0")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([["flex_tile", "tiny/decode/batch1-kv16/block16", "eager"]]))
    assert worker.main(["--base-from", ROOT, "--head-from", ROOT, "--out-dir", str(tmp_path), "--suite",
                        "smoke", "--variants", "flex_tile,naive", "--metrics", "eager", "--repeats", "2",
                        "--samples", "1", "--keys", str(keys), "--compile-only"]) == 0
    assert made == [("flex_tile", "tiny/decode/batch1-kv16/block16")] * 2  # base, then head
    assert not (tmp_path / "base.jsonl").exists() and not (tmp_path / "head.jsonl").exists()
    events = [json.loads(x[len(PROTOCOL):]) for x in capsys.readouterr().out.splitlines()
              if x.startswith(PROTOCOL)]
    assert events[-1]["event"] == "done" and events[-1]["pairs"] == 0


def test_compile_ahead_deals_every_key_once_within_cpus_and_memory(tmp_path, monkeypatch):
    """The gate's compile-ahead: each case to time goes to exactly one process, the heaviest
    scenarios first, no more processes than CPUs, the cap and free memory allow; a process that
    crashes costs only its head start (the line says so)."""
    import torch

    from perf.latency import ab

    ran = []

    def fake_run(cmd, log, label, reporter, *a):
        keys = json.loads(open(cmd[cmd.index("--keys") + 1]).read())
        assert "--compile-only" in cmd
        ran.append(keys)
        if len(ran) == 2:
            raise ab.GateCrash(f"{label} exited with code 1")
        return {"event": "done"}

    monkeypatch.setattr(ab, "run_process", fake_run)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    settings = ab.Settings("pr", None, None, "eager,graph", processes=3, repeats=2, samples=1, budget_ms=1.0)
    cases = [(v, s) for s in ("a", "b", "c", "d", "e") for v in ("x", "y")]
    footprints = {"a": 1, "b": 5 * 2**30, "c": 2, "d": 3, "e": 4}
    roots = {"base": ROOT, "head": ROOT}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (80 * 2**30, 80 * 2**30), raising=False)
    line = ab.compile_ahead(settings, roots, str(tmp_path), cases, None, footprints, None)
    assert len(ran) == 3 and "5 scenarios in 3 parallel processes" in line and "1 failed" in line
    dealt = sorted(tuple(k) for keys in ran for k in keys)
    assert dealt == sorted((v, s, m) for v, s in cases for m in ("eager", "graph"))  # each once
    first = json.loads((tmp_path / "compile-ahead-0.json").read_text())
    assert any(k[1] == "b" for k in first)  # the heaviest scenario is dealt first
    # too little memory for two processes: none start, the timed processes compile as before
    ran.clear()
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (20 * 2**30, 80 * 2**30), raising=False)
    keys = {("x", "a", "eager"), ("y", "b", "graph")}
    line = ab.compile_ahead(settings, roots, str(tmp_path), cases, keys, footprints, None)
    assert ran == [] and line.startswith("no compile-ahead")


def test_a_job_round_trips_through_the_workers_parser():
    """`Job.argv` is the worker's command line, `_parser` reads it back: one place writes the flags."""
    import dataclasses

    job = worker.Job(base_from="/b", head_from="/h", out_dir="/o", suite="smoke", repeats=3, samples=2,
                     first_repeat=6, scenarios="tiny/*", variants="naive", metrics="eager", budget_ms=2.5,
                     warmup=1, seed=4, batch_cache="/c", keys="/k.json", header={"gate": {"base": "a"}},
                     kernel_times=True, compile_only=True, side="head")
    argv = job.argv()
    assert argv[:3] == [sys.executable, "-m", "perf.latency.worker"]
    assert worker.Job.from_args(worker._parser().parse_args(argv[3:])) == job
    least = dataclasses.replace(job, budget_ms=None, batch_cache=None, keys=None, header={},
                                kernel_times=False, compile_only=False, side=None)
    assert worker.Job.from_args(worker._parser().parse_args(least.argv()[3:])) == least
