"""What a command is asked to measure or compile, checked before any work starts.

Every command resolves its `--variants`, `--suite`, `--scenarios` and `--metrics` here
(vendors in perf/vendor.py, refs in perf/git.py), so a typo ends the same way everywhere:
one line naming the argument, what it did not match and what would, exit 2. A gate that
checked nothing because a name matched nothing must never pass. The measuring commands'
checks (`run_args`, `gate_args`, ...: every name, then the GPU rule) are named by their
entry in perf/cli.py's registry (`Command.check`), or called by the check a command keeps
beside its own code (the gate's plan file, nightly's store, compile's options), which the
registry runs after parsing and before the outputs are claimed and the command runs: a typo
(or a broken --thresholds file) is never hidden behind "no GPU" or behind another run writing
the same output, nor found after an expensive step (a compile, a download), and a GPU-sized run
never starts on a CPU by any route.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from perf.errors import ConfigError

if TYPE_CHECKING:
    from perf.scenarios import Scenario


def named(wanted: str | None, known: list[str], flag: str, what: str, hint: str) -> list[str]:
    """The names in `wanted` (comma-separated; all `known` when not given), each one known;
    given but naming none (`--stages ''`) is refused: it would run nothing, or everything."""
    if wanted is None:
        return known
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if not names:
        raise ConfigError(f"{flag} {wanted!r}: names no {what}; {hint} (or leave {flag} out: all of them)")
    if unknown:
        raise ConfigError(f"{flag} {wanted}: unknown {what}{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown)}; {hint}")
    return names


def variants(wanted: str | None, registered: Iterable[str], flag: str = "--variants") -> list[str]:
    """The variants named in `wanted` (comma-separated; all registered when not given)."""
    registered = list(registered)
    return named(wanted, registered, flag, "variant", f"registered: {', '.join(registered)}")


def scenarios(suite: str, globs: str | None) -> list:
    """The scenarios of `suite` matching the comma-separated `globs` (all when empty)."""
    from perf import scenarios as sc

    return sc.select(sc.suite(suite), globs)


def usable_metrics(wanted: list[str]) -> list[str]:
    """The metrics of `wanted` this machine measures (graph replay needs a GPU)."""
    from perf import vendor

    return [m for m in wanted if m == "eager" or vendor.on_gpu()]


def measurable(wanted: list[str], flag: str = "--metrics") -> list[str]:
    """`usable_metrics`, refused when none is left: a run that could measure nothing must not start."""
    from perf.errors import NothingMeasured

    usable = usable_metrics(wanted)
    if not usable:
        raise NothingMeasured(f"{flag} {','.join(wanted)}: graph replay needs a GPU (found none); pass "
                              f"{flag} eager to run in Triton's interpreter")
    return usable


def metrics(wanted: str | None, flag: str = "--metrics") -> list[str]:
    """The latency metrics named in `wanted` (comma-separated; all of perf.results.METRICS
    when not given)."""
    from perf.results import METRICS

    return named(wanted, list(METRICS), flag, "metric", f"use {' or '.join(METRICS)}")


def scenario_named(name: str, suite: str | None) -> tuple[str, Scenario]:
    """(suite, scenario) of the scenario called exactly `name` (old-style names too): in
    `suite`, or else in the first suite of perf/suites.yaml that lists it."""
    from perf import scenarios as sc

    wanted = sc.canonical_name(name)
    names = [suite] if suite else sc.suite_names()
    for s in names:
        found = [x for x in sc.suite(s) if x.name == wanted]
        if found:
            return s, found[0]
    where = f"suite {suite}" if suite else f"any suite of perf/suites.yaml ({', '.join(names)})"
    raise ConfigError(f"--scenario {name}: not in {where}; name one scenario exactly as a suite lists it "
                      f"(`python -m perf --help` lists the suites)")


def peers(wanted: str | None, flag: str = "--peers") -> None:
    """`auto`, `none` or a comma list of perf/peers.py's names (whether each is installed is
    perf.peers.resolve's business, on the machine that measures)."""
    if wanted in (None, "auto", "none"):
        return
    from perf.peers import PEERS

    named(wanted, list(PEERS), flag, "peer", f"use auto, none or a comma list of: {', '.join(PEERS)}")


def _registered(names: str | None, flag: str = "--variants", interpret: bool = True) -> None:
    """Check `names` against this checkout's variant names (perf.checkout.variant_names: kernels
    not imported), the interpreter chosen first where there is no GPU, as the command will import
    kernels (before Triton is first imported; not for a command that compiles real kernels in
    this process: `interpret` False)."""
    if names is None:
        return
    from perf import checkout, vendor

    if interpret:
        vendor.interpreter_without_gpu()
    variants(names, checkout.variant_names(), flag)


def _refs(*pairs: tuple[str | None, str]) -> None:
    given = [(ref, flag) for ref, flag in pairs if ref]
    if not given:
        return
    import os

    from perf import git

    root = git.repo_root(os.getcwd())
    for ref, flag in given:
        git.resolve_commit(root, ref, flag)


def _vendor(given: str | None) -> None:
    if given is not None:
        from perf import vendor

        vendor.resolve(given)


def run_args(a) -> None:
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)
    metrics(a.metrics)
    _vendor(a.vendor)
    peers(a.peers)
    gpu("perf run", a.suite, cpu_ok=a.allow_cpu, allow="--allow-cpu")
    measurable(metrics(a.metrics))


def gate_modes(plan_only: bool, plan: str | None, all_cases: bool, toolchain: str | None) -> None:
    """--plan-only, --plan and --all-cases: one at a time, and none with --toolchain (two Tritons
    compile different binaries of every kernel: every case differs). Decided from the command
    line, so before a toolchain is installed or anything planned."""
    given = [flag for flag, on in (("--plan-only", plan_only), ("--plan", plan), ("--all-cases", all_cases))
             if on]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)}: pass one of them (--plan-only writes a plan, --plan times "
                          f"one, --all-cases times every case without one)")
    if given and toolchain is not None:
        raise ConfigError(f"{given[0]} with --toolchain: a toolchain A/B times every case (another Triton "
                          f"compiles every kernel anew); drop {given[0]}")


def gate_args(a) -> None:
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)
    metrics(a.metrics)
    _vendor(a.vendor)
    gate_modes(a.plan_only, a.plan, a.all_cases, a.toolchain)
    if a.toolchain is not None:
        from perf import toolchain

        toolchain.parse(a.toolchain)
    _refs((a.base_ref, "--base-ref"), (a.head_ref, "--head-ref"))
    if a.plan_only:  # plans on this CPU, measures nothing
        return
    gpu("perf gate", a.suite, cpu_ok=a.no_gpu_ok)  # --no-gpu-ok: it says so and skips
    if not a.no_gpu_ok:
        measurable(metrics(a.metrics))


def bisect_args(a) -> None:
    _refs((a.good, "GOOD"), (a.bad, "BAD"))
    _registered(a.variant, "--variant")
    metrics(a.metric, "--metric")
    _vendor(a.vendor)
    if a.scenario:  # without one, perf bisect says it is required
        suite, _ = scenario_named(a.scenario, a.suite)
        gpu("perf bisect", suite)


def why_args(a) -> None:
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)
    _vendor(a.vendor)
    _refs((a.base_ref, "--base-ref"), (a.head_ref, "--head-ref"))


def compile_calibrate_args(a) -> None:  # before the checks of the CPU it compiles on
    scenarios(a.suite, a.scenarios)
    _registered(a.variants, interpret=False)  # it compiles real kernels in this process


def calibrate_args(a) -> None:
    if a.launch_cost_threshold:  # reads the calibration file only
        return
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)
    metrics(a.metrics)
    _vendor(a.vendor)
    gpu("perf calibrate")


def host_cost_args(a) -> None:
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)
    peers(a.peers)
    gpu("perf host-cost")


def selftest_args(a) -> None:
    if a.summarize:  # reads the runs already in --out
        return
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)
    gpu("perf selftest")


def path_names(a) -> None:
    """The names a command's arguments give (perf/names.py: they become folders and keys), checked
    before anything is measured or written: --machine, --branch, --date where the command has them."""
    from perf import names

    if getattr(a, "machine", None) is not None:
        names.runner(a.machine, "--machine")
    if getattr(a, "branch", None) is not None:
        names.branch(a.branch, "--branch")
    if getattr(a, "date", None) is not None:
        names.date(a.date, "--date")


def alert_args(a) -> None:
    path_names(a)


def nightly_args(a) -> None:
    path_names(a)
    if a.action not in ("all", "run") or a.merge_shards:  # publish, report, merge: nothing measured
        return
    from perf.nightly import selection

    suite = a.suite or selection.DEFAULT_SUITE
    selection.resolve_scenarios(suite, a.scenarios)
    _registered(a.variants)
    peers(a.peers)
    gpu("perf nightly", suite, cpu_ok=a.allow_cpu, allow="--allow-cpu")


def toolchain_args(a) -> None:  # its latency gate skips without a GPU (--no-gpu-ok)
    scenarios(a.suite, a.scenarios)
    _registered(a.variants)


def gpu(what: str, suite: str | None = None, **kw) -> None:
    from perf import vendor

    vendor.require_gpu(what, suite, **kw)
