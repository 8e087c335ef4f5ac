"""Sharding the nightly over GPUs and runners, and pinning test workers to GPUs (no GPU needed).

The deal of scenarios must be a partition (every scenario exactly once), the same anywhere,
and balanced; a merge must refuse shards that disagree or do not add up; and the smoke suite
measured by two worker processes in Triton's interpreter (stand-in "devices"), merged, must
hold exactly the cases of the same selection measured by one process.
"""

from __future__ import annotations

import json
import os
import random
import types
from pathlib import Path

import pytest

from perf import devices, git, results
from perf.errors import ConfigError
from perf.measure.timing import Samples
from perf.nightly import collect, selection, shard
from perf.scenarios import suite

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
NIGHTLY = [s.name for s in suite("nightly")]


def _selection(names, peers=("sdpa_cudnn", "sdpa_flash")) -> selection.Selection:
    import kernels

    return selection.Selection("nightly", tuple(names), tuple(kernels.VARIANTS), peers)


SEL = _selection(NIGHTLY)


# --- the deal -------------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
def test_shares_are_a_partition_in_suite_order(parts):
    shares = shard.assign(NIGHTLY, parts, SEL)
    assert len(shares) == parts
    flat = [n for s in shares for n in s]
    assert sorted(flat) == sorted(NIGHTLY) and len(flat) == len(set(flat))  # each exactly once
    for s in shares:
        assert list(s) == [n for n in NIGHTLY if n in s]  # suite order kept within a share


def test_shares_do_not_depend_on_the_input_order():
    shuffled = list(NIGHTLY)
    random.Random(1).shuffle(shuffled)
    assert [set(s) for s in shard.assign(shuffled, 3, SEL)] == [set(s) for s in shard.assign(NIGHTLY, 3, SEL)]
    assert shard.assign(NIGHTLY, 3, SEL) == shard.assign(NIGHTLY, 3, SEL)


@pytest.mark.parametrize("parts", [2, 3, 4, 8])
def test_shares_are_balanced_by_estimated_cost(parts):
    costs = {n: shard.cost(n, SEL) for n in NIGHTLY}
    loads = [sum(costs[n] for n in s) for s in shard.assign(NIGHTLY, parts, SEL)]
    # largest-first's bound: within 4/3 of the best possible, which is at least the mean load and
    # at least the largest scenario (scenarios are never split)
    assert max(loads) <= 4 / 3 * max(sum(loads) / parts, max(costs.values())), loads
    if parts in (2, 4):  # the four 32k-token prefills divide evenly: the rest evens out
        assert max(loads) <= 1.05 * min(loads), loads


def test_the_estimate_follows_the_h200_measurement():
    """Measured on an NVIDIA H200 (2-GPU machine), 2026-11-22, 5 variants + 2 SDPA libraries:
    a 16 x 4k prefill batch took 67 s, its 50 % decode version 37 s, a one-sequence 4k prefill
    12 s, a 16 x 512 decode 3.2 s; the estimate keeps that order and is within 30 %."""
    sel = _selection([])
    measured = {"llama3-8b/prefill/batch16-kv4096-var/block16": 67.0,
                "llama3-8b/mixed50/batch16-kv4096-var/block16": 36.9,
                "llama3-8b/prefill/batch1-kv4096-var/block16": 12.2,
                "llama3-8b/decode/batch16-kv512-var/block16": 3.2}
    got = {n: shard.cost(n, sel) for n in measured}
    assert sorted(got, key=got.get) == sorted(measured, key=measured.get)
    for n, seconds in measured.items():
        assert 0.7 * seconds <= got[n] <= 1.3 * seconds, (n, got[n])


def test_a_case_over_the_call_ceiling_costs_one_probe_call():
    """naive on 32k-token mixed batches (an estimated 94 s a call) is probed once and skipped: the
    nightly suite drops from about 11 GPU-hours to about two (5 variants + 2 SDPA libraries)."""
    from dataclasses import replace

    name = "llama3-8b/mixed50/batch32-kv32768/block16"
    unlimited = replace(SEL, max_call_ms=float("inf"))
    assert shard.cost(name, unlimited) > 3600
    assert shard.cost(name, SEL) < shard.cost(name, unlimited) / 10
    total = sum(shard.cost(n, SEL) for n in NIGHTLY)
    assert total < 2.5 * 3600 and sum(shard.cost(n, unlimited) for n in NIGHTLY) > 10 * 3600


def test_too_slow_records_a_skip_with_the_measured_time():
    skips = []
    writer = types.SimpleNamespace(skip=lambda **k: skips.append(k))
    case = types.SimpleNamespace(variant="naive", scenario="s", fn=lambda: None, skip=None)
    collect.too_slow(case, 94123.4, 1000.0, writer)
    assert case.fn is None and skips == [{"variant": "naive", "scenario": "s", "kind": "skip",
                                          "reason": case.skip}]
    assert "94123 ms" in case.skip and "1000 ms" in case.skip and "--max-call-ms" in case.skip


def test_more_parts_than_scenarios_leaves_some_empty():
    shares = shard.assign(["tiny_bs16_b2_s16_d50", "tiny_bs16_b1_s16_d100"], 3, SEL)
    assert sorted(len(s) for s in shares) == [0, 1, 1]


@pytest.mark.parametrize("text, part", [("2/4", shard.Part(2, 4)), ("1/1", None), (None, None)])
def test_shard_argument(text, part):
    assert shard.parse_part(text) == part


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_bad_shard_argument_names_the_option(text):
    with pytest.raises(ConfigError, match="--shard"):
        shard.parse_part(text)


# --- pinning workers to GPUs ----------------------------------------------------------------


@pytest.mark.parametrize("worker, pool, variable, device", [
    ("gw0", "CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES", "0"),
    ("gw3", "CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES", "1"),
    ("gw5", "CUDA_VISIBLE_DEVICES=4,6,7", "CUDA_VISIBLE_DEVICES", "7"),  # a runner's own list
    ("gw2", "HIP_VISIBLE_DEVICES=0,1", "HIP_VISIBLE_DEVICES", "0"),
])
def test_an_xdist_worker_is_pinned_to_one_gpu_of_the_pool(worker, pool, variable, device):
    env = {"PYTEST_XDIST_WORKER": worker, devices.POOL_ENV: pool}
    assert devices.pin_xdist_worker(env) == device
    assert env[variable] == device


@pytest.mark.parametrize("env", [
    {devices.POOL_ENV: "CUDA_VISIBLE_DEVICES=0,1"},  # the controller, or no xdist
    {"PYTEST_XDIST_WORKER": "gw1"},  # no pool exported: no GPU
    {"PYTEST_XDIST_WORKER": "gw1", devices.POOL_ENV: "PATH=0,1"},  # not a visible-devices variable
])
def test_nothing_is_pinned_outside_an_xdist_worker_with_a_pool(env):
    before = dict(env)
    assert devices.pin_xdist_worker(env) is None
    assert env == before


def _fake_gpus(monkeypatch, vendor, count):
    from perf import vendor as vendor_mod

    monkeypatch.setattr(vendor_mod, "detect", lambda: vendor)
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_the_pool_is_the_runners_list_else_every_gpu(monkeypatch):
    _fake_gpus(monkeypatch, "nvidia", 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert devices.host_pool() == devices.Pool("CUDA_VISIBLE_DEVICES", ("5", "7"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.host_pool() == devices.Pool("CUDA_VISIBLE_DEVICES", ("0", "1"))
    _fake_gpus(monkeypatch, "amd", 3)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    assert devices.host_pool() == devices.Pool("HIP_VISIBLE_DEVICES", ("0", "1", "2"))
    _fake_gpus(monkeypatch, None, 0)
    assert devices.host_pool() is None


def test_auto_workers_are_one_per_cpu_at_least_one_per_gpu():
    two = devices.Pool("CUDA_VISIBLE_DEVICES", ("0", "1"))
    assert devices.xdist_workers(two, 32) == 32
    assert devices.xdist_workers(devices.Pool("CUDA_VISIBLE_DEVICES", ("0",)), 16) == 16  # the H100 runner
    assert devices.xdist_workers(two, 1) == 2  # every GPU gets a worker
    assert devices.xdist_workers(two, None) == 2  # os.cpu_count() unknown
    assert devices.xdist_workers(None, 32) is None  # no GPU: xdist's own default


def test_gpus_argument(monkeypatch):
    _fake_gpus(monkeypatch, "nvidia", 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert shard.resolve_pool("all").devices == ("0", "1")
    assert shard.resolve_pool("1").devices == ("0",)
    with pytest.raises(ConfigError, match="--gpus 3: this job may use 2 GPU"):
        shard.resolve_pool("3")
    with pytest.raises(ConfigError, match="--gpus none"):
        shard.resolve_pool("none")
    _fake_gpus(monkeypatch, None, 0)
    assert shard.resolve_pool("all") is None and shard.resolve_pool("1") is None
    fake = shard.resolve_pool("2")
    assert fake.interpreter and fake.env(1) == {"CUDA_VISIBLE_DEVICES": ""}  # workers see no GPU


# --- merging --------------------------------------------------------------------------------

ENV = {"vendor": "nvidia", "gpu": "NVIDIA H200", "arch": "sm_90", "driver": "580.1", "torch": "2.11",
       "triton": "3.6.0", "commit": "c" * 40, "dirty": False}


def _shard_file(path: Path, index: int, count: int, of: list[str], mine: list[str], key=shard.GPU_KEY,
                env: dict | None = None, **header) -> Path:
    env = {**ENV, "host": f"h{index}", "gpu_uuid": f"GPU-{index}", "time": f"2026-11-2{index}T03:00:00+00:00",
           **(env or {})}
    head = {"environment": env, "suite": "smoke", "side": "nightly", "variants": ["qblock"], "peers": [],
            "scenarios": {n: f"d-{n}" for n in mine}, "metrics": ["eager", "graph"], "repeats": 1,
            "samples": 5, "budget_ms": 250.0, "nightly": {"machine": "m", "commit": "c" * 40},
            "peers_absent": {},
            key: {"index": index, "count": count, "of": of, "device": str(index - 1)}, **header}
    with results.ResultsWriter(str(path), head, resume=False) as w:
        for n in mine:
            for metric in ("eager", "graph"):
                w.record(variant="qblock", scenario=n, metric=metric, repeat=0,
                         samples=Samples((1.0, 1.1, 1.2)), config=[], digest=f"d-{n}")
            w.skip(variant="naive", scenario=n, reason="variant 'naive' does not support sliding_window")
    return path


OF = ["a_bs16_b1_s1_d0", "b_bs16_b1_s1_d0", "c_bs16_b1_s1_d0"]


def test_merge_keeps_the_selection_order_and_where_each_scenario_ran(tmp_path):
    paths = [str(_shard_file(tmp_path / "2.jsonl", 2, 2, OF, [OF[1]])),
             str(_shard_file(tmp_path / "1.jsonl", 1, 2, OF, [OF[0], OF[2]]))]
    header = shard.merge(paths, str(tmp_path / "out.jsonl"), shard.GPU_KEY)
    merged = results.load(str(tmp_path / "out.jsonl"))
    assert list(merged.header["scenarios"]) == OF and shard.GPU_KEY not in merged.header
    assert {r["scenario"] for r in merged.measurements()} == set(OF)
    assert {r["scenario"] for r in merged.skips()} == set(OF)
    assert [(d["device"], d["host"], d["scenarios"]) for d in header["devices"]] == \
        [("0", "h1", [OF[0], OF[2]]), ("1", "h2", [OF[1]])]


@pytest.mark.parametrize("change, message", [
    (dict(env={"driver": "580.2"}), "environment.driver is '580.2'"),
    (dict(env={"gpu": "NVIDIA H100"}), "environment.gpu"),
    (dict(repeats=5), "repeats is 5"),
    (dict(peers_absent={"flashinfer": "not installed"}), "peers_absent"),
])
def test_merge_refuses_shards_that_differ_in_more_than_the_device(tmp_path, change, message):
    paths = [str(_shard_file(tmp_path / "1.jsonl", 1, 2, OF, OF[:2])),
             str(_shard_file(tmp_path / "2.jsonl", 2, 2, OF, OF[2:], **change))]
    with pytest.raises(ConfigError, match=message):
        shard.merge(paths, str(tmp_path / "out.jsonl"), shard.GPU_KEY)
    assert not (tmp_path / "out.jsonl").exists()


def test_merge_refuses_a_missing_repeated_or_overlapping_shard(tmp_path):
    one = str(_shard_file(tmp_path / "1.jsonl", 1, 2, OF, OF[:2]))
    with pytest.raises(ConfigError, match=r"missing \[2\]"):
        shard.merge([one], str(tmp_path / "out.jsonl"), shard.GPU_KEY)
    again = str(_shard_file(tmp_path / "1b.jsonl", 1, 2, OF, OF[2:]))
    with pytest.raises(ConfigError, match=r"repeated \[1\]"):
        shard.merge([one, again], str(tmp_path / "out.jsonl"), shard.GPU_KEY)
    overlap = str(_shard_file(tmp_path / "2.jsonl", 2, 2, OF, OF[1:]))
    with pytest.raises(ConfigError, match="measured by another shard"):
        shard.merge([one, overlap], str(tmp_path / "out.jsonl"), shard.GPU_KEY)
    short = str(_shard_file(tmp_path / "2s.jsonl", 2, 2, OF, []))
    with pytest.raises(ConfigError, match="missing: c_bs16"):
        shard.merge([one, short], str(tmp_path / "out.jsonl"), shard.GPU_KEY)


def test_merge_refuses_shards_that_stopped_early(tmp_path):
    """A worker stopped between two records leaves a well-formed file whose header names all its
    scenarios; the merge finds the cases it never measured."""
    one = _shard_file(tmp_path / "1.jsonl", 1, 2, OF, OF[:2])
    two = _shard_file(tmp_path / "2.jsonl", 2, 2, OF, OF[2:])
    lines = two.read_text().splitlines(True)
    two.write_text("".join(line for line in lines if '"graph"' not in line or '"kind": "header"' in line))
    with pytest.raises(ConfigError, match=f"no result for qblock {OF[2]} graph repeat 0"):
        shard.merge([str(one), str(two)], str(tmp_path / "out.jsonl"), shard.GPU_KEY)
    # a metric that broke (an error line for it) or a skipped case is accounted for
    with results.ResultsWriter(str(two), results.load(str(two)).header, resume=True) as w:
        w.skip(variant="qblock", scenario=OF[2], reason="graph: RuntimeError: capture failed", kind="error")
    shard.merge([str(one), str(two)], str(tmp_path / "out.jsonl"), shard.GPU_KEY)


def test_merge_refuses_a_file_cut_short(tmp_path):
    one = _shard_file(tmp_path / "1.jsonl", 1, 2, OF, OF[:2])
    two = _shard_file(tmp_path / "2.jsonl", 2, 2, OF, OF[2:])
    two.write_text(two.read_text()[:-20])
    with pytest.raises(ConfigError, match="cut short"):
        shard.merge([str(one), str(two)], str(tmp_path / "out.jsonl"), shard.GPU_KEY)


def test_merge_job_refuses_parts_of_another_commit(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, mine in ((1, OF[:2]), (2, OF[2:])):
        _shard_file(folder / f"p{i}.jsonl", i, 2, OF, mine, key=shard.RUNNER_KEY)
    conf = {"_root": str(ROOT), "_results_dir": str(tmp_path / "asv")}
    with pytest.raises(ConfigError, match="measured commit cccccccc"):
        shard.merge_parts(str(folder), conf)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no \\*.jsonl part files"):
        shard.merge_parts(str(tmp_path / "empty"), conf)


def test_the_merge_job_needs_no_gpu_and_no_torch(tmp_path):
    """The merge job runs on a hosted runner: merging, the night put into the store, asv's results
    written from it, and a developer's own asv benchmark processes reading the merged file, must
    import neither torch nor triton nor the kernels."""
    import subprocess
    import sys

    sha, _ = git.head_commit(str(ROOT))
    smoke = [s.name for s in suite("smoke")]
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, mine in ((1, smoke[:1]), (2, smoke[1:])):
        _shard_file(folder / f"p{i}.jsonl", i, 2, smoke, mine, key=shard.RUNNER_KEY,
                    env={"time": f"2026-11-2{i}T03:00:00+00:00"}, nightly={"machine": "m", "commit": sha})
    code = (
        "import os, sys\n"
        "for m in ('torch', 'triton', 'kernels'): sys.modules[m] = None  # any import of them fails\n"
        "from perf.nightly import asvrun, history, shard, store\n"
        f"conf = {{'_root': {str(ROOT)!r}, '_results_dir': {str(tmp_path / 'asv')!r}, "
        f"'_benchmark_dir': {str(ROOT / 'perf' / 'asv')!r}}}\n"
        f"name, sha, sel, out = shard.merge_parts({str(folder)!r}, conf, out_dir={str(tmp_path / 'out')!r})\n"
        "night, data = store.tonight(out), store.local(conf['_results_dir'])\n"
        "store.write_night(data, name, night.date, out, night.fingerprint, None)\n"
        "print('asv', asvrun.record(conf, history.load_data(data)))\n"
        "os.environ.update(sel.to_env())\n"
        "import perf.asv.benchmarks as b\n"
        "bench = b.PagedAttention()\n"
        "cache = bench.setup_cache()\n"
        "print(name, len(cache['cases']), bench.track_latency_ms(cache, 'qblock', sel.scenarios[0]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].split() == ["m", str(2 * len(smoke)), "1.1"]  # qblock + naive skips
    assert done.stdout.splitlines()[-2] == "asv 1"  # one commit's asv results, from the store


def test_a_runner_part_is_run_only():
    args = types.SimpleNamespace(shard="1/2", merge_shards=None, action="all")
    with pytest.raises(ConfigError, match="--shard 1/2: a runner only measures its part"):
        shard.check_action(args)
    args.action = "run"
    assert shard.check_action(args) == shard.Part(1, 2)
    args.merge_shards = "dir"
    with pytest.raises(ConfigError, match="pass one of them"):
        shard.check_action(args)


# --- the smoke suite in the interpreter: two workers, merged, against one process -----------


def _keys(res: results.Results) -> tuple[set, set]:
    return (set(res.medians()), {(r["kind"], r["variant"], r["scenario"], r["reason"]) for r in res.skips()})


@pytest.mark.no_gpu
def test_sharded_smoke_run_merges_to_the_cases_of_an_unsharded_run(tmp_path, monkeypatch):
    """Runner 1/2 and 2/2 of the smoke suite, the larger part over two interpreter workers (stand-in
    GPUs), merged by the merge job's code: the same (variant, scenario, metric) keys and skips as
    one process measuring everything."""
    assert os.environ.get("TRITON_INTERPRET") == "1"  # conftest: no GPU here
    from perf import vendor as vendor_mod

    monkeypatch.setattr(vendor_mod, "detect", lambda: None)
    sha, date = git.head_commit(str(ROOT))
    extra = {"nightly": {"machine": "m", "commit": sha, "commit_date": date, "dirty": False},
             "peers_absent": {}}
    # one variant, one repeat: the interpreter is slow (about 25 s for this on 2 cores)
    sel = selection.Selection("smoke", selection.resolve_scenarios("smoke", None), ("qblock",), (), repeats=1,
                              samples=5)
    whole = collect.measure(sel, str(tmp_path / "whole.jsonl"), header_extra=extra, progress=False)

    parts_dir = tmp_path / "parts"
    shares = shard.assign(sel.scenarios, 2, sel)
    for index in (1, 2):
        part = shard.Part(index, 2)
        gpus = "2" if len(shares[index - 1]) > 1 else "1"  # the larger part over two workers
        out = shard.part_path(str(parts_dir), "m", sha, part)
        shard.measure(sel, out, gpus=gpus, part=part, header_extra=extra)
        assert not os.path.exists(f"{out}.gpus")  # the workers' files are gone once merged
    conf = {"_root": str(ROOT), "_results_dir": str(tmp_path / "asv")}
    name, merged_sha, merged_sel, out = shard.merge_parts(str(parts_dir), conf, out_dir=str(tmp_path / "out"))

    assert (name, merged_sha) == ("m", sha)
    assert merged_sel == selection.Selection("smoke", sel.scenarios, ("qblock",), (), repeats=1, samples=5,
                                             budget_ms=sel.budget_ms, results=out)
    one, merged = results.load(whole), results.load(out)
    assert _keys(merged) == _keys(one) and len(_keys(one)[0]) == len(sel.scenarios)  # same cases
    assert merged.header["scenarios"] == one.header["scenarios"]
    workers = [d for d in merged.header["devices"] if d["device"] is not None]
    assert sorted(d["device"] for d in workers) == ["cpu0", "cpu1"]  # the two interpreter workers
    assert sorted(n for d in merged.header["devices"] for n in d["scenarios"]) == sorted(sel.scenarios)
    assert json.loads(Path(out).read_text().splitlines()[0])["kind"] == "header"
