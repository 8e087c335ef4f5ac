"""Two writers into one output: the second is refused in one line, and writes nothing there.

Every output a command declares (perf/cli.py's registry) is claimed once its arguments passed
their checks (a mistake is refused as that, whoever writes the output): its lock is held until
the command ends. Here a holder process claims the output through the same call
(perf.files.check_output), says so on its stdout, and holds it until the test closes its stdin:
each command started into that output meanwhile must be refused naming the holder. No sleep, no
timer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf import cli, files, process

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # starts processes
# not a part of a command this test process runs (perf.process.COMMAND_ENV): a command of its own
ENV = {**{k: v for k, v in os.environ.items() if k != process.COMMAND_ENV}, "PYTHONPATH": str(ROOT),
       "TRITON_INTERPRET": "1"}


def _perf(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "perf", *argv], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


_HEADER = {"kind": "header", "schema_version": 1, "suite": "smoke", "metrics": ["eager"], "samples": 3,
           "environment": {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "interpreter": False,
                           "commit": "0" * 40}}
_RECORD = {"kind": "record", "variant": "static_grid", "scenario": "llama3-8b/decode/batch2-kv64/block16",
           "metric": "eager", "repeat": 0, "samples": [1.0] * 3, "clock": "device", "median": 1.0,
           "p20": 1.0, "p80": 1.0, "config": [], "batch_digest": "x", "commit": "0" * 40}
_RESULTS = json.dumps(_HEADER) + "\n" + json.dumps(_RECORD) + "\n"


def _results(path: Path) -> None:
    path.write_text(_RESULTS, encoding="utf-8")


def _th(f) -> list[str]:
    return ["--thresholds", str(f or ROOT / "thresholds.yaml")]


# name -> (the command, given its folder, its output and a --thresholds file (None: the
# repository's), the output's kind
COMMANDS = {
    "compare": (lambda t, out, f: ["compare", str(t / "r.jsonl"), str(t / "h.jsonl"), "--out", out, *_th(f)],
                "dir"),
    "nightly simulate": (lambda t, out, f: ["nightly", "simulate", "--out", out, *_th(f)], "dir"),
    "compile": (lambda t, out, f: ["compile", "--out", out, *_th(f)], "dir"),
    "gate --plan-only": (lambda t, out, f: ["gate", "--plan-only", "--base-ref", "HEAD", "--suite", "smoke",
                                            "--allow-dirty", "--out", out, *_th(f)], "dir"),
    "run": (lambda t, out, f: ["run", "--suite", "smoke", "--variants", "naive", "--out", out, *_th(f)],
            "file"),
}
# claims argv[1] (a file, or a folder unless argv[2] is "file") as a command does, then holds it
HOLD = ("import sys; from perf import files; "
        "files.check_output(sys.argv[1], directory=sys.argv[2] != 'file'); "
        "print('held', flush=True); sys.stdin.read()")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_second_writer_into_one_output_is_refused(name, tmp_path):
    argv, kind = COMMANDS[name]
    _results(tmp_path / "r.jsonl")
    _results(tmp_path / "h.jsonl")
    out = str(tmp_path / ("out.jsonl" if kind == "file" else "out"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, out, kind], cwd=ROOT, env=ENV, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(os.listdir(out)) if kind == "dir" and os.path.isdir(out) else None
        second = _perf(*argv(tmp_path, out, None))
        _, err = second.communicate(timeout=600)
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert second.returncode == 2, err
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: --out {out}: being written by pid {holder.pid} since "), lines[0]
    if kind == "file":
        assert not os.path.exists(out)  # the refused command wrote nothing
    else:
        assert (sorted(os.listdir(out)) if os.path.isdir(out) else None) == before


def test_the_same_output_claimed_twice_in_one_process_is_one_claim(tmp_path):
    """A command that checks its output again (its registry entry, then its own code) holds one
    claim; `run_command` releases what it claimed when it returns, so a test's or a bisect's
    process can claim the same output again."""
    out = str(tmp_path / "out")
    held = files.held_claims()
    files.check_output(out, directory=True)
    files.check_output(out, directory=True)
    assert len(files.held_claims()) == len(held) + 1
    files.release_claims(keep=held)
    assert files.held_claims() == held
    assert cli.main(["nightly", "simulate", "--nights", "1", "--out", out]) == 2  # claimed, then refused
    assert files.held_claims() == held


def test_a_child_of_the_claiming_process_writes_into_the_claimed_output(tmp_path):
    """The worker or side process a command starts writes into the folder its parent claimed:
    the parent holds the lock and started it through process.child_env, so the child's claim is
    a no-op."""
    out = str(tmp_path / "out")
    held = files.held_claims()
    files.check_output(out, directory=True)
    try:
        code = (f"from perf import files; files.check_output({out!r}, directory=True); "
                f"files.write_text({out + '/f.txt'!r}, 'x')")
        env = process.child_env(str(ROOT), base=ENV)  # as a command starts its processes
        assert env[process.COMMAND_ENV] == str(os.getpid())
        child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               timeout=120)
    finally:
        files.release_claims(keep=held)
    assert child.returncode == 0, child.stderr
    assert (tmp_path / "out" / "f.txt").read_text() == "x"
