"""The command line, fuzzed: every registered command, drawn argument vectors, in-process.

For each command of perf.cli.COMMANDS hypothesis draws an argument vector from its own
parser's options: valid and invalid numbers (0, -1, abc, nan), names and their typos
(suites, variants, metrics, vendors, peers, refs, scenarios), paths that are missing, a
directory, a file, under a file or in /proc, files that are empty, binary, a JSON list or
object, unknown flags and misspelled command names. Each vector runs through
`perf.cli.main` and must end in exit 0, 1 or 2 (2: exactly one line on stderr), never a
traceback, never exit 3 (a bug in the harness).

Nothing here measures or compiles: the main of every command that would (run, gate, compile,
calibrate, host-cost, tune, bisect, toolchain, selftest, nightly) is a stub that records that
it was reached, and a vector holding a mistake the command line must catch (an out-of-range
number, an unknown flag or command, an unwritable output) must never reach it. The commands
that only read files (compare, report, table, noise, alert, comment, workflows, issues
without posting, gpu-job without running its steps) run for real on the drawn files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf import checkout, cli

# commands whose main would measure, compile, download, or run steps: stubbed
STUBBED = ("run", "gate", "compile", "calibrate", "host-cost", "tune", "bisect", "toolchain", "selftest",
           "nightly")
# per command: ~500 vectors in about 15 s on a 2-core machine, the same ones every run (CI);
# PERF_FUZZ_EXAMPLES=500 explores new ones
EXAMPLES = int(os.environ.get("PERF_FUZZ_EXAMPLES", "25"))

SMOKE = "tiny/decode/batch1-kv16/block16"
PR = "llama3-8b/decode/batch1-kv128/block16"
NAMES = {  # option dest -> (values a person means, their typos and mistakes)
    "suite": (["smoke", "pr"], ["bogus", "smok"]),
    "scenarios": (["tiny/*", SMOKE], ["nothing*"]),
    "scenario": ([SMOKE, PR], ["tiny/decode/nope"]),
    "variants": (["naive", "static_grid", "naive,qblock"], ["nave", "qblock,bogus", ","]),
    "variant": (["naive"], ["nave"]),
    "metrics": (["eager", "eager,graph"], ["graf"]),
    "metric": (["eager", "graph"], ["graf"]),
    "vendor": (["nvidia", "amd"], ["intel"]),
    "peers": (["none", "auto"], ["flashinfr"]),
    "base_ref": (["HEAD"], ["no-such-ref"]), "head_ref": (["HEAD"], ["no-such-ref"]),
    "good": (["HEAD"], ["nope"]), "bad": (["HEAD"], ["nope"]),
    "toolchain": (["triton==3.5.1"], ["triton>=3", "torch==2.0"]),
    "versions": (["3.9.0", "3.9.0,3.10.0rc1"], ["3.x"]),
    "stages": (["tile_warps"], ["warps"]),
    "targets": (["sm_90", "gfx942,sm_90"], ["sm_1"]),
    "plants": (["2,5"], ["x"]),
    "shard": (["1/2"], ["3/2", "x"]),
    "gpus": (["all", "1"], ["x"]),
    "repo": (["org/name"], ["x"]),
    "dashboard_url": (["https://example.org/d/"], ["http://x"]),
    "ours": (["static_grid"], ["nave"]),
    "against": (["flashinfer_paged"], ["bogus"]),
    "run_url": (["https://example.org/run"], [""]), "commit": (["a" * 40], ["x"]), "machine": (["m1"], [""]),
    "bench": (["x"], ["("]),
}
NUMBERS = (["1", "2", "3"], ["0", "-1", "abc", "nan", "2.5", "1e9"])
INPUTS = {"file": ["findings.json", "results.jsonl", "object.json"], "dir": ["dir"]}
MISTAKEN_PATHS = ["missing/x", "dir", "file.txt", "file.txt/under", "/proc/perf-fuzz/x", "empty", "binary",
                  "list.json"]
NOT_THRESHOLDS = ["missing/x", "dir", "file.txt", "file.txt/under", "empty", "binary", "object.json"]
PATH_DESTS = ("root", "out", "config", "results", "site", "merge_shards", "cache_dir", "emit_json", "write",
              "md", "plot", "jobs", "source", "keys", "paths", "findings", "base", "head")


def _zoo(tmp: str) -> None:
    """The files the drawn paths name, made fresh for every vector."""
    from perf.verdicts import Finding, Verdict

    os.makedirs(os.path.join(tmp, "dir"))
    for name, data in {"file.txt": b"not what any command reads\n", "empty": b"", "binary": b"\xff\xfe\x00",
                       "list.json": b"[]", "object.json": b"{}"}.items():
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    finding = Finding("latency", "nvidia", "NVIDIA H100", "naive", SMOKE, "eager", 1.0, 1.01, 1.01, 0.99,
                      1.03, 0.4, "warn > 1.03, fail > 1.05", Verdict.OK)
    with open(os.path.join(tmp, "findings.json"), "w") as f:
        json.dump({"kind": "findings", "findings": [finding.to_dict()]}, f)
    header = {"kind": "header", "schema_version": 1, "suite": "smoke", "metrics": ["eager"], "samples": 3,
              "environment": {"vendor": "nvidia", "gpu": "NVIDIA H100", "interpreter": False,
                              "commit": "0" * 40}}
    with open(os.path.join(tmp, "results.jsonl"), "w") as f:
        f.write(json.dumps(header) + "\n")


def _bad_output(path: str, kind: str, tmp: str) -> bool:
    """Whether the command line must refuse `path` as an output of `kind` before any work."""
    full = os.path.join(tmp, path)
    if path.startswith("/proc") or "file.txt/" in path:
        return True
    if kind == "dir":
        return os.path.exists(full) and not os.path.isdir(full)
    return os.path.exists(full) and not os.path.isfile(full)


def _number(action) -> bool:
    return action.type is not None and getattr(action.type, "__name__", "") in ("int", "float")


@st.composite
def argv_for(draw, name: str, tmp: str):
    """(argv with TMP for the vector's folder, whether it holds a mistake the command line
    must catch before the command runs) for command `name`: each option is left out or
    given, rightly or (one time in five) wrongly."""
    parser = cli.command_parser(name)
    command = cli.COMMANDS[name]
    outputs, inputs = dict(command.outputs), dict(command.inputs)
    real = name not in STUBBED
    argv, bad, bad_outputs = [name], False, set()
    if draw(st.integers(0, 30)) == 0:  # a misspelled command
        argv, bad = [name[:-1] + "x"], True
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest in ("worker", "gate_side"):
            continue
        if action.dest == "thresholds":  # the checkout's own file (left out), or one that is not one
            if draw(st.integers(0, 5)) == 0:
                argv += ["--thresholds", "TMP/" + draw(st.sampled_from(NOT_THRESHOLDS))]
            continue
        flag = action.option_strings[0] if action.option_strings else None
        if flag and not action.required and not draw(st.booleans()):
            continue
        if action.nargs == 0:  # a switch
            argv.append(flag)
            continue
        wrong = draw(st.integers(0, 4)) == 0
        if _number(action):
            value = draw(st.sampled_from(NUMBERS[wrong]))
            try:
                action.type(value)
            except argparse.ArgumentTypeError:
                bad = True
        elif action.dest in NAMES:
            value = draw(st.sampled_from(NAMES[action.dest][wrong]))
        elif action.choices is not None:
            value = draw(st.sampled_from(["bogus"] if wrong else list(action.choices)))
        elif action.dest in PATH_DESTS:
            if wrong:
                value = draw(st.sampled_from(MISTAKEN_PATHS if not real or action.dest in inputs else
                                             [p for p in MISTAKEN_PATHS if not p.startswith("/")]))
            elif action.dest in outputs:
                value = "dir" if outputs[action.dest] == "dir" else "new/output"
            else:
                value = draw(st.sampled_from(INPUTS[inputs.get(action.dest, "file")]))
            if action.dest in outputs and _bad_output(value, outputs[action.dest], tmp):
                bad_outputs.add(action.dest)
            value = value if value.startswith("/") else f"TMP/{value}"
        else:
            value = draw(st.sampled_from(["", "nave"] if wrong else ["x"]))
        count = 2 if action.nargs in ("+", "*") and draw(st.booleans()) else 1
        argv += ([flag] if flag else []) + [value] * count
    if "--no-cache" in argv:  # then no cache is written
        bad_outputs.discard("cache_dir")
    bad = bad or bool(bad_outputs)
    for dest in ("out", "root", "config"):  # a real command never writes into the checkout
        if real and dest in {a.dest for a in parser._actions} and f"--{dest}" not in argv:
            argv += [f"--{dest}", "TMP/dir"]
    if draw(st.integers(0, 10)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), "--no-such-flag")
        bad = True
    return argv, bad


@pytest.fixture
def stubs(monkeypatch):
    """Every expensive main replaced by a recorder; no GPU; nothing posted or run for real."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("PERF_DEBUG", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(checkout.ROOT)  # a git checkout with thresholds.yaml
    reached: list[str] = []
    for name in STUBBED:
        module = importlib.import_module(cli.COMMANDS[name].module)
        monkeypatch.setattr(module, cli.COMMANDS[name].main,
                            lambda args, name=name: reached.append(name) or 0)
    from perf.ci import gpu_job
    from perf.nightly import issues

    monkeypatch.setattr(issues, "post", lambda *a, **k: reached.append("issues post"))
    monkeypatch.setattr(gpu_job, "run_ci", lambda *a, **k: reached.append("gpu-job steps") or 0)
    return reached


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_line_ends_in_a_verdict_or_one_line(name, stubs, capsys):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize="PERF_FUZZ_EXAMPLES" not in os.environ,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=st.data())
    def one(data):
        with tempfile.TemporaryDirectory(prefix="perf-fuzz-") as tmp:
            _zoo(tmp)
            argv, bad = data.draw(argv_for(name, tmp))
            argv = [a.replace("TMP", tmp) for a in argv]
            stubs.clear()
            capsys.readouterr()
            code = cli.main(argv)
            out, err = capsys.readouterr()
            shown = f"perf {' '.join(argv)} -> exit {code}\n{err[-2000:]}"
            assert code in (0, 1, 2), shown
            assert "Traceback" not in err and "internal error" not in err, shown
            if code == 2:
                assert err.count("\n") == 1, shown
            if bad:
                assert code == 2 and not stubs, shown

    one()
