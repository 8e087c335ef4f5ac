"""Findings from a gate's two results files, and the files that show them.

`compare_results` (the gate's paired rounds) and `compare_toolchain_results` (a toolchain A/B's
process means) turn base.jsonl and head.jsonl into findings (perf/latency/analysis.py);
`write_outputs` writes findings.json, report.md and ratios.png, each case against its own
thresholds (`threshold_lines`), each head time against the GPU's limits (the meta's `roofline`
section, perf/roofline.py: kept in findings.json, so `perf report` and the PR comment show it).
`perf compare` applies the statistics to two results files of
separate processes (unpaired); `perf report` renders a findings file again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter

from perf import files, roofline
from perf import results as results_mod
from perf import vendor as vendor_mod
from perf.errors import ConfigError
from perf.latency import analysis
from perf.latency.ledger import OUTPUTS
from perf.latency.plot import plot_ratios
from perf.report import publish, render_markdown
from perf.thresholds import Thresholds, load_thresholds
from perf.verdicts import FINDINGS_VERSION, Finding, Verdict, exit_code, load_findings


def compare_results(base: results_mod.Results, head: results_mod.Results, th: Thresholds, vendor: str,
                    calibration=None, processes: set[str] | None = None, keys=None) -> list[Finding]:
    """Findings of a gate's results (paired rounds of the given processes)."""
    return analysis.paired_findings(base, head, th, vendor, calibration, processes, keys)


def compare_toolchain_results(base: results_mod.Results, head: results_mod.Results, th: Thresholds,
                              vendor: str, calibration=None, processes: set[str] | None = None,
                              keys=None) -> list[Finding]:
    """Findings of a toolchain A/B (module docstring): unpaired, process means, no calibration."""
    return analysis.unpaired_findings(base, head, th, vendor, processes, keys, by_process=True)


def dedupe_skips(findings: list[Finding]) -> tuple[list[Finding], list[str]]:
    """Fold 'skipped on both sides' rows into one note per (variant, reason)."""
    kept, folded = [], Counter()
    for f in findings:
        if f.verdict is Verdict.OK and f.note.startswith("skipped on both sides"):
            folded[(f.variant, f.note.removeprefix("skipped on both sides: "))] += 1
        else:
            kept.append(f)
    notes = [f"{v}: {n} scenario/metric pairs skipped on both sides ({why})"
             for (v, why), n in sorted(folded.items())]
    return kept, notes


def write_outputs(out_dir: str, findings: list[Finding], title: str, notes: list[str], meta: dict,
                  thresholds: dict | None = None, appendix: str = "") -> str:
    """findings.json, report.md and ratios.png (each case against its own thresholds; an
    earlier ratios.png is removed when nothing has a ratio to draw); `appendix`: Markdown after
    the findings (the red cases' why section, perf/why.py)."""
    shown, skip_notes = dedupe_skips(findings)
    notes = notes + skip_notes
    plot = os.path.join(out_dir, "ratios.png")
    try:
        drawn = plot_ratios(shown, plot, title, thresholds or {})
    except ImportError:
        drawn = None
        notes.append("matplotlib missing: no plot")
    if drawn is None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(plot)
    hardware = roofline.read_section(meta.get("roofline"), os.path.join(out_dir, "findings.json"))
    md = render_markdown(shown, title, notes, hardware) + (f"\n{appendix}" if appendix else "")
    files.write_json(os.path.join(out_dir, "findings.json"), {
        "schema_version": FINDINGS_VERSION, "kind": "findings", "title": title, "notes": notes,
        **meta, "findings": [f.to_dict() for f in findings]})
    files.write_text(os.path.join(out_dir, "report.md"), md)
    return md


def written(out_dir: str, names: tuple[str, ...]) -> str:
    """The names of `names` that exist in `out_dir`, for the line that points at them."""
    return ", ".join(n for n in names if os.path.exists(os.path.join(out_dir, n)))


# --- commands ------------------------------------------------------------------------------

def _vendor_for(res: results_mod.Results, given: str | None) -> str:
    vendor = given or res.environment.get("vendor")
    if given is not None:
        vendor_mod.check_name(given)
    elif vendor not in vendor_mod.VENDORS:
        raise ConfigError(f"{res.path}: measured on {vendor!r} (Triton's interpreter); pass --vendor "
                          f"nvidia|amd to choose which thresholds apply")
    return vendor


def compare_command(args: argparse.Namespace) -> int:
    if args.out:
        files.check_output(args.out, "--out", directory=True)
    th = load_thresholds(args.thresholds)
    base, head = results_mod.load(args.base), results_mod.load(args.head)
    results_mod.check_comparable(base, head)
    vendor = _vendor_for(head, args.vendor)
    findings = analysis.unpaired_findings(base, head, th, vendor)
    title = f"Latency: {args.head} vs {args.base} on {head.environment.get('gpu')} ({vendor})"
    notes = ["unpaired comparison of two processes: an offset between the processes is indistinguishable "
             "from a change; `python -m perf gate` measures both sides in the same processes"]
    meta = {"vendor": vendor, "gpu": head.environment.get("gpu"),
            "base": {"results": args.base, "commit": base.environment.get("commit")},
            "head": {"results": args.head, "commit": head.environment.get("commit")},
            "roofline": roofline.section(head)}
    shown, skip_notes = dedupe_skips(findings)
    md = write_outputs(args.out, findings, title, notes, meta, threshold_lines(th, vendor, findings)) \
        if args.out else render_markdown(shown, title, notes + skip_notes,
                                         roofline.read_section(meta["roofline"], args.head))
    publish(md)
    code = exit_code(findings, f"{args.head} against {args.base}"
                     + (f" (report: {os.path.join(args.out, 'report.md')})" if args.out else ""))
    if args.out:
        print(f"wrote {written(args.out, OUTPUTS)} in {args.out}", file=sys.stderr)
    return code


def threshold_lines(th: Thresholds, vendor: str, findings: list[Finding], calibration=None,
                     processes: int = 1, rounds: int = 1) -> dict:
    """(variant, scenario, metric) -> (warn, fail) of every finding with a ratio, overrides
    and calibration included: what the plot draws per case."""
    out = {}
    for f in findings:
        if f.ratio is not None:
            key = (f.variant, f.scenario, f.metric)
            t, _, _ = analysis.threshold_for(th, vendor, calibration, key, processes, rounds)
            out[key] = (t.warn, t.fail)
    return out


def report_command(args: argparse.Namespace) -> int:
    if args.plot:
        files.check_output(args.plot, "--plot")
    data, findings = load_findings(args.findings)
    lines = plot_thresholds(data, args.findings)
    shown, _ = dedupe_skips(findings)
    hardware = roofline.read_section(data.get("roofline"), args.findings)
    publish(render_markdown(shown, str(data.get("title", "findings")), data.get("notes") or [], hardware))
    code = exit_code(findings, args.findings)
    if args.plot:
        if plot_ratios(shown, args.plot, str(data.get("title", "")), lines):
            print(f"plot: {args.plot}")
        else:
            print(f"no plot: no finding of {args.findings} has a ratio to draw", file=sys.stderr)
    return code


def plot_thresholds(doc: dict, path: str) -> dict:
    """A findings file's `thresholds` ("variant scenario metric" -> [warn, fail]) as the plot takes
    them; ConfigError naming the entry that is not one."""
    table = doc.get("thresholds") or {}
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: `thresholds` is a JSON {type(table).__name__}, expected an object")
    out = {}
    for k, v in table.items():
        key = tuple(k.split(" ", 2))
        numbers = isinstance(v, list) and len(v) == 2 and all(
            x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0) for x in v)
        if len(key) != 3 or not numbers:
            raise ConfigError(f"{path}: thresholds[{k[:60]!r}] is {str(v)[:40]}, expected \"variant scenario "
                              f"metric\": [warn, fail]; pass the findings.json a gate wrote")
        out[key] = tuple(v)
    return out
