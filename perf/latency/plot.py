"""The latency gate's plot: each case's ratio with its interval, against its own thresholds.

Thresholds differ per case (calibrated noise, per-scenario overrides), so one pair of
vertical lines for the whole plot would be wrong for most rows: each point gets short
marks at its own warn (dotted) and fail (dashed) ratio and their mirror images 1/warn,
1/fail on the faster side (improved needs the same evidence as fail).
"""

from __future__ import annotations

import io
import math

from perf import files
from perf.verdicts import Finding, Verdict


def plot_ratios(findings: list[Finding], path: str, title: str = "head / base",
                thresholds: dict | None = None) -> str | None:
    """Draw one point per (variant, scenario, metric) with its CI; `thresholds` maps
    (variant, scenario, metric) -> (warn, fail). Returns the path, None if nothing has a ratio
    (then nothing is written). The PNG is drawn into memory and written whole (perf.files)."""
    rows = [f for f in findings if f.ratio is not None and math.isfinite(f.ratio)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thresholds = thresholds or {}
    rows.sort(key=lambda f: (f.scenario, f.variant, f.metric))
    scenarios = sorted({f.scenario for f in rows})
    series = sorted({(f.variant, f.metric) for f in rows})
    ypos = {s: i for i, s in enumerate(scenarios)}
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.28 * len(scenarios)))
    width = 0.8 / max(len(series), 1)
    ax.axvline(1.0, color="grey", lw=0.8)
    for k, (variant, metric) in enumerate(series):
        pts = [f for f in rows if (f.variant, f.metric) == (variant, metric)]
        y = [ypos[f.scenario] - 0.4 + width * (k + 0.5) for f in pts]
        x = [f.ratio for f in pts]
        lo = [f.ratio - (f.ci_low if f.ci_low is not None else f.ratio) for f in pts]
        hi = [(f.ci_high if f.ci_high is not None else f.ratio) - f.ratio for f in pts]
        ax.errorbar(x, y, xerr=[lo, hi], fmt="o", ms=3, capsize=2, label=f"{variant} / {metric}")
        for f, yy in zip(pts, y):
            warn, fail = thresholds.get((f.variant, f.scenario, f.metric), (None, None))
            for value, style in ((warn, ":"), (fail, "--")):
                if value is not None:
                    for v in (value, 1.0 / value):
                        ax.plot([v, v], [yy - width / 2, yy + width / 2], color="red", lw=0.8, ls=style)
    for f in rows:
        if f.verdict is Verdict.FAIL:
            ax.annotate("fail", (f.ratio, ypos[f.scenario]), color="red", fontsize=7)
    ax.set_yticks(range(len(scenarios)), scenarios, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio head / base (> 1: slower); red marks: each case's warn (dotted) and fail (dashed)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="best", ncol=2)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=120, format="png")
    plt.close(fig)
    return files.write_bytes(path, buffer.getvalue())
