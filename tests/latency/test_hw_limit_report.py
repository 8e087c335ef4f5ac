"""The latency gate's report: each head time's % of the HW limit, kept in findings.json so that
`perf report` renders it again; the static gate's report (no limits) keeps its columns."""

from __future__ import annotations

import argparse
import json

from perf import report, roofline
from perf.latency import compare
from perf.verdicts import Finding, Verdict

SCENARIO = "llama3-8b/decode/batch128-kv8192/block16"
# synthetic limits and work: 8e8 bytes in 0.4 ms at 4 TB/s is 50 %; 6.4e10 flops at 800 TFLOP/s is 20 %
SECTION = {"limits": {"copy_tb_s": 4.0, "matmul_tflop_s": 800.0}, "measured": "2026-11-28T01:02:03+00:00",
           "why": None, "work": {SCENARIO: [800_000_000, 64_000_000_000]}}


def finding(scenario: str, head: float | None, verdict: Verdict = Verdict.OK,
            gate: str = "latency") -> Finding:
    return Finding(gate, "nvidia", "NVIDIA H200", "static_grid", scenario, "graph", 0.4, head,
                   None if head is None else head / 0.4, None, None, None, "warn > 1.03", verdict)


def test_the_column_is_the_head_against_the_limits_the_bound_named():
    sheet = roofline.read_section(SECTION, "findings.json")
    md = report.render_markdown([finding(SCENARIO, 0.4, Verdict.FAIL), finding(SCENARIO, 8.0),
                                 finding("no-work", 0.4, Verdict.WARN), finding(SCENARIO, None)],
                                "Latency A/B", [], sheet)
    header = next(line for line in md.splitlines() if line.startswith("| verdict |"))
    assert "| base | head | head, % of HW limit | ratio |" in header
    rows = {line for line in md.splitlines() if line.startswith("| ")}
    assert any("| 0.4 | 0.4 | 50 % memory | 1.000 |" in r and "**FAIL**" in r for r in rows)
    # 6.4e10 flops / (8e14 x 8e-3 s) = 1 %, 8e8 / (4e12 x 8e-3) = 2.5 % (shown rounded): memory the larger
    assert any("| 0.4 | 8 | 2 % memory | 20.000 |" in r for r in rows)
    assert any("| no-work |" in r and "| 0.4 | 0.4 | – | 1.000 |" in r for r in rows)
    assert any("| 0.4 | – | – | – |" in r for r in rows)  # not measured on head: no time, no share
    assert "- % of the hardware limit: the larger of bytes / (copy bandwidth x time)" in md
    assert "copy 4 TB/s and bf16 matmul 800 TFLOP/s, measured 2026-11-28" in md


def test_without_limits_the_column_says_dash_and_why():
    sheet = roofline.read_section({"limits": None, "why": "no GPU measured: Triton's interpreter",
                                   "work": SECTION["work"]}, "findings.json")
    md = report.render_markdown([finding(SCENARIO, 0.4)], "Latency A/B", [], sheet)
    assert "| 0.4 | 0.4 | – | 1.000 |" in md
    assert "- % of the hardware limit: – (no GPU measured: Triton's interpreter)" in md


def test_a_report_without_a_section_keeps_its_columns():
    """The static gate and the nightly's alert render findings without limits: no new column."""
    md = report.render_markdown([finding("x", 0.4, gate="static")], "Static", [])
    assert "% of HW limit" not in md and "hardware limit" not in md
    assert next(line for line in md.splitlines() if line.startswith("| verdict |")) == \
        "| " + " | ".join(report._COLUMNS) + " |"


def test_findings_json_keeps_the_section_and_perf_report_renders_it_again(tmp_path, capsys):
    md = compare.write_outputs(str(tmp_path), [finding(SCENARIO, 0.4, Verdict.FAIL)], "Latency A/B", [],
                               {"vendor": "nvidia", "roofline": SECTION})
    assert "| 0.4 | 0.4 | 50 % memory |" in md
    doc = json.loads((tmp_path / "findings.json").read_text())
    assert doc["roofline"] == SECTION
    code = compare.report_command(argparse.Namespace(findings=str(tmp_path / "findings.json"), plot=None))
    assert code == 1 and "| 0.4 | 0.4 | 50 % memory |" in capsys.readouterr().out
