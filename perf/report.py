"""Reports people read: a Markdown table (worst first), the job summary, a plot of ratios,
and the benchmark table of a results file.

`render_markdown` puts failures and warnings in the table a reviewer sees first and folds
the passing rows into a <details> block, so the answer takes ten seconds to find.
`publish` prints it and appends it to `$GITHUB_STEP_SUMMARY` when that is set (GitHub
Actions renders the file on the run's page); each gate draws its own plot (the latency
gate's: perf/latency/plot.py). `render_table`
(`python -m perf table`) shows what `perf run` measured: every variant and peer side by
side per scenario, the throughput derived from latency and its % of the GPU's limit
(perf/roofline.py), ours over the best peer.
"""

from __future__ import annotations

import math
import os
import sys

from perf import roofline
from perf.verdicts import Finding, Verdict, counts, nothing_compared, worst_first

_COLUMNS = ("verdict", "vendor", "target", "variant", "scenario", "metric", "base", "head",
            "ratio", "CI", "p", "threshold", "note")
_MARK = {Verdict.WRONG: "**WRONG**", Verdict.FAIL: "**FAIL**", Verdict.WARN: "warn", Verdict.OK: "ok",
         Verdict.IMPROVED: "improved", Verdict.UNCHANGED: "unchanged"}


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


HW_COLUMN = "head, % of HW limit"  # after "head": perf/roofline.py's cell of the head's median


def _row(f: Finding, hardware: roofline.Sheet | None = None) -> str:
    ci = "–" if f.ci_low is None or f.ci_high is None else f"[{f.ci_low:.3f}, {f.ci_high:.3f}]"
    ratio = "–" if f.ratio is None else f"{f.ratio:.3f}"
    limit = () if hardware is None else (hardware.cell(f.scenario, f.head),)
    cells = (_MARK[f.verdict], f.vendor, f.target, f.variant, f.scenario, f.metric,
             _num(f.base), _num(f.head), *limit, ratio, ci, _p(f.p_value), f.threshold, f.note)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(rows: list[Finding], hardware: roofline.Sheet | None = None) -> list[str]:
    at = _COLUMNS.index("head") + 1
    columns = _COLUMNS if hardware is None else (*_COLUMNS[:at], HW_COLUMN, *_COLUMNS[at:])
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *(_row(f, hardware) for f in rows)]


def headline(findings: list[Finding]) -> str:
    n = counts(findings)
    status = "FAIL" if n["fail"] or n["wrong"] else (
        "nothing measured" if nothing_compared(findings) else
        "pass with warnings" if n["warn"] else
        "pass: nothing to time" if findings and n["unchanged"] == len(findings) else "pass")
    parts = [f"{n[v.value]} {v.value}" for v in (Verdict.FAIL, Verdict.WARN, Verdict.OK, Verdict.IMPROVED)]
    if n["wrong"]:
        parts.insert(0, f"{n['wrong']} wrong")
    if n["unchanged"]:
        parts.append(f"{n['unchanged']} unchanged (identical launches, not timed)")
    return f"**{status}**: " + ", ".join(parts)


def render_markdown(findings: list[Finding], title: str, notes: list[str] | None = None,
                    hardware: roofline.Sheet | None = None) -> str:
    """Markdown: title, headline, the failing/warning rows, then passing rows folded away;
    `hardware` (a latency gate's, perf/roofline.py): each head time's % of the HW limit too."""
    rows = worst_first(findings)
    bad = [f for f in rows if f.verdict in (Verdict.WRONG, Verdict.FAIL, Verdict.WARN)]
    same = [f for f in rows if f.verdict is Verdict.UNCHANGED]
    good = [f for f in rows if f not in bad and f.verdict is not Verdict.UNCHANGED]
    lines = [f"## {title}", "", headline(findings), ""]
    if not findings:
        lines += ["No measurements to compare.", ""]
    if bad:
        lines += _table(bad, hardware) + [""]
    if good:
        if bad:
            lines += [f"<details><summary>{len(good)} passing</summary>", ""]
        lines += _table(good, hardware) + [""]
        if bad:
            lines += ["</details>", ""]
    if same:
        lines += [f"<details><summary>{len(same)} unchanged: identical launches on both sides, not timed"
                  f"</summary>", "", *_table(same), "", "</details>", ""]
    notes = [*(notes or []), *([hardware.note] if hardware is not None else [])]
    for note in notes:
        lines.append(f"- {note}")
    if notes:
        lines.append("")
    lines.append("ratio = head / base (> 1 is slower for latency); CI: confidence interval of the ratio; "
                 "p: one-sided test in the direction of the change (the notes name the test).")
    return "\n".join(lines) + "\n"


def publish(markdown: str) -> None:
    """Print the report and append it to the GitHub job summary when running in Actions."""
    print(markdown, flush=True)
    step_summary(markdown + "\n")


def step_summary(text: str) -> None:
    """Append `text` to $GITHUB_STEP_SUMMARY when it is set: an append (GitHub's contract), so
    not the atomic writer; a summary that cannot be written is said on stderr, never fatal."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        print(f"warning: $GITHUB_STEP_SUMMARY {path}: cannot append the report ({e.strerror or e}); it is "
              f"printed above", file=sys.stderr, flush=True)


# --- the benchmark table (`python -m perf table RESULTS.jsonl`) ---------------------------------


def geomean(values) -> float:
    """Geometric mean of the positive finite values; NaN when there is none."""
    v = [x for x in values if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else math.nan


def throughput(spec, ms: float) -> tuple[float, str]:
    """The one figure derived from a latency: KV GB/s read for decode-only batches (bandwidth
    bound), TFLOP/s otherwise (compute bound)."""
    if all(q == 1 for q in spec.query_lens):
        return roofline.kv_read_bytes(spec) / (ms * 1e-3) / 1e9, "KV GB/s"
    return roofline.attention_flops(spec) / (ms * 1e-3) / 1e12, "TFLOP/s"


def _spec(scenario: str):
    from perf.scenarios import Scenario

    try:
        return Scenario.parse(scenario).spec()
    except ValueError:
        return None


def _ms(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else (f"{x:.3f}" if x >= 0.1 else f"{x:.4f}")


def render_table(res, ours: str = "static_grid", against: tuple[str, ...] = ()) -> str:
    """Markdown: per scenario the median latency of every variant and peer (eager / graph),
    then `ours` against the fastest peer and against each peer named in `against` (the peer a
    target is set against, which need not be the fastest: a dense library bounds a paged
    kernel without being one), with the derived throughput and geometric means."""
    import statistics

    from perf.peers import PREFIX

    medians = {k: statistics.median(v) for k, v in res.medians().items()}
    head, env = res.header, res.environment
    measured = {s for _, s, _ in medians}  # in the order `perf run` measured them (the suite's)
    scenarios = [s for s in dict.fromkeys(r["scenario"] for r in res.records) if s in measured]
    peers = [PREFIX + p for p in head.get("peers") or []]
    names = list(dict.fromkeys([*(head.get("variants") or []), *peers, *(n for n, _, _ in medians)]))
    peers = [n for n in names if n.startswith(PREFIX)]
    metrics = [m for m in ("eager", "graph") if any(k[2] == m for k in medians)]
    labels, layouts = {}, {}
    for r in res.measurements():
        for c in r.get("config") or []:
            if isinstance(c, dict) and "peer" in c:
                labels[r["variant"]] = c.get("label", r["variant"])
                layouts.setdefault(r["variant"], c.get("layout"))
    wall = any(r.get("clock") == "wall-clock" for r in res.measurements())
    lines = [f"Measured on {env.get('gpu')} ({env.get('arch')}, {env.get('num_sms')} SMs), driver "
             f"{env.get('driver') or '–'}, torch {env.get('torch')}, triton {env.get('triton')}, "
             f"{str(env.get('time', ''))[:10]}, commit {str(env.get('commit') or '–')[:8]}"
             # a dirty checkout's records name the kernels they ran by their digest (results.kernels_tree)
             + (f" with uncommitted changes (kernels/ digest {env.get('kernels_tree') or '–'})"
                if env.get("dirty") else "") + "; suite "
             f"`{head.get('suite')}`, {head.get('repeats')} repeats x up to {head.get('samples')} samples. "
             f"Cells: median latency in ms, {' / '.join(metrics)} (perf.measure.timing: device events, L2 "
             f"flushed before every sample; graph: one CUDA/HIP-graph replay), the median of the repeats' "
             f"medians.", ""]
    if wall:
        lines += ["**Wall-clock times in Triton's interpreter: they say the harness works, nothing about "
                  "speed.**", ""]
    lines += ["| scenario | " + " | ".join(n.removeprefix(PREFIX) for n in names) + " |",
              "|---" * (len(names) + 1) + "|"]
    for s in scenarios:
        cells = [" / ".join(_ms(medians.get((n, s, m))) for m in metrics) for n in names]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    common = [s for s in scenarios if all((n, s, m) in medians for n in names for m in metrics)]
    if len(common) > 1:  # comparable only over the same scenarios: those every column ran
        cells = [" / ".join(_ms(geomean([medians[(n, s, m)] for s in common])) for m in metrics)
                 for n in names]
        lines.append(f"| geometric mean, the {len(common)} scenarios every column ran | "
                     + " | ".join(cells) + " |")
    if peers:
        legend = [f"`{p.removeprefix(PREFIX)}` = {labels.get(p, p)}"
                  + (f" ({layouts[p]})" if layouts.get(p) else "") for p in peers]
        lines += ["", "Peers: " + "; ".join(legend) + "."]
    hardware = roofline.Sheet(roofline.limits_from(env), roofline.record_work(res.measurements()),
                              roofline.describe_env(env))
    lines += _versus_peers(medians, scenarios, peers, metrics, ours, hardware=hardware)
    for name in against:
        peer = name if name.startswith(PREFIX) else PREFIX + name
        if peer not in peers:
            lines += ["", f"No `{name.removeprefix(PREFIX)}` in these results: no ratio to it "
                          f"(measured peers: {', '.join(p.removeprefix(PREFIX) for p in peers) or 'none'})."]
            continue
        versus = f"`{peer.removeprefix(PREFIX)}`"
        paired = {m: paired_against(res, ours, peer, m) for m in metrics}
        lines += _versus_peers(medians, scenarios, [peer], metrics, ours, versus=versus, paired=paired,
                               hardware=hardware)
    skipped: dict[tuple[str, str], list[str]] = {}
    for r in res.skips():
        skipped.setdefault((r["variant"].removeprefix(PREFIX), r["reason"]), []).append(r["scenario"])
    if skipped:
        lines += ["", "Not measured:", ""]
        for (name, reason), where in sorted(skipped.items()):
            what = where[0] if len(where) == 1 else f"{len(where)} scenarios"
            lines.append(f"- `{name}`, {what}: {_cell(reason)}")
    if head.get("peers_absent"):
        lines += ["", "Peers not installed: " + "; ".join(f"`{p}` ({why})" for p, why in
                                                       sorted(head["peers_absent"].items())) + "."]
    return "\n".join(lines) + "\n"


def _figure(spec, ms: float) -> str:
    if spec is None:
        return "–"
    value, unit = throughput(spec, ms)
    return f"{value:.1f} {unit}"


PAIRED_ALPHA = 0.05  # a named peer's verdict per scenario: one-sided test over the processes
MIN_PROCESSES = 3  # results files (processes) for that test; fewer: intervals only


def paired_against(res, ours: str, peer: str, metric: str) -> dict:
    """scenario -> perf.stats.Paired of `ours` / `peer`: a repeat of `perf run` times every
    case of a scenario in one shuffled round, so repeat r of both are neighbours in time and
    their ratio is paired; each process (a results file, `source` as `table_command` merges
    them, or a gate worker's `process`) is a group, the unit of the test, as in the latency gate."""
    from perf import stats

    per: dict[tuple, dict[int, float]] = {}
    for r in res.measurements():
        if r["metric"] == metric and r["variant"] in (ours, peer):
            process = (r.get("source", 0), r.get("process"))
            per.setdefault((r["variant"], r["scenario"], process), {})[r["repeat"]] = r["median"]
    out = {}
    for scenario in {k[1] for k in per}:
        groups = []
        for source in sorted({k[2] for k in per if k[1] == scenario}, key=str):
            mine, theirs = per.get((ours, scenario, source), {}), per.get((peer, scenario, source), {})
            common = sorted(mine.keys() & theirs.keys())
            if common:
                groups.append(stats.log_ratios([theirs[i] for i in common], [mine[i] for i in common]))
        if groups:
            out[scenario] = stats.paired(groups)
    return out


def paired_verdict(p) -> str | None:
    """"faster", "even" or "slower" of a paired ratio (perf.stats.Paired) by the one-sided test
    over its processes at PAIRED_ALPHA; None with fewer than MIN_PROCESSES of them."""
    if p.n_processes < MIN_PROCESSES:
        return None
    return "slower" if p.p_slower < PAIRED_ALPHA else "faster" if p.p_faster < PAIRED_ALPHA else "even"


def verdict_cell(p) -> str:
    verdict = paired_verdict(p)
    return "–" if verdict is None else "**slower**" if verdict == "slower" else verdict


def _paired_cells(p) -> str:
    return "– | –" if p is None else f"{p.ci_low:.2f}-{p.ci_high:.2f} | {verdict_cell(p)}"


def _versus_peers(medians: dict, scenarios: list[str], peers: list[str], metrics: list[str],
                  ours: str, versus: str = "the fastest peer", paired: dict | None = None,
                  hardware: roofline.Sheet | None = None) -> list[str]:
    """`ours` over the fastest of `peers` per scenario (one peer: that peer), per metric, with
    the geometric means over all, decode and prefill-or-mixed scenarios and the largest ratio.
    `paired` (metric -> `paired_against`, a named peer): each ratio's interval and verdict too.
    `hardware`: each latency's % of the GPU's limit beside its throughput (– without limits)."""
    hardware = hardware or roofline.Sheet(None, {}, roofline.describe(None))
    from perf.peers import PREFIX

    if not peers:
        return ["", "No peer measured: `python -m perf run --peers auto` measures the vendor libraries."]
    if not any(k[0] == ours for k in medians):
        return ["", f"No `{ours}` in these results: no ratio to the peers (`--ours VARIANT`)."]
    out = []
    for metric in metrics:
        pairs = (paired or {}).get(metric)
        extra = " paired 95 % | verdict |" if pairs is not None else ""
        out += ["", f"`{ours}` against {versus}, {metric} (ratio = latency of `{ours}` / the peer's; "
                    f"< 1 is faster):", "",
                f"| scenario | {ours} ms | throughput | % of HW limit | best peer | its ms | its throughput "
                f"| its % of HW limit | ratio |{extra}",
                "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if pairs is not None else "")]
        ratios: dict[str, float] = {}
        for s in scenarios:
            mine = medians.get((ours, s, metric))
            best = min(((medians[(p, s, metric)], p) for p in peers if (p, s, metric) in medians),
                       default=None)
            spec = _spec(s)
            if mine is None or best is None:
                continue
            ratios[s] = mine / best[0]
            cells = f" {_paired_cells(pairs.get(s))} |" if pairs is not None else ""
            out.append(f"| {s} | {_ms(mine)} | {_figure(spec, mine)} | {hardware.cell(s, mine)} | "
                       f"{best[1].removeprefix(PREFIX)} | {_ms(best[0])} | {_figure(spec, best[0])} | "
                       f"{hardware.cell(s, best[0])} | {ratios[s]:.2f} |{cells}")
        kinds = {}
        for s, r in ratios.items():
            spec = _spec(s)
            if spec is not None:
                kinds.setdefault("decode" if all(q == 1 for q in spec.query_lens) else "prefill or mixed",
                                 []).append(r)
        if ratios:
            parts = [f"all {len(ratios)}: **{geomean(ratios.values()):.2f}**"]
            parts += [f"{k} ({len(v)}): {geomean(v):.2f}" for k, v in sorted(kinds.items())]
            worst = max(ratios, key=ratios.get)
            out += ["", f"Geometric mean of the ratios ({metric}): " + ", ".join(parts)
                    + f"; largest {ratios[worst]:.2f} ({worst})."]
            if pairs is not None:
                out.append(_paired_summary(pairs, ratios))
            out += ["", hardware.note + "."]
        else:
            out += ["", f"No scenario has both `{ours}` and a peer ({metric})."]
    return out


def _paired_summary(pairs: dict, ratios: dict) -> str:
    """The line under a named peer's table: how its paired verdicts came out, or why there are none."""
    verdicts = {s: paired_verdict(pairs[s]) if s in pairs else None for s in ratios}
    n = {v: sum(1 for x in verdicts.values() if x == v) for v in ("faster", "even", "slower", None)}
    if n[None] == len(verdicts):
        return (f"Paired intervals: ratio per repeat (measured in the same round); a verdict needs "
                f"{MIN_PROCESSES} or more processes per scenario (`perf run` several times, then `perf "
                f"table` on all the files).")
    slower = [s for s, v in verdicts.items() if v == "slower"]
    return (f"Paired, one-sided test over the processes at {PAIRED_ALPHA:g}: {n['faster']} faster, "
            f"{n['even']} even, {n['slower']} slower" + (f" ({', '.join(slower)})" if slower else "")
            + (f", {n[None]} without a verdict (fewer than {MIN_PROCESSES} processes)" if n[None] else "")
            + ".")


def docs_markers(suite: str) -> tuple[str, str]:
    """The two lines between which `perf table --docs FILE` writes a suite's table."""
    return (f"<!-- perf table {suite}: from here to the end marker, written by `python -m perf table "
            f"... --docs` -->", f"<!-- perf table {suite}: end -->")


def write_into_docs(path: str, suite: str, markdown: str) -> None:
    """Replace what stands between the suite's markers (`docs_markers`) in `path` with `markdown`;
    ConfigError naming the file when the markers are missing, repeated or out of order."""
    from perf import files
    from perf.errors import ConfigError

    text = files.read_text(path, "--docs file", "name a Markdown file holding the table's markers")
    begin, end = docs_markers(suite)
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ConfigError(f"{path}: --docs needs the two lines {begin!r} and {end!r}, once each and in "
                          f"that order, where the table of suite {suite} goes (found {len(starts)} and "
                          f"{len(ends)})")
    body = markdown.rstrip("\n").split("\n")
    files.write_text(path, "\n".join(lines[:starts[0] + 1] + ["", *body, ""] + lines[ends[0]:]))


def table_command(args) -> int:
    """`python -m perf table RESULTS.jsonl... [--out FILE.md] [--docs FILE.md]`: print (and write)
    the table; with --docs, also into FILE.md between the suite's markers (`docs_markers`), so
    a page's table is regenerated by one command. NothingMeasured when the files hold no
    measurement (a table of dashes is no benchmark)."""
    from perf import files, results
    from perf.errors import NothingMeasured

    if args.out:
        files.check_output(args.out, "--out")
    against = tuple(p.strip() for p in (args.against or "").split(",") if p.strip())
    merged = results.merge(args.results, source_key="source")
    if not merged.measurements():
        hold = "holds" if len(args.results) == 1 else "hold"
        raise NothingMeasured(f"{', '.join(args.results)} {hold} no measurement ({len(merged.skips())} skip "
                              f"or error lines say why); run `python -m perf run` again, on a GPU for "
                              f"--metrics graph")
    markdown = render_table(merged, ours=args.ours, against=against)
    if args.out:
        files.write_text(args.out, markdown)
    docs = getattr(args, "docs", None)
    if docs:
        write_into_docs(docs, merged.header.get("suite") or "?", markdown)
    print(markdown, end="", flush=True)
    for path in (args.out, docs):
        if path:
            print(f"wrote {path}", flush=True)
    return 0
