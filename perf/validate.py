"""What a command is asked to measure or compile, checked before any work starts.

Every command resolves its `--variants`, `--suite`, `--scenarios` and `--metrics` here
(vendors in perf/vendor.py, refs in perf/git.py), so a typo ends the same way everywhere:
one line naming the argument, what it did not match and what would, exit 2. A gate that
checked nothing because a name matched nothing must never pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from perf.errors import ConfigError

if TYPE_CHECKING:
    from perf.scenarios import Scenario


def _named(wanted: str | None, known: list[str], flag: str, what: str, hint: str) -> list[str]:
    """The names in `wanted` (comma-separated; all `known` when empty), each one known."""
    if not wanted:
        return known
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigError(f"{flag} {wanted}: unknown {what}{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown) or '(none named)'}; {hint}")
    return names


def variants(wanted: str | None, registered: Iterable[str], flag: str = "--variants") -> list[str]:
    """The variants named in `wanted` (comma-separated; all registered when empty)."""
    registered = list(registered)
    return _named(wanted, registered, flag, "variant", f"registered: {', '.join(registered)}")


def scenarios(suite: str, globs: str | None) -> list:
    """The scenarios of `suite` matching the comma-separated `globs` (all when empty)."""
    from perf import scenarios as sc

    return sc.select(sc.suite(suite), globs)


def metrics(wanted: str | None, flag: str = "--metrics") -> list[str]:
    """The latency metrics named in `wanted` (comma-separated; all of perf.results.METRICS
    when empty)."""
    from perf.results import METRICS

    return _named(wanted, list(METRICS), flag, "metric", f"use {' or '.join(METRICS)}")


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
