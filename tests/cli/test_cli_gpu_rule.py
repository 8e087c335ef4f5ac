"""Runs that should not start: names are checked first, then the one GPU rule
(perf.vendor.require_gpu), for every command that measures, before its own code runs.

Each command's main is replaced by a stub that records whether it was reached: on a CPU a
GPU-sized run must never reach it (by no route: `--vendor nvidia` included), a typo must be
named instead of "no GPU", and what a CPU may run (the smoke suite) must reach it.
"""

from __future__ import annotations

import importlib

import pytest

from perf import cli, files, vendor
from perf.errors import ConfigError

pytestmark = pytest.mark.slow  # starts processes

PR_SCENARIO = "llama3-8b/decode/batch1-kv128/block16"
SMOKE_SCENARIO = "tiny/decode/batch1-kv16/block16"


@pytest.fixture
def reached(monkeypatch):
    """Every command's main stubbed (nothing measures or compiles); the names that ran."""
    from perf import checkout

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # no GPU, on any machine
    monkeypatch.chdir(checkout.ROOT)  # a git checkout with thresholds.yaml; nothing is written
    # so no output is claimed: a claim lasts the process, and a real run beside this one (a GPU
    # runner's) writes the checkout's default results/
    monkeypatch.setattr(files, "claim", lambda path, flag="--out": files.lock_path(path))
    ran: list[str] = []
    for name, command in cli.COMMANDS.items():
        module = importlib.import_module(command.module)
        monkeypatch.setattr(module, command.main, lambda args, name=name: ran.append(name) or 0)
    return ran


def _refused(argv: list[str], reached: list[str], capsys, *needles: str) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    assert not reached, f"{reached} ran after a refusal"
    return err


GPU_SIZED = [  # (argv, what the line must say)
    (["run", "--vendor", "nvidia"], ["no GPU here: perf run --suite pr", "--suite smoke", "--allow-cpu"]),
    (["run", "--suite", "anchor", "--vendor", "amd"], ["--suite anchor is sized for a GPU"]),
    (["gate", "--suite", "pr", "--base-ref", "HEAD"], ["no GPU here: perf gate --suite pr", "GPU machine"]),
    (["calibrate", "--suite", "smoke"], ["no GPU here: perf calibrate measures on a CUDA or ROCm GPU"]),
    (["host-cost", "--suite", "smoke"], ["no GPU here: perf host-cost"]),
    (["selftest", "--suite", "smoke"], ["no GPU here: perf selftest"]),
    (["tune"], ["no GPU here: perf tune"]),
    (["nightly", "run"], ["no GPU here: perf nightly --suite nightly", "--allow-cpu"]),
    (["bisect", "HEAD", "HEAD", "--scenario", PR_SCENARIO], ["no GPU here: perf bisect --suite pr",
                                                            "smoke suite"]),
]


@pytest.mark.parametrize("argv, needles", GPU_SIZED, ids=[" ".join(a) for a, _ in GPU_SIZED])
def test_a_gpu_sized_run_never_starts_on_a_cpu(argv, needles, reached, capsys):
    _refused(argv, reached, capsys, *needles)


TYPOS = [  # a typo is named, never hidden behind "no GPU" (or found after a compile)
    (["host-cost", "--variants", "nave"], "--variants nave: unknown variant nave"),
    (["host-cost", "--peers", "flashinfr"], "--peers flashinfr: unknown peer flashinfr"),
    (["calibrate", "--suite", "bogus"], "no suite 'bogus'"),
    (["calibrate", "--metrics", "graf"], "--metrics graf: unknown metric graf"),
    (["calibrate", "--vendor", "intel"], "--vendor intel: unknown vendor"),
    (["toolchain", "--variants", "nave"], "--variants nave: unknown variant nave"),
    (["toolchain", "--scenarios", "nothing*"], "--scenarios 'nothing*' matches no scenario"),
    (["selftest", "--variants", "qblock,bogus"], "unknown variant bogus"),
    (["tune", "--suite", "bogus"], "no suite 'bogus'"),
    (["nightly", "run", "--variants", "nave"], "--variants nave: unknown variant nave"),
    (["run", "--suite", "pr", "--variants", "nave"], "--variants nave"),
    (["gate", "--suite", "pr", "--base-ref", "no-such-ref"], "--base-ref no-such-ref: no such commit"),
    (["gate", "--suite", "pr", "--toolchain", "triton>=3"], "--toolchain 'triton>=3': not a pinned Triton"),
    (["bisect", "HEAD", "nope", "--scenario", PR_SCENARIO], "BAD nope: no such commit"),
    (["bisect", "HEAD", "HEAD", "--scenario", "llama3-8b/decode/batch1-kv12"], "--scenario"),
]


@pytest.mark.parametrize("argv, needle", TYPOS, ids=[" ".join(a) for a, _ in TYPOS])
def test_names_are_checked_before_the_gpu_rule(argv, needle, reached, capsys):
    _refused(argv, reached, capsys, needle)


def test_a_broken_thresholds_file_is_named_before_the_gpu_rule(reached, capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nvidia:\n  latency: {warn: 1.03}\n")
    _refused(["host-cost", "--thresholds", str(bad)], reached, capsys, str(bad))


ALLOWED_ON_A_CPU = [
    ["run", "--suite", "smoke"],
    ["run", "--suite", "pr", "--allow-cpu"],
    ["gate", "--suite", "pr", "--no-gpu-ok"],  # it says it skipped, exit 0
    ["nightly", "run", "--allow-cpu", "--suite", "smoke"],
    ["nightly", "publish"],
    ["calibrate", "--launch-cost-threshold"],
    ["selftest", "--summarize"],
    ["bisect", "HEAD", "HEAD", "--scenario", SMOKE_SCENARIO, "--metric", "eager"],
    ["toolchain", "--versions", "3.9.0"],  # its latency gate skips without a GPU
    ["compile", "--suite", "smoke"],
]


@pytest.mark.parametrize("argv", ALLOWED_ON_A_CPU, ids=" ".join)
def test_what_a_cpu_may_run_reaches_the_command(argv, reached, capsys):
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert reached == [argv[0]]


def test_the_rule_itself(monkeypatch):
    monkeypatch.setattr(vendor, "on_gpu", lambda: True)
    assert vendor.require_gpu("perf run", "pr") is True
    monkeypatch.setattr(vendor, "on_gpu", lambda: False)
    assert vendor.require_gpu("perf run", "smoke") is False
    assert vendor.require_gpu("perf run", "pr", cpu_ok=True) is False
    with pytest.raises(ConfigError, match="no GPU here: perf tune measures on a CUDA or ROCm GPU"):
        vendor.require_gpu("perf tune")
    with pytest.raises(ConfigError, match=r"--suite pr is sized for a GPU.*smoke\), or pass --allow-cpu"):
        vendor.require_gpu("perf run", "pr", allow="--allow-cpu")


def test_nox_launch_cost_refuses_a_cpu_before_pytest_like_the_other_gpu_sessions():
    """`nox -s launch-cost` passed on a CPU with every benchmark skipped (exit 0) while the
    other GPU-only sessions exit 2: it now runs perf.vendor.require_gpu first."""
    import ast
    import os
    import subprocess
    import sys

    from perf import checkout

    source = open(os.path.join(checkout.ROOT, "noxfile.py"), encoding="utf-8").read()
    tree = ast.parse(source)
    (session,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "launch_cost"]
    calls = [ast.unparse(c.func) for c in ast.walk(session) if isinstance(c, ast.Call)]
    assert "_require_gpu" in calls and calls.index("_require_gpu") < calls.index("session.run")
    # what _require_gpu runs in the project's interpreter (noxfile.py needs nox to import)
    assert '"from perf import process, vendor; process.entry(lambda argv: "' in source
    snippet = ("from perf import process, vendor; "
               "process.entry(lambda argv: vendor.require_gpu('nox -s launch-cost') and 0)")
    done = subprocess.run([sys.executable, "-c", snippet], cwd=checkout.ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=checkout.ROOT), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no GPU here: nox -s launch-cost measures on a CUDA or ROCm GPU" in done.stderr
