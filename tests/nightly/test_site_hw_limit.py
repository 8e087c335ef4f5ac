"""The dashboard's "% of the hardware limit": per scenario at the newest commit, and its geometric
mean over commits, one plot per suite; "–" on nights without limits (no GPU). Synthetic history."""

from __future__ import annotations

import pytest

from perf import roofline
from perf.nightly import site
from perf.nightly.history import Commit, History
from perf.scenarios import Scenario

pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (pyproject extra `plots`)")

DECODE = "llama3-8b/decode/batch128-kv8192/block16"
PREFILL = "llama3-8b/prefill/batch1-kv8192/block16"
LIMITS = {"copy_tb_s": 4.0, "matmul_tflop_s": 800.0, "measured": "2026-11-28T00:00:00+00:00", "cached": True}


def floor(name: str) -> float:
    return roofline.limit_ms(Scenario.parse(name).spec(), roofline.limits_from({"limits": LIMITS}))


def make_history(limits_per_night: list, suites: list[str]) -> History:
    """Nights whose static_grid runs at twice each scenario's floor, the peer at the floor."""
    commits = [Commit(sha=f"{i:040x}", date=f"2026-11-{20 + i:02d}", measured="", suite=suite,
                      environment={"gpu": "NVIDIA H200", "vendor": "nvidia", "limits": lim,
                                   "fingerprint_why": {} if lim else {"limits": "no GPU measured"}})
               for i, (lim, suite) in enumerate(zip(limits_per_night, suites))]
    series = {}
    for name, factor in (("static_grid", 2.0), ("peer:sdpa_cudnn", 1.0)):
        for s in (DECODE, PREFILL):
            series[(name, s, "graph")] = {c.sha: [factor * floor(s)] * 3 for c in commits}
    return History("runner_h200", commits, series, {})


def test_share_per_scenario_is_the_latency_against_that_nights_limits():
    h = make_history([LIMITS, None], ["nightly", "nightly"])
    first = h.commits[0].sha
    decode = site.hw_share(h, "static_grid", DECODE, "graph", first)
    assert decode.bound == "memory" and decode.fraction == pytest.approx(0.5)
    prefill = site.hw_share(h, "peer:sdpa_cudnn", PREFILL, "graph", first)
    assert prefill.bound == "compute" and prefill.fraction == pytest.approx(1.0)
    assert site.hw_share(h, "static_grid", DECODE, "graph") is None  # the newest night has no limits
    assert site.hw_share(h, "static_grid", "not-a-scenario", "graph", first) is None
    assert site.scenario_work(DECODE) == roofline.work(Scenario.parse(DECODE).spec())
    assert site.scenario_work("not-a-scenario") is None


def test_the_section_shows_the_table_and_one_plot_per_suite(tmp_path):
    h = make_history([LIMITS, LIMITS, LIMITS], ["nightly", "nightly", "pr"])
    body = "\n".join(site.hw_section(h, str(tmp_path)))
    assert "<h2>% of the hardware limit</h2>" in body
    assert "copy 4 TB/s and bf16 matmul 800 TFLOP/s" in body
    assert ">50 % memory</td>" in body and ">100 % compute</td>" in body and ">100 % memory</td>" in body
    for suite in ("nightly", "pr"):
        png = tmp_path / f"hwlimit_{suite}_graph.png"
        assert f"<img src='{png.name}'" in body and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_limits_every_cell_is_a_dash_and_nothing_is_drawn(tmp_path):
    h = make_history([None, None], ["nightly", "nightly"])
    body = "\n".join(site.hw_section(h, str(tmp_path)))
    assert "% of the hardware limit: – (no GPU measured)" in body
    assert "% memory" not in body and "% compute" not in body and body.count("<td class=na>–</td>") == 4
    assert "<img" not in body and not list(tmp_path.glob("*.png"))
    assert site.plot_hw_limit(h, "nightly", "graph", str(tmp_path / "x.png")) is None
