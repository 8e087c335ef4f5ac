"""Verdicts: one `Finding` per (gate, vendor, target, variant, scenario, metric).

Every gate (latency here, static in perf/static/gate.py) reports findings; the report renders
them and `exit_code` turns them into the process's status (DESIGN 4: 0 pass, warnings
allowed; 1 regression or wrong result; 2 bad input, raised earlier as ConfigError).

Latency rule (DESIGN 5): fail only when the ratio of medians (head/base) exceeds the
vendor's fail threshold *and* the one-sided Mann-Whitney U test says head is slower with
p < alpha; an excess that is not significant, or that lies between warn and fail, warns.
`improved` mirrors it: faster than 1/warn and significant.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum

from perf.errors import EXIT_FAIL, EXIT_OK


class Verdict(str, Enum):
    OK = "ok"
    IMPROVED = "improved"
    WARN = "warn"
    FAIL = "fail"

    @property
    def severity(self) -> int:
        """Sort key, worst first: fail, warn, ok, improved."""
        return {"fail": 0, "warn": 1, "ok": 2, "improved": 3}[self.value]


@dataclass
class Finding:
    gate: str  # "latency" | "static"
    vendor: str  # "nvidia" | "amd"
    target: str  # a GPU name ("NVIDIA H100 80GB HBM3") or a compile target ("sm_90")
    variant: str
    scenario: str
    metric: str  # "eager" | "graph" (latency, ms) or a static metric ("registers", ...)
    base: float | None  # base value (median ms for latency); None when the base lacks it
    head: float | None
    ratio: float | None  # head / base
    ci_low: float | None  # confidence interval of the ratio
    ci_high: float | None
    p_value: float | None  # one-sided test in the direction of the change
    threshold: str  # human text, e.g. "warn > 1.03, fail > 1.05"
    verdict: Verdict
    note: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Finding:
        return cls(**{**d, "verdict": Verdict(d["verdict"])})

    def sort_key(self) -> tuple:
        ratio = self.ratio if self.ratio is not None and math.isfinite(self.ratio) else 0.0
        return (self.verdict.severity, -ratio, self.variant, self.scenario, self.metric)


def latency_verdict(ratio: float, p_slower: float, p_faster: float, warn: float, fail: float,
                    alpha: float) -> tuple[Verdict, str]:
    """The latency verdict and a short note on why (the rule of this module's docstring)."""
    if ratio > fail and p_slower < alpha:
        return Verdict.FAIL, "slower beyond the fail threshold, significant"
    if ratio > fail:
        return Verdict.WARN, f"beyond the fail threshold but not significant (p >= {alpha:g})"
    if ratio > warn:
        return Verdict.WARN, "beyond the warn threshold"
    if ratio < 1.0 / warn and p_faster < alpha:
        return Verdict.IMPROVED, "faster, significant"
    if ratio > 1.0 and p_slower < alpha:
        return Verdict.OK, "slower, significant, within the warn threshold"
    return Verdict.OK, ""


def worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=Finding.sort_key)


def counts(findings: list[Finding]) -> dict[str, int]:
    out = {v.value: 0 for v in Verdict}
    for f in findings:
        out[f.verdict.value] += 1
    return out


def exit_code(findings: list[Finding]) -> int:
    """1 if any finding fails, else 0 (warnings pass)."""
    return EXIT_FAIL if any(f.verdict is Verdict.FAIL for f in findings) else EXIT_OK
