"""Every mistake a user can make, made: the probe behind docs/bad-input.md.

Each case sets up its files in a temporary folder and runs one command in-process
(`perf.cli.main`) or one kernel call, and must end as the contract says: a command's
mistake is exit 2 with one line on stderr naming the argument or file (never a traceback,
never exit 0 from a gate that checked nothing); a kernel's is a `ValueError` or `TypeError`
naming the argument. The tables of docs/bad-input.md are rendered from what these cases
really printed, so the page cannot drift: `BAD_INPUT_DOC=write pytest tests/cli/test_bad_input.py`
rewrites it, and the doc test fails when it differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from perf import cli, files, vendor
from perf.errors import ConfigError

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "bad-input.md"
THRESHOLDS = (ROOT / "thresholds.yaml").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Case:
    """One mistake: what the user did (as the doc shows it) and the command that does it."""

    group: str  # the doc's section
    shown: str  # the input, as a person would describe it
    argv: Callable[[Path], list[str]]  # the command's arguments, given the case's folder
    needle: str  # a part of the one line that must name the argument, file or rule
    code: int = 2
    setup: Callable[[Path], None] | None = None
    no_gpu: bool = False  # run as on a machine without a GPU, on any machine (`perf.vendor.on_gpu` says no)


def _write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    return setup


def _thresholds(old: str, new: str, count: int = 1) -> Callable[[Path], None]:
    assert old in THRESHOLDS, old
    return _write("thresholds.yaml", THRESHOLDS.replace(old, new, count))


def _gate_with(tmp: Path) -> list[str]:
    """The cheapest command that reads the whole thresholds file: the latency gate, skipped
    for want of a GPU after every input was checked (what `nox -s perf` runs on a CPU)."""
    return ["gate", "--no-gpu-ok", "--base-ref", "HEAD", "--thresholds", str(tmp / "thresholds.yaml"),
            "--out", str(tmp / "ab")]


# --- results, findings and history files a command may be handed ------------------------

def _header(**extra) -> dict:
    env = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "interpreter": False, "commit": "0" * 40}
    return {"kind": "header", "schema_version": 1, "suite": "smoke", "metrics": ["eager"], "samples": 3,
            "environment": env, **extra}


def _record(variant: str = "static_grid", scenario: str = "llama3-8b/decode/batch2-kv64/block16",
            median: float = 1.0) -> dict:
    return {"kind": "record", "variant": variant, "scenario": scenario, "metric": "eager", "repeat": 0,
            "samples": [median] * 3, "clock": "device", "median": median, "p20": median, "p80": median,
            "config": [], "batch_digest": "x", "commit": "0" * 40}


def _jsonl(name: str, *rows: dict | str) -> Callable[[Path], None]:
    return _write(name, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        for s in setups:
            s(tmp)
    return setup


CASES = [
    # thresholds.yaml: the whole file is validated, strictly
    Case("thresholds", "a key given twice (`fail: 50.0` after `fail: 1.05`)", _gate_with, "given twice",
         setup=_thresholds("    fail: 1.05\n", "    fail: 1.05\n    fail: 50.0\n")),
    Case("thresholds", "a second `nvidia:` section", _gate_with, "given twice",
         setup=_thresholds("version: 1\n", "version: 1\nnvidia: {}\n")),
    Case("thresholds", "two targets named `sm_90`", _gate_with, "sm_90",
         setup=_thresholds("      - name: sm_100 ", "      - name: sm_90 ")),
    Case("thresholds", "an override naming variant `statc_grid`", _gate_with, "statc_grid",
         setup=_thresholds("overrides: []", "overrides:\n  - variant: statc_grid\n    latency: {fail: 1.2}\n"
                                            "    reason: test\n")),
    Case("thresholds", "an override naming metric `graf`", _gate_with, "graf",
         setup=_thresholds("overrides: []", "overrides:\n  - metric: graf\n    latency: {fail: 1.2}\n"
                                            "    reason: test\n")),
    Case("thresholds", "an override whose scenario glob matches no scenario", _gate_with, "matches no",
         setup=_thresholds("overrides: []", "overrides:\n  - scenario: 'lama3-8b/*'\n"
                                            "    latency: {fail: 1.2}\n    reason: test\n")),
    Case("thresholds", "`registers_warn_ratio` above `registers_fail_ratio`", _gate_with, "registers_",
         setup=_thresholds("registers_warn_ratio: 1.10     # unmeasured default\n"
                           "      registers_fail_ratio: 1.25",
                           "registers_warn_ratio: 1.50     # unmeasured default\n"
                           "      registers_fail_ratio: 1.25")),
    Case("thresholds", "`warn` above `fail`", _gate_with, "warn",
         setup=_thresholds("    warn: 1.03\n    fail: 1.05\n", "    warn: 1.08\n    fail: 1.05\n")),
    Case("thresholds", "a ratio written as a string (`fail: '1.05'`)", _gate_with, "fail",
         setup=_thresholds("    fail: 1.05\n", "    fail: '1.05'\n")),
    Case("thresholds", "an invalid UTF-8 byte", _gate_with, "UTF-8",
         setup=_write("thresholds.yaml", THRESHOLDS.encode().replace(b"# Perf", b"# \xffPerf"))),
    Case("thresholds", "a YAML syntax error", _gate_with, "line",
         setup=_write("thresholds.yaml", THRESHOLDS.replace("version: 1\n", "version: [1\n"))),
    Case("thresholds", "an empty file", _gate_with, "empty", setup=_write("thresholds.yaml", "")),
    Case("thresholds", "`--thresholds` naming a directory",
         lambda t: ["gate", "--no-gpu-ok", "--thresholds", str(t)], "directory"),
    Case("thresholds", "`--thresholds` naming a missing file",
         lambda t: ["gate", "--no-gpu-ok", "--thresholds", str(t / "nope.yaml")], "nope.yaml"),
    Case("thresholds", "a section for an unknown vendor (`intel:`)", _gate_with, "intel",
         setup=_thresholds("version: 1\n", "version: 1\nintel: {}\n")),

    # results, findings and nightly-history files
    Case("data files", "`table` of a results file with a line `{}`",
         lambda t: ["table", str(t / "r.jsonl")], "line 2", setup=_jsonl("r.jsonl", _header(), {})),
    Case("data files", "`table` of a results file whose record lacks its median",
         lambda t: ["table", str(t / "r.jsonl")], "median",
         setup=_jsonl("r.jsonl", _header(), {k: v for k, v in _record().items() if k != "median"})),
    Case("data files", "`table` of a file that is not JSON Lines",
         lambda t: ["table", str(t / "r.jsonl")], "line 1", setup=_write("r.jsonl", "hello\nworld\n")),
    Case("data files", "`table` of a results file with an invalid UTF-8 byte",
         lambda t: ["table", str(t / "r.jsonl")], "UTF-8",
         setup=_write("r.jsonl", json.dumps(_header()).encode() + b"\n\xff\n")),
    Case("data files", "`table` of a results file of another schema version",
         lambda t: ["table", str(t / "r.jsonl")], "schema_version",
         setup=_jsonl("r.jsonl", _header(schema_version=99), _record())),
    Case("data files", "`table` of a missing file", lambda t: ["table", str(t / "nope.jsonl")], "nope.jsonl"),
    Case("data files", "`table` of a results file without records (header only)",
         lambda t: ["table", str(t / "r.jsonl")], "nothing was measured", setup=_jsonl("r.jsonl", _header())),
    Case("data files", "`compare` against a head file without records",
         lambda t: ["compare", str(t / "base.jsonl"), str(t / "head.jsonl"), "--out", str(t / "cmp")],
         "nothing was measured",
         setup=_both(_jsonl("base.jsonl", _header(), _record()), _jsonl("head.jsonl", _header()))),
    Case("data files", "`report` of a findings file holding a JSON list",
         lambda t: ["report", str(t / "findings.json")], "findings.json",
         setup=_write("findings.json", "[]")),
    Case("data files", "`report` of a findings file with an empty findings list",
         lambda t: ["report", str(t / "findings.json")], "nothing was measured",
         setup=_write("findings.json",
                      json.dumps({"kind": "findings", "schema_version": 2, "findings": []}))),
    Case("data files", "`report` of a findings file that is not JSON",
         lambda t: ["report", str(t / "findings.json")], "not JSON", setup=_write("findings.json", "{nope")),
    Case("data files", "`alert --vendor intel`",
         lambda t: ["alert", "--vendor", "intel", "--out", str(t / "nightly")], "intel"),

    # outputs: refused before any work, never half-written
    Case("outputs", "`run --out` naming a directory",
         lambda t: ["run", "--suite", "smoke", "--out", str(t)], "directory"),
    Case("outputs", "`run --out` under a file",
         lambda t: ["run", "--suite", "smoke", "--out", str(t / "f" / "r.jsonl")], "not a directory",
         setup=_write("f", "x")),
    Case("outputs", "`compare --out` naming a file",
         lambda t: ["compare", str(t / "a.jsonl"), str(t / "b.jsonl"), "--out", str(t / "f")], "--out",
         setup=_both(_write("f", "x"), _jsonl("a.jsonl", _header(), _record()),
                     _jsonl("b.jsonl", _header(), _record()))),
    Case("outputs", "`report --plot` naming a directory",
         lambda t: ["report", str(t / "findings.json"), "--plot", str(t)], "--plot",
         setup=_write("findings.json", "{}")),
    Case("outputs", "a second `run` into a results file another run is writing",
         lambda t: ["run", "--suite", "smoke", "--variants", "naive", "--out", str(t / "r.jsonl")],
         "being written by"),
    Case("outputs", "`run` resuming a results file written at another commit",
         lambda t: ["run", "--suite", "smoke", "--variants", "naive", "--metrics", "eager",
                    "--out", str(t / "r.jsonl")], "commit",
         setup=_jsonl("r.jsonl", {**_header(), "environment": {"vendor": "nvidia", "gpu": "cpu",
                                                               "interpreter": True, "commit": "0" * 40}})),
    Case("outputs", "`workflows --root` naming a file",
         lambda t: ["workflows", "--root", str(t / "f")], "--root", setup=_write("f", "x")),
    Case("outputs", "`compile --cache-dir` under a file",
         lambda t: ["compile", "--cache-dir", str(t / "f" / "cache")], "--cache-dir", setup=_write("f", "x")),

    # commands that must not start
    Case("commands", "`run --vendor nvidia` on a machine without a GPU",
         lambda t: ["run", "--vendor", "nvidia", "--out", str(t / "r.jsonl")], "GPU", no_gpu=True),
    Case("commands", "`run` of a GPU-sized suite on a machine without a GPU",
         lambda t: ["run", "--out", str(t / "r.jsonl")], "--suite smoke", no_gpu=True),
    Case("commands", "`run --metrics graph` on a machine without a GPU",
         lambda t: ["run", "--suite", "smoke", "--metrics", "graph", "--out", str(t / "r.jsonl")], "graph",
         no_gpu=True),
    Case("commands", "`gate --suite smoke --metrics graph` on a machine without a GPU",
         lambda t: ["gate", "--suite", "smoke", "--metrics", "graph", "--base-ref", "HEAD",
                    "--out", str(t / "ab")], "graph", no_gpu=True),
    Case("commands", "`host-cost --variants nave`", lambda t: ["host-cost", "--variants", "nave"], "nave"),
    Case("commands", "`calibrate --suite bogus`", lambda t: ["calibrate", "--suite", "bogus"], "bogus"),
    Case("commands", "`toolchain --variants nave`",
         lambda t: ["toolchain", "--variants", "nave", "--out", str(t / "tc")], "nave"),
    Case("commands", "`compile --source DIR` where DIR has no kernels/",
         lambda t: ["compile", "--source", str(t)], "kernels"),
    Case("commands", "`gate --variants nave`",
         lambda t: ["gate", "--no-gpu-ok", "--variants", "nave"], "nave"),
    Case("commands", "`gate --plan-only --all-cases`",
         lambda t: ["gate", "--plan-only", "--all-cases", "--out", str(t / "ab")], "pass one of them"),
    Case("commands", "`gate --plan FILE` where FILE is a plan of schema 99",
         lambda t: ["gate", "--no-gpu-ok", "--plan", str(t / "plan.json"), "--out", str(t / "ab")],
         "schema 99", setup=_write("plan.json", json.dumps({"schema": 99}))),
    Case("commands", "`gate --plan FILE` where FILE does not exist",
         lambda t: ["gate", "--no-gpu-ok", "--plan", str(t / "plan.json"), "--out", str(t / "ab")], "--plan"),
    Case("commands", "`grid --cases` without --vendor",
         lambda t: ["grid", "--cases", "--out", str(t / "g")], "--vendor"),
    Case("commands", "`gate --vendor intel`",
         lambda t: ["gate", "--no-gpu-ok", "--vendor", "intel"], "intel"),
    Case("commands", "`gate --suite bogus`", lambda t: ["gate", "--no-gpu-ok", "--suite", "bogus"], "bogus"),
    Case("commands", "`gate --scenarios 'nothing*'`",
         lambda t: ["gate", "--no-gpu-ok", "--scenarios", "nothing*"], "nothing*"),
    Case("commands", "`gate --base-ref nope`",
         lambda t: ["gate", "--no-gpu-ok", "--base-ref", "nope"], "nope"),
    Case("commands", "`run --repeats 0`",
         lambda t: ["run", "--suite", "smoke", "--repeats", "0", "--out", str(t / "r.jsonl")], "--repeats"),
    Case("commands", "`run --samples abc`",
         lambda t: ["run", "--suite", "smoke", "--samples", "abc", "--out", str(t / "r.jsonl")], "--samples"),
    Case("commands", "an unknown command (`python -m perf rum`)", lambda t: ["rum"], "rum"),
    Case("commands", "`bisect` with an unknown GOOD commit",
         lambda t: ["bisect", "nope", "HEAD", "--scenario", "llama3-8b/decode/batch2-kv64/block16"], "nope"),

    # % of the hardware limit (perf/roofline.py): a record's work, a findings file's roofline section
    Case("data files", "`table` of a results file whose record has `bytes: -1`",
         lambda t: ["table", str(t / "r.jsonl")], "bytes is -1",
         setup=_jsonl("r.jsonl", _header(), {**_record(), "bytes": -1, "flops": 0})),
    Case("data files", "`report` of a findings file whose `roofline.limits` has `copy_tb_s: 0`",
         lambda t: ["report", str(t / "findings.json")], "roofline.limits",
         setup=_write("findings.json", json.dumps({"kind": "findings", "findings": [], "roofline": {
             "limits": {"copy_tb_s": 0, "matmul_tflop_s": 800}, "work": {}}}))),
]

# --- boundary: outputs claimed, arguments checked before any work, what the machine refuses ------
_HELD = []  # outputs a case's "other run" holds (released when the test process ends)


def _held(name: str) -> Callable[[Path], None]:
    """Another run writing into `name`: its lock held (by this process, as a second run would)."""
    def setup(tmp: Path) -> None:
        holder = files.lock(str(tmp / name))
        holder.__enter__()
        _HELD.append(holder)
    return setup


CASES += [
    Case("outputs", "a second `compile` into an --out folder another compile is writing",
         lambda t: ["compile", "--out", str(t / "out")], "being written by", setup=_held("out")),
    Case("outputs", "a second `nightly simulate` into an --out folder another replay is writing",
         lambda t: ["nightly", "simulate", "--out", str(t / "out")], "being written by", setup=_held("out")),
    Case("commands", "`gate --plan-only --toolchain triton==3.9.0` (refused before Triton is installed)",
         lambda t: ["gate", "--plan-only", "--toolchain", "triton==3.9.0", "--out", str(t / "ab")],
         "--plan-only with --toolchain"),
    Case("commands", "`gate --variants ''`",
         lambda t: ["gate", "--no-gpu-ok", "--variants", "", "--out", str(t / "ab")], "--variants ''"),
    Case("commands", "`tune --stages ''`", lambda t: ["tune", "--stages", "", "--out", str(t / "tune")],
         "--stages ''"),
    Case("commands", "`compile-calibrate --suite bogus` (before the checks of the CPU it compiles on)",
         lambda t: ["compile-calibrate", "--suite", "bogus", "--write", str(t / "c.yaml")], "bogus"),
    Case("commands", "`why --head-ref nope`",
         lambda t: ["why", "--scenarios", "llama3-8b/decode/*", "--head-ref", "nope",
                    "--out", str(t / "why")], "--head-ref nope"),
    Case("commands", "`nightly simulate --seed -1`",
         lambda t: ["nightly", "simulate", "--seed", "-1", "--out", str(t / "sim")], "--seed"),
    Case("commands", "`nightly simulate --nights 5`",
         lambda t: ["nightly", "simulate", "--nights", "5", "--out", str(t / "sim")], "--nights 5"),
]


# --- names that become paths or keys, and bounded data (perf/names.py, perf/schema.py) ------------

def _finding(**change) -> dict:
    f = {"gate": "latency", "vendor": "nvidia", "target": "NVIDIA H100", "variant": "static_grid",
         "scenario": "llama3-8b/decode/batch2-kv64/block16", "metric": "eager", "base": 1.0, "head": 1.01,
         "ratio": 1.01, "ci_low": 0.99, "ci_high": 1.03, "p_value": 0.3, "verdict": "ok", "note": "",
         "threshold": "warn > 1.03, fail > 1.05", "min_detectable": 1.04}
    return {**f, **change}


def _findings(*found: dict) -> Callable[[Path], None]:
    doc = {"kind": "findings", "schema_version": 2, "findings": list(found)}
    return _write("findings.json", json.dumps(doc))


def _latency_plan(variant: str, scenario: str) -> Callable[[Path], None]:
    from perf.change import plan

    doc = plan.document(plan.LATENCY, [{"variant": variant, "scenario": scenario, "why": "x"}],
                        vendor="nvidia", target="sm_90", base="a" * 40, head="b" * 40)
    return _write("plan.json", json.dumps(doc))


def _night(date: str) -> Callable[[Path], None]:
    header = _header(nightly={"machine": "m", "commit": "0" * 40})
    header["environment"]["time"] = "2026-11-20T03:00:00+00:00"
    return _jsonl(f"data/nights/m/{date}/results.jsonl", header, _record())


def _heartbeat(t: Path) -> list[str]:
    return ["nightly", "heartbeat", "--data", str(t / "data"), "--dry-run", str(t / "issues"),
            "--out", str(t / "out")]


_GATE_PLAN = ["gate", "--no-gpu-ok", "--plan"]

CASES += [
    Case("commands", "`nightly run --machine '../../x'` (a name that leaves its folder)",
         lambda t: ["nightly", "run", "--allow-cpu", "--suite", "smoke", "--machine", "../../x",
                    "--out", str(t / "n")], "--machine '../../x'"),
    Case("commands", "`nightly save --machine 'ré☃'`",
         lambda t: ["nightly", "save", "--machine", "ré☃", "--out", str(t / "n")], "--machine 'ré☃'"),
    Case("commands", "`nightly save --branch '../x'`",
         lambda t: ["nightly", "save", "--branch", "../x", "--out", str(t / "n")], "--branch '../x'"),
    Case("commands", "`nightly attribute --date 2026-13-45`",
         lambda t: ["nightly", "attribute", "--date", "2026-13-45", "--out", str(t / "n")],
         "--date '2026-13-45': not a calendar day"),
    Case("commands", "`alert --machine ../x`",
         lambda t: ["alert", "--machine", "../x", "--out", str(t / "a")], "--machine '../x'"),
    Case("commands", "`gate --plan FILE` where a case names scenario `../../x`",
         lambda t: [*_GATE_PLAN, str(t / "plan.json"), "--out", str(t / "ab")], "scenario '../../x'",
         setup=_latency_plan("naive", "../../x")),
    Case("data files", "`table` of a results file whose scenario is `../../x`",
         lambda t: ["table", str(t / "r.jsonl")], "scenario '../../x'",
         setup=_jsonl("r.jsonl", _header(), _record(scenario="../../x"))),
    Case("data files", "`table` of a results file whose variant is `stätic_grid☃`",
         lambda t: ["table", str(t / "r.jsonl")], "variant 'stätic_grid☃'",
         setup=_jsonl("r.jsonl", _header(), _record(variant="stätic_grid☃"))),
    Case("data files", "`table` of a results file with a median of 1e308 ms",
         lambda t: ["table", str(t / "r.jsonl")], "median is 1e+308",
         setup=_jsonl("r.jsonl", _header(), _record(median=1e308))),
    Case("data files", "`report` of a finding whose ratio is NaN",
         lambda t: ["report", str(t / "findings.json")], "ratio is nan",
         setup=_write("findings.json", json.dumps({"findings": [_finding(ratio=float("nan"))]}))),
    Case("data files", "`report` of a finding whose ratio is -3",
         lambda t: ["report", str(t / "findings.json")], "ratio is -3", setup=_findings(_finding(ratio=-3))),
    Case("data files", "`report` of a finding given twice",
         lambda t: ["report", str(t / "findings.json")], "findings[1] repeats the case of findings[0]",
         setup=_findings(_finding(), _finding())),
    Case("data files", "`nightly heartbeat` of a store with a night dated 2099-01-01",
         _heartbeat, "night '2099-01-01': a day to come", setup=_night("2099-01-01")),
    Case("data files", "`nightly heartbeat` of a store with a night folder `2026-13-45`",
         _heartbeat, "night '2026-13-45': not a calendar day", setup=_night("2026-13-45")),
]

def _normalise(line: str, tmp: Path) -> str:
    line = line.replace(str(tmp), "<tmp>").replace(str(ROOT), ".")
    line = re.sub(r"pid \d+ since [\d:]+", "pid N since HH:MM:SS", line)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    return line.replace(head, "<HEAD>").replace(head[:10], "<HEAD>") if head else line


def run_case(case: Case, tmp: Path, capsys) -> tuple[int, str]:
    """(exit code, the one stderr line, normalised) of one case; asserts the contract."""
    if case.setup:
        case.setup(tmp)
    argv = case.argv(tmp)
    holder = None
    if case.needle == "being written by":  # another run holds the output
        holder = files.lock(str(tmp / "r.jsonl"))
        holder.__enter__()
    no_gpu = mock.patch.object(vendor, "on_gpu", lambda: False) if case.no_gpu else contextlib.nullcontext()
    try:
        try:
            with no_gpu:
                code = cli.main(argv)
        except SystemExit as e:  # argparse's own exit
            code = e.code
    finally:
        if holder is not None:
            holder.__exit__(None, None, None)
    _, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert code == case.code, (argv, code, err)
    assert lines, f"{argv}: exit {code} and nothing on stderr"
    line = lines[-1]
    if case.code == 2:
        assert len(lines) == 1, lines
    assert case.needle in line, (case.needle, line)
    return code, _normalise(line, tmp)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.group}: {c.shown}" for c in CASES])
def test_a_mistake_ends_in_one_line(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    run_case(case, tmp_path, capsys)


# Decided only with the output in hand: the results file `run` resumes is its --out, read once
# claimed (another writer could be appending to it); compare's "nothing was measured" is its
# verdict, written into --out with the report that says why.
NEED_THE_OUTPUT = ("`run` resuming a results file written at another commit",
                   "`compare` against a head file without records")
WHILE_HELD = [c for c in CASES if c.needle != "being written by" and c.shown not in NEED_THE_OUTPUT]


@pytest.mark.parametrize("case", WHILE_HELD, ids=[f"{c.group}: {c.shown}" for c in WHILE_HELD])
def test_a_mistake_is_refused_as_that_while_another_run_writes_the_outputs(case, tmp_path, capsys,
                                                                          monkeypatch):
    """Every output of every command held by another run (each claim refused, as perf.files does
    when another process holds the lock): each mistake still ends in its own line. Its checks run
    before the outputs are claimed (perf.cli.run_command), so a user is told what to fix, not to
    wait, and no mistake ever takes an output's lock (these cases run in the checkout, where a
    static gate run beside them writes into compile's default results/static)."""
    monkeypatch.chdir(ROOT)

    def held(path, flag="--out"):
        raise ConfigError(f"{flag} {path}: being written by pid 1 since 00:00:00; {files.BUSY_FIX}")

    monkeypatch.setattr(files, "claim", held)
    run_case(case, tmp_path, capsys)





def _render(rows: dict[str, list[tuple[str, int, str]]]) -> str:
    out = [HEAD.rstrip(), ""]
    for group, title in GROUPS.items():
        out += [f"## {title}", "", "| input | exit | what it says |", "|---|---|---|"]
        for shown, code, line in rows.get(group, []):
            out.append(f"| {shown} | {code} | `{line.replace('|', '/').replace('`', '')}` |")
        out.append("")
    out += [f"## {KERNELS_TITLE}", "", KERNELS_NOTE.strip(), "",
            "| mistake | raises | message |", "|---|---|---|"]
    for shown, kind, line in rows.get("kernels", []):
        out.append(f"| {shown} | `{kind}` | `{line.replace('|', '/').replace('`', '')}` |")
    out.append("")
    out.append(TAIL.strip())
    return "\n".join(out) + "\n"


GROUPS = {
    "thresholds": "thresholds.yaml",
    "data files": "Results, findings and history files",
    "outputs": "Outputs",
    "commands": "Commands that must not start",
}

HEAD = """\
# Bad input: refused, in one line, never passed

Generated by `tests/cli/test_bad_input.py` from what each case really printed (rewrite it with
`BAD_INPUT_DOC=write python -m pytest tests/cli/test_bad_input.py`); a test fails when this page
and the commands disagree.

A gate that checked nothing must never pass. Every mistake a user can make ends in one line
on stderr naming the argument or file, the field and the fix, with exit code 2 and no
traceback (`perf.errors.ConfigError`, caught once in `perf/cli.py` for every command). A
regression or a wrong result is exit 1, an interrupt 130 (what finished is kept), and a
bug in the harness exit 3 with one line (`--debug` shows the traceback). Each is refused
before the command claims its outputs: run again with every output held by another run, each
case ends in the same line, but the two decided with the output in hand (a results file `run`
resumes is its --out; compare's "nothing was measured" is its verdict, written with its report).
"""

KERNELS_TITLE = "The kernel API (`kernels.paged_attention` and every variant)"
KERNELS_NOTE = """\
Each mistake of `tests/kernels/test_inputs.py`'s table, made on the production entry: it raises
before any launch, naming the argument (`TypeError` for a wrong type, `ValueError` for a wrong
value; a variant asked for a feature it lacks raises `NotImplementedError` naming it). Checks
of metadata *values* (block ids inside the cache, `seq_lens` against `cu_seqlens_q`) read
device memory, a host sync a serving loop cannot afford: they run with `check_values=True` or
`PAGED_ATTENTION_CHECK_VALUES=1`. Without them no metadata, however inconsistent, makes a kernel
read or write outside the tensors it was given: query ranges are clamped into q's rows, a
sequence its block-table row cannot hold gets rows of zeros, a block id outside the cache is
read clamped into it (`tests/kernels/test_memory_safety.py`, and compute-sanitizer on a GPU:
docs/kernels.md). The output of such metadata is defined, not meaningful.
"""

TAIL = """\
Run-time situations (an interrupt, a fault that loses the GPU context, a line cut short by
an interrupted run) are tested where they happen: `tests/stages/test_data_interrupt.py`,
`tests/cli/test_cli_interrupt.py`, `tests/cli/test_perf_cli.py`; the property tests that fuzz
every file kind and the command line are `tests/cli/test_config_fuzz.py`,
`tests/stages/test_data_files.py` and `tests/cli/test_cli_fuzz.py`.
"""


def kernel_rows() -> list[tuple[str, str, str]]:
    """(mistake, exception, message) of every kernel-API mistake of tests/kernels/test_inputs.py, made
    on the production entry (`kernels.paged_attention`), which must raise before any launch."""
    import kernels
    from kernels.batch import BatchSpec, build_batch
    from kernels.launch import KernelLaunch
    from tests.kernels.test_inputs import KERNEL_API_MISTAKES, _changed

    batch = build_batch(BatchSpec((3, 1), (20, 40), num_q_heads=4, num_kv_heads=2, head_size=64))
    rows = []
    real = KernelLaunch.__call__
    KernelLaunch.__call__ = lambda self: pytest.fail("a kernel was launched despite bad input")
    try:
        for name, (change, exc, message) in KERNEL_API_MISTAKES.items():
            args, kwargs = _changed(batch, change(batch))
            with pytest.raises(exc, match=f"^{message}") as raised:
                kernels.paged_attention(*args, **kwargs)
            kind = "TypeError" if isinstance(raised.value, TypeError) else type(raised.value).__name__
            rows.append((name.replace("_", " "), kind, str(raised.value).splitlines()[0]))
    finally:
        KernelLaunch.__call__ = real
    return rows


def test_the_doc_is_what_the_commands_say(tmp_path_factory, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rows: dict[str, list[tuple[str, int, str]]] = {}
    for i, case in enumerate(CASES):
        tmp = tmp_path_factory.mktemp(f"case{i}")
        code, line = run_case(case, tmp, capsys)
        rows.setdefault(case.group, []).append((case.shown, code, line.replace(str(tmp), "<tmp>")))
    rows["kernels"] = kernel_rows()
    text = _render(rows)
    if os.environ.get("BAD_INPUT_DOC") == "write":
        DOC.write_text(text, encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == text, (
        "docs/bad-input.md differs from what the commands print: "
        "BAD_INPUT_DOC=write python -m pytest tests/cli/test_bad_input.py")
