"""`python -m perf <command>`: one registry of every command, each run inside the one boundary.

COMMANDS maps each command to its module, its help, how its arguments are added, the checks it
declares and its main; `python -m perf --help` lists them, and every one is parsed (one-line
argparse errors, numbers range-checked: RANGES) and dispatched the same way: the paths it names
are checked before any work (Command.outputs and .inputs), then the thresholds file and the
command's own checks (Command.check: names, vendor, the GPU rule), then its main runs. Modules
are imported only when their command is asked for. The boundary, `entry` and the processes a
command starts are perf/process.py's; `command(name)` runs a registered command as the
`python -m <module>` of its own module.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import importlib.util
import math
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from perf.errors import EXIT_BAD_INPUT, ConfigError
from perf.process import boundary, entry, take_debug

CHECK_ONLY = "--check-only"  # before the command: its checks, then nothing (noxfile.py's perf session)
DEFAULT_PATH = "thresholds.yaml"  # perf.thresholds.DEFAULT_PATH; not imported here: that needs PyYAML


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: `module.<main>(args)` after `module.<add>(parser)` added its arguments
    (`add` None: the parser of `_add_own`; `parser`: a module function returning a parser
    whose arguments the command takes). `outputs`: (option dest, "file" | "dir" | "cache")
    checked and claimed with perf.files.check_output before the command runs (a second command
    writing into the same file or folder is refused; a "cache" folder is shared, not claimed);
    `inputs`: (dest, "file" | "dir"), each path (or list of paths) checked to exist as that
    and, for a file, to read as UTF-8 text (perf.files.read_text), so no ordinary OS mistake
    reaches a command's reader; `check`: the command's own checks before any work."""

    module: str
    help: str
    main: str = "main"
    add: str | None = "add_arguments"
    parser: str | None = None
    thresholds: bool = True  # takes --thresholds PATH
    outputs: tuple[tuple[str, str], ...] = ()
    inputs: tuple[tuple[str, str], ...] = ()
    # "module:function" run on the parsed arguments before `main` (names, vendor, the GPU rule:
    # perf/validate.py's `*_args`), after the --thresholds file is read as the command reads it
    check: str | None = None
    # the outputs a side process writes (given the first, e.g. compile's --emit-json): only these
    # are claimed, never the folder of the whole command (--out) it leaves alone
    side_outputs: tuple[str, ...] = ()


COMMANDS: dict[str, Command] = {
    "run": Command("perf.measure.run", "measure a suite with this checkout's kernels into a results file",
                   main="run_command", add=None, outputs=(("out", "file"),), check="perf.validate:run_args"),
    "compare": Command("perf.latency.compare", "compare two results files (base, head) and apply the latency "
                       "thresholds", main="compare_command", add=None, outputs=(("out", "dir"),),
                       inputs=(("base", "file"), ("head", "file"))),
    "gate": Command("perf.latency.ab", "A/B latency gate: head vs base (git worktree), interleaved on this "
                    "GPU, timing only the cases whose launches differ", main="gate_command", add=None,
                    outputs=(("out", "dir"),), inputs=(("plan", "file"),),
                    check="perf.latency.ab:check_arguments"),
    "report": Command("perf.latency.compare",
                      "render a findings file (from compare/gate) as Markdown and a plot",
                      main="report_command", add=None, outputs=(("plot", "file"),),
                      inputs=(("findings", "file"),)),
    "table": Command("perf.report", "render results files as a benchmark table: variants and peers side by "
                     "side", main="table_command", add=None, outputs=(("out", "file"),),
                     inputs=(("results", "file"), ("docs", "file"))),
    "compile": Command("perf.static.gate", "static gate: cross-compile every variant per target, compare "
                       "resources and compile time", outputs=(("out", "dir"), ("emit_json", "file"),
                                                       ("cache_dir", "cache"), ("results", "file")),
                       inputs=(("source", "dir"),), side_outputs=("emit_json", "cache_dir", "results"),
                       check="perf.static.gate:check_arguments"),
    "compile-calibrate": Command("perf.static.calibrate", "the static gate's compile-time noise on this CPU "
                                 "(A/A pairs of cold compiles) into calibration/compile-time.yaml",
                                 outputs=(("write", "file"),), check="perf.validate:compile_calibrate_args"),
    "why": Command("perf.why", "why a case is slower: both sides' launch plans, static metrics on the "
                   "runner's target and device time per kernel, differences marked",
                   outputs=(("out", "dir"), ("cache_dir", "cache")), check="perf.validate:why_args"),
    "workflows": Command("perf.ci.workflows", "generate or check .github/workflows from thresholds.yaml",
                         thresholds=False, inputs=(("root", "dir"),)),
    "nightly": Command("perf.nightly", "nightly asv run, publish and plots", main="nightly_main",
                       add="add_nightly_arguments", outputs=(("out", "dir"),), inputs=(("config", "file"),),
                       check="perf.nightly:check_nightly"),
    "alert": Command("perf.nightly", "change-point alerts over the nightly history", main="alert_main",
                     add="add_alert_arguments", outputs=(("out", "dir"),), inputs=(("config", "file"),),
                     check="perf.nightly:check_alert"),
    "host-cost": Command("perf.measure.host_cost", "host time of a call beside the peers, alternated call by "
                         "call in fresh processes", outputs=(("out", "file"), ("md", "file")),
                         check="perf.validate:host_cost_args"),
    "noise": Command("perf.latency.noise", "A/A noise per scenario and the smallest slowdown the gate "
                     "detects", outputs=(("write", "file"),), inputs=(("paths", "dir"),)),
    "calibrate": Command("perf.latency.calibrate", "measure the latency gate's noise on this GPU into "
                         "its model's calibration file (calibration/<vendor>[-<model>].yaml)",
                         outputs=(("out", "dir"), ("write", "file")),
                         check="perf.validate:calibrate_args"),
    "tune": Command("perf.tune", "sweep static_grid launch configurations (what heuristics.py cites)",
                    outputs=(("out", "dir"),), check="perf.tune:check_arguments"),
    "bisect": Command("perf.latency.bisect", "find the first commit of GOOD..BAD that made one case slower "
                      "(a latency gate per step)", outputs=(("out", "dir"),),
                      check="perf.validate:bisect_args"),
    "toolchain": Command("perf.nightly.toolchain", "both gates: this commit, installed Triton vs the newest "
                         "release (and pre-release)", outputs=(("out", "dir"),),
                         check="perf.validate:toolchain_args"),
    "selftest": Command("perf.latency.selftest", "the latency gate's false-fail rate and detection power on "
                        "this GPU (nox -s gate-selftest)", main="_main", add=None, parser="_parser",
                        thresholds=False, outputs=(("out", "dir"),), check="perf.validate:selftest_args"),
    "comment": Command("perf.ci.comment", "the sticky pull-request comment of one vendor, from the gates' "
                       "findings", thresholds=False, outputs=(("out", "file"),),
                       inputs=(("findings", "file"), ("jobs", "file"))),
    "annotations": Command("perf.ci.annotations", "GitHub ::error/::warning lines for the failing and warned "
                           "cases of findings files (a workflow step after each gate)", thresholds=False,
                           inputs=(("findings", "file"), ("root", "dir"))),
    "grid": Command("perf.ci.grid", "does this change touch an input of the GPU correctness grid? (else the "
                    "GPU job skips it; --cases: which of its keyed cases can differ)", thresholds=False,
                    inputs=(("root", "dir"),)),
    "gpu-job": Command("perf.ci.gpu_job", "a vendor's GPU CI job on this machine (nox -s ci)",
                       thresholds=False, inputs=(("root", "dir"),)),
    "issues": Command("perf.nightly.issues", "post the issues of the nightly's confirmed regressions (after "
                      "perf alert --confirm)", thresholds=False,
                      inputs=(("results", "dir"), ("site", "dir"))),
}
OWN = {name: c.help for name, c in COMMANDS.items() if c.add is None and c.parser is None}

# option (argparse dest) -> (type, smallest value, whether the smallest is excluded): every
# command's numeric options are range-checked when parsed, so `--repeats 0`, `--samples -3`
# or `--lock-timeout nan` end in one line, exit 2, instead of deep in a run.
RANGES: dict[str, tuple[type, float, bool]] = {
    "repeats": (int, 1, False), "samples": (int, 1, False), "processes": (int, 1, False),
    "rounds": (int, 1, False), "jobs": (int, 1, False), "threads": (int, 1, False),
    "window": (int, 1, False), "min_history": (int, 1, False), "max_cases": (int, 1, False),
    "retries": (int, 0, False), "max_age_hours": (float, 0, True),
    "commits": (int, 1, False), "plant_at": (int, 1, False), "percent": (int, 1, False),
    "aa_runs": (int, 0, False), "plant_runs": (int, 0, False), "launch_cost_runs": (int, 0, False),
    "first_repeat": (int, 0, False), "warmup": (int, 0, False),
    "lock_timeout": (float, 0, False), "budget_ms": (float, 0, True), "max_call_ms": (float, 0, True),
    "max_minutes": (float, 0, True),
}


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (a ConfigError: the boundary prints it,
    exit 2) naming the command, the argument and where the usage is."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {' '.join(message.split())}; see `{self.prog} --help`")


def _number(kind: type, lo: float | None = None, open_: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite `kind` at least `lo` (above it with `open_`)."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if lo is not None and (value <= lo if open_ else value < lo):
            least = "above" if open_ else "at least"
            raise argparse.ArgumentTypeError(f"{text} is too small: it must be {least} {lo:g}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _apply_ranges(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every int/float option of `parser` (and of its sub-parsers) range-checked (RANGES)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _apply_ranges(sub)
        elif action.type in (int, float):
            kind, lo, open_ = RANGES.get(action.dest, (action.type, None, False))
            action.type = _number(action.type if lo is None else kind, lo, open_)
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thresholds", default=DEFAULT_PATH, metavar="PATH",
                   help=f"thresholds file (default: ./{DEFAULT_PATH})")


def _measure_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="pr", help="suite of perf/suites.yaml (default: pr)")
    p.add_argument("--variants", default=None, help="comma-separated variants (default: every registered)")
    p.add_argument("--scenarios", default=None, help="comma-separated fnmatch globs over scenario names")
    p.add_argument("--metrics", default="eager,graph", help="eager,graph (default both; graph needs a GPU)")
    p.add_argument("--vendor", default=None, help="nvidia | amd (default: this machine's GPU)")
    p.add_argument("--repeats", type=int, default=None,
                   help="rounds (gate: paired rounds per process; default: thresholds)")
    p.add_argument("--samples", type=int, default=None,
                   help="samples per side and round (default: thresholds)")


def _add_own(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help=OWN["run"], description=OWN["run"])
    _common(p)
    _measure_options(p)
    p.add_argument("--out", default="results/run.jsonl", help="results file (JSON Lines; resumed if present)")
    p.add_argument("--no-resume", action="store_true", help="overwrite --out instead of resuming it")
    p.add_argument("--force", action="store_true",
                   help="with --no-resume: replace an --out measured on another GPU, vendor or the "
                        "interpreter")
    p.add_argument("--allow-cpu", action="store_true",
                   help="run a GPU-sized suite in Triton's interpreter when there is no GPU (slow)")
    p.add_argument("--peers", default="none",
                   help="vendor libraries measured beside the variants, in the same rounds: auto (this "
                        "GPU's installed ones), none (default), or a comma list (perf/peers.py)")

    p = sub.add_parser("table", help=OWN["table"], description=OWN["table"])
    _common(p)
    p.add_argument("results", nargs="+", help="results file(s) of `perf run` (several: merged)")
    p.add_argument("--out", default=None, help="also write the Markdown to this file")
    p.add_argument("--ours", default="static_grid",
                   help="the variant whose ratio to the best peer is shown (default: static_grid)")
    p.add_argument("--against", default=None,
                   help="comma list of peers to show the ratio to as well, each in its own table "
                        "(e.g. flashinfer_paged: the peer a target is set against)")
    p.add_argument("--docs", default=None, metavar="FILE.md",
                   help="also write the table into FILE.md between its `<!-- perf table SUITE: ... -->` "
                        "markers (perf.report.docs_markers), e.g. docs/kernels.md")

    p = sub.add_parser("compare", help=OWN["compare"], description=OWN["compare"])
    _common(p)
    p.add_argument("base", help="results file of the base side")
    p.add_argument("head", help="results file of the head side")
    p.add_argument("--vendor", default=None, help="thresholds section (default: from the results)")
    p.add_argument("--out", default=None, help="directory for findings.json, report.md and ratios.png")

    p = sub.add_parser("gate", help=OWN["gate"], description=OWN["gate"])
    _common(p)
    _measure_options(p)
    p.add_argument("--base-ref", default=None,
                   help="base commit (default: merge base of HEAD with origin/main, else main)")
    p.add_argument("--head-ref", default=None,
                   help="head commit, checked out in a worktree like the base (default: this checkout; "
                        "what perf bisect and the nightly's re-measure use)")
    p.add_argument("--toolchain", default=None, metavar="triton==X",
                   help="measure this checkout under the installed Triton (base) and Triton X (head, from "
                        "the package index; PIP_NO_INDEX / PIP_FIND_LINKS apply), one side per process")
    p.add_argument("--out", default="results/ab", help="directory for results, findings and report")
    p.add_argument("--allow-dirty", action="store_true",
                   help="measure uncommitted changes as the head side (default: refuse a dirty tree)")
    p.add_argument("--no-gpu-ok", action="store_true",
                   help="without a GPU, say that latency needs one and exit 0 (nox -s perf)")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffled round order")
    p.add_argument("--lock-timeout", type=float, default=0.0,
                   help="seconds to wait for another run's GPU lock (default: fail at once)")
    p.add_argument("--force", action="store_true",
                   help="replace another machine's gate measurements in --out (GPU, vendor or interpreter)")
    p.add_argument("--plan-only", action="store_true",
                   help="no GPU: plan base and head on this CPU, write --out/plan.json (which cases have "
                        "identical launches, which to time) and print one line; nothing is measured")
    p.add_argument("--plan", default=None, metavar="FILE",
                   help="time the cases of this plan.json (from --plan-only) instead of planning again")
    p.add_argument("--all-cases", action="store_true",
                   help="time every case, also those whose launches are identical on both sides (A/A runs)")

    p = sub.add_parser("report", help=OWN["report"], description=OWN["report"])
    _common(p)
    p.add_argument("findings", help="findings.json written by compare or gate")
    p.add_argument("--plot", default=None, help="also draw the ratios to this PNG")


def _choices() -> str:
    """The suites and variants a user may name, for --help (computed only when asked)."""
    lines = []
    try:
        from perf import scenarios

        lines.append(f"suites (perf/suites.yaml): {', '.join(scenarios.suite_names())}")
    except (ImportError, ConfigError) as e:
        lines.append(f"suites: unavailable here ({e})")
    try:
        from perf import checkout  # the names, read without importing kernels (and torch)

        lines.append(f"variants (kernels.VARIANTS): {', '.join(checkout.variant_names())}")
    except ImportError as e:  # no literal to read, and torch or triton missing: help still works
        lines.append(f"variants: unavailable here ({e})")
    lines.append("`python -m perf COMMAND --help` gives a command's options; --debug (or PERF_DEBUG=1) "
                 "shows tracebacks. Exit codes: 0 pass, 1 regression or wrong result, 2 bad input, "
                 "3 a bug in the harness, 130 interrupted.")
    return "\n".join(lines)


def build_parser(with_choices: bool = False) -> argparse.ArgumentParser:
    """The top-level parser: every command listed; the five of `_add_own` parsed in full
    (`command_parser` takes theirs from it), the others by `command_parser`."""
    parser = Parser(prog="python -m perf", description="The harness's commands: measure, gate, compare and "
                    "report (README.md; docs/architecture.md maps the code).",
                    epilog=_choices() if with_choices else None,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback of any error")
    parser.add_argument(CHECK_ONLY, action="store_true",
                        help="check the command's arguments and the files it names, then stop (exit 0, "
                             "or the one line of what is wrong): a wrapper of several commands does it first")
    sub = parser.add_subparsers(dest="command", metavar="command", parser_class=Parser)
    _add_own(sub)
    for name, c in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=c.help, add_help=False)  # listed; parsed by command_parser
    return _apply_ranges(parser)


def _module(name: str):
    module_name = COMMANDS[name].module
    if importlib.util.find_spec(module_name) is None:
        raise ConfigError(f"`python -m perf {name}` needs {module_name.replace('.', '/')}.py, which "
                          f"this checkout does not have yet; update the checkout")
    return importlib.import_module(module_name)


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of command `name`, as the registry says to build it."""
    c = COMMANDS[name]
    if c.add is None and c.parser is None:
        top = build_parser()
        (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
        return sub.choices[name]
    module = _module(name)
    parents = [getattr(module, c.parser)()] if c.parser else []
    parser = Parser(prog=f"python -m perf {name}", description=c.help, parents=parents,
                    conflict_handler="resolve")
    if c.thresholds:
        _common(parser)
    if c.add:
        getattr(module, c.add)(parser)
    return _apply_ranges(parser)


def _flag(parser: argparse.ArgumentParser, dest: str) -> str:
    """How the user wrote the option of `dest` (--cache-dir; a positional's metavar)."""
    for action in parser._actions:
        if action.dest == dest:
            return action.option_strings[0] if action.option_strings else (action.metavar or dest)
    return "--" + dest.replace("_", "-")


def _outputs(name: str, args: argparse.Namespace, parser: argparse.ArgumentParser):
    """(path, flag, kind) of each output the command's arguments name."""
    c = COMMANDS[name]
    side = bool(c.side_outputs) and getattr(args, c.side_outputs[0], None) is not None
    for dest, kind in c.outputs:
        if side and dest not in c.side_outputs:
            continue
        path = getattr(args, dest, None)
        if path is not None and not (dest == "cache_dir" and getattr(args, "no_cache", False)):
            yield path, _flag(parser, dest), kind


def check_paths(name: str, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse, before any work, an output the command cannot write or an input it cannot
    read (missing, a directory for a file or the reverse, not UTF-8 text), in one line. The
    outputs are claimed once every check passed (`run_command`): a mistake in the arguments is
    refused as that, whoever writes into the same output."""
    from perf import files

    c = COMMANDS[name]
    for path, flag, kind in _outputs(name, args, parser):
        files.check_output(path, flag, directory=kind != "file", shared=True)
    for dest, kind in c.inputs:
        value = getattr(args, dest, None)
        for path in value if isinstance(value, list) else [value]:
            if path is None:
                continue
            flag = _flag(parser, dest)
            if kind == "dir":
                if not os.path.isdir(path):
                    why = "is a file, not a directory" if os.path.exists(path) else "no such directory"
                    raise ConfigError(f"{flag} {path}: {why}; name an existing directory")
            else:
                files.read_text(path, f"{flag} file", f"name an existing text file as {flag}")


def run_command(name: str, argv: list[str], check_only: bool = False) -> int:
    """Parse `argv` for command `name`, check what it names, run its main (not with
    `check_only`): the exit code. The outputs it claims (perf.files.check_output) are held
    until it returns, also when it runs in a process that goes on (a test, `perf bisect`)."""
    from perf import files

    c = COMMANDS[name]
    parser = command_parser(name)
    args = parser.parse_args(argv)
    args.command = name
    held = list(files.held_claims())
    try:
        check_paths(name, args, parser)
        if c.check:
            if getattr(args, "thresholds", None):  # the whole file, read as the command will read it
                from perf.thresholds import load_thresholds

                load_thresholds(args.thresholds)
            module, function = c.check.split(":")
            getattr(importlib.import_module(module), function)(args)
        if check_only:
            return 0
        for path, flag, kind in _outputs(name, args, parser):  # every check passed: claim them
            if kind != "cache":  # a compile cache is written into by many at once, by design
                files.claim(path, flag)
        return getattr(importlib.import_module(c.module), c.main)(args)
    finally:
        files.release_claims(keep=held)


def _dispatch(argv: list[str]) -> int:
    check_only = bool(argv) and argv[0] == CHECK_ONLY
    if check_only:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        build_parser(with_choices=True).print_help()
        return 0 if argv else EXIT_BAD_INPUT
    name = argv[0]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        where = "options go after the command; " if name.startswith("-") else ""
        raise ConfigError(f"unknown command {name!r}: {hint}{where}commands: {', '.join(COMMANDS)} "
                          f"(`python -m perf --help` says what each does)")
    return run_command(name, argv[1:], check_only)


def main(argv: list[str] | None = None) -> int:
    """`python -m perf ARGV` in this process: the exit code (nothing raised, see module doc)."""
    argv, debug = take_debug(list(sys.argv[1:] if argv is None else argv))
    return boundary(lambda: _dispatch(argv), debug=debug)


def command(name: str) -> NoReturn:
    """`python -m <the module of command name>`: the same as `python -m perf <name>`."""
    entry(lambda argv: main([name, *argv]))
