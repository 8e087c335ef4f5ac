"""Change-point alert: is the newest commit a step slower than the commits before it?

For every variant's (scenario, metric) series of a machine, the newest commit's repeat
medians are compared with those of the WINDOW commits measured before it, pooled, by the
latency gate's own rule (perf.stats + perf.gate.latency_verdict, thresholds from
thresholds.yaml with its overrides): FAIL when the ratio of medians exceeds the vendor's
`latency.fail` and the one-sided Mann-Whitney U test gives p < `statistics.alpha`. A FAIL
is an alert: `alert.json` and `alert.md` are written and the command exits 1.

Why this and not asv's step detector: asv's (asv.step_detect, shown on the site under
"Regressions") needs a step to persist for two commits and has one number per commit;
here every commit has repeat medians, so the step at the newest commit is tested the
night it appears, against the same thresholds as a pull request. Caveat: pooling the
window treats its nights as one population, so drift between nights that is larger than
the noise within one overstates significance; the ratio threshold is the guard. The
vendor libraries ("peer:*") are never alerted: they change with the image, not with this
repository. How far they moved is reported as a note (a machine that moved shows there),
but not divided out of the variants' ratios: on an H200 (2026-11-21, three runs back to
back) PyTorch SDPA's eager latency moved by x0.90 while every unchanged Triton variant
stayed within 2 %, so the libraries' host-side overhead is no measure of the kernels' drift.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from perf.gate import Finding, Verdict, latency_verdict
from perf.nightly.history import History
from perf.nightly.selection import PEER_PREFIX

# Earlier commits the newest is compared with: a week of nightlies (unmeasured default,
# 2026-11-21). Fewer than MIN_HISTORY earlier commits give no verdict: with 5 repeats per
# commit, 5 against 10 values is the least that can reach p < 0.01 (selection.py).
WINDOW = 7
MIN_HISTORY = 2
# Vendor-library series needed before their movement is reported (unmeasured default).
CONTROL_MIN = 3


@dataclass(frozen=True)
class Settings:
    window: int = WINDOW
    min_history: int = MIN_HISTORY


def detect(history: History, thresholds, settings: Settings = Settings(), vendor: str | None = None,
           ) -> tuple[list[Finding], list[str]]:
    """Findings for the newest commit of `history` (one per variant, scenario, metric) and notes."""
    from perf import stats

    vendor = vendor or history.vendor
    vt = thresholds.vendor(vendor)
    latest = history.latest
    earlier = [c.sha for c in history.commits[:-1]]
    findings: list[Finding] = []
    short_history = 0
    compared: dict[tuple[str, str, str], tuple] = {}
    for key, by_sha in history.series.items():
        if latest.sha not in by_sha:
            continue
        window = [s for s in earlier if s in by_sha][-settings.window:]
        if len(window) < settings.min_history:
            short_history += not key[0].startswith(PEER_PREFIX)
            continue
        base = [x for s in window for x in by_sha[s]]
        c = stats.compare(base, by_sha[latest.sha], resamples=vt.statistics.bootstrap,
                          confidence=vt.statistics.confidence)
        compared[key] = (c, len(window))
    drift = library_drift({k: c.ratio for k, (c, _) in compared.items()})
    for (name, scenario, metric), (c, n_window) in compared.items():
        if name.startswith(PEER_PREFIX):
            continue
        t = thresholds.latency(vendor, name, scenario, metric)
        verdict, why = latency_verdict(c.ratio, c.p_slower, c.p_faster, t.warn, t.fail, vt.statistics.alpha)
        note = f"{latest.short} vs {n_window} earlier commit{'s' if n_window != 1 else ''}"
        findings.append(Finding(
            gate="nightly", vendor=vendor, target=history.gpu, variant=name, scenario=scenario, metric=metric,
            base=c.base_median, head=c.head_median, ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high,
            p_value=c.p_value, threshold=t.describe(), verdict=verdict,
            note=f"{why}; {note}" if why else note))
    notes = []
    if short_history:
        notes.append(f"{short_history} series have fewer than {settings.min_history} earlier commits on "
                     f"{history.machine}: no verdict yet")
    for metric, d in sorted(drift.items()):
        if 1 / vt.latency.warn <= d <= vt.latency.warn:
            continue  # within the vendor's warn band: nothing to say
        notes.append(f"{metric}: the vendor libraries moved x{d:.3f} (median) at {latest.short} against the "
                     f"same window; when the variants moved alike, suspect the machine or the image")
    return findings, notes


def library_drift(ratios: dict[tuple[str, str, str], float]) -> dict[str, float]:
    """Per metric, the median ratio (newest / window) of the vendor-library series, when at
    least CONTROL_MIN of them were compared (a note for the reader, never applied)."""
    by_metric: dict[str, list[float]] = {}
    for (name, _, metric), r in ratios.items():
        if name.startswith(PEER_PREFIX) and math.isfinite(r):
            by_metric.setdefault(metric, []).append(r)
    out = {}
    for metric, rs in by_metric.items():
        if len(rs) >= CONTROL_MIN:
            rs.sort()
            n = len(rs)
            out[metric] = rs[n // 2] if n % 2 else 0.5 * (rs[n // 2 - 1] + rs[n // 2])
    return out


def write(out_dir: str, machine_results: list[dict]) -> tuple[str, str]:
    """alert.json (machine-readable, every machine) and alert.md (what a person reads)."""
    from perf.report import render_markdown

    os.makedirs(out_dir, exist_ok=True)
    doc = {"alert": any(m["alerts"] for m in machine_results), "machines": machine_results}
    json_path = os.path.join(out_dir, "alert.json")
    tmp = json_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True, default=_plain)
    os.replace(tmp, json_path)
    parts = []
    for m in machine_results:
        findings = [Finding.from_dict(d) for d in m["findings"]]
        title = f"Nightly change points: {m['gpu']} ({m['machine']}), commit {m['commit'][:8]}"
        parts.append(render_markdown(findings, title, notes=m["notes"]))
    if not parts:
        parts.append("## Nightly change points\n\nNo nightly history found.\n")
    md_path = os.path.join(out_dir, "alert.md")
    with open(md_path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return json_path, md_path


def _plain(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def machine_result(history: History, findings: list[Finding], notes: list[str], settings: Settings) -> dict:
    alerts = [f for f in findings if f.verdict is Verdict.FAIL]
    return {
        "machine": history.machine, "vendor": history.vendor, "gpu": history.gpu,
        "commit": history.latest.sha, "commits": [c.sha for c in history.commits],
        "window": settings.window, "min_history": settings.min_history,
        "alerts": [f.to_dict() for f in alerts],
        "findings": [f.to_dict() for f in findings], "notes": notes,
    }
