"""`python -m perf <command>`: the harness's command line.

Commands of this package: `run` (measure a suite on this GPU), `compare` (two results
files -> verdicts), `gate` (the A/B latency gate: base worktree vs head, interleaved on
this GPU), `report` (re-render a findings file), `table` (results files -> a benchmark
table). Commands owned by other modules are imported only when asked for (`compile` ->
perf.static.gate, `workflows` -> perf.ci.workflows, `nightly`/`alert` -> perf.nightly,
`noise` -> perf.latency.noise, `host-cost` -> perf.latency.host_cost, `tune` -> perf.tune,
`bisect` -> perf.latency.bisect, `toolchain` -> perf.nightly.toolchain); each exposes
`add_arguments(parser)` and `main(args) -> int`. Every command takes `--thresholds PATH`.
A `ConfigError` anywhere ends in its one line on stderr and exit 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from perf.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, ConfigError
from perf.thresholds import DEFAULT_PATH

# command -> (module, help); the module's add_arguments/main (or add_<cmd>_arguments/<cmd>_main)
EXTERNAL = {
    "compile": ("perf.static.gate", "static gate: cross-compile every variant per target, compare resources"),
    "workflows": ("perf.ci.workflows", "generate or check .github/workflows from thresholds.yaml"),
    "nightly": ("perf.nightly", "nightly asv run, publish and plots"),
    "alert": ("perf.nightly", "change-point alerts over the nightly history"),
    "host-cost": ("perf.latency.host_cost",
                  "host time of a call beside the peers, alternated call by call in fresh processes"),
    "noise": ("perf.latency.noise", "A/A noise per scenario and the smallest slowdown the gate detects"),
    "calibrate": ("perf.latency.calibrate",
                  "measure the latency gate's noise on this GPU into calibration/<vendor>.yaml"),
    "tune": ("perf.tune", "sweep static_grid launch configurations (what heuristics.py cites)"),
    "bisect": ("perf.latency.bisect",
               "find the first commit of GOOD..BAD that made one case slower (a latency gate per step)"),
    "toolchain": ("perf.nightly.toolchain",
                  "both gates: this commit, installed Triton vs the newest release (and pre-release)"),
}
OWN = {
    "run": "measure a suite with this checkout's kernels into a results file",
    "compare": "compare two results files (base, head) and apply the latency thresholds",
    "gate": "A/B latency gate: head vs base (git worktree), interleaved on this GPU",
    "report": "render a findings file (from compare/gate) as Markdown and a plot",
    "table": "render results files as a benchmark table: variants and peers side by side",
}


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

    p = sub.add_parser("report", help=OWN["report"], description=OWN["report"])
    _common(p)
    p.add_argument("findings", help="findings.json written by compare or gate")
    p.add_argument("--plot", default=None, help="also draw the ratios to this PNG")


def _choices() -> str:
    """The suites and variants a user may name, for --help (computed only when asked)."""
    from perf import scenarios

    lines = [f"suites (perf/suites.yaml): {', '.join(scenarios.suite_names())}"]
    try:
        import kernels

        lines.append(f"variants (kernels.VARIANTS): {', '.join(kernels.VARIANTS)}")
    except ImportError as e:  # torch or triton missing: help still works
        lines.append(f"variants: unavailable here ({e})")
    return "\n".join(lines)


def build_parser(with_choices: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m perf", description=__doc__.splitlines()[0],
                                     epilog=_choices() if with_choices else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="command")
    _add_own(sub)
    for name, (_, help_text) in EXTERNAL.items():
        sub.add_parser(name, help=help_text, add_help=False)  # listed in --help; parsed in _external
    return parser


def _external(command: str, argv: list[str]) -> int:
    module_name, help_text = EXTERNAL[command]
    if importlib.util.find_spec(module_name) is None:
        raise ConfigError(f"`python -m perf {command}` needs {module_name.replace('.', '/')}.py, which "
                          f"this checkout does not have yet; update the checkout")
    module = importlib.import_module(module_name)
    add = getattr(module, f"add_{command}_arguments", None) or module.add_arguments
    main = getattr(module, f"{command}_main", None) or module.main
    parser = argparse.ArgumentParser(prog=f"python -m perf {command}", description=help_text,
                                     conflict_handler="resolve")
    _common(parser)
    add(parser)
    args = parser.parse_args(argv)
    args.command = command
    return int(main(args) or 0)


# command -> (module, function) of the commands parsed here
HANDLERS = {
    "run": ("perf.latency.measure", "run_command"),
    "compare": ("perf.latency.ab", "compare_command"),
    "gate": ("perf.latency.ab", "gate_command"),
    "report": ("perf.latency.ab", "report_command"),
    "table": ("perf.report", "table_command"),
}


def _own(args: argparse.Namespace) -> int:
    module, function = HANDLERS[args.command]
    return getattr(importlib.import_module(module), function)(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in EXTERNAL:
            return _external(argv[0], argv[1:])
        parser = build_parser(with_choices=not argv or argv[0] in ("-h", "--help"))
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_BAD_INPUT
        return _own(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted: finished measurements are kept in the results files", file=sys.stderr)
        return EXIT_INTERRUPTED
