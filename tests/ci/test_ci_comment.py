"""The sticky PR comment: rendered from findings files as the gates write them.

The fixtures are written by the gates' own writers (perf.latency.ab.write_outputs,
perf.static.gate.write_doc), so a change of the findings format shows up here rather
than as a broken comment on a pull request.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perf.ci import comment
from perf.ci.jobs import CPU_JOB, TRUST_LABEL, gpu_job_name
from perf.verdicts import Finding, Verdict

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
RUN = "https://github.com/org/kernels/actions/runs/42"
HOSTILE = "<img src=x onerror=alert(1)> @org/maintainers [click](https://evil.example) | `x`"


def latency(vendor: str, variant: str, scenario: str, verdict: Verdict, ratio: float,
            note: str = "") -> Finding:
    return Finding("latency", vendor, "NVIDIA H100 80GB HBM3" if vendor == "nvidia" else "AMD MI300X",
                   variant, scenario, "graph", 0.1, 0.1 * ratio, ratio, ratio - 0.01, ratio + 0.01, 0.001,
                   "warn > 1.03, fail > 1.05", verdict, note)


def static(vendor: str, target: str, metric: str, verdict: Verdict, base: float, head: float) -> Finding:
    return Finding("static", vendor, target, "paged_v2", "decode_b8", f"attn_kernel/{metric}", base, head,
                   head / base if base else None, None, None, None, "warn > 1.10", verdict, "")


@pytest.fixture(scope="module")
def findings_files(tmp_path_factory) -> tuple[Path, Path]:
    from perf.latency.ab import write_outputs
    from perf.static.gate import write_doc

    out = tmp_path_factory.mktemp("results")
    rows = [latency("nvidia", "paged_v2", "decode_fail", Verdict.FAIL, 1.31, "slower, significant")]
    rows += [latency("nvidia", "paged_v1", f"decode_b{i}", Verdict.WARN, 1.04) for i in range(29)]
    rows += [latency("nvidia", "paged_v1", "hostile", Verdict.WARN, 1.035, HOSTILE)]
    rows += [latency("nvidia", "paged_v1", f"ok_{i}", Verdict.OK, 1.0) for i in range(50)]
    rows += [latency("nvidia", "paged_v1", "faster", Verdict.IMPROVED, 0.8)]
    rows += [latency("amd", "paged_v1", "amd_only_case", Verdict.FAIL, 1.5)]
    write_outputs(str(out / "ab"), rows, "Latency A/B", [], {"vendor": "nvidia"})
    lat = out / "ab/findings.json"
    doc = json.loads(lat.read_text())
    doc["findings"][0]["min_detectable"] = 1.021  # a gate that reports it; the others do not
    lat.write_text(json.dumps(doc))

    st = [static("nvidia", "sm_90", "spills", Verdict.FAIL, 0, 16),
          static("nvidia", "sm_90", "registers", Verdict.WARN, 128, 168),
          static("nvidia", "sm_90", "shared_memory", Verdict.IMPROVED, 65536, 32768),
          static("nvidia", "sm_90", "occupancy", Verdict.OK, 8, 8),
          static("amd", "gfx942", "registers", Verdict.FAIL, 96, 200)]
    write_doc(str(out / "static/findings.json"), {"findings": [f.to_dict() for f in st]})
    return lat, out / "static/findings.json"


def rows_of(files) -> list[comment.Row]:
    return [r for f in files for r in comment.load(str(f))]


def table_rows(body: str, section: str) -> list[str]:
    part = body.split(f"### {section}", 1)[1].split("\n### ", 1)[0]
    return [line for line in part.splitlines() if line.startswith("| ") and not line.startswith("| verdict")]


def test_comment_has_marker_verdict_capped_rows_and_links(findings_files):
    body = comment.render(rows_of(findings_files), "nvidia", RUN, commit="0123456789abcdef")
    assert body.splitlines()[0] == comment.marker("nvidia") == "<!-- perf-gate:nvidia -->"
    assert body.count("<!-- perf-gate:") == 1
    assert "**FAIL**" in body.splitlines()[1]
    assert "2 fail, 31 warn, 51 ok, 2 improved (82 latency and 4 static findings)" in body
    assert "`0123456789`" in body

    lat = table_rows(body, "Latency: failing and warned cases")
    assert len(lat) == comment.MAX_ROWS
    assert lat[0].startswith("| **fail** | `paged_v2` | `decode_fail` | `graph` | 1.310 | [1.300, 1.320] "
                             "| 1.021 | – | slower, significant |")  # –: no limits in these findings
    assert all(" | – | " in row for row in lat[1:])  # no min_detectable in those findings
    assert f"…and {31 - comment.MAX_ROWS} more: see the [artifacts]({RUN}#artifacts)." in body

    st = table_rows(body, "Static gate: changes")
    assert [r.split(" | ")[0] for r in st] == ["| **fail**", "| warn", "| improved"]  # ok: no change
    assert "| `sm_90` | `paged_v2` | `decode_b8` | `attn_kernel/spills` | 0 | 16 |" in st[0]
    assert "gfx942" not in body and "amd_only_case" not in body  # the other vendor's comment has those
    assert f"[run]({RUN})" in body and f"[step summaries]({RUN})" in body
    assert len(body.encode()) < comment.BUDGET


def test_amd_comment_shows_amd_findings_only(findings_files):
    body = comment.render(rows_of(findings_files), "amd", RUN)
    assert body.startswith("<!-- perf-gate:amd -->\n")
    assert "amd_only_case" in body and "gfx942" in body and "decode_fail" not in body and "sm_90" not in body


def test_text_from_the_pull_request_cannot_inject_markup(findings_files):
    body = comment.render(rows_of(findings_files), "nvidia", RUN, max_rows=100)
    hostile = next(line for line in body.splitlines() if "`hostile`" in line)
    assert re.search(r"(?<!\\)[<>]", hostile) is None and "\\<img" in hostile  # escaped: text, not HTML
    assert "@org" not in hostile and "&#64;org" in hostile
    assert "[click](" not in hostile and "\\[click\\]\\(" in hostile
    assert hostile.count(" | ") == 8  # the `|` in the note did not add a column
    assert comment.code("a`b|c") == "`a'b\\|c`"
    assert comment.code("x" * 500).endswith("…`") and len(comment.code("x" * 500)) == comment.CELL_CHARS + 2


def test_body_stays_under_the_budget_whatever_the_findings(tmp_path):
    huge = [comment.Row("latency", "nvidia", "gpu", "v" * 300, f"s{i}" + "x" * 300, "m" * 300, Verdict.FAIL,
                        ratio=2.0, note="n" * 5000) for i in range(5000)]
    body = comment.render(huge, "nvidia", RUN)
    assert len(body.encode()) <= comment.BUDGET < comment.GITHUB_LIMIT
    assert "more: see the [artifacts]" in body and body.startswith(comment.marker("nvidia"))


def jobs_doc(gpu: str, cpu: str = "success", failed_step: str | None = None) -> dict:
    steps = [{"name": "GPU correctness suite (nox -s tests)", "conclusion": "failure"}] if failed_step else []
    return {"total_count": 2, "jobs": [
        {"id": 11, "name": CPU_JOB, "conclusion": cpu, "html_url": f"{RUN}/job/11", "steps": []},
        {"id": 12, "name": gpu_job_name("nvidia", "nvidia-h100"), "conclusion": gpu,
         "html_url": f"{RUN}/job/12", "steps": steps}]}


def test_job_conclusions_from_github_decide_what_the_comment_says(findings_files):
    lat, st = findings_files
    static_only = comment.load(str(st))
    red = comment.jobs_from(jobs_doc("failure", failed_step="x"))
    failed = comment.render(static_only, "nvidia", RUN, red)
    assert "**FAIL**" in failed.splitlines()[1]
    assert (f"- GPU job (nvidia): [failure]({RUN}/job/12) — failed: `GPU correctness suite (nox -s tests)`"
            in failed)
    assert f"[GPU job summary]({RUN}#summary-12)" in failed
    assert f"[CPU job summary]({RUN}#summary-11)" in failed

    fork = comment.render([], "nvidia", RUN, comment.jobs_from(jobs_doc("skipped")))
    assert "**latency not measured**" in fork and f"`{TRUST_LABEL}` label" in fork
    assert "No latency findings in this run." in fork and "No static findings in this run." in fork
    cpu_red = comment.render([], "nvidia", RUN, comment.jobs_from(jobs_doc("skipped", cpu="failure")))
    assert "the CPU job did not pass (failure), so no GPU job started" in cpu_red

    ok_rows = [r for r in comment.load(str(lat)) if r.verdict in (Verdict.OK, Verdict.IMPROVED)]
    passed = comment.render(ok_rows, "nvidia", RUN, comment.jobs_from(jobs_doc("success")))
    assert "**pass**" in passed.splitlines()[1] and "### Latency: failing and warned cases\n\nNone." in passed


def test_cli_writes_the_body_and_refuses_bad_input_in_one_line(findings_files, tmp_path, capsys):
    out = tmp_path / "body.md"
    args = [*map(str, findings_files), "--vendor", "nvidia", "--run-url", RUN, "--out", str(out)]
    assert comment.cli(args) == 0
    assert out.read_text().startswith("<!-- perf-gate:nvidia -->")
    assert comment.cli([str(tmp_path / "missing.json"), "--vendor", "nvidia"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.json: findings file not found" in err[0]
    bad = tmp_path / "bad.json"
    good = json.loads(findings_files[0].read_text())["findings"][0]
    bad.write_text(json.dumps({"findings": [good, {**good, "verdict": "meh"}]}))
    assert comment.cli([str(bad), "--vendor", "nvidia"]) == 2
    assert "findings[1].verdict is 'meh', not one of ok, improved, warn, fail" in capsys.readouterr().err
    bad.write_text(json.dumps({"findings": [{"gate": "latency", "verdict": "fail"}]}))
    assert comment.cli([str(bad), "--vendor", "nvidia"]) == 2
    assert "findings[0] has no 'base'" in capsys.readouterr().err
    assert comment.cli([*map(str, findings_files), "--vendor", "nvidia", "--out", str(tmp_path)]) == 2
    assert "--out" in capsys.readouterr().err  # a directory: refused before anything is read


def test_comment_links_the_nightly_dashboard(findings_files, tmp_path):
    from perf.ci.jobs import dashboard_url

    # GitHub Pages' address of a project site by default; the repository variable overrides it
    assert dashboard_url("Org/kernels") == "https://org.github.io/kernels/"
    assert dashboard_url("Org/kernels", "https://perf.example.org/k") == "https://perf.example.org/k/"
    assert dashboard_url("") == dashboard_url("not-a-repo") == ""
    out = tmp_path / "body.md"
    args = [*map(str, findings_files), "--vendor", "amd", "--run-url", RUN, "--out", str(out)]
    assert comment.cli([*args, "--repo", "org/kernels", "--dashboard-url", ""]) == 0
    assert "[nightly dashboard](https://org.github.io/kernels/amd/nightly/index.html)" in out.read_text()
    assert comment.cli([*args, "--repo", "org/kernels", "--dashboard-url", "https://perf.example.org"]) == 0
    assert "(https://perf.example.org/amd/nightly/index.html)" in out.read_text()
    assert comment.cli(args) == 0 and "nightly dashboard" not in out.read_text()  # nothing to link
    assert comment.cli([*args, "--dashboard-url", "javascript:alert(1)"]) == 2


def test_renderer_needs_only_the_standard_library():
    """The comment workflow runs it with the hosted runner's bare python3."""
    blocked = ["yaml", "numpy", "scipy", "torch", "triton", "rich", "matplotlib"]
    code = (f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
            "import perf.ci.comment, perf.ci.jobs")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_red_rows_show_the_heads_percent_of_the_hw_limit(tmp_path):
    """A gate's findings.json keeps the limits and each scenario's work (perf/roofline.py section):
    the red rows show the head's median against them, the bound named; a case without work, "–"."""
    from perf.latency.ab import write_outputs

    rows = [latency("nvidia", "paged_v2", "decode_fail", Verdict.FAIL, 1.31),  # head 0.131 ms
            latency("nvidia", "paged_v2", "unknown_work", Verdict.WARN, 1.04)]
    # 2.62e8 bytes / (4 TB/s x 0.131 ms) = 50 %; 1e9 flops / (800 TFLOP/s x 0.131 ms) under 1 %
    section = {"limits": {"copy_tb_s": 4.0, "matmul_tflop_s": 800.0}, "measured": "2026-11-28", "why": None,
               "work": {"decode_fail": [262_000_000, 1_000_000_000]}}
    write_outputs(str(tmp_path), rows, "Latency A/B", [], {"vendor": "nvidia", "roofline": section})
    body = comment.render(comment.load(str(tmp_path / "findings.json")), "nvidia", RUN)
    assert "| smallest detectable | head, % of HW limit | note |" in body
    fail = next(line for line in body.splitlines() if "`decode_fail`" in line)
    assert fail.endswith("| – | 50 % memory | – |")
    warn = next(line for line in body.splitlines() if "`unknown_work`" in line)
    assert warn.endswith("| – | – | – |")
    report = (tmp_path / "report.md").read_text()
    assert "| head, % of HW limit |" in report and "| 0.131 | 50 % memory | 1.310 |" in report
    assert "this GPU's copy 4 TB/s and bf16 matmul 800 TFLOP/s, measured 2026-11-28" in report
