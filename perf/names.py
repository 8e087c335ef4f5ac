"""Names that become folder names, file names or keys: the one rule for them.

A runner's or machine's name becomes a folder of the data branch (`nights/<name>/`) and of asv's
results, a date a folder under it, a branch a git ref, a variant and a scenario the keys of
results, findings and plans (and pages of the dashboard). One rule for all of them, applied where
a name is given (the command line: perf/validate.py, run by perf/cli.py's Command.check before any
work) and by every reader of a file or folder that holds one (results, findings, plans, the
nightly store's folders, the heartbeat), so a name refused by one is refused by all:

- a name is made of SEGMENTs (letters, digits, '.', '_', '-', led by a letter or a digit, at most
  100 characters), joined by '/' only where the kind has parts (scenarios, branches): never empty,
  absolute, hidden, '..', or holding a space, a control character or a non-ASCII letter;
- a variant may be a vendor library's series, `peer:<segment>` (perf.peers.PREFIX);
- a commit is lower-case hexadecimal;
- a date is a real calendar day (datetime.date.fromisoformat of YYYY-MM-DD), not after today
  (UTC) by more than a day of slack for time zones; a time likewise.

Whether a name is *known* (a registered variant, a scenario of the grammar) is the business of
the reader that holds the registry; it passes `known`. A name broken either way is a ConfigError:
one line naming where it came from (the argument, or the file and field) and the rule.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Collection

from perf.errors import ConfigError

SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # 100: well under a folder name's 255 bytes
RUNNER = SEGMENT  # a runner or machine: one folder (the slug of perf/nightly/selection.py gives no other)
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")  # a night's folder
COMMIT = re.compile(r"[0-9a-f]{1,64}")  # a git object name, abbreviated or whole (SHA-1: 40, SHA-256: 64)
PEER = "peer:"  # a vendor library's series in results (perf.peers.PREFIX; a test keeps the two equal)
SLACK = _dt.timedelta(days=1)  # a runner's local day may be UTC's tomorrow (time zones reach +14 h)
_RULE = "letters, digits, '.', '_' and '-' only, led by a letter or digit, at most 100"


def slug(text: str) -> str:
    """Lower-case letters, digits and '-': a GPU's or machine's name as part of a folder or file
    name (asv machines, the nightly store's pages, a GPU model's calibration file)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _refuse(where: str, value, why: str) -> ConfigError:
    return ConfigError(f"{where} {_shown(value)}: {why}")


def segment(value, where: str, what: str = "name") -> str:
    """`value` if it is one folder name by the rule (module docstring); ConfigError otherwise."""
    if not isinstance(value, str) or not SEGMENT.fullmatch(value):
        raise _refuse(where, value, f"a {what} takes {_RULE} characters (it becomes a folder name or key)")
    return value


def parts(value, where: str, what: str) -> str:
    """`value` if it is SEGMENTs joined by '/' (a scenario, a branch); ConfigError otherwise."""
    if not isinstance(value, str) or not all(SEGMENT.fullmatch(p) for p in value.split("/")):
        raise _refuse(where, value, f"a {what} is parts joined by '/', each of {_RULE} characters")
    return value


def _known(value: str, known, where: str, what: str) -> str:
    if known is None:
        return value
    ok = known(value) if callable(known) else value in known
    if not ok:
        listed = f"; known: {', '.join(sorted(known)[:8])}" if not callable(known) and known else ""
        raise _refuse(where, value, f"no such {what}{listed}")
    return value


def runner(value, where: str) -> str:
    """A runner's or machine's name (one folder of the data branch and of asv's results)."""
    return segment(value, where, "machine name")


def branch(value, where: str) -> str:
    """A branch of the data's remote (`--branch`): parts, and no '..' (git refuses it too)."""
    parts(value, where, "branch")
    if ".." in value or value.endswith(".lock"):
        raise _refuse(where, value, "a branch holds no '..' and does not end in '.lock' (git's rule)")
    return value


def commit(value, where: str) -> str:
    """A commit as results name it (asv's result files are named by its first 8 characters)."""
    if not isinstance(value, str) or not COMMIT.fullmatch(value):
        raise _refuse(where, value, "a commit is lower-case hexadecimal, at most 64 digits")
    return value


def variant(value, where: str, known: Collection[str] | Callable[[str], bool] | None = None) -> str:
    """A variant (or `peer:<library>`); with `known` (names, or a test), one of them."""
    if isinstance(value, str) and value.startswith(PEER):
        segment(value[len(PEER):], where, "vendor library's name")
    else:
        segment(value, where, "variant")
    return _known(value, known, where, "variant")


def scenario(value, where: str, known: Collection[str] | Callable[[str], bool] | None = None) -> str:
    """A scenario's name (parts joined by '/'); with `known`, one of them."""
    parts(value, where, "scenario name")
    return _known(value, known, where, "scenario")


def _today() -> _dt.date:
    return _dt.datetime.now(_dt.timezone.utc).date()


def date(value, where: str, today: _dt.date | None = None) -> str:
    """A night's date, YYYY-MM-DD: a real day, not after `today` (UTC) + SLACK."""
    if not isinstance(value, str) or not DATE.fullmatch(value):
        raise _refuse(where, value, "a date is YYYY-MM-DD")
    try:
        day = _dt.date.fromisoformat(value)
    except ValueError:
        raise _refuse(where, value, "not a calendar day") from None
    if day > (today or _today()) + SLACK:
        raise _refuse(where, value, "a day to come (after today, UTC, and a day of slack): a clock or a "
                                    "folder name is wrong")
    return value


def time(value, where: str, now: _dt.datetime | None = None) -> _dt.datetime:
    """An ISO 8601 time (UTC where it names no zone), not after `now` + SLACK: the time."""
    try:
        when = _dt.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None:
        raise _refuse(where, value, "not an ISO 8601 time")
    when = when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)
    if when > (now or _dt.datetime.now(_dt.timezone.utc)) + SLACK:
        raise _refuse(where, value, "a time to come (after now and a day of slack): a clock is wrong")
    return when
