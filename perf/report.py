"""Reports people read: a Markdown table (worst first), the job summary, a plot of ratios.

`render_markdown` puts failures and warnings in the table a reviewer sees first and folds
the passing rows into a <details> block, so the answer takes ten seconds to find.
`publish` prints it and appends it to `$GITHUB_STEP_SUMMARY` when that is set (GitHub
Actions renders the file on the run's page). `plot_ratios` draws one point per
measurement with its confidence interval against the thresholds.
"""

from __future__ import annotations

import math
import os

from perf.verdicts import Finding, Verdict, counts, worst_first

_COLUMNS = ("verdict", "vendor", "target", "variant", "scenario", "metric", "base", "head",
            "ratio", "CI", "p", "threshold", "note")
_MARK = {Verdict.FAIL: "**FAIL**", Verdict.WARN: "warn", Verdict.OK: "ok", Verdict.IMPROVED: "improved"}


def _num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, int) or float(x).is_integer() and abs(x) >= 1000:
        return f"{int(x)}"
    return f"{x:.{digits}g}"


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(f: Finding) -> str:
    ci = "–" if f.ci_low is None or f.ci_high is None else f"[{f.ci_low:.3f}, {f.ci_high:.3f}]"
    ratio = "–" if f.ratio is None else f"{f.ratio:.3f}"
    cells = (_MARK[f.verdict], f.vendor, f.target, f.variant, f.scenario, f.metric,
             _num(f.base), _num(f.head), ratio, ci, _p(f.p_value), f.threshold, f.note)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(rows: list[Finding]) -> list[str]:
    return ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS), *map(_row, rows)]


def headline(findings: list[Finding]) -> str:
    n = counts(findings)
    status = "FAIL" if n["fail"] else ("pass with warnings" if n["warn"] else "pass")
    parts = [f"{n[v.value]} {v.value}" for v in (Verdict.FAIL, Verdict.WARN, Verdict.OK, Verdict.IMPROVED)]
    return f"**{status}**: " + ", ".join(parts)


def render_markdown(findings: list[Finding], title: str, notes: list[str] | None = None) -> str:
    """Markdown: title, headline, the failing/warning rows, then passing rows folded away."""
    rows = worst_first(findings)
    bad = [f for f in rows if f.verdict in (Verdict.FAIL, Verdict.WARN)]
    good = [f for f in rows if f.verdict not in (Verdict.FAIL, Verdict.WARN)]
    lines = [f"## {title}", "", headline(findings), ""]
    if not findings:
        lines += ["No measurements to compare.", ""]
    if bad:
        lines += _table(bad) + [""]
    if good:
        if bad:
            lines += [f"<details><summary>{len(good)} passing</summary>", ""]
        lines += _table(good) + [""]
        if bad:
            lines += ["</details>", ""]
    for note in notes or []:
        lines.append(f"- {note}")
    if notes:
        lines.append("")
    lines.append("ratio = head / base (> 1 is slower for latency); CI: bootstrap interval of the "
                 "ratio of medians; p: one-sided Mann-Whitney U in the direction of the change.")
    return "\n".join(lines) + "\n"


def publish(markdown: str) -> None:
    """Print the report and append it to the GitHub job summary when running in Actions."""
    print(markdown, flush=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown + "\n")


def plot_ratios(findings: list[Finding], path: str, title: str = "head / base",
                warn: float | None = None, fail: float | None = None) -> str | None:
    """One point per (variant, scenario, metric) with its CI and the vendor's warn (dotted)
    and fail (dashed) lines; returns the path, None if nothing has a ratio."""
    rows = [f for f in findings if f.ratio is not None and math.isfinite(f.ratio)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows.sort(key=lambda f: (f.scenario, f.variant, f.metric))
    scenarios = sorted({f.scenario for f in rows})
    series = sorted({(f.variant, f.metric) for f in rows})
    ypos = {s: i for i, s in enumerate(scenarios)}
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.28 * len(scenarios)))
    width = 0.8 / max(len(series), 1)
    for k, (variant, metric) in enumerate(series):
        pts = [f for f in rows if (f.variant, f.metric) == (variant, metric)]
        y = [ypos[f.scenario] - 0.4 + width * (k + 0.5) for f in pts]
        x = [f.ratio for f in pts]
        lo = [f.ratio - (f.ci_low if f.ci_low is not None else f.ratio) for f in pts]
        hi = [(f.ci_high if f.ci_high is not None else f.ratio) - f.ratio for f in pts]
        ax.errorbar(x, y, xerr=[lo, hi], fmt="o", ms=3, capsize=2, label=f"{variant} / {metric}")
    thresholds = sorted({f.threshold for f in rows})
    ax.axvline(1.0, color="grey", lw=0.8)
    for value, style in ((warn, ":"), (fail, "--")):
        if value is not None:
            ax.axvline(value, color="red", lw=0.8, ls=style)
    for f in rows:  # mark fails in red
        if f.verdict is Verdict.FAIL:
            ax.annotate("fail", (f.ratio, ypos[f.scenario]), color="red", fontsize=7)
    ax.set_yticks(range(len(scenarios)), scenarios, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio of medians, head / base (> 1: slower)")
    ax.set_title(f"{title}  (thresholds: {'; '.join(thresholds)[:120]})", fontsize=9)
    ax.legend(fontsize=6, loc="best", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
