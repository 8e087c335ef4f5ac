"""Bounded fields of the data files the harness reads: values are not data until a schema says so.

Each file kind's reader (results: perf/results.py, findings: perf/verdicts.py, plans:
perf/change/plan.py) describes its fields as {field: (check, what it must be)} and runs
`check_fields` on every object; the checks are here, one each, so a latency is bounded the same
way in a results file and in a findings file. Names are perf/names.py's rule. A field out of its
bounds is a ConfigError: one line naming the file, the object and the field.

The bounds, and where each comes from:
- LATENCY_MS: a device time is above 1 ns (1e-6 ms: no GPU timer resolves less; CUDA events
  resolve about 0.5 us) and below an hour (3.6e6 ms: a CI job ends after 6 hours, GitHub's limit
  for a self-hosted runner's job, and a gate times every case on both sides, several times).
- SECONDS: a cold compile of one variant on one target takes under a day (86,400 s: the static
  gate compiles every variant in a CPU job of the same 6-hour limit).
- RATIO: head / base of two latencies within LATENCY_MS, so within its quotients.
- P_VALUE: a probability, [0, 1].
"""

from __future__ import annotations

import math

from perf import names
from perf.errors import ConfigError

LATENCY_MS = (1e-6, 3.6e6)
SECONDS = (0.0, 86_400.0)
RATIO = (LATENCY_MS[0] / LATENCY_MS[1], LATENCY_MS[1] / LATENCY_MS[0])
P_VALUE = (0.0, 1.0)
ALL = "*"  # the static gate's records and findings about every scenario (or variant) at once


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x) -> bool:
    """A finite JSON number (JSON's NaN and Infinity, which Python's reader accepts, are not)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer beyond any float: no measurement
        return False


def within(x, bounds: tuple[float, float]) -> bool:
    return is_number(x) and bounds[0] <= x <= bounds[1]


def latency(x) -> bool:
    return within(x, LATENCY_MS)


def ratio(x) -> bool:
    return within(x, RATIO)


def probability(x) -> bool:
    return within(x, P_VALUE)


def nonnegative(x) -> bool:
    """A static metric or count (registers, spills, bytes): a finite number >= 0."""
    return is_number(x) and x >= 0


def or_none(check):
    return lambda x: x is None or check(x)


def text(x) -> bool:
    return isinstance(x, str)


def shown(value) -> str:
    text_ = repr(value)
    return text_ if len(text_) <= 40 else text_[:37] + "..."


def span(bounds: tuple[float, float]) -> str:
    return f"{bounds[0]:g}..{bounds[1]:g}"


def check_fields(path: str, where: str, obj: dict, spec: dict, required: bool, fix: str) -> None:
    """Every field of `spec` in `obj` passes its check ({field: (check, what)}); with `required`
    every one is there. ConfigError naming `path`, `where` and the field otherwise."""
    for key, (ok, what) in spec.items():
        if key not in obj:
            if required:
                raise ConfigError(f"{path}: {where} has no {key!r}; {fix}")
            continue
        if not ok(obj[key]):
            raise ConfigError(f"{path}: {where}: {key} is {shown(obj[key])}, expected {what}; {fix}")


def once(path: str, key: tuple, seen: dict, where: str, what: str, fix: str) -> None:
    """`key` (a record's identity) not seen before in the file: a record counted twice would
    weigh twice (in a median, a count, a verdict); ConfigError naming both places."""
    if key in seen:
        raise ConfigError(f"{path}: {where} repeats {what} of {seen[key]} ({' '.join(map(str, key))}); "
                          f"a file holds each once: {fix}")
    seen[key] = where


def check_names(path: str, where: str, r: dict, header: dict | None = None) -> None:
    """A record's (or finding's, or plan case's) variant and scenario by the names rule
    (perf/names.py), or ALL; with `header` (a results file's), a measurement's must be one the
    header lists where it lists them (its `variants` and `peers`, its `scenarios`: the registry
    the measuring run had)."""
    header = header or {}
    listed = header.get("variants")
    peers = [names.PEER + p for p in header.get("peers") or []]
    if r["variant"] != ALL:
        names.variant(r["variant"], f"{path}: {where}: variant", [*listed, *peers] if listed else None)
    if r["scenario"] != ALL:
        names.scenario(r["scenario"], f"{path}: {where}: scenario", header.get("scenarios") or None)
