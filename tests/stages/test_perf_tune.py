"""`python -m perf tune` without a GPU: the candidates of each stage, the guard that a
configuration must reproduce the default's output, the refusal to time in the interpreter."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from kernels.paged_attention.heuristics import Config
from perf import tune
from perf.measure import check
from perf.measure.timing import Samples
from perf.scenarios import Scenario

BASE = Config(block_m=16, tile_size=64, num_segments=8, num_warps=4, num_stages=3, programs_per_sm=2)


def test_stage_candidates_around_the_best_so_far():
    decode = tune.candidates("tile_warps", BASE, decode=True)
    assert len(decode) == 12 and {c.block_m for c in decode} == {16}  # decode keeps its Q-block
    prefill = tune.candidates("tile_warps", BASE, decode=False)
    assert {(c.block_m, c.tile_size, c.num_warps) for c in prefill} == {
        (m, t, w) for m in (64, 128) for t in (32, 64, 128) for w in (4, 8)}
    assert [c.num_segments for c in tune.candidates("segments", BASE, decode=True)] == [1, 2, 4, 8, 16, 32]
    assert tune.candidates("segments", BASE, decode=False) == []  # prefill runs sequences whole
    assert [c.num_stages for c in tune.candidates("stages", BASE, True)] == [1, 2, 3, 4]
    assert [c.programs_per_sm for c in tune.candidates("programs", BASE, False)] == [0, 1, 2, 3, 4]
    assert [c.seq_items for c in tune.candidates("seq_items", BASE, True)] == [False, True]
    assert tune.candidates("seq_items", BASE, False) == []  # prefill items are Q-blocks
    assert [c.decode_layout for c in tune.candidates("decode_layout", BASE, True)] == [False, True]
    assert tune.candidates("decode_layout", dataclasses.replace(BASE, seq_items=True), True) == []
    assert tune.candidates("decode_layout", BASE, False) == []
    assert [c.edge_tile for c in tune.candidates("edge_tile", BASE, False)] == [0, 32, 16]
    assert tune.candidates("edge_tile", BASE, True) == []  # a decode has no causal edge
    assert [c.read_ahead for c in tune.candidates("read_ahead", BASE, False)] == [False, True]
    assert [(c.block_vector, c.offsets_32) for c in tune.candidates("addressing", BASE, True)] == [
        (False, False), (False, True), (True, False), (True, True)]
    assert [c.fused_reduce for c in tune.candidates("fused_reduce", BASE, True)] == [False, True]
    assert [c.pv_fp16 for c in tune.candidates("pv_fp16", BASE, False, pv_fp16=True)] == [False, True]
    assert tune.candidates("pv_fp16", BASE, False) == []  # only where the planner honours it
    whole = dataclasses.replace(BASE, num_segments=1)
    assert tune.candidates("fused_reduce", whole, True) == []  # one segment: nothing to merge
    assert tune.candidates("fused_reduce", BASE, False) == []
    assert [c.reduce_by_query for c in tune.candidates("reduce_by_query", BASE, True)] == [False, True]
    assert tune.candidates("reduce_by_query", whole, True) == []
    assert [c.pdl_reduce for c in tune.candidates("pdl_reduce", BASE, True)] == [False, True]
    assert tune.candidates("pdl_reduce", whole, True) == []  # no reduction launched
    assert tune.candidates("pdl_reduce", dataclasses.replace(BASE, fused_reduce=True), True) == []
    assert [c.reduce_warps for c in tune.candidates("reduce_warps", BASE, True)] == [1, 2, 4]
    # multi-token decodes split too (not `decode`: a query length above 1), as their rules' labs measure
    assert [c.reduce_warps for c in tune.candidates("reduce_warps", BASE, False)] == [1, 2, 4]
    assert [c.pdl_reduce for c in tune.candidates("pdl_reduce", BASE, False)] == [False, True]
    assert tune.candidates("reduce_warps", whole, True) == []  # no reduction launched
    assert tune.candidates("reduce_warps", dataclasses.replace(BASE, fused_reduce=True), True) == []
    assert [c.qk_e4m3 for c in tune.candidates("qk_e4m3", BASE, False, pv_fp16=True)] == [False, True]
    assert tune.candidates("qk_e4m3", BASE, False) == []  # a cache its e4m3 product does not apply to
    assert tune.candidates("qk_e4m3", dataclasses.replace(BASE, fp8_products=True), False, pv_fp16=True) == []
    assert [(c.v_pairs, c.k_pairs) for c in tune.candidates("pairs", BASE, True, ocp_e4m3=True)] == [
        (False, False), (False, True), (True, False), (True, True)]
    assert tune.candidates("pairs", BASE, True) == []  # a cache that is not OCP e4m3: no pairs to read
    # a 16-bit prefill: the Gluon kernel with a decode's heads packed and apart (`Config.ws_pack_gqa`)
    assert [(c.warp_specialized, c.ws_pack_gqa) for c in tune.candidates(
        "warp_specialized", BASE, False)] == [(False, False), (True, False), (True, True)]
    assert tune.candidates("warp_specialized", BASE, True) == []  # a 16-bit decode keeps the Q-block kernel
    # a decode over OCP e4m3: the Gluon kernel's token items, q in two e4m3 parts and in one
    assert [(c.warp_specialized, c.ws_token_items, c.qk_e4m3) for c in tune.candidates(
        "warp_specialized", BASE, True, ocp_e4m3=True)] == [(False, False, False), (True, True, False),
                                                             (True, True, True)]
    assert tune.candidates("warp_specialized", dataclasses.replace(BASE, fp8_products=True), True,
                           ocp_e4m3=True) == []
    # over e4m3 (fp16 queries: `qk_e4m3` off) also the Gluon kernel's q in the other number of e4m3 parts
    assert [(c.warp_specialized, c.ws_q_rounded) for c in tune.candidates(
        "warp_specialized", BASE, False, ocp_e4m3=True)] == [(False, False), (True, False), (True, True)]
    rounded = dataclasses.replace(BASE, ws_q_rounded=True)
    assert [(c.warp_specialized, c.ws_q_rounded) for c in tune.candidates(
        "warp_specialized", rounded, False, ocp_e4m3=True)] == [(False, True), (True, True), (True, False)]
    assert len(tune.candidates("warp_specialized", dataclasses.replace(BASE, qk_e4m3=True), False,
                               ocp_e4m3=True)) == 2  # bf16 queries: `qk_e4m3` rounds q on either kernel


def test_a_wrong_configuration_is_never_chosen(monkeypatch):
    """Every configuration is checked against the fp32 reference (here q itself) within the tolerance
    its plan calls for; one whose plan rounds q to e4m3 (FP8_PRODUCTS, P V in fp16) against the
    reference of q so rounded (here q + 0.05), within bf16's."""
    class Launch:
        def __init__(self, q, out, cfg):
            self.q, self.out, self.cfg = q, out, cfg

        def config(self):
            return {"constexprs": {"FP8_PRODUCTS": self.cfg.qk_e4m3, "PV_FP16": self.cfg.qk_e4m3}}

        def __call__(self):  # tile 16 stands for a broken configuration: it computes garbage
            self.out.copy_(self.q * (3.0 if self.cfg.tile_size == 16 else 1.0)
                           + (0.05 if self.cfg.tile_size == 32 else 0.0))  # tile 32: e4m3's error

    class Variant:
        def plan(self, q, *args, out, config, max_seqlen_q, max_seqlen_k, **options):
            if config.num_warps == 8:
                raise RuntimeError("out of resources: shared memory")
            return out, [Launch(q, out, config)]

    kernels = types.SimpleNamespace(VARIANTS={"static_grid": Variant()})
    timed = []

    def time_graph(fn, **kw):  # no graphs on CPU: a stand-in that runs the call once
        fn()
        timed.append(fn)
        return Samples((1.0, 1.0, 1.0))

    monkeypatch.setattr("perf.measure.timing.time_graph", time_graph)
    monkeypatch.setattr("perf.measure.cases.reference_for",
                        lambda batch: check.Reference(batch.q.float(), batch.q.float() + 0.05))
    s = tune._Scenario(kernels, Scenario.parse("tiny/decode/batch2-kv32/block16"), "cpu")
    assert s.measure(BASE) == 1.0
    assert s.measure(dataclasses.replace(BASE, tile_size=128)) == 1.0
    assert s.measure(dataclasses.replace(BASE, tile_size=16)) is None
    assert s.measure(dataclasses.replace(BASE, num_warps=8)) is None
    assert s.measure(dataclasses.replace(BASE, tile_size=32)) is None  # 0.05 off: beyond fp16's tolerance
    assert s.measure(dataclasses.replace(BASE, tile_size=32, qk_e4m3=True)) == 1.0  # q rounded: its reference
    assert s.measure(dataclasses.replace(BASE, tile_size=128, qk_e4m3=True)) is None  # q itself: not it
    errors = sorted(err for _, ms, err in s.tried.values() if ms is None)
    assert errors[0] == "RuntimeError: out of resources: shared memory"
    assert [e.split(":")[0] for e in errors[1:]] == ["wrong output before timing"] * 3
    assert len(timed) == 3  # only the three good ones were timed


def test_tune_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from perf.cli import main

    assert main(["tune", "--scenarios", "llama3-8b/decode/*"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU" in err[0] and "tune" in err[0]


def test_an_unknown_stage_is_refused_before_anything_runs(capsys):
    from perf.cli import main

    assert main(["tune", "--stages", "tile_warps,warps"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--stages tile_warps,warps: unknown stage warps" in err[0]


def test_the_markdown_names_default_and_best():
    env = {"gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "time": "2026-11-22T00:00:00+00:00"}
    best = dataclasses.replace(BASE, tile_size=128)
    md = tune.render(env, {"llama3-8b/decode/batch8-kv8192/block16/bf16": {
        "default": dataclasses.asdict(BASE), "default_ms": 0.15,
        "best": dataclasses.asdict(best), "best_ms": 0.1}})
    assert ("| llama3-8b/decode/batch8-kv8192/block16/bf16 | M16 T64 S8 w4 s3 p2 | 0.1500 | "
            "M16 T128 S8 w4 s3 p2 | 0.1000 | 1.50x |") in md
