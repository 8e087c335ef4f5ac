"""`python -m perf <command>`: one registry of every command, one error boundary around each.

COMMANDS maps each command to its module, its help, how its arguments are added and its
main; `python -m perf --help` lists them, and every one is parsed (one-line argparse errors,
numbers range-checked: RANGES) and dispatched the same way: the paths it names are checked
before any work (Command.outputs and .inputs), a measuring command's names and the GPU rule
next (perf.validate.before_measuring), then its main runs. Modules are imported only when their
command is asked for. Every `python -m perf.<module>` entry point (the gate's workers and
side processes included) runs inside the same boundary: `entry(main)`, or `command(name)`
for a registered command.

The boundary (`boundary`): a ConfigError is its one line on stderr, exit 2 (ContextLost:
exit 1); a missing third-party package is one line naming it and the interpreter to use,
exit 2; Ctrl-C or SIGTERM is one line, exit 130, and the processes the command started are
stopped (children run in process groups of their own: `run_child`); any other exception
is a bug in the harness: `internal error: <Type>: <message>`, exit 3. `--debug` (before
or after the command) or PERF_DEBUG=1 shows the traceback of everything.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import NoReturn

from perf import interrupts
from perf.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, ConfigError

DEFAULT_PATH = "thresholds.yaml"  # perf.thresholds.DEFAULT_PATH; not imported here: that needs PyYAML
DEBUG_ENV = "PERF_DEBUG"


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: `module.<main>(args)` after `module.<add>(parser)` added its arguments
    (`add` None: the parser of `_add_own`; `parser`: a module function returning a parser
    whose arguments the command takes). `outputs`: (option dest, "file" | "dir") checked
    with perf.files.check_output before the command runs; `inputs`: (dest, "file" | "dir"),
    each path (or list of paths) checked to exist as that and, for a file, to read as UTF-8
    text (perf.files.read_text), so no ordinary OS mistake reaches a command's reader."""

    module: str
    help: str
    main: str = "main"
    add: str | None = "add_arguments"
    parser: str | None = None
    thresholds: bool = True  # takes --thresholds PATH
    outputs: tuple[tuple[str, str], ...] = ()
    inputs: tuple[tuple[str, str], ...] = ()


COMMANDS: dict[str, Command] = {
    "run": Command("perf.measure.run", "measure a suite with this checkout's kernels into a results file",
                   main="run_command", add=None, outputs=(("out", "file"),)),
    "compare": Command("perf.latency.ab", "compare two results files (base, head) and apply the latency "
                       "thresholds", main="compare_command", add=None, outputs=(("out", "dir"),),
                       inputs=(("base", "file"), ("head", "file"))),
    "gate": Command("perf.latency.ab", "A/B latency gate: head vs base (git worktree), interleaved on this "
                    "GPU, timing only the cases whose launches differ", main="gate_command", add=None,
                    outputs=(("out", "dir"),), inputs=(("plan", "file"),)),
    "report": Command("perf.latency.ab", "render a findings file (from compare/gate) as Markdown and a plot",
                      main="report_command", add=None, outputs=(("plot", "file"),),
                      inputs=(("findings", "file"),)),
    "table": Command("perf.report", "render results files as a benchmark table: variants and peers side by "
                     "side", main="table_command", add=None, outputs=(("out", "file"),),
                     inputs=(("results", "file"), ("docs", "file"))),
    "compile": Command("perf.static.gate", "static gate: cross-compile every variant per target, compare "
                       "resources and compile time", outputs=(("out", "dir"), ("emit_json", "file"),
                                                       ("cache_dir", "dir"), ("results", "file")),
                       inputs=(("source", "dir"),)),
    "compile-calibrate": Command("perf.static.calibrate", "the static gate's compile-time noise on this CPU "
                                 "(A/A pairs of cold compiles) into calibration/compile-time.yaml",
                                 outputs=(("write", "file"),)),
    "why": Command("perf.why", "why a case is slower: both sides' launch plans, static metrics on the "
                   "runner's target and device time per kernel, differences marked",
                   outputs=(("out", "dir"),)),
    "workflows": Command("perf.ci.workflows", "generate or check .github/workflows from thresholds.yaml",
                         thresholds=False, inputs=(("root", "dir"),)),
    "nightly": Command("perf.nightly", "nightly asv run, publish and plots", main="nightly_main",
                       add="add_nightly_arguments", outputs=(("out", "dir"),), inputs=(("config", "file"),)),
    "alert": Command("perf.nightly", "change-point alerts over the nightly history", main="alert_main",
                     add="add_alert_arguments", outputs=(("out", "dir"),), inputs=(("config", "file"),)),
    "host-cost": Command("perf.measure.host_cost", "host time of a call beside the peers, alternated call by "
                         "call in fresh processes", outputs=(("out", "file"), ("md", "file"))),
    "noise": Command("perf.latency.noise", "A/A noise per scenario and the smallest slowdown the gate "
                     "detects", outputs=(("write", "file"),), inputs=(("paths", "dir"),)),
    "calibrate": Command("perf.latency.calibrate", "measure the latency gate's noise on this GPU into "
                         "calibration/<vendor>.yaml", outputs=(("out", "dir"), ("write", "file"))),
    "tune": Command("perf.tune", "sweep static_grid launch configurations (what heuristics.py cites)",
                    outputs=(("out", "dir"),)),
    "bisect": Command("perf.latency.bisect", "find the first commit of GOOD..BAD that made one case slower "
                      "(a latency gate per step)", outputs=(("out", "dir"),)),
    "toolchain": Command("perf.nightly.toolchain", "both gates: this commit, installed Triton vs the newest "
                         "release (and pre-release)", outputs=(("out", "dir"),)),
    "selftest": Command("perf.latency.selftest", "the latency gate's false-fail rate and detection power on "
                        "this GPU (nox -s gate-selftest)", main="_main", add=None, parser="_parser",
                        thresholds=False, outputs=(("out", "dir"),)),
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
        import kernels

        lines.append(f"variants (kernels.VARIANTS): {', '.join(kernels.VARIANTS)}")
    except ImportError as e:  # torch or triton missing: help still works
        lines.append(f"variants: unavailable here ({e})")
    lines.append("`python -m perf COMMAND --help` gives a command's options; --debug (or PERF_DEBUG=1) "
                 "shows tracebacks. Exit codes: 0 pass, 1 regression or wrong result, 2 bad input, "
                 "3 a bug in the harness, 130 interrupted.")
    return "\n".join(lines)


def build_parser(with_choices: bool = False) -> argparse.ArgumentParser:
    """The top-level parser: every command listed; the five of `_add_own` parsed in full
    (what `perf bisect` parses its gate steps with), the others by `command_parser`."""
    parser = Parser(prog="python -m perf", description="The harness's commands: measure, gate, compare and "
                    "report (README.md; docs/architecture.md maps the code).",
                    epilog=_choices() if with_choices else None,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback of any error")
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


def check_paths(name: str, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse, before any work, an output the command cannot write or an input it cannot
    read (missing, a directory for a file or the reverse, not UTF-8 text), in one line."""
    from perf import files

    c = COMMANDS[name]
    for dest, kind in c.outputs:
        path = getattr(args, dest, None)
        if path is None or (dest == "cache_dir" and getattr(args, "no_cache", False)):
            continue
        files.check_output(path, _flag(parser, dest), directory=kind == "dir")
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


def run_command(name: str, argv: list[str]) -> int:
    """Parse `argv` for command `name`, check what it names, run its main: the exit code."""
    c = COMMANDS[name]
    parser = command_parser(name)
    args = parser.parse_args(argv)
    args.command = name
    check_paths(name, args, parser)
    from perf import validate

    validate.before_measuring(name, args)
    return getattr(importlib.import_module(c.module), c.main)(args)


def _dispatch(argv: list[str]) -> int:
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
    return run_command(name, argv[1:])


def _take_debug(argv: list[str]) -> tuple[list[str], bool]:
    """`argv` without the global --debug flag (anywhere before a `--`), and whether it was there."""
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    return kept, len(kept) != len(argv)


def main(argv: list[str] | None = None) -> int:
    """`python -m perf ARGV` in this process: the exit code (nothing raised, see module doc)."""
    argv, debug = _take_debug(list(sys.argv[1:] if argv is None else argv))
    return boundary(lambda: _dispatch(argv), debug=debug)


# --- the boundary ---------------------------------------------------------------------------

_quiet_interrupt = False  # a worker or side process (entry's `internal`): its parent reports it
# The import name of a third-party package -> what to install (the rest are the same).
PIP_NAMES = {"yaml": "pyyaml", "sklearn": "scikit-learn"}
OWN_PACKAGES = ("perf", "kernels", "tests")


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _missing_package(e: BaseException) -> str | None:
    """The one line for a third-party package this interpreter lacks, else None."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    top = e.name.split(".")[0]
    if top in OWN_PACKAGES:
        return None
    return (f"error: this Python ({sys.executable}) lacks the package {PIP_NAMES.get(top, top)} (`import "
            f"{e.name}` failed); run perf with the project's interpreter: `nox -s cli -- COMMAND ...` "
            f"(README, Quick start), or install the project into this one: {sys.executable} -m pip install "
            f"-e '.[test]'")


def _caused_by_interrupt(e: BaseException) -> bool:
    """Whether `e` was raised while handling (or because of) a KeyboardInterrupt, e.g. an
    import that Ctrl-C cut short and that failed in another way."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or e.__context__
    return False


def _exit_code(code) -> int:
    """What `sys.exit(code)` means, as an exit code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    _say(str(code))
    return 1


def boundary(fn: Callable[[], int | None], *, debug: bool = False, quiet_interrupt: bool = False) -> int:
    """Run `fn` and turn whatever it raises into an exit code and at most one line on stderr
    (the module docstring says which); never raises."""
    debug = debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    quiet_interrupt = quiet_interrupt or _quiet_interrupt
    try:
        code = _exit_code(fn())
    except SystemExit as e:
        code = _exit_code(e.code)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        if not quiet_interrupt:
            _say("interrupted: stopped; what finished is kept")
        return EXIT_INTERRUPTED
    except Exception as e:
        if debug:
            traceback.print_exc()
        if interrupts.interrupted() or _caused_by_interrupt(e):
            if not quiet_interrupt:
                _say(f"interrupted: stopped (while {type(e).__name__} was raised); what finished is kept")
            return EXIT_INTERRUPTED
        if isinstance(e, ConfigError):
            _say(f"error: {_one_line(e)}")
            return e.exit_code
        missing = _missing_package(e)
        if missing:
            _say(missing)
            return EXIT_BAD_INPUT
        _say(f"internal error: {type(e).__name__}: {_one_line(e)[:500]} (rerun with --debug for the "
             f"traceback)")
        return EXIT_INTERNAL
    if interrupts.interrupted() and code != EXIT_INTERRUPTED:  # code that caught the interrupt and went on
        if not quiet_interrupt:
            _say("interrupted: stopped; what finished is kept")
        return EXIT_INTERRUPTED
    return code


def entry(main_fn: Callable[[list[str]], int | None], argv: list[str] | None = None, *,
          internal: bool = False) -> NoReturn:
    """What every `if __name__ == "__main__":` of the harness calls: `main_fn(argv)` inside
    the boundary, as the process's owner. SIGTERM is an interrupt like Ctrl-C; on an
    interrupt or a bug, every process this one started is stopped before it exits (stray
    grandchildren are adopted: Linux's child subreaper). `internal`: a worker or side process
    of another command, which says nothing on an interrupt (its parent does)."""
    global _quiet_interrupt
    _quiet_interrupt = internal
    argv, debug = _take_debug(list(sys.argv[1:] if argv is None else argv))
    if debug:
        os.environ[DEBUG_ENV] = "1"  # the processes it starts show theirs too
    _adopt_orphans()
    interrupts.catch_from_start()  # (done already where perf was imported for `python -m`)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupts.on_signal)
    interrupts.enter()
    code = boundary(lambda: main_fn(argv), debug=debug)
    if code in (EXIT_INTERRUPTED, EXIT_INTERNAL):
        for s in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        stop_children()
        # CPython marks a KeyboardInterrupt raised inside exec() of a string (dataclasses does it
        # at import) as unhandled and then dies by SIGINT at exit, whatever we return (measured:
        # exit -2 after this boundary had said "interrupted"); every such exec clears the mark.
        exec("pass", {})  # noqa: S102
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    sys.exit(code)


def command(name: str) -> NoReturn:
    """`python -m <the module of command name>`: the same as `python -m perf <name>`."""
    entry(lambda argv: main([name, *argv]))


# --- the processes a command starts -----------------------------------------------------------

def _adopt_orphans() -> None:
    """Linux: this process adopts its descendants whose parent died (PR_SET_CHILD_SUBREAPER),
    so that `stop_children` still finds them."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int | None = None) -> list[int]:
    """The live processes whose parent chain leads to `pid` (this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry_ in os.listdir("/proc"):
            if entry_.isdigit():
                stat = _proc_stat(int(entry_))
                if stat is not None and stat[1] != "Z":
                    children.setdefault(stat[0], []).append(int(entry_))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _reap() -> None:
    """Collect the exit status of finished children (adopted ones included)."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def stop_children(grace: float = 3.0) -> None:
    """Stop every descendant of this process: SIGTERM, then SIGKILL after `grace` seconds.
    multiprocessing's resource tracker ignores SIGTERM (and would warn of leaked semaphores
    once its pipe closes): it is killed at once."""
    pids = descendants()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                tracker = b"resource_tracker" in f.read()
        except OSError:
            tracker = False
        _signal(pid, signal.SIGKILL if tracker else signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        _reap()
        pids = [p for p in pids if (_proc_stat(p) or (0, "Z"))[1] != "Z"]
        time.sleep(0.05)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    _reap()


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a child started in a process group of its own (`start_new_session`) and all it
    started: SIGTERM to the child alone, up to `grace` seconds for it to stop what it started
    (`entry` does), then SIGKILL to whatever of the group is left. Not SIGINT, not to the
    group: a Python process still starting up dies of SIGINT with "Fatal Python error:
    init_import_site" and a traceback (a spawn worker of a compile side, 2-core CI,
    2026-11-27), of SIGTERM without a word."""
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                proc.send_signal(signal.SIGTERM)
            proc.wait(grace)
    except BaseException:  # noqa: S110 (a timeout or a second Ctrl-C: kill below)
        pass
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(5)


def run_child(cmd: list[str], *, timeout: float | None = None, grace: float = 10.0,
              capture_output: bool = False, **popen) -> subprocess.CompletedProcess:
    """`subprocess.run` for a child that may start processes of its own (a compile side with
    its worker pool, pip): it runs in a process group of its own, which an interrupt or a
    timeout here stops as a whole (`stop_group`), so nothing it started outlives it."""
    if capture_output:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace=0)
        raise
    except BaseException:
        stop_group(proc, grace)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
