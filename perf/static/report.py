"""What the static gate shows: one screen in the terminal, the full report in report.md.

The terminal gets the verdict counts, the findings that are not ok (at most
`TERMINAL_FINDINGS`, worst first), the variants x targets summary of the head and where
the full report lies. report.md (also the GitHub job summary) holds every finding and
every compiled specialization; static.jsonl holds the head's metrics in the shared
results schema (perf/results.py).
"""

from __future__ import annotations

import os

from perf.static import metrics as sm
from perf.vendor import SPILL_METRICS
from perf.verdicts import Finding, Verdict, counts, worst_first

TERMINAL_FINDINGS = 20  # rows of findings the terminal shows; the rest are in report.md (fits a screen)
TITLE = "Static gate: registers, spills, wgmma serialization, shared memory/LDS, occupancy"
SUMMARY_COLUMNS = ("variant", "target", "specializations", "max registers", "spilling", "wgmma serialized",
                   "max shared/LDS", "min occupancy", "compile CPU s (sum)", "not compiled")


# ------------------------------------------------------------------------- rows


def compile_rows(doc: dict) -> list[dict]:
    """One row per (variant, kernel, target, specialization), with the scenarios using it."""
    rows: dict[tuple, dict] = {}
    for e in doc["entries"]:
        if e["status"] == "skip":
            continue
        k = (e["variant"], e["kernel"], e["target"], e.get("key") or e.get("error"))
        row = rows.setdefault(k, {**e, "scenarios": []})
        row["scenarios"].append(e["scenario"])
    return sorted(rows.values(), key=lambda r: (r["variant"], r["kernel"], r["target"], r["scenarios"][0]))


def compile_seconds(metrics: dict) -> float:
    """A specialization's cold compile cost: CPU seconds (wall seconds in documents from before
    CPU time was recorded)."""
    return metrics.get("compile_cpu_s", metrics.get("compile_time_s", 0.0))


def compile_times(doc: dict) -> dict[tuple[str, str], dict]:
    """(variant, target) -> {"cpu_s", "count", "cached"}: the cold compile CPU seconds of the
    variant's distinct specializations on the target that compiled, how many, and how many of
    them were read from the metrics cache (timed in an earlier run) rather than compiled now."""
    out: dict[tuple[str, str], dict] = {}
    for r in compile_rows(doc):
        if r["status"] != "ok":
            continue
        t = out.setdefault((r["variant"], r["target"]), {"cpu_s": 0.0, "count": 0, "cached": 0})
        t["cpu_s"] = round(t["cpu_s"] + compile_seconds(r["metrics"]), 3)
        t["count"] += 1
        t["cached"] += bool(r.get("cached"))
    return out


def summary_rows(doc: dict) -> list[dict]:
    """Variants x targets: specializations, worst registers/spills/shared/occupancy, serialized
    wgmma (NVIDIA; None elsewhere), compile time."""
    rows: dict[tuple, dict] = {}
    for r in compile_rows(doc):
        s = rows.setdefault((r["variant"], r["target"]), {
            "variant": r["variant"], "target": r["target"], "vendor": r["vendor"], "kernels": 0,
            "registers": 0, "spilling": 0, "serialized": None, "shared": 0, "occupancy": None,
            "compile_s": 0.0, "failed": 0})
        s["kernels"] += 1
        if r["status"] != "ok":
            s["failed"] += 1
            continue
        m = r["metrics"]
        s["registers"] = max(s["registers"], m["registers"])
        s["spilling"] += any(m.get(k) for k in SPILL_METRICS)
        if "wgmma_serialized" in m:  # NVIDIA only
            s["serialized"] = (s["serialized"] or 0) + m["wgmma_serialized"]
        s["shared"] = max(s["shared"], m["shared_memory"])
        s["occupancy"] = m["occupancy"] if s["occupancy"] is None else min(s["occupancy"], m["occupancy"])
        s["compile_s"] += compile_seconds(m)
    return list(rows.values())


def _summary_cells(s: dict) -> list[str]:
    occupancy = "–" if s["occupancy"] is None else f"{s['occupancy']} {sm.occupancy_unit(s['vendor'])}"
    serialized = "–" if s["serialized"] is None else str(s["serialized"])
    return [s["variant"], s["target"], str(s["kernels"]), str(s["registers"]), str(s["spilling"]), serialized,
            f"{s['shared'] / 1024:.1f} KiB", occupancy, f"{s['compile_s']:.1f}", str(s["failed"])]


def _short(entry: dict) -> dict[str, str]:
    m = entry.get("metrics") or {}
    if entry["status"] != "ok":
        return {"status": entry["status"], "note": entry.get("error", "")[:80]}
    if entry["vendor"] == "nvidia":
        spills = f"{m['spill_stores']}/{m['spill_loads']} B"
        if m.get("wgmma_serialized"):
            spills += ", wgmma serialized"
    else:
        spills = f"{m['vgpr_spills']}v/{m['sgpr_spills']}s"
    regs = str(m["registers"])
    if entry["vendor"] == "amd":
        regs += f" ({m['agprs']}a) {m['sgprs']}s"
    return {"status": "ok", "registers": regs, "spills": spills,
            "shared": f"{m['shared_memory'] / 1024:.1f} KiB",
            "occupancy": f"{m['occupancy']} {sm.occupancy_unit(entry['vendor'])}",
            "time": f"{compile_seconds(m):.2f}" + ("*" if entry.get("cached") else "")}


def _scenario_label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1})"


def cannot_compile_line(target: str, triton_version: str, why: str) -> str:
    """What the findings, the notes and the results say of a target Triton cannot compile for."""
    return f"target {target}: Triton {triton_version} cannot compile for it: {why}"


# ------------------------------------------------------------------------- terminal


def console(stderr: bool = False):
    from rich.console import Console

    c = Console(stderr=stderr)
    if not c.is_terminal:  # CI logs: wide enough that the table's rows stay on one line
        c.width = max(160, int(os.environ.get("COLUMNS", "0") or 0))
    return c


def summary_table(doc: dict, of: str = "the head"):
    from rich.table import Table

    table = Table(title=f"Static metrics of {of}, variants x targets (Triton {doc['triton']})")
    for col in SUMMARY_COLUMNS:
        table.add_column(col, overflow="fold")
    for s in summary_rows(doc):
        cells = _summary_cells(s)
        if s["spilling"] or s["serialized"] or s["failed"]:
            cells = [f"[red]{c}[/]" for c in cells]
        table.add_row(*cells)
    return table


def status_word(findings: list[Finding]) -> str:
    n = counts(findings)
    return "FAIL" if n["fail"] else ("pass with warnings" if n["warn"] else "pass")


def _value(x) -> str:
    if x is None:
        return "–"
    return f"{x:g}" if isinstance(x, float) else str(x)


def terminal(findings: list[Finding], head_doc: dict, first_line: str, notes: list[str],
             paths: list[str], limit: int = TERMINAL_FINDINGS) -> None:
    """One screen: what happened, the counts, the findings that are not ok, the summary, where
    the rest is."""
    from rich.markup import escape
    from rich.table import Table

    out = console()

    def line(text: str) -> None:  # plain text, never broken inside a path
        out.print(escape(text), highlight=False, soft_wrap=True)

    n = counts(findings)
    line(first_line)
    order = (Verdict.FAIL, Verdict.WARN, Verdict.OK, Verdict.IMPROVED)
    line(f"static gate: {status_word(findings)}: " + ", ".join(f"{n[v.value]} {v.value}" for v in order))
    shown = [f for f in worst_first(findings) if f.verdict is not Verdict.OK]
    if shown and not out.is_terminal:  # CI logs: one greppable line per finding, never wrapped
        for f in shown[:limit]:
            line(f"{f.verdict.value.upper()} {f.target} {f.variant} {f.scenario} {f.metric}: "
                 f"{_value(f.base)} -> {_value(f.head)}" + (f"; {f.note[:160]}" if f.note else ""))
        if len(shown) > limit:
            line(f"... and {len(shown) - limit} more in {paths[0]}")
    elif shown:
        table = Table(title="findings that are not ok, worst first")
        for col in ("verdict", "target", "variant", "scenario", "kernel/metric", "base", "head", "note"):
            table.add_column(col, overflow="fold")
        style = {Verdict.FAIL: "bold red", Verdict.WARN: "yellow", Verdict.IMPROVED: "green"}
        for f in shown[:limit]:
            table.add_row(f"[{style[f.verdict]}]{f.verdict.value}[/]",
                          *(escape(str(c)) for c in (f.target, f.variant, f.scenario, f.metric,
                                                     _value(f.base), _value(f.head), f.note[:100])))
        out.print(table)
        if len(shown) > limit:
            line(f"... and {len(shown) - limit} more in {paths[0]}")
    out.print(summary_table(head_doc))
    for note in notes:
        line(note)
    line("full report: " + ", ".join(paths))


# ------------------------------------------------------------------------- Markdown


def _markdown_table(doc: dict) -> list[str]:
    lines = ["| variant | kernel | target | scenarios | registers | spills | shared/LDS | occupancy | "
             "compile CPU s | status |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in compile_rows(doc):
        s = _short(r)
        cells = [r["variant"], r["kernel"], r["target"], _scenario_label(r["scenarios"]),
                 *(s.get(c, "") for c in ("registers", "spills", "shared", "occupancy", "time")),
                 s["status"] if s["status"] == "ok" else f"{s['status']}: {s['note']}"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


def markdown(findings: list[Finding], head_doc: dict, notes: list[str], title: str = TITLE) -> str:
    """report.md: every finding (perf.report's layout), the summary and every specialization."""
    from perf.report import render_markdown

    text = render_markdown(findings, title, notes)
    skipped = sorted({(e["variant"], e["error"]) for e in head_doc["entries"] if e["status"] == "skip"})
    lines = ["", "### Variants x targets (head)", "", "| " + " | ".join(SUMMARY_COLUMNS) + " |",
             "|" + "---|" * len(SUMMARY_COLUMNS),
             *("| " + " | ".join(_summary_cells(s)) + " |" for s in summary_rows(head_doc)),
             "", "registers: NVIDIA per thread, AMD VGPRs incl. AGPRs; spilling: specializations with any "
             "spill; wgmma serialized: specializations whose wgmma ptxas serialized (NVIDIA Hopper); "
             "occupancy: warps/SM (NVIDIA), waves/SIMD (AMD).",
             "", "<details><summary>Compiled kernels of the head (registers: NVIDIA per thread; AMD "
             "VGPRs incl. AGPRs, then SGPRs; spills: NVIDIA store/load bytes, AMD VGPR/SGPR counts; "
             "occupancy: warps/SM or waves/SIMD; * = from cache)</summary>", "",
             *_markdown_table(head_doc), ""]
    if skipped:
        lines += [f"- skipped: {v}: {why}" for v, why in skipped]
    lines += ["", "</details>", ""]
    return text + "\n".join(lines)


def step_summary(text: str) -> None:
    """Append the report to the GitHub job summary when running in Actions (not to the log)."""
    from perf.report import step_summary as append

    append(text + "\n")


# ------------------------------------------------------------------------- results records


def write_results(path: str, doc: dict, root: str, environment_extra: dict | None = None) -> None:
    """The head's metrics in the shared results schema (perf/results.py), one record per metric,
    and one per variant and target with its cold compile CPU seconds (perf.results.compile_time_metric:
    what the nightly's history plots); `environment_extra` overrides what this process would
    record (the head's Triton of a toolchain A/B)."""
    from perf.measure.timing import Samples
    from perf.results import ResultsWriter, environment

    header = {"environment": {**environment(root), "gate": "static", "suite": doc["suite"],
                              "compile_targets": [t["name"] for t in doc["targets"]],
                              **(environment_extra or {})}}
    with ResultsWriter(path, header, resume=False) as w:
        for target, why in doc.get("cannot_compile", {}).items():
            for variant in doc["variants"]:  # every scenario of the suite ("*"): nothing compiled there
                w.skip(variant=variant, scenario="*", kind="error",
                       reason=cannot_compile_line(target, doc["triton"], why))
        for e in doc["entries"]:
            if e["status"] == "skip":
                w.skip(variant=e["variant"], scenario=e["scenario"], reason=f"{e['target']}: {e['error']}")
            elif e["status"] != "ok":
                w.skip(variant=e["variant"], scenario=e["scenario"], kind="error",
                       reason=f"{e['target']} {e['kernel']}: {e['status']}: {e['error']}")
            else:
                for metric, value in e["metrics"].items():
                    w.record(variant=e["variant"], scenario=e["scenario"],
                             metric=f"{e['target']}/{e['kernel']}/{metric}", repeat=e["occurrence"],
                             samples=Samples((float(value),), clock="static"), config=[e["config"]],
                             digest=e["batch_digest"], compile_key=e["key"], gate="static",
                             target=e["target"], kernel=e["kernel"],
                             unit=sm.UNITS.get(metric, sm.occupancy_unit(e["vendor"])))
        record_compile_times(w, doc)


def record_compile_times(w, doc: dict) -> int:
    """One record per variant and target of `doc` into the open ResultsWriter `w`: its cold
    compile CPU seconds (perf.results.compile_time_metric, scenario "*"), what write_results and
    the nightly (perf/nightly/compiletime.py) record; returns how many."""
    from perf.measure.timing import Samples
    from perf.results import compile_time_metric

    times = sorted(compile_times(doc).items())
    for (variant, target), t in times:
        w.record(variant=variant, scenario="*", metric=compile_time_metric(target), repeat=0,
                 samples=Samples((float(t["cpu_s"]),), clock="cpu"), config=[], digest="",
                 gate="static", target=target, unit="CPU s", specializations=t["count"],
                 cached=t["cached"])
    return len(times)
