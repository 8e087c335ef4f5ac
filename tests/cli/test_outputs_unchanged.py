"""Nothing changes for a user: every `python -m perf` command's output, against golden files.

Each case below is one invocation: `--help` of the top level and of every command; what runs on
a CPU in Triton's interpreter (`perf run --suite smoke`, then `table`, `compare`, `report`,
`annotations` of its output; the latency gate's change plan, a gate that times nothing and an
A/A gate on one case; the static gate on sm_90; `perf why`; `compile-calibrate`; the nightly's
CPU run, `alert` and `simulate`; `grid`, `gpu-job --dry-run`, `workflows --check`, `noise`,
`comment`); the one-line refusal of every GPU-only command; and bad input for every command
(unknown suite, variant, ref or vendor, missing or malformed files). What the golden file
tests/data/outputs/<case>.txt holds is the case's argv, exit code, stdout, stderr and the
files it wrote: JSON, YAML and JSON Lines by structure (keys, list lengths, types, the values
of record kinds and verdicts, counts), Markdown and text verbatim, images by name.

The commands run in copies of a throwaway repository of the harness (tests/outputs_capture.py:
commit c0 the harness, c1 the nightly's, workflows' and GPU job's files, c2 one heuristic branch
of NVIDIA's short prefills moved from 4 to 8 warps, c3 a docs-only change; HEAD is c3), one
process per group of cases (PERF_OUTPUTS_ALONE=1: one process per case), with the environment of
a shell without a GPU, CI variables or colours (COLUMNS=80 for --help, 200 elsewhere so that rich
wraps no line whose length a temporary path decides). Fixture files (tests/outputs_capture.py,
written as raw JSON, so they also pin the formats the commands read): synthetic results of an
H100 (base and head: one case 1.5x slower, one 1.04x, one 0.6x), an A/A gate's results of 3
processes, a nightly history of four commits with a step (in the nightly store's layout,
nights/<runner>/<date>/, where `alert --config` finds it without --data), a copy of
thresholds.yaml whose NVIDIA latency and compile-time ratios and noise rule's floor are 99/100
(so that the interpreter's noise never decides an A/A verdict, nor what `perf noise` derives
from it), a broken thresholds file, a header-only results file, a file that is not JSON.

Normalisation, in this order (tests/outputs_capture.py `normalise`); everything else is kept
verbatim (wording, column headers, verdict words, exit codes, file names, counts of cases):
- progress lines said every few seconds (the gate's "still measuring", perf run's per-repeat
  lines, the static gate's "compiling N/M", each side's own compile progress): dropped first, as
  printed, since their number depends on the machine's speed;
- paths: the group's repository copy <repo>, its scratch folder <out>, its TMPDIR <tmp>, the
  fixtures <fixtures>, the capture's folder <work>, this checkout <root>, the interpreter
  <python>, its prefix <venv>; temporary folders' random names under <tmp> become <rand>;
- the repository's commits (full or abbreviated, 7 to 40 hex digits) <c0> .. <c3>;
- the installed torch, Triton and Python versions <torch-version>, <triton-version>,
  <python-version>; the hostname <host>; `pid N` pid <pid>;
- dates and times <datetime>, <date>, <time> (also rich's elapsed 0:00:03); durations
  ("1.4 s", "0.2 minutes", the gate's "[  0.1 min]") <dur>;
- the static gate's split of compiles between its two sides, which race for them ("compiled
  <n> (base) + <n> (head)");
- cases whose numbers are measurements: "floats" (the static gate: compile times) masks every
  decimal number <n> but the thresholds (`warn > 1.1`), and every number alone in a compile_time
  row's cells (CPU seconds in 10 ms clock ticks: a whole second prints as "1"); "latency" (what
  the interpreter timed) also every number alone in a table cell (latencies print as integers from
  1000 ms), the lengths of `samples` lists (a time budget decides them), and the note an A/A run's noise
  earns when it happens to be significant ("slower, significant, within the warn threshold");
  in both, the rows of every Markdown table are sorted (findings are listed by their ratio);
- rich tables: runs of spaces and of rule characters collapsed to one, the centred title
  stripped (column widths follow the masked numbers); trailing spaces of every line.

Regenerate the golden files (after a change that is meant to change what a user sees; review
the diff): `PERF_REGEN_OUTPUTS=1 python -m pytest tests/cli/test_outputs_unchanged.py`. Not
covered: `toolchain` beyond its refusals (it installs another Triton from the package index),
the measured runs of `bisect` (a latency gate per commit: tens of seconds), `tune`, `calibrate`,
`host-cost`, `selftest` (GPU only: their refusals are covered), `issues post` beyond its refusals
(it needs a confirmed alert and GitHub), `nightly save/checkout/heartbeat` (a remote data branch;
their refusal quotes git's own words, which change with git's version), the `python -m
perf.<module>` entries (not commands a user types). The outputs were captured with torch's CPU
build and a NumPy the interpreter runs under (tests/interpreter_support.py); elsewhere the module
is skipped.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from pathlib import Path

import outputs_capture as capture
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from interpreter_support import NUMPY_BREAKS_INTERPRETER
from outputs_capture import Case, Group

CAPTURED_HERE = not (torch.version.cuda or torch.version.hip or NUMPY_BREAKS_INTERPRETER)
NOT_HERE = ("the golden outputs were captured with torch's CPU build, in Triton's interpreter (a GPU build "
            "or NumPy >= 2.4 prints other refusals)")
# one xdist worker takes every case: the capture runs once, and no other worker idles on its lock
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("outputs"),
              pytest.mark.skipif(not CAPTURED_HERE, reason=NOT_HERE)]

GOLDEN = capture.ROOT / "tests" / "data" / "outputs"
REGEN = os.environ.get("PERF_REGEN_OUTPUTS") == "1"

COMMANDS = (  # perf/cli.py's COMMANDS, in its order (test_every_command_and_golden_file_has_a_case)
    "run", "compare", "gate", "report", "table", "compile", "compile-calibrate", "why", "workflows",
            "nightly", "alert", "host-cost", "noise", "calibrate", "tune", "bisect", "toolchain", "selftest",
            "comment", "annotations", "grid", "gpu-job", "issues")
# one process each; --help at 80 columns, argparse's width where the output is not a terminal
GROUPS = [Group("help", columns=80), Group("cli"), Group("run"), Group("gate"),
          Group("compile", interpreter=False)]
LAX = "{fx}/thresholds-lax.yaml"  # NVIDIA's latency, noise floor and compile-time ratios at 99/100
LATENCY = "latency"  # a case's numbers are timings: masked (tests/outputs_capture.py normalise)
AA_GATE = ["gate", "--thresholds", LAX, "--suite", "smoke", "--variants", "naive", "--scenarios",
           "tiny/decode/*", "--metrics", "eager", "--samples", "1", "--repeats", "2", "--base-ref", "HEAD",
           "--head-ref", "HEAD", "--all-cases", "--lock-timeout", "600", "--out", "{out}/aa"]
# the one case whose launch c2 changed (static_grid's short prefill: 8 warps), so that the static gate's two
# sides share no compile: which side compiles a shared one, and whether the other finds it cached, is a race
MIXED = ["--suite", "smoke", "--variants", "static_grid", "--scenarios", "tiny/mixed50/batch2-kv16/block16"]
# the latency gate's change plan as on an H100, without a GPU
PLAN_ONLY = ["gate", "--plan-only", "--suite", "smoke", "--vendor", "nvidia"]
TINY = "tiny/decode/batch1-kv16/block16"  # of the smoke suite (perf/suites.yaml)
PR_SCENARIO = "llama3-8b/decode/batch1-kv128/block16"  # of the pr suite: GPU-sized


def _cases(group: str, rows) -> list[Case]:
    return [Case(id_, tuple(argv), group, **extra) for id_, argv, *more in rows for extra in (more or [{}])]


HELP = _cases("help", [("perf-no-command", []), ("perf-help", ["--help"]), ("perf-unknown-command", ["rum"]),
                       ("perf-option-before-command", ["--thresholds", "x.yaml", "run"])]
              + [(f"{name}-help", [name, "--help"]) for name in COMMANDS])

RUN = _cases("run", [
    ("run-smoke", ["run", "--suite", "smoke", "--out", "{out}/run.jsonl"],
     {"files": ("{out}/run.jsonl",), "measured": LATENCY, "cost": 16}),
    ("table-run", ["table", "{out}/run.jsonl", "--out", "{out}/table.md"],
     {"files": ("{out}/table.md",), "measured": LATENCY}),
    ("compare-run-without-vendor", ["compare", "{out}/run.jsonl", "{out}/run-again.jsonl"],
     {"copies": (("{out}/run.jsonl", "{out}/run-again.jsonl"),)}),
    ("compare-run-same-file", ["compare", "{out}/run.jsonl", "{out}/run.jsonl", "--vendor", "nvidia"]),
    ("compare-run-aa", ["compare", "{out}/run.jsonl", "{out}/run-again.jsonl", "--vendor", "nvidia",
                        "--out", "{out}/cmp"], {"files": ("{out}/cmp",), "measured": LATENCY, "cost": 2}),
    ("report-run", ["report", "{out}/cmp/findings.json", "--plot", "{out}/plot.png"],
     {"files": ("{out}/plot.png",), "measured": LATENCY}),
    ("annotations-run", ["annotations", "{out}/cmp/findings.json"], {"measured": LATENCY}),
    ("nightly-run-cpu", ["nightly", "run", "--allow-cpu", "--suite", "smoke", "--variants", "naive",
                         "--scenarios", "tiny/decode/*", "--no-asv", "--no-compile-time", "--out",
                         "{out}/nightly"],
     {"files": ("{out}/nightly",), "measured": LATENCY, "cost": 5}),
    ("alert-one-night", ["alert", "--out", "{out}/alert"], {"files": ("{out}/alert",), "measured": LATENCY}),
])

GATE = _cases("gate", [
    ("gate-plan-only-heuristic", [*PLAN_ONLY, "--base-ref", "HEAD~2", "--out", "{out}/plan2"],
     {"files": ("{out}/plan2",), "cost": 6}),
    ("gate-plan-only-docs", [*PLAN_ONLY, "--base-ref", "HEAD~1", "--out", "{out}/plan1"],
     {"files": ("{out}/plan1",), "cost": 6}),
    ("gate-planned-unchanged", ["gate", "--suite", "smoke", "--metrics", "eager", "--base-ref", "HEAD~1",
                                "--plan", "{out}/plan1/plan.json", "--out", "{out}/unchanged"],
     {"files": ("{out}/unchanged",), "cost": 4}),
    ("gate-plan-of-another-base", ["gate", "--suite", "smoke", "--metrics", "eager", "--base-ref", "HEAD~1",
                                   "--plan", "{out}/plan2/plan.json", "--out", "{out}/other"]),
    ("gate-aa-interpreter", AA_GATE, {"files": ("{out}/aa",), "measured": LATENCY, "cost": 12}),
    ("gate-aa-reused", AA_GATE, {"measured": LATENCY, "cost": 2}),
    ("noise-aa-interpreter", ["noise", "{out}/aa", "--thresholds", LAX, "--vendor", "nvidia"],
     {"measured": LATENCY}),
    ("report-aa", ["report", "{out}/aa/findings.json", "--thresholds", LAX], {"measured": LATENCY}),
    ("comment-aa", ["comment", "--vendor", "nvidia", "{out}/aa/findings.json"], {"measured": LATENCY}),
])

COMPILE = _cases("compile", [
    ("compile-gate-heuristic", ["compile", "--thresholds", LAX, "--base-ref", "HEAD~2", *MIXED, "--targets",
                                "sm_90", "--cache-dir", "{out}/cache", "--out", "{out}/static"],
     {"files": ("{out}/static",), "measured": "floats", "cost": 15}),
    ("why-heuristic", ["why", "--base-ref", "HEAD~2", "--head-ref", "HEAD", *MIXED, "--cache-dir",
                       "{out}/cache", "--out", "{out}/why"], {"files": ("{out}/why",), "cost": 2}),
    ("compile-emit-json", ["compile", *MIXED, "--targets", "sm_90", "--cache-dir", "{out}/cache",
                           "--emit-json", "{out}/side.json", "--results", "{out}/side.jsonl"],
     {"files": ("{out}/side.json", "{out}/side.jsonl"), "measured": "floats"}),
    ("compile-unknown-variant", ["compile", "--variants", "qblock,bogus", "--out", "{out}/x"]),
    ("compile-unknown-target", ["compile", "--targets", "sm_90,sm_1", "--out", "{out}/x"]),
    ("compile-unknown-suite", ["compile", "--suite", "bogus", "--out", "{out}/x"]),
    ("compile-no-scenario", ["compile", "--scenarios", "nothing*", "--out", "{out}/x"]),
    ("compile-jobs-0", ["compile", "--jobs", "0", "--out", "{out}/x"]),
    ("compile-unknown-base-ref", ["compile", "--base-ref", "no-such-ref", "--out", "{out}/x"]),
    ("compile-source-without-kernels", ["compile", "--source", "{fx}/empty", "--emit-json", "{out}/x.json"]),
    ("compile-cache-dir-under-a-file", ["compile", "--cache-dir", "{fx}/a-file/cache", "--out", "{out}/x"]),
    ("compile-emit-json-dev-null", ["compile", "--emit-json", "/dev/null"]),
    ("compile-calibrate-unknown-suite", ["compile-calibrate", "--suite", "bogus"]),
    ("compile-calibrate-unknown-target", ["compile-calibrate", "--targets", "sm_1"]),
    ("why-unknown-variant", ["why", "--suite", "smoke", "--scenarios", TINY, "--variants", "bogus", "--out",
                             "{out}/x"]),
    ("why-no-scenario", ["why", "--suite", "smoke", "--scenarios", "nothing*", "--out", "{out}/x"]),
    ("why-unknown-base-ref", ["why", "--suite", "smoke", "--scenarios", TINY, "--base-ref", "nope", "--out",
                              "{out}/x"]),
])

SYNTHETIC = _cases("cli", [
    ("table-synthetic", ["table", "{fx}/base.jsonl", "--out", "{out}/t.md"], {"files": ("{out}/t.md",)}),
    ("compare-synthetic", ["compare", "{fx}/base.jsonl", "{fx}/head.jsonl", "--out", "{out}/cmp"],
     {"files": ("{out}/cmp",), "cost": 2}),
    ("report-synthetic", ["report", "{out}/cmp/findings.json"]),
    ("comment-synthetic", ["comment", "--vendor", "nvidia", "{out}/cmp/findings.json", "--run-url",
                           "https://github.com/owner/name/actions/runs/1", "--commit", "b" * 40, "--repo",
                           "owner/name"]),
    ("annotations-synthetic", ["annotations", "{out}/cmp/findings.json", "--root", "{repo}"]),
    ("noise-synthetic", ["noise", "{fx}/aa"]),
    ("noise-write", ["noise", "{fx}/aa", "--write", "{out}/calibration.yaml"],
     {"files": ("{out}/calibration.yaml",)}),
    ("alert-synthetic-step", ["alert", "--config", "{fx}/nightly/asv.conf.json", "--out", "{out}/alert"],
     {"files": ("{out}/alert",)}),
    ("nightly-simulate", ["nightly", "simulate", "--seed", "179", "--nights", "60", "--out", "{out}/sim"],
     {"files": ("{out}/sim/simulation.json",), "cost": 10}),
    ("grid-docs-only", ["grid", "--base-ref", "HEAD~1"]),
    ("grid-heuristic", ["grid", "--base-ref", "HEAD~2"]),
    ("gpu-job-dry-run", ["gpu-job", "--vendor", "nvidia", "--dry-run", "--base-ref", "HEAD~2"]),
    ("gpu-job-verify-torch", ["gpu-job", "--vendor", "nvidia", "--verify-torch"]),
    ("workflows-check", ["workflows", "--check"]),
    ("calibrate-launch-cost-threshold", ["calibrate", "--launch-cost-threshold"]),
    ("gate-no-gpu-ok", ["gate", "--no-gpu-ok"]),
    ("gate-no-gpu-ok-smoke", ["gate", "--no-gpu-ok", "--suite", "smoke", "--base-ref", "HEAD~1"]),
])

REFUSED_ON_A_CPU = _cases("cli", [
    ("run-vendor-without-gpu", ["run", "--vendor", "nvidia", "--out", "{out}/r.jsonl"]),
    ("run-pr-on-cpu", ["run", "--out", "{out}/r.jsonl"]),
    ("run-graph-on-cpu", ["run", "--suite", "smoke", "--metrics", "graph", "--out", "{out}/r.jsonl"]),
    ("gate-pr-on-cpu", ["gate", "--suite", "pr", "--base-ref", "HEAD", "--out", "{out}/ab"]),
    ("gate-graph-on-cpu", ["gate", "--suite", "smoke", "--metrics", "graph", "--base-ref", "HEAD", "--out",
                           "{out}/ab"]),
    ("calibrate-on-cpu", ["calibrate", "--suite", "smoke"]),
    ("host-cost-on-cpu", ["host-cost", "--suite", "smoke"]),
    ("selftest-on-cpu", ["selftest", "--suite", "smoke"]),
    ("selftest-summarize-nothing", ["selftest", "--summarize", "--out", "{out}/st"]),
    ("tune-on-cpu", ["tune"]),
    ("nightly-run-on-cpu", ["nightly", "run"]),
    ("bisect-pr-on-cpu", ["bisect", "HEAD~1", "HEAD", "--scenario", PR_SCENARIO]),
    ("bisect-graph-on-cpu", ["bisect", "HEAD~1", "HEAD", "--scenario", TINY]),
    ("compile-calibrate-interpreter", ["compile-calibrate", "--suite", "smoke"]),
    ("alert-no-history", ["alert", "--out", "{out}/alert0"]),
    ("issues-nothing-confirmed", ["issues", "post", "--dry-run", "{out}/issues"]),
])

BAD_INPUT = _cases("cli", [
    ("run-unknown-suite", ["run", "--suite", "bogus", "--out", "{out}/r.jsonl"]),
    ("run-unknown-variant", ["run", "--suite", "smoke", "--variants", "nave", "--out", "{out}/r.jsonl"]),
    ("run-no-scenario", ["run", "--suite", "smoke", "--scenarios", "nothing*", "--out", "{out}/r.jsonl"]),
    ("run-repeats-0", ["run", "--suite", "smoke", "--repeats", "0", "--out", "{out}/r.jsonl"]),
    ("run-samples-abc", ["run", "--suite", "smoke", "--samples", "abc", "--out", "{out}/r.jsonl"]),
    ("run-out-a-folder", ["run", "--suite", "smoke", "--out", "{out}"]),
    ("run-broken-thresholds", ["run", "--suite", "smoke", "--thresholds", "{fx}/thresholds-broken.yaml"]),
    ("gate-unknown-suite", ["gate", "--no-gpu-ok", "--suite", "bogus"]),
    ("gate-unknown-variant", ["gate", "--no-gpu-ok", "--variants", "nave"]),
    ("gate-unknown-base-ref", ["gate", "--no-gpu-ok", "--base-ref", "nope"]),
    ("gate-unknown-vendor", ["gate", "--no-gpu-ok", "--vendor", "intel"]),
    ("gate-missing-plan", ["gate", "--no-gpu-ok", "--plan", "{out}/missing/plan.json"]),
    ("gate-plan-only-all-cases", ["gate", "--plan-only", "--all-cases", "--out", "{out}/ab"]),
    ("gate-head-ref-and-allow-dirty", ["gate", "--no-gpu-ok", "--head-ref", "HEAD", "--allow-dirty"]),
    ("compare-missing-file", ["compare", "{fx}/base.jsonl", "{out}/missing.jsonl"]),
    ("compare-nothing-measured", ["compare", "{fx}/base.jsonl", "{fx}/header-only.jsonl", "--out",
                                  "{out}/cmp0"]),
    ("table-missing-file", ["table", "{out}/missing.jsonl"]),
    ("table-nothing-measured", ["table", "{fx}/header-only.jsonl"]),
    ("report-missing-file", ["report", "{out}/missing.json"]),
    ("report-not-json", ["report", "{fx}/not-json.json"]),
    ("noise-missing-folder", ["noise", "{out}/missing"]),
    ("noise-not-an-aa-folder", ["noise", "{fx}/empty"]),
    ("comment-without-vendor", ["comment", "{fx}/not-json.json"]),
    ("comment-missing-findings", ["comment", "--vendor", "nvidia", "{out}/missing.json"]),
    ("annotations-missing-file", ["annotations", "{out}/missing.json"]),
    ("annotations-root-a-file", ["annotations", "{fx}/not-json.json", "--root", "{fx}/a-file"]),
    ("grid-cases-without-vendor", ["grid", "--cases", "--out", "{out}/g"]),
    ("grid-unknown-base-ref", ["grid", "--base-ref", "nope"]),
    ("gpu-job-without-vendor", ["gpu-job", "--dry-run"]),
    ("gpu-job-unknown-vendor", ["gpu-job", "--vendor", "intel", "--dry-run"]),
    ("workflows-missing-root", ["workflows", "--check", "--root", "{out}/missing"]),
    ("nightly-unknown-step", ["nightly", "bogus"]),
    ("nightly-simulate-too-few-nights", ["nightly", "simulate", "--nights", "20", "--out", "{out}/sim0"]),
    ("alert-unknown-vendor", ["alert", "--vendor", "intel", "--out", "{out}/a"]),
    ("issues-without-step", ["issues"]),
    ("issues-missing-results", ["issues", "post", "--results", "{out}/missing"]),
    ("calibrate-unknown-suite", ["calibrate", "--suite", "bogus"]),
    ("calibrate-unknown-metric", ["calibrate", "--metrics", "graf"]),
    ("calibrate-unknown-vendor", ["calibrate", "--vendor", "intel"]),
    ("host-cost-unknown-variant", ["host-cost", "--variants", "nave"]),
    ("host-cost-unknown-peer", ["host-cost", "--peers", "flashinfr"]),
    ("host-cost-rounds-0", ["host-cost", "--rounds", "0"]),
    ("tune-unknown-suite", ["tune", "--suite", "bogus"]),
    ("selftest-unknown-variant", ["selftest", "--variants", "qblock,bogus"]),
    ("toolchain-unknown-variant", ["toolchain", "--variants", "nave", "--out", "{out}/tc"]),
    ("toolchain-no-scenario", ["toolchain", "--scenarios", "nothing*", "--out", "{out}/tc"]),
    ("bisect-unknown-good", ["bisect", "nope", "HEAD", "--scenario", TINY, "--metric", "eager"]),
    ("bisect-unknown-scenario", ["bisect", "HEAD~1", "HEAD", "--scenario", "llama3-8b/decode/batch1-kv12"]),
    ("bisect-repeats-1", ["bisect", "HEAD~1", "HEAD", "--scenario", TINY, "--metric", "eager", "--repeats",
                          "1"]),
])

CASES = [*HELP, *RUN, *GATE, *COMPILE, *SYNTHETIC, *REFUSED_ON_A_CPU, *BAD_INPUT]


@pytest.fixture(scope="session")
def captured(request, tmp_path_factory) -> dict:
    """Every case's output, normalised: captured once per test session, also under xdist (the
    first worker captures, the others wait on the lock and read what it wrote)."""
    from perf import files

    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        shared = shared.parent  # the session's folder, above each worker's
    done = shared / "perf-outputs.json"
    with files.lock(str(shared / "perf-outputs.lock"), timeout=3600, what="capturing the outputs"):
        if not done.exists():
            done.write_text(json.dumps(_capture(shared / "perf-outputs")), encoding="utf-8")
    got = json.loads(done.read_text(encoding="utf-8"))
    if "error" in got:
        pytest.fail(got["error"], pytrace=False)
    return got


def _capture(work: Path) -> dict:
    import traceback

    try:
        raw = capture.capture(work, GROUPS, CASES, alone=os.environ.get("PERF_OUTPUTS_ALONE") == "1")
    except Exception:
        return {"error": traceback.format_exc()}
    commits = capture.commits_of(work / "repo")
    return {c.id: golden_text(c, raw[c.id], capture.placeholders(work, c.group, commits)) for c in CASES}


def golden_text(case: Case, got: dict, where: dict) -> str:
    """What tests/data/outputs/<case>.txt holds."""
    shown = " ".join(a if re.fullmatch(r"[\w@%+=:,./{}~*-]+", a) else shlex.quote(a) for a in case.argv)
    shown = shown.replace("{repo}", "<repo>").replace("{out}", "<out>").replace("{fx}", "<fixtures>")
    parts = [f"$ python -m perf {shown}".rstrip(), f"exit {got['code']}"]
    for stream in ("stdout", "stderr"):
        text = capture.normalise(got[stream], where, case.measured)
        parts.append(f"--- {stream}" + ("\n" + text.rstrip("\n") if text.strip() else " (empty)"))
    if got["files"]:
        parts.append(capture.normalise(got["files"], where, case.measured).rstrip("\n"))
    return "\n".join(parts) + "\n"


@settings(max_examples=200, deadline=None)
@given(minutes=st.floats(0, 9999, allow_nan=False),
       what=st.text(st.characters(min_codepoint=32, max_codepoint=126)))  # a printable line's rest
def test_the_heartbeat_is_dropped_however_long_a_command_runs(minutes, what):
    """The gate's heartbeat (perf/latency/progress.py), printed every 15 s, is dropped however many a slow
    machine prints, and the event lines beside it stay."""
    where = {"paths": {}, "commits": {}, "versions": {}, "host": "a-host-named-nowhere"}
    heartbeat = f"[{minutes:5.1f} min] still measuring: {what}"
    event = f"[{minutes:5.1f} min] process 1/2: done"
    assert capture.normalise(f"{heartbeat}\n{event}\n{heartbeat}\n", where) == "[<dur>] process 1/2: done\n"


@settings(max_examples=300, deadline=None)
@given(base=st.integers(0, 10 ** 6), head=st.integers(0, 10 ** 6))  # CPU seconds in 10 ms clock ticks
def test_a_compile_time_row_reads_alike_whatever_its_seconds(base, head):
    """The static gate's compile-time row (perf/report.py's numbers) normalises to one text for any
    compile CPU seconds, whole ones ("1", "12") and exponents ("1e+04") too: a decimal-only mask let a
    whole second through."""
    from perf.report import _num

    where = {"paths": {}, "commits": {}, "versions": {}, "host": "a-host-named-nowhere"}
    ratio = head / base if base else None
    rest = "– | – | warn > 99, fail > 100 (uncalibrated: compile.compile_time) | cold compile |"
    row = "| ok | nvidia | sm_90 | static_grid | * | compile_time | {} | {} | {} | " + rest
    masked = row.format("<n>", "<n>", "<n>" if base else "–") + "\n"
    text = row.format(_num(base / 100), _num(head / 100), _num(ratio))
    assert capture.normalise(text, where, "floats") == masked


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_output_is_unchanged(case, captured):
    path = GOLDEN / f"{case.id}.txt"
    now = captured[case.id]
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(now, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {path}: PERF_REGEN_OUTPUTS=1 python -m pytest {__file__}"
    before = path.read_text(encoding="utf-8")
    if now != before:
        diff = "".join(difflib.unified_diff(before.splitlines(True), now.splitlines(True),
                                            f"golden {path.name}", "now"))
        pytest.fail(f"`python -m perf {' '.join(case.argv)}` prints something else than before (after "
                    f"normalisation; if meant, PERF_REGEN_OUTPUTS=1 regenerates):\n{diff}", pytrace=False)


def test_every_command_and_golden_file_has_a_case():
    """A command added to perf/cli.py gets its cases here; a golden file without a case is stale."""
    from perf import cli

    assert tuple(cli.COMMANDS) == COMMANDS
    ids = {c.id for c in CASES}
    assert len(ids) == len(CASES), "two cases share an id"
    stale = sorted(p.name for p in GOLDEN.glob("*.txt") if p.stem not in ids)
    if REGEN:
        for name in stale:
            (GOLDEN / name).unlink()
        return
    assert not stale, f"golden files without a case (PERF_REGEN_OUTPUTS=1 removes them): {stale}"
