"""The nightly report: static pages and plots beside asv's site, readable from a folder.

`<html_dir>/nightly/index.html` lists the machines (vendor and GPU) with their alert status;
each machine's page shows, from its history (perf/nightly/history.py):
- the change-point findings of the newest commit (perf/nightly/alert.py), each alert with
  what its re-measure found (confirmed, with a link to its issue, or noise: perf/nightly/confirm.py)
  and a plot of its history;
- "% of vendor SOTA": the fastest vendor library's latency over each variant's, per
  scenario at the newest commit (table) and its geometric mean over commits (plot);
- "% of the hardware limit": each latency against the copy bandwidth and matmul peak the
  night's GPU measured (perf/roofline.py; the larger share, its bound named), per scenario at
  the newest commit (table) and its geometric mean over commits, one plot per suite;
- paper-style figures (the paper's latency plots): latency against batch size, one panel
  per KV length, one row per decode share, every variant, the vendor
  libraries dashed as the baseline;
- every variant's latency history across commits, each scenario relative to its own
  median over the history, so a step stands out among hundreds of scenarios;
- what was skipped and why (features a variant lacks, libraries absent or refusing);
- the environment of the newest night (perf/fingerprint.py: GPU, VBIOS, driver, runtime,
  Triton and its commit, image digest, clocks at the start and end, "throttled: ..." when the
  GPU was slowed down) and what changed in it from one night to the next.
Plain HTML and PNG files (matplotlib, Agg): no script, no fetch, so file:// works; the only
links out are to the alerts' GitHub issues. The alert tables sit between markers, so that
`relink` rewrites them from alert.json alone (no history, no matplotlib) once the re-measure
or the issues job has added to it. asv's
own interactive site, one folder up, loads JSON and needs a web server
(`python -m http.server -d .asv/html`).
"""

from __future__ import annotations

import html
import io
import math
import os
from collections import defaultdict

from perf import files, fingerprint, roofline
from perf.names import slug
from perf.nightly.alert import WINDOW
from perf.nightly.history import History, NightPrint
from perf.nightly.selection import PEER_PREFIX
from perf.report import geomean

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1300px;color:#222}
h1,h2,h3{margin-bottom:.3em} table{border-collapse:collapse;font-size:12px;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right} th{background:#f3f3f3}
td.l,th.l{text-align:left} .fail{background:#f8c4c4} .warn{background:#fbe7b0}
.noise{background:#eee;color:#666} .good{background:#d5f0d5} .mid{background:#fbf3cf} .bad{background:#f8d7d7}
.na{color:#999}
img{max-width:100%;border:1px solid #eee;margin:.3em 0} .note{color:#555;font-size:13px}
code{background:#f4f4f4;padding:0 3px}
"""


def _e(x) -> str:
    return html.escape(str(x))


def _page(title: str, body: list[str]) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(names: list[str]) -> dict[str, str]:
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"]
    return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def sota_percent(h: History, name: str, scenario: str, metric: str, sha: str | None = None) -> float:
    """100 x (fastest vendor library's latency) / (the variant's): 100 = on par, higher is better."""
    _, best = h.best_peer(scenario, metric, sha)
    mine = h.value(name, scenario, metric, sha)
    if not (math.isfinite(best) and math.isfinite(mine) and mine > 0):
        return math.nan
    return 100.0 * best / mine


def hw_share(h: History, name: str, scenario: str, metric: str, sha: str | None = None,
             work: dict | None = None) -> roofline.Share | None:
    """The latency at `sha` (default: the newest commit) against the limits that night's GPU
    measured (its results environment, perf/roofline.py), by the scenario's bytes and flops;
    None without limits (Triton's interpreter, nights before they were recorded) or a latency."""
    commit = next((c for c in h.commits if c.sha == (sha or h.latest.sha)), None)
    limits = roofline.limits_from(commit.environment if commit else None)
    w = work.get(scenario) if work is not None else scenario_work(scenario)
    if limits is None or w is None:
        return None
    return roofline.share(w["bytes"], w["flops"], h.value(name, scenario, metric, sha), limits)


def scenario_work(name: str) -> dict | None:
    """perf/roofline.py `work` of a scenario's batch by its name (perf/scenarios.py): the bytes
    and flops its records carry, which the history does not keep; None for another name."""
    from perf.scenarios import Scenario

    try:
        return roofline.work(Scenario.parse(name).spec())
    except ValueError:
        return None


def _works(h: History) -> dict:
    """scenario -> its work (`scenario_work`), each scenario's once."""
    return {s: w for s in h.scenarios() if (w := scenario_work(s)) is not None}


# --- figures -----------------------------------------------------------------------------------


def families(scenarios: list[str]) -> dict[str, list]:
    """Scenarios grouped by everything but kind (decode share), batch and KV length, where the
    group has at least two batch sizes (a line to draw); key: the name with * for those axes,
    e.g. `llama3-8b/*/batch*-kv*/block16`."""
    from dataclasses import replace

    from perf.scenarios import Scenario

    groups: dict[str, list] = defaultdict(list)
    for name in scenarios:
        try:
            s = Scenario.parse(name)
        except ValueError:
            continue
        model, _, shape, *rest = replace(s, batch=1, max_seq=1, decode=0).name.split("/")
        key = "/".join([model, "*", "batch*-kv*" + shape.removeprefix("batch1-kv1"), *rest])
        groups[key].append(s)
    return {k: v for k, v in groups.items() if len({s.batch for s in v}) >= 2}


def _save(fig, path: str, rect=None) -> str:
    """Lay out, write (90 dpi: the dashboard's images; drawn in memory, written whole by
    perf.files) and close a figure; its path."""
    fig.tight_layout(**({"rect": rect} if rect else {}))
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=90, format="png")
    _plt().close(fig)
    return files.write_bytes(path, buffer.getvalue())


def plot_paper(h: History, family: str, members: list, metric: str, path: str) -> str:
    """Latency against batch size: panels per KV length (columns) and decode share (rows)."""
    plt = _plt()
    seqs = sorted({s.max_seq for s in members})
    decodes = sorted({s.decode for s in members})
    variants, peers = h.names(peers=False), h.names(peers=True)
    color = _colors(variants)
    width, height = max(7.0, 3.6 * len(seqs) + 1.2), 2.7 * len(decodes) + 1.3
    fig, axes = plt.subplots(len(decodes), len(seqs), figsize=(width, height), squeeze=False, sharex=True)
    for i, d in enumerate(decodes):
        for j, seq in enumerate(seqs):
            ax = axes[i][j]
            cell = sorted((s for s in members if s.decode == d and s.max_seq == seq), key=lambda s: s.batch)
            xs = [s.batch for s in cell]
            for n in variants:
                ys = [h.value(n, s.name, metric) for s in cell]
                if any(math.isfinite(y) for y in ys):
                    ax.plot(xs, ys, "o-", ms=3, lw=1.4, color=color[n], label=n)
            for k, n in enumerate(peers):
                ys = [h.value(n, s.name, metric) for s in cell]
                if any(math.isfinite(y) for y in ys):
                    ax.plot(xs, ys, "--", marker="x", ms=4, lw=1.2, color="black", alpha=0.85 - 0.2 * (k % 3),
                            label=n.removeprefix(PEER_PREFIX) + " (vendor)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", lw=0.3, alpha=0.5)
            ax.set_title(f"KV {seq}, {d} % of sequences decode", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{metric} latency (ms)", fontsize=8)
            if i == len(decodes) - 1:
                ax.set_xlabel("batch size (sequences)", fontsize=8)
            ax.tick_params(labelsize=7)
    handles, labels = {}, []
    for ax in axes.flat:
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in handles:
                handles[lb] = hd
                labels.append(lb)
    # Title, then the legend, in the top 0.75 inch whatever the figure's height.
    fig.suptitle(f"{family}: {h.gpu}, commit {h.latest.short} ({metric})", fontsize=10, y=1 - 0.1 / height)
    fig.legend([handles[lb] for lb in labels], labels, loc="upper center", ncol=min(len(labels), 5),
               fontsize=8, frameon=False, bbox_to_anchor=(0.5, 1 - 0.32 / height))
    return _save(fig, path, rect=(0, 0, 1, 1 - 0.75 / height))


def _geomeans(names: list[str], commits: list, percents) -> dict[str, tuple[list[float], list[int]]]:
    """name -> (the geometric mean of `percents(name, sha)`'s finite values per commit, how many
    values each had), for the names with a value at some commit: the lines of a plot over time."""
    lines = {}
    for n in names:
        ys, counts = [], []
        for c in commits:
            vals = [v for v in percents(n, c.sha) if math.isfinite(v)]
            ys.append(geomean(vals))
            counts.append(len(vals))
        if any(math.isfinite(y) for y in ys):
            lines[n] = (ys, counts)
    return lines


def plot_sota_over_time(h: History, metric: str, path: str) -> str | None:
    """Geometric mean over scenarios of % of vendor SOTA, per variant, across commits."""
    variants = h.names(peers=False)
    xs = list(range(len(h.commits)))
    lines = _geomeans(variants, h.commits,
                      lambda n, sha: [sota_percent(h, n, s, metric, sha) for s in h.scenarios()])
    if not lines:
        return None
    plt = _plt()
    color = _colors(variants)
    fig, ax = plt.subplots(figsize=(9, 4))
    for n, (ys, counts) in lines.items():
        ax.plot(xs, ys, "o-", color=color[n], label=f"{n} ({counts[-1]} scenarios)")
    ax.axhline(100, color="black", ls="--", lw=0.8)
    ax.set_xticks(xs, [f"{c.short}\n{c.date[:10]}" for c in h.commits], fontsize=7)
    ax.set_ylabel("% of vendor SOTA (geomean; 100 = on par)")
    ax.set_title(f"{h.gpu} ({h.machine}), {metric}: fastest vendor library / variant", fontsize=9)
    ax.grid(True, lw=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_hw_limit(h: History, suite: str, metric: str, path: str) -> str | None:
    """Geometric mean over scenarios of % of the HW limit, per variant and vendor library, across
    the commits the nightly measured with `suite`; None when no night of it has limits."""
    commits = [c for c in h.commits if c.suite == suite]
    works = _works(h)
    names = [*h.names(peers=False), *h.names(peers=True)]
    lines = _geomeans(names, commits, lambda n, sha: [
        100 * x.fraction if x is not None else math.nan for x in (hw_share(h, n, s, metric, sha, works)
                                                                   for s in works)])
    if not lines:
        return None
    plt = _plt()
    color = _colors(h.names(peers=False))
    xs = list(range(len(commits)))
    fig, ax = plt.subplots(figsize=(9, 4))
    for n, (ys, counts) in lines.items():
        peer = n.startswith(PEER_PREFIX)
        ax.plot(xs, ys, "x--" if peer else "o-", color="black" if peer else color[n],
                label=f"{n.removeprefix(PEER_PREFIX)}{' (vendor)' if peer else ''} ({counts[-1]} scenarios)")
    ax.axhline(100, color="black", ls=":", lw=0.8)
    ax.set_xticks(xs, [f"{c.short}\n{c.date[:10]}" for c in commits], fontsize=7)
    ax.set_ylabel("% of HW limit (geomean; 100 = at it)")
    ax.set_title(f"{h.gpu} ({h.machine}), suite {suite}, {metric}: the larger of % of copy bandwidth and "
                 f"% of matmul peak", fontsize=9)
    ax.grid(True, lw=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_history(h: History, name: str, path: str, flagged: set[tuple[str, str, str]]) -> str | None:
    """One panel per metric: each scenario's latency over commits / its median over them."""
    metrics = [m for m in h.metrics() if any(k[0] == name and k[2] == m for k in h.series)]
    if not metrics:
        return None
    plt = _plt()
    xs = list(range(len(h.commits)))
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.2 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        drawn = 0
        for (n, scenario, m) in h.series:
            if n != name or m != metric:
                continue
            ys = [h.value(n, scenario, m, c.sha) for c in h.commits]
            finite = sorted(y for y in ys if math.isfinite(y))
            if not finite:
                continue
            mid = finite[len(finite) // 2]
            rel = [y / mid if math.isfinite(y) else math.nan for y in ys]
            bad = (name, scenario, metric) in flagged
            ax.plot(xs, rel, "-o" if bad else "-", ms=3, lw=1.6 if bad else 0.6,
                    color="#d62728" if bad else "#1f77b4", alpha=1.0 if bad else 0.35,
                    label=scenario if bad else None, zorder=3 if bad else 2)
            drawn += 1
        ax.axhline(1.0, color="black", lw=0.6)
        ax.set_xticks(xs, [c.short for c in h.commits], fontsize=7, rotation=30)
        ax.set_ylabel("latency / its median over commits", fontsize=8)
        ax.set_title(f"{name}, {metric}: {drawn} scenarios", fontsize=9)
        ax.grid(True, lw=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=6, title="alert (red)", title_fontsize=7)
    return _save(fig, path)


# --- pages -------------------------------------------------------------------------------------


def _cell(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def case_png(variant: str, scenario: str, metric: str) -> str:
    """The file name of an alerted series' plot in its machine's folder (issues link it)."""
    return f"alert_{slug(variant)}_{slug(scenario)}_{slug(metric)}.png"


def plot_case(h: History, key: tuple[str, str, str], path: str, window: int) -> str | None:
    """One series: every commit's repeat medians and their median; the newest commit red, the
    commits it was compared with shaded."""
    by_sha = h.series.get(key)
    if not by_sha:
        return None
    plt = _plt()
    shas = [c.sha for c in h.commits if c.sha in by_sha]
    xs = list(range(len(shas)))
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    earlier = xs[:-1][-window:]
    if earlier:
        ax.axvspan(earlier[0] - 0.4, earlier[-1] + 0.4, color="#1f77b4", alpha=0.08, lw=0,
                   label=f"compared with ({len(earlier)} commits)")
    for x, sha in zip(xs, shas):
        bad = sha == h.latest.sha
        ys = by_sha[sha]
        ax.plot([x] * len(ys), ys, "o", ms=3, color="#d62728" if bad else "#1f77b4", alpha=0.7)
    ax.plot(xs, [h.value(*key, s) for s in shas], "-", lw=1, color="black", label="median of repeats")
    ax.set_xticks(xs, [s[:8] for s in shas], fontsize=7, rotation=30)
    ax.set_ylabel(f"{key[2]} latency (ms)", fontsize=8)
    ax.set_title(f"{key[0]} on {key[1]} ({key[2]}), {h.gpu}", fontsize=9)
    ax.grid(True, lw=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def _remeasure_cell(alert: dict | None) -> tuple[str, str]:
    """(row class, HTML) of an alert's re-measure and issue (confirm.py, issues.py)."""
    if not alert or not alert.get("remeasure"):
        return "fail", "<span class=na>not re-measured</span>"
    r, issue = alert["remeasure"], alert.get("issue") or {}
    evidence = ""
    if r.get("ratio") is not None:
        ci = (f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r.get("ci_low") is not None
              and r.get("ci_high") is not None else "")
        evidence = f": gate x{r['ratio']:.3f}{ci} ({_e(r.get('verdict', '?'))})"
    text = f"<b>{_e(r['status'])}</b>{evidence}"
    if r.get("status") in ("pending", "inconclusive") and r.get("note"):
        text += f" <span class=note>{_e(r['note'])}</span>"
    if str(issue.get("url", "")).startswith("https://"):
        label = f"issue #{issue['number']}" if issue.get("number") else "issue"
        text += f" &rarr; <a href='{_e(issue['url'])}'>{_e(label)}</a>"
    return ("noise" if r.get("status") == "noise" else "fail"), text


def _findings_table(findings: list[dict], alerts: list[dict] | None = None) -> list[str]:
    rows = [f for f in findings if f["verdict"] in ("fail", "warn")]
    if not rows:
        return ["<p>No step at the newest commit: every variant's series is within its thresholds "
                "(or has too little history).</p>"]
    by_key = {(a["variant"], a["scenario"], a["metric"]): a for a in alerts or []}
    rows.sort(key=lambda f: (f["verdict"] != "fail", -(f["ratio"] or 0)))
    out = ["<table><tr><th class=l>verdict</th><th class=l>variant</th><th class=l>scenario</th>"
           "<th class=l>metric</th><th>earlier (ms)</th><th>newest (ms)</th><th>ratio</th><th>CI</th>"
           "<th>p</th><th class=l>threshold</th><th class=l>re-measure</th><th class=l>note</th></tr>"]
    for f in rows:
        ci = f"[{f['ci_low']:.3f}, {f['ci_high']:.3f}]" if f["ci_low"] is not None else "–"
        left = [f["verdict"].upper(), f["variant"], f["scenario"], f["metric"]]
        nums = [_cell(f["base"], ".4g"), _cell(f["head"], ".4g"), _cell(f["ratio"], ".3f"), ci,
                _cell(f["p_value"], ".1e")]  # no p or ratio: a compile time (alert.compile_finding)
        cls, status = f["verdict"], "–"
        if f["verdict"] == "fail":
            cls, status = _remeasure_cell(by_key.get((f["variant"], f["scenario"], f["metric"])))
        out.append(f"<tr class={cls}>" + "".join(f"<td class=l>{_e(x)}</td>" for x in left)
                   + "".join(f"<td>{x}</td>" for x in nums)
                   + f"<td class=l>{_e(f['threshold'])}</td><td class=l>{status}</td>"
                   + f"<td class=l>{_e(f['note'])}</td></tr>")
    out.append("</table>")
    return out


ALERTS_BEGIN, ALERTS_END = "<!-- alerts:begin -->", "<!-- alerts:end -->"


def alert_section(result: dict | None, folder: str) -> str:
    """A machine page's change points: the table, the notes, each alert's plot (drawn by
    machine_page into `folder`, shown where it is there); `relink` rewrites it when alert.json
    gains re-measures and issues."""
    result = result or {}
    findings, alerts = result.get("findings", []), result.get("alerts", [])
    n = sum(1 for f in findings if f["verdict"] == "fail")
    statuses = [(a.get("remeasure") or {}).get("status") for a in alerts]
    told = ", ".join(f"{statuses.count(s)} {s}" for s in ("confirmed", "noise", "pending", "inconclusive")
                     if statuses.count(s))
    body = [ALERTS_BEGIN,
            f"<h2>Change points at the newest commit: {n} alert{'s' if n != 1 else ''}"
            + (f" <span class=note>(re-measured: {told})</span>" if told else "") + "</h2>",
            *_findings_table(findings, alerts),
            *[f"<p class=note>{_e(x)}</p>" for x in result.get("notes", [])]]
    if alerts:
        body.append("<p class=note>Re-measure: the latency gate's same-process A/B of the newest commit "
                    "against the alert's last good commit (<code>python -m perf alert --confirm</code>, "
                    "docs/nightly.md): <b>confirmed</b> when the gate fails it too (an issue is opened), "
                    "<b>noise</b> when the gate finds it ok, <b>inconclusive</b> when it warns or has no "
                    "verdict.</p>")
        pngs = [(a, case_png(a["variant"], a["scenario"], a["metric"])) for a in alerts]
        body += [f"<img src='{png}' alt='history {_e(a['variant'])} {_e(a['scenario'])} {_e(a['metric'])}'>"
                 for a, png in pngs if os.path.exists(os.path.join(folder, png))]
    body.append(ALERTS_END)
    return "\n".join(body)


def _index_status(result: dict | None) -> str:
    alerts = (result or {}).get("alerts", [])
    if not alerts:
        return "no alert"
    statuses = [(a.get("remeasure") or {}).get("status") for a in alerts]
    n = len(alerts)
    text = f"{n} alert{'s' if n > 1 else ''}"
    told = ", ".join(f"{statuses.count(s)} {s}" for s in ("confirmed", "noise", "pending", "inconclusive")
                     if statuses.count(s))
    cls = "noise" if statuses.count("noise") == n else "fail"
    return f"<span class={cls}>{text}</span>" + (f" ({told})" if told else "")


def relink(out_dir: str, results: dict[str, dict]) -> list[str]:
    """Rewrite each machine page's alert section and the index's status cells from `results`
    (machine -> alert.machine_result, with re-measures and issues); the pages rewritten. Needs
    neither the history nor matplotlib: the issues job runs it on a bare runner."""
    import re

    done = []
    index = os.path.join(out_dir, "index.html")
    for machine, result in results.items():
        page = os.path.join(out_dir, slug(machine), "index.html")
        if not os.path.exists(page):
            continue
        text = files.read_text(page, "a dashboard page", "build the dashboard again (`perf nightly report`)")
        start, end = text.find(ALERTS_BEGIN), text.find(ALERTS_END)
        if start < 0 or end < start:
            continue
        section = alert_section(result, os.path.dirname(page))
        files.write_text(page, text[:start] + section + text[end + len(ALERTS_END):])
        done.append(page)
        if os.path.exists(index):
            top = files.read_text(index, "the dashboard's index", "build the dashboard again")
            mark = re.escape(_status_mark(machine))
            cell = _index_status(result)
            top = re.sub(f"({mark}).*?(<!-- /status -->)", lambda m, cell=cell: m[1] + cell + m[2], top,
                         flags=re.S)
            files.write_text(index, top)
    return done


def _status_mark(machine: str) -> str:
    return f"<!-- status {slug(machine)} -->"


def _sota_table(h: History, metric: str) -> list[str]:
    variants = h.names(peers=False)
    rows = []
    for s in h.scenarios():
        peer, best = h.best_peer(s, metric)
        if peer is None:
            continue
        cells = []
        for n in variants:
            pct = sota_percent(h, n, s, metric)
            ms = h.value(n, s, metric)
            if not math.isfinite(pct):
                cells.append("<td class=na>–</td>")
                continue
            cls = "good" if pct >= 90 else ("mid" if pct >= 50 else "bad")
            cells.append(f"<td class={cls} title='{ms:.4g} ms'>{pct:.0f}%</td>")
        rows.append(f"<tr><td class=l>{_e(s)}</td><td class=l>{_e(peer.removeprefix(PEER_PREFIX))}</td>"
                    f"<td>{best:.4g}</td>{''.join(cells)}</tr>")
    if not rows:
        return ["<p class=note>No vendor library ran any scenario of this history: no baseline.</p>"]
    head = "".join(f"<th>{_e(n)}</th>" for n in variants)
    return ["<table><tr><th class=l>scenario</th><th class=l>fastest library</th><th>its ms</th>"
            + head + "</tr>", *rows, "</table>"]


# The table's colours: near the limit from HW_NEAR %, far below HW_FAR %; a reading aid, no verdict.
# The best peer's prefill 1 x 8k runs at about 70 % of the matmul peak on an H200 (551 TFLOP/s in
# docs/peers.md's table against the 742-779 TFLOP/s measured in docs/lab/2026-11-28.md).
HW_NEAR, HW_FAR = 70.0, 30.0


def _hw_table(h: History, metric: str) -> list[str]:
    """The newest commit's % of the HW limit per scenario, every variant and vendor library, the
    bound named ("62 % memory"); "–" where the night has no limits or the case no latency."""
    names = [*h.names(peers=False), *h.names(peers=True)]
    works = _works(h)
    rows = []
    for s in h.scenarios():
        cells = []
        for n in names:
            found = hw_share(h, n, s, metric, work=works)
            if found is None:
                cells.append("<td class=na>–</td>")
                continue
            pct = 100 * found.fraction
            cls = "good" if pct >= HW_NEAR else ("mid" if pct >= HW_FAR else "bad")
            cells.append(f"<td class={cls} title='{h.value(n, s, metric):.4g} ms'>"
                         f"{_e(roofline.cell(found))}</td>")
        rows.append(f"<tr><td class=l>{_e(s)}</td>{''.join(cells)}</tr>")
    head = "".join(f"<th>{_e(n.removeprefix(PEER_PREFIX))}</th>" for n in names)
    return ["<table><tr><th class=l>scenario</th>" + head + "</tr>", *rows, "</table>"]


def hw_section(h: History, folder: str) -> list[str]:
    """"% of the hardware limit": one plot per suite and metric over the commits, the newest
    commit's table, and the limits it was measured against (or why there are none)."""
    env = h.latest.environment
    out = ["<h2>% of the hardware limit</h2>",
           f"<p class=note>{_e(roofline.describe_env(env))}. Bytes and flops per scenario from its batch "
           f"(perf/roofline.py); a night without a GPU has no limit and shows –.</p>"]
    for suite in dict.fromkeys(c.suite for c in h.commits):
        for metric in h.metrics():
            png = os.path.join(folder, f"hwlimit_{slug(suite or 'none')}_{metric}.png")
            p = plot_hw_limit(h, suite, metric, png)
            if p:
                out.append(f"<img src='{os.path.basename(p)}' alt='% of HW limit, {_e(suite)}, {metric}'>")
    for metric in h.metrics():
        out += [f"<h3>Newest commit, {metric}</h3>", *_hw_table(h, metric)]
    return out


def _skips(h: History) -> list[str]:
    by_reason: dict[tuple[str, str], int] = defaultdict(int)
    for (name, _), reason in h.notes.items():
        by_reason[(name, reason)] += 1
    out = [f"<li><b>left out of the history</b>: {_e(line)}</li>" for line in h.skipped]
    for peer, reason in sorted(h.latest.absent_peers.items()):
        out.append(f"<li><b>{_e(peer)}</b>: not measured on this machine ({_e(reason)})</li>")
    for (name, reason), n in sorted(by_reason.items()):
        out.append(f"<li><b>{_e(name)}</b>: {n} scenario{'s' if n > 1 else ''} skipped: {_e(reason)}</li>")
    return ["<ul>", *out, "</ul>"] if out else ["<p>Nothing was skipped.</p>"]


FIELD_KIND = {**{f: "toolchain" for f in fingerprint.TOOLCHAIN_FIELDS},
              **{f: "environment" for f in fingerprint.ENVIRONMENT_FIELDS}}
MAX_CHANGES = 40  # rows of the "what changed" table, newest first (a page, not an archive)


def _prints(h: History) -> list[NightPrint]:
    """The history's nights with their fingerprints: the data branch's, else one per commit."""
    if h.nights:
        return h.nights
    return [NightPrint((c.measured or c.date)[:10], c.sha, fingerprint.from_environment(c.environment))
            for c in h.commits]


def _clocks(reading: dict | None) -> str:
    if not reading:
        return "–"
    throttle = reading.get("throttle")
    why = "; ".join(f"{k}: {v}" for k, v in (reading.get("why") or {}).items())
    text = (f"SM {reading.get('sm_mhz') or '?'} MHz, memory {reading.get('mem_mhz') or '?'} MHz, reasons: "
            f"{', '.join(throttle) if throttle else ('none' if throttle == [] else 'unknown')}")
    return _e(text) + (f" <span class=note>({_e(why)})</span>" if why else "")


def environment_section(h: History) -> list[str]:
    """The newest night's fingerprint, and each change of it from one night to the next."""
    prints = _prints(h)
    newest = prints[-1].fingerprint if prints and prints[-1].fingerprint else \
        fingerprint.from_environment(h.latest.environment)
    why = newest.get("why") or h.latest.environment.get("fingerprint_why") or {}
    out = ["<h2>Environment</h2>"]
    hot = fingerprint.throttled(newest)
    if hot:
        out.append(f"<p class=fail>The newest night's GPU was {_e(hot)}: its latencies may be slow for "
                   f"that reason, not the code's.</p>")
    rows = []
    for field in fingerprint.FIELDS:
        if field == "clocks":
            continue
        value = newest.get(field)
        shown = _e(value) if value is not None else f"<span class=na>– {_e(why.get(field, ''))}</span>"
        rows.append(f"<tr><td class=l>{field}</td><td class=l>{_e(FIELD_KIND.get(field, ''))}</td>"
                    f"<td class=l>{shown}</td></tr>")
    clocks = newest.get("clocks") if isinstance(newest.get("clocks"), dict) else {}
    for p in newest.get("processes") or [{"gpu_uuid": None, "clocks": clocks}]:
        c = p.get("clocks") or {}
        on = f" ({_e(p['gpu_uuid'])})" if p.get("gpu_uuid") and newest.get("processes") else ""
        rows.append(f"<tr><td class=l>clocks{on}</td><td class=l></td><td class=l>start: "
                    f"{_clocks(c.get('start'))}<br>end: {_clocks(c.get('end'))}</td></tr>")
    out += ["<table><tr><th class=l>field</th><th class=l>kind</th><th class=l>newest night</th></tr>",
            *rows, "</table>"]
    changes = []
    for before, after in zip(prints, prints[1:]):
        if before.fingerprint is None or after.fingerprint is None:
            continue
        for field, (old, new) in fingerprint.diff(before.fingerprint, after.fingerprint).items():
            cells = [f"{_e(before.date)} &rarr; {_e(after.date)} <code>{_e(after.sha[:8])}</code>",
                     _e(field), _e(FIELD_KIND.get(field, "")), _e("–" if old is None else old),
                     _e("–" if new is None else new)]
            changes.append("<tr>" + "".join(f"<td class=l>{c}</td>" for c in cells) + "</tr>")
    if not changes:
        out.append(f"<p class=note>Nothing changed in the environment over the {len(prints)} nights of this "
                   f"history (the clocks aside).</p>")
    else:
        out += [f"<h3>What changed from one night to the next ({len(changes)}, newest first)</h3>",
                "<table><tr><th class=l>nights</th><th class=l>field</th><th class=l>kind</th>"
                "<th class=l>before</th><th class=l>after</th></tr>", *changes[::-1][:MAX_CHANGES],
                "</table>"]
    return out


def machine_page(h: History, folder: str, result: dict | None) -> str:
    """Write one machine's page and figures into `folder`; returns the page's path."""
    env = h.latest.environment
    findings = (result or {}).get("findings", [])
    flagged = {(f["variant"], f["scenario"], f["metric"]) for f in findings if f["verdict"] == "fail"}
    for a in (result or {}).get("alerts", []):
        key = (a["variant"], a["scenario"], a["metric"])
        plot_case(h, key, os.path.join(folder, case_png(*key)), (result or {}).get("window", WINDOW))
    body = ["<p><a href='../index.html'>all machines</a> · <a href='../../index.html'>asv's interactive "
            "site</a> <span class=note>(needs a web server: <code>python -m http.server -d .asv/html</code>)"
            "</span></p>",
            f"<h1>{_e(h.gpu)} <span class=note>({_e(h.vendor)}, machine {_e(h.machine)})</span></h1>",
            f"<p class=note>driver {_e(env.get('driver') or '–')}, torch {_e(env.get('torch'))}, triton "
            f"{_e(env.get('triton'))}, newest commit <code>{_e(h.latest.sha)}</code> ({_e(h.latest.date)}), "
            f"measured {_e(h.latest.measured)}; {len(h.commits)} commits in the history: "
            + ", ".join(f"<code>{c.short}</code>" for c in h.commits) + "</p>",
            alert_section(result, folder)]
    metrics = h.metrics()
    body.append("<h2>% of vendor state of the art</h2><p class=note>Fastest vendor library's latency / the "
                "variant's, per scenario (100% = on par, higher is better). Libraries labelled "
                "\"dense, not paged\" read contiguous copies, not the block table.</p>")
    for metric in metrics:
        p = plot_sota_over_time(h, metric, os.path.join(folder, f"sota_{metric}.png"))
        if p:
            body.append(f"<img src='{os.path.basename(p)}' alt='% of SOTA over time, {metric}'>")
    for metric in metrics:
        body += [f"<h3>Newest commit, {metric}</h3>", *_sota_table(h, metric)]
    body += hw_section(h, folder)
    body.append("<h2>Latency against batch size (the paper's figures)</h2>")
    fams = families(h.scenarios())
    if not fams:
        body.append("<p class=note>No scenario group with two or more batch sizes in this history.</p>")
    for metric in metrics:
        for fam, members in fams.items():
            p = plot_paper(h, fam, members, metric, os.path.join(folder, f"paper_{slug(fam)}_{metric}.png"))
            body.append(f"<img src='{os.path.basename(p)}' alt='{_e(fam)} {metric}'>")
    body.append("<h2>Latency history across commits</h2><p class=note>Each line is one scenario, relative to "
                "its median over the commits; red: an alert at the newest commit.</p>")
    for name in [*h.names(peers=False), *h.names(peers=True)]:
        p = plot_history(h, name, os.path.join(folder, f"history_{slug(name)}.png"), flagged)
        if p:
            body.append(f"<img src='{os.path.basename(p)}' alt='history {_e(name)}'>")
    body += environment_section(h)
    body += ["<h2>Skipped</h2>", *_skips(h)]
    page = _page(f"Nightly: {h.gpu} ({h.machine})", body)
    return files.write_text(os.path.join(folder, "index.html"), page)


def build(histories: list[History], out_dir: str, results: dict[str, dict] | None = None,
          toolchain: dict | None = None) -> str:
    """Write the report under `out_dir` (one folder per machine and an index); returns the index.
    `toolchain`: the toolchain A/B's summary (perf/nightly/toolchain.py), shown when given."""
    results = results or {}
    items = []
    for h in histories:
        machine_page(h, os.path.join(out_dir, slug(h.machine)), results.get(h.machine))
        status = f"{_status_mark(h.machine)}{_index_status(results.get(h.machine))}<!-- /status -->"
        items.append(f"<tr><td class=l><a href='{slug(h.machine)}/index.html'>{_e(h.gpu)}</a></td>"
                     f"<td class=l>{_e(h.vendor)}</td><td class=l>{_e(h.machine)}</td>"
                     f"<td>{len(h.commits)}</td>"
                     f"<td class=l><code>{h.latest.short}</code> {_e(h.latest.date[:10])}</td>"
                     f"<td class=l>{status}</td></tr>")
    body = ["<h1>Paged attention: nightly performance</h1>",
            "<p class=note>Per vendor and GPU: alerts at the newest commit, % of the vendor's fastest "
            "library, the paper's latency figures and every variant's history. <a href='../index.html'>asv's "
            "interactive site</a> holds every benchmark's full history (needs a web server).</p>"]
    if items:
        body += ["<table><tr><th class=l>GPU</th><th class=l>vendor</th><th class=l>machine</th>"
                 "<th>commits</th><th class=l>newest</th><th class=l>status</th></tr>", *items, "</table>"]
    else:
        body.append("<p>No nightly history yet: run <code>nox -s nightly</code> on a GPU runner.</p>")
    if toolchain:
        body += toolchain_section(toolchain)
    return files.write_text(os.path.join(out_dir, "index.html"), _page("Paged attention: nightly", body))


def toolchain_section(summary: dict) -> list[str]:
    """"Toolchain": this commit under the newest Triton release (and pre-release) against the
    installed Triton, both gates' verdict counts and their worst findings."""
    out = ["<h2>Toolchain</h2>",
           f"<p class=note>This commit under newer Tritons against the installed Triton "
           f"{_e(summary.get('installed'))} ({_e(summary.get('time', '')[:16])}, suite "
           f"<code>{_e(summary.get('suite'))}</code>; <code>python -m perf toolchain</code>).</p>"]
    if summary.get("error"):
        return out + [f"<p class=fail>did not run: {_e(summary['error'])}</p>"]

    def cell(gate: dict | None) -> str:
        if not gate:
            return "<td class=na>–</td>"
        if gate.get("findings") is None:
            why = "skipped (no GPU)" if gate.get("exit") == 0 else f"stopped (exit {gate.get('exit')})"
            return f"<td class='l na'>{why}</td>"
        n = gate["findings"]
        css = "fail" if n["fail"] else ("warn" if n["warn"] else "good")
        top = "".join(f"<br><code>{_e(t)}</code>" for t in gate.get("top", []))
        return (f"<td class='l {css}'>{n['fail']} fail, {n['warn']} warn, {n['ok']} ok, {n['improved']} "
                f"improved ({gate.get('seconds', 0) / 60:.1f} min){top}</td>")

    rows = [f"<tr><td class=l>{_e(v['version'])}</td><td class=l>{_e(v['kind'])}</td>"
            + (f"<td class='l na' colspan=2>{_e(v['skipped'])}</td>" if v.get("skipped")
               else cell(v.get("static")) + cell(v.get("latency"))) + "</tr>"
            for v in summary.get("versions", [])]
    return out + ["<table><tr><th class=l>Triton</th><th class=l>kind</th><th class=l>static gate</th>"
                  "<th class=l>latency gate</th></tr>", *rows, "</table>"]
