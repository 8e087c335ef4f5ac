"""`python -m perf table`: a results file of `perf run` rendered as the benchmark table.

The fixture is written in the real results format with chosen medians, so every number of
the table can be checked by hand: latency cells, throughput derived from latency, the ratio
to the fastest peer and its geometric mean. The last test measures for real (Triton's
interpreter) with a stand-in peer and renders what `perf run --peers` wrote.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from interpreter_support import needs_interpreter

from perf import peers, report, results, roofline
from perf.measure.timing import Samples
from perf.scenarios import Scenario

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DECODE = "llama3-8b/decode/batch8-kv8192/block16/bf16"
PREFILL = "llama3-8b/prefill/batch1-kv2048/block16/bf16"
ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "num_sms": 132, "torch": "2.11",
       "triton": "3.6.0", "time": "2026-11-22T00:00:00+00:00", "commit": "0123456789abcdef"}
# (name, scenario, metric) -> ms; every repeat gets these times 0.98, 1.0, 1.05 (median: the value)
MS = {
    ("naive", DECODE, "eager"): 1.5, ("naive", DECODE, "graph"): 1.4,
    ("static_grid", DECODE, "eager"): 0.1, ("static_grid", DECODE, "graph"): 0.09,
    ("peer:flashinfer_paged", DECODE, "eager"): 0.08, ("peer:flashinfer_paged", DECODE, "graph"): 0.075,
    ("peer:sdpa_cudnn", DECODE, "eager"): 0.2, ("peer:sdpa_cudnn", DECODE, "graph"): 0.1,
    ("static_grid", PREFILL, "eager"): 0.3, ("static_grid", PREFILL, "graph"): 0.25,
    ("peer:sdpa_cudnn", PREFILL, "eager"): 0.15, ("peer:sdpa_cudnn", PREFILL, "graph"): 0.125,
}
LABELS = {"flashinfer_paged": "flashinfer (paged, block table)",
          "sdpa_cudnn": "SDPA cuDNN (dense, not paged)"}


def write_fixture(path, decode_name: str = DECODE) -> str:
    header = {"environment": ENV, "suite": "anchor", "variants": ["naive", "static_grid"],
              "peers": ["flashinfer_paged", "sdpa_cudnn"], "repeats": 3, "samples": 25,
              "scenarios": {DECODE: "d1", PREFILL: "d2"}}
    with results.ResultsWriter(str(path), header, resume=False) as w:
        for (name, scenario, metric), ms in MS.items():
            config = []
            if name.startswith("peer:"):
                peer = name.removeprefix("peer:")
                config = [{"peer": peer, "label": LABELS[peer], "layout": f"{peer} layout"}]
            for r, f in enumerate((0.98, 1.05, 1.0)):
                w.record(variant=name, scenario=decode_name if scenario == DECODE else scenario,
                         metric=metric, repeat=r, samples=Samples((ms * f,) * 3), config=config, digest="d")
        w.skip(variant="naive", scenario=PREFILL, reason="skipped: too slow")
        w.skip(variant="peer:flashinfer_paged", scenario=PREFILL, reason="flashinfer refused: no")
    return str(path)


def test_throughput_is_derived_once_from_latency():
    decode, prefill = Scenario.parse(DECODE).spec(), Scenario.parse(PREFILL).spec()
    kv_bytes = 8 * 8192 * 8 * 128 * 2 * 2  # sequences x KV tokens x KV heads x head size x (K, V) x bf16
    assert roofline.kv_read_bytes(decode) == kv_bytes
    assert report.throughput(decode, 0.1) == pytest.approx((kv_bytes / 1e-4 / 1e9, "KV GB/s"))
    flops = 4 * 128 * 32 * (2048 * 2049 // 2)  # causal: query i sees i + 1 keys
    assert roofline.attention_flops(prefill) == flops
    assert report.throughput(prefill, 0.25) == pytest.approx((flops / 2.5e-4 / 1e12, "TFLOP/s"))
    windowed = Scenario.parse("llama3-8b/prefill/batch1-kv2048/block16/window100/bf16").spec()
    assert roofline.attention_flops(windowed) == 4 * 128 * 32 * (100 * 101 // 2 + (2048 - 100) * 100)


def test_table_shows_every_variant_and_peer_and_ours_over_the_best_peer(tmp_path):
    md = report.render_table(results.load(write_fixture(tmp_path / "r.jsonl")))
    lines = md.splitlines()
    assert lines[0].startswith("Measured on NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)")
    assert "suite `anchor`" in md
    header = "| scenario | naive | static_grid | flashinfer_paged | sdpa_cudnn |"
    i = lines.index(header)
    assert lines[i + 2] == f"| {DECODE} | 1.500 / 1.400 | 0.100 / 0.0900 | 0.0800 / 0.0750 | 0.200 / 0.100 |"
    assert lines[i + 3] == f"| {PREFILL} | – / – | 0.300 / 0.250 | – / – | 0.150 / 0.125 |"
    assert "`flashinfer_paged` = flashinfer (paged, block table) (flashinfer_paged layout)" in md
    decode_gbs = report.throughput(Scenario.parse(DECODE).spec(), 0.09)[0]
    fi_gbs = report.throughput(Scenario.parse(DECODE).spec(), 0.075)[0]
    assert (f"| {DECODE} | 0.0900 | {decode_gbs:.1f} KV GB/s | – | flashinfer_paged | 0.0750 | "
            f"{fi_gbs:.1f} KV GB/s | – | 1.20 |") in lines  # no limits in these results: "–"
    tflops = report.throughput(Scenario.parse(PREFILL).spec(), 0.25)[0]
    assert f"| {PREFILL} | 0.250 | {tflops:.1f} TFLOP/s | – | sdpa_cudnn | 0.125 |" in md and "| 2.00 |" in md
    gm = math.sqrt(1.2 * 2.0)
    assert (f"Geometric mean of the ratios (graph): all 2: **{gm:.2f}**, decode (1): 1.20, "
            f"prefill or mixed (1): 2.00; largest 2.00 ({PREFILL}).") in lines
    assert f"Geometric mean of the ratios (eager): all 2: **{math.sqrt(1.25 * 2.0):.2f}**" in md
    assert f"- `naive`, {PREFILL}: skipped: too slow" in lines
    assert f"- `flashinfer_paged`, {PREFILL}: flashinfer refused: no" in lines


def test_the_header_names_a_dirty_checkouts_kernels_by_their_digest(tmp_path, monkeypatch):
    """Records of uncommitted kernels carry the commit they sit on: the table's first line says so, and
    names the kernels/ digest that ran, so that a table is never read as that commit's."""
    clean = report.render_table(results.load(write_fixture(tmp_path / "clean.jsonl")))
    assert "commit 01234567; suite" in clean.splitlines()[0]
    monkeypatch.setitem(ENV, "dirty", True)
    monkeypatch.setitem(ENV, "kernels_tree", "31f8c1516611b05a")
    dirty = report.render_table(results.load(write_fixture(tmp_path / "dirty.jsonl")))
    assert ("commit 01234567 with uncommitted changes (kernels/ digest 31f8c1516611b05a); suite "
            in dirty.splitlines()[0])


def test_against_a_named_peer_that_is_not_the_fastest(tmp_path):
    """`--against flashinfer_paged`: its own table over the scenarios it ran, beside the one
    against the fastest peer (sdpa_cudnn is faster on the prefill and is what that one uses);
    a peer the results lack is named, not an error."""
    res = results.load(write_fixture(tmp_path / "r.jsonl"))
    md = report.render_table(res, against=("flashinfer_paged", "vllm_unified"))
    lines = md.splitlines()
    i = lines.index("`static_grid` against `flashinfer_paged`, graph (ratio = latency of `static_grid` / the "
                    "peer's; < 1 is faster):")
    table = lines[i:lines.index("", i + 2)]
    assert [r.split(" | ")[0] for r in table[4:]] == [f"| {DECODE}"]  # it ran no prefill
    throughput = table[4].split(" | ")[6]
    assert table[4].endswith(f"| flashinfer_paged | 0.0750 | {throughput} | – | 1.20 | 1.20-1.20 | – |")
    assert "a verdict needs 3 or more processes per scenario" in md
    assert (f"Geometric mean of the ratios (graph): all 1: **1.20**, decode (1): 1.20; "
            f"largest 1.20 ({DECODE}).") in md
    assert f"Geometric mean of the ratios (eager): all 1: **{0.1 / 0.08:.2f}**" in md
    assert ("No `vllm_unified` in these results: no ratio to it "
            "(measured peers: flashinfer_paged, sdpa_cudnn).") in md
    assert md.count("against the fastest peer") == 2  # eager and graph, unchanged


def test_against_a_named_peer_paired_per_repeat_over_processes(tmp_path):
    """With one results file per process, each ratio to a named peer gets its interval and a
    verdict: repeat r of ours and of the peer ran in the same round, so drift between rounds
    (here 1.5x) and between processes (2x) cancels; a 3 % slower kernel is found slower, the
    same speed reads even."""
    import numpy as np

    rng = np.random.default_rng(0)
    paths = []
    for p in range(4):
        header = {"environment": ENV, "suite": "pr", "variants": ["static_grid"], "peers": ["vllm_unified"],
                  "repeats": 8, "samples": 25}
        path = str(tmp_path / f"p{p}.jsonl")
        with results.ResultsWriter(path, header, resume=False) as w:
            for scenario, factor in ((DECODE, 1.03), (PREFILL, 1.0)):
                for r in range(8):
                    peer = 0.01 * 2.0 ** (p % 2) * (1 + r / 16) * math.exp(rng.normal(0, 0.01))
                    for name, ms in (("static_grid", peer * factor * math.exp(rng.normal(0, 0.01))),
                                     ("peer:vllm_unified", peer)):
                        w.record(variant=name, scenario=scenario, metric="graph", repeat=r,
                                 samples=Samples((ms,) * 3), config=[], digest="d")
        paths.append(path)
    md = report.render_table(results.merge(paths, source_key="source"), against=("vllm_unified",))
    row = {line.split(" | ")[0][2:]: line for line in md.splitlines()
           if line.startswith("| llama3-8b") and line.count("|") == 12}
    assert row[DECODE].endswith("| **slower** |") and row[PREFILL].endswith("| even |")
    low, high = map(float, row[DECODE].split(" | ")[-2].split("-"))
    assert 1.0 < low <= 1.03 <= high < 1.06
    assert (f"Paired, one-sided test over the processes at 0.05: 0 faster, 1 even, 1 slower "
            f"({DECODE}).") in md
    # files that already carry a `source` (say 0 each) are still told apart, one process each
    for path in paths:
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        with open(path, "w") as f:
            f.writelines(json.dumps(dict(r, source=0) if r.get("kind") == "record" else r) + "\n"
                         for r in lines)
    again = report.render_table(results.merge(paths, source_key="source"), against=("vllm_unified",))
    assert "0 faster, 1 even, 1 slower" in again
    # one scenario measured in fewer processes: it has no verdict, and the line says so
    one = report.render_table(results.merge(paths[:1] + paths[1:2], source_key="source"),
                              against=("vllm_unified",))
    assert "a verdict needs 3 or more processes per scenario" in one


def test_results_under_the_earlier_names_render_under_the_current_ones(tmp_path):
    path = write_fixture(tmp_path / "r.jsonl", decode_name="llama3-8b_bs16_b8_s8192_d100_bf16")
    md = report.render_table(results.load(path))
    assert f"| {DECODE} | 1.500 / 1.400 |" in md and "_bs16" not in md


def test_table_without_peers_or_ours_says_so(tmp_path):
    res = results.load(write_fixture(tmp_path / "r.jsonl"))
    assert "No `parallel` in these results" in report.render_table(res, ours="parallel")
    res.records = [r for r in res.records if not r["variant"].startswith("peer:")]
    res.header["peers"] = []
    md = report.render_table(res)
    assert "No peer measured: `python -m perf run --peers auto`" in md
    assert "| scenario | naive | static_grid |" in md
    assert "geometric mean" not in md  # naive ran one scenario: no common set to average over
    res.records = [r for r in res.records if r["variant"] != "naive"]
    res.header["variants"] = ["static_grid"]
    md = report.render_table(res)
    gm = f"{math.sqrt(0.1 * 0.3):.3f} / {math.sqrt(0.09 * 0.25):.3f}"
    assert f"| geometric mean, the 2 scenarios every column ran | {gm} |" in md


def test_table_command_writes_markdown_and_refuses_a_missing_file(tmp_path):
    path = write_fixture(tmp_path / "r.jsonl")
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "perf", "table", path, "--out", str(tmp_path / "t" / "t.md"),
                          "--against", "flashinfer_paged"],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "t" / "t.md").read_text() in out.stdout and f"| {DECODE} |" in out.stdout
    assert "`static_grid` against `flashinfer_paged`, eager" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "perf", "table", str(tmp_path / "none.jsonl")], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "none.jsonl: results file not found" in bad.stderr


def test_table_regenerates_its_place_in_a_page(tmp_path):
    """`perf table --docs FILE` writes between the suite's markers and leaves the rest alone;
    again, it replaces what it wrote; a page without the markers is one line and exit 2."""
    from perf.cli import main

    path = write_fixture(tmp_path / "r.jsonl")
    begin, end = report.docs_markers("anchor")
    page = tmp_path / "kernels.md"
    page.write_text(f"# Kernels\n\nbefore\n{begin}\nold table\n{end}\nafter\n")
    assert main(["table", path, "--docs", str(page)]) == 0
    first = page.read_text()
    assert first.startswith(f"# Kernels\n\nbefore\n{begin}\n\n") and first.endswith(f"\n{end}\nafter\n")
    assert "old table" not in first and f"| {DECODE} |" in first
    assert main(["table", path, "--docs", str(page)]) == 0 and page.read_text() == first
    page.write_text("no markers\n")
    with pytest.raises(Exception, match="--docs needs the two lines"):
        report.write_into_docs(str(page), "anchor", "table")
    assert main(["table", path, "--docs", str(page)]) == 2 and page.read_text() == "no markers\n"


@needs_interpreter
def test_peer_table_script_measures_then_writes_the_table_into_the_page(tmp_path):
    """perf/peer_table.sh end to end in the interpreter (smoke suite, eager: no GPU, so no
    peer and no graph): one `perf run` per process into its own file, then `perf table` over
    them (one here) into the page's markers; a missing archive is one line and exit 2."""
    begin, end = report.docs_markers("smoke")
    page = tmp_path / "page.md"
    page.write_text(f"{begin}\n{end}\n")
    script = os.path.join(ROOT, "perf", "peer_table.sh")
    env = dict(os.environ, PYTHON=sys.executable)
    run = subprocess.run([script, "--suite", "smoke", "--metrics", "eager", "--processes", "1", "--repeats",
                          "1", "--out", str(tmp_path / "peers"), "--docs", str(page)],
                         cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "peers" / "run-1.jsonl").exists()
    table = (tmp_path / "peers" / "table.md").read_text()
    assert "| tiny/decode/batch1-kv16/block16 |" in table and table.strip() in page.read_text()
    assert "`flashinfer_paged`" in table and "`vllm_unified`" in table  # named, absent here
    bad = subprocess.run([script, "--vllm", "nope.tar.gz"], cwd=str(tmp_path), capture_output=True, text=True,
                         env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("no such file")


@needs_interpreter
def test_perf_run_measures_peers_beside_the_variants_then_table_renders_them(tmp_path, monkeypatch, capsys):
    from perf.cli import main

    def setup(batch, device):
        out = batch.new_output()
        return (lambda: out.copy_(batch.q)), "copies q"

    monkeypatch.setitem(peers.PEERS, "copy_q", peers.Peer("copy_q", "a copy of q (stand-in)", "torch", setup))
    out = tmp_path / "run.jsonl"
    args = ["run", "--suite", "smoke", "--scenarios", "tiny/decode/*", "--variants", "static_grid",
            "--peers", "copy_q,vllm_unified", "--repeats", "2", "--samples", "2", "--out", str(out)]
    assert main(args) == 0
    res = results.load(str(out))
    assert res.header["peers"] == ["copy_q"] and res.header["peers_absent"] == {
        "vllm_unified": "vllm is not installed"}
    measured = sorted((r["variant"], r["repeat"]) for r in res.measurements() if r["metric"] == "eager")
    assert measured == [("peer:copy_q", 0), ("peer:copy_q", 1), ("static_grid", 0), ("static_grid", 1)]
    assert main(["table", str(out), "--out", str(tmp_path / "t.md")]) == 0
    md = (tmp_path / "t.md").read_text()
    assert "| scenario | static_grid | copy_q |" in md and "tiny/decode/batch1-kv16/block16" in md
    assert "`static_grid` against the fastest peer, eager" in md
    assert "Geometric mean of the ratios (eager)" in md
    assert "Peers not installed: `vllm_unified` (vllm is not installed)." in md
    assert "Wall-clock times in Triton's interpreter" in md
