"""Verdicts: one `Finding` per (gate, vendor, target, variant, scenario, metric).

Every gate (latency here, static in perf/static/gate.py) reports findings; the report renders
them and `exit_code` turns them into the process's status (0 pass, warnings
allowed; 1 regression or wrong result; 2 bad input, raised earlier as ConfigError).

Latency rule, the same in both directions: a change *fails* (or counts as *improved*) only
when its ratio (head/base) lies beyond the fail threshold (1/fail for improved) *and* the
one-sided test in that direction is significant (p < alpha). It *warns* when it is slower
beyond the warn threshold and significant, or slower beyond the fail threshold but not
significant (inconclusive: the measurement was noisier than its calibration). A faster
change with less evidence than that is ok, with a note. The thresholds of a case come from
perf/thresholds.py (calibrated noise or the vendor's defaults); the test from perf/stats.py.
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
    # Latency: the smallest slowdown (ratio) this case fails with 95 % power at the gate's
    # settings and thresholds (perf.stats.min_detectable); None where unknown.
    min_detectable: float | None = None

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
    if ratio > fail:
        if p_slower < alpha:
            return Verdict.FAIL, "slower beyond the fail threshold, significant"
        return Verdict.WARN, f"slower beyond the fail threshold but not significant (p >= {alpha:g})"
    if ratio > warn and p_slower < alpha:
        return Verdict.WARN, "slower beyond the warn threshold, significant"
    if ratio < 1.0 / fail and p_faster < alpha:
        return Verdict.IMPROVED, "faster beyond the fail threshold, significant"
    if ratio < 1.0 / warn and p_faster < alpha:
        return Verdict.OK, "faster beyond the warn threshold, significant"
    if ratio > 1.0 and p_slower < alpha:
        return Verdict.OK, "slower, significant, within the warn threshold"
    return Verdict.OK, ""


def detectable_summary(findings: list[Finding], effects: tuple[float, ...] = (0.02, 0.05, 0.10)) -> str:
    """One line: how many measured latency cases can see a slowdown of 2 %, 5 %, 10 %."""
    known = [f.min_detectable for f in findings if f.gate == "latency" and f.min_detectable is not None]
    if not known:
        return "smallest detectable slowdown: unknown (no measured case)"
    parts = [f"{sum(m <= 1.0 + e + 1e-9 for m in known)} see {100 * e:g} %" for e in effects]
    return (f"of {len(known)} measured cases, with 95 % power: " + ", ".join(parts)
            + " (per case: `min_detectable` in findings.json)")


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
