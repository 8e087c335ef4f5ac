"""Report rendering on synthetic findings: order, folding, job summary, plot, `report` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perf.report import headline, publish, render_markdown
from perf.verdicts import Finding, Verdict

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _f(scenario, verdict, ratio, note="", variant="qblock"):
    return Finding("latency", "nvidia", "NVIDIA H100 80GB HBM3", variant, scenario, "eager", 0.1, 0.1 * ratio,
                   ratio, ratio - 0.01, ratio + 0.01, 0.0004, "warn > 1.03, fail > 1.05", verdict, note)


FINDINGS = [
    _f("ok_a", Verdict.OK, 1.001),
    _f("fail_small", Verdict.FAIL, 1.06),
    _f("improved", Verdict.IMPROVED, 0.9),
    _f("fail_big", Verdict.FAIL, 1.30, note="a | pipe"),
    _f("warn", Verdict.WARN, 1.04),
]


def test_markdown_worst_first_with_passing_rows_folded():
    md = render_markdown(FINDINGS, "Latency A/B on NVIDIA H100 (nvidia)", notes=["base abc vs head def"])
    lines = md.splitlines()
    assert lines[0] == "## Latency A/B on NVIDIA H100 (nvidia)"
    assert lines[2] == "**FAIL**: 2 fail, 1 warn, 1 ok, 1 improved"
    order = [s for s in ("fail_big", "fail_small", "warn", "ok_a", "improved") if s in md]
    positions = [md.index(f"| {s} |") for s in order]
    assert positions == sorted(positions) and len(order) == 5
    assert md.index("<details>") > md.index("| warn |") and md.index("<details>") < md.index("| ok_a |")
    row = next(line for line in lines if "| fail_big |" in line)
    assert "| **FAIL** | nvidia | NVIDIA H100 80GB HBM3 | qblock |" in row
    assert "| 1.300 | [1.290, 1.310] | 4.0e-04 | warn > 1.03, fail > 1.05 | a \\| pipe |" in row
    assert "- base abc vs head def" in md


def test_headline_states():
    assert headline([_f("a", Verdict.OK, 1.0)]).startswith("**pass**")
    assert headline([_f("a", Verdict.WARN, 1.04)]).startswith("**pass with warnings**")
    assert headline([]).startswith("**nothing measured**")  # never a pass


def test_all_passing_has_no_fold():
    md = render_markdown([_f("a", Verdict.OK, 1.0)], "t")
    assert "<details>" not in md and "| a |" in md


def test_publish_appends_to_github_step_summary(tmp_path, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    publish("## hello")
    assert summary.read_text() == "earlier step\n## hello\n"
    assert "## hello" in capsys.readouterr().out


def test_report_command_renders_findings_and_exits_by_verdict(tmp_path):
    doc = {"schema_version": 1, "kind": "findings", "title": "T", "notes": [],
           "findings": [f.to_dict() for f in FINDINGS]}
    p = tmp_path / "findings.json"
    p.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, "-m", "perf", "report", str(p), "--plot", str(tmp_path / "p.png")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "**FAIL**: 2 fail" in out.stdout and (tmp_path / "p.png").exists()
    doc["schema_version"] = 99
    p.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, "-m", "perf", "report", str(p)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "schema_version 99" in out.stderr
