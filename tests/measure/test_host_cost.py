"""`perf host-cost`: the alternation, the paired ratios, the table, resuming (no GPU needed)."""

from __future__ import annotations

import argparse
import itertools
import os

import numpy as np
import pytest
from interpreter_support import needs_interpreter

from kernels.inputs import CHECK_VALUES_ENV
from perf import cli, results
from perf.measure import host_cost
from perf.measure.timing import Samples
from perf.report import paired_verdict

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "vendor": "nvidia", "driver": "580.159.04", "torch": "2.11.0",
       "triton": "3.6.0", "time": "2026-11-24T06:00:00+00:00", "commit": "0123456789", "host": "vm"}
VLLM = "peer:vllm_unified"


def test_alternate_rotates_the_order_and_times_the_call_alone():
    now = [0.0]
    order = []
    cost = {"a": 1e-3, "b": 2e-3, "c": 5e-3}

    def entry(name):
        def call():
            order.append(name)
            now[0] += cost[name]
        return call
    syncs = []

    def sync():
        syncs.append(len(order))
        now[0] += 1.0  # the GPU's time: never in a call's
    times = host_cost.alternate({n: entry(n) for n in cost}, rounds=4, warmup=2, sync=sync,
                                clock=lambda: now[0])
    assert order[:9] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert syncs == [3, 6, 9, 12, 15, 18]  # after every round, warm-up included
    assert {n: len(t) for n, t in times.items()} == {"a": 4, "b": 4, "c": 4}
    for name, t in times.items():
        assert t == pytest.approx([cost[name] * 1e3] * 4)


def test_serving_options_step_the_longest_kv_hint():
    steps = host_cost.serving_options({"max_seqlen_k": 100, "max_seqlen_q": 1})
    assert [next(steps)["max_seqlen_k"] for _ in range(3)] == [100, 101, 102]
    fixed = host_cost.serving_options({"scale": 0.1})
    assert next(fixed) == next(fixed) == {"scale": 0.1}


def _results(tmp_path, ours_over_peer: dict[str, float], processes: int = 4, rounds: int = 60,
             seed: int = 0):
    """Host times of ours and a peer whose speed drifts 2x between processes and 1.5x within
    one (the H100 VM's), ours a planted factor of the peer's per call, with noise."""
    rng = np.random.default_rng(seed)
    path = str(tmp_path / "host.jsonl")
    header = {"suite": "anchor", "metrics": "host", "samples": rounds, "rounds": rounds,
              "variants": ["static_grid"], "peers": ["vllm_unified"], "environment": ENV}
    with results.ResultsWriter(path, header, resume=False) as w:
        for scenario, factor in ours_over_peer.items():
            for p in range(processes):
                speed = 2.0 ** (p % 2) * np.linspace(1.0, 1.5, rounds)
                peer = 0.08 * speed * np.exp(rng.normal(0, 0.05, rounds))
                ours = peer * factor * np.exp(rng.normal(0, 0.05, rounds))
                for name, ms in (("static_grid", ours), (VLLM, peer)):
                    w.record(variant=name, scenario=scenario, metric="host", repeat=p,
                             samples=Samples(tuple(ms), clock="host"), config=[], digest="d")
        w.skip(variant="peer:flashinfer_paged", scenario="s1", reason="flashinfer is not installed")
    return results.load(path)


def test_paired_ratios_recover_the_planted_factor_through_the_drift(tmp_path):
    res = _results(tmp_path, {"s1": 0.7, "s2": 1.0, "s3": 1.15})
    ratios = host_cost.paired_ratios(res, "static_grid", VLLM)
    assert ratios["s1"].ratio == pytest.approx(0.7, rel=0.03) and paired_verdict(ratios["s1"]) == "faster"
    assert ratios["s3"].ratio == pytest.approx(1.15, rel=0.03)
    assert paired_verdict(ratios["s3"]) == "slower"
    assert ratios["s2"].ci_low < 1.0 < ratios["s2"].ci_high and paired_verdict(ratios["s2"]) == "even"
    assert all(p.n_processes == 4 for p in ratios.values())
    # a ratio of the two entries' medians, without the pairing, would read the drift instead
    medians = {n: [r["median"] for r in res.measurements() if r["variant"] == n and r["scenario"] == "s1"]
               for n in ("static_grid", VLLM)}
    assert medians["static_grid"][0] / medians[VLLM][1] < 0.5


def test_the_table_names_the_gpu_the_ratios_and_the_slower_rows(tmp_path):
    res = _results(tmp_path, {"s1": 0.7, "s3": 1.15})
    md = host_cost.render(res, "static_grid")
    assert "NVIDIA H100 80GB HBM3" in md and "driver 580.159.04" in md and "4 processes x 60 rounds" in md
    assert "| scenario | static_grid | vllm_unified |" in md
    assert "`static_grid` / `vllm_unified`" in md
    assert "| s3 | 1.1" in md and "| s1 | 0.7" in md and "| **slower** |" in md and "| faster |" in md
    assert "1 slower (s3)" in md and "largest 1.1" in md
    assert "`flashinfer_paged` (flashinfer is not installed)" in md


def test_a_scenario_measured_again_counts_once(tmp_path):
    """A process cut off after writing part of a scenario's entries measures all of them again
    when resumed: its latest records count, once."""
    res = _results(tmp_path, {"s1": 0.7})
    before = host_cost.render(res, "static_grid")
    with results.ResultsWriter(res.path, res.header) as w:  # process 0 of s1, again, 10x slower
        for name in ("static_grid", VLLM):  # a new process id (the worker's), so not a duplicate line
            w.record(variant=name, scenario="s1", metric="host", repeat=0,
                     samples=Samples((1.0,) * 60, clock="host"), config=[], digest="d", process="again")
    again = results.load(res.path)
    others = [r["median"] for r in res.measurements() if r["variant"] == VLLM and r["repeat"] > 0]
    median = host_cost._median_us(host_cost._latest(again), VLLM, "s1")
    assert median == pytest.approx(np.median([1.0, *others]) * 1e3)
    assert host_cost.paired_ratios(again, "static_grid", VLLM)["s1"].n_pairs == 4 * 60
    assert before != host_cost.render(again, "static_grid")


def test_fewer_than_three_processes_decide_nothing(tmp_path):
    res = _results(tmp_path, {"s1": 0.7}, processes=2)  # a t-test of 1 degree of freedom: no
    assert paired_verdict(host_cost.paired_ratios(res, "static_grid", VLLM)["s1"]) is None
    md = host_cost.render(res, "static_grid")
    assert "| 0.7" in md and "| – |" in md and "there is no verdict: the test needs 3 or more" in md


def test_without_a_gpu_it_says_why_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(host_cost.vendor_mod, "on_gpu", lambda: False)
    assert cli.main(["host-cost", "--processes", "2"]) == 2
    assert "no GPU" in capsys.readouterr().err


def test_bad_counts_are_refused(capsys):
    assert cli.main(["host-cost", "--rounds", "0"]) == 2
    assert "--rounds" in capsys.readouterr().err


def test_an_interrupted_run_resumes_the_missing_scenarios_only(tmp_path, monkeypatch, capsys):
    """The processes are faked (no GPU here): each writes its records as a worker would."""
    from perf import peers

    out = str(tmp_path / "host.jsonl")
    monkeypatch.setattr(host_cost.vendor_mod, "on_gpu", lambda: True)
    monkeypatch.setattr(host_cost.vendor_mod, "resolve", lambda given: "nvidia")
    monkeypatch.setattr(peers, "resolve", lambda text, vendor: (("vllm_unified",), {}))
    monkeypatch.setattr(results, "environment", lambda root=None: dict(ENV))
    spawned = []
    budget = itertools.count()

    def fake_spawn(args, index, scenarios, what):
        spawned.append((index, tuple(scenarios)))
        if index < 0:
            return
        header = host_cost._header(args, ["static_grid"], ("vllm_unified",), {})
        with results.ResultsWriter(args.out, header) as w:
            for s in scenarios:
                if next(budget) == 3:
                    raise KeyboardInterrupt  # the run stops here
                for name in ("static_grid", VLLM):
                    w.record(variant=name, scenario=s, metric="host", repeat=index,
                             samples=Samples((0.05, 0.06), clock="host"), config=[], digest="d")
    monkeypatch.setattr(host_cost, "_spawn", fake_spawn)
    one_query = "*decode/batch1-kv1024/*,*decode/batch1-kv8192/*,*decode/batch1-kv32768/*"  # anchor's 3
    argv = ["host-cost", "--scenarios", one_query, "--processes", "2", "--rounds", "2",
            "--out", out]
    assert cli.main(argv) == 130
    assert [i for i, _ in spawned] == [-1, 0, 1]  # warm-up, then process 0 (3 scenarios), then cut
    decodes = spawned[1][1]
    assert len(decodes) == 3
    spawned.clear()
    assert cli.main(argv) == 0
    assert spawned == [(1, decodes)]  # no warm-up, process 0 kept, process 1 again
    text = capsys.readouterr().out
    assert "`static_grid` / `vllm_unified`" in text and f"wrote {out}" in text


@needs_interpreter
def test_a_worker_alternates_ours_and_a_peer_and_records_both(tmp_path, monkeypatch):
    """The measuring process itself, in Triton's interpreter (on a GPU it runs the same code on
    CUDA): ours with its metadata checked once, a stand-in peer, a refused peer, both timed
    entries recorded per round under this process, the refusal as a skip."""
    import kernels
    from perf import peers, scenarios

    def setup(batch, device):
        out = batch.new_output()
        return (lambda: out.copy_(batch.q)), "copies q"

    def refuse(batch, device):
        raise peers.PeerUnavailable("not for this batch")

    monkeypatch.setitem(peers.PEERS, "copy_q", peers.Peer("copy_q", "a copy of q (stand-in)", "torch", setup))
    monkeypatch.setitem(peers.PEERS, "refuses", peers.Peer("refuses", "refuses", "torch", refuse))
    monkeypatch.setattr(peers, "absent_reason", lambda name: None)
    monkeypatch.setattr(results, "environment", lambda root=None: dict(ENV))
    # the worker turns the session's value checks off, as production runs: restored after the test
    monkeypatch.setenv(CHECK_VALUES_ENV, os.environ.get(CHECK_VALUES_ENV, ""))
    chosen = scenarios.select(scenarios.suite("smoke"), "tiny/decode/batch1-kv16*")
    out = str(tmp_path / "host.jsonl")
    args = argparse.Namespace(worker=2, rounds=3, out=out, suite="smoke", thresholds="thresholds.yaml")
    assert host_cost._worker(args, kernels, chosen, ["static_grid"], ("copy_q", "refuses"), {}) == 0
    res = results.load(out)
    recorded = sorted((r["variant"], r["repeat"], r["n"]) for r in res.measurements())
    assert recorded == [("peer:copy_q", 2, 3), ("static_grid", 2, 3)]
    assert [(r["variant"], r["reason"]) for r in res.skips()] == [("peer:refuses", "not for this batch")]
    assert all(r["clock"] == "host" and min(r["samples"]) > 0 for r in res.measurements())
    assert os.environ[CHECK_VALUES_ENV] == "0"  # (what the monkeypatch undoes)
