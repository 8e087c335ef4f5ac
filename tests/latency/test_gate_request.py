"""The gate's request (perf/latency/request.py): one typed value, its command line written in one place.

`to_argv` must parse back, through the gate's own parser, into the very request it came from
(every option, defaults and values an argument parser could misread included), and no caller
of the gate may spell one of its flags: they build a GateRequest, and the one that needs the
gate in another process hands it to `run_in_process`.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perf.cli import command_parser
from perf.latency.request import GateRequest, run_in_process

ROOT = Path(__file__).resolve().parents[2]


def _parsed(request: GateRequest) -> GateRequest:
    return GateRequest.from_args(command_parser("gate").parse_args(request.to_argv()))


EVERY_OPTION = GateRequest(base_ref="v1.2", toolchain="triton==3.6.0", head_ref="abc123", suite="smoke",
                           scenarios="tiny/*,-odd", variants="naive,qblock", metrics="graph", vendor="amd",
                           repeats=4, samples=7, thresholds="/x/thresholds.yaml", out="results/there",
                           seed=-3, lock_timeout=0.1, allow_dirty=True, no_gpu_ok=True, force=True,
                           plan_only=True, plan="plan.json", all_cases=True)


def test_every_field_is_an_option_of_the_gate_and_the_defaults_are_its_parsers():
    """A field per option (no more, no less), and GateRequest() is `perf gate` with no options."""
    dests = {a.dest for a in command_parser("gate")._actions if a.option_strings and a.dest != "help"}
    assert {f.name for f in dataclasses.fields(GateRequest)} == dests
    assert GateRequest.from_args(command_parser("gate").parse_args([])) == GateRequest()


@pytest.mark.parametrize("request_", [GateRequest(), EVERY_OPTION, GateRequest(lock_timeout=5.0),
                                      GateRequest(lock_timeout=1 / 3, seed=2**40, suite="-x")],
                         ids=["defaults", "every option", "whole seconds", "odd values"])
def test_to_argv_round_trips_through_the_gates_parser(request_):
    assert _parsed(request_) == request_


@given(st.builds(GateRequest, base_ref=st.none() | st.text("abcdef0123456789~^", min_size=1),
                 scenarios=st.none() | st.text(min_size=1).filter(lambda t: "\x00" not in t),
                 repeats=st.none() | st.integers(1, 10**6), samples=st.none() | st.integers(1, 10**6),
                 seed=st.integers(-(2**63), 2**63),
                 lock_timeout=st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
                 allow_dirty=st.booleans(), all_cases=st.booleans(), no_gpu_ok=st.booleans()))
def test_any_request_round_trips(request_):
    assert _parsed(request_) == request_


def test_the_command_spells_only_what_differs_from_the_defaults_and_where_it_writes():
    cases = [("qblock", "s1", "graph"), ("naive", "s2", "graph"), ("qblock", "s2", "eager")]
    gate = GateRequest.of_cases(cases, base_ref="good", head_ref="bad", suite="nightly", thresholds="t.yaml",
                                out="out/x", all_cases=True)
    assert (gate.variants, gate.scenarios, gate.metrics) == ("qblock,naive", "s1,s2", "graph,eager")
    assert gate.command_line() == ("python -m perf gate --base-ref good --head-ref bad --suite nightly "
                                   "--scenarios s1,s2 --variants qblock,naive --metrics graph,eager "
                                   "--thresholds t.yaml --out out/x --all-cases")


def test_a_gate_in_another_process_says_its_mistake_in_one_line(tmp_path):
    """`run_in_process`: the gate's own command in the checkout named, its exit code and output."""
    log = tmp_path / "gate.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert run_in_process(GateRequest(suite="no-such-suite", out=str(tmp_path / "out")), str(ROOT), env,
                          str(log)) == 2
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and "no-such-suite" in lines[0], lines


# --- no caller spells a flag of the gate ------------------------------------------------------------

# The gate's callers (the proof is perf/lab/proof.py), found by name wherever they are.
CALLERS = ("bisect.py", "selftest.py", "confirm.py", "attribute.py", "proof.py")
# Flags of the gate (asserted below) that none of its callers' other commands take: a caller
# spelling one spells a gate command.
GATE_ONLY = ("--base-ref", "--head-ref", "--toolchain", "--allow-dirty", "--no-gpu-ok", "--plan-only",
             "--plan")


def _spelled(path: Path) -> list[str]:
    """Where `path`'s code writes a gate command: the command name in a list or tuple, one of
    GATE_ONLY as a string of its own, or a flag built from a name (f"--{opt}")."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.List, ast.Tuple)) and any(
                isinstance(e, ast.Constant) and e.value == "gate" for e in node.elts):
            found.append(f"{path.name}:{node.lineno}: a list with the command `gate`")
        elif isinstance(node, ast.Constant) and node.value in GATE_ONLY:
            found.append(f"{path.name}:{node.lineno}: {node.value}")
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and node.values[0].value == "--" and len(node.values) > 1:
            found.append(f"{path.name}:{node.lineno}: a flag built from a name")
    return found


def test_no_caller_spells_a_gate_flag():
    gate_flags = {s for a in command_parser("gate")._actions for s in a.option_strings}
    assert set(GATE_ONLY) <= gate_flags
    callers = [p for p in (ROOT / "perf").rglob("*.py") if p.name in CALLERS]
    assert {p.name for p in callers} == set(CALLERS), "a caller moved out of perf/: find it again"
    assert [x for p in callers for x in _spelled(p)] == []


def test_the_check_sees_a_spelled_gate(tmp_path):
    """The check itself: each way of spelling a gate command is found."""
    (tmp_path / "caller.py").write_text(
        'import sys\nargv = ["gate", "--suite", "pr"]\nmore = ("--base-ref", "HEAD")\n'
        'flags = [f"--{opt}" for opt in sys.argv]\n')
    assert [x.split(": ", 1)[1] for x in _spelled(tmp_path / "caller.py")] == [
        "a list with the command `gate`", "--base-ref", "a flag built from a name"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
