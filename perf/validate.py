"""What a command is asked to measure or compile, checked before any work starts.

Every command resolves its `--variants`, `--suite` and `--scenarios` here (vendors in
perf/vendor.py, refs in perf/git.py), so a typo ends the same way everywhere: one line
naming the argument, what it did not match and what would, exit 2. A gate that checked
nothing because a name matched nothing must never pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from perf.errors import ConfigError


def variants(wanted: str | None, registered: Iterable[str], flag: str = "--variants") -> list[str]:
    """The variants named in `wanted` (comma-separated; all registered when empty)."""
    registered = list(registered)
    if not wanted:
        return registered
    names = [v.strip() for v in wanted.split(",") if v.strip()]
    unknown = [v for v in names if v not in registered]
    if unknown or not names:
        raise ConfigError(f"{flag} {wanted}: unknown variant{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown) or '(none named)'}; registered: {', '.join(registered)}")
    return names


def scenarios(suite: str, globs: str | None) -> list:
    """The scenarios of `suite` matching the comma-separated `globs` (all when empty)."""
    from perf import scenarios as sc

    return sc.select(sc.suite(suite), globs)
