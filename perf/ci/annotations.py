"""GitHub annotations for the gates' failing and warned cases: `::error` / `::warning` lines.

    python -m perf.ci.annotations results/ab/findings.json [results/static/findings.json ...]

A workflow step runs this after a gate (pr.yml), so a failing case shows up in the run's
summary and in the pull request's "Files changed" view, next to the file to look at: the
variant's kernel file where the finding names a variant that has one
(`kernels/paged_attention/<variant>.py`), else `thresholds.yaml` at the vendor's section that
set the threshold. The title names the case (variant/scenario), the message the metric, the
ratio and its confidence interval, the threshold and the gate's note. The gates themselves
print nothing of this kind; this renderer reads their findings files as data (the one reader,
perf.verdicts.load_findings), so it also runs on a bare runner (standard library only).

GitHub shows at most 10 error and 10 warning annotations per step (actions/toolkit,
docs/problem-matchers.md, "Limitations"); the worst come first and one notice says how many
were left out.
Exit code 0 whatever the findings say (the gate's own step carries the verdict); 2 for a
findings file that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import re

from perf.errors import EXIT_OK
from perf.thresholds import DEFAULT_PATH as THRESHOLDS
from perf.verdicts import Finding, Verdict, load_findings

PER_STEP = 10  # GitHub's limit of error (and of warning) annotations shown per step
KERNEL_FILE = "kernels/paged_attention/{variant}.py"  # one file per variant (kernels/__init__.py)


def _escape_data(text: str) -> str:
    # As GitHub's toolkit escapes a command's message (@actions/core, command.ts).
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **properties: object) -> str:
    """One workflow command line: `::level file=F,line=L,title=T::message`, escaped."""
    props = ",".join(f"{k}={_escape_property(str(v))}" for k, v in properties.items() if v not in (None, ""))
    return f"::{level}{' ' + props if props else ''}::{_escape_data(message)}"


def _section_line(root: str, vendor: str, gate: str) -> int | None:
    """The line of the gate's section under `<vendor>:` in thresholds.yaml (`latency:`, or
    `static:` under `compile:`; the gate's name is the key), else the vendor's; None if neither."""
    try:
        with open(os.path.join(root, THRESHOLDS), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    start = next((i for i, s in enumerate(lines) if s.rstrip() == f"{vendor}:"), None)
    if start is None:
        return None
    key = re.compile(rf"\s+{re.escape(gate)}:")
    for i in range(start + 1, len(lines)):
        if lines[i] and not lines[i][0].isspace() and not lines[i].startswith("#"):
            break  # the next top-level key: the vendor's section has no such key
        if key.match(lines[i]):
            return i + 1
    return start + 1


def location(f: Finding, root: str = ".") -> tuple[str, int | None]:
    """(file, line) an annotation of `f` points at: the variant's kernel file, else thresholds.yaml."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", f.variant or ""):
        path = KERNEL_FILE.format(variant=f.variant)
        if os.path.isfile(os.path.join(root, path)):
            return path, None
    return THRESHOLDS, _section_line(root, f.vendor, f.gate)


def _number(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def message(f: Finding) -> str:
    """What the case did: metric, ratio with its interval, threshold, the gate's note."""
    parts = [f"{f.gate} {f.metric} on {f.vendor} {f.target}".strip()]
    if f.ratio is not None:
        ci = f" (CI {_number(f.ci_low)}-{_number(f.ci_high)})" if f.ci_low is not None else ""
        parts.append(f"ratio {_number(f.ratio)}{ci}")
    if f.base is not None or f.head is not None:
        parts.append(f"base {f.base if f.base is not None else 'n/a'}, head "
                     f"{f.head if f.head is not None else 'n/a'}")
    if f.threshold:
        parts.append(f.threshold)
    if f.note:
        parts.append(f.note)
    return f"{f.verdict.value}: " + "; ".join(parts)


def annotations(findings: list[Finding], root: str = ".") -> list[str]:
    """The lines to print: errors for verdicts worse than warn, warnings for warn, worst first."""
    lines = []
    errors = [f for f in findings if f.verdict.severity < Verdict.WARN.severity]  # fail, and worse
    warnings = [f for f in findings if f.verdict is Verdict.WARN]
    for level, picked in (("error", errors), ("warning", warnings)):
        picked = sorted(picked, key=Finding.sort_key)
        for f in picked[:PER_STEP]:
            path, line = location(f, root)
            lines.append(command(level, message(f), file=path, line=line, title=f"{f.variant}/{f.scenario}"))
        if len(picked) > PER_STEP:
            left = len(picked) - PER_STEP
            lines.append(command("notice", f"{left} more {level} cases not annotated (GitHub shows "
                                           f"{PER_STEP} per step); the findings file lists them all"))
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("findings", nargs="+", help="findings files of `perf gate` / `perf compile`")
    parser.add_argument("--root", default=".", help="repository root the paths are relative to (default: .)")


def main(args: argparse.Namespace) -> int:
    findings = [f for path in args.findings for f in load_findings(path)[1]]
    for line in annotations(findings, args.root):
        print(line)
    return EXIT_OK


if __name__ == "__main__":
    from perf.cli import command as perf_command

    perf_command("annotations")
