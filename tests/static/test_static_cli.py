"""Static gate, what a person sees: bad input refused in one line, one screen of output,
progress in CI logs. Nothing here compiles a kernel."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from kernels import VARIANTS
from perf.static import build, report
from perf.thresholds import load_thresholds
from perf.verdicts import Finding, Verdict

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGETS = [t.name for v in load_thresholds(os.path.join(ROOT, "thresholds.yaml")).vendors.values()
           for t in v.targets]  # thresholds.yaml's, in order


def _compile(*args: str, out: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    return subprocess.run([sys.executable, "-m", "perf", "compile", "--out", out, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def misspelled_thresholds(tmp_path_factory):
    with open(os.path.join(ROOT, "thresholds.yaml")) as f:
        raw = yaml.safe_load(f)
    raw["amd"]["compile"]["static"]["new_spill"] = "ignore"  # new_spills, misspelled
    path = tmp_path_factory.mktemp("thresholds") / "thresholds.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


BAD_INPUT = [  # (options, what the one line must say)
    (["--variants", "qblock,bogus"], ["--variants qblock,bogus: unknown variant bogus", *VARIANTS]),
    (["--targets", "sm_90,sm_1"], ["--targets 'sm_90,sm_1': sm_1 not in", ", ".join(TARGETS)]),
    (["--suite", "bogus"], ["no suite 'bogus'", "--suite"]),
    (["--scenarios", "nothing*"], ["--scenarios 'nothing*' matches no scenario"]),
    (["--thresholds", "MISSPELLED"], ["amd.compile.static.new_spill: unknown key", "new_spills"]),
    (["--emit-json", "OUT/side.json", "--variants", "bogus"], ["--variants bogus: unknown variant bogus"]),
    # a rename over /dev/null would replace the device
    (["--emit-json", os.devnull], ["--emit-json /dev/null: is not a regular file"]),
    # it compiled this checkout under OUT's name
    (["--source", "OUT", "--emit-json", "OUT/side.json"], ["--source", "no kernels/ package there"]),
    (["--cache-dir", "OUT/file/cache"], ["--cache-dir OUT/file/cache", "is a file, not a directory"]),
    (["--jobs", "0"], ["argument --jobs: 0 is too small: it must be at least 1"]),
]


@pytest.mark.parametrize("options,expected", BAD_INPUT, ids=[" ".join(o) for o, _ in BAD_INPUT])
def test_bad_input_is_refused_in_one_line(options, expected, misspelled_thresholds, tmp_path):
    (tmp_path / "file").write_text("a file where a folder is wanted")
    options = [misspelled_thresholds if o == "MISSPELLED" else o.replace("OUT", str(tmp_path))
               for o in options]
    done = _compile(*options, out=str(tmp_path / "out"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for text in expected:
        assert text.replace("OUT", str(tmp_path)) in done.stderr, done.stderr
    assert "compiling" not in done.stderr  # refused before anything was compiled


def _finding(i: int, verdict: Verdict) -> Finding:
    return Finding("static", "amd", "gfx942", "qblock", f"s{i}", "_k/registers", 100, 100 + i, None, None,
                   None, None, "warn > 1.1", verdict, "")


def _head_doc() -> dict:
    metrics = {"registers": 96, "vgpr_spills": 0, "sgpr_spills": 0, "agprs": 0, "sgprs": 40,
               "shared_memory": 4096, "occupancy": 4, "compile_time_s": 1.0}
    return {"triton": "3.6.0", "entries": [
        {"variant": v, "scenario": "s", "target": t, "vendor": "amd", "kernel": "_k", "status": "ok",
         "key": f"{v}{t}", "metrics": metrics} for v in VARIANTS for t in ("sm_90", "gfx942")]}


def test_terminal_output_fits_one_screen(capsys):
    findings = [_finding(i, Verdict.WARN) for i in range(30)] + [_finding(i, Verdict.OK) for i in range(255)]
    report.terminal(findings, _head_doc(), "base a vs head b", ["a note"],
                    ["out/report.md", "out/findings.json"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "base a vs head b"
    assert lines[1] == "static gate: pass with warnings: 0 fail, 30 warn, 255 ok, 0 improved"
    assert "... and 10 more in out/report.md" in out
    # captured output is not a terminal: one plain line per finding (CI logs)
    assert out.count("\nWARN ") == report.TERMINAL_FINDINGS and "\nOK " not in out
    assert "full report: out/report.md, out/findings.json" in out
    assert len(lines) < 70, out


def test_summary_counts_serialized_wgmma_on_nvidia_only():
    """The head's summary counts the specializations whose wgmma ptxas serialized, per
    variant and target; AMD (no such metric) reads "–"."""
    nvidia = {"registers": 255, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0, "shared_memory": 4096,
              "occupancy": 8, "compile_time_s": 1.0}
    entries = [{"variant": "static_grid", "scenario": f"s{i}", "target": "sm_90", "vendor": "nvidia",
                "kernel": "_k", "status": "ok", "key": f"k{i}", "metrics": {**nvidia, "wgmma_serialized": w}}
               for i, w in enumerate((1, 0, 1))] + _head_doc()["entries"][-1:]
    rows = {(r["variant"], r["target"]): report._summary_cells(r)
            for r in report.summary_rows({"entries": entries})}
    column = report.SUMMARY_COLUMNS.index("wgmma serialized")
    assert rows[("static_grid", "sm_90")][column] == "2"
    assert rows[(entries[-1]["variant"], "gfx942")][column] == "–"


def test_plain_progress_prints_at_least_every_interval():
    stream = io.StringIO()
    with build.PlainProgress(3, "head", every=0.05, stream=stream) as bar:
        bar.advance("sm_90 _static_grid_kernel")
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "head: compiling 3 specializations 0 s"
    ticks = [line for line in lines[1:-1]]
    assert len(ticks) >= 2 and all(re.fullmatch(r"head: compiling 1/3 \(sm_90 _static_grid_kernel\) \d+ s", t)
                                   for t in ticks), lines
    assert lines[-1].startswith("head: compiled 1/3")


def test_progress_is_plain_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert isinstance(build.progress(5), build.PlainProgress)
    assert not isinstance(build.progress(5, quiet=True), build.PlainProgress)
