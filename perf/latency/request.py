"""What a latency gate is asked to do: `GateRequest`, one typed value for every way a gate starts.

`python -m perf gate` parses its command line into one (`GateRequest.from_args`); `perf bisect`
(a gate per step, in the bisect's process: perf/latency/bisect.py), the nightly's re-measure and
attribution (perf/nightly/confirm.py, attribute.py) and the gate self-test
(perf/latency/selftest.py) build one, varied with `dataclasses.replace`. In this process it goes
to perf/latency/ab.py `run_gate`. Where the gate runs in a process of its own (the nightly's, so
that its output, exit code and interrupt are the gate's; the self-test's, in a planted worktree
whose harness is that commit's), the request becomes the gate's command line here, once
(`to_argv`, `run_in_process`): no caller writes a flag of the gate, and
tests/latency/test_gate_request.py proves that `to_argv` parses back through the gate's own
parser into the same request.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, fields

from perf.thresholds import DEFAULT_PATH

COMMAND = "gate"  # `python -m perf gate` (perf/cli.py's registry)
# Fields spelled on the command line even at their defaults: a person reading a command (an issue
# quotes the re-measure's) sees which suite, metrics, thresholds and folder it used.
SPELLED = ("suite", "metrics", "thresholds", "out")


@dataclass(frozen=True)
class GateRequest:
    """Every option of `perf gate`, with its parser's defaults (perf/cli.py `_add_own`). The field
    order is the order `to_argv` writes them in."""

    base_ref: str | None = None  # None: merge base of HEAD with origin/main, else main
    toolchain: str | None = None  # "triton==X": this commit under the installed Triton and X
    head_ref: str | None = None  # None: this checkout
    suite: str = "pr"
    scenarios: str | None = None  # comma-separated fnmatch globs
    variants: str | None = None  # comma-separated; None: every registered variant
    metrics: str = "eager,graph"
    vendor: str | None = None  # None: this machine's GPU
    repeats: int | None = None  # paired rounds per process; None: thresholds
    samples: int | None = None  # per side and round; None: thresholds
    thresholds: str = DEFAULT_PATH
    out: str = "results/ab"
    seed: int = 0
    lock_timeout: float = 0.0
    allow_dirty: bool = False
    no_gpu_ok: bool = False
    force: bool = False
    plan_only: bool = False
    plan: str | None = None  # a plan.json of --plan-only
    all_cases: bool = False

    @classmethod
    def of_cases(cls, cases, **options) -> GateRequest:
        """The gate of (variant, scenario, metric) `cases`: it times every combination of their
        variants, scenarios and metrics (in the order first named), `options` the rest."""
        names = [",".join(dict.fromkeys(case[i] for case in cases)) for i in range(3)]
        return cls(variants=names[0], scenarios=names[1], metrics=names[2], **options)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GateRequest:
        """The request of the `gate` command's parsed arguments (each field is an option)."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    def to_argv(self) -> list[str]:
        """The gate's options (after `python -m perf gate`) that parse back into this request."""
        return options_argv(self, SPELLED)

    def command_line(self) -> str:
        """The command a person runs for this gate (quoted for a shell)."""
        return shlex.join(["python", "-m", "perf", COMMAND, *self.to_argv()])


def options_argv(options, spelled: tuple[str, ...] = ()) -> list[str]:
    """The command line of a dataclass whose fields are a parser's options (`--field-name`): a
    flag per field not at its default (`spelled` ones always), a true bool as a bare flag, a
    float in its shortest exact form, a dict as JSON, a value starting with "-" after "=" (so
    the parser does not take it for an option). The gate's (`GateRequest.to_argv`) and its
    measuring processes' (perf/latency/worker.py `Job.argv`)."""
    argv: list[str] = []
    for f in fields(options):
        value = getattr(options, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif value is not None and (value != f.default or f.name in spelled):
            text = _text(value)
            argv += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return argv


def _text(value) -> str:
    """A value as a parser reads it back: a float in its shortest exact form, a dict as JSON."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return json.dumps(value) if isinstance(value, dict) else str(value)


def run_in_process(request: GateRequest, cwd: str, env: dict | None = None, log: str | None = None) -> int:
    """The gate of `request` as `python -m perf gate` in the checkout `cwd`, in a process (group) of
    its own (perf.process.run_child: an interrupt here stops it and all it started); its exit code.
    Its output goes to this process's, or to the file `log` (stdout and stderr)."""
    from perf.process import run_child

    cmd = [sys.executable, "-m", "perf", COMMAND, *request.to_argv()]
    if log is None:
        return run_child(cmd, cwd=cwd, env=env).returncode
    with open(log, "w", encoding="utf-8") as out:
        return run_child(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
